/* SPDX-License-Identifier: MIT */
/*
 * dense.c — the dense (fully connected) layer: y(B, out) = x(B, in) · kernel(in, out) + bias.
 * Like Keras' Dense it acts on the last axis: an input (..., in) gives (..., units), every row
 * (a sequence position, an image pixel) multiplied by the same kernel.
 *
 * Sharding: the kernel may be sharded on its input axis (kin: a contraction, the partial
 * outputs are allreduced over kin and the bias added after) and on its output axis (kout: the
 * output's features are sharded over kout, and so is the bias). The input is resharded from
 * its feature sharding xf to kin when they differ. Backward: dx over the kernel's input layout
 * is a partial sum over kout (allreduced), then resharded back to xf. Height bands
 * (docs/spmd.md): an image's pixels are rows, so each band multiplies its own rows; the kernel
 * and bias gradients are partial sums over the bands, summed over the height dim (under
 * mesh_invariant in height leaves, the bands' allreduce once per batch leaf: wgrad_inv).
 * Megatron-SP (rows split over tdim outside the tensor-parallel region, docs/transformers.md): a
 * column-parallel layer allgathers its input rows (forward, and again in the backward: only the
 * local rows are kept in between), a row-parallel one reduce-scatters its partial sums by rows
 * (backward: allgathers the output gradient); the gathered rows and the collectives' blocks live
 * in the work area the layers share (mt_layer_pass.work).
 * Reference: mt_dense_forward_ref / mt_dense_backward_ref (core/tensor/mt_kernels_ref.c).
 * mesh_invariant (mt_layer_pass.leaves > 0): core/repro's canonical product instead of OpenBLAS,
 * the contraction in the K-leaves this device holds (docs/reproducibility.md, points 5 and 6).
 *
 * Tied (GPT-2's lm_head.weight = wte.weight): with "tied_to": "<embedding>" the layer has no
 * kernel of its own; its kernel is the embedding's table (units, in) used transposed, y = x ·
 * tableᵀ + bias, so the table's axis 0 (vocabulary) is the kernel's output axis and its axis 1
 * the contraction: kout and kin come from the table's layout (vocabulary parallel: kout =
 * 'model'). The backward writes the table's gradient dyᵀ · x first (this layer is later in the
 * list, so its backward runs first); the embedding's backward adds its rows to it
 * (mt_layer.grads_shared). Under mesh_invariant both contributions meet per leaf instead: the
 * head hands its dy and input to the embedding's backward (mt_layer_pass.tied), which builds each
 * leaf's gradient from both (core/repro's mt_repro_tied_grad); the head's products are the
 * canonical ones, as an untied layer's. Over a sequence's positions dW and db sum in position
 * leaves (docs/reproducibility.md, "Position leaves": mt_layer__pleaves), so the positions may be
 * split over a seq dim.
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "repro/mt_repro.h"
#include "tensor/mt_tensor.h"

enum { KERNEL, BIAS };

static const char *const keys[] = {"units", "activation", "use_bias", "tied_to", NULL};

static mt_code parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    char path[112];
    const char *tied = NULL;
    mt_code rc = mt_layer__required_int(node, "units", base, 1 << 24, &out->units, err);
    if (rc == MT_OK)
        rc = mt_layer__parse_act_bias(node, base, out, err);
    MT_LAYER_PATH(path, base, "tied_to");
    if (rc == MT_OK)
        rc = mt_model_field_str(node, "tied_to", path, &tied, err);
    if (rc != MT_OK || tied == NULL)
        return rc;
    if (tied[0] == '\0' || strlen(tied) >= sizeof(out->tied_name))
        return mt_model_field_bad(err, path, "must be the name of an earlier embedding layer");
    out->tied = true;
    snprintf(out->tied_name, sizeof(out->tied_name), "%s", tied); /* resolved by core/model */
    return MT_OK;
}

