/* SPDX-License-Identifier: MIT */
/*
 * test_data_pipeline.c — the input pipeline of core/data (mt_data.h): prefetch equals
 * synchronous, clean shutdown mid-epoch, epoch restarts, feature slices (spatial partitioning),
 * per-file reading under FILE sharding, pixels kept as bytes, and error codes.
 */
#include "mt_test.h"

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "data_test_util.h"
#include "log/mt_log.h"
#include "rng/mt_rng.h"

/* n examples of dim features: x[i][j] = i * 100 + j, label i % 7. */
static mt_data_dataset *grid(size_t n, size_t dim, size_t nfiles)
{
    mt_data_block b[8];
    mt_data_dataset *ds;
    size_t id = 0;
    for (size_t f = 0; f < nfiles; f++) {
        size_t m = n / nfiles + (f < n % nfiles);
        memset(&b[f], 0, sizeof(b[f]));
        b[f].n = m;
        b[f].dim = dim;
        b[f].x = malloc(m * dim * sizeof(float) + 1);
        b[f].y = malloc(m * sizeof(int32_t) + 1);
        for (size_t i = 0; i < m; i++, id++) {
            for (size_t j = 0; j < dim; j++)
                b[f].x[i * dim + j] = (float)(id * 100 + j);
            b[f].y[i] = (int32_t)(id % 7);
        }
    }
    assert_int_equal(mt_data_dataset_from_blocks(b, nfiles, &ds, NULL), MT_OK);
    for (size_t f = 0; f < nfiles; f++) {
        free(b[f].x);
        free(b[f].y);
    }
    return ds;
}

/* Sum of a checksum over an epoch (order-sensitive). */
static double epoch_digest(mt_data_pipeline *p, size_t epoch, size_t *steps)
{
    const mt_data_step *st;
    double d = 0;
    size_t k = 0;
    assert_int_equal(mt_data_pipeline_start_epoch(p, epoch, NULL), MT_OK);
    while (mt_data_pipeline_next(p, &st, NULL) == MT_OK) {
        for (size_t l = 0; l < st->n_replicas; l++) {
            const mt_data_batch *b = &st->replicas[l];
            for (size_t i = 0; i < b->n * b->dim; i++)
                d += b->x[i] * (double)(k % 13 + 1) * (double)(i % 5 + 1);
            for (size_t i = 0; i < b->n; i++)
                d += b->y[i] * 0.5 * (double)(k + 1);
        }
        k++;
    }
    *steps = k;
    return d;
}

static void test_data_pipeline_prefetch_equals_synchronous(void **state)
{
    mt_data_dataset *ds = grid(203, 6, 3);
    mt_data_input_ctx ctx = {2, 1, 2, 16, 1, 4};
    double d[3];
    size_t steps[3];
    (void)state;
    for (int k = 0; k < 3; k++) {
        mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
        mt_data_pipeline *p;
        o.policy = MT_DATA_SHARD_DATA;
        o.shuffle_buffer = 50;
        o.seed = 5;
        o.prefetch = (size_t)(k == 0 ? 0 : k == 1 ? 1 : 8);
        assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, NULL), MT_OK);
        assert_int_equal(mt_data_pipeline_dim(p), 4);
        d[k] = epoch_digest(p, 2, &steps[k]);
        mt_data_pipeline_free(p);
    }
    assert_int_equal(steps[0], 13); /* ceil(203 / 16) */
    assert_int_equal(steps[1], steps[0]);
    assert_true(d[0] == d[1] && d[1] == d[2]);
    mt_data_dataset_free(ds);
}

/*
 * The hand-off under both timings: a consumer that outruns the thread (it then builds steps
 * itself) and one that is slower (the thread fills the ring and sleeps), over several epochs
 * kept on one thread, with depths 2 and 3 and a zero-copy pipeline (built in the caller): every
 * epoch equals the synchronous one, step by step.
 */
static void test_data_pipeline_handoff_fast_and_slow_consumer(void **state)
{
    mt_data_dataset *ds = grid(517, 5, 2);
    mt_data_input_ctx ctx = {1, 0, 2, 10, 0, 0};
    (void)state;
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        double want[6];
        for (size_t depth = 0; depth <= 3; depth++) {
            mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
            mt_data_pipeline *p;
            if (depth == 1)
                continue;
            o.shuffle_buffer = shuffled ? 64 : 0;
            o.seed = 9;
            o.prefetch = depth;
            assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, NULL), MT_OK);
            for (size_t e = 0; e < 6; e++) {
                const mt_data_step *st;
                double d = 0;
                size_t k = 0;
                assert_int_equal(mt_data_pipeline_start_epoch(p, e, NULL), MT_OK);
                while (mt_data_pipeline_next(p, &st, NULL) == MT_OK) {
                    assert_int_equal(st->step, k);
                    assert_int_equal(st->epoch, e);
                    for (size_t l = 0; l < st->n_replicas; l++)
                        for (size_t i = 0; i < st->replicas[l].n; i++)
                            d += st->replicas[l].x[i * 5] * (double)(k * 7 + l + 1) +
                                 st->replicas[l].y[i];
                    if (e % 2 == 1 && k % 4 == 0)
                        usleep(300); /* slow consumer: the ring fills */
                    k++;
                }
                assert_int_equal(k, 52); /* ceil(517 / 10) */
                if (depth == 0)
                    want[e] = d;
                else
                    assert_true(d == want[e]);
            }
            mt_data_pipeline_free(p);
        }
    }
    mt_data_dataset_free(ds);
}

