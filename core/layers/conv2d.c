/* SPDX-License-Identifier: MIT */
/*
 * conv2d.c — 2-D convolution over NHWC images with strides and "valid" or "same" padding (as
 * Keras / TensorFlow pad); kernel (KH, KW, C, F) as Keras stores it; im2col + GEMM.
 *
 * Sharding: the kernel's output-channel axis (3) over kout — each device computes its filters,
 * the output's channels are sharded over kout, the bias follows — and its input-channel axis (2)
 * over kin — each device convolves its channels, the partial outputs are allreduced over kin and
 * the bias added after (as dense's contraction axis). The input is resharded from its channel
 * sharding xf to kin when they differ (allgathered when kin is unsharded). Backward: dx over
 * the kernel's input channels is a partial sum over kout (allreduced), then resharded to xf.
 * An input sharded on its height (bands over hx) borrows its neighbours' boundary rows (the
 * halo, layer_bands.c) and convolves the extended band; its weight gradients are summed over hx.
 * Bands combine with the channel sharding: the band is resharded to kin first, the halo moves
 * the kin channels, and the partial outputs and input gradients are summed as without bands.
 * Reference: mt_conv2d_forward_ref / mt_conv2d_backward_ref (core/tensor/mt_kernels_ref.c).
 * mesh_invariant (mt_layer_pass.leaves > 0): im2col and core/repro's canonical product instead of
 * OpenBLAS, the contraction in K-leaves of whole input channels (a filter or an input-channel
 * split keeps the bits: docs/reproducibility.md, points 5 and 6); dW and db per batch leaf and
 * height leaf of the output rows, and on height bands dx from a halo of dy (inv_band_backward).
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "repro/mt_repro.h"
#include "tensor/mt_tensor.h"

enum { KERNEL, BIAS };
/* scratch; height bands: the halo's blocks, the band resharded to kin and its gradient */
enum { COLS, DCOLS, HSEND, HRECV, KINB, DKINB };

static const char *const keys[] = {"filters",  "kernel_size", "padding", "activation",
                                   "use_bias", "strides",     NULL};

static mt_code parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    char path[112];
    const char *pad = NULL;
    size_t sa = 1, sb = 1;
    int64_t v;
    mt_code rc;

    MT_LAYER_PATH(path, base, "filters");
    if (cJSON_GetObjectItemCaseSensitive(node, "filters") == NULL)
        return mt_model_field_bad(err, path, "is required");
    rc = mt_model_field_pos_int(node, "filters", path, 1 << 16, 0, &v, err);
    out->filters = (size_t)v;
    MT_LAYER_PATH(path, base, "kernel_size");
    if (rc == MT_OK)
        rc = mt_model_field_pair(node, "kernel_size", path, &out->kh, &out->kw, true, err);
    MT_LAYER_PATH(path, base, "strides");
    if (rc == MT_OK)
        rc = mt_model_field_pair(node, "strides", path, &sa, &sb, false, err);
    out->sh = sa;
    out->sw = sb;
    MT_LAYER_PATH(path, base, "padding");
    if (rc == MT_OK)
        rc = mt_model_field_str(node, "padding", path, &pad, err);
    if (rc == MT_OK && pad != NULL && strcmp(pad, "same") != 0 && strcmp(pad, "valid") != 0)
        rc = mt_model_field_bad(err, path, "must be \"valid\" or \"same\"");
    out->same = pad != NULL && strcmp(pad, "same") == 0;
    return rc == MT_OK ? mt_layer__parse_act_bias(node, base, out, err) : rc;
}

/* The geometry of this device's channels and filters for batch examples. */
static mt_conv2d_geom geom(const mt_layer *l, size_t batch, size_t kin_size, size_t kout_size)
{
    mt_conv2d_geom g = {
        batch,   l->in_shape[0], l->in_shape[1],           l->in_shape[2] / kin_size,
        l->s.kh, l->s.kw,        l->s.filters / kout_size, l->s.same,
        l->s.sh, l->s.sw};
    return g;
}

static mt_conv2d_geom dev_geom(const mt_layer *l, size_t batch, const mt_layer_dev *dev)
{
    return geom(l, batch, mt_layer__dsz(dev, l->kin), mt_layer__dsz(dev, l->kout));
}

