/* SPDX-License-Identifier: MIT */
/*
 * mt_train.c — the training loop over a step backend, and the local one-device run (contract in
 * mt_train.h); core/spmd runs the same loop with its SPMD backend.
 * Batches are gathered through a per-epoch permutation into one reused buffer; the last batch of
 * an epoch may be short and its loss is divided by its own size (as Keras does).
 * Threading: caller's thread. Tests: tests/unit/test_train.c.
 */
#include "train/mt_train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "alloc/mt_alloc.h"
#include "rng/mt_rng.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ the one-device backend */

static mt_code model_step(void *ctx, const float *x, const int32_t *labels, const float *targets,
                          size_t n, uint64_t step, uint64_t first, mt_step_metrics *metrics,
                          mt_err *err)
{
    return mt_model_train_step_targets(ctx, x, labels, targets, n, n, step, first, NULL, metrics,
                                       err);
}

static mt_code model_evaluate(void *ctx, const float *x, const int32_t *labels,
                              const float *targets, size_t n, double *sums, double *hist,
                              mt_err *err)
{
    return mt_model_evaluate_sums(ctx, x, labels, targets, n, sums, hist, err);
}

/* ------------------------------------------------------------------ the loop */

void mt_train_run_bounds(const mt_job_spec *spec, const mt_train_options *opt,
                         const mt_train_start *start, int64_t per_epoch, int64_t *epochs_out,
                         int64_t *cap_out)
{
    int64_t epochs = opt && opt->epochs ? opt->epochs : spec->epochs;
    int64_t cap = opt && opt->steps ? opt->steps : spec->steps;
    int64_t e0 = start != NULL ? start->epoch : 0;

    if (opt && opt->steps && !opt->epochs)
        epochs = 0; /* --steps alone: run as many epochs as the steps need */
    if (epochs == 0)
        epochs = (cap + per_epoch - 1) / per_epoch;
    if (start != NULL && spec->steps == 0 && !(opt && (opt->steps || opt->epochs)) && e0 >= epochs)
        epochs = e0 + 1; /* resuming a finished run without a new target: one more epoch */
    if (cap == 0 || cap > epochs * per_epoch)
        cap = epochs * per_epoch;
    *epochs_out = epochs;
    *cap_out = cap;
}

void mt_train_epoch_acc_init(mt_train_epoch_acc *acc, const mt_loss_spec *ls,
                             const mt_loss_shape *out)
{
    memset(acc, 0, sizeof(*acc));
    acc->ls = ls;
    acc->out = *out;
}

void mt_train_progress_add(mt_train_progress *p, mt_train_epoch_acc *acc, int64_t step,
                           int64_t epoch_step, size_t n, const mt_step_metrics *m, double dt)
{
    acc->seconds += dt;
    acc->seen += n;
    acc->loss_sum += m->loss * (double)n;
    acc->correct += m->accuracy * (double)n;
    for (int k = 0; k < MT_LOSS_NSUMS; k++)
        acc->sums[k] += m->sums[k];
    if (acc->ls != NULL) {
        mt_loss_metrics(acc->ls, &acc->out, acc->sums, NULL, (double)acc->seen, &p->train);
        p->train.loss = acc->loss_sum / (double)acc->seen; /* the same figure as p->loss */
    }
    p->step = step;
    p->epoch_step = epoch_step;
    p->loss = acc->loss_sum / (double)acc->seen;
    p->accuracy = acc->correct / (double)acc->seen;
    p->batch_loss = m->loss;
    p->epoch_seconds = acc->seconds;
    p->step_ms = dt * 1e3;
    p->examples_per_sec = (double)acc->seen / acc->seconds;
}

void mt_train_val_init(mt_train_val_state *vs, const mt_validation_spec *v)
{
    vs->v = v;
    vs->stop_best = vs->best_best = NAN;
    vs->wait = 0;
    vs->best_step = 0;
}

static const char *mode_name(mt_monitor_mode m)
{
    return m == MT_MONITOR_MAX ? "max" : "min";
}

/* "%.17g" of x into b, or "null" for NaN (none yet) */
static const char *num_text(char *b, size_t cap, double x)
{
    if (isnan(x) || isinf(x))
        snprintf(b, cap, "null");
    else
        snprintf(b, cap, "%.17g", x);
    return b;
}

