/* SPDX-License-Identifier: MIT */
/*
 * test_data_shard.c — shard policies, rebatching, end of data and the exactly-once property
 * (core/data/mt_data.h: plan and pipeline over in-memory datasets whose feature 0 is the
 * example's id, so batches print as the tf.data guide writes them).
 */
#include "mt_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "log/mt_log.h"

/* A dataset of files holding consecutive ids: sizes {6, 6} → [0..5], [6..11]. */
static mt_data_dataset *ids_dataset(const size_t *sizes, size_t nfiles)
{
    mt_data_block b[16];
    mt_data_dataset *ds = NULL;
    size_t id = 0;

    assert_true(nfiles <= 16);
    for (size_t f = 0; f < nfiles; f++) {
        memset(&b[f], 0, sizeof(b[f]));
        b[f].n = sizes[f];
        b[f].dim = 2;
        b[f].x = malloc(sizes[f] * 2 * sizeof(float) + 1);
        b[f].y = malloc(sizes[f] * sizeof(int32_t) + 1);
        for (size_t i = 0; i < sizes[f]; i++, id++) {
            b[f].x[2 * i] = (float)id;
            b[f].x[2 * i + 1] = (float)id + 0.5f;
            b[f].y[i] = (int32_t)(id % 10);
        }
    }
    assert_int_equal(mt_data_dataset_from_blocks(b, nfiles, &ds, NULL), MT_OK);
    for (size_t f = 0; f < nfiles; f++) {
        free(b[f].x);
        free(b[f].y);
    }
    return ds;
}

typedef struct run_cfg {
    size_t N, L, B;
    mt_data_shard_policy policy;
    mt_data_batching batching;
    bool drop;
    size_t shuffle;
    size_t prefetch;
} run_cfg;

/* Run one epoch of pipeline w and render it: "[0,1][2,3]" (L=1) or "[0,1|2,3]" (L=2). Also
 * checks the global count equals the plan's and that labels match the ids. */
static size_t render(mt_data_dataset *ds, const run_cfg *c, size_t w, size_t epoch, char *out,
                     size_t cap)
{
    mt_data_input_ctx ctx = {c->N, w, c->L, c->B, 0, 0};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_pipeline *p = NULL;
    const mt_data_step *st;
    mt_err err = MT_ERR_INIT;
    size_t used = 0, steps = 0;
    mt_code rc;

    o.policy = c->policy;
    o.batching = c->batching;
    o.drop_remainder = c->drop;
    o.shuffle_buffer = c->shuffle;
    o.seed = 42;
    o.prefetch = c->prefetch;
    rc = mt_data_pipeline_open(ds, &ctx, &o, &p, &err);
    if (rc != MT_OK)
        fail_msg("open: %s", err.msg);
    assert_int_equal(mt_data_pipeline_start_epoch(p, epoch, &err), MT_OK);
    out[0] = '\0';
    while ((rc = mt_data_pipeline_next(p, &st, &err)) == MT_OK) {
        assert_int_equal(st->step, steps);
        assert_int_equal(st->global_count,
                         mt_data_plan_global_count(mt_data_pipeline_plan(p), st->step));
        used += (size_t)snprintf(out + used, cap - used, "[");
        for (size_t l = 0; l < st->n_replicas; l++) {
            const mt_data_batch *b = &st->replicas[l];
            assert_int_equal(b->global_count, st->global_count);
            for (size_t i = 0; i < b->n; i++) {
                assert_int_equal(b->y[i], (int32_t)b->x[i * b->dim] % 10);
                used += (size_t)snprintf(out + used, cap - used, "%s%d", i ? "," : "",
                                         (int)b->x[i * b->dim]);
            }
            if (l + 1 < st->n_replicas)
                used += (size_t)snprintf(out + used, cap - used, "|");
        }
        used += (size_t)snprintf(out + used, cap - used, "]");
        steps++;
    }
    assert_int_equal(rc, MT_OUT_OF_RANGE);
    assert_int_equal(steps, mt_data_pipeline_steps(p));
    /* after the end it stays at the end */
    assert_int_equal(mt_data_pipeline_next(p, &st, NULL), MT_OUT_OF_RANGE);
    mt_data_pipeline_free(p);
    return steps;
}

