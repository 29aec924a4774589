/* SPDX-License-Identifier: MIT */
/*
 * spmd_run.c — the SPMD training loop and dataset loading for `meshtrain train --local` on a
 * mesh (contract in mt_spmd.h): epochs, shuffling, progress, evaluation, periodic checkpoints,
 * resume from a checkpoint written on any mesh.
 *
 * The loop is core/train's mt_train_loop with an SPMD backend (same permutation, same batches,
 * same step and first-example numbers), so a 1-device mesh reproduces the local engine.
 * mt_spmd_run_pipeline is the same loop fed by this process's core/data input pipeline (input
 * context from the mesh and the rank table, prefetch thread, mt_spmd_step_pieces_next whose
 * count agreement, fused into the previous step's gradient allreduce, makes every replica agree
 * on the end of an epoch).
 * Threading: the caller's thread (the trainer's device threads do the math).
 * Tests: tests/unit/test_spmd.c, tests/integration/test_train_mesh.sh.
 */
#include "spmd/mt_spmd.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "alloc/mt_alloc.h"
#include "ckpt/mt_ckpt.h"
#include "clock/mt_clock.h"
#include "data/mt_data.h"
#include "log/mt_log.h"
#include "repro/mt_repro.h"

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

mt_code mt_spmd_synthetic_parse(const mt_job_spec *spec, const cJSON *ds, mt_spmd_synthetic *o,
                                mt_err *err)
{
    static const char *const keys[] = {"format", "examples", "test_examples", "features", "classes",
                                       "seed",   NULL};
    mt_code rc;

    for (const cJSON *c = ds->child; c != NULL; c = c->next) {
        bool ok = false;
        for (int k = 0; keys[k] != NULL; k++)
            ok = ok || strcmp(c->string, keys[k]) == 0;
        if (!ok)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset.%s: unknown key for synthetic",
                              c->string);
    }
    if ((rc = get_count(ds, "examples", 2048, 1e7, &o->examples, err)) != MT_OK ||
        (rc = get_count(ds, "test_examples", 512, 1e7, &o->test_examples, err)) != MT_OK ||
        (rc = get_count(ds, "features", 1200, 1e6, &o->features, err)) != MT_OK ||
        (rc = get_count(ds, "classes", 2, 1e4, &o->classes, err)) != MT_OK ||
        (rc = get_count(ds, "seed", (double)(spec->seed % 1000000), 1e15, &o->seed, err)) != MT_OK)
        return rc;
    if (o->examples == 0 || o->features == 0 || o->classes < 2 ||
        o->examples * o->features > ((size_t)1 << 31))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "dataset: synthetic needs examples >= 1, features >= 1, classes >= 2 "
                          "and at most 2^31 floats");
    return MT_OK;
}

static mt_code load_synthetic(const mt_job_spec *spec, const cJSON *ds, mt_idx_set *train,
                              mt_idx_set *test, mt_err *err)
{
    mt_spmd_synthetic o;
    mt_code rc = mt_spmd_synthetic_parse(spec, ds, &o, err);

    if (rc != MT_OK)
        return rc;
    if (synth_fill(train, o.examples, o.features, o.classes, o.seed, 0) != MT_OK ||
        (o.test_examples > 0 &&
         synth_fill(test, o.test_examples, o.features, o.classes, o.seed, 1) != MT_OK))
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
            out->y_dim = b.y_dim ? b.y_dim : 1;
            out->t_dim = b.t_dim;
            out->images = mt_calloc(n * dim + 1, sizeof(float));
            out->labels = mt_calloc(n * out->y_dim + 1, sizeof(int32_t));
            if (b.t_dim > 0)
                out->targets = mt_calloc(n * b.t_dim + 1, sizeof(float));
            if (out->images == NULL || out->labels == NULL || (b.t_dim > 0 && out->targets == NULL))
                rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
            out->h = out->w = 1;
            out->c = dim;
        }
        if (rc == MT_OK &&
            (b.dim != dim || (b.y_dim ? b.y_dim : 1) != out->y_dim || b.t_dim != out->t_dim))
            rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                            "%s: %zu features, %zu labels and %zu targets per example; the "
                            "split's first file has %zu, %zu and %zu",
                            mt_data_dataset_file_name(d, f), b.dim, b.y_dim ? b.y_dim : 1, b.t_dim,
                            dim, out->y_dim, out->t_dim);
        if (rc == MT_OK) {
            memcpy(out->images + at * dim, b.x, b.n * dim * sizeof(float));
            memcpy(out->labels + at * out->y_dim, b.y, b.n * out->y_dim * sizeof(int32_t));
            if (b.t_dim > 0)
                memcpy(out->targets + at * b.t_dim, b.t, b.n * b.t_dim * sizeof(float));
            at += b.n;
        }
        mt_data_block_fini(&b);
    }
    out->n = at;
    mt_data_dataset_free(d);
    return rc;
}

/*
 * The validation file ("validation.path", relative to base_dir like the dataset's paths): the
 * dataset section with "train" replaced by that file and no "test", decoded as a training split
 * with the vectorizer fitted on the real training split (vec, may be NULL).
 */
