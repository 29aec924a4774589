/* SPDX-License-Identifier: MIT */
/*
 * attention.c — multi-head scaled dot-product self-attention over fused projections: the input
 * (T, 3·C) holds each head's query, key and value side by side (head h at columns
 * [3·hd·h, 3·hd·(h+1)), hd = C / num_heads), as a dense layer of 3·C units in front of it
 * produces them; the output (T, C) is the heads' results side by side, for a dense projection
 * after it. With "causal": true, position i attends to positions 0..i only (a GPT block).
 * The layer has no parameters: the QKV projection and the output projection are the dense
 * layers around it (docs/transformers.md shows the block).
 *
 * Sharding: the input's features sharded over a mesh dim split the heads (whole heads per device:
 * num_heads must divide by the dim's size); the output is sharded over the same dim. So the
 * Megatron layout — the QKV kernel sharded on its output axis, the projection kernel on its
 * input axis — computes a block's attention with no communication of its own.
 * The softmax probabilities (B, heads, T, T) are kept for the backward.
 * Sequence parallelism (positions split over l->sdim, each device holding T/S rows of every
 * example: two blocks of T/2S positions, k and 2S-1-k, when T/S is even, so that under the causal
 * mask every device meets as many keys as the others; mt_layer_seq_blocks): every query needs
 * every earlier key and value, so the forward allgathers the rows of the input over sdim, puts
 * them at their positions and computes its own query rows, in blocks of ROW_BLOCK rows, against
 * the keys and values up to each block's last row (the causal mask at the rows' positions;
 * rows_forward); the backward gives the gradient of its queries and its share of every earlier
 * position's key and value gradient (rows_backward), which are reduce-scattered over sdim; it
 * gathers the rows again first, so that between forward and backward a device keeps only its
 * own rows (as Megatron-SP does). The probabilities kept are the rows' (B, heads, T/S, T); the
 * gathered rows and the collectives' blocks live in the work area the layers share.
 * mesh_invariant (mt_layer_pass.leaves > 0): core/repro's mt_repro_attn_forward / _backward on
 * the device's rows, with or without a seq split (one device computes its rows as one device of
 * seq = 1): row-local chains, and the key and value gradients per position leaf folded in the
 * canonical tree, whose top is the reduce-scatter over sdim (docs/reproducibility.md,
 * "Attention"); fixed_mesh keeps the BLAS calls below.
 * Reference: mt_attention_forward_ref / mt_attention_backward_ref (core/tensor).
 */
#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "repro/mt_repro.h"
#include "tensor/mt_tensor.h"

enum { PROBS }; /* kept for the backward; the rest is in the shared work area (work_areas) */

static const char *const keys[] = {"num_heads", "causal", NULL};

static mt_code parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    char path[112];
    mt_code rc = mt_layer__required_int(node, "num_heads", base, 4096, &out->heads, err);
    MT_LAYER_PATH(path, base, "causal");
    return rc == MT_OK ? mt_model_field_bool(node, "causal", path, false, &out->causal, err) : rc;
}

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    size_t dsz = mt_layer__psz(p, l->xf);

    (void)err;
    if (l->in_rank != 2 || l->in_c % (3 * l->s.heads) != 0)
        return mt_layer__shape_error(l,
                                     "a sequence of fused queries, keys and values, shape "
                                     "(sequence_length, 3 * num_heads * head_size)",
                                     err);
    if (l->s.heads % dsz != 0)
        return mt_err_set(
            err, MT_INVALID_ARGUMENT,
            "model.layers[%d] (%s): num_heads %zu is not divisible by the %zu devices "
            "of '%s' that shard its features",
            l->idx, l->s.name, l->s.heads, dsz, p->dim_name(p->ctx, l->xf));
    l->out_rank = 2;
    l->out_shape[0] = l->in_shape[0];
    l->out_shape[1] = l->in_c / 3;
    l->of = l->xf;
    return MT_OK;
}

/* Heads on this device. */
static size_t local_heads(const mt_layer *l, const mt_layer_dev *dev)
{
    return l->s.heads / mt_layer__dsz(dev, l->xf);
}

