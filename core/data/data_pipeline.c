/* SPDX-License-Identifier: MIT */
/*
 * data_pipeline.c — one input pipeline per worker: decode its files, shuffle per epoch, assemble
 * steps (one batch per local replica) on a background prefetch thread (contract in mt_data.h).
 *
 * Called by the worker's task runner and the local trainer; calls the plan (data_shard.c) and the
 * dataset (data_source.c). The files a pipeline reads are decoded once at open and kept (as
 * tf.data's cache() would), so errors surface before the first step and epochs cost no I/O.
 *
 * DESIGN: a ring of depth = `prefetch` + 1 preallocated slots (the steps ahead plus the one the
 * consumer holds); slot k % depth holds step k. Steps are claimed in order (`claimed`) by whoever
 * builds them: the pipeline's thread (created at the first epoch, kept across epochs), and the
 * consumer itself when the step it needs is not ready and a slot is free (a consumer that
 * outruns the thread works instead of sleeping, so prefetch never delivers less than building
 * synchronously). Only steps consumed..consumed+depth-1 are claimable, which never include the
 * slot the consumer holds. A side is signalled only when it sleeps (`*_waiting`), and the
 * consumer wakes the thread only when at most half of the prefetched steps are left, so the
 * thread fills several slots per wake-up and a busy consumer pays a mutex lock per step, no
 * futex call. A step whose batches are contiguous rows of the decoded matrix (no shuffle, no
 * feature slice) is zero-copy: batches point into the matrix, and it is built in the caller (a
 * thread would only add a hand-off). Otherwise rows are gathered (and sliced) into the slot's
 * buffers: rows in shuffled order miss the caches, so the rows PREFETCH_ROWS examples ahead are
 * prefetched, and decoded 8-bit pixels (every value exactly q * (1/255)) are kept as bytes and
 * converted back while gathering (a quarter of the memory read, the same floats). Text is kept as
 * compressed sparse rows (`sp`): a slot row remembers which example it holds (`prev`), and
 * densifying the next one clears the old nonzeros and writes the new ones. Threading: the caller's
 * thread plus one producer thread per pipeline; `mu` guards every field of the hand-off (claimed,
 * consumed, ready, building, active, quit, *_waiting); a slot's contents belong to its builder
 * until `ready` says its step, then to the consumer until `consumed` passes it. _start_epoch
 * quiesces the thread (waits until it builds nothing) before it reshuffles; _free joins it. Tests:
 * tests/unit/test_data_pipeline.c (runs under ASan in `make asan`).
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "alloc/mt_alloc.h"
#include "data/data_int.h"
#include "log/mt_log.h"
#include "rng/mt_rng.h"

typedef struct slot {
    size_t ready; /* step + 1 when the slot holds that built step, else 0 (guarded by mu) */
    mt_data_step step;
    mt_data_batch *batches; /* L */
    float *x;               /* L * max_batch * dim */
    int32_t *y;             /* L * max_batch * y_dim */
    float *t;               /* L * max_batch * t_dim float targets (NULL without) */
    float *aug;             /* dim_full: an augmented example before slicing (NULL without) */
    uint32_t *prev;         /* sparse: example whose nonzeros row r of x holds (NONE: all 0) */
} slot;

#define NONE UINT32_MAX

struct mt_data_pipeline {
    mt_data_dataset *ds; /* borrowed */
    mt_data_plan *plan;  /* owned */
    mt_data_input_ctx ctx;
    mt_data_pipeline_opts opts;
    size_t dim_full, off, dim; /* decoded dim, delivered slice */
    size_t shape[3];           /* H, W, C of the examples (all 0: flat) */
    float *x;                  /* owned (n_local, dim_full): decoded examples, file order */
    uint8_t *x8;               /* owned: x as bytes q with x == q * (1/255) (then x == NULL) */
    mt_data__csr sp;           /* owned: the same as sparse rows (text); then x == NULL */
    int32_t *y;                /* owned (n_local, y_dim) */
    float *t;                  /* owned (n_local, t_dim) float targets, or NULL */
    size_t t_dim;              /* float targets per example (0: class labels) */
    size_t y_dim;              /* class labels per example (>= 1) */
    bool augment;              /* opts.augment asks for a flip or a crop */
    uint32_t *gidx;            /* owned (n_local) global example index (augment only) */
    size_t n_local;
    uint32_t *order;   /* owned (n_local): shuffled local indices, the pre-shard stream */
    uint32_t *scratch; /* owned: shuffle buffer */
    size_t max_batch;  /* largest replica batch */
    bool zero_copy;    /* batches can point into x */
    size_t depth;      /* slots */
    slot *slots;       /* owned; depth */
    /* prefetch thread and hand-off (guarded by mu unless said) */
    pthread_t th;
    bool th_running; /* caller's thread only */
    pthread_mutex_t mu;
    pthread_cond_t prod_cv; /* the thread waits here (prod_waiting) */
    pthread_cond_t cons_cv; /* the consumer waits here (cons_waiting) */
    size_t claimed;         /* next step to build */
    size_t consumed;        /* steps released by the consumer */
    size_t steps;           /* steps of the current epoch */
    bool active;            /* an epoch is being produced */
    bool building;          /* the thread is building a claimed step */
    bool quit;
    bool prod_waiting, cons_waiting;
    bool holding; /* consumer holds slot `consumed` (consumer thread only) */
    bool started;
    size_t epoch;
};