/* The kernel of a tied layer: the embedding's table (units, in), checked against the layer. */
static mt_code plan_tied(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    const mt_layer *t = &p->planned[l->s.tied_to];

    if (l->s.units != t->s.input_dim)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d].units: %zu differs from the input_dim %zu of %s "
                          "(tied_to: the head's outputs are the table's rows)",
                          l->idx, l->s.units, t->s.input_dim, t->s.name);
    if (l->in_c != t->s.units)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d].tied_to: the output_dim %zu of %s differs from the "
                          "layer's input width %zu",
                          l->idx, t->s.units, t->s.name, l->in_c);
    l->pi[KERNEL] = t->pi[0];
    l->has[KERNEL] = true;
    l->kin = p->param_dim(p->ctx, l, KERNEL, 1);
    l->kout = p->param_dim(p->ctx, l, KERNEL, 0);
    return MT_OK;
}

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    size_t ks[2] = {l->in_c, l->s.units}, bs[1] = {l->s.units};
    mt_code rc;

    l->out_rank = l->in_rank;
    memcpy(l->out_shape, l->in_shape, sizeof(l->out_shape));
    l->out_shape[l->in_rank - 1] = l->s.units;
    if (l->s.tied) {
        rc = plan_tied(l, p, err);
    } else {
        rc = p->add_param(p->ctx, l, KERNEL, "kernel", 2, ks, MT_INIT_GLOROT_UNIFORM, true,
                          MT_LAYER_FROM_MAP, err);
        l->kin = p->param_dim(p->ctx, l, KERNEL, 0);
        l->kout = p->param_dim(p->ctx, l, KERNEL, 1);
    }
    if (rc != MT_OK)
        return rc;
    if (l->s.use_bias)
        rc = p->add_param(p->ctx, l, BIAS, "bias", 1, bs, MT_INIT_ZEROS, true, l->kout, err);
    l->of = l->kout;
    return rc;
}

/* Megatron-SP: the layer gathers its input rows over tdim (column parallel) / scatters its
 * output rows (row parallel). */
static bool msp_gathers(const mt_layer *l)
{
    return l->rin >= 0 && l->rout < 0;
}

static bool msp_scatters(const mt_layer *l)
{
    return l->rin < 0 && l->rout >= 0;
}

/* Megatron-SP's floats per area of the shared work area (three areas when the layer gathers:
 * the gathered rows, the collective's blocks, the rows' input gradient; two when it scatters: the
 * partial output, then the output gradient's rows, and the collective's blocks), or 0. */
static size_t msp_area(const mt_layer *l, size_t b, size_t m)
{
    return msp_gathers(l) ? b * l->in_loc * m : msp_scatters(l) ? b * l->out_loc * m : 0;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    mt_code rc = mt_layer__io(l, st, b, a, err);
    mt_layer_work(a, (msp_gathers(l) ? 3 : 2) * msp_area(l, b, mt_layer__dsz(dev, l->tdim)));
    if (rc == MT_OK && l->xf != l->kin) {
        rc = mt_layer_buf(a, l, (void **)&st->xin, b * l->use_loc, sizeof(float), err);
        if (rc == MT_OK && !mt_layer__no_dx(l))
            rc = mt_layer_buf(a, l, (void **)&st->dxk, b * l->use_loc, sizeof(float), err);
    }
    return rc;
}

/* mesh_invariant: the K-leaves of a kernel axis of `width` (global) this device holds, the axis
 * split over dim (core/spmd's plan checked the split keeps the bits: mt_repro_check_split). */
static int kleaves(const mt_layer_dev *dev, size_t width, int dim)
{
    return mt_repro_leaves(width) / (int)mt_layer__dsz(dev, dim);
}

/* Tied: y (rows, out) = x (rows, in) · tᵀ + b, t (out, in) the embedding's table. */
static void tied_forward(bool ref, float *y, const float *x, const float *t, const float *b,
                         size_t rows, size_t in, size_t out)
{
    for (size_t r = 0; b != NULL && r < rows; r++)
        memcpy(y + r * out, b, out * sizeof(float));
    (ref ? mt_gemm_ref : mt_gemm)(false, true, rows, out, in, 1.0f, x, in, t, in,
                                  b != NULL ? 1.0f : 0.0f, y, out);
}

/* Tied: dx (rows, in) = dy · t (skipped when NULL), dt (out, in) = dyᵀ · x, db = Σ rows of dy. */
static void tied_backward(bool ref, float *dx, float *dt, float *db, const float *dy,
                          const float *x, const float *t, size_t rows, size_t in, size_t out)
{
    void (*gemm)(bool, bool, size_t, size_t, size_t, float, const float *, size_t, const float *,
                 size_t, float, float *, size_t) = ref ? mt_gemm_ref : mt_gemm;
    if (dx != NULL)
        gemm(false, false, rows, in, out, 1.0f, dy, out, t, in, 0.0f, dx, in);
    gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 0.0f, dt, in);
    if (db != NULL)
        (ref ? mt_dense_backward_ref : mt_dense_backward)(NULL, NULL, db, dy, NULL, NULL, rows, in,
                                                          out);
}

/* mesh_invariant, tied: y = x · tᵀ + b on the canonical product, tᵀ (in, out) in wt (the pass's
 * scratch), the contraction in kl chains as an untied kernel's. */