/*
 * The shared work area during a call: the backward's softmax gradient ds (t·t floats); with
 * sequence parallelism also the gathered rows put at their positions (qkv), the collectives'
 * member blocks (blocks) and the gradient of every position (dqkv), w = batch·t·(3·C/|xf|)
 * floats each. Nothing gathered is kept between forward and backward: the backward gathers the
 * rows again.
 */
typedef struct work_areas {
    float *ds, *qkv, *blocks, *dqkv;
} work_areas;

/* Floats of each of qkv, blocks and dqkv (0 without sequence parallelism). */
static size_t work_areas_w(const mt_layer *l, size_t b, size_t s)
{
    return l->sdim >= 0 ? b * l->in_rows * s * (l->in_loc / l->in_rows) : 0;
}

static size_t work_size(const mt_layer *l, size_t b, size_t s, work_areas *wa, float *work)
{
    size_t t = l->in_rows * s, w = work_areas_w(l, b, s);
    if (wa != NULL) {
        wa->ds = work;
        wa->qkv = work + t * t;
        wa->blocks = wa->qkv + w;
        wa->dqkv = wa->blocks + w;
    }
    return t * t + 3 * w;
}

/* mesh_invariant: the device's rows for core/repro (its blocks of positions, its position
 * leaves in the canonical order); INVALID_ARGUMENT when the seq split does not keep the bits
 * (core/spmd's plan refuses it first). */
static mt_code inv_geom(const mt_layer *l, const mt_layer_dev *dev, size_t b, mt_repro_attn *a,
                        mt_err *err)
{
    int s = (int)mt_layer__dsz(dev, l->sdim);

    *a = (mt_repro_attn){.batch = b,
                         .t = l->in_rows * (size_t)s,
                         .rl = l->in_rows,
                         .heads = local_heads(l, dev),
                         .hd = l->in_c / (3 * l->s.heads),
                         .causal = l->s.causal,
                         .zig = true};
    a->nb = mt_layer__seq_blocks(l, dev, l->in_rows, a->start);
    a->lh = mt_repro_leaves(a->t) / s;
    if (mt_repro_check_seq(a->t, "seq", s, NULL) != MT_OK)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): reproducibility: \"mesh_invariant\" needs the "
                          "%d devices splitting its %zu positions to be a power of two dividing "
                          "half their %d position leaves",
                          l->idx, l->s.name, s, a->t, mt_repro_leaves(a->t));
    return MT_OK;
}

/* mesh_invariant: floats of core/repro's scratch (beside the work areas). */
static size_t inv_scratch(const mt_layer *l, const mt_layer_dev *dev)
{
    size_t s = mt_layer__dsz(dev, l->sdim), t = l->in_rows * s;
    int lh = mt_repro_leaves(t) / (int)s;
    mt_repro_attn a = {.t = t, .rl = l->in_rows, .hd = l->in_c / (3 * l->s.heads), .lh = lh};
    return mt_repro_attn_scratch(&a);
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    size_t t = l->in_rows * mt_layer__dsz(dev, l->sdim);
    mt_code rc = mt_layer__io(l, st, b, a, err);
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[PROBS], b * local_heads(l, dev) * l->in_rows * t,
                          sizeof(float), err);
    mt_layer_work(a, work_size(l, b, mt_layer__dsz(dev, l->sdim), NULL, NULL) +
                         (a->invariant ? inv_scratch(l, dev) : 0));
    return rc;
}

typedef void (*gemm_fn)(bool, bool, size_t, size_t, size_t, float, const float *, size_t,
                        const float *, size_t, float, float *, size_t);

/* Query rows per block of the sequence-parallel kernels: a block meets only the keys up to its
 * last row (causal), so the products above the diagonal's blocks are never computed. */
#define ROW_BLOCK 32

/*
 * Sequence parallelism: the heads of the n query rows [lo, lo + n) of the device's rl rows of
 * every example, at positions [r0, r0 + n) of the gathered qkv (batch, t, 3·h·hd), against its
 * keys and values up to the rows' last one (causal) or all. out: (batch, rl, h·hd); probs:
 * (batch, h, rl, t), row i's softmax over keys [0, n_i), zeros beyond (n_i = r0 + i + 1 when
 * causal, else t).
 */