const mt_data_plan *mt_data_pipeline_plan(const mt_data_pipeline *p)
{
    return p->plan;
}

size_t mt_data_pipeline_steps(const mt_data_pipeline *p)
{
    return mt_data_plan_steps(p->plan);
}

size_t mt_data_pipeline_dim(const mt_data_pipeline *p)
{
    return p->dim;
}

void mt_data_pipeline_shape(const mt_data_pipeline *p, size_t shape[3])
{
    memcpy(shape, p->shape, sizeof(p->shape));
}

size_t mt_data_pipeline_target_dim(const mt_data_pipeline *p)
{
    return p->t_dim;
}

size_t mt_data_pipeline_label_dim(const mt_data_pipeline *p)
{
    return p->y_dim;
}

void mt_data_pipeline_opts_from_spec(const mt_data_spec *s, mt_data_pipeline_opts *o)
{
    o->policy = s->shard;
    o->batching = s->batching;
    o->drop_remainder = s->drop_remainder;
    o->shuffle_buffer = s->shuffle_buffer;
    o->seed = s->seed;
    o->prefetch = s->prefetch;
    o->permute = false;
    o->contiguous_replicas = false;
    o->augment = s->augment;
    o->leaf_examples = 0;
}

/* Local index of position i of this pipeline's stream S_w. */
static uint32_t stream_at(const mt_data_pipeline *p, size_t i)
{
    if (p->opts.batching == MT_DATA_BATCH_PER_REPLICA &&
        mt_data_plan_policy(p->plan) == MT_DATA_SHARD_DATA)
        return p->order[i * p->ctx.num_pipelines + p->ctx.pipeline_id];
    return p->order[i];
}

/* Positions of S_w for local replica l at step s (contiguous replica indices under DATA). */
static void replica_range(const mt_data_pipeline *p, size_t s, size_t l, size_t *start, size_t *len)
{
    size_t N = p->ctx.num_pipelines, g = p->ctx.pipeline_id * p->ctx.replicas_per_pipeline + l;

    if (p->opts.contiguous_replicas && p->opts.batching == MT_DATA_BATCH_GLOBAL &&
        mt_data_plan_policy(p->plan) == MT_DATA_SHARD_DATA)
        mt_data_plan_range(p->plan, g % N, s, g / N, start, len); /* piece g: same stream */
    else
        mt_data_plan_range(p->plan, p->ctx.pipeline_id, s, l, start, len);
}

/* Write sparse example ex's nonzeros inside the delivered slice into row (or zero them). */
static void put_row(const mt_data_pipeline *p, float *row, uint32_t ex, bool clear)
{
    const mt_data__csr *c = &p->sp;

    for (size_t j = c->ptr[ex]; j < c->ptr[ex + 1]; j++) {
        size_t f = (size_t)c->idx[j] - p->off; /* wraps above dim when idx < off */
        if (f < p->dim)
            row[f] = clear ? 0.0f : c->val[j];
    }
}

/*
 * Densify sparse example k into a slot row that holds example *prev (NONE: zeros): clear only the
 * previous example's nonzeros, then scatter k's, so a row costs its nonzeros, not dim.
 */
static void scatter_row(const mt_data_pipeline *p, float *row, uint32_t *prev, uint32_t k)
{
    if (*prev == k)
        return;
    if (*prev != NONE)
        put_row(p, row, *prev, true);
    put_row(p, row, k, false);
    *prev = k;
}

/* The value of pixel byte q as the 8-bit decoders write it (mt_idx, NPY u1, images). */
static float byte_value(uint8_t q)
{
    return (float)q * (1.0f / 255.0f);
}