void mt_train_val_text(const mt_train_val_state *vs, char *buf, size_t cap)
{
    const mt_validation_spec *v = vs->v;
    char b[32], sb[32];

    if (cap == 0)
        return;
    buf[0] = '\0';
    if (v == NULL || (!v->keep_best && !v->early_stopping))
        return;
    snprintf(buf, cap,
             "{\"best_monitor\":\"%s\",\"best_mode\":\"%s\",\"best\":%s,\"best_step\":%lld,"
             "\"stop_monitor\":\"%s\",\"stop_mode\":\"%s\",\"stop_best\":%s,\"wait\":%lld}",
             v->keep_best ? v->best.name : "", mode_name(v->best.mode),
             num_text(b, sizeof(b), vs->best_best), (long long)vs->best_step,
             v->early_stopping ? v->stop.name : "", mode_name(v->stop.mode),
             num_text(sb, sizeof(sb), vs->stop_best), (long long)vs->wait);
}

/* Whether the object's "<pre>_monitor" and "<pre>_mode" are m's. */
static bool same_monitor(const cJSON *o, const char *pre, const mt_monitor *m)
{
    char k[32];
    const cJSON *name, *mode;
    snprintf(k, sizeof(k), "%s_monitor", pre);
    name = cJSON_GetObjectItemCaseSensitive(o, k);
    snprintf(k, sizeof(k), "%s_mode", pre);
    mode = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(name) && cJSON_IsString(mode) &&
           strcmp(name->valuestring, m->name) == 0 &&
           strcmp(mode->valuestring, mode_name(m->mode)) == 0;
}

static double num_of(const cJSON *o, const char *key)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(n) ? n->valuedouble : NAN;
}

bool mt_train_val_restore(mt_train_val_state *vs, const char *text)
{
    const mt_validation_spec *v = vs->v;
    cJSON *o = text != NULL && text[0] != '\0' ? cJSON_Parse(text) : NULL;

    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return false;
    }
    if (v->keep_best && same_monitor(o, "best", &v->best)) {
        double step = num_of(o, "best_step");
        vs->best_best = num_of(o, "best");
        vs->best_step = isnan(vs->best_best) || !(step >= 0 && step < 9e18) ? 0 : (int64_t)step;
    }
    if (v->early_stopping && same_monitor(o, "stop", &v->stop)) {
        double wait = num_of(o, "wait");
        vs->stop_best = num_of(o, "stop_best");
        vs->wait = wait >= 0 && wait < 9e18 ? (int64_t)wait : 0;
    }
    cJSON_Delete(o);
    return true;
}

/* The bookkeeping to the backend (mt_train_backend.val_state). */
static void val_state_out(const mt_train_backend *be, const mt_train_val_state *vs)
{
    char text[MT_TRAIN_VAL_TEXT];
    if (be->val_state == NULL)
        return;
    mt_train_val_text(vs, text, sizeof(text));
    be->val_state(be->ctx, text);
}

bool mt_train_val_due(const mt_train_val_state *vs, int64_t step, bool epoch_end)
{
    if (!vs->v->enabled)
        return false;
    return vs->v->every_steps > 0 ? step % vs->v->every_steps == 0 : epoch_end;
}

void mt_train_val_update(mt_train_val_state *vs, const mt_metrics *train, const mt_metrics *val,
                         bool *best, bool *stop)
{
    const mt_validation_spec *v = vs->v;
    double x;

    *best = *stop = false;
    if (v->keep_best && mt_loss_monitor_value(&v->best, train, val, &x) &&
        mt_loss_monitor_improves(&v->best, x, vs->best_best)) {
        vs->best_best = x;
        *best = true;
    }
    if (!v->early_stopping || !mt_loss_monitor_value(&v->stop, train, val, &x))
        return;
    if (mt_loss_monitor_improves(&v->stop, x, vs->stop_best)) {
        vs->stop_best = x;
        vs->wait = 0;
        return;
    }
    vs->wait++;
    *stop = vs->wait >= v->patience;
}

mt_code mt_train_split_validation(const mt_idx_set *all, double split, mt_idx_set *train,
                                  mt_idx_set *val, mt_err *err)
{
    size_t nv = (size_t)ceil(split * (double)all->n), ex = all->h * all->w * all->c;
    size_t yd = all->y_dim ? all->y_dim : 1;

    if (nv == 0 || nv >= all->n)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "validation.split: %g of %zu examples leaves %s empty", split, all->n,
                          nv == 0 ? "the validation set" : "the training set");
    *train = *all;
    train->n = all->n - nv;
    *val = *all;
    val->n = nv;
    val->images = all->images + train->n * ex;
    val->labels = all->labels + train->n * yd;
    val->targets = all->targets != NULL ? all->targets + train->n * all->t_dim : NULL;
    return MT_OK;
}