static mt_code load_val_file(const cJSON *node, mt_data_format format, const char *path,
                             const char *base_dir, const mt_data_tfidf *vec, mt_idx_set *val,
                             mt_err *err)
{
    cJSON *copy = cJSON_Duplicate(node, true);
    mt_data_spec *ds = NULL;
    /* a tokens dataset fits its tokenizer on the files named "train" when it opens: the
     * validation file is read as the test split of the same training files, so its ids are the
     * training vocabulary's (as the test file's are) */
    bool as_test = format == MT_DATA_FORMAT_TOKENS;
    mt_code rc;

    if (copy == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "validation: out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "test");
    if (!(as_test
              ? cJSON_AddItemToObjectCS(copy, "test", cJSON_CreateString(path))
              : cJSON_ReplaceItemInObjectCaseSensitive(copy, "train", cJSON_CreateString(path)))) {
        cJSON_Delete(copy);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "validation: out of memory");
    }
    rc = mt_data_spec_parse(copy, "validation.path", base_dir, &ds, err);
    if (rc == MT_OK)
        rc = load_split(ds, as_test ? MT_DATA_SPLIT_TEST : MT_DATA_SPLIT_TRAIN, vec, val, err);
    mt_data_spec_free(ds);
    cJSON_Delete(copy);
    return rc;
}

/* Any core/data format decoded whole: train, test and the validation file (val may be NULL). */
static mt_code load_text(const cJSON *node, const char *base_dir, const char *val_path,
                         mt_idx_set *train, mt_idx_set *test, mt_idx_set *val, mt_err *err)
{
    mt_data_spec *ds = NULL;
    mt_data_tfidf *vec = NULL;
    mt_code rc = mt_data_spec_parse(node, "dataset", base_dir, &ds, err);

    if (rc == MT_OK && ds->format == MT_DATA_FORMAT_TEXT)
        rc = mt_data_tfidf_fit_spec(ds, &vec, err);
    if (rc == MT_OK)
        rc = load_split(ds, MT_DATA_SPLIT_TRAIN, vec, train, err);
    if (rc == MT_OK && ds->test.n > 0)
        rc = load_split(ds, MT_DATA_SPLIT_TEST, vec, test, err);
    if (rc == MT_OK && val != NULL && val_path != NULL && val_path[0] != '\0')
        rc = load_val_file(node, ds->format, val_path, base_dir, vec, val, err);
    mt_data_tfidf_free(vec);
    mt_data_spec_free(ds);
    return rc;
}

mt_code mt_spmd_load_data(const mt_job_spec *spec, const cJSON *node, const char *base_dir,
                          mt_idx_set *train, mt_idx_set *test, mt_idx_set *val, int *in_rank,
                          size_t *in_shape, mt_err *err)
{
    const mt_dataset_spec *d = &spec->dataset;
    const char *vp = spec->validation.path;
    size_t dim;
    mt_code rc;

    memset(train, 0, sizeof(*train));
    memset(test, 0, sizeof(*test));
    if (val != NULL)
        memset(val, 0, sizeof(*val));
    if (strcmp(d->format, "idx") == 0 &&
        (node == NULL || cJSON_GetObjectItemCaseSensitive(node, "train") == NULL)) {
        rc = mt_idx_set_load(d->train_images, d->train_labels, 0, train, err);
        if (rc == MT_OK)
            rc = mt_idx_set_load(d->test_images, d->test_labels, 0, test, err);
    } else if (node == NULL) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: missing from the spec");
    } else if (strcmp(d->format, "synthetic") == 0) {
        rc = load_synthetic(spec, node, train, test, err);
    } else {
        rc = load_text(node, base_dir, vp, train, test, val, err);
    }
    if (rc == MT_OK && train->n == 0)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: the training set is empty");
    if (rc == MT_OK && vp[0] != '\0' && (val == NULL || val->n == 0))
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "validation.path: needs a dataset section read by core/data (csv, text, "
                        "npy, images, idx with \"train\") and a non-empty file");
    if (rc != MT_OK) {
        mt_idx_set_fini(train);
        mt_idx_set_fini(test);
        mt_idx_set_fini(val);
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
            mt_idx_set_fini(val);
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
    int64_t digest_every;          /* the spec's "digest_every" (0: epoch ends, checkpoints) */
    char val[MT_TRAIN_VAL_TEXT];   /* the loop's validation bookkeeping, for the checkpoints */
} run_ctx;

/* mt_train_backend.val_state: every checkpoint written from now on carries it. */
static void run_val_state(void *ctx, const char *text)
{
    run_ctx *r = ctx;
    snprintf(r->val, sizeof(r->val), "%s", text);
}

static mt_code run_step(void *ctx, const float *x, const int32_t *labels, const float *targets,
                        size_t n, uint64_t step, uint64_t first, mt_step_metrics *metrics,
                        mt_err *err)
{
    return mt_spmd_step_targets(((run_ctx *)ctx)->s, x, labels, targets, n, step, first, metrics,
                                err);
}

static mt_code run_evaluate(void *ctx, const float *x, const int32_t *labels, const float *targets,
                            size_t n, double *sums, double *hist, mt_err *err)
{
    return mt_spmd_evaluate_sums(((run_ctx *)ctx)->s, x, labels, targets, n, sums, hist, err);
}

/*
 * Shards spread over processes: every process takes part in the gather (mt_spmd_save_gathered),
 * the one holding rank 0 writes, keeps the newest o->ckpt_keep and calls o->on_saved.
 */
/* The path of the checkpoint of step `step`, or of the best one (MT_SPMD_BEST_CKPT). */
static mt_code ckpt_file(char *path, size_t n, const char *dir, uint64_t step, bool best,
                         mt_err *err)
{
    if (!best)
        return mt_ckpt_path(path, n, dir, step, err);
    if ((size_t)snprintf(path, n, "%s/%s", dir, MT_SPMD_BEST_CKPT) >= n)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "checkpoint directory %s: path too long", dir);
    return MT_OK;
}

/* After a checkpoint is written: the newest ckpt_keep are kept and on_saved runs; the best one is
 * apart from both (retention never lists it) and goes to on_best. */