/* dst[i] = byte_value(src[i]) for i < n: the same products, 16 at a time where SSE2 exists. */
static void bytes_to_floats(const uint8_t *src, float *dst, size_t n)
{
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i z = _mm_setzero_si128();
    const __m128 k = _mm_set1_ps(1.0f / 255.0f);

    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        __m128i lo = _mm_unpacklo_epi8(b, z), hi = _mm_unpackhi_epi8(b, z);
        _mm_storeu_ps(dst + i, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)), k));
        _mm_storeu_ps(dst + i + 4, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)), k));
        _mm_storeu_ps(dst + i + 8, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)), k));
        _mm_storeu_ps(dst + i + 12, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)), k));
    }
#endif
    for (; i < n; i++)
        dst[i] = byte_value(src[i]);
}

/* Back [a, a + n) with huge pages where the kernel lets a process ask (transparent huge pages in
 * `madvise` mode): one TLB entry then covers 2 MiB of rows instead of 4 KiB. Before the first
 * write; a refusal changes nothing but speed. */
static void huge_pages(void *a, size_t n)
{
#if defined(MADV_HUGEPAGE)
    const uintptr_t H = (uintptr_t)2 << 20;
    uintptr_t lo = ((uintptr_t)a + H - 1) & ~(H - 1), hi = ((uintptr_t)a + n) & ~(H - 1);

    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)a;
    (void)n;
#endif
}

/*
 * Keep the decoded examples as bytes when every value is, bit for bit, byte_value of one (pixels
 * decoded from 8 bits): a gathered row then reads a quarter of the memory (784 bytes instead of
 * 3,136 for Fashion-MNIST, rows scattered over the whole matrix) and the batch gets the very same
 * floats. Any other value keeps the floats. Out of memory only keeps the floats.
 */
static void compact_bytes(mt_data_pipeline *p)
{
    size_t n = p->n_local * p->dim_full;
    uint8_t *q = mt_malloc(n + 1);

    if (q == NULL)
        return;
    huge_pages(q, n);
    for (size_t i = 0; i < n; i++) {
        float v = p->x[i], r;
        uint32_t a, b;
        if (!(v >= 0.0f && v <= 1.0f))
            goto keep;
        q[i] = (uint8_t)(v * 255.0f + 0.5f);
        r = byte_value(q[i]);
        memcpy(&a, &v, sizeof(a));
        memcpy(&b, &r, sizeof(b));
        if (a != b)
            goto keep;
    }
    mt_free(p->x);
    p->x = NULL;
    p->x8 = q;
    return;
keep:
    mt_free(q);
}

/* Rows are gathered in shuffled order, each a fresh cache (and TLB) miss: the rows this many
 * examples ahead are requested before a row is copied, so the misses overlap. */
#define PREFETCH_ROWS 4

/* Where dense example k's delivered slice is stored, and its size in bytes (*n). */
static const char *row_bytes(const mt_data_pipeline *p, uint32_t k, size_t *n)
{
    if (p->x8 != NULL) {
        *n = p->dim;
        return (const char *)(p->x8 + (size_t)k * p->dim_full + p->off);
    }
    *n = p->dim * sizeof(float);
    return (const char *)(p->x + (size_t)k * p->dim_full + p->off);
}

/* The delivered slice of dense example k into row (slot sl's augmentation buffer at hand). */
static void dense_row(const mt_data_pipeline *p, slot *sl, uint32_t k, float *row)
{
    const float *src;

    if (p->x8 != NULL) {
        bytes_to_floats(p->x8 + (size_t)k * p->dim_full + p->off, row, p->dim);
        return;
    }
    src = p->x + (size_t)k * p->dim_full;
    if (p->augment) { /* the whole example, then its slice */
        mt_data__augment(&p->opts.augment, p->shape, p->opts.seed, p->epoch, p->gidx[k], src,
                         sl->aug);
        src = sl->aug;
    }
    memcpy(row, src + p->off, p->dim * sizeof(float));
}