static void tied_forward_inv(float *y, float *wt, const float *x, const float *t, const float *b,
                             size_t rows, size_t in, size_t out, int kl)
{
    for (size_t j = 0; j < out; j++)
        for (size_t k = 0; k < in; k++)
            wt[k * out + j] = t[j * in + k];
    mt_repro_dense_forward(y, x, wt, b, rows, in, out, kl);
}

/*
 * mesh_invariant: dw (NULL: skipped) and the bias's gradient, per leaf in the leaf tree; over a
 * sequence's positions in position leaves (the 1x1 conv2d's weight gradient of core/repro, whose
 * rows are the device's rl positions of each example; the seq allreduce inside, once per batch
 * leaf), one chain per batch leaf for rows of one position (mt_layer__pleaves); over an image's
 * pixels in height leaves of its rows, as a 1x1 conv2d's (its band's rl pixels per example; the
 * bands' allreduce inside, once per batch leaf: mt_layer__hleaves).
 */
static mt_code wgrad_inv(const mt_layer *l, const mt_layer_state *st, const mt_layer_dev *dev,
                         const mt_layer_pass *ps, float *dw, const float *dy, size_t rl, size_t in,
                         size_t out)
{
    mt_layer_hleaves pv;
    mt_conv2d_geom g = {.batch = ps->batch, .h = rl, .w = 1, .c = in, .kh = 1, .kw = 1, .f = out};
    const mt_repro_bands *hb = l->out_rank == 3
                                   ? mt_layer__hleaves(&pv, l, dev, ps, l->out_shape[0], rl)
                                   : mt_layer__pleaves(&pv, l, dev, ps);

    if (dw == NULL && st->pg[BIAS] == NULL)
        return MT_OK;
    return mt_repro_conv2d_wgrad(dw, st->pg[BIAS], ps->scratch, dy, st->used, &g, 1,
                                 ps->leaf_examples, ps->leaves, hb, ps->acc_w, ps->acc_b);
}

/*
 * mesh_invariant, tied: dx = dy · t in jl chains over the device's out (NULL: skipped), db in the
 * leaf trees (wgrad_inv); the table's gradient is not written here: dy and x go to the embedding's
 * backward (ps->tied, core/repro's mt_repro_tied_grad_h), which builds each leaf's gradient from
 * both contributions before the leaf tree.
 */
static mt_code tied_backward_inv(const mt_layer *l, const mt_layer_state *st,
                                 const mt_layer_dev *dev, const mt_layer_pass *ps, float *dx,
                                 const float *dy, size_t rl, size_t in, size_t out, int jl)
{
    size_t rows = ps->batch * rl;
    if (dx != NULL && rows > 0)
        mt_repro_gemm(dx, in, dy, out, 1, st->pv[KERNEL], in, NULL, rows, in, out, jl);
    if (ps->tied != NULL) { /* an engine without the handoff: the embedding reports it */
        ps->tied->dy = dy;
        ps->tied->x = st->used;
        ps->tied->rows = rows;
        ps->tied->r = ps->leaf_examples * rl;
    }
    return wgrad_inv(l, st, dev, ps, NULL, dy, rl, in, out);
}

/* mesh_invariant, untied: dx = dy · wᵀ in jl chains over the device's out (NULL: skipped), dw
 * and db in the leaf trees (wgrad_inv). */
static mt_code backward_inv(const mt_layer *l, const mt_layer_state *st, const mt_layer_dev *dev,
                            const mt_layer_pass *ps, float *dx, const float *dy, size_t rl,
                            size_t in, size_t out, int jl)
{
    mt_repro_dense_backward(dx, NULL, NULL, ps->scratch, dy, st->used, st->pv[KERNEL],
                            ps->batch * rl, ps->leaf_examples * rl, ps->leaves, in, out, jl,
                            ps->acc_w, ps->acc_b);
    return wgrad_inv(l, st, dev, ps, st->pg[KERNEL], dy, rl, in, out);
}

/* y = x · kernel + bias (bias may be NULL), or with a tied table (units, in) transposed. */
static void kernel_forward(const mt_layer *l, const mt_layer_state *st, bool ref, float *y,
                           const float *x, const float *bias, size_t rows, size_t in, size_t out)
{
    if (l->s.tied)
        tied_forward(ref, y, x, st->pv[KERNEL], bias, rows, in, out);
    else
        (ref ? mt_dense_forward_ref : mt_dense_forward)(y, x, st->pv[KERNEL], bias, rows, in, out);
}