static void rows_forward(bool ref, float *out, float *probs, const float *qkv, size_t batch,
                         size_t t, size_t rl, size_t lo, size_t r0, size_t n, size_t h, size_t hd,
                         bool causal)
{
    gemm_fn gemm = ref ? mt_gemm_ref : mt_gemm;
    size_t w = 3 * h * hd, wo = h * hd, kn = causal ? r0 + n : t;
    float scale = 1.0f / sqrtf((float)hd);

    for (size_t e = 0; e < batch; e++)
        for (size_t hh = 0; hh < h; hh++) {
            const float *q = qkv + (e * t + r0) * w + 3 * hd * hh;
            const float *k = qkv + e * t * w + 3 * hd * hh + hd;
            float *p = probs + ((e * h + hh) * rl + lo) * t;
            gemm(false, true, n, kn, hd, scale, q, w, k, w, 0.0f, p, t);
            for (size_t i = 0; i < n; i++) {
                float *row = p + i * t, m = row[0], sum = 0.0f;
                size_t nk = causal ? r0 + i + 1 : t;
                for (size_t j = 1; j < nk; j++)
                    m = row[j] > m ? row[j] : m;
                for (size_t j = 0; j < nk; j++) {
                    row[j] = expf(row[j] - m);
                    sum += row[j];
                }
                for (size_t j = 0; j < nk; j++)
                    row[j] /= sum;
                memset(row + nk, 0, (t - nk) * sizeof(float));
            }
            gemm(false, false, n, hd, kn, 1.0f, p, t, k + hd, w, 0.0f,
                 out + (e * rl + lo) * wo + hd * hh, wo);
        }
}

/*
 * The backward of rows_forward: dqkv (batch, t, 3·h·hd), zeroed by the caller, gets the gradient
 * of the rows' queries and their share of the keys' and values' gradients (added), from dout
 * (batch, rl, h·hd). ds: n·t floats of scratch.
 */
static void rows_backward(bool ref, float *dqkv, float *ds, const float *dout, const float *qkv,
                          const float *probs, size_t batch, size_t t, size_t rl, size_t lo,
                          size_t r0, size_t n, size_t h, size_t hd, bool causal)
{
    gemm_fn gemm = ref ? mt_gemm_ref : mt_gemm;
    size_t w = 3 * h * hd, wo = h * hd, kn = causal ? r0 + n : t;
    float scale = 1.0f / sqrtf((float)hd);

    for (size_t e = 0; e < batch; e++)
        for (size_t hh = 0; hh < h; hh++) {
            size_t qo = (e * t + r0) * w + 3 * hd * hh, ko = e * t * w + 3 * hd * hh + hd;
            const float *p = probs + ((e * h + hh) * rl + lo) * t;
            const float *dy = dout + (e * rl + lo) * wo + hd * hh;
            /* dv (kn, hd) += pᵀ · dy; dp (n, kn) = dy · vᵀ, into ds */
            gemm(true, false, kn, hd, n, 1.0f, p, t, dy, wo, 1.0f, dqkv + ko + hd, w);
            gemm(false, true, n, kn, hd, 1.0f, dy, wo, qkv + ko + hd, w, 0.0f, ds, t);
            for (size_t i = 0; i < n; i++) { /* ds = p ⊙ (dp − Σ_j dp·p) / √hd */
                size_t nk = causal ? r0 + i + 1 : t;
                float dot = 0.0f;
                for (size_t j = 0; j < nk; j++)
                    dot += ds[i * t + j] * p[i * t + j];
                for (size_t j = 0; j < nk; j++)
                    ds[i * t + j] = p[i * t + j] * (ds[i * t + j] - dot) * scale;
                for (size_t j = nk; j < kn; j++)
                    ds[i * t + j] = 0.0f;
            }
            /* dq (n, hd) = ds · k; dk (kn, hd) += dsᵀ · q */
            gemm(false, false, n, hd, kn, 1.0f, ds, t, qkv + ko, w, 0.0f, dqkv + qo, w);
            gemm(true, false, kn, hd, n, 1.0f, ds, t, qkv + qo, w, 1.0f, dqkv + ko, w);
        }
}

/* The device's rl rows in blocks of at most ROW_BLOCK rows, within each of its blocks of positions
 * (mt_layer_seq_blocks): *lo, *r0, *n of block i; false past the last one. */
