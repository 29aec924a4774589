/* SPDX-License-Identifier: MIT */
/*
 * spmd_run.c — the SPMD training loop and dataset loading for `meshtrain train --local` on a
 * mesh (contract in mt_spmd.h): epochs, shuffling, progress, evaluation, periodic checkpoints,
 * resume from a checkpoint written on any mesh.
 *
 * The loop is core/train's mt_train_loop with an SPMD backend (same permutation, same batches,
 * same step and first-example numbers), so a 1-device mesh reproduces the local engine.
 * Threading: the caller's thread (the trainer's device threads do the math).
 * Tests: tests/unit/test_spmd.c, tests/integration/test_train_mesh.sh.
 */
#include "spmd/mt_spmd.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "alloc/mt_alloc.h"
#include "ckpt/mt_ckpt.h"
#include "clock/mt_clock.h"
#include "data/mt_data.h"
#include "log/mt_log.h"

/* ------------------------------------------------------------------ datasets */

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/*
 * Synthetic TF-IDF-like data: each feature is non-zero with probability 1/16, uniform in (0, 3];
 * the label is the class c maximising sum_j w_c[j] x[j], w_c[j] = +-1 from a hash of (c, j).
 */
static mt_code synth_fill(mt_idx_set *set, size_t n, size_t dim, size_t classes, uint64_t seed,
                          uint64_t stream)
{
    set->images = mt_calloc(n * dim + 1, sizeof(float));
    set->labels = mt_calloc(n + 1, sizeof(int32_t));
    if (set->images == NULL || set->labels == NULL)
        return MT_RESOURCE_EXHAUSTED;
    set->n = n, set->h = 1, set->w = 1, set->c = dim;
    for (size_t i = 0; i < n; i++) {
        float *x = set->images + i * dim;
        double best = -1e300;
        for (size_t j = 0; j < dim; j++) {
            uint64_t r = mix64(seed ^ mix64(stream * 0x100000000ULL + i) ^ (j * 0x9e37ULL));
            if ((r & 15) == 0)
                x[j] = (float)((double)((r >> 8) % 3000 + 1) / 1000.0);
        }
        for (size_t c = 0; c < classes; c++) {
            double sc = 0.0;
            for (size_t j = 0; j < dim; j++)
                if (x[j] != 0.0f)
                    sc += (mix64(seed + c * 7919 + j) & 1) ? x[j] : -x[j];
            if (sc > best) {
                best = sc;
                set->labels[i] = (int32_t)c;
            }
        }
    }
    return MT_OK;
}

static mt_code get_count(const cJSON *ds, const char *key, double dflt, double max, size_t *out,
                         mt_err *err)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(ds, key);
    double v = dflt;
    if (n != NULL) {
        if (!cJSON_IsNumber(n))
            return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset.%s: must be an integer", key);
        v = n->valuedouble;
    }
    if (v < 0 || v > max || v != (double)(size_t)v)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset.%s: must be an integer in 0..%.0f",
                          key, max);
    *out = (size_t)v;
    return MT_OK;
}

static mt_code load_synthetic(const mt_job_spec *spec, const cJSON *ds, mt_idx_set *train,
                              mt_idx_set *test, mt_err *err)
{
    static const char *const keys[] = {"format", "examples", "test_examples", "features", "classes",
                                       "seed",   NULL};
    size_t n, nt, dim, classes, seed;
    mt_code rc;

    for (const cJSON *c = ds->child; c != NULL; c = c->next) {
        bool ok = false;
        for (int k = 0; keys[k] != NULL; k++)
            ok = ok || strcmp(c->string, keys[k]) == 0;
        if (!ok)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset.%s: unknown key for synthetic",
                              c->string);
    }
    if ((rc = get_count(ds, "examples", 2048, 1e7, &n, err)) != MT_OK ||
        (rc = get_count(ds, "test_examples", 512, 1e7, &nt, err)) != MT_OK ||
        (rc = get_count(ds, "features", 1200, 1e6, &dim, err)) != MT_OK ||
        (rc = get_count(ds, "classes", 2, 1e4, &classes, err)) != MT_OK ||
        (rc = get_count(ds, "seed", (double)(spec->seed % 1000000), 1e15, &seed, err)) != MT_OK)
        return rc;
    if (n == 0 || dim == 0 || classes < 2 || n * dim > ((size_t)1 << 31))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "dataset: synthetic needs examples >= 1, features >= 1, classes >= 2 "
                          "and at most 2^31 floats");
    if (synth_fill(train, n, dim, classes, seed, 0) != MT_OK ||
        (nt > 0 && synth_fill(test, nt, dim, classes, seed, 1) != MT_OK))
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
    return MT_OK;
}