/* Assemble step `s` into slot `sl`. Never fails: every buffer is sized at open. */
static void build_step(mt_data_pipeline *p, size_t s, slot *sl)
{
    size_t L = p->ctx.replicas_per_pipeline;

    sl->step.epoch = p->epoch;
    sl->step.step = s;
    sl->step.global_count = mt_data_plan_global_count(p->plan, s);
    sl->step.n_replicas = L;
    sl->step.replicas = sl->batches;
    for (size_t l = 0; l < L; l++) {
        mt_data_batch *b = &sl->batches[l];
        size_t start, len;
        replica_range(p, s, l, &start, &len);
        b->n = len;
        b->dim = p->dim;
        b->global_count = sl->step.global_count;
        b->t_dim = p->t_dim;
        b->y_dim = p->y_dim;
        b->t = NULL;
        if (len == 0) {
            b->x = NULL;
            b->y = NULL;
        } else if (p->zero_copy) {
            b->x = p->x + (size_t)p->order[start] * p->dim_full;
            b->y = p->y + (size_t)p->order[start] * p->y_dim;
            b->t = p->t != NULL ? p->t + (size_t)p->order[start] * p->t_dim : NULL;
        } else if (p->sp.ptr != NULL) {
            float *dx = sl->x + l * p->max_batch * p->dim;
            int32_t *dy = sl->y + l * p->max_batch * p->y_dim;
            uint32_t *prev = sl->prev + l * p->max_batch;
            for (size_t i = 0; i < len; i++) {
                uint32_t k = stream_at(p, start + i);
                scatter_row(p, dx + i * p->dim, &prev[i], k);
                memcpy(dy + i * p->y_dim, p->y + (size_t)k * p->y_dim, p->y_dim * sizeof(int32_t));
            }
            b->x = dx;
            b->y = dy;
        } else {
            float *dx = sl->x + l * p->max_batch * p->dim;
            int32_t *dy = sl->y + l * p->max_batch * p->y_dim;
            float *dt = sl->t != NULL ? sl->t + l * p->max_batch * p->t_dim : NULL;
            for (size_t i = 0; i < len; i++) {
                uint32_t k = stream_at(p, start + i);
                if (i + PREFETCH_ROWS < len) { /* in line: a callee only prefetching is pure */
                    size_t n;
                    const char *a = row_bytes(p, stream_at(p, start + i + PREFETCH_ROWS), &n);
                    for (size_t c = 0; c < n; c += 64)
                        __builtin_prefetch(a + c);
                }
                dense_row(p, sl, k, dx + i * p->dim);
                memcpy(dy + i * p->y_dim, p->y + (size_t)k * p->y_dim, p->y_dim * sizeof(int32_t));
                if (dt != NULL)
                    memcpy(dt + i * p->t_dim, p->t + (size_t)k * p->t_dim,
                           p->t_dim * sizeof(float));
            }
            b->x = dx;
            b->y = dy;
            b->t = dt;
        }
    }
}

/* Whether a step can be claimed now (mu held). */
static bool claimable(const mt_data_pipeline *p)
{
    return p->active && p->claimed < p->steps && p->claimed < p->consumed + p->depth;
}

/* Build step s (claimed by the caller) with mu released, then publish it (mu held again). */
static void build_claimed(mt_data_pipeline *p, size_t s)
{
    slot *sl = &p->slots[s % p->depth];

    pthread_mutex_unlock(&p->mu);
    build_step(p, s, sl);
    pthread_mutex_lock(&p->mu);
    sl->ready = s + 1;
}

