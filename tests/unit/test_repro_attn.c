/* SPDX-License-Identifier: MIT */
/*
 * test_repro_attn.c — attention under mesh_invariant (core/repro's mt_repro_attn_forward /
 * _backward, and core/layers/attention.c's path through them): forward and backward on seq = 1,
 * 2, 4 device threads holding zig-zag blocks of the positions, over the real allgather and
 * reduce-scatter (core/coll), give memcmp-identical outputs and input gradients (queries, keys,
 * values) — also the layer without a seq split — within 1e-5 of core/tensor's reference; each
 * output element is the chain over exactly its row's keys; the position leaves taken in the
 * devices' row order instead of the canonical order give other bits; a causal row's chain holds
 * no zero term of a later key (a -0 stays -0), nor does the reduce-scatter turn a -0 query
 * gradient into +0; the layer refuses a seq size that does not keep
 * the bits.
 */
#include "mt_test.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/mt_coll.h"
#include "coll_test_util.h"
#include "layers/mt_layer.h"
#include "repro/mt_repro.h"
#include "tensor/mt_tensor.h"

#define B    2 /* examples */
#define H    2 /* heads */
#define HD   8 /* head size */
#define W    (3 * H * HD)
#define WO   (H * HD)
#define TMAX 32
#define SMAX 4

typedef struct attn_case {
    size_t t;
    bool causal;
} attn_case;

/* How a device runs: core/repro with the leaves in the canonical order or in row order, or the
 * attention layer (with sdim, or without one: s = 1 only). */
typedef enum { RUN_ZIG, RUN_ROW_ORDER, RUN_LAYER, RUN_LAYER_NO_SEQ } run_mode;

/* The global tensors: inputs, and what the devices computed, at their positions. */
typedef struct attn_io {
    attn_case c;
    const float *qkv, *dout; /* (B, t, W), (B, t, WO) */
    float *out, *dqkv;       /* (B, t, WO), (B, t, W) */
    float *probs;            /* (B, H, t, t) when s = 1 */
} attn_io;

typedef struct dev_job {
    mt_coll_world *w;
    int k, s;
    const int *group;
    run_mode mode;
    attn_io *io;
    mt_code rc;
    mt_err err;
} dev_job;

static mt_code job_allgather(void *ctx, int dim, const float *src, size_t n, float *dst)
{
    dev_job *j = ctx;
    mt_coll_group g = {j->group, j->s};
    (void)dim;
    return mt_coll_allgather(mt_coll_world_comm(j->w, j->k), &g, src, dst, n, NULL, &j->err);
}

static mt_code job_reduce_scatter(void *ctx, int dim, const float *src, size_t n, float *dst)
{
    dev_job *j = ctx;
    mt_coll_group g = {j->group, j->s};
    (void)dim;
    return mt_coll_reduce_scatter(mt_coll_world_comm(j->w, j->k), &g, src, dst, n, NULL, &j->err);
}

static size_t job_dim_size(void *ctx, int dim)
{
    return dim < 0 ? 1 : (size_t)((dev_job *)ctx)->s;
}

static int job_coord(void *ctx, int dim)
{
    return dim < 0 ? 0 : ((dev_job *)ctx)->k;
}

/* Rows of device k of s (rl each) <-> their positions in a (B, t, w) tensor. */
static void rows_at(float *loc, float *full, size_t t, int s, int k, size_t w, bool to_full)
{
    size_t rl = t / (size_t)s;
    for (size_t e = 0; e < B; e++)
        for (size_t r = 0; r < rl; r++) {
            float *l = loc + (e * rl + r) * w;
            float *f = full + (e * t + mt_layer_seq_position((size_t)s, (size_t)k, rl, r)) * w;
            memcpy(to_full ? f : l, to_full ? l : f, w * sizeof(float));
        }
}

/* Chunk m of the collectives' (s, B, rl, w) layout <-> member m's rows of full (B, t, w). */
static void chunks(float *blocks, float *full, size_t t, int s, size_t w, bool to_full)
{
    size_t rl = t / (size_t)s;
    for (int m = 0; m < s; m++)
        rows_at(blocks + (size_t)m * B * rl * w, full, t, s, m, w, to_full);
}