/* Decode every file of one split into one flat set. */
static mt_code load_split(const mt_data_spec *ds, mt_data_split split, const mt_data_tfidf *vec,
                          mt_idx_set *out, mt_err *err)
{
    mt_data_dataset *d = NULL;
    size_t n, at = 0, dim = 0;
    mt_code rc = mt_data_dataset_open(ds, split, vec, &d, err);

    if (rc != MT_OK)
        return rc;
    n = mt_data_dataset_size(d);
    for (size_t f = 0; rc == MT_OK && f < mt_data_dataset_num_files(d); f++) {
        mt_data_block b;
        memset(&b, 0, sizeof(b));
        rc = mt_data_dataset_load(d, f, &b, err);
        if (rc != MT_OK)
            break;
        if (out->images == NULL) {
            dim = b.dim;
            out->images = mt_calloc(n * dim + 1, sizeof(float));
            out->labels = mt_calloc(n + 1, sizeof(int32_t));
            if (out->images == NULL || out->labels == NULL)
                rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
            out->h = out->w = 1;
            out->c = dim;
        }
        if (rc == MT_OK) {
            memcpy(out->images + at * dim, b.x, b.n * dim * sizeof(float));
            memcpy(out->labels + at, b.y, b.n * sizeof(int32_t));
            at += b.n;
        }
        mt_data_block_fini(&b);
    }
    out->n = at;
    mt_data_dataset_free(d);
    return rc;
}

static mt_code load_text(const cJSON *node, const char *base_dir, mt_idx_set *train,
                         mt_idx_set *test, mt_err *err)
{
    mt_data_spec *ds = NULL;
    mt_data_tfidf *vec = NULL;
    mt_code rc = mt_data_spec_parse(node, "dataset", base_dir, &ds, err);

    if (rc == MT_OK)
        rc = mt_data_tfidf_fit_spec(ds, &vec, err);
    if (rc == MT_OK)
        rc = load_split(ds, MT_DATA_SPLIT_TRAIN, vec, train, err);
    if (rc == MT_OK && ds->test.n > 0)
        rc = load_split(ds, MT_DATA_SPLIT_TEST, vec, test, err);
    mt_data_tfidf_free(vec);
    mt_data_spec_free(ds);
    return rc;
}

mt_code mt_spmd_load_data(const mt_job_spec *spec, const char *spec_json, const char *base_dir,
                          mt_idx_set *train, mt_idx_set *test, int *in_rank, size_t *in_shape,
                          mt_err *err)
{
    const mt_dataset_spec *d = &spec->dataset;
    size_t dim;
    mt_code rc;

    memset(train, 0, sizeof(*train));
    memset(test, 0, sizeof(*test));
    if (strcmp(d->format, "idx") == 0) {
        rc = mt_idx_set_load(d->train_images, d->train_labels, 0, train, err);
        if (rc == MT_OK)
            rc = mt_idx_set_load(d->test_images, d->test_labels, 0, test, err);
    } else {
        cJSON *root = cJSON_Parse(spec_json != NULL ? spec_json : "");
        const cJSON *node = cJSON_GetObjectItemCaseSensitive(root, "dataset");
        if (node == NULL)
            rc = mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: missing from the spec text");
        else if (strcmp(d->format, "synthetic") == 0)
            rc = load_synthetic(spec, node, train, test, err);
        else
            rc = load_text(node, base_dir, train, test, err);
        cJSON_Delete(root);
    }
    if (rc == MT_OK && train->n == 0)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: the training set is empty");
    if (rc != MT_OK) {
        mt_idx_set_fini(train);
        mt_idx_set_fini(test);
        return rc;
    }
    dim = train->h * train->w * train->c;
    if (spec->input_rank != 0) {
        size_t p = 1;
        for (int a = 0; a < spec->input_rank; a++)
            p *= spec->input_shape[a];
        if (p != dim) {
            mt_idx_set_fini(train);
            mt_idx_set_fini(test);
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.input_shape: %zu features but the dataset has %zu", p, dim);
        }
        *in_rank = spec->input_rank;
        memcpy(in_shape, spec->input_shape, sizeof(spec->input_shape));
    } else if (train->h == 1 && train->w == 1) {
        *in_rank = 1;
        in_shape[0] = dim;
    } else {
        *in_rank = 3;
        in_shape[0] = train->h, in_shape[1] = train->w, in_shape[2] = train->c;
    }
    return MT_OK;
}

/* ------------------------------------------------------------------ loop */

