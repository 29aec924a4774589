/* SPDX-License-Identifier: MIT */
/*
 * mt_optim.h — the optimizers and learning-rate schedules: the one update rule both engines
 * (core/model, core/spmd) apply to each parameter (or each device's shard of it).
 *
 * Keras semantics and defaults (docs/job-spec.md): SGD with momentum and Nesterov; Adam; AdamW
 * (decoupled weight decay: w -= lr·wd·w, then the Adam step); RMSprop (eps inside the square
 * root, as Keras 3); Adagrad (accumulator starting at initial_accumulator_value). The learning
 * rate of update t is the schedule's (constant, step, exponential, cosine) after an optional
 * linear warmup; a constant schedule without warmup gives the configured rate exactly, so those
 * runs keep their bits. The schedule is a function of the update count alone, which checkpoints
 * hold, so a resume continues it exactly.
 * Threading: pure functions; any thread. Tests: tests/unit/test_optim.c.
 */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "model/mt_model.h"

/* Learning rate of update number t (1-based) under o's schedule. */
float mt_optim_lr(const mt_optimizer_spec *o, int64_t t);

/* Optimizer slots a trainable parameter needs (0, 1 or 2), and their checkpoint names. */
int mt_optim_slots(const mt_optimizer_spec *o);
const char *mt_optim_slot_name(const mt_optimizer_spec *o, int k);

/* Initial slot values of n elements (zeros; Adagrad's accumulator its initial value). */
void mt_optim_init_slots(const mt_optimizer_spec *o, float *slot1, float *slot2, size_t n);

/*
 * Update number t (1-based) of n elements: w from its gradient g (multiplied by scale first
 * when scale != 1: global-norm clipping) and its slots (as mt_optim_slots says; others NULL).
 * g may be scaled in place.
 */
void mt_optim_apply(const mt_optimizer_spec *o, int64_t t, float scale, float *w, float *slot1,
                    float *slot2, float *g, size_t n);

/* The factor global-norm clipping multiplies every gradient by, from the squared global norm:
 * min(1, clip / norm); 1 when o has no clipping. */
float mt_optim_clip_scale(const mt_optimizer_spec *o, double norm_sq);

#endif