/* The attention layer of this device (only what its forward and backward read). */
static mt_code run_layer(dev_job *j, float *qkv, float *out, float *dout, float *dx, float *probs,
                         float *work)
{
    const mt_layer_ops *ops = mt_layer_ops_of(MT_LAYER_ATTENTION);
    size_t rl = j->io->c.t / (size_t)j->s;
    mt_layer l = {.ops = ops, .idx = 3, .in_c = W, .in_rows = rl, .in_loc = rl * W, .xf = -1};
    mt_layer_state st = {.in = qkv, .out = out, .dx_buf = dx};
    mt_layer_dev dev = {.ctx = j,
                        .dim_size = job_dim_size,
                        .coord = job_coord,
                        .allgather = job_allgather,
                        .reduce_scatter = job_reduce_scatter};
    mt_layer_pass ps = {.batch = B, .leaves = 1, .work = work, .err = &j->err};
    float *dxp = NULL;
    mt_code rc;

    strcpy(l.s.name, "attention_1");
    l.s.heads = H;
    l.s.causal = j->io->c.causal;
    l.sdim = j->mode == RUN_LAYER_NO_SEQ ? -1 : 0;
    st.scr[0] = probs;
    rc = ops->forward(&l, &st, &dev, &ps);
    if (rc == MT_OK)
        rc = ops->backward(&l, &st, &dev, &ps, dout, &dxp);
    if (rc == MT_OK && dxp != dx)
        rc = mt_err_set(&j->err, MT_INTERNAL, "the layer's dx is not its dx_buf");
    return rc;
}

/* core/repro's kernels with the layer's collectives around them: the rows gathered at their
 * positions, forward, backward into every position, reduce-scattered over seq. */
static mt_code run_repro(dev_job *j, float *qkv, float *out, float *dout, float *dx, float *probs,
                         float *work)
{
    size_t t = j->io->c.t, rl = t / (size_t)j->s, n = B * t * W;
    float *full = work, *dfull = full + n, *blocks = dfull + n, *scr = blocks + n;
    mt_repro_attn a = {.batch = B,
                       .t = t,
                       .rl = rl,
                       .heads = H,
                       .hd = HD,
                       .causal = j->io->c.causal,
                       .zig = j->mode == RUN_ZIG,
                       .lh = mt_repro_leaves(t) / j->s};
    mt_code rc = job_allgather(j, 0, qkv, B * rl * W, blocks);

    a.nb = mt_layer_seq_blocks((size_t)j->s, (size_t)j->k, rl, a.start);
    if (rc != MT_OK)
        return rc;
    chunks(blocks, full, t, j->s, W, true);
    mt_repro_attn_forward(&a, out, probs, full, scr);
    mt_repro_attn_backward(&a, dfull, dout, full, probs, scr);
    chunks(blocks, dfull, t, j->s, W, false);
    return job_reduce_scatter(j, 0, blocks, n, dx);
}

static void *dev_main(void *arg)
{
    dev_job *j = arg;
    attn_io *io = j->io;
    size_t t = io->c.t, rl = t / (size_t)j->s;
    float *qkv = calloc(B * rl * W, sizeof(float)), *dout = calloc(B * rl * WO, sizeof(float));
    float *out = calloc(B * rl * WO, sizeof(float)), *dx = calloc(B * rl * W, sizeof(float));
    float *probs = calloc(B * H * rl * t, sizeof(float));
    float *work = calloc(t * t + 4 * B * t * W + HD * t + rl * t + 8 * t * 2 * HD, sizeof(float));

    rows_at(qkv, (float *)io->qkv, t, j->s, j->k, W, false);
    rows_at(dout, (float *)io->dout, t, j->s, j->k, WO, false);
    if (j->mode == RUN_LAYER || j->mode == RUN_LAYER_NO_SEQ)
        j->rc = run_layer(j, qkv, out, dout, dx, probs, work);
    else
        j->rc = run_repro(j, qkv, out, dout, dx, probs, work);
    if (j->rc == MT_OK) {
        rows_at(out, io->out, t, j->s, j->k, WO, true);
        rows_at(dx, io->dqkv, t, j->s, j->k, W, true);
        if (j->s == 1)
            memcpy(io->probs, probs, B * H * t * t * sizeof(float));
    }
    free(qkv);
    free(dout);
    free(out);
    free(dx);
    free(probs);
    free(work);
    return NULL;
}