/* mesh_invariant: the K-leaves of whole input channels this device holds (mt_repro.h). */
static int inv_lc(const mt_layer *l, const mt_layer_dev *dev)
{
    return mt_repro_leaves(l->in_c) / (int)mt_layer__dsz(dev, l->kin);
}

/* mesh_invariant on height bands: the halo of dy (the device's filters of each output pixel)
 * whose windows read input band k of p (mt_layer__dy_halo). */
static mt_code dy_halo(const mt_layer *l, const mt_layer_dev *dev, size_t p, size_t k,
                       mt_layer_halo *hl, mt_err *err)
{
    mt_conv2d_geom g = geom(l, 0, 1, 1);
    return mt_layer__dy_halo(l, p, k, mt_conv2d_pad_top(&g),
                             l->s.filters / mt_layer__dsz(dev, l->kout), hl, err);
}

/* mesh_invariant on bands: the work area of the backward's dy halo for b examples (the blocks
 * sent and gathered, dy's extended band, its dcols), the most any band needs. */
static mt_code dy_work(const mt_layer *l, size_t b, const mt_layer_dev *dev, mt_layer_alloc *a,
                       mt_err *err)
{
    mt_conv2d_geom g = geom(l, 0, 1, 1);
    size_t p = mt_layer__dsz(dev, l->hx), he, send;
    size_t row = l->out_shape[1] * (l->s.filters + l->s.kh * l->s.kw * l->in_c);
    mt_code rc =
        mt_layer__dy_halo_most(l, p, mt_conv2d_pad_top(&g),
                               l->s.filters / mt_layer__dsz(dev, l->kout), b, &he, &send, err);
    if (rc == MT_OK)
        mt_layer_work(a, (p + 1) * send + b * he * row);
    return rc;
}

/*
 * Height bands (docs/spmd.md): band k of p computes output rows [k ob, (k + 1) ob) from the
 * extended band (its rows, its neighbours' boundary rows, the zero padding) with a "valid" conv.
 * The halo moves the channels of the kernel's input layout (kin): in_c / |kin| of them, from
 * use_loc once planned (the plan's own call checks the rows only).
 */
static mt_code band_halo(const mt_layer *l, const char *dim_name, size_t p, size_t k,
                         mt_layer_halo *hl, mt_err *err)
{
    mt_conv2d_geom g = geom(l, 0, 1, 1);
    size_t sh = l->s.sh ? l->s.sh : 1, sw = l->s.sw ? l->s.sw : 1;
    size_t we = (l->out_shape[1] - 1) * sw + l->s.kw;
    mt_code rc =
        mt_layer__halo_plan(l, "kernel_size", l->hx, dim_name, p, k, l->out_shape[0] / p, sh,
                            mt_conv2d_pad_top(&g), l->s.kh, we, mt_conv2d_pad_left(&g), hl, err);
    if (l->use_loc > 0)
        hl->c = l->use_loc * p / l->in_rows;
    return rc;
}

/* The "valid" convolution of the extended band, over this device's channels and filters. */
static mt_conv2d_geom band_geom(const mt_layer *l, const mt_layer_halo *hl, size_t batch,
                                const mt_layer_dev *dev)
{
    mt_conv2d_geom g = dev_geom(l, batch, dev);
    g.h = hl->he;
    g.w = hl->we;
    g.same = false;
    return g;
}

/* Rows of one example's band (input, output). */
static size_t band_rows(const mt_layer *l, const mt_layer_dev *dev, bool out)
{
    return (out ? l->out_rows : l->in_rows) / mt_layer__dsz(dev, l->hx);
}

static mt_code band_plan(const mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    mt_layer_halo hl;
    mt_code rc = mt_layer__bands_check(l, p, err);
    return rc == MT_OK
               ? band_halo(l, p->dim_name(p->ctx, l->hx), mt_layer__psz(p, l->hx), 0, &hl, err)
               : rc;
}