typedef struct run_ctx {
    mt_spmd *s;
    const mt_spmd_run_opts *o;
    void *ctx;           /* the progress context, passed to o's hooks */
    int64_t step, epoch; /* position after the last step (for a save on stop) */
    size_t pos;
    bool saved;                    /* a checkpoint holds that position */
    mt_train_progress_fn progress; /* the caller's, when run_progress wraps it */
} run_ctx;

static mt_code run_step(void *ctx, const float *x, const int32_t *labels, size_t n, uint64_t step,
                        uint64_t first, mt_step_metrics *metrics, mt_err *err)
{
    return mt_spmd_step(((run_ctx *)ctx)->s, x, labels, n, step, first, metrics, err);
}

static mt_code run_evaluate(void *ctx, const float *x, const int32_t *labels, size_t n,
                            double *loss_sum, size_t *correct, mt_err *err)
{
    return mt_spmd_evaluate(((run_ctx *)ctx)->s, x, labels, n, loss_sum, correct, err);
}

/*
 * Shards spread over processes: every process takes part in the gather (mt_spmd_save_gathered),
 * the one holding rank 0 writes, keeps the newest o->ckpt_keep and calls o->on_saved.
 */
static mt_code save_gathered(run_ctx *r, const mt_spmd_position *p, mt_err *err)
{
    const mt_spmd_run_opts *o = r->o;
    bool writer = mt_coll_world_comm(o->world, 0) != NULL;
    char path[4096];
    int64_t t0 = mt_clock_mono_us();
    mt_code rc = MT_OK;

    if (writer)
        rc = mt_ckpt_path(path, sizeof(path), o->save_dir, p->step, err);
    if (rc == MT_OK) /* on a bad path the writer still gathers (its write fails) */
        rc = mt_spmd_save_gathered(r->s, writer ? path : NULL, p, o->spec_json, err);
    else
        mt_spmd_save_gathered(r->s, NULL, p, o->spec_json, NULL);
    if (rc != MT_OK || !writer)
        return rc;
    if (o->ckpt_keep > 0)
        rc = mt_ckpt_retain(o->save_dir, o->ckpt_keep, NULL, err);
    if (rc == MT_OK)
        mt_log_info("checkpoint %s (step %llu, gathered from the workers and written in %.1f ms)",
                    path, (unsigned long long)p->step, (double)(mt_clock_mono_us() - t0) / 1000.0);
    if (rc == MT_OK && o->on_saved != NULL)
        rc = o->on_saved(r->ctx, path, p->step, err);
    return rc;
}

/*
 * A stop checkpoint of gathered shards needs every process at the same point: with periodic
 * checkpoints and a stop hook, after each progress event the processes agree (one 1-float
 * allreduce over the world) whether any of them stops with a checkpoint, and all save it.
 */
static bool stop_needs_agreement(const run_ctx *r)
{
    const mt_spmd_run_opts *o = r->o;
    return o->world != NULL && o->save_dir != NULL && o->save_on_stop != NULL &&
           o->ckpt_every > 0 && mt_spmd_save_needs_gather(r->s);
}

static mt_code save_ckpt(run_ctx *r, int64_t step, int64_t epoch, size_t pos, mt_err *err);

/* The caller's progress, then the stop agreement (see stop_needs_agreement). */
static mt_code run_progress(void *ctx, const mt_train_progress *p)
{
    run_ctx *r = ctx;
    mt_code rc = r->progress != NULL ? r->progress(r->ctx, p) : MT_OK, arc;
    bool any = false;
    mt_err aerr = MT_ERR_INIT;

    arc = mt_spmd_flag_any(r->s, rc != MT_OK && r->o->save_on_stop(r->ctx), &any, &aerr);
    if (arc == MT_OK && any && !r->saved) {
        arc = save_ckpt(r, r->step, r->epoch, r->pos, &aerr);
        if (arc == MT_OK)
            mt_log_info("stop checkpoint at step %lld (a process is stopping)", (long long)r->step);
    }
    if (arc != MT_OK)
        mt_log_warn("stop checkpoint at step %lld: %s: %s", (long long)r->step, mt_code_name(arc),
                    aerr.msg);
    return rc != MT_OK ? rc : arc;
}