/* ------------------------------------------------------------------ the guide's examples */

static void test_data_shard_file_guide_example(void **state)
{
    size_t sizes[] = {6, 6};
    mt_data_dataset *ds = ids_dataset(sizes, 2);
    run_cfg c = {2, 1, 4, MT_DATA_SHARD_FILE, MT_DATA_BATCH_GLOBAL, false, 0, 2};
    char s[512];
    (void)state;
    render(ds, &c, 0, 0, s, sizeof(s));
    assert_string_equal(s, "[0,1][2,3][4][5]");
    render(ds, &c, 1, 0, s, sizeof(s));
    assert_string_equal(s, "[6,7][8,9][10][11]");
    /* AUTO picks FILE here (2 files >= 2 pipelines) */
    c.policy = MT_DATA_SHARD_AUTO;
    render(ds, &c, 1, 0, s, sizeof(s));
    assert_string_equal(s, "[6,7][8,9][10][11]");
    mt_data_dataset_free(ds);
}

static void test_data_shard_data_guide_example(void **state)
{
    size_t sizes[] = {12};
    mt_data_dataset *ds = ids_dataset(sizes, 1);
    run_cfg c = {2, 1, 4, MT_DATA_SHARD_DATA, MT_DATA_BATCH_GLOBAL, false, 0, 2};
    char s[512];
    (void)state;
    render(ds, &c, 0, 0, s, sizeof(s));
    assert_string_equal(s, "[0,1][4,5][8,9]");
    render(ds, &c, 1, 0, s, sizeof(s));
    assert_string_equal(s, "[2,3][6,7][10,11]");
    /* AUTO falls back to DATA: one file for two pipelines */
    c.policy = MT_DATA_SHARD_AUTO;
    render(ds, &c, 1, 0, s, sizeof(s));
    assert_string_equal(s, "[2,3][6,7][10,11]");
    mt_data_dataset_free(ds);
}

static void test_data_shard_off_guide_example(void **state)
{
    size_t sizes[] = {12};
    mt_data_dataset *ds = ids_dataset(sizes, 1);
    run_cfg c = {2, 1, 4, MT_DATA_SHARD_OFF, MT_DATA_BATCH_GLOBAL, false, 0, 0};
    char s[512];
    (void)state;
    for (size_t w = 0; w < 2; w++) {
        assert_int_equal(render(ds, &c, w, 0, s, sizeof(s)), 6);
        assert_string_equal(s, "[0,1][2,3][4,5][6,7][8,9][10,11]");
    }
    mt_data_dataset_free(ds);
}

static void test_data_shard_file_needs_enough_files(void **state)
{
    size_t sizes[] = {12};
    mt_data_plan_opts o = {MT_DATA_SHARD_FILE, MT_DATA_BATCH_GLOBAL, 2, 1, 4, false, 0};
    mt_data_plan *p = (mt_data_plan *)1;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_data_plan_new(sizes, 1, &o, &p, &err), MT_INVALID_ARGUMENT);
    assert_null(p);
    assert_non_null(strstr(err.msg, "shard_policy file"));
    assert_int_equal(mt_data_shard_resolve(MT_DATA_SHARD_AUTO, 1, 2), MT_DATA_SHARD_DATA);
    assert_int_equal(mt_data_shard_resolve(MT_DATA_SHARD_AUTO, 3, 2), MT_DATA_SHARD_FILE);
    assert_int_equal(mt_data_shard_resolve(MT_DATA_SHARD_OFF, 1, 2), MT_DATA_SHARD_OFF);
    o.global_batch = 0;
    assert_int_equal(mt_data_plan_new(sizes, 1, &o, &p, &err), MT_INVALID_ARGUMENT);
}

/* ------------------------------------------------------------------ rebatching */