/* Evaluate a whole split: loss and metric means into *out. */
static mt_code evaluate_set(const mt_train_backend *be, const mt_loss_spec *ls,
                            const mt_idx_set *set, mt_metrics *out, mt_err *err)
{
    double sums[MT_LOSS_NSUMS] = {0}, hist[2 * MT_LOSS_AUC_BINS];
    bool auc = (ls->metrics & (1u << MT_METRIC_AUC)) != 0;
    mt_code rc;

    memset(hist, 0, sizeof(hist));
    rc = be->evaluate(be->ctx, set->images, set->targets != NULL ? NULL : set->labels, set->targets,
                      set->n, sums, auc ? hist : NULL, err);
    if (rc == MT_OK)
        mt_loss_metrics(ls, &be->out, sums, auc ? hist : NULL, (double)set->n, out);
    return rc;
}

mt_code mt_train_loop(const mt_job_spec *spec, const mt_train_options *opt, const mt_idx_set *train,
                      const mt_idx_set *val, const mt_idx_set *test, const mt_train_backend *be,
                      const mt_train_start *start, mt_train_progress_fn progress, void *ctx,
                      mt_train_result *res, mt_err *err)
{
    size_t bs = spec->batch_size, ex = train->h * train->w * train->c;
    size_t yd = train->y_dim ? train->y_dim : 1, td = train->t_dim;
    float *tb = NULL;
    mt_train_val_state vs;
    bool stop = false;
    int64_t epochs = opt && opt->epochs ? opt->epochs : spec->epochs;
    int64_t cap = opt && opt->steps ? opt->steps : spec->steps;
    int64_t per_epoch, step = start != NULL ? start->step : 0;
    int64_t e0 = start != NULL ? start->epoch : 0;
    int64_t s0 = start != NULL ? (int64_t)(start->input_position / spec->batch_size) : 0;
    uint32_t *perm = NULL;
    float *xb = NULL;
    int32_t *yb = NULL;
    double train_s = 0.0;
    size_t train_examples = 0;
    mt_code rc;

    memset(res, 0, sizeof(*res));
    if (train->n == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: the training set is empty");
    per_epoch = (int64_t)((train->n + bs - 1) / bs);
    mt_train_run_bounds(spec, opt, start, per_epoch, &epochs, &cap);
    if (bs > train->n)
        bs = train->n;
    mt_train_val_init(&vs, &spec->validation);
    if (start != NULL && mt_train_val_restore(&vs, start->val) && vs.best_step > 0) {
        res->best_step = vs.best_step; /* the run it continues found it */
        res->best_value = vs.best_best;
    }
    val_state_out(be, &vs);
    perm = mt_malloc(train->n * sizeof(*perm));
    xb = mt_malloc(bs * ex * sizeof(float));
    yb = mt_malloc(bs * yd * sizeof(int32_t));
    if (td > 0)
        tb = mt_malloc(bs * td * sizeof(float));
    if (perm == NULL || xb == NULL || yb == NULL || (td > 0 && tb == NULL)) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "training buffers: out of memory");
        goto done;
    }
    for (int64_t e = e0; e < epochs && step < cap && !stop; e++) {
        mt_train_progress p = {.event = MT_TRAIN_STEP,
                               .epoch = e + 1,
                               .epochs = epochs,
                               .step = step,
                               .epoch_steps = per_epoch};
        mt_train_epoch_acc acc;
        int64_t s_first = e == e0 ? s0 : 0;
        mt_train_epoch_acc_init(&acc, &spec->loss, &be->out);
        if (cap - step < per_epoch - s_first)
            p.epoch_steps = s_first + (cap - step);
        mt_rng_permutation(perm, train->n, spec->seed, (uint64_t)e);
        for (int64_t s = s_first; s < p.epoch_steps; s++) {
            size_t first = (size_t)s * spec->batch_size;
            size_t b = train->n - first < bs ? train->n - first : bs;
            mt_step_metrics sm;
            double t0 = now_s(), dt;
            bool end, best = false;
            for (size_t i = 0; i < b; i++) {
                size_t k = perm[first + i];
                memcpy(xb + i * ex, train->images + k * ex, ex * sizeof(float));
                memcpy(yb + i * yd, train->labels + k * yd, yd * sizeof(int32_t));
                if (td > 0)
                    memcpy(tb + i * td, train->targets + k * td, td * sizeof(float));
            }
            rc = be->step(be->ctx, xb, td > 0 ? NULL : yb, tb, b, (uint64_t)step, first, &sm, err);
            if (rc != MT_OK)
                goto done;
            dt = now_s() - t0;
            step++;
            mt_train_progress_add(&p, &acc, step, s + 1, b, &sm, dt);
            end = s + 1 == per_epoch;
            p.has_val = false;
            if (val != NULL && val->n > 0 &&
                mt_train_val_due(&vs, step, end || s + 1 == p.epoch_steps)) {
                if ((rc = evaluate_set(be, &spec->loss, val, &p.val, err)) != MT_OK)
                    goto done;
                p.has_val = res->has_val = true;
                res->val = p.val;
                mt_train_val_update(&vs, &p.train, &p.val, &best, &stop);
                if (best) {
                    res->best_step = vs.best_step = step;
                    res->best_value = vs.best_best;
                }
                val_state_out(be, &vs);
                p.stopping = stop;
            }
            if (be->after_step != NULL &&
                (rc = be->after_step(be->ctx, step, end ? e + 1 : e, end ? 0 : first + b,
                                     step >= cap || stop, best, err)) != MT_OK)
                goto done;
            if (progress != NULL && (rc = progress(ctx, &p)) != MT_OK) {
                mt_err_set(err, rc, "training stopped at step %lld", (long long)step);
                goto done;
            }
            if (stop)
                break;
        }
        train_s += acc.seconds;
        train_examples += acc.seen;
        if (test != NULL && test->n > 0) {
            if ((rc = evaluate_set(be, &spec->loss, test, &p.test, err)) != MT_OK)
                goto done;
            p.has_test = res->has_test = true;
            res->test = p.test;
            p.test_loss = p.test.loss;
            p.test_accuracy = p.test.value[MT_METRIC_ACCURACY];
        }
        p.has_val = res->has_val;
        p.val = res->val;
        p.event = MT_TRAIN_EPOCH_END;
        res->epochs = e + 1;
        res->test_loss = p.test_loss;
        res->test_accuracy = p.test_accuracy;
        if (progress != NULL && (rc = progress(ctx, &p)) != MT_OK) {
            mt_err_set(err, rc, "training stopped after epoch %lld", (long long)(e + 1));
            goto done;
        }
    }
    res->steps = step;
    res->stopped_early = stop;
    res->examples_per_sec = train_s > 0 ? (double)train_examples / train_s : 0.0;
    rc = MT_OK;