/* Write the checkpoint of position (step, epoch, pos); only the process holding rank 0. */
static mt_code save_ckpt(run_ctx *r, int64_t step, int64_t epoch, size_t pos, mt_err *err)
{
    const mt_spmd_run_opts *o = r->o;
    char path[4096];
    mt_spmd_position p = {(uint64_t)step, (uint64_t)epoch, pos};
    mt_code rc;

    r->saved = true;
    if (o->world != NULL && mt_spmd_save_needs_gather(r->s))
        return save_gathered(r, &p, err);
    if (o->world != NULL && mt_coll_world_comm(o->world, 0) == NULL)
        return MT_OK; /* the process holding rank 0 writes it */
    rc = mt_ckpt_path(path, sizeof(path), o->save_dir, (uint64_t)step, err);
    if (rc == MT_OK)
        rc = mt_spmd_save(r->s, path, &p, o->spec_json, err);
    if (rc == MT_OK && o->ckpt_keep > 0)
        rc = mt_ckpt_retain(o->save_dir, o->ckpt_keep, NULL, err);
    if (rc == MT_OK)
        mt_log_info("checkpoint %s (step %lld)", path, (long long)step);
    if (rc == MT_OK && o->on_saved != NULL)
        rc = o->on_saved(r->ctx, path, (uint64_t)step, err);
    return rc;
}

/* Checkpoint every o->ckpt_every steps and after the last step; keep the newest o->ckpt_keep. */
static mt_code run_after_step(void *ctx, int64_t step, int64_t epoch, size_t pos, bool last,
                              mt_err *err)
{
    run_ctx *r = ctx;
    const mt_spmd_run_opts *o = r->o;

    mt_err serr = MT_ERR_INIT;
    mt_code rc;

    r->step = step, r->epoch = epoch, r->pos = pos, r->saved = false;
    if (o->save_dir == NULL || !(last || (o->ckpt_every > 0 && step % o->ckpt_every == 0)))
        return MT_OK;
    rc = save_ckpt(r, step, epoch, pos, &serr);
    if (rc == MT_FAILED_PRECONDITION && last && o->ckpt_every == 0 && o->world != NULL) {
        /* the final model of a job that asked for no checkpoints: the shards of this process
         * do not cover every tensor (layout spread over processes); training still succeeded */
        mt_log_warn("final checkpoint not written: %s", serr.msg);
        return MT_OK;
    }
    if (rc != MT_OK)
        mt_err_set(err, rc, "%s", serr.msg);
    return rc;
}

mt_code mt_spmd_run_data(const mt_job_spec *spec, const mt_mesh *mesh, const mt_layout_map *map,
                         const mt_spmd_run_opts *o, const mt_idx_set *train, const mt_idx_set *test,
                         int in_rank, const size_t *in_shape, mt_train_progress_fn progress,
                         void *ctx, mt_train_result *res, mt_err *err)
{
    mt_train_options topt = {o->epochs, o->steps};
    mt_train_backend be = {NULL, run_step, run_evaluate, run_after_step};
    mt_train_start start = {0, 0, 0};
    run_ctx r = {NULL, o, ctx, 0, 0, 0, true, progress};
    bool agree;
    size_t ex = 1, bs = spec->batch_size < train->n ? spec->batch_size : train->n;
    mt_code rc;

    memset(res, 0, sizeof(*res));
    for (int a = 0; a < in_rank; a++)
        ex *= in_shape[a];
    if (train->n == 0 || ex != train->h * train->w * train->c)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: empty or of another shape");
    if (o->save_dir != NULL && mkdir(o->save_dir, 0755) != 0 && errno != EEXIST)
        return mt_err_set(err, errno == EACCES ? MT_PERMISSION_DENIED : MT_NOT_FOUND,
                          "checkpoint directory %s: %s", o->save_dir, strerror(errno));
    rc = mt_spmd_new(spec, mesh, map, in_rank, in_shape, bs, o->world, &r.s, err);
    if (rc != MT_OK)
        return rc;
    if (o->resume != NULL) {
        mt_spmd_position p;
        rc = mt_spmd_restore(r.s, o->resume, &p, err);
        if (rc != MT_OK)
            goto done;
        start.step = (int64_t)p.step;
        start.epoch = (int64_t)p.epoch;
        start.input_position = (size_t)p.input_position;
        mt_log_info("resumed %s at step %lld (epoch %lld, example %zu)", o->resume,
                    (long long)start.step, (long long)start.epoch + 1, start.input_position);
    }
    be.ctx = &r;
    agree = stop_needs_agreement(&r);
    rc = mt_train_loop(spec, &topt, train, test, &be, o->resume != NULL ? &start : NULL,
                       agree ? run_progress : progress, agree ? (void *)&r : ctx, res, err);
    /* stopped by progress (cancel, shutdown): checkpoint the last step when asked to (with
     * agreement, run_progress did it in step with the other processes) */
    if (rc != MT_OK && !agree && !r.saved && o->save_dir != NULL && o->save_on_stop != NULL &&
        o->save_on_stop(ctx) && !(o->world != NULL && mt_spmd_save_needs_gather(r.s)))
        save_ckpt(&r, r.step, r.epoch, r.pos, NULL);
done:
    mt_spmd_free(r.s);
    return rc;
}