static void kernel_backward(const mt_layer *l, const mt_layer_state *st, bool ref, float *dx,
                            const float *dy, size_t rows, size_t in, size_t out)
{
    if (l->s.tied)
        tied_backward(ref, dx, st->pg[KERNEL], st->pg[BIAS], dy, st->used, st->pv[KERNEL], rows, in,
                      out);
    else
        (ref ? mt_dense_backward_ref : mt_dense_backward)(dx, st->pg[KERNEL], st->pg[BIAS], dy,
                                                          st->used, st->pv[KERNEL], rows, in, out);
}

/*
 * Megatron-SP's forward (docs/transformers.md): a column-parallel layer allgathers its input
 * rows over tdim and computes its output shard for them all; a row-parallel one reduce-scatters
 * its partial sums by rows over tdim and adds the bias to its rows. Nothing gathered is kept:
 * the shared work area holds it during the call (the backward gathers the rows again).
 */
static mt_code msp_forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                           const mt_layer_pass *ps)
{
    size_t m = mt_layer__dsz(dev, l->tdim), b = ps->batch, cin = l->use_loc / l->in_rows;
    size_t cout = l->out_loc / l->out_rows, n = msp_area(l, b, m);
    float *bias = st->pv[BIAS], *rows = ps->work, *blocks = ps->work + n;
    mt_code rc;

    if (msp_gathers(l)) {
        rc = mt_layer__msp_gather(l, dev, st->in, b, l->in_rows, cin, blocks, rows);
        if (rc == MT_OK)
            kernel_forward(l, st, ps->ref, st->out, rows, bias, b * l->in_rows * m, cin, cout);
        return rc;
    }
    kernel_forward(l, st, ps->ref, rows, st->used, NULL, b * l->in_rows, cin, cout);
    rc = mt_layer__msp_scatter(l, dev, rows, b, l->out_rows, cout, blocks, st->out);
    for (size_t r = 0; rc == MT_OK && bias != NULL && r < b * l->out_rows; r++)
        for (size_t j = 0; j < cout; j++)
            st->out[r * cout + j] += bias[j];
    return rc;
}

/* Megatron-SP's backward of a layer that gathers or scatters rows: the reverse collectives; a
 * column-parallel layer first gathers its input rows again (the weight gradient needs them). */
static mt_code msp_backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                            const mt_layer_pass *ps, float *dy)
{
    size_t m = mt_layer__dsz(dev, l->tdim), b = ps->batch, cin = l->use_loc / l->in_rows;
    size_t cout = l->out_loc / l->out_rows, n = msp_area(l, b, m);
    float *rows = ps->work, *blocks = ps->work + n, *drows = ps->work + 2 * n;
    mt_code rc;

    if (msp_gathers(l)) {
        rc = mt_layer__msp_gather(l, dev, st->in, b, l->in_rows, cin, blocks, rows);
        if (rc != MT_OK)
            return rc;
        st->used = rows;
        kernel_backward(l, st, ps->ref, st->dx_buf != NULL ? drows : NULL, dy, b * l->in_rows * m,
                        cin, cout);
        st->used = st->in;
        if (st->dx_buf == NULL)
            return MT_OK;
        return mt_layer__msp_scatter(l, dev, drows, b, l->in_rows, cin, blocks, st->dx_buf);
    }
    rc = mt_layer__msp_gather(l, dev, dy, b, l->out_rows, cout, blocks, rows);
    if (rc == MT_OK)
        kernel_backward(l, st, ps->ref, st->dx_buf, rows, b * l->in_rows, cin, cout);
    return rc;
}

/* Rows of split rows (Megatron-SP outside the tensor-parallel region: over tdim; height bands:
 * over hx) have partial weight gradients: summed over that dim (a tied kernel's by the
 * embedding's backward, which adds to it). Neither splits the kernel. */
static mt_code sum_grads(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev, int dim)
{
    mt_code rc = MT_OK;
    if (!l->s.tied)
        rc = dev->allreduce(dev->ctx, dim, st->pg[KERNEL], l->in_c * l->s.units);
    if (rc == MT_OK && st->pg[BIAS] != NULL)
        rc = dev->allreduce(dev->ctx, dim, st->pg[BIAS], l->s.units);
    return rc;
}