/* Free while the producer is blocked on a full ring, and restart epochs mid-way: no hang, no
 * leak (ASan), and each restart starts from step 0. */
static void test_data_pipeline_shutdown_and_restart_mid_epoch(void **state)
{
    mt_data_dataset *ds = grid(1000, 3, 1);
    mt_data_input_ctx ctx = {1, 0, 1, 4, 0, 0};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_pipeline *p;
    const mt_data_step *st;
    mt_err err = MT_ERR_INIT;
    (void)state;
    o.prefetch = 1;
    o.shuffle_buffer = 100;
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, NULL), MT_OK);
    assert_int_equal(mt_data_pipeline_next(p, &st, &err), MT_FAILED_PRECONDITION);
    for (size_t e = 0; e < 50; e++) {
        assert_int_equal(mt_data_pipeline_start_epoch(p, e, NULL), MT_OK);
        for (size_t k = 0; k <= e % 7; k++) {
            assert_int_equal(mt_data_pipeline_next(p, &st, NULL), MT_OK);
            assert_int_equal(st->step, k);
            assert_int_equal(st->epoch, e);
        }
    }
    mt_data_pipeline_free(p); /* producer is waiting for a free slot */
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, NULL), MT_OK);
    mt_data_pipeline_free(p); /* never started */
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, NULL), MT_OK);
    assert_int_equal(mt_data_pipeline_start_epoch(p, 0, NULL), MT_OK);
    mt_data_pipeline_free(p); /* started, nothing consumed */
    mt_data_pipeline_free(NULL);
    mt_data_dataset_free(ds);
}

/*
 * permute + contiguous_replicas (what the trainers use): under DATA with global batching, the
 * pieces of N pipelines taken in global replica order w·L + l are, step by step, the one-device
 * global batch of mt_rng_permutation(seed, epoch) cut by the rebatch rule, whatever N and L.
 */
static void test_data_pipeline_contiguous_replicas_equal_one_device(void **state)
{
    const size_t n = 23, B = 6, R = 4;
    mt_data_dataset *ds = grid(n, 2, 1);
    uint32_t perm[23];
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    (void)state;
    o.policy = MT_DATA_SHARD_DATA;
    o.permute = true;
    o.contiguous_replicas = true;
    o.seed = 5;
    mt_rng_permutation(perm, n, 5, 3);
    for (size_t N = 1; N <= 4; N *= 2) {
        mt_data_pipeline *p[4];
        const mt_data_step *st[4];
        for (size_t w = 0; w < N; w++) {
            mt_data_input_ctx ctx = {N, w, R / N, B, 0, 0};
            assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p[w], NULL), MT_OK);
            assert_int_equal(mt_data_pipeline_start_epoch(p[w], 3, NULL), MT_OK);
        }
        for (size_t s = 0; s < (n + B - 1) / B; s++) {
            size_t gb = s + 1 < (n + B - 1) / B ? B : n - s * B;
            for (size_t w = 0; w < N; w++)
                assert_int_equal(mt_data_pipeline_next(p[w], &st[w], NULL), MT_OK);
            for (size_t g = 0; g < R; g++) {
                const mt_data_batch *b = &st[g / (R / N)]->replicas[g % (R / N)];
                size_t start, len;
                mt_data_rebatch_split(gb, R, g, &start, &len);
                assert_int_equal(b->n, len);
                assert_int_equal(b->global_count, gb);
                for (size_t i = 0; i < len; i++)
                    assert_true(b->x[i * 2] == (float)(perm[s * B + start + i] * 100));
            }
        }
        for (size_t w = 0; w < N; w++) {
            assert_int_equal(mt_data_pipeline_next(p[w], &st[w], NULL), MT_OUT_OF_RANGE);
            mt_data_pipeline_free(p[w]);
        }
    }
    mt_data_dataset_free(ds);
}