done:
    mt_free(perm);
    mt_free(xb);
    mt_free(yb);
    mt_free(tb);
    return rc;
}

mt_code mt_train_run_data(const mt_job_spec *spec, const mt_train_options *opt,
                          const mt_idx_set *train, const mt_idx_set *test,
                          mt_train_progress_fn progress, void *ctx, mt_train_result *res,
                          mt_err *err)
{
    size_t shape[3] = {train->h, train->w, train->c};
    size_t bs;
    mt_train_backend be = {NULL, model_step, model_evaluate, NULL, {1, 1}, NULL};
    mt_idx_set tr = *train, va;
    mt_model *m = NULL;
    mt_code rc;

    memset(res, 0, sizeof(*res));
    memset(&va, 0, sizeof(va));
    if (train->n == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: the training set is empty");
    if (spec->validation.split > 0 &&
        (rc = mt_train_split_validation(train, spec->validation.split, &tr, &va, err)) != MT_OK)
        return rc;
    train = &tr;
    bs = spec->batch_size < train->n ? spec->batch_size : train->n;
    if (test != NULL && test->n > 0 &&
        (test->h != train->h || test->w != train->w || test->c != train->c))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "dataset: test examples (%zux%zux%zu) differ from training examples "
                          "(%zux%zux%zu)",
                          test->h, test->w, test->c, train->h, train->w, train->c);
    rc = mt_model_new(spec, 3, shape, bs, &m, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_model_check_data(m, train->y_dim ? train->y_dim : 1, train->t_dim, err);
    if (rc != MT_OK)
        goto done;
    for (size_t i = 0;
         train->targets == NULL && spec->loss.kind == MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY &&
         i < train->n * (train->y_dim ? train->y_dim : 1);
         i++) {
        if ((size_t)train->labels[i] >= mt_model_num_classes(m)) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                            "model.layers[%d]: %zu outputs but the dataset has label %d",
                            spec->n_layers - 1, mt_model_num_classes(m), (int)train->labels[i]);
            goto done;
        }
    }
    be.ctx = m;
    be.out = mt_model_output_shape(m);
    rc = mt_train_loop(spec, opt, train, va.n > 0 ? &va : NULL, test, &be, NULL, progress, ctx, res,
                       err);
done:
    mt_model_free(m);
    return rc;
}

mt_code mt_train_run(const mt_job_spec *spec, const mt_train_options *opt,
                     mt_train_progress_fn progress, void *ctx, mt_train_result *res, mt_err *err)
{
    mt_idx_set train, test;
    const mt_dataset_spec *d = &spec->dataset;
    mt_code rc;

    memset(res, 0, sizeof(*res));
    rc = mt_idx_set_load(d->train_images, d->train_labels, 0, &train, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_idx_set_load(d->test_images, d->test_labels, 0, &test, err);
    if (rc != MT_OK) {
        mt_idx_set_fini(&train);
        return rc;
    }
    rc = mt_train_run_data(spec, opt, &train, &test, progress, ctx, res, err);
    mt_idx_set_fini(&train);
    mt_idx_set_fini(&test);
    return rc;
}