static void *producer(void *arg)
{
    mt_data_pipeline *p = arg;

    pthread_setname_np(pthread_self(), "mt-data");
    pthread_mutex_lock(&p->mu);
    while (!p->quit) {
        if (!claimable(p)) {
            p->prod_waiting = true;
            pthread_cond_wait(&p->prod_cv, &p->mu);
            p->prod_waiting = false;
            continue;
        }
        p->building = true;
        build_claimed(p, p->claimed++);
        p->building = false;
        if (p->cons_waiting)
            pthread_cond_signal(&p->cons_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Stop producing (mu held): afterwards the thread builds nothing until the next epoch. */
static void quiesce(mt_data_pipeline *p)
{
    p->active = false;
    while (p->building) {
        p->cons_waiting = true;
        pthread_cond_wait(&p->cons_cv, &p->mu);
        p->cons_waiting = false;
    }
}

static void stop_thread(mt_data_pipeline *p)
{
    if (!p->th_running)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_signal(&p->prod_cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    p->th_running = false;
}

void mt_data_pipeline_free(mt_data_pipeline *p)
{
    if (p == NULL)
        return;
    stop_thread(p);
    pthread_cond_destroy(&p->prod_cv);
    pthread_cond_destroy(&p->cons_cv);
    pthread_mutex_destroy(&p->mu);
    for (size_t i = 0; p->slots != NULL && i < p->depth; i++) {
        mt_free(p->slots[i].batches);
        mt_free(p->slots[i].x);
        mt_free(p->slots[i].y);
        mt_free(p->slots[i].t);
        mt_free(p->slots[i].aug);
        mt_free(p->slots[i].prev);
    }
    mt_free(p->slots);
    mt_free(p->order);
    mt_free(p->scratch);
    mt_free(p->x);
    mt_free(p->x8);
    mt_free(p->y);
    mt_free(p->t);
    mt_free(p->gidx);
    mt_data__csr_fini(&p->sp);
    mt_data_plan_free(p->plan);
    mt_free(p);
}

/* Decode the files this pipeline reads into compressed sparse rows p->sp, labels p->y. */
static mt_code load_files_csr(mt_data_pipeline *p, size_t need, mt_err *err)
{
    size_t nf = mt_data_dataset_num_files(p->ds), at = 0;
    mt_data__csr *c = &p->sp;
    mt_code rc;

    c->ptr = mt_calloc(need + 1, sizeof(size_t));
    p->y = mt_malloc(need * sizeof(int32_t) + 1);
    if (c->ptr == NULL || p->y == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
    for (size_t f = 0; f < nf; f++) {
        mt_data__csr b;
        void *ni, *nv;
        if (!mt_data_plan_reads_file(p->plan, p->ctx.pipeline_id, f))
            continue;
        rc = mt_data__dataset_load_csr(p->ds, f, &b, err);
        if (rc != MT_OK)
            return rc;
        if (at > 0 && b.dim != c->dim) {
            size_t d = b.dim;
            mt_data__csr_fini(&b);
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: %zu features per example, earlier files have %zu",
                              mt_data_dataset_file_name(p->ds, f), d, c->dim);
        }
        c->dim = b.dim;
        ni = mt_realloc(c->idx, (c->nnz + b.nnz) * sizeof(uint32_t) + 1);
        if (ni != NULL)
            c->idx = ni;
        nv = ni == NULL ? NULL : mt_realloc(c->val, (c->nnz + b.nnz) * sizeof(float) + 1);
        if (nv == NULL) {
            mt_data__csr_fini(&b);
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
        }
        c->val = nv;
        if (b.nnz > 0) {
            memcpy(c->idx + c->nnz, b.idx, b.nnz * sizeof(uint32_t));
            memcpy(c->val + c->nnz, b.val, b.nnz * sizeof(float));
        }
        for (size_t i = 0; i < b.n; i++)
            c->ptr[at + i + 1] = c->nnz + b.ptr[i + 1];
        memcpy(p->y + at, b.y, b.n * sizeof(int32_t));
        c->nnz += b.nnz;
        at += b.n;
        mt_data__csr_fini(&b);
    }
    c->n = at;
    p->dim_full = c->dim;
    p->n_local = at;
    return MT_OK;
}

/* Copy block b (file f, first global index g0) to local position `at` of p->x / y / t / gidx. */
static void put_block(mt_data_pipeline *p, const mt_data_block *b, size_t at, size_t g0)
{
    memcpy(p->x + at * p->dim_full, b->x, b->n * b->dim * sizeof(float));
    memcpy(p->y + at * p->y_dim, b->y, b->n * p->y_dim * sizeof(int32_t));
    if (p->t != NULL)
        memcpy(p->t + at * p->t_dim, b->t, b->n * b->t_dim * sizeof(float));
    for (size_t i = 0; p->gidx != NULL && i < b->n; i++)
        p->gidx[at + i] = (uint32_t)(g0 + i);
}

/* Check that block b (file f) has the features and targets of the first file. */
static mt_code check_block(const mt_data_pipeline *p, const mt_data_block *b, size_t f, mt_err *err)
{
    if (b->dim != p->dim_full)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: %zu features per example, earlier files have %zu",
                          mt_data_dataset_file_name(p->ds, f), b->dim, p->dim_full);
    if (b->t_dim != p->t_dim)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: %zu targets per example, earlier files have %zu",
                          mt_data_dataset_file_name(p->ds, f), b->t_dim, p->t_dim);
    if ((b->y_dim ? b->y_dim : 1) != p->y_dim)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: %zu class labels per example, earlier files have %zu",
                          mt_data_dataset_file_name(p->ds, f), b->y_dim ? b->y_dim : 1, p->y_dim);
    return MT_OK;
}

/* Decode the files this pipeline reads into p->x / p->y / p->t (file order), or p->sp when
 * sparse; with augmentation also each example's global index p->gidx. */
static mt_code load_files(mt_data_pipeline *p, mt_err *err)
{
    size_t nf = mt_data_dataset_num_files(p->ds), need = 0, at = 0, g0 = 0;
    mt_code rc;

    p->y_dim = 1; /* until the first file says otherwise; sparse (text) files have one label */
    for (size_t f = 0; f < nf; f++)
        if (mt_data_plan_reads_file(p->plan, p->ctx.pipeline_id, f))
            need += mt_data_dataset_file_size(p->ds, f);
    if (need >= UINT32_MAX || (p->augment && mt_data_dataset_size(p->ds) >= UINT32_MAX))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: %zu examples exceed 2^32 - 1", need);
    if (mt_data__dataset_sparse(p->ds))
        return load_files_csr(p, need, err);
    if (p->augment && (p->gidx = mt_malloc(need * sizeof(uint32_t) + 1)) == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
    for (size_t f = 0; f < nf; g0 += mt_data_dataset_file_size(p->ds, f), f++) {
        mt_data_block b;
        if (!mt_data_plan_reads_file(p->plan, p->ctx.pipeline_id, f))
            continue;
        rc = mt_data_dataset_load(p->ds, f, &b, err);
        if (rc != MT_OK)
            return rc;
        if (p->x == NULL) {
            p->dim_full = b.dim;
            p->t_dim = b.t_dim;
            p->y_dim = b.y_dim ? b.y_dim : 1;
            memcpy(p->shape, b.shape, sizeof(p->shape));
            if (b.n == need) { /* one file: adopt its buffers */
                p->x = b.x;
                p->y = b.y;
                p->t = b.t;
                p->n_local = b.n;
                for (size_t i = 0; p->gidx != NULL && i < b.n; i++)
                    p->gidx[i] = (uint32_t)(g0 + i);
                return MT_OK;
            }
            p->x = mt_malloc(need * b.dim * sizeof(float) + 1);
            p->y = mt_malloc(need * p->y_dim * sizeof(int32_t) + 1);
            p->t = b.t_dim > 0 ? mt_malloc(need * b.t_dim * sizeof(float) + 1) : NULL;
            if (p->x == NULL || p->y == NULL || (b.t_dim > 0 && p->t == NULL)) {
                mt_data_block_fini(&b);
                return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
            }
        }
        rc = check_block(p, &b, f, err);
        if (rc == MT_OK)
            put_block(p, &b, at, g0);
        at += b.n;
        mt_data_block_fini(&b);
        if (rc != MT_OK)
            return rc;
    }
    p->n_local = at;
    return MT_OK;
}

/* The line that shows what this pipeline reads (the integration tests check it). */
static void log_share(const mt_data_pipeline *p)
{
    size_t nf = mt_data_dataset_num_files(p->ds), mine = 0;

    for (size_t f = 0; f < nf; f++)
        mine += mt_data_plan_reads_file(p->plan, p->ctx.pipeline_id, f);
    mt_log_info("data: pipeline %zu of %zu (shard_policy %s) reads %zu of %zu file(s), %zu of %zu "
                "examples",
                p->ctx.pipeline_id, p->ctx.num_pipelines,
                mt_data_shard_policy_name(mt_data_plan_policy(p->plan)), mine, nf, p->n_local,
                mt_data_dataset_size(p->ds));
}

static mt_code check_ctx(const mt_data_input_ctx *c, mt_err *err)
{
    if (c->num_pipelines == 0 || c->pipeline_id >= c->num_pipelines ||
        c->replicas_per_pipeline == 0 || c->global_batch == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "input context: pipeline %zu of %zu, %zu replica(s), batch %zu",
                          c->pipeline_id, c->num_pipelines, c->replicas_per_pipeline,
                          c->global_batch);
    return MT_OK;
}

static mt_code alloc_slots(mt_data_pipeline *p, mt_err *err)
{
    size_t L = p->ctx.replicas_per_pipeline;

    /* prefetch P: P steps ahead of the one the consumer holds (tf.data's prefetch(P) buffer) */
    p->depth = p->opts.prefetch > 0 && !p->zero_copy ? p->opts.prefetch + 1 : 1;
    p->slots = mt_calloc(p->depth, sizeof(*p->slots));
    if (p->slots == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "pipeline: out of memory");
    for (size_t i = 0; i < p->depth; i++) {
        slot *s = &p->slots[i];
        s->batches = mt_calloc(L, sizeof(*s->batches));
        if (s->batches == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "pipeline: out of memory");
        if (p->zero_copy)
            continue;
        s->y = mt_malloc(L * p->max_batch * p->y_dim * sizeof(int32_t) + 1);
        if ((p->t_dim > 0 &&
             (s->t = mt_malloc(L * p->max_batch * p->t_dim * sizeof(float) + 1)) == NULL) ||
            (p->augment && (s->aug = mt_malloc(p->dim_full * sizeof(float) + 1)) == NULL))
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "pipeline: out of memory");
        if (p->sp.ptr == NULL) {
            s->x = mt_malloc(L * p->max_batch * p->dim * sizeof(float) + 1);
        } else { /* sparse: rows start zeroed and are kept so (scatter_row) */
            s->x = mt_calloc(L * p->max_batch * p->dim + 1, sizeof(float));
            s->prev = mt_malloc(L * p->max_batch * sizeof(uint32_t) + 1);
            if (s->prev == NULL)
                return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "pipeline: out of memory");
            for (size_t r = 0; r < L * p->max_batch; r++)
                s->prev[r] = NONE;
        }
        if (s->x == NULL || s->y == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "pipeline: out of memory");
    }
    return MT_OK;
}