static mt_code band_alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                          mt_layer_alloc *a, mt_err *err)
{
    mt_layer_halo hl;
    mt_conv2d_geom g;
    mt_code rc = band_halo(l, NULL, mt_layer__dsz(dev, l->hx), 0, &hl, err);

    g = band_geom(l, &hl, b, dev);
    if (rc == MT_OK)
        rc = mt_layer__io(l, st, b, a, err);
    if (rc == MT_OK)
        rc = mt_layer__halo_alloc(l, &hl, st, b, HSEND, a, err);
    for (int k = KINB; k <= DKINB && rc == MT_OK && l->xf != l->kin; k++)
        if (k == KINB || !mt_layer__no_dx(l))
            rc = mt_layer_buf(a, l, &st->scr[k], b * l->use_loc, sizeof(float), err);
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[COLS], mt_conv2d_cols_size(&g), sizeof(float), err);
    if (rc == MT_OK && !mt_layer__no_dx(l))
        rc = mt_layer_buf(a, l, &st->scr[DCOLS], mt_conv2d_cols_size(&g), sizeof(float), err);
    if (rc == MT_OK && a->invariant && !mt_layer__no_dx(l))
        rc = dy_work(l, b, dev, a, err);
    return rc;
}

static mt_code band_forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                            const mt_layer_pass *ps)
{
    mt_layer_halo hl;
    mt_conv2d_geom g;
    const float *x = l->xf != l->kin ? st->scr[KINB] : st->in, *bias = st->pv[BIAS];
    mt_code rc = band_halo(l, NULL, mt_layer__dsz(dev, l->hx), (size_t)dev->coord(dev->ctx, l->hx),
                           &hl, ps->err);
    if (rc == MT_OK && l->xf != l->kin)
        rc = dev->reshard(dev->ctx, st->in, ps->batch * band_rows(l, dev, false), l->in_c, l->xf,
                          l->kin, st->scr[KINB]);
    if (rc == MT_OK)
        rc =
            mt_layer__halo_forward(&hl, dev, x, ps->batch, st->scr[HSEND], st->scr[HRECV], st->xin);
    if (rc != MT_OK)
        return rc;
    g = band_geom(l, &hl, ps->batch, dev);
    st->used = st->xin;
    if (ps->leaves > 0) /* mesh_invariant: each output element's chain as on one device */
        mt_repro_conv2d_forward(st->out, st->scr[COLS], ps->scratch, st->used, st->pv[KERNEL],
                                l->kin < 0 ? bias : NULL, &g, inv_lc(l, dev));
    else if (ps->ref)
        mt_conv2d_forward_ref(st->out, st->used, st->pv[KERNEL], l->kin < 0 ? bias : NULL, &g);
    else
        mt_conv2d_forward(st->out, st->scr[COLS], st->used, st->pv[KERNEL],
                          l->kin < 0 ? bias : NULL, &g);
    if (l->kin < 0)
        return MT_OK;
    return mt_layer__kin_finish(l, st, dev, ps->batch * band_rows(l, dev, true), g.f, bias);
}

/*
 * mesh_invariant on bands: dW and db per batch leaf and height leaf of the output rows, the bands'
 * allreduce once per batch leaf (core/repro's mt_repro_conv2d_wgrad). dx keeps col2im's chain:
 * the band gathers its neighbours' rows of dy whose windows read its pixels (dy_halo), computes
 * their dcols and sums its own pixels' entries in the whole image's order
 * (mt_repro_conv2d_col2im_band), so nothing is sent back. Channels split as without bands
 * (docs/reproducibility.md, point 6): the halo carries the device's filters, dcols contract over
 * them in their K-leaves and are summed over kout (the top of the filters' tree) before col2im;
 * an input-channel split's col2im covers the device's channels, resharded back to the input's.
 */