/* Rows of one example on this device: its band's with height bands. */
static size_t ex_rows(const mt_layer *l, const mt_layer_dev *dev)
{
    return l->in_rows / mt_layer__dsz(dev, l->hx);
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    size_t rl = ex_rows(l, dev), rows = ps->batch * rl, outl = l->out_loc / rl;
    float *bias = st->pv[BIAS];
    mt_code rc;

    if (msp_gathers(l) || msp_scatters(l))
        return msp_forward(l, st, dev, ps);

    if (st->xin != NULL) {
        rc = dev->reshard(dev->ctx, st->in, rows, l->in_c, l->xf, l->kin, st->xin);
        if (rc != MT_OK)
            return rc;
        st->used = st->xin;
    }
    if (l->s.tied && ps->leaves > 0) /* mesh_invariant: the canonical product, as untied */
        tied_forward_inv(st->out, ps->scratch, st->used, st->pv[KERNEL], l->kin < 0 ? bias : NULL,
                         rows, l->use_loc / rl, outl, kleaves(dev, l->in_c, l->kin));
    else if (l->s.tied)
        tied_forward(ps->ref, st->out, st->used, st->pv[KERNEL], l->kin < 0 ? bias : NULL, rows,
                     l->use_loc / rl, outl);
    else if (ps->leaves > 0) /* mesh_invariant: the canonical product, in the K-leaves held here */
        mt_repro_dense_forward(st->out, st->used, st->pv[KERNEL], l->kin < 0 ? bias : NULL, rows,
                               l->use_loc / rl, outl, kleaves(dev, l->in_c, l->kin));
    else
        (ps->ref ? mt_dense_forward_ref : mt_dense_forward)(st->out, st->used, st->pv[KERNEL],
                                                            l->kin < 0 ? bias : NULL, rows,
                                                            l->use_loc / rl, outl);
    if (l->kin < 0)
        return MT_OK;
    return mt_layer__kin_finish(l, st, dev, rows, outl, bias);
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    size_t rl = ex_rows(l, dev), rows = ps->batch * rl, cin = l->use_loc / rl;
    size_t cout = l->out_loc / rl;
    float *dxk = st->dx_buf != NULL && st->dxk != NULL ? st->dxk : st->dx_buf;
    mt_code rc;

    *dx = st->dx_buf;
    if (msp_gathers(l) || msp_scatters(l))
        return msp_backward(l, st, dev, ps, dy);
    if (ps->leaves > 0) { /* mesh_invariant: per leaf, dW and db folded in the leaf trees */
        rc = (l->s.tied ? tied_backward_inv : backward_inv)(l, st, dev, ps, dxk, dy, rl, cin, cout,
                                                            kleaves(dev, l->s.units, l->kout));
        if (rc != MT_OK)
            return rc;
    } else if (l->s.tied)
        tied_backward(ps->ref, dxk, st->pg[KERNEL], st->pg[BIAS], dy, st->used, st->pv[KERNEL],
                      rows, cin, cout);
    else
        (ps->ref ? mt_dense_backward_ref : mt_dense_backward)(
            dxk, st->pg[KERNEL], st->pg[BIAS], dy, st->used, st->pv[KERNEL], rows, cin, cout);
    if (l->rin >= 0 && (rc = sum_grads(l, st, dev, l->tdim)) != MT_OK)
        return rc;
    if (l->hx >= 0 && ps->leaves == 0 && (rc = sum_grads(l, st, dev, l->hx)) != MT_OK)
        return rc;
    if (st->dx_buf == NULL)
        return MT_OK;
    return mt_layer__dx_finish(l, st, dev, dxk, ps->batch, l->kin);
}

/* mt_layer__comm_kernel, with Megatron-SP's row collectives in place of the allreduces of a
 * layer that gathers or scatters rows, and the weight gradients' sum of one on split rows. */
static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    size_t m = mt_layer__psz(p, l->tdim);
    if (msp_gathers(l)) { /* the forward's allgather, the backward's again and reduce-scatter */
        add(per_dim, l->tdim, 3 * b * l->in_loc * m);
        return;
    }
    if (msp_scatters(l)) {
        add(per_dim, l->tdim, 2 * b * l->out_loc * m);
        return;
    }
    size_t grads = (l->s.tied ? 0 : l->in_c * l->s.units) + (l->s.use_bias ? l->s.units : 0);
    mt_layer__comm_kernel(l, b, bdim, p, add, per_dim);
    if (l->rin >= 0)
        add(per_dim, l->tdim, grads);
    add(per_dim, l->hx, grads);
}

const mt_layer_ops mt_layer_dense_ops = {
    .type = "dense",
    .kind = MT_LAYER_DENSE,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .bands = true,
    .seq_leaves = true,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .example = "\"model\":{\"input_shape\":[6],\"layers\":[{\"type\":\"dense\",\"units\":8,"
               "\"activation\":\"relu\"},"
               "{\"type\":\"dense\",\"units\":3}]},\"mesh\":{\"batch\":2,\"model\":2},"
               "\"layouts\":{\"dense_1\\\\.kernel\":[\"unsharded\",\"model\"],"
               "\"dense_2\\\\.kernel\":[\"model\",\"unsharded\"]}",
    .comm = comm,
};