static void test_data_pipeline_feature_slice(void **state)
{
    mt_data_dataset *ds = grid(10, 8, 1);
    mt_data_input_ctx ctx = {1, 0, 2, 4, 5, 3};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_pipeline *p;
    const mt_data_step *st;
    mt_err err = MT_ERR_INIT;
    float dst[16];
    (void)state;
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, NULL), MT_OK);
    assert_int_equal(mt_data_pipeline_start_epoch(p, 0, NULL), MT_OK);
    assert_int_equal(mt_data_pipeline_next(p, &st, NULL), MT_OK);
    assert_int_equal(st->replicas[1].n, 2);
    assert_int_equal(st->replicas[1].dim, 3);
    /* replica 1 holds examples 2, 3; features 5..7 */
    assert_true(st->replicas[1].x[0] == 205.0f && st->replicas[1].x[2] == 207.0f);
    assert_true(st->replicas[1].x[3] == 305.0f);
    /* a further slice of the delivered batch */
    assert_int_equal(mt_data_batch_copy_slice(&st->replicas[1], 1, 2, dst, NULL), MT_OK);
    assert_true(dst[0] == 206.0f && dst[1] == 207.0f && dst[2] == 306.0f && dst[3] == 307.0f);
    assert_int_equal(mt_data_batch_copy_slice(&st->replicas[1], 2, 2, dst, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "outside the batch's 3 features"));
    mt_data_pipeline_free(p);
    ctx.feature_offset = 6;
    ctx.feature_len = 3;
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, &err), MT_INVALID_ARGUMENT);
    assert_null(p);
    assert_non_null(strstr(err.msg, "feature slice [6, 9) outside the 8 features"));
    mt_data_dataset_free(ds);
}

/* Zero-copy (no shuffle, full features) delivers the same data as a gathering pipeline. */
static void test_data_pipeline_zero_copy_matches_gather(void **state)
{
    mt_data_dataset *ds = grid(37, 5, 2);
    mt_data_input_ctx full = {2, 0, 1, 8, 0, 0};
    mt_data_input_ctx sliced = {2, 0, 1, 8, 0, 5};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_pipeline *a, *b;
    size_t sa, sb;
    (void)state;
    o.policy = MT_DATA_SHARD_FILE;
    assert_int_equal(mt_data_pipeline_open(ds, &full, &o, &a, NULL), MT_OK);
    assert_int_equal(mt_data_pipeline_open(ds, &sliced, &o, &b, NULL), MT_OK);
    assert_true(epoch_digest(a, 0, &sa) == epoch_digest(b, 0, &sb));
    assert_int_equal(sa, sb);
    mt_data_pipeline_free(a);
    mt_data_pipeline_free(b);
    mt_data_dataset_free(ds);
}

static void test_data_pipeline_bad_context_and_dims(void **state)
{
    mt_data_dataset *ds = grid(10, 2, 1);
    mt_data_input_ctx ctx = {2, 2, 1, 4, 0, 0};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_pipeline *p;
    mt_err err = MT_ERR_INIT;
    mt_data_block b[2];
    float x[6] = {0};
    int32_t y[2] = {0};
    (void)state;
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "pipeline 2 of 2"));
    mt_data_dataset_free(ds);
    memset(b, 0, sizeof(b));
    b[0].n = 2, b[0].dim = 3, b[0].x = x, b[0].y = y;
    b[1].n = 3, b[1].dim = 2, b[1].x = x, b[1].y = y;
    assert_int_equal(mt_data_dataset_from_blocks(b, 2, &ds, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_data_dataset_from_blocks(b, 0, &ds, &err), MT_INVALID_ARGUMENT);
}

/* Under FILE sharding a pipeline decodes only its own files: a corrupt file fails only the
 * pipeline that reads it, with file and line. */
static void test_data_pipeline_file_shard_reads_own_files(void **state)
{
    mt_data_spec *s;
    mt_data_dataset *ds;
    mt_data_pipeline *p;
    mt_data_pipeline_opts o;
    mt_data_input_ctx ctx = {2, 0, 1, 2, 0, 0};
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "p0.csv", "x,label\n1,0\n2,1\n");
    dt_write(dir, "p1.csv", "x,label\n3,0\n4,oops\n");
    assert_int_equal(dt_spec("{\"format\":\"csv\",\"train\":{\"glob\":\"p*.csv\"},"
                             "\"shard_policy\":\"file\",\"prefetch\":0}",
                             dir, &s, &err),
                     MT_OK);
    mt_data_pipeline_opts_from_spec(s, &o);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_num_files(ds), 2);
    assert_int_equal(mt_data_dataset_file_size(ds, 1), 2);
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, &err), MT_OK);
    assert_int_equal(mt_data_pipeline_steps(p), 2);
    mt_data_pipeline_free(p);
    ctx.pipeline_id = 1;
    assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "p1.csv:3: label (column 1): 'oops'"));
    mt_data_dataset_free(ds);
    /* the test split is absent */
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TEST, NULL, &ds, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "dataset.test: no files"));
    mt_data_spec_free(s);
}