/* One run on s device threads. */
static void run_mesh(attn_io *io, int s, run_mode mode)
{
    mt_coll_world_opts o = MT_COLL_WORLD_DEFAULTS;
    mt_coll_world *w;
    dev_job jobs[SMAX];
    pthread_t th[SMAX];
    int group[SMAX];

    assert_int_equal(mt_coll_world_new_local(s, &o, &w, NULL), MT_OK);
    for (int k = 0; k < s; k++) /* whole before any thread reads it */
        group[k] = k;
    for (int k = 0; k < s; k++) {
        jobs[k] = (dev_job){.w = w, .k = k, .s = s, .group = group, .mode = mode, .io = io};
        assert_int_equal(pthread_create(&th[k], NULL, dev_main, &jobs[k]), 0);
    }
    for (int k = 0; k < s; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < s; k++)
        if (jobs[k].rc != MT_OK)
            fail_msg("t=%zu seq=%d device %d: %s", io->c.t, s, k, jobs[k].err.msg);
    mt_coll_world_free(w);
}

static float *vals(size_t n, uint64_t seed)
{
    float *v = calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((int)(ct_splitmix(seed * 7919u + i) % 2001) - 1000) / 1000.0f;
    return v;
}

static void io_init(attn_io *io, attn_case c, const float *qkv, const float *dout)
{
    *io = (attn_io){.c = c, .qkv = qkv, .dout = dout};
    io->out = calloc(B * c.t * WO, sizeof(float));
    io->dqkv = calloc(B * c.t * W, sizeof(float));
    io->probs = calloc(B * H * c.t * c.t, sizeof(float));
}

static void io_fini(attn_io *io)
{
    free(io->out);
    free(io->dqkv);
    free(io->probs);
}

static bool same_bits(const attn_io *a, const attn_io *b)
{
    size_t t = a->c.t;
    return memcmp(a->out, b->out, B * t * WO * sizeof(float)) == 0 &&
           memcmp(a->dqkv, b->dqkv, B * t * W * sizeof(float)) == 0;
}

static void near_ref(const attn_io *io)
{
    size_t t = io->c.t;
    float *out = calloc(B * t * WO, sizeof(float)), *probs = calloc(B * H * t * t, sizeof(float));
    float *dqkv = calloc(B * t * W, sizeof(float)), *scr = calloc(t * t, sizeof(float));

    mt_attention_forward_ref(out, probs, io->qkv, B, t, H, HD, io->c.causal);
    mt_attention_backward_ref(dqkv, scr, io->dout, io->qkv, probs, B, t, H, HD, io->c.causal);
    for (size_t i = 0; i < B * t * WO; i++)
        if (fabsf(out[i] - io->out[i]) > 1e-5f)
            fail_msg("t=%zu: out[%zu] %.9g, the reference %.9g", t, i, io->out[i], out[i]);
    for (size_t i = 0; i < B * t * W; i++)
        if (fabsf(dqkv[i] - io->dqkv[i]) > 1e-5f)
            fail_msg("t=%zu: dqkv[%zu] %.9g, the reference %.9g", t, i, io->dqkv[i], dqkv[i]);
    free(out);
    free(probs);
    free(dqkv);
    free(scr);
}

/* Every output element is the fma chain from 0 over exactly its row's keys (the portable
 * mt_repro_gemm_ref over nk_i keys, one row at a time) of the kept probabilities and values. */
