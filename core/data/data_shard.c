/* SPDX-License-Identifier: MIT */
/*
 * data_shard.c — shard policies, tf.distribute rebatching, the per-epoch plan and the shuffle.
 *
 * Called by the pipeline (data_pipeline.c), by `meshtrain plan` and by tests; calls nothing but
 * the logger. Everything here is arithmetic on example counts, so every pipeline of a job
 * computes the same plan without talking to the others, and the property tests need no files.
 *
 * DESIGN (N pipelines, L replicas per pipeline, R = N·L, global batch B):
 *   global batching, FILE/OFF: pipeline w batches its own stream S_w by B, cuts every batch into
 *     R pieces (mt_data_rebatch_split) and hands the pieces out in order, L per step — the
 *     tf.data guide's "worker 0 sees [0,1],[2,3],[4],[5]".
 *   global batching, DATA: the whole stream is batched by B; step s is global batch s and
 *     replica l of pipeline w gets piece l·N + w of it (= every N-th rebatched piece).
 *   per-replica batching: b = B / R; pipeline w batches S_w by b; replica l at step s gets
 *     batch s·L + l.
 *   Steps per epoch = the maximum over pipelines; a replica past its data gets an empty batch
 *   (get_next_as_optional: the epoch ends when no replica has data left).
 * Threading: a plan is immutable after mt_data_plan_new. Tests: tests/unit/test_data_shard.c.
 */
#include <string.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"
#include "log/mt_log.h"

void mt_data_rebatch_split(size_t n, size_t replicas, size_t r, size_t *start, size_t *len)
{
    size_t c = (n + replicas - 1) / replicas;
    size_t s = r * c < n ? r * c : n;
    *start = s;
    *len = c < n - s ? c : n - s;
}

mt_data_shard_policy mt_data_shard_resolve(mt_data_shard_policy p, size_t num_files,
                                           size_t num_pipelines)
{
    if (p != MT_DATA_SHARD_AUTO)
        return p;
    if (num_files >= num_pipelines) {
        mt_log_info("data: shard_policy auto -> file (%zu files over %zu pipelines)", num_files,
                    num_pipelines);
        return MT_DATA_SHARD_FILE;
    }
    mt_log_info("data: shard_policy auto -> data (%zu file(s) < %zu pipelines)", num_files,
                num_pipelines);
    return MT_DATA_SHARD_DATA;
}

size_t mt_data_input_ctx_num_replicas(const mt_data_input_ctx *ctx)
{
    return ctx->num_pipelines * ctx->replicas_per_pipeline;
}

mt_code mt_data_input_ctx_per_replica_batch(const mt_data_input_ctx *ctx, size_t *out, mt_err *err)
{
    size_t r = mt_data_input_ctx_num_replicas(ctx);
    *out = 0;
    if (r == 0 || ctx->global_batch % r != 0 || ctx->global_batch == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "batch_size %zu is not divisible by the %zu replicas in sync",
                          ctx->global_batch, r);
    *out = ctx->global_batch / r;
    return MT_OK;
}

struct mt_data_plan {
    mt_data_plan_opts o; /* policy resolved */
    size_t n_files;
    size_t total;       /* examples in all files */
    size_t *stream_len; /* owned; per pipeline */
    size_t raw_steps;   /* steps before dropping the ones where every replica is empty */
    size_t steps;       /* steps that carry at least one example */
    size_t *step_map;   /* owned; steps entries: the raw step of each step */
    size_t *counts;     /* owned; steps entries: examples in each global batch */
};

void mt_data_plan_free(mt_data_plan *plan)
{
    if (plan == NULL)
        return;
    mt_free(plan->stream_len);
    mt_free(plan->step_map);
    mt_free(plan->counts);
    mt_free(plan);
}

/* Global batches of a stream of n examples. */
static size_t num_global_batches(const mt_data_plan *p, size_t n)
{
    size_t B = p->o.global_batch;
    return n / B + (n % B != 0 && !p->o.drop_remainder);
}