/*
 * 8-bit pixels as the decoders write them (q * (1/255)) are kept as bytes and converted back when
 * a batch is gathered: every delivered row must hold exactly the source floats, bit for bit,
 * through shuffling, prefetch, two replicas and a feature slice whose length is no multiple of
 * the 16-byte blocks. A value that is no such pixel (0.5, -0.0) keeps the floats: same rows.
 */
static void test_data_pipeline_byte_pixels_exact(void **state)
{
    enum { N = 300, DIM = 40, OFF = 3, LEN = 35 };
    (void)state;
    for (int variant = 0; variant < 3; variant++) {
        mt_data_block b;
        mt_data_dataset *ds;
        mt_data_input_ctx ctx = {1, 0, 2, 32, OFF, LEN};
        mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
        mt_data_pipeline *p;
        const mt_data_step *st;
        size_t rows = 0;
        memset(&b, 0, sizeof(b));
        b.n = N;
        b.dim = DIM;
        b.x = malloc(N * DIM * sizeof(float));
        b.y = malloc(N * sizeof(int32_t));
        assert_non_null(b.x);
        assert_non_null(b.y);
        for (size_t i = 0; i < N; i++) {
            for (size_t j = 0; j < DIM; j++)
                b.x[i * DIM + j] = (float)(uint8_t)((i * 7 + j * 13) % 256) * (1.0f / 255.0f);
            b.y[i] = (int32_t)i; /* names the example */
        }
        if (variant == 1)
            b.x[N * DIM - 1] = 0.5f;
        if (variant == 2)
            b.x[5 * DIM + 7] = -0.0f;
        assert_int_equal(mt_data_dataset_from_blocks(&b, 1, &ds, NULL), MT_OK);
        o.shuffle_buffer = 64;
        o.seed = 3;
        assert_int_equal(mt_data_pipeline_open(ds, &ctx, &o, &p, NULL), MT_OK);
        for (size_t e = 0; e < 2; e++) {
            assert_int_equal(mt_data_pipeline_start_epoch(p, e, NULL), MT_OK);
            while (mt_data_pipeline_next(p, &st, NULL) == MT_OK)
                for (size_t l = 0; l < st->n_replicas; l++)
                    for (size_t i = 0; i < st->replicas[l].n; i++, rows++) {
                        const mt_data_batch *r = &st->replicas[l];
                        size_t k = (size_t)r->y[i];
                        assert_int_equal(r->dim, LEN);
                        assert_memory_equal(r->x + i * LEN, b.x + k * DIM + OFF,
                                            LEN * sizeof(float));
                    }
        }
        assert_int_equal(rows, 2 * N);
        mt_data_pipeline_free(p);
        mt_data_dataset_free(ds);
        free(b.x);
        free(b.y);
    }
}

static void test_data_pipeline_alloc_failures(void **state)
{
    mt_data_dataset *ds = grid(50, 4, 3);
    mt_data_input_ctx ctx = {1, 0, 2, 8, 1, 2};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_pipeline *p = NULL;
    mt_code rc;
    long i = 0;
    size_t steps;
    (void)state;
    o.shuffle_buffer = 10;
    do {
        mt_alloc_fail_after(i++);
        rc = mt_data_pipeline_open(ds, &ctx, &o, &p, NULL);
        mt_alloc_fail_reset();
        assert_true(rc == MT_OK || rc == MT_RESOURCE_EXHAUSTED);
    } while (rc != MT_OK);
    epoch_digest(p, 0, &steps);
    assert_int_equal(steps, 7);
    mt_data_pipeline_free(p);
    mt_data_dataset_free(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_pipeline_prefetch_equals_synchronous),
        cmocka_unit_test(test_data_pipeline_handoff_fast_and_slow_consumer),
        cmocka_unit_test(test_data_pipeline_shutdown_and_restart_mid_epoch),
        cmocka_unit_test(test_data_pipeline_feature_slice),
        cmocka_unit_test(test_data_pipeline_contiguous_replicas_equal_one_device),
        cmocka_unit_test(test_data_pipeline_zero_copy_matches_gather),
        cmocka_unit_test(test_data_pipeline_bad_context_and_dims),
        cmocka_unit_test_setup_teardown(test_data_pipeline_file_shard_reads_own_files, dt_setup,
                                        dt_teardown),
        cmocka_unit_test(test_data_pipeline_byte_pixels_exact),
        cmocka_unit_test(test_data_pipeline_alloc_failures),
    };
    mt_log_set_level(MT_LOG_WARN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