static void out_is_the_row_chain(const attn_io *io)
{
    size_t t = io->c.t;
    float row[HD];

    for (size_t e = 0; e < B; e++)
        for (size_t h = 0; h < H; h++)
            for (size_t i = 0; i < t; i++) {
                size_t nk = io->c.causal ? i + 1 : t;
                mt_repro_gemm_ref(row, HD, io->probs + ((e * H + h) * t + i) * t, 0, 1,
                                  io->qkv + e * t * W + 3 * HD * h + 2 * HD, W, NULL, 1, HD, nk, 1);
                if (memcmp(row, io->out + (e * t + i) * WO + HD * h, sizeof(row)) != 0)
                    fail_msg("t=%zu: example %zu head %zu row %zu is not its keys' chain", t, e, h,
                             i);
            }
}

/*
 * Attention forward + backward under mesh_invariant on seq = 1, 2, 4 (core/repro over the real
 * collectives, and the attention layer itself), T = 16 and 32 positions, causal and not, 2
 * heads: memcmp-identical outputs and input gradients on every split and without one, within
 * 1e-5 of the reference; with the position leaves in the devices' row order, other bits.
 */
static void test_repro_attn_same_bits_on_seq(void **state)
{
    static const attn_case cases[] = {{32, true}, {32, false}, {16, true}};
    (void)state;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        attn_case c = cases[ci];
        float *qkv = vals(B * c.t * W, 31 + ci), *dout = vals(B * c.t * WO, 37 + ci);
        attn_io one, got, row1, row2;

        io_init(&one, c, qkv, dout);
        run_mesh(&one, 1, RUN_ZIG);
        near_ref(&one);
        out_is_the_row_chain(&one);
        for (int s = 1; s <= SMAX; s *= 2)
            for (run_mode m = RUN_ZIG; m <= RUN_LAYER_NO_SEQ; m++) {
                if (m == RUN_ROW_ORDER || (m == RUN_LAYER_NO_SEQ && s > 1))
                    continue;
                io_init(&got, c, qkv, dout);
                run_mesh(&got, s, m);
                if (!same_bits(&got, &one))
                    fail_msg("t=%zu causal=%d seq=%d (mode %d): other bits than one device", c.t,
                             c.causal, s, (int)m);
                io_fini(&got);
            }
        /* the leaves in the devices' row order: a split changes the bits */
        io_init(&row1, c, qkv, dout);
        io_init(&row2, c, qkv, dout);
        run_mesh(&row1, 1, RUN_ROW_ORDER);
        run_mesh(&row2, 2, RUN_ROW_ORDER);
        assert_false(same_bits(&row2, &one));
        assert_false(same_bits(&row2, &row1));
        io_fini(&row1);
        io_fini(&row2);
        io_fini(&one);
        free(qkv);
        free(dout);
    }
}

/* The layer refuses a seq split that does not keep the bits (8 devices over 16 positions: 4 do
 * at most), before any collective. */
static void test_repro_attn_layer_refuses_seq_size(void **state)
{
    static float qkv[B * 2 * W], out[B * 2 * WO], probs[B * H * 2 * 16], work[4096];
    const mt_layer_ops *ops = mt_layer_ops_of(MT_LAYER_ATTENTION);
    dev_job j = {.k = 0, .s = 8};
    mt_layer l = {.ops = ops, .idx = 3, .in_c = W, .in_rows = 2, .in_loc = 2 * W, .xf = -1};
    mt_layer_state st = {.in = qkv, .out = out};
    mt_layer_dev dev = {.ctx = &j, .dim_size = job_dim_size, .coord = job_coord};
    mt_layer_pass ps = {.batch = B, .leaves = 1, .work = work, .err = &j.err};
    (void)state;

    strcpy(l.s.name, "attention_1");
    l.s.heads = H;
    l.s.causal = true;
    st.scr[0] = probs;
    assert_int_equal(ops->forward(&l, &st, &dev, &ps), MT_INVALID_ARGUMENT);
    assert_string_equal(j.err.msg, "model.layers[3] (attention_1): reproducibility: "
                                   "\"mesh_invariant\" needs the 8 devices splitting its 16 "
                                   "positions to be a power of two dividing half their 8 position "
                                   "leaves");
}