mt_code mt_data_pipeline_open(mt_data_dataset *ds, const mt_data_input_ctx *ctx,
                              const mt_data_pipeline_opts *opts, mt_data_pipeline **out,
                              mt_err *err)
{
    mt_data_plan_opts po;
    mt_data_pipeline *p;
    size_t R, buf;
    mt_code rc;

    *out = NULL;
    rc = check_ctx(ctx, err);
    if (rc != MT_OK)
        return rc;
    p = mt_calloc(1, sizeof(*p));
    if (p == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "pipeline: out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->prod_cv, NULL);
    pthread_cond_init(&p->cons_cv, NULL);
    p->ds = ds;
    p->ctx = *ctx;
    p->opts = *opts;
    p->augment = opts->augment.flip != MT_DATA_FLIP_NONE || opts->augment.crop_padding > 0;
    po.policy = opts->policy;
    po.batching = opts->batching;
    po.num_pipelines = ctx->num_pipelines;
    po.replicas_per_pipeline = ctx->replicas_per_pipeline;
    po.global_batch = ctx->global_batch;
    po.drop_remainder = opts->drop_remainder;
    po.leaf_examples = opts->leaf_examples;
    rc = mt_data_plan_new(mt_data_dataset_file_sizes(ds), mt_data_dataset_num_files(ds), &po,
                          &p->plan, err);
    if (rc == MT_OK)
        rc = load_files(p, err);
    if (rc != MT_OK)
        goto fail;
    log_share(p);
    if (p->augment &&
        (p->sp.ptr != NULL || p->shape[0] == 0 || p->opts.augment.crop_padding >= p->shape[0] ||
         p->opts.augment.crop_padding >= p->shape[1])) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "augment: needs image examples (H, W, C) larger than the crop padding "
                        "%zu; %s has shape %zux%zux%zu",
                        p->opts.augment.crop_padding, mt_data_dataset_file_name(ds, 0), p->shape[0],
                        p->shape[1], p->shape[2]);
        goto fail;
    }
    p->off = ctx->feature_offset;
    p->dim =
        ctx->feature_len ? ctx->feature_len : (p->off < p->dim_full ? p->dim_full - p->off : 0);
    if (p->off >= p->dim_full || p->dim == 0 || p->off + p->dim > p->dim_full) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "input context: feature slice [%zu, %zu) outside the %zu features", p->off,
                        p->off + p->dim, p->dim_full);
        goto fail;
    }
    R = mt_data_input_ctx_num_replicas(ctx);
    p->max_batch = opts->batching == MT_DATA_BATCH_PER_REPLICA ? ctx->global_batch / R
                                                               : (ctx->global_batch + R - 1) / R;
    p->zero_copy = p->sp.ptr == NULL && opts->shuffle_buffer <= 1 && !opts->permute &&
                   !p->augment && p->dim == p->dim_full &&
                   !(opts->batching == MT_DATA_BATCH_PER_REPLICA &&
                     mt_data_plan_policy(p->plan) == MT_DATA_SHARD_DATA && ctx->num_pipelines > 1);
    if (!p->zero_copy && p->sp.ptr == NULL && !p->augment)
        compact_bytes(p);
    buf = opts->shuffle_buffer < p->n_local ? opts->shuffle_buffer : p->n_local;
    p->order = mt_malloc(p->n_local * sizeof(uint32_t) + 1);
    p->scratch = mt_malloc(buf * sizeof(uint32_t) + 1);
    if (p->order == NULL || p->scratch == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "pipeline: out of memory");
        goto fail;
    }
    rc = alloc_slots(p, err);
    if (rc != MT_OK)
        goto fail;
    *out = p;
    return MT_OK;