static bool row_block(size_t nb, const size_t *start, size_t rl, size_t i, size_t *lo, size_t *r0,
                      size_t *n)
{
    size_t len = rl / nb, per = (len + ROW_BLOCK - 1) / ROW_BLOCK, k = i / per, j = i % per;
    if (k >= nb)
        return false;
    *lo = k * len + j * ROW_BLOCK;
    *r0 = start[k] + j * ROW_BLOCK;
    *n = len - j * ROW_BLOCK < ROW_BLOCK ? len - j * ROW_BLOCK : ROW_BLOCK;
    return true;
}

/* The rl rows of member k of every example of full (batch, S·rl, w), at their positions
 * (mt_layer_seq_blocks) <-> chunk k of blocks (S, batch, rl, w): the order of the collectives'
 * member chunks. */
static void to_blocks(float *blocks, float *full, size_t batch, size_t s, size_t rl, size_t w,
                      bool back)
{
    for (size_t k = 0; k < s; k++) {
        size_t start[2], nb = mt_layer_seq_blocks(s, k, rl, start), len = rl / nb;
        for (size_t e = 0; e < batch; e++)
            for (size_t j = 0; j < nb; j++) {
                float *bk = blocks + ((k * batch + e) * rl + j * len) * w;
                float *f = full + (e * s * rl + start[j]) * w;
                memcpy(back ? f : bk, back ? bk : f, len * w * sizeof(float));
            }
    }
}

/* Sequence parallelism: every member's rows of the input, at their positions, into wa->qkv. */
static mt_code gather_rows(const mt_layer *l, const mt_layer_state *st, const mt_layer_dev *dev,
                           size_t b, const work_areas *wa)
{
    size_t s = mt_layer__dsz(dev, l->sdim), rl = l->in_rows, w = l->in_loc / rl;
    mt_code rc = dev->allgather(dev->ctx, l->sdim, st->in, b * rl * w, wa->blocks);
    if (rc == MT_OK)
        to_blocks(wa->blocks, wa->qkv, b, s, rl, w, true);
    return rc;
}

/* mesh_invariant forward: the rows (gathered over sdim) through core/repro. */
static mt_code inv_forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                           const mt_layer_pass *ps)
{
    size_t s = mt_layer__dsz(dev, l->sdim);
    mt_repro_attn a;
    work_areas wa;
    mt_code rc = inv_geom(l, dev, ps->batch, &a, ps->err);

    work_size(l, ps->batch, s, &wa, ps->work);
    if (rc == MT_OK && l->sdim >= 0)
        rc = gather_rows(l, st, dev, ps->batch, &wa);
    if (rc == MT_OK)
        mt_repro_attn_forward(&a, st->out, st->scr[PROBS], l->sdim >= 0 ? wa.qkv : st->in,
                              wa.dqkv + work_areas_w(l, ps->batch, s));
    return rc;
}

/* mesh_invariant backward: every position's gradient, the device's subtree of the key and value
 * gradients' position leaves, reduce-scattered over sdim (the tree's top). */