static mt_code inv_band_backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                                 const mt_layer_pass *ps, const mt_conv2d_geom *g, float *dy)
{
    size_t p = mt_layer__dsz(dev, l->hx), k = (size_t)dev->coord(dev->ctx, l->hx);
    size_t hb = l->in_shape[0] / p, ow = l->out_shape[1], send;
    mt_conv2d_geom whole =
        dev_geom(l, ps->batch, dev); /* the whole height, the device's channels */
    float *dband = l->xf != l->kin ? st->scr[DKINB] : st->dx_buf;
    mt_layer_hleaves hv;
    mt_layer_halo dh;
    mt_repro_rows rw;
    float *recv, *dyx, *dcx;
    mt_code rc = mt_repro_conv2d_wgrad(
        st->pg[KERNEL], st->pg[BIAS], ps->scratch, dy, st->scr[COLS], g, inv_lc(l, dev),
        ps->leaf_examples, ps->leaves,
        mt_layer__hleaves(&hv, l, dev, ps, l->out_shape[0], band_rows(l, dev, true)), ps->acc_w,
        ps->acc_b);

    if (rc != MT_OK || st->dx_buf == NULL)
        return rc;
    if ((rc = dy_halo(l, dev, p, k, &dh, ps->err)) != MT_OK)
        return rc;
    send = mt_layer__halo_send_size(&dh, ps->batch);
    recv = ps->work + send;
    dyx = recv + p * send;
    dcx = dyx + ps->batch * dh.he * ow * whole.f;
    rc = mt_layer__halo_forward(&dh, dev, dy, ps->batch, ps->work, recv, dyx);
    if (rc != MT_OK)
        return rc;
    mt_repro_conv2d_dcols(dcx, ps->scratch, dyx, st->pv[KERNEL], &whole, inv_lc(l, dev),
                          ps->batch * dh.he * ow,
                          mt_repro_leaves(l->s.filters) / (int)mt_layer__dsz(dev, l->kout));
    rc = dev->allreduce(dev->ctx, l->kout, dcx,
                        ps->batch * dh.he * ow * l->s.kh * l->s.kw * whole.c);
    if (rc != MT_OK)
        return rc;
    rw = (mt_repro_rows){(size_t)dh.g0, dh.he, k * hb, hb};
    mt_repro_conv2d_col2im_band(dband, dcx, &whole, inv_lc(l, dev), &rw);
    if (dband == st->dx_buf)
        return MT_OK;
    return dev->reshard(dev->ctx, dband, ps->batch * band_rows(l, dev, false), l->in_c, l->kin,
                        l->xf, st->dx_buf);
}

/* The kernel and bias gradients are partial sums over the bands: summed over the height dim
 * here (then over the batch dim with every other gradient). The input gradient of the band in
 * the kin layout is finished as without bands (summed over kout, resharded to xf). */
static mt_code band_backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                             const mt_layer_pass *ps, float *dy, float **dx)
{
    mt_layer_halo hl;
    mt_conv2d_geom g;
    float *dext = st->dx_buf != NULL ? st->dxk : NULL;
    float *dband = l->xf != l->kin ? st->scr[DKINB] : st->dx_buf;
    size_t kn;
    mt_code rc = band_halo(l, NULL, mt_layer__dsz(dev, l->hx), (size_t)dev->coord(dev->ctx, l->hx),
                           &hl, ps->err);
    if (rc != MT_OK)
        return rc;
    g = band_geom(l, &hl, ps->batch, dev);
    kn = l->s.kh * l->s.kw * g.c * g.f;
    *dx = st->dx_buf;
    if (ps->leaves > 0)
        return inv_band_backward(l, st, dev, ps, &g, dy);
    if (ps->ref)
        mt_conv2d_backward_ref(dext, st->pg[KERNEL], st->pg[BIAS], dy, st->used, st->pv[KERNEL],
                               &g);
    else
        mt_conv2d_backward(dext, st->pg[KERNEL], st->pg[BIAS], st->scr[DCOLS], dy, st->scr[COLS],
                           st->pv[KERNEL], &g);
    rc = dev->allreduce(dev->ctx, l->hx, st->pg[KERNEL], kn);
    if (rc == MT_OK && st->pg[BIAS] != NULL)
        rc = dev->allreduce(dev->ctx, l->hx, st->pg[BIAS], g.f);
    if (rc != MT_OK || st->dx_buf == NULL)
        return rc;
    rc = mt_layer__halo_backward(&hl, dev, dext, ps->batch, st->scr[HSEND], st->scr[HRECV], dband);
    return rc == MT_OK ? mt_layer__dx_finish(l, st, dev, dband, ps->batch, l->kin) : rc;
}

static uint64_t halo(const mt_layer *l, size_t b, const mt_layer_planner *p)
{
    return mt_layer__halo_step(l, b, p, band_halo);
}

/* Height bands: the halo allgathers (every member's blocks) and the weight gradients' allreduce
 * over hx (of this device's channels and filters), besides the channel sharding's.
 * mesh_invariant: a filter split's backward allreduce is on dcols (inv_backward: KH x KW im2col
 * entries per output pixel of the device's channels), not on dx. */