fail:
    mt_data_pipeline_free(p);
    return rc;
}

/* Whether steps are built on the pipeline's thread (zero-copy steps are only pointers). */
static bool threaded(const mt_data_pipeline *p)
{
    return p->opts.prefetch > 0 && !p->zero_copy;
}

mt_code mt_data_pipeline_start_epoch(mt_data_pipeline *p, size_t epoch, mt_err *err)
{
    pthread_mutex_lock(&p->mu);
    quiesce(p);
    pthread_mutex_unlock(&p->mu);
    /* the thread builds nothing now: order and epoch are ours */
    if (p->opts.permute) {
        mt_rng_permutation(p->order, p->n_local, p->opts.seed, epoch);
    } else {
        for (size_t i = 0; i < p->n_local; i++)
            p->order[i] = (uint32_t)i;
        mt_data_shuffle(p->order, p->n_local, p->opts.shuffle_buffer, p->opts.seed, epoch,
                        p->scratch);
    }
    p->epoch = epoch;
    p->holding = false;
    p->started = false;
    if (threaded(p) && !p->th_running) {
        p->quit = false;
        if (pthread_create(&p->th, NULL, producer, p) != 0)
            return mt_err_set(err, MT_INTERNAL, "pipeline: cannot start the prefetch thread");
        p->th_running = true;
    }
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->depth; i++)
        p->slots[i].ready = 0;
    p->steps = mt_data_plan_steps(p->plan);
    p->claimed = 0;
    p->consumed = 0;
    p->active = true;
    if (p->prod_waiting)
        pthread_cond_signal(&p->prod_cv);
    pthread_mutex_unlock(&p->mu);
    p->started = true;
    return MT_OK;
}