/*
 * A causal row's output chain holds exactly its keys: with equal scores, row 1's weights are 0.5
 * and 0.5, and values -2^-149 (feature 0 of keys 0 and 1) make each product round to -0, so the
 * chain ends at -0.0f; a zero weight of a later key (+0 x 1) would turn it into +0.
 */
static void test_repro_attn_causal_row_chain_ends_at_its_keys(void **state)
{
    enum { T = 8, D = 8 };
    float qkv[T * 3 * D] = {0}, out[T * D], probs[T * T], scr[D * T + T * T + 8 * T * 2 * D];
    mt_repro_attn a = {.batch = 1,
                       .t = T,
                       .rl = T,
                       .heads = 1,
                       .hd = D,
                       .nb = 1,
                       .causal = true,
                       .zig = true,
                       .lh = 8};
    (void)state;

    for (size_t j = 0; j < T; j++) /* q = k = 0: equal scores; v's feature 0 */
        qkv[j * 3 * D + 2 * D] = j < 2 ? -0x1p-149f : 1.0f;
    mt_repro_attn_forward(&a, out, probs, qkv, scr);
    assert_true(probs[T] == 0.5f && probs[T + 1] == 0.5f);
    assert_true(out[D] == 0.0f && signbit(out[D]));
    assert_true(out[0] == -0x1p-149f); /* row 0: its one key */
}

/*
 * Query gradients of -0 keep their sign over seq: keys of -2^-149 and one value (the last key's
 * feature 0, 1.0, met by an output gradient of 1.0 there) make every dq element a chain ending
 * at -0; the other devices send -0.0f for a device's queries in the reduce-scatter (+0 would
 * make those +0 on seq = 2).
 */
static void test_repro_attn_negative_zero_dq_on_seq(void **state)
{
    enum { T = 16 };
    float *qkv = calloc(B * T * W, sizeof(float)), *dout = calloc(B * T * WO, sizeof(float));
    attn_io one, two;
    (void)state;

    for (size_t e = 0; e < B; e++)
        for (size_t h = 0; h < H; h++) {
            for (size_t j = 0; j < T; j++)
                for (size_t d = 0; d < HD; d++) {
                    qkv[(e * T + j) * W + 3 * HD * h + d] = 1.0f;
                    qkv[(e * T + j) * W + 3 * HD * h + HD + d] = -0x1p-149f;
                }
            qkv[(e * T + T - 1) * W + 3 * HD * h + 2 * HD] = 1.0f;
            for (size_t j = 0; j < T; j++)
                dout[(e * T + j) * WO + HD * h] = 1.0f;
        }
    io_init(&one, (attn_case){T, false}, qkv, dout);
    io_init(&two, (attn_case){T, false}, qkv, dout);
    run_mesh(&one, 1, RUN_ZIG);
    run_mesh(&two, 2, RUN_LAYER);
    for (size_t i = 0; i < B * T; i++)
        for (size_t h = 0; h < H; h++)
            for (size_t d = 0; d < HD; d++) {
                float v1 = one.dqkv[i * W + 3 * HD * h + d], v2 = two.dqkv[i * W + 3 * HD * h + d];
                if (v1 != 0.0f || !signbit(v1) || v2 != 0.0f || !signbit(v2))
                    fail_msg("row %zu head %zu dq[%zu]: %g on one device, %g on seq=2", i, h, d,
                             (double)v1, (double)v2);
            }
    assert_true(same_bits(&one, &two));
    io_fini(&one);
    io_fini(&two);
    free(qkv);
    free(dout);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repro_attn_same_bits_on_seq),
        cmocka_unit_test(test_repro_attn_layer_refuses_seq_size),
        cmocka_unit_test(test_repro_attn_causal_row_chain_ends_at_its_keys),
        cmocka_unit_test(test_repro_attn_negative_zero_dq_on_seq),
    };
    return MT_RUN_TESTS(tests);
}