/* Per-replica batches of a stream of n examples (batch b). */
static size_t num_replica_batches(const mt_data_plan *p, size_t n, size_t b)
{
    return n / b + (n % b != 0 && !p->o.drop_remainder);
}

/* Piece `piece` of a stream of n examples batched by B and cut into R pieces per batch. */
static void global_piece(const mt_data_plan *p, size_t n, size_t piece, size_t *start, size_t *len)
{
    size_t B = p->o.global_batch, R = p->o.num_pipelines * p->o.replicas_per_pipeline;
    size_t g = piece / R, full = n / B, s0;

    if (g >= num_global_batches(p, n)) {
        *start = n;
        *len = 0;
        return;
    }
    if (p->o.leaf_examples > 0 && B % p->o.leaf_examples == 0 &&
        (B / p->o.leaf_examples) % R == 0) {
        /* mesh_invariant: whole leaves per replica, also in a short batch */
        size_t m = g < full ? B : n % B, own = B / R, a = (piece % R) * own;
        s0 = a < m ? a : m;
        *len = (a + own < m ? a + own : m) - s0;
    } else {
        mt_data_rebatch_split(g < full ? B : n % B, R, piece % R, &s0, len);
    }
    *start = g * B + s0;
}

static void raw_range(const mt_data_plan *p, size_t w, size_t step, size_t l, size_t *start,
                      size_t *len);

/* Keep the raw steps that carry at least one example (a step where every replica would get an
 * empty batch — e.g. B < R under FILE — is skipped by every pipeline alike). */
static mt_code plan_map_steps(mt_data_plan *p, mt_err *err, mt_data_plan **out)
{
    size_t n = 0;

    p->step_map = mt_malloc(p->raw_steps * sizeof(size_t) + 1);
    p->counts = mt_malloc(p->raw_steps * sizeof(size_t) + 1);
    if (p->step_map == NULL || p->counts == NULL) {
        mt_data_plan_free(p);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "data plan: out of memory");
    }
    for (size_t s = 0; s < p->raw_steps; s++) {
        size_t sum = 0, st, len;
        for (size_t w = 0; w < p->o.num_pipelines; w++)
            for (size_t l = 0; l < p->o.replicas_per_pipeline; l++) {
                raw_range(p, w, s, l, &st, &len);
                sum += len;
            }
        if (sum == 0)
            continue;
        p->step_map[n] = s;
        p->counts[n++] = sum;
    }
    p->steps = n;
    *out = p;
    return MT_OK;
}

mt_code mt_data_plan_new(const size_t *sizes, size_t n_files, const mt_data_plan_opts *o,
                         mt_data_plan **out, mt_err *err)
{
    size_t N = o->num_pipelines, L = o->replicas_per_pipeline, R = N * L;
    mt_data_plan *p;

    *out = NULL;
    if (N == 0 || L == 0 || o->global_batch == 0 || n_files == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "data plan: need >= 1 pipeline, replica, file and batch_size (got %zu, "
                          "%zu, %zu, %zu)",
                          N, L, n_files, o->global_batch);
    if (o->batching == MT_DATA_BATCH_PER_REPLICA && o->global_batch % R != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "batching per_replica: batch_size %zu is not divisible by the %zu "
                          "replicas in sync",
                          o->global_batch, R);
    if (o->policy == MT_DATA_SHARD_FILE && n_files < N)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "shard_policy file: %zu file(s) for %zu input pipelines; use \"data\" "
                          "or \"auto\"",
                          n_files, N);
    p = mt_calloc(1, sizeof(*p));
    if (p == NULL || (p->stream_len = mt_calloc(N, sizeof(size_t))) == NULL) {
        mt_free(p);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "data plan: out of memory");
    }
    p->o = *o;
    p->o.policy = mt_data_shard_resolve(o->policy, n_files, N);
    p->n_files = n_files;
    for (size_t f = 0; f < n_files; f++)
        p->total += sizes[f];
    for (size_t w = 0; w < N; w++) {
        size_t n = 0;
        if (p->o.policy == MT_DATA_SHARD_FILE) {
            for (size_t f = w; f < n_files; f += N)
                n += sizes[f];
        } else if (p->o.policy == MT_DATA_SHARD_DATA && o->batching == MT_DATA_BATCH_PER_REPLICA) {
            n = p->total > w ? (p->total - w + N - 1) / N : 0;
        } else {
            n = p->total;
        }
        p->stream_len[w] = n;
    }
    for (size_t w = 0; w < N; w++) {
        size_t s;
        if (o->batching == MT_DATA_BATCH_PER_REPLICA)
            s = (num_replica_batches(p, p->stream_len[w], o->global_batch / R) + L - 1) / L;
        else if (p->o.policy == MT_DATA_SHARD_DATA)
            s = num_global_batches(p, p->total);
        else
            s = num_global_batches(p, p->stream_len[w]) * N;
        p->raw_steps = s > p->raw_steps ? s : p->raw_steps;
    }
    return plan_map_steps(p, err, out);
}