mt_code mt_data_pipeline_next(mt_data_pipeline *p, const mt_data_step **out, mt_err *err)
{
    size_t k;
    slot *sl;

    *out = NULL;
    if (!p->started)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "pipeline: next before start_epoch");
    if (!threaded(p)) { /* synchronous: build in the caller, slot 0 */
        if (p->holding)
            p->consumed++;
        p->holding = false;
        if (p->consumed >= p->steps)
            return mt_err_set(err, MT_OUT_OF_RANGE, "pipeline: end of epoch %zu", p->epoch);
        build_step(p, p->consumed, &p->slots[0]);
        p->holding = true;
        *out = &p->slots[0].step;
        return MT_OK;
    }
    pthread_mutex_lock(&p->mu);
    if (p->holding) {
        p->consumed++;
        p->holding = false;
        /* refill when at most half of the prefetched steps are left: the thread then builds
           several steps per wake-up instead of one per step */
        if (p->prod_waiting && claimable(p) && p->claimed - p->consumed <= p->opts.prefetch / 2)
            pthread_cond_signal(&p->prod_cv);
    }
    k = p->consumed;
    if (k >= p->steps) {
        pthread_mutex_unlock(&p->mu);
        return mt_err_set(err, MT_OUT_OF_RANGE, "pipeline: end of epoch %zu", p->epoch);
    }
    sl = &p->slots[k % p->depth];
    while (sl->ready != k + 1) {
        if (claimable(p)) { /* the thread is behind: build a step here instead of sleeping */
            build_claimed(p, p->claimed++);
            continue;
        }
        p->cons_waiting = true;
        pthread_cond_wait(&p->cons_cv, &p->mu);
        p->cons_waiting = false;
    }
    p->holding = true;
    pthread_mutex_unlock(&p->mu);
    *out = &sl->step;
    return MT_OK;
}

mt_code mt_data_batch_copy_slice(const mt_data_batch *b, size_t offset, size_t len, float *dst,
                                 mt_err *err)
{
    if (offset > b->dim || len > b->dim - offset)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "feature slice [%zu, %zu) outside the batch's %zu features", offset,
                          offset + len, b->dim);
    for (size_t i = 0; i < b->n; i++)
        memcpy(dst + i * len, b->x + i * b->dim + offset, len * sizeof(float));
    return MT_OK;
}