static void test_data_shard_rebatch_guide_examples(void **state)
{
    char s[512];
    mt_data_dataset *ds;
    (void)state;
    /* range(6).batch(4) over 2 replicas → [0,1],[2,3] then [4],[5] */
    size_t six[] = {6};
    run_cfg c = {1, 2, 4, MT_DATA_SHARD_OFF, MT_DATA_BATCH_GLOBAL, false, 0, 2};
    ds = ids_dataset(six, 1);
    render(ds, &c, 0, 0, s, sizeof(s));
    assert_string_equal(s, "[0,1|2,3][4|5]");
    mt_data_dataset_free(ds);
    /* range(4).batch(4) over 5 replicas → [0],[1],[2],[3],[] */
    size_t four[] = {4};
    run_cfg c5 = {1, 5, 4, MT_DATA_SHARD_OFF, MT_DATA_BATCH_GLOBAL, false, 0, 1};
    ds = ids_dataset(four, 1);
    render(ds, &c5, 0, 0, s, sizeof(s));
    assert_string_equal(s, "[0|1|2|3|]");
    mt_data_dataset_free(ds);
    /* range(8).batch(4) over 3 replicas → [0,1],[2,3],[] then [4,5],[6,7],[] */
    size_t eight[] = {8};
    run_cfg c3 = {1, 3, 4, MT_DATA_SHARD_OFF, MT_DATA_BATCH_GLOBAL, false, 0, 0};
    ds = ids_dataset(eight, 1);
    render(ds, &c3, 0, 0, s, sizeof(s));
    assert_string_equal(s, "[0,1|2,3|][4,5|6,7|]");
    mt_data_dataset_free(ds);
}

static void test_data_shard_rebatch_split_rule(void **state)
{
    size_t st, n;
    (void)state;
    mt_data_rebatch_split(2, 2, 0, &st, &n);
    assert_int_equal(st, 0);
    assert_int_equal(n, 1);
    mt_data_rebatch_split(2, 2, 1, &st, &n);
    assert_int_equal(st, 1);
    assert_int_equal(n, 1);
    mt_data_rebatch_split(4, 3, 2, &st, &n);
    assert_int_equal(st, 4);
    assert_int_equal(n, 0);
    mt_data_rebatch_split(0, 3, 1, &st, &n);
    assert_int_equal(n, 0);
}

/* The global count is what the loss divides by: 4 on full steps, the partial remainder else. */
static void test_data_shard_global_count_partial(void **state)
{
    size_t sizes[] = {6};
    mt_data_plan_opts o = {MT_DATA_SHARD_OFF, MT_DATA_BATCH_GLOBAL, 1, 2, 4, false, 0};
    mt_data_plan *p;
    (void)state;
    assert_int_equal(mt_data_plan_new(sizes, 1, &o, &p, NULL), MT_OK);
    assert_int_equal(mt_data_plan_steps(p), 2);
    assert_int_equal(mt_data_plan_global_count(p, 0), 4);
    assert_int_equal(mt_data_plan_global_count(p, 1), 2);
    assert_int_equal(mt_data_plan_global_count(p, 2), 0);
    mt_data_plan_free(p);
    /* FILE, 2 workers: step 0 = [0,1] + [6,7] = 4; step 2 = [4] + [10] = 2 */
    size_t two[] = {6, 6};
    mt_data_plan_opts f = {MT_DATA_SHARD_FILE, MT_DATA_BATCH_GLOBAL, 2, 1, 4, false, 0};
    assert_int_equal(mt_data_plan_new(two, 2, &f, &p, NULL), MT_OK);
    assert_int_equal(mt_data_plan_global_count(p, 0), 4);
    assert_int_equal(mt_data_plan_global_count(p, 2), 2);
    mt_data_plan_free(p);
}

/* leaf_examples (mesh_invariant): a global batch is cut into whole leaves per replica, also a
 * short one (B 8, leaves of 2, 2 replicas: a short batch of 2 is one leaf, all on replica 0),
 * where the even split would cut that leaf in two. */
