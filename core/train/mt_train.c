/* SPDX-License-Identifier: MIT */
/*
 * mt_train.c — the training loop over a step backend, and the local one-device run (contract in
 * mt_train.h); core/spmd runs the same loop with its SPMD backend.
 * Batches are gathered through a per-epoch permutation into one reused buffer; the last batch of
 * an epoch may be short and its loss is divided by its own size (as Keras does).
 * Threading: caller's thread. Tests: tests/unit/test_train.c.
 */
#include "train/mt_train.h"

#include <string.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "rng/mt_rng.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ the one-device backend */

static mt_code model_step(void *ctx, const float *x, const int32_t *labels, size_t n, uint64_t step,
                          uint64_t first, mt_step_metrics *metrics, mt_err *err)
{
    return mt_model_train_step(ctx, x, labels, n, n, step, first, NULL, metrics, err);
}

static mt_code model_evaluate(void *ctx, const float *x, const int32_t *labels, size_t n,
                              double *loss_sum, size_t *correct, mt_err *err)
{
    return mt_model_evaluate(ctx, x, labels, n, loss_sum, correct, err);
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

void mt_train_progress_add(mt_train_progress *p, mt_train_epoch_acc *acc, int64_t step,
                           int64_t epoch_step, size_t n, const mt_step_metrics *m, double dt)
{
    acc->seconds += dt;
    acc->seen += n;
    acc->loss_sum += m->loss * (double)n;
    acc->correct += m->accuracy * (double)n;
    p->step = step;
    p->epoch_step = epoch_step;
    p->loss = acc->loss_sum / (double)acc->seen;
    p->accuracy = acc->correct / (double)acc->seen;
    p->batch_loss = m->loss;
    p->epoch_seconds = acc->seconds;
    p->step_ms = dt * 1e3;
    p->examples_per_sec = (double)acc->seen / acc->seconds;
}

mt_code mt_train_loop(const mt_job_spec *spec, const mt_train_options *opt, const mt_idx_set *train,
                      const mt_idx_set *test, const mt_train_backend *be,
                      const mt_train_start *start, mt_train_progress_fn progress, void *ctx,
                      mt_train_result *res, mt_err *err)
{
    size_t bs = spec->batch_size, ex = train->h * train->w * train->c;
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
    perm = mt_malloc(train->n * sizeof(*perm));
    xb = mt_malloc(bs * ex * sizeof(float));
    yb = mt_malloc(bs * sizeof(int32_t));
    if (perm == NULL || xb == NULL || yb == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "training buffers: out of memory");
        goto done;
    }
    for (int64_t e = e0; e < epochs && step < cap; e++) {
        mt_train_progress p = {
            MT_TRAIN_STEP, e + 1, epochs, step, 0, per_epoch, 0, 0, 0, 0, 0, 0, 0, 0};
        mt_train_epoch_acc acc = {0.0, 0.0, 0.0, 0};
        int64_t s_first = e == e0 ? s0 : 0;
        if (cap - step < per_epoch - s_first)
            p.epoch_steps = s_first + (cap - step);
        mt_rng_permutation(perm, train->n, spec->seed, (uint64_t)e);
        for (int64_t s = s_first; s < p.epoch_steps; s++) {
            size_t first = (size_t)s * spec->batch_size;
            size_t b = train->n - first < bs ? train->n - first : bs;
            mt_step_metrics sm;
            double t0 = now_s(), dt;
            bool end;
            for (size_t i = 0; i < b; i++) {
                memcpy(xb + i * ex, train->images + (size_t)perm[first + i] * ex,
                       ex * sizeof(float));
                yb[i] = train->labels[perm[first + i]];
            }
            rc = be->step(be->ctx, xb, yb, b, (uint64_t)step, first, &sm, err);
            if (rc != MT_OK)
                goto done;
            dt = now_s() - t0;
            step++;
            mt_train_progress_add(&p, &acc, step, s + 1, b, &sm, dt);
            end = s + 1 == per_epoch;
            if (be->after_step != NULL &&
                (rc = be->after_step(be->ctx, step, end ? e + 1 : e, end ? 0 : first + b,
                                     step >= cap, err)) != MT_OK)
                goto done;
            if (progress != NULL && (rc = progress(ctx, &p)) != MT_OK) {
                mt_err_set(err, rc, "training stopped at step %lld", (long long)step);
                goto done;
            }
        }
        train_s += acc.seconds;
        train_examples += acc.seen;
        if (test != NULL && test->n > 0) {
            double ls = 0.0;
            size_t ok = 0;
            rc = be->evaluate(be->ctx, test->images, test->labels, test->n, &ls, &ok, err);
            if (rc != MT_OK)
                goto done;
            p.test_loss = ls / (double)test->n;
            p.test_accuracy = (double)ok / (double)test->n;
        }
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
    res->examples_per_sec = train_s > 0 ? (double)train_examples / train_s : 0.0;
    rc = MT_OK;
done:
    mt_free(perm);
    mt_free(xb);
    mt_free(yb);
    return rc;
}

mt_code mt_train_run_data(const mt_job_spec *spec, const mt_train_options *opt,
                          const mt_idx_set *train, const mt_idx_set *test,
                          mt_train_progress_fn progress, void *ctx, mt_train_result *res,
                          mt_err *err)
{
    size_t shape[3] = {train->h, train->w, train->c};
    size_t bs = spec->batch_size < train->n ? spec->batch_size : train->n;
    mt_train_backend be = {NULL, model_step, model_evaluate, NULL};
    mt_model *m = NULL;
    mt_code rc;

    memset(res, 0, sizeof(*res));
    if (train->n == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: the training set is empty");
    if (test != NULL && test->n > 0 &&
        (test->h != train->h || test->w != train->w || test->c != train->c))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "dataset: test examples (%zux%zux%zu) differ from training examples "
                          "(%zux%zux%zu)",
                          test->h, test->w, test->c, train->h, train->w, train->c);
    rc = mt_model_new(spec, 3, shape, bs, &m, err);
    if (rc != MT_OK)
        return rc;
    for (size_t i = 0; i < train->n; i++) {
        if ((size_t)train->labels[i] >= mt_model_num_classes(m)) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                            "model.layers[%d]: %zu outputs but the dataset has label %d",
                            spec->n_layers - 1, mt_model_num_classes(m), (int)train->labels[i]);
            goto done;
        }
    }
    be.ctx = m;
    rc = mt_train_loop(spec, opt, train, test, &be, NULL, progress, ctx, res, err);
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