static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    size_t c = l->in_c / mt_layer__psz(p, l->kin), f = l->s.filters / mt_layer__psz(p, l->kout);
    mt_layer__comm_kernel(l, b, bdim, p, add, per_dim);
    if (p->invariant && l->kout >= 0 && l->hx < 0 && !mt_layer__no_dx(l)) {
        mt_conv2d_geom g = geom(l, b, mt_layer__psz(p, l->kin), mt_layer__psz(p, l->kout));
        per_dim[l->kout] -= b * l->use_loc; /* mt_layer__comm_kernel's dx, added just above */
        add(per_dim, l->kout, mt_conv2d_cols_size(&g));
    }
    mt_layer__halo_comm(l, b, p, band_halo, add, per_dim);
    add(per_dim, l->hx, l->s.kh * l->s.kw * c * f + (l->s.use_bias ? f : 0));
}

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    size_t ks[4] = {l->s.kh, l->s.kw, 0, l->s.filters}, bs[1] = {l->s.filters};
    mt_conv2d_geom g;
    mt_code rc;

    if (l->in_rank != 3)
        return mt_layer__shape_error(l, "an image input (height, width, channels)", err);
    g = geom(l, 0, 1, 1);
    if (mt_conv2d_out_h(&g) == 0 || mt_conv2d_out_w(&g) == 0) {
        char sh[64];
        mt_layer_shape_text(sh, sizeof(sh), l->in_rank, l->in_shape);
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d].kernel_size: %zux%zu is larger than the input %s "
                          "with valid padding",
                          l->idx, l->s.kh, l->s.kw, sh);
    }
    l->out_rank = 3;
    l->out_shape[0] = mt_conv2d_out_h(&g);
    l->out_shape[1] = mt_conv2d_out_w(&g);
    l->out_shape[2] = l->s.filters;
    ks[2] = l->in_shape[2];
    rc = p->add_param(p->ctx, l, KERNEL, "kernel", 4, ks, MT_INIT_GLOROT_UNIFORM, true,
                      MT_LAYER_FROM_MAP, err);
    if (rc != MT_OK)
        return rc;
    for (int a = 0; a < 2; a++)
        if (p->param_dim(p->ctx, l, KERNEL, a) >= 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "layouts: %s.kernel axis %d: only the channel axes (2: input, 3: "
                              "output) of a conv2d kernel may be sharded",
                              l->s.name, a);
    l->kin = p->param_dim(p->ctx, l, KERNEL, 2);
    l->kout = p->param_dim(p->ctx, l, KERNEL, 3);
    if (l->s.use_bias)
        rc = p->add_param(p->ctx, l, BIAS, "bias", 1, bs, MT_INIT_ZEROS, true, l->kout, err);
    l->of = l->kout;
    if (rc == MT_OK && l->hx >= 0)
        rc = band_plan(l, p, err);
    return rc;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    mt_conv2d_geom g = dev_geom(l, b, dev);
    bool dx = !mt_layer__no_dx(l);
    mt_code rc;

    if (l->hx >= 0)
        return band_alloc(l, st, b, dev, a, err);
    rc = mt_layer__io(l, st, b, a, err);

    if (rc == MT_OK && l->xf != l->kin)
        rc = mt_layer_buf(a, l, (void **)&st->xin, b * l->use_loc, sizeof(float), err);
    if (rc == MT_OK && l->xf != l->kin && dx)
        rc = mt_layer_buf(a, l, (void **)&st->dxk, b * l->use_loc, sizeof(float), err);
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[COLS], mt_conv2d_cols_size(&g), sizeof(float), err);
    if (rc == MT_OK && dx)
        rc = mt_layer_buf(a, l, &st->scr[DCOLS], mt_conv2d_cols_size(&g), sizeof(float), err);
    return rc;
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    mt_conv2d_geom g = dev_geom(l, ps->batch, dev);
    float *bias = st->pv[BIAS];
    size_t rows = ps->batch * l->out_rows, f = l->out_loc / l->out_rows;
    mt_code rc;

    if (l->hx >= 0)
        return band_forward(l, st, dev, ps);
    if (st->xin != NULL) {
        rc =
            dev->reshard(dev->ctx, st->in, ps->batch * l->in_rows, l->in_c, l->xf, l->kin, st->xin);
        if (rc != MT_OK)
            return rc;
        st->used = st->xin;
    }
    if (ps->leaves > 0) /* mesh_invariant: core/repro's canonical product over im2col rows */
        mt_repro_conv2d_forward(st->out, st->scr[COLS], ps->scratch, st->used, st->pv[KERNEL],
                                l->kin < 0 ? bias : NULL, &g, inv_lc(l, dev));
    else if (ps->ref)
        mt_conv2d_forward_ref(st->out, st->used, st->pv[KERNEL], l->kin < 0 ? bias : NULL, &g);
    else
        mt_conv2d_forward(st->out, st->scr[COLS], st->used, st->pv[KERNEL],
                          l->kin < 0 ? bias : NULL, &g);
    if (l->kin < 0)
        return MT_OK;
    return mt_layer__kin_finish(l, st, dev, rows, f, bias);
}