mt_data_shard_policy mt_data_plan_policy(const mt_data_plan *p)
{
    return p->o.policy;
}

size_t mt_data_plan_steps(const mt_data_plan *p)
{
    return p->steps;
}

bool mt_data_plan_reads_file(const mt_data_plan *p, size_t w, size_t f)
{
    if (f >= p->n_files || w >= p->o.num_pipelines)
        return false;
    return p->o.policy != MT_DATA_SHARD_FILE || f % p->o.num_pipelines == w;
}

size_t mt_data_plan_stream_len(const mt_data_plan *p, size_t w)
{
    return w < p->o.num_pipelines ? p->stream_len[w] : 0;
}

void mt_data_plan_range(const mt_data_plan *p, size_t w, size_t step, size_t l, size_t *start,
                        size_t *len)
{
    *start = 0;
    *len = 0;
    if (step >= p->steps)
        return;
    raw_range(p, w, p->step_map[step], l, start, len);
}

static void raw_range(const mt_data_plan *p, size_t w, size_t step, size_t l, size_t *start,
                      size_t *len)
{
    size_t N = p->o.num_pipelines, L = p->o.replicas_per_pipeline, R = N * L;
    size_t n;

    *start = 0;
    *len = 0;
    if (w >= N || l >= L || step >= p->raw_steps)
        return;
    n = p->stream_len[w];
    if (p->o.batching == MT_DATA_BATCH_PER_REPLICA) {
        size_t b = p->o.global_batch / R, k = step * L + l;
        if (k >= num_replica_batches(p, n, b)) {
            *start = n;
            return;
        }
        *start = k * b;
        *len = b < n - *start ? b : n - *start;
    } else if (p->o.policy == MT_DATA_SHARD_DATA) {
        global_piece(p, n, step * R + l * N + w, start, len);
    } else {
        global_piece(p, n, step * L + l, start, len);
    }
}

size_t mt_data_plan_global_count(const mt_data_plan *p, size_t step)
{
    return step < p->steps ? p->counts[step] : 0;
}

/* ------------------------------------------------------------------ shuffle */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void mt_data_shuffle(uint32_t *order, size_t n, size_t buffer, uint64_t seed, uint64_t epoch,
                     uint32_t *scratch)
{
    uint64_t st = seed;
    size_t k = buffer < n ? buffer : n, next, count, i = 0;

    if (buffer <= 1 || n <= 1)
        return;
    st = splitmix64(&st) ^ (epoch * 0xD1B54A32D192ED03ull);
    memcpy(scratch, order, k * sizeof(*order));
    next = k;
    count = k;
    /* Output i never overtakes input `next` (i < next), so writing in place is safe. */
    while (count > 0) {
        size_t j = (size_t)(((splitmix64(&st) >> 32) * (uint64_t)count) >> 32);
        order[i++] = scratch[j];
        if (next < n)
            scratch[j] = order[next++];
        else
            scratch[j] = scratch[--count];
    }
}