static void test_data_shard_leaf_split(void **state)
{
    size_t sizes[] = {10}, st, len;
    mt_data_plan_opts o = {MT_DATA_SHARD_OFF, MT_DATA_BATCH_GLOBAL, 1, 2, 8, false, 2};
    mt_data_plan *p;
    (void)state;
    assert_int_equal(mt_data_plan_new(sizes, 1, &o, &p, NULL), MT_OK);
    mt_data_plan_range(p, 0, 0, 1, &st, &len);
    assert_int_equal(st, 4);
    assert_int_equal(len, 4);
    mt_data_plan_range(p, 0, 1, 0, &st, &len);
    assert_int_equal(st, 8);
    assert_int_equal(len, 2);
    mt_data_plan_range(p, 0, 1, 1, &st, &len);
    assert_int_equal(len, 0);
    assert_int_equal(mt_data_plan_global_count(p, 1), 2);
    mt_data_plan_free(p);
    o.leaf_examples = 0; /* the even split: one example each */
    assert_int_equal(mt_data_plan_new(sizes, 1, &o, &p, NULL), MT_OK);
    mt_data_plan_range(p, 0, 1, 1, &st, &len);
    assert_int_equal(st, 9);
    assert_int_equal(len, 1);
    mt_data_plan_free(p);
}

/* Uneven FILE shards: the short pipeline gets empty batches until the long one finishes. */
static void test_data_shard_uneven_files_same_last_step(void **state)
{
    size_t sizes[] = {2, 9};
    mt_data_dataset *ds = ids_dataset(sizes, 2);
    run_cfg c = {2, 1, 4, MT_DATA_SHARD_FILE, MT_DATA_BATCH_GLOBAL, false, 0, 2};
    char s[512];
    (void)state;
    assert_int_equal(render(ds, &c, 0, 0, s, sizeof(s)), 5);
    assert_string_equal(s, "[0][1][][][]");
    assert_int_equal(render(ds, &c, 1, 0, s, sizeof(s)), 5);
    assert_string_equal(s, "[2,3][4,5][6,7][8,9][10]");
    mt_data_dataset_free(ds);
}

static void test_data_shard_drop_remainder(void **state)
{
    size_t sizes[] = {10};
    mt_data_dataset *ds = ids_dataset(sizes, 1);
    run_cfg c = {2, 1, 4, MT_DATA_SHARD_DATA, MT_DATA_BATCH_GLOBAL, true, 0, 2};
    char s[512];
    (void)state;
    assert_int_equal(render(ds, &c, 0, 0, s, sizeof(s)), 2);
    assert_string_equal(s, "[0,1][4,5]");
    c.drop = false;
    assert_int_equal(render(ds, &c, 1, 0, s, sizeof(s)), 3);
    assert_string_equal(s, "[2,3][6,7][9]");
    mt_data_dataset_free(ds);
}

/* distribute_datasets_from_function: shard by element, batch B/R per pipeline. */
static void test_data_shard_per_replica_batching(void **state)
{
    size_t sizes[] = {11};
    mt_data_dataset *ds = ids_dataset(sizes, 1);
    run_cfg c = {2, 1, 4, MT_DATA_SHARD_DATA, MT_DATA_BATCH_PER_REPLICA, false, 0, 2};
    mt_data_input_ctx ctx = {2, 1, 2, 8, 0, 0};
    size_t b = 0;
    char s[512];
    (void)state;
    assert_int_equal(render(ds, &c, 0, 0, s, sizeof(s)), 3);
    assert_string_equal(s, "[0,2][4,6][8,10]");
    assert_int_equal(render(ds, &c, 1, 0, s, sizeof(s)), 3);
    assert_string_equal(s, "[1,3][5,7][9]");
    assert_int_equal(mt_data_input_ctx_num_replicas(&ctx), 4);
    assert_int_equal(mt_data_input_ctx_per_replica_batch(&ctx, &b, NULL), MT_OK);
    assert_int_equal(b, 2);
    ctx.global_batch = 6;
    assert_int_equal(mt_data_input_ctx_per_replica_batch(&ctx, &b, NULL), MT_INVALID_ARGUMENT);
    /* B not divisible by R is refused by the plan too */
    mt_data_plan_opts o = {MT_DATA_SHARD_DATA, MT_DATA_BATCH_PER_REPLICA, 2, 2, 6, false, 0};
    mt_data_plan *p;
    assert_int_equal(mt_data_plan_new(sizes, 1, &o, &p, NULL), MT_INVALID_ARGUMENT);
    mt_data_dataset_free(ds);
}