/*
 * mesh_invariant (docs/reproducibility.md, point 6): dW and db per leaf folded in the leaf tree,
 * dcols in the filters' chains this device holds (an input-channel split: dcols and dx of its
 * channels, resharded to the input's layout as usual). A filter split sums the partial dcols over
 * kout (the top of the canonical tree over the filters) before col2im: summing dx after it, as
 * the fixed_mesh path does, would add the devices' pixel sums in another order.
 */
static mt_code inv_backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                            const mt_layer_pass *ps, const mt_conv2d_geom *g, float *dy, float *dxk)
{
    float *dcols = dxk != NULL ? st->scr[DCOLS] : NULL;
    mt_layer_hleaves hv;
    mt_code rc;

    if (dcols != NULL)
        mt_repro_conv2d_dcols(dcols, ps->scratch, dy, st->pv[KERNEL], g, inv_lc(l, dev),
                              ps->batch * l->out_rows,
                              mt_repro_leaves(l->s.filters) / (int)mt_layer__dsz(dev, l->kout));
    rc = mt_repro_conv2d_wgrad(st->pg[KERNEL], st->pg[BIAS], ps->scratch, dy, st->scr[COLS], g,
                               inv_lc(l, dev), ps->leaf_examples, ps->leaves,
                               mt_layer__hleaves(&hv, l, dev, ps, l->out_shape[0], l->out_rows),
                               ps->acc_w, ps->acc_b);
    if (rc != MT_OK || dxk == NULL)
        return rc;
    rc = dev->allreduce(dev->ctx, l->kout, dcols, mt_conv2d_cols_size(g));
    if (rc != MT_OK)
        return rc;
    mt_repro_conv2d_col2im(dxk, dcols, g, inv_lc(l, dev));
    if (dxk == st->dx_buf)
        return MT_OK;
    return dev->reshard(dev->ctx, dxk, ps->batch * l->in_rows, l->in_c, l->kin, l->xf, st->dx_buf);
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    mt_conv2d_geom g = dev_geom(l, ps->batch, dev);
    float *dxk = st->dx_buf != NULL && st->dxk != NULL ? st->dxk : st->dx_buf;

    if (l->hx >= 0)
        return band_backward(l, st, dev, ps, dy, dx);
    *dx = st->dx_buf;
    if (ps->leaves > 0)
        return inv_backward(l, st, dev, ps, &g, dy, dxk);
    if (ps->ref)
        mt_conv2d_backward_ref(dxk, st->pg[KERNEL], st->pg[BIAS], dy, st->used, st->pv[KERNEL], &g);
    else
        mt_conv2d_backward(dxk, st->pg[KERNEL], st->pg[BIAS], st->scr[DCOLS], dy, st->scr[COLS],
                           st->pv[KERNEL], &g);
    if (st->dx_buf == NULL)
        return MT_OK;
    return mt_layer__dx_finish(l, st, dev, dxk, ps->batch, l->kin);
}

const mt_layer_ops mt_layer_conv2d_ops = {
    .type = "conv2d",
    .kind = MT_LAYER_CONV2D,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .bands = true,
    .bands_channels = true,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .example =
        "\"model\":{\"input_shape\":[6,6,2],\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
        "\"kernel_size\":3,\"padding\":\"same\",\"activation\":\"relu\"},{\"type\":\"conv2d\","
        "\"filters\":2,\"kernel_size\":[3,2],\"strides\":[2,1],\"padding\":\"same\"},{\"type\":"
        "\"flatten\"},{\"type\":\"dense\",\"units\":"
        "3}]},"
        "\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"conv2d_1\\\\.kernel\":[\"unsharded\","
        "\"unsharded\",\"unsharded\",\"model\"],\"conv2d_2\\\\.kernel\":[\"unsharded\","
        "\"unsharded\",\"model\",\"unsharded\"]}",
    .comm = comm,
    .halo = halo,
};