static mt_code inv_backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                            const mt_layer_pass *ps, const float *dy)
{
    size_t s = mt_layer__dsz(dev, l->sdim), b = ps->batch, rl = l->in_rows, w = l->in_loc / rl;
    mt_repro_attn a;
    work_areas wa;
    mt_code rc = inv_geom(l, dev, b, &a, ps->err);
    float *scr;

    work_size(l, b, s, &wa, ps->work);
    scr = wa.dqkv + work_areas_w(l, b, s);
    if (rc != MT_OK)
        return rc;
    if (l->sdim < 0) {
        mt_repro_attn_backward(&a, st->dx_buf, dy, st->in, st->scr[PROBS], scr);
        return MT_OK;
    }
    if ((rc = gather_rows(l, st, dev, b, &wa)) != MT_OK) /* the keys and values again */
        return rc;
    mt_repro_attn_backward(&a, wa.dqkv, dy, wa.qkv, st->scr[PROBS], scr);
    to_blocks(wa.blocks, wa.dqkv, b, s, rl, w, false);
    return dev->reduce_scatter(dev->ctx, l->sdim, wa.blocks, s * b * rl * w, st->dx_buf);
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    size_t h = local_heads(l, dev), hd = l->in_c / (3 * l->s.heads), b = ps->batch;
    size_t s = mt_layer__dsz(dev, l->sdim), rl = l->in_rows;
    size_t start[2], nb, lo, r0, n;
    work_areas wa;
    mt_code rc;

    if (ps->leaves > 0)
        return inv_forward(l, st, dev, ps);
    if (l->sdim < 0) {
        (ps->ref ? mt_attention_forward_ref : mt_attention_forward)(st->out, st->scr[PROBS], st->in,
                                                                    b, rl, h, hd, l->s.causal);
        return MT_OK;
    }
    work_size(l, b, s, &wa, ps->work);
    if ((rc = gather_rows(l, st, dev, b, &wa)) != MT_OK)
        return rc;
    nb = mt_layer__seq_blocks(l, dev, rl, start);
    for (size_t i = 0; row_block(nb, start, rl, i, &lo, &r0, &n); i++)
        rows_forward(ps->ref, st->out, st->scr[PROBS], wa.qkv, b, s * rl, rl, lo, r0, n, h, hd,
                     l->s.causal);
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    size_t h = local_heads(l, dev), hd = l->in_c / (3 * l->s.heads), b = ps->batch;
    size_t s = mt_layer__dsz(dev, l->sdim), rl = l->in_rows, w = l->in_loc / rl;
    size_t start[2], nb, lo, r0, n;
    work_areas wa;
    mt_code rc;

    *dx = st->dx_buf;
    if (st->dx_buf == NULL)
        return MT_OK; /* reads the model input: nothing to compute */
    if (ps->leaves > 0)
        return inv_backward(l, st, dev, ps, dy);
    work_size(l, b, s, &wa, ps->work);
    if (l->sdim < 0) {
        (ps->ref ? mt_attention_backward_ref : mt_attention_backward)(
            st->dx_buf, wa.ds, dy, st->in, st->scr[PROBS], b, rl, h, hd, l->s.causal);
        return MT_OK;
    }
    if ((rc = gather_rows(l, st, dev, b, &wa)) != MT_OK) /* the keys and values again */
        return rc;
    memset(wa.dqkv, 0, b * s * rl * w * sizeof(float));
    nb = mt_layer__seq_blocks(l, dev, rl, start);
    for (size_t i = 0; row_block(nb, start, rl, i, &lo, &r0, &n); i++)
        rows_backward(ps->ref, wa.dqkv, wa.ds, dy, wa.qkv, st->scr[PROBS], b, s * rl, rl, lo, r0, n,
                      h, hd, l->s.causal);
    to_blocks(wa.blocks, wa.dqkv, b, s, rl, w, false);
    return dev->reduce_scatter(dev->ctx, l->sdim, wa.blocks, s * b * rl * w, st->dx_buf);
}

/* Sequence parallelism: the forward's allgather, the backward's again and its reduce-scatter
 * over sdim. */
static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    (void)bdim;
    if (l->sdim >= 0)
        add(per_dim, l->sdim, 3 * b * l->in_loc * mt_layer__psz(p, l->sdim));
}

const mt_layer_ops mt_layer_attention_ops = {
    .type = "attention",
    .kind = MT_LAYER_ATTENTION,
    .seq_leaves = true, /* dK, dV on position leaves under mesh_invariant (core/repro) */
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .comm = comm,
    .example = "\"model\":{\"input_shape\":[5],\"layers\":["
               "{\"type\":\"embedding\",\"input_dim\":11,\"output_dim\":8},"
               "{\"type\":\"layer_norm\"},"
               "{\"type\":\"dense\",\"units\":24,\"name\":\"qkv\"},"
               "{\"type\":\"attention\",\"num_heads\":2,\"causal\":true},"
               "{\"type\":\"dense\",\"units\":8,\"name\":\"proj\"},"
               "{\"type\":\"add\",\"inputs\":[\"embedding_1\",\"proj\"]},"
               "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},"
               "\"mesh\":{\"batch\":2,\"model\":2},"
               "\"layouts\":{\"qkv\\\\.kernel\":[\"unsharded\",\"model\"],"
               "\"proj\\\\.kernel\":[\"model\",\"unsharded\"]}",
};