/* ------------------------------------------------------------------ shuffle */

static void test_data_shard_shuffle_deterministic_and_mesh_independent(void **state)
{
    size_t sizes[] = {40};
    mt_data_dataset *ds = ids_dataset(sizes, 1);
    run_cfg one = {1, 1, 8, MT_DATA_SHARD_DATA, MT_DATA_BATCH_GLOBAL, false, 16, 2};
    run_cfg two = {2, 2, 8, MT_DATA_SHARD_DATA, MT_DATA_BATCH_GLOBAL, false, 16, 0};
    char a[1024], b[1024], c[1024];
    (void)state;
    render(ds, &one, 0, 3, a, sizeof(a));
    render(ds, &one, 0, 3, b, sizeof(b));
    assert_string_equal(a, b); /* same (seed, epoch) → same order */
    render(ds, &one, 0, 4, c, sizeof(c));
    assert_string_not_equal(a, c); /* another epoch → another order */
    assert_string_not_equal(a, "[0,1,2,3,4,5,6,7][8,9,10,11,12,13,14,15]");
    /* on a 2×2 mesh the union of each step's replica batches is the 1-device global batch */
    size_t idx[40], n = 0;
    for (size_t i = 0; a[i]; i++)
        if (a[i] >= '0' && a[i] <= '9' && (i == 0 || a[i - 1] < '0' || a[i - 1] > '9'))
            idx[n++] = (size_t)atoi(a + i);
    assert_int_equal(n, 40);
    mt_data_input_ctx ctx[2] = {{2, 0, 2, 8, 0, 0}, {2, 1, 2, 8, 0, 0}};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_pipeline *p[2];
    o.policy = two.policy;
    o.shuffle_buffer = 16;
    o.seed = 42;
    for (int w = 0; w < 2; w++) {
        assert_int_equal(mt_data_pipeline_open(ds, &ctx[w], &o, &p[w], NULL), MT_OK);
        assert_int_equal(mt_data_pipeline_start_epoch(p[w], 3, NULL), MT_OK);
    }
    for (size_t step = 0; step < 5; step++) {
        int seen[40] = {0};
        for (int w = 0; w < 2; w++) {
            const mt_data_step *st;
            assert_int_equal(mt_data_pipeline_next(p[w], &st, NULL), MT_OK);
            for (size_t l = 0; l < 2; l++)
                for (size_t i = 0; i < st->replicas[l].n; i++)
                    seen[(int)st->replicas[l].x[i * 2]]++;
        }
        for (size_t i = 0; i < 8; i++)
            assert_int_equal(seen[idx[step * 8 + i]], 1);
    }
    mt_data_pipeline_free(p[0]);
    mt_data_pipeline_free(p[1]);
    mt_data_dataset_free(ds);
}

static void test_data_shard_shuffle_buffer_semantics(void **state)
{
    uint32_t o[100], s[100];
    int seen[100] = {0};
    (void)state;
    for (uint32_t i = 0; i < 100; i++)
        o[i] = i;
    mt_data_shuffle(o, 100, 1, 7, 0, s);
    for (uint32_t i = 0; i < 100; i++)
        assert_int_equal(o[i], i); /* buffer 1 = no shuffle */
    mt_data_shuffle(o, 100, 10, 7, 0, s);
    for (uint32_t i = 0; i < 100; i++) {
        seen[o[i]]++;
        /* a buffer of 10 can only emit input i+9 at output i at the latest */
        assert_true(o[i] <= i + 9);
    }
    for (int i = 0; i < 100; i++)
        assert_int_equal(seen[i], 1);
}

