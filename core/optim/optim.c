/* SPDX-License-Identifier: MIT */
/*
 * optim.c — optimizers and schedules (contract in mt_optim.h). SGD and Adam call the kernels of
 * core/tensor (their vectorised loops); the others are plain loops.
 */
#include "optim/mt_optim.h"

#include <math.h>

#include "tensor/mt_tensor.h"

float mt_optim_lr(const mt_optimizer_spec *o, int64_t t)
{
    const mt_lr_schedule *s = &o->schedule;
    double base = o->learning_rate, step = (double)(t > 0 ? t - 1 : 0), f;

    if (s->kind == MT_SCHED_CONSTANT && s->warmup_steps == 0)
        return o->learning_rate; /* exactly: runs without a schedule keep their bits */
    if (step < (double)s->warmup_steps)
        return (float)(base * (step + 1.0) / (double)s->warmup_steps);
    step -= (double)s->warmup_steps;
    switch (s->kind) {
    case MT_SCHED_CONSTANT:
        return o->learning_rate;
    case MT_SCHED_STEP:
        return (float)(base * pow(s->decay_rate, floor(step / (double)s->decay_steps)));
    case MT_SCHED_EXPONENTIAL:
        f = step / (double)s->decay_steps;
        return (float)(base * pow(s->decay_rate, s->staircase ? floor(f) : f));
    case MT_SCHED_COSINE:
        f = fmin(step, (double)s->decay_steps) / (double)s->decay_steps;
        f = 0.5 * (1.0 + cos(M_PI * f));
        return (float)(base * ((1.0 - s->alpha) * f + s->alpha));
    }
    return o->learning_rate;
}

int mt_optim_slots(const mt_optimizer_spec *o)
{
    switch (o->kind) {
    case MT_OPT_SGD:
        return o->momentum > 0.0f ? 1 : 0;
    case MT_OPT_ADAM:
    case MT_OPT_ADAMW:
        return 2;
    case MT_OPT_RMSPROP:
    case MT_OPT_ADAGRAD:
        return 1;
    }
    return 0;
}

const char *mt_optim_slot_name(const mt_optimizer_spec *o, int k)
{
    switch (o->kind) {
    case MT_OPT_SGD:
        return k == 0 ? "momentum" : NULL;
    case MT_OPT_ADAM:
    case MT_OPT_ADAMW:
        return k == 0 ? "adam_m" : "adam_v";
    case MT_OPT_RMSPROP:
        return k == 0 ? "rms_v" : NULL;
    case MT_OPT_ADAGRAD:
        return k == 0 ? "adagrad_acc" : NULL;
    }
    return NULL;
}

void mt_optim_init_slots(const mt_optimizer_spec *o, float *slot1, float *slot2, size_t n)
{
    float v = o->kind == MT_OPT_ADAGRAD ? o->initial_accumulator : 0.0f;
    for (size_t i = 0; slot1 != NULL && i < n; i++)
        slot1[i] = v;
    for (size_t i = 0; slot2 != NULL && i < n; i++)
        slot2[i] = 0.0f;
}

void mt_optim_apply(const mt_optimizer_spec *o, int64_t t, float scale, float *w, float *slot1,
                    float *slot2, float *g, size_t n)
{
    float lr = mt_optim_lr(o, t);

    if (scale != 1.0f)
        for (size_t i = 0; i < n; i++)
            g[i] *= scale;
    if ((o->kind == MT_OPT_SGD || o->kind == MT_OPT_ADAMW) && o->weight_decay > 0.0f)
        for (size_t i = 0; i < n; i++) /* decoupled: before the step, as Keras */
            w[i] -= w[i] * (lr * o->weight_decay);
    switch (o->kind) {
    case MT_OPT_SGD:
        if (o->nesterov && slot1 != NULL) {
            for (size_t i = 0; i < n; i++) { /* Keras: v = m v - lr g; w += m v - lr g */
                slot1[i] = o->momentum * slot1[i] - lr * g[i];
                w[i] += o->momentum * slot1[i] - lr * g[i];
            }
            return;
        }
        mt_sgd_update(w, slot1, g, lr, o->momentum, n);
        return;
    case MT_OPT_ADAMW:
    case MT_OPT_ADAM:
        mt_adam_update(w, slot1, slot2, g, lr, o->beta1, o->beta2, o->epsilon, t, n);
        return;
    case MT_OPT_RMSPROP:
        for (size_t i = 0; i < n; i++) {
            slot1[i] = o->rho * slot1[i] + (1.0f - o->rho) * g[i] * g[i];
            w[i] -= lr * g[i] / sqrtf(slot1[i] + o->epsilon);
        }
        return;
    case MT_OPT_ADAGRAD:
        for (size_t i = 0; i < n; i++) {
            slot1[i] += g[i] * g[i];
            w[i] -= lr * g[i] / sqrtf(slot1[i] + o->epsilon);
        }
        return;
    }
}

float mt_optim_clip_scale(const mt_optimizer_spec *o, double norm_sq)
{
    double norm = sqrt(norm_sq);
    if (o->global_clipnorm <= 0.0f || !(norm > o->global_clipnorm))
        return 1.0f;
    return (float)(o->global_clipnorm / norm);
}