static mt_code ckpt_written(run_ctx *r, const char *path, uint64_t step, bool best, mt_err *err)
{
    const mt_spmd_run_opts *o = r->o;
    mt_code rc = MT_OK;

    if (best)
        return o->on_best != NULL ? o->on_best(r->ctx, path, step, err) : MT_OK;
    if (o->ckpt_keep > 0)
        rc = mt_ckpt_retain(o->save_dir, o->ckpt_keep, NULL, err);
    if (rc == MT_OK && o->on_saved != NULL)
        rc = o->on_saved(r->ctx, path, step, err);
    return rc;
}

static mt_code save_gathered(run_ctx *r, const mt_spmd_position *p, bool best, mt_err *err)
{
    const mt_spmd_run_opts *o = r->o;
    bool writer = mt_coll_world_comm(o->world, 0) != NULL;
    char path[4096];
    int64_t t0 = mt_clock_mono_us();
    mt_code rc = MT_OK;

    if (writer)
        rc = ckpt_file(path, sizeof(path), o->save_dir, p->step, best, err);
    if (rc == MT_OK) /* on a bad path the writer still gathers (its write fails) */
        rc = mt_spmd_save_gathered(r->s, writer ? path : NULL, p, o->spec_json, err);
    else
        mt_spmd_save_gathered(r->s, NULL, p, o->spec_json, NULL);
    if (rc != MT_OK || !writer)
        return rc;
    mt_log_info("checkpoint %s (step %llu, gathered from the workers and written in %.1f ms)", path,
                (unsigned long long)p->step, (double)(mt_clock_mono_us() - t0) / 1000.0);
    return ckpt_written(r, path, p->step, best, err);
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

static mt_code save_ckpt(run_ctx *r, int64_t step, int64_t epoch, size_t pos, bool best,
                         mt_err *err);

/* The caller's progress, then the stop agreement (see stop_needs_agreement). */
static mt_code run_progress(void *ctx, const mt_train_progress *p)
{
    run_ctx *r = ctx;
    mt_code rc = r->progress != NULL ? r->progress(r->ctx, p) : MT_OK, arc;
    bool any = false;
    mt_err aerr = MT_ERR_INIT;

    arc = mt_spmd_flag_any(r->s, rc != MT_OK && r->o->save_on_stop(r->ctx), &any, &aerr);
    if (arc == MT_OK && any && !r->saved) {
        arc = save_ckpt(r, r->step, r->epoch, r->pos, false, &aerr);
        if (arc == MT_OK)
            mt_log_info("stop checkpoint at step %lld (a process is stopping)", (long long)r->step);
    }
    if (arc != MT_OK)
        mt_log_warn("stop checkpoint at step %lld: %s: %s", (long long)r->step, mt_code_name(arc),
                    aerr.msg);
    return rc != MT_OK ? rc : arc;
}

/*
 * Before the first timed step (`step`) of a job over processes: one agreement
 * (mt_spmd_start_together, a 1-float allreduce over every rank) so that connecting the data plane
 * (dial, handshake, shared-memory rings) and waiting for the slowest process to get its assignment,
 * load its data and build its trainer happen here, not inside step 1, whose time counts in
 * examples_per_sec: a 2-process job of 300 small steps lost 10-45 % of its reported rate to them
 * (docs/benchmarks.md, issue 20). Every process calls it at the same point (after a resume's
 * restore), so the collectives stay matched; it changes no number. A process that never comes fails
 * it at the collective deadline, as step 1 did.
 */
static mt_code start_together(run_ctx *r, int64_t step, mt_err *err)
{
    mt_coll_world *w = r->o->world;
    int64_t t0 = mt_clock_mono_us();
    bool remote = false;
    mt_code rc;

    for (int i = 0; w != NULL && i < mt_coll_world_size(w) && !remote; i++)
        remote = mt_coll_world_comm(w, i) == NULL;
    if (!remote)
        return MT_OK; /* one process: nothing to wait for */
    rc = mt_spmd_start_together(r->s, (uint64_t)step, err);
    if (rc == MT_OK)
        mt_log_info("data plane connected, every process ready to train (waited %.0f ms)",
                    (double)(mt_clock_mono_us() - t0) / 1e3);
    return rc;
}

/* Write the checkpoint of position (step, epoch, pos), or the best one; only the process holding
 * rank 0 writes (all take part in a gather). */
static mt_code save_ckpt(run_ctx *r, int64_t step, int64_t epoch, size_t pos, bool best,
                         mt_err *err)
{
    const mt_spmd_run_opts *o = r->o;
    char path[4096];
    mt_spmd_position p = {.step = (uint64_t)step, .epoch = (uint64_t)epoch, .input_position = pos};
    mt_code rc;

    memcpy(p.val, r->val, sizeof(p.val));
    if (!best)
        r->saved = true;
    if (o->world != NULL && mt_spmd_save_needs_gather(r->s))
        return save_gathered(r, &p, best, err);
    if (o->world != NULL && mt_coll_world_comm(o->world, 0) == NULL)
        return MT_OK; /* the process holding rank 0 writes it */
    rc = ckpt_file(path, sizeof(path), o->save_dir, (uint64_t)step, best, err);
    if (rc == MT_OK)
        rc = mt_spmd_save(r->s, path, &p, o->spec_json, err);
    if (rc != MT_OK)
        return rc;
    mt_log_info("%s %s (step %lld)", best ? "best checkpoint" : "checkpoint", path,
                (long long)step);
    return ckpt_written(r, path, (uint64_t)step, best, err);
}

/*
 * The state digest after `step` (mt_spmd_digest_world) to o->on_digest in the process holding
 * rank 0: every digest_every steps, at every epoch end (pos 0: the next step starts an epoch), the
 * last step and every checkpoint the schedule asks for (ckpt: whether or not it was written, so
 * that every process of a world makes the same collective calls).
 */
static mt_code emit_digest(run_ctx *r, int64_t step, size_t pos, bool last, bool ckpt, mt_err *err)
{
    const mt_spmd_run_opts *o = r->o;
    mt_digest d;
    mt_code rc;

    bool have = false;

    if (o->on_digest == NULL ||
        !(ckpt || last || pos == 0 || (r->digest_every > 0 && step % r->digest_every == 0)))
        return MT_OK;
    rc = mt_spmd_digest_world(r->s, &d, &have, err);
    return rc == MT_OK && have ? o->on_digest(r->ctx, step, &d, err) : rc;
}

/* A checkpoint this machine's disk had no room for (rc RESOURCE_EXHAUSTED) is skipped, and
 * training goes on, when the caller takes it: on_saved with path NULL (issue 19, fault 4). */
static bool skipped_full(run_ctx *r, mt_code rc, int64_t step, mt_err *serr)
{
    if (rc != MT_RESOURCE_EXHAUSTED || r->o->on_saved == NULL)
        return false;
    mt_log_warn("checkpoint step %lld skipped: %s", (long long)step, serr->msg);
    return r->o->on_saved(r->ctx, NULL, (uint64_t)step, serr) == MT_OK;
}

/* Checkpoint every o->ckpt_every steps and after the last step; keep the newest o->ckpt_keep.
 * Then the digest when one is due (emit_digest). */
static mt_code run_after_step(void *ctx, int64_t step, int64_t epoch, size_t pos, bool last,
                              bool best, mt_err *err)
{
    run_ctx *r = ctx;
    const mt_spmd_run_opts *o = r->o;
    bool ckpt = o->save_dir != NULL && (last || (o->ckpt_every > 0 && step % o->ckpt_every == 0));
    mt_err serr = MT_ERR_INIT;
    mt_code rc;

    r->step = step, r->epoch = epoch, r->pos = pos, r->saved = false;
    if (best && o->save_dir != NULL &&
        (rc = save_ckpt(r, step, epoch, pos, true, &serr)) != MT_OK &&
        !skipped_full(r, rc, step, &serr))
        return mt_err_set(err, rc, "%s", serr.msg);
    mt_err_clear(&serr);
    if (!ckpt)
        return emit_digest(r, step, pos, last, false, err); /* no checkpoint due */
    rc = save_ckpt(r, step, epoch, pos, false, &serr);
    if (rc == MT_FAILED_PRECONDITION && last && o->ckpt_every == 0 && o->world != NULL) {
        /* the final model of a job that asked for no checkpoints: the shards of this process
         * do not cover every tensor (layout spread over processes); training still succeeded */
        mt_log_warn("final checkpoint not written: %s", serr.msg);
        return emit_digest(r, step, pos, last, true, err);
    }
    if (rc != MT_OK && skipped_full(r, rc, step, &serr)) /* the next interval tries again */
        return emit_digest(r, step, pos, last, true, err);
    if (rc != MT_OK)
        return mt_err_set(err, rc, "%s", serr.msg);
    return emit_digest(r, step, pos, last, true, err);
}

mt_code mt_spmd_run_data(const mt_job_spec *spec, const mt_mesh *mesh, const mt_layout_map *map,
                         const mt_spmd_run_opts *o, const mt_idx_set *train, const mt_idx_set *val,
                         const mt_idx_set *test, int in_rank, const size_t *in_shape,
                         mt_train_progress_fn progress, void *ctx, mt_train_result *res,
                         mt_err *err)
{
    mt_train_options topt = {o->epochs, o->steps};
    mt_train_backend be = {NULL, run_step, run_evaluate, run_after_step, {1, 1}, run_val_state};
    mt_train_start start = {0, 0, 0, NULL};
    mt_spmd_position rp; /* the resume checkpoint's */
    run_ctx r = {NULL, o, ctx, 0, 0, 0, true, progress, spec->digest_every, ""};
    mt_idx_set tr, va;
    bool agree;
    size_t ex = 1, bs;
    mt_code rc;

    memset(res, 0, sizeof(*res));
    memset(&va, 0, sizeof(va));
    tr = *train;
    if (val == NULL && spec->validation.split > 0 && train->n > 0) {
        rc = mt_train_split_validation(train, spec->validation.split, &tr, &va, err);
        if (rc != MT_OK)
            return rc;
        train = &tr;
        val = &va;
    }
    bs = spec->batch_size < train->n ? spec->batch_size : train->n;
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
    rc = mt_spmd_check_data(r.s, train->y_dim ? train->y_dim : 1, train->t_dim, err);
    if (rc != MT_OK)
        goto done;
    be.out = mt_spmd_output_shape(r.s);
    if (o->resume != NULL) {
        rc = mt_spmd_restore(r.s, o->resume, &rp, err);
        if (rc != MT_OK)
            goto done;
        start.step = (int64_t)rp.step;
        start.epoch = (int64_t)rp.epoch;
        start.input_position = (size_t)rp.input_position;
        start.val = o->resume_fresh_validation ? "" : rp.val;
        mt_log_info("resumed %s at step %lld (epoch %lld, example %zu)", o->resume,
                    (long long)start.step, (long long)start.epoch + 1, start.input_position);
    }
    be.ctx = &r;
    agree = stop_needs_agreement(&r);
    if ((rc = start_together(&r, start.step, err)) != MT_OK)
        goto done;
    rc = mt_train_loop(spec, &topt, train, val, test, &be, o->resume != NULL ? &start : NULL,
                       agree ? run_progress : progress, agree ? (void *)&r : ctx, res, err);
    /* stopped by progress (cancel, shutdown): checkpoint the last step when asked to (with
     * agreement, run_progress did it in step with the other processes) */
    if (rc != MT_OK && !agree && !r.saved && o->save_dir != NULL && o->save_on_stop != NULL &&
        o->save_on_stop(ctx) && !(o->world != NULL && mt_spmd_save_needs_gather(r.s)))
        save_ckpt(&r, r.step, r.epoch, r.pos, false, NULL);
done:
    mt_spmd_free(r.s);
    return rc;
}

/* ------------------------------------------------------------------ per-worker input pipelines */

static double now_s_run(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool mt_spmd_uses_pipeline(const mt_job_spec *spec)
{
    /* validation needs the whole training split in memory (Keras's validation_split takes its
     * last examples) and an evaluation schedule inside the loop: mt_spmd_run_data */
    return strcmp(spec->dataset.format, "synthetic") != 0 && !spec->validation.enabled;
}

/*
 * The input context of this process: pipelines are the processes' blocks of batch coordinates.
 * When every process holds the same number L of distinct batch coordinates as an aligned block
 * [w·L, (w+1)·L), there are N = R / L pipelines and this process is pipeline w; otherwise (or
 * with no rank table) one pipeline that every process runs whole, using only its own pieces.
 * Every process derives the same N from the same (mesh, rank table).
 */
static mt_code input_ctx(const mt_mesh *mesh, const mt_layout_map *map, mt_coll_world *world,
                         const int *rank_process, mt_data_input_ctx *c, mt_err *err)
{
    int ndev = mt_mesh_num_devices(mesh), bdim = mt_spmd_batch_dim(mesh, map);
    int R = bdim >= 0 ? mt_mesh_dim_size(mesh, bdim) : 1, L = -1, mine = -1;
    int *lo = mt_calloc((size_t)ndev + 1, sizeof(int)),
        *hi = mt_calloc((size_t)ndev + 1, sizeof(int));
    int *cnt = mt_calloc((size_t)ndev + 1, sizeof(int));
    unsigned char *seen = mt_calloc((size_t)ndev * (size_t)R + 1, 1);
    bool ok = rank_process != NULL || world == NULL;

    if (lo == NULL || hi == NULL || seen == NULL || cnt == NULL) {
        mt_free(lo), mt_free(hi), mt_free(seen), mt_free(cnt);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "input: out of memory");
    }
    for (int q = 0; q < ndev; q++)
        lo[q] = R, hi[q] = -1;
    for (int p = 0; ok && p < ndev; p++) {
        int coords[MT_MESH_MAX_DIMS], q = rank_process != NULL ? rank_process[p] : 0, b = 0;
        if (q < 0 || q >= ndev ||
            mt_mesh_coords(mesh, mt_mesh_device_at(mesh, p), coords, NULL) != MT_OK) {
            ok = false;
            break;
        }
        b = bdim >= 0 ? coords[bdim] : 0;
        if (world == NULL || mt_coll_world_comm(world, p) != NULL)
            mine = q;
        if (!seen[(size_t)q * (size_t)R + (size_t)b]) {
            seen[(size_t)q * (size_t)R + (size_t)b] = 1;
            cnt[q]++;
            lo[q] = b < lo[q] ? b : lo[q];
            hi[q] = b > hi[q] ? b : hi[q];
        }
    }
    for (int q = 0; ok && q < ndev; q++) {
        if (cnt[q] == 0)
            continue;
        if (L < 0)
            L = cnt[q];
        ok = cnt[q] == L && hi[q] - lo[q] + 1 == L && lo[q] % L == 0;
    }
    ok = ok && mine >= 0 && L > 0 && R % L == 0;
    c->num_pipelines = ok ? (size_t)(R / L) : 1;
    c->pipeline_id = ok ? (size_t)(lo[mine] / L) : 0;
    c->replicas_per_pipeline = ok ? (size_t)L : (size_t)R;
    mt_free(lo), mt_free(hi), mt_free(seen), mt_free(cnt);
    if (!ok)
        mt_log_warn("input: the mesh is not split into equal blocks of batch coordinates per "
                    "process: every process runs the whole input pipeline");
    return MT_OK;
}

typedef struct input_run {
    mt_data_spec *ds;
    mt_data_tfidf *vec;
    mt_data_dataset *dset;
    mt_data_pipeline *pipe;
    mt_data_input_ctx ic;
    mt_idx_set test;
    mt_spmd_piece *pieces; /* R entries, by batch coordinate */
    size_t *next;          /* R entries: this process's piece sizes of the next step */
    size_t R, B;
    size_t leaf; /* mesh_invariant: examples per leaf (pieces are whole leaves); 0: even split */
} input_run;

static void input_run_fini(input_run *in)
{
    mt_data_pipeline_free(in->pipe);
    mt_data_dataset_free(in->dset);
    mt_data_tfidf_free(in->vec);
    mt_data_spec_free(in->ds);
    mt_idx_set_fini(&in->test);
    mt_free(in->pieces);
    mt_free(in->next);
}

/* Parse the dataset section, fit the vectorizer (text), open the training split, load the test
 * split whole (every process evaluates on all of it). */
static mt_code input_open_data(input_run *in, const mt_job_spec *spec, const cJSON *node,
                               const char *base_dir, mt_err *err)
{
    mt_code rc;

    /* IDX paths of the engine's flat form were always relative to the working directory */
    if (strcmp(spec->dataset.format, "idx") == 0)
        base_dir = NULL;
    rc = mt_data_spec_parse(node, "dataset", base_dir, &in->ds, err);
    if (rc == MT_OK && in->ds->format == MT_DATA_FORMAT_TEXT)
        rc = mt_data_tfidf_fit_spec(in->ds, &in->vec, err);
    if (rc == MT_OK)
        rc = mt_data_dataset_open(in->ds, MT_DATA_SPLIT_TRAIN, in->vec, &in->dset, err);
    if (rc == MT_OK && in->ds->test.n > 0)
        rc = load_split(in->ds, MT_DATA_SPLIT_TEST, in->vec, &in->test, err);
    if (rc == MT_OK && !in->ds->seed_set)
        in->ds->seed = spec->seed;
    return rc;
}

/* The model's input shape from the spec or the pipeline's examples. */
static mt_code input_shape(const mt_job_spec *spec, const mt_data_pipeline *pipe, int *in_rank,
                           size_t *in_shape, mt_err *err)
{
    size_t dim = mt_data_pipeline_dim(pipe), sh[3];

    mt_data_pipeline_shape(pipe, sh);
    if (spec->input_rank != 0) {
        size_t p = 1;
        for (int a = 0; a < spec->input_rank; a++)
            p *= spec->input_shape[a];
        if (p != dim)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.input_shape: %zu features but the dataset has %zu", p, dim);
        *in_rank = spec->input_rank;
        memcpy(in_shape, spec->input_shape, 3 * sizeof(size_t));
    } else if (sh[0] != 0 && sh[0] * sh[1] * (sh[2] ? sh[2] : 1) == dim) {
        *in_rank = 3;
        in_shape[0] = sh[0], in_shape[1] = sh[1], in_shape[2] = sh[2] ? sh[2] : 1;
    } else {
        *in_rank = 1;
        in_shape[0] = dim;
    }
    return MT_OK;
}

/* A tokens dataset's vocabulary travels with every checkpoint (and so with exports). */
static mt_code input_save_tokenizer(const input_run *in, mt_spmd *s, mt_err *err)
{
    const mt_text_tokenizer *tok = mt_data_dataset_tokenizer(in->dset);
    char *text = NULL;
    size_t len = 0;
    mt_code rc;

    if (tok == NULL)
        return MT_OK;
    rc = mt_text_tokenizer_save(tok, &text, &len, err);
    if (rc == MT_OK)
        rc = mt_spmd_set_meta(s, "meshtrain.tokenizer", text, err);
    mt_free(text);
    return rc;
}

/* The CPUs this process may run on (its affinity mask; the online CPUs if that cannot be read). */
static int cores_available(void)
{
    cpu_set_t set;
    long n;

    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/*
 * The prefetch depth when the spec's dataset section leaves it out: the pipeline's thread
 * (depth 2) unless the job's device threads on this host (every rank is one) fill its cores and
 * some of them run in other processes. Then the thread can only run by preempting a device
 * thread, and that device's partners in the other processes spin at the next collective until it
 * is back; building each step in the device's own thread costs the same CPU and preempts nobody.
 * Devices of one process wait for each other asleep, which leaves the thread a core (1 worker
 * x 2 devices is faster with it), and so does a host with a core to spare.
 */
static size_t auto_prefetch(const mt_data_spec *ds, const mt_mesh *mesh, mt_coll_world *world)
{
    int local = 0, host, cores = cores_available();
    size_t depth;

    if (ds->prefetch_set)
        return ds->prefetch;
    for (int r = 0; world != NULL && r < mt_coll_world_size(world); r++)
        local += mt_coll_world_comm(world, r) != NULL;
    if (world == NULL)
        local = mt_mesh_num_devices(mesh);
    host = world != NULL ? mt_coll_world_host_ranks(world) : local;
    depth = host > local && host >= cores ? 0 : 2;
    mt_log_info("input: prefetch %zu (dataset.prefetch not set; %d device thread%s of the job on "
                "this host, %d in other processes, %d core%s)",
                depth, host, host == 1 ? "" : "s", host - local, cores, cores == 1 ? "" : "s");
    return depth;
}

/* Open this process's pipeline once the trainer knows the mesh placement. */
static mt_code input_open_pipeline(input_run *in, const mt_mesh *mesh, const mt_layout_map *map,
                                   mt_coll_world *world, const int *rank_process, mt_err *err)
{
    mt_data_pipeline_opts po;
    mt_code rc;

    in->ic.global_batch = in->B;
    rc = input_ctx(mesh, map, world, rank_process, &in->ic, err);
    in->R = in->ic.num_pipelines * in->ic.replicas_per_pipeline;
    if (rc != MT_OK)
        return rc;
    mt_data_pipeline_opts_from_spec(in->ds, &po);
    po.prefetch = auto_prefetch(in->ds, mesh, world);
    po.permute = in->ds->shuffle_buffer == 0; /* the engine's full reshuffle per epoch */
    po.contiguous_replicas = true;
    po.leaf_examples = in->leaf;
    rc = mt_data_pipeline_open(in->dset, &in->ic, &po, &in->pipe, err);
    if (rc == MT_OK && ((in->pieces = mt_calloc(in->R + 1, sizeof(*in->pieces))) == NULL ||
                        (in->next = mt_calloc(in->R + 1, sizeof(*in->next))) == NULL))
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "input: out of memory");
    return rc;
}

/* Whether replica g's examples are piece g of the one-device global batch (DATA + global batching,
 * contiguous replicas): then its plan range is (pipeline g % N, replica g / N), as core/data's
 * pipeline assembles it. */
static bool input_data_global(const input_run *in)
{
    return mt_data_plan_policy(mt_data_pipeline_plan(in->pipe)) == MT_DATA_SHARD_DATA &&
           in->ds->batching == MT_DATA_BATCH_GLOBAL;
}

/* Fill in->pieces from one pipeline step (NULL: this pipeline has run out: empty pieces). */
static void input_pieces(input_run *in, const mt_data_step *st, size_t s)
{
    const mt_data_plan *plan = mt_data_pipeline_plan(in->pipe);
    size_t N = in->ic.num_pipelines, L = in->ic.replicas_per_pipeline, w = in->ic.pipeline_id;
    size_t c = (in->B + in->R - 1) / in->R;
    bool data_global = input_data_global(in);

    memset(in->pieces, 0, in->R * sizeof(*in->pieces));
    for (size_t l = 0; st != NULL && l < L; l++) {
        size_t g = w * L + l, start = 0, len;
        mt_spmd_piece *pc = &in->pieces[g];
        pc->x = st->replicas[l].x;
        pc->y = st->replicas[l].t_dim > 0 ? NULL : st->replicas[l].y;
        pc->t = st->replicas[l].t;
        pc->n = st->replicas[l].n;
        /* dropout key: the example's position in the epoch (exact under DATA + global, where
         * it equals the one-device position; nominal otherwise) */
        if (data_global)
            mt_data_plan_range(plan, g % N, s, g / N, &start, &len);
        else
            start = s * in->B + g * c;
        pc->first_example = start;
        /* one pipeline with global batching lays the replicas' batches out in order too */
        pc->global_order = data_global || (N == 1 && in->ds->batching == MT_DATA_BATCH_GLOBAL);
    }
}

/* in->next: the sizes of this process's pieces at step s of the epoch, from the plan (the
 * pipeline assembles exactly these ranges), announced one step ahead (mt_spmd_step_pieces_next). */
static void input_next(input_run *in, size_t s)
{
    const mt_data_plan *plan = mt_data_pipeline_plan(in->pipe);
    size_t N = in->ic.num_pipelines, L = in->ic.replicas_per_pipeline, w = in->ic.pipeline_id;
    bool data_global = input_data_global(in);

    memset(in->next, 0, in->R * sizeof(*in->next));
    for (size_t l = 0; l < L; l++) {
        size_t g = w * L + l, start;
        if (data_global)
            mt_data_plan_range(plan, g % N, s, g / N, &start, &in->next[g]);
        else
            mt_data_plan_range(plan, w, s, l, &start, &in->next[g]);
    }
}

mt_code mt_spmd_run_pipeline(const mt_job_spec *spec, const cJSON *dataset, const char *base_dir,
                             const mt_mesh *mesh, const mt_layout_map *map,
                             const mt_spmd_run_opts *o, const int *rank_process,
                             mt_train_progress_fn progress, void *ctx, mt_train_result *res,
                             mt_err *err)
{
    input_run in;
    run_ctx r = {NULL, o, ctx, 0, 0, 0, true, progress, spec->digest_every, ""};
    mt_train_progress_fn prog = progress;
    void *pctx = ctx;
    bool agree = false;
    size_t in_shape[3] = {0, 0, 0}, per_epoch;
    int in_rank = 0;
    int64_t epochs, cap, step = 0, e0 = 0, s0 = 0;
    double train_s = 0.0;
    size_t train_examples = 0;
    mt_loss_shape out = {1, 1};
    mt_code rc;

    memset(res, 0, sizeof(*res));
    memset(&in, 0, sizeof(in));
    in.B = spec->batch_size;
    if (spec->reproducibility == MT_REPRO_MESH_INVARIANT)
        in.leaf = spec->batch_size / (size_t)mt_repro_leaves(spec->batch_size);
    if (o->save_dir != NULL && mkdir(o->save_dir, 0755) != 0 && errno != EEXIST)
        return mt_err_set(err, errno == EACCES ? MT_PERMISSION_DENIED : MT_NOT_FOUND,
                          "checkpoint directory %s: %s", o->save_dir, strerror(errno));
    rc = input_open_data(&in, spec, dataset, base_dir, err);
    if (rc != MT_OK)
        goto done;
    rc = input_open_pipeline(&in, mesh, map, o->world, rank_process, err);
    if (rc == MT_OK)
        rc = input_shape(spec, in.pipe, &in_rank, in_shape, err);
    if (rc == MT_OK)
        rc = mt_spmd_new(spec, mesh, map, in_rank, in_shape, in.B, o->world, &r.s, err);
    if (rc == MT_OK)
        rc = input_save_tokenizer(&in, r.s, err);
    if (rc == MT_OK)
        rc = mt_spmd_check_data(r.s, mt_data_pipeline_label_dim(in.pipe),
                                mt_data_pipeline_target_dim(in.pipe), err);
    if (rc != MT_OK)
        goto done;
    out = mt_spmd_output_shape(r.s);
    agree = stop_needs_agreement(&r); /* as mt_spmd_run_data: stop checkpoints in step */
    if (agree)
        prog = run_progress, pctx = &r;
    if (o->resume != NULL) {
        mt_spmd_position p;
        rc = mt_spmd_restore(r.s, o->resume, &p, err);
        if (rc != MT_OK)
            goto done;
        step = (int64_t)p.step;
        e0 = (int64_t)p.epoch;
        s0 = (int64_t)(p.input_position / in.B);
        mt_log_info("resumed %s at step %lld (epoch %lld, example %llu)", o->resume,
                    (long long)step, (long long)e0 + 1, (unsigned long long)p.input_position);
    }
    if ((rc = start_together(&r, step, err)) != MT_OK)
        goto done;
    per_epoch = mt_data_pipeline_steps(in.pipe);
    if (per_epoch == 0) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: the training set is empty");
        goto done;
    }
    {
        mt_train_options topt = {o->epochs, o->steps};
        mt_train_start st0 = {step, e0, (size_t)s0 * in.B, NULL};
        mt_train_run_bounds(spec, &topt, o->resume != NULL ? &st0 : NULL, (int64_t)per_epoch,
                            &epochs, &cap);
    }
    for (int64_t e = e0; e < epochs && step < cap; e++) {
        mt_train_progress p = {.event = MT_TRAIN_STEP,
                               .epoch = e + 1,
                               .epochs = epochs,
                               .step = step,
                               .epoch_steps = (int64_t)per_epoch};
        mt_train_epoch_acc acc;
        int64_t s_first = e == e0 ? s0 : 0;
        mt_train_epoch_acc_init(&acc, &spec->loss, &out);
        if (cap - step < (int64_t)per_epoch - s_first)
            p.epoch_steps = s_first + (cap - step);
        if ((rc = mt_data_pipeline_start_epoch(in.pipe, (size_t)e, err)) != MT_OK)
            goto done;
        for (int64_t s = 0; s < p.epoch_steps; s++) {
            const mt_data_step *st = NULL;
            mt_step_metrics sm;
            size_t gc = 0;
            double t0 = now_s_run(), dt;
            bool end;
            rc = mt_data_pipeline_next(in.pipe, &st, err);
            if (rc == MT_OUT_OF_RANGE)
                st = NULL; /* this pipeline ran out: empty batches until all agree */
            else if (rc != MT_OK)
                goto done;
            if (s < s_first)
                continue; /* resumed inside this epoch: skip the steps already trained */
            input_pieces(&in, st, (size_t)s);
            /* the next step's sizes ride in this step's gradient allreduce (no count collective
             * of its own); the first step of an epoch agrees on its count by itself */
            if (s + 1 < p.epoch_steps)
                input_next(&in, (size_t)s + 1);
            rc = mt_spmd_step_pieces_next(r.s, in.pieces, s + 1 < p.epoch_steps ? in.next : NULL,
                                          (uint64_t)step, &gc, &sm, err);
            if (rc == MT_OUT_OF_RANGE) {
                rc = MT_OK; /* every replica is out of data: the epoch ends here for all */
                break;
            }
            if (rc != MT_OK)
                goto done;
            dt = now_s_run() - t0;
            step++;
            mt_train_progress_add(&p, &acc, step, s + 1, gc, &sm, dt);
            end = (size_t)s + 1 == per_epoch;
            if ((rc = run_after_step(&r, step, end ? e + 1 : e, end ? 0 : ((size_t)s + 1) * in.B,
                                     step >= cap, false, err)) != MT_OK)
                goto done;
            if (prog != NULL && (rc = prog(pctx, &p)) != MT_OK) {
                mt_err_set(err, rc, "training stopped at step %lld", (long long)step);
                goto done;
            }
        }
        train_s += acc.seconds;
        train_examples += acc.seen;
        if (in.test.n > 0) {
            double sums[MT_LOSS_NSUMS] = {0}, hist[2 * MT_LOSS_AUC_BINS];
            bool auc = (spec->loss.metrics & (1u << MT_METRIC_AUC)) != 0;
            memset(hist, 0, sizeof(hist));
            rc = mt_spmd_evaluate_sums(r.s, in.test.images,
                                       in.test.targets != NULL ? NULL : in.test.labels,
                                       in.test.targets, in.test.n, sums, auc ? hist : NULL, err);
            if (rc != MT_OK)
                goto done;
            mt_loss_metrics(&spec->loss, &out, sums, auc ? hist : NULL, (double)in.test.n, &p.test);
            p.has_test = res->has_test = true;
            res->test = p.test;
            p.test_loss = p.test.loss;
            p.test_accuracy = p.test.value[MT_METRIC_ACCURACY];
        }
        p.event = MT_TRAIN_EPOCH_END;
        res->epochs = e + 1;
        res->test_loss = p.test_loss;
        res->test_accuracy = p.test_accuracy;
        if (prog != NULL && (rc = prog(pctx, &p)) != MT_OK) {
            mt_err_set(err, rc, "training stopped after epoch %lld", (long long)(e + 1));
            goto done;
        }
    }
    res->steps = step;
    res->examples_per_sec = train_s > 0 ? (double)train_examples / train_s : 0.0;
done:
    /* stopped by progress (cancel, shutdown): checkpoint the last step when asked to (with
     * agreement, run_progress did it in step with the other processes) */
    if (rc != MT_OK && r.s != NULL && !agree && !r.saved && o->save_dir != NULL &&
        o->save_on_stop != NULL && o->save_on_stop(ctx) &&
        !(o->world != NULL && mt_spmd_save_needs_gather(r.s)))
        save_ckpt(&r, r.step, r.epoch, r.pos, false, NULL);
    input_run_fini(&in);
    mt_spmd_free(r.s);
    return rc;
}

mt_code mt_spmd_train(const mt_spmd_job *job, const mt_spmd_run_opts *o,
                      mt_train_progress_fn progress, void *ctx, mt_train_result *res, mt_err *err)
{
    mt_idx_set train, test, val;
    size_t in_shape[3] = {0, 0, 0};
    int in_rank = 0;
    mt_code rc;

    if (mt_spmd_uses_pipeline(job->spec))
        return mt_spmd_run_pipeline(job->spec, job->dataset, job->base_dir, job->mesh, job->layouts,
                                    o, job->rank_process, progress, ctx, res, err);
    rc = mt_spmd_load_data(job->spec, job->dataset, job->base_dir, &train, &test, &val, &in_rank,
                           in_shape, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_spmd_run_data(job->spec, job->mesh, job->layouts, o, &train, val.n > 0 ? &val : NULL,
                          &test, in_rank, in_shape, progress, ctx, res, err);
    mt_idx_set_fini(&train);
    mt_idx_set_fini(&test);
    mt_idx_set_fini(&val);
    return rc;
}