/* ------------------------------------------------------------------ property */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/*
 * For random sizes, batches, replicas and policies: every element is seen exactly once per epoch
 * under FILE and DATA (OFF: once per pipeline); every pipeline has the same number of steps; a
 * step's global count is the sum of its replica batches. Runs the real pipeline (with shuffling,
 * the trainers' permutation and contiguous replica order, and prefetch on some runs).
 */
static void test_data_shard_property_exactly_once(void **state)
{
    uint64_t r = 0x9E3779B97F4A7C15ull;
    (void)state;
    for (int iter = 0; iter < 300; iter++) {
        size_t nf = 1 + rnd(&r) % 5, sizes[5], total = 0;
        run_cfg c;
        c.N = 1 + rnd(&r) % 4;
        c.L = 1 + rnd(&r) % 3;
        c.policy = (mt_data_shard_policy)(rnd(&r) % 4);
        c.batching = rnd(&r) % 3 == 0 ? MT_DATA_BATCH_PER_REPLICA : MT_DATA_BATCH_GLOBAL;
        c.B = 1 + rnd(&r) % 12;
        if (c.batching == MT_DATA_BATCH_PER_REPLICA)
            c.B = c.N * c.L * (1 + rnd(&r) % 3);
        c.drop = false;
        c.shuffle = rnd(&r) % 2 ? 0 : 1 + rnd(&r) % 20;
        c.prefetch = rnd(&r) % 3;
        for (size_t f = 0; f < nf; f++) {
            sizes[f] = 1 + rnd(&r) % 17;
            total += sizes[f];
        }
        if (c.policy == MT_DATA_SHARD_FILE && nf < c.N)
            c.policy = MT_DATA_SHARD_DATA;
        mt_data_dataset *ds = ids_dataset(sizes, nf);
        int *seen = calloc(total, sizeof(int));
        size_t steps0 = 0;
        mt_data_shard_policy eff = mt_data_shard_resolve(c.policy, nf, c.N);
        for (size_t w = 0; w < c.N; w++) {
            mt_data_input_ctx ctx = {c.N, w, c.L, c.B, 0, 0};
            mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
            mt_data_pipeline *p;
            const mt_data_step *st;
            size_t steps = 0;
            mt_err err = MT_ERR_INIT;
            o.policy = c.policy;
            o.batching = c.batching;
            o.shuffle_buffer = c.shuffle;
            o.prefetch = c.prefetch;
            o.seed = (uint64_t)iter;
            o.permute = iter % 4 == 1;             /* the trainers' per-epoch permutation */
            o.contiguous_replicas = iter % 3 == 2; /* the trainers' replica order */
            if (mt_data_pipeline_open(ds, &ctx, &o, &p, &err) != MT_OK)
                fail_msg("iter %d: %s", iter, err.msg);
            assert_int_equal(mt_data_pipeline_start_epoch(p, (size_t)iter, NULL), MT_OK);
            while (mt_data_pipeline_next(p, &st, NULL) == MT_OK) {
                size_t sum = 0;
                for (size_t l = 0; l < c.L; l++) {
                    const mt_data_batch *b = &st->replicas[l];
                    assert_true(b->n <= (c.B + c.N * c.L - 1) / (c.N * c.L));
                    for (size_t i = 0; i < b->n; i++)
                        seen[(size_t)b->x[i * 2]]++;
                    sum += b->n;
                }
                assert_true(sum <= st->global_count);
                steps++;
            }
            if (w == 0)
                steps0 = steps;
            assert_int_equal(steps, steps0); /* every pipeline stops at the same step */
            mt_data_pipeline_free(p);
        }
        for (size_t i = 0; i < total; i++) {
            int want = eff == MT_DATA_SHARD_OFF ? (int)c.N : 1;
            if (seen[i] != want)
                fail_msg("iter %d: element %zu seen %d times, want %d (policy %s N=%zu L=%zu "
                         "B=%zu per_replica=%d files=%zu)",
                         iter, i, seen[i], want, mt_data_shard_policy_name(eff), c.N, c.L, c.B,
                         c.batching == MT_DATA_BATCH_PER_REPLICA, nf);
        }
        free(seen);
        mt_data_dataset_free(ds);
    }
}

/* The plan alone (no I/O): the same property on larger random sizes, plus global counts. */
static void test_data_shard_property_plan_counts(void **state)
{
    uint64_t r = 12345;
    (void)state;
    for (int iter = 0; iter < 2000; iter++) {
        size_t nf = 1 + rnd(&r) % 8, sizes[8], total = 0;
        mt_data_plan_opts o;
        mt_data_plan *p;
        o.num_pipelines = 1 + rnd(&r) % 6;
        o.replicas_per_pipeline = 1 + rnd(&r) % 4;
        o.policy = (mt_data_shard_policy)(rnd(&r) % 4);
        o.batching = rnd(&r) % 3 == 0 ? MT_DATA_BATCH_PER_REPLICA : MT_DATA_BATCH_GLOBAL;
        o.global_batch = 1 + rnd(&r) % 64;
        if (o.batching == MT_DATA_BATCH_PER_REPLICA)
            o.global_batch = o.num_pipelines * o.replicas_per_pipeline * (1 + rnd(&r) % 4);
        o.drop_remainder = rnd(&r) % 4 == 0;
        for (size_t f = 0; f < nf; f++)
            total += sizes[f] = 1 + rnd(&r) % 300;
        if (o.policy == MT_DATA_SHARD_FILE && nf < o.num_pipelines)
            o.policy = MT_DATA_SHARD_AUTO;
        assert_int_equal(mt_data_plan_new(sizes, nf, &o, &p, NULL), MT_OK);
        size_t covered = 0, sum_counts = 0;
        for (size_t s = 0; s < mt_data_plan_steps(p); s++) {
            size_t gc = mt_data_plan_global_count(p, s), sum = 0;
            for (size_t w = 0; w < o.num_pipelines; w++)
                for (size_t l = 0; l < o.replicas_per_pipeline; l++) {
                    size_t st, n;
                    mt_data_plan_range(p, w, s, l, &st, &n);
                    assert_true(st + n <= mt_data_plan_stream_len(p, w));
                    sum += n;
                }
            assert_int_equal(sum, gc);
            assert_true(gc > 0); /* no step where every replica is empty */
            sum_counts += gc;
        }
        covered = sum_counts;
        if (!o.drop_remainder) {
            size_t want =
                mt_data_plan_policy(p) == MT_DATA_SHARD_OFF ? total * o.num_pipelines : total;
            assert_int_equal(covered, want);
        } else {
            assert_true(covered <= total * o.num_pipelines);
        }
        mt_data_plan_free(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_shard_file_guide_example),
        cmocka_unit_test(test_data_shard_data_guide_example),
        cmocka_unit_test(test_data_shard_off_guide_example),
        cmocka_unit_test(test_data_shard_file_needs_enough_files),
        cmocka_unit_test(test_data_shard_rebatch_guide_examples),
        cmocka_unit_test(test_data_shard_rebatch_split_rule),
        cmocka_unit_test(test_data_shard_global_count_partial),
        cmocka_unit_test(test_data_shard_uneven_files_same_last_step),
        cmocka_unit_test(test_data_shard_drop_remainder),
        cmocka_unit_test(test_data_shard_per_replica_batching),
        cmocka_unit_test(test_data_shard_shuffle_deterministic_and_mesh_independent),
        cmocka_unit_test(test_data_shard_shuffle_buffer_semantics),
        cmocka_unit_test(test_data_shard_property_exactly_once),
        cmocka_unit_test(test_data_shard_property_plan_counts),
        cmocka_unit_test(test_data_shard_leaf_split),
    };
    mt_log_set_level(MT_LOG_WARN); /* AUTO logs its choice at INFO on every plan */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
