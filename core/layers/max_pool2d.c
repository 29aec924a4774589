/* SPDX-License-Identifier: MIT */
/*
 * max_pool2d.c — max and average pooling over NHWC images with any window ("pool_size",
 * default 2) and stride ("strides", default the window), without padding (Keras' "valid": the
 * edges that do not fill a window are dropped). Max pooling keeps the argmax of every window
 * for the backward; the 2x2 window with stride 2 takes the vectorised kernel.
 *
 * Sharding: channels sharded over the input's dim stay so (each device pools its channels);
 * height bands pool alone when their windows stay inside them, else borrow their neighbours'
 * boundary rows (the halo, layer_bands.c) and pool the extended band. mesh_invariant on bands:
 * the backward gathers a halo of dy instead and sums each of its own pixels' gradients in the
 * whole image's window order (inv_band_backward), so overlapping windows keep the bits.
 * Reference: mt_maxpool2_forward_ref / mt_maxpool2_backward_ref for 2x2 (core/tensor); the
 * general windows are plain loops (mt_maxpool_forward, mt_avgpool_forward).
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "tensor/mt_tensor.h"

enum { ARGMAX, HSEND, HRECV }; /* scratch; the halo's blocks (height bands) */

static const char *const keys[] = {"pool_size", "strides", "padding", NULL};

static mt_code parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    char path[112];
    const char *pad = NULL;
    mt_code rc;

    out->kh = out->kw = 2;
    MT_LAYER_PATH(path, base, "pool_size");
    rc = mt_model_field_pair(node, "pool_size", path, &out->kh, &out->kw, false, err);
    out->sh = out->kh;
    out->sw = out->kw;
    MT_LAYER_PATH(path, base, "strides");
    if (rc == MT_OK)
        rc = mt_model_field_pair(node, "strides", path, &out->sh, &out->sw, false, err);
    MT_LAYER_PATH(path, base, "padding");
    if (rc == MT_OK)
        rc = mt_model_field_str(node, "padding", path, &pad, err);
    if (rc == MT_OK && pad != NULL && strcmp(pad, "valid") != 0)
        rc = mt_model_field_bad(err, path, "only \"valid\" is supported");
    return rc;
}

/* The geometry of h input rows (the whole height, or a band) of c channels. */
static mt_pool2d_geom geom(const mt_layer *l, size_t batch, size_t h, size_t c)
{
    mt_pool2d_geom g = {batch, h, l->in_shape[1], c, l->s.kh, l->s.kw, l->s.sh, l->s.sw};
    return g;
}

/* This device's rows and channels. */
static mt_pool2d_geom dev_geom(const mt_layer *l, size_t batch, const mt_layer_dev *dev)
{
    return geom(l, batch, l->in_shape[0] / mt_layer__dsz(dev, l->hx),
                l->in_c / mt_layer__dsz(dev, l->xf));
}

/*
 * Height bands (docs/spmd.md): output band k of p is rows [k ob, (k + 1) ob). When no band reads
 * another's rows and each holds ob whole strides, it pools alone; otherwise (overlapping windows,
 * bands not of whole strides) it borrows its neighbours' rows (the halo, layer_bands.c) and pools
 * the extended band.
 */
static mt_code band_halo(const mt_layer *l, const char *dim_name, size_t p, size_t k,
                         mt_layer_halo *hl, mt_err *err)
{
    size_t we = (l->out_shape[1] - 1) * l->s.sw + l->s.kw;
    return mt_layer__halo_plan(l, "pool_size", l->hx, dim_name, p, k, l->out_shape[0] / p, l->s.sh,
                               0, l->s.kh, we, 0, hl, err);
}

static bool band_alone(const mt_layer *l, const mt_layer_halo *hl)
{
    return hl->top + hl->bot == 0 && (l->out_shape[0] / hl->p) * l->s.sh == hl->h;
}

static mt_code band_plan(const mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    mt_layer_halo hl;
    mt_code rc = mt_layer__bands_check(l, p, err);
    return rc == MT_OK
               ? band_halo(l, p->dim_name(p->ctx, l->hx), mt_layer__psz(p, l->hx), 0, &hl, err)
               : rc;
}

/* The band's halo at this device (hl->p == 0 without bands). */
static mt_code dev_halo(const mt_layer *l, const mt_layer_dev *dev, mt_layer_halo *hl, mt_err *err)
{
    memset(hl, 0, sizeof(*hl));
    if (l->hx < 0)
        return MT_OK;
    return band_halo(l, NULL, mt_layer__dsz(dev, l->hx), (size_t)dev->coord(dev->ctx, l->hx), hl,
                     err);
}

/* Whether the layer pools an extended band (st->xin) rather than its input. */
static bool extended(const mt_layer *l, const mt_layer_halo *hl)
{
    return l->hx >= 0 && !band_alone(l, hl);
}

static bool two_by_two(const mt_layer *l)
{
    return l->s.kind == MT_LAYER_MAX_POOL2D && l->s.kh == 2 && l->s.kw == 2 && l->s.sh == 2 &&
           l->s.sw == 2;
}

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    mt_pool2d_geom g = geom(l, 0, l->in_shape[0], l->in_c);
    if (l->in_rank != 3)
        return mt_layer__shape_error(l, "an image input (height, width, channels)", err);
    if (mt_pool2d_out_h(&g) == 0 || mt_pool2d_out_w(&g) == 0) {
        char sh[64];
        mt_layer_shape_text(sh, sizeof(sh), l->in_rank, l->in_shape);
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d]: %s input %s is smaller than its %zux%zu window",
                          l->idx, l->ops->type, sh, l->s.kh, l->s.kw);
    }
    l->out_rank = 3;
    l->out_shape[0] = mt_pool2d_out_h(&g);
    l->out_shape[1] = mt_pool2d_out_w(&g);
    l->out_shape[2] = l->in_shape[2];
    l->of = l->xf;
    return l->hx >= 0 ? band_plan(l, p, err) : MT_OK;
}

/* mesh_invariant on bands: floats per output pixel of the backward's dy halo: dy, and for max
 * pooling each window's argmax as its offset in the window (inv_band_backward). */
static size_t dy_c(const mt_layer *l)
{
    return (l->s.kind == MT_LAYER_MAX_POOL2D ? 2 : 1) * l->in_c;
}

/* mesh_invariant on bands: the work area of the backward's dy halo for b examples (max pooling's
 * packed band, the blocks sent and gathered, dy's extended band), the most any band needs. */
static mt_code dy_work(const mt_layer *l, size_t b, const mt_layer_dev *dev, mt_layer_alloc *a,
                       mt_err *err)
{
    size_t p = mt_layer__dsz(dev, l->hx), c = dy_c(l), he, send;
    size_t packed = l->s.kind == MT_LAYER_MAX_POOL2D ? b * l->out_loc * 2 : 0;
    mt_code rc = mt_layer__dy_halo_most(l, p, 0, c, b, &he, &send, err);
    if (rc == MT_OK)
        mt_layer_work(a, packed + (p + 1) * send + b * he * l->out_shape[1] * c);
    return rc;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    mt_layer_halo hl;
    mt_code rc = dev_halo(l, dev, &hl, err);

    if (rc == MT_OK)
        rc = mt_layer__io(l, st, b, a, err);
    if (rc == MT_OK && l->s.kind == MT_LAYER_MAX_POOL2D)
        rc = mt_layer_buf(a, l, &st->scr[ARGMAX], b * l->out_loc, sizeof(int32_t), err);
    if (rc == MT_OK && extended(l, &hl))
        rc = mt_layer__halo_alloc(l, &hl, st, b, HSEND, a, err);
    if (rc == MT_OK && extended(l, &hl) && a->invariant && !mt_layer__no_dx(l))
        rc = dy_work(l, b, dev, a, err);
    return rc;
}

/* Pool x (the geometry g: the input, a band or an extended band) into st->out. */
static void pool_forward(const mt_layer *l, mt_layer_state *st, const mt_layer_pass *ps,
                         const float *x, const mt_pool2d_geom *g)
{
    if (two_by_two(l))
        (ps->ref ? mt_maxpool2_forward_ref : mt_maxpool2_forward)(st->out, st->scr[ARGMAX], x,
                                                                  ps->batch, g->h, g->w, g->c);
    else if (l->s.kind == MT_LAYER_MAX_POOL2D)
        mt_maxpool_forward(st->out, st->scr[ARGMAX], x, g);
    else
        mt_avgpool_forward(st->out, x, g);
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    mt_pool2d_geom g = dev_geom(l, ps->batch, dev);
    mt_layer_halo hl;
    mt_code rc = dev_halo(l, dev, &hl, ps->err);

    if (rc != MT_OK || !extended(l, &hl)) {
        if (rc == MT_OK)
            pool_forward(l, st, ps, st->in, &g);
        return rc;
    }
    rc = mt_layer__halo_forward(&hl, dev, st->in, ps->batch, st->scr[HSEND], st->scr[HRECV],
                                st->xin);
    g.h = hl.he;
    g.w = hl.we;
    if (rc == MT_OK)
        pool_forward(l, st, ps, st->xin, &g);
    return rc;
}

/* Max pooling's band of dy packed for the dy halo: per output pixel its c gradients, then each
 * one's argmax (an index into the forward's pooled input of geometry g) as its offset ky PW + kx
 * in its window, exact in a float. */
static void pack_argmax(const mt_layer *l, float *pk, const float *dy, const int32_t *am,
                        const mt_pool2d_geom *g, size_t pixels, size_t ob, size_t ow)
{
    size_t c = g->c;
    for (size_t i = 0; i < pixels; i++) {
        size_t oy = i / ow % ob, ox = i % ow;
        for (size_t j = 0; j < c; j++) {
            size_t a = (size_t)am[i * c + j];
            size_t ky = a / (c * g->w) % g->h - oy * l->s.sh, kx = a / c % g->w - ox * l->s.sw;
            pk[i * 2 * c + j] = dy[i * c + j];
            pk[i * 2 * c + c + j] = (float)(ky * l->s.kw + kx);
        }
    }
}

/*
 * mesh_invariant on height bands (docs/reproducibility.md, "Height leaves"): a pixel's gradient is
 * the one-device chain, from 0 over the windows that take it in output order (as
 * mt_maxpool_backward and mt_avgpool_backward add them), also where windows overlap across
 * bands: adding the neighbours' partial sums (the halo's backward) would associate them
 * otherwise. The band gathers its neighbours' rows of dy whose windows read its pixels
 * (mt_layer__dy_halo, the forward halo's allgather) — for max pooling with each window's argmax
 * as its offset in the window, so the argmax is the one the forward found over the whole window —
 * and adds, in global output order, what falls on its own rows; nothing is sent back. g: the
 * extended band's geometry, which the forward's argmax indexes.
 */
static mt_code inv_band_backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                                 const mt_layer_pass *ps, const mt_pool2d_geom *g, const float *dy)
{
    bool mx = l->s.kind == MT_LAYER_MAX_POOL2D;
    size_t p = mt_layer__dsz(dev, l->hx), k = (size_t)dev->coord(dev->ctx, l->hx);
    size_t c = l->in_c, cc = dy_c(l), ow = l->out_shape[1], ob = l->out_shape[0] / p;
    size_t hb = l->in_shape[0] / p, w = l->in_shape[1], nt = l->s.kh * l->s.kw;
    size_t packed = mx ? ps->batch * ob * ow * cc : 0, send;
    float inv = 1.0f / (float)nt, *recv, *ext;
    mt_layer_halo dh;
    mt_code rc = mt_layer__dy_halo(l, p, k, 0, cc, &dh, ps->err);

    if (rc != MT_OK)
        return rc;
    send = mt_layer__halo_send_size(&dh, ps->batch);
    recv = ps->work + packed + send;
    ext = recv + p * send;
    if (mx)
        pack_argmax(l, ps->work, dy, st->scr[ARGMAX], g, ps->batch * ob * ow, ob, ow);
    rc = mt_layer__halo_forward(&dh, dev, mx ? ps->work : dy, ps->batch, ps->work + packed, recv,
                                ext);
    if (rc != MT_OK)
        return rc;
    memset(st->dx_buf, 0, ps->batch * hb * w * c * sizeof(float));
    for (size_t b = 0; b < ps->batch; b++)
        for (size_t r = 0; r < dh.he; r++)
            for (size_t ox = 0; ox < ow; ox++) {
                const float *e = ext + ((b * dh.he + r) * ow + ox) * cc;
                size_t oy = (size_t)dh.g0 + r;
                for (size_t j = 0; j < c; j++) {
                    size_t t0 = mx ? (size_t)e[c + j] : 0, t1 = mx ? t0 + 1 : nt;
                    float d = mx ? e[j] : e[j] * inv;
                    for (size_t t = t0; t < t1; t++) {
                        size_t gy = oy * l->s.sh + t / l->s.kw, gx = ox * l->s.sw + t % l->s.kw;
                        if (gy >= k * hb && gy < (k + 1) * hb)
                            st->dx_buf[((b * hb + gy - k * hb) * w + gx) * c + j] += d;
                    }
                }
            }
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    mt_pool2d_geom g = dev_geom(l, ps->batch, dev);
    mt_layer_halo hl;
    bool ext;
    float *d;
    mt_code rc = dev_halo(l, dev, &hl, ps->err);

    *dx = st->dx_buf;
    if (rc != MT_OK || st->dx_buf == NULL)
        return rc;
    ext = extended(l, &hl);
    d = ext ? st->dxk : st->dx_buf;
    if (ext) {
        g.h = hl.he;
        g.w = hl.we;
    }
    if (ext && ps->leaves > 0)
        return inv_band_backward(l, st, dev, ps, &g, dy);
    if (two_by_two(l))
        (ps->ref ? mt_maxpool2_backward_ref : mt_maxpool2_backward)(
            d, dy, st->scr[ARGMAX], ps->batch * g.h * g.w * g.c, ps->batch * l->out_loc);
    else if (l->s.kind == MT_LAYER_MAX_POOL2D)
        mt_maxpool_backward(d, dy, st->scr[ARGMAX], &g);
    else
        mt_avgpool_backward(d, dy, &g);
    if (!ext)
        return MT_OK;
    return mt_layer__halo_backward(&hl, dev, d, ps->batch, st->scr[HSEND], st->scr[HRECV],
                                   st->dx_buf);
}

/* Height bands: the halo allgathers when the bands borrow rows. */
static uint64_t halo(const mt_layer *l, size_t b, const mt_layer_planner *p)
{
    return mt_layer__halo_step(l, b, p, band_halo);
}

static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    (void)bdim;
    mt_layer__halo_comm(l, b, p, band_halo, add, per_dim);
}

const mt_layer_ops mt_layer_max_pool2d_ops = {
    .type = "max_pool2d",
    .kind = MT_LAYER_MAX_POOL2D,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = false,
    .bands = true,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .comm = comm,
    .halo = halo,
    .example = "\"model\":{\"input_shape\":[7,6,2],\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
               "\"kernel_size\":3,\"padding\":\"same\"},{\"type\":\"max_pool2d\"},"
               "{\"type\":\"max_pool2d\",\"pool_size\":2,\"strides\":1},"
               "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},"
               "\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"conv2d_1\\\\.kernel\":"
               "[\"unsharded\",\"unsharded\",\"unsharded\",\"model\"]}",
};

const mt_layer_ops mt_layer_average_pooling2d_ops = {
    .type = "average_pooling2d",
    .kind = MT_LAYER_AVERAGE_POOLING2D,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .bands = true,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .comm = comm,
    .halo = halo,
    .example = "\"model\":{\"input_shape\":[7,6,2],\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
               "\"kernel_size\":3,\"padding\":\"same\",\"activation\":\"relu\"},"
               "{\"type\":\"average_pooling2d\",\"pool_size\":3,\"strides\":2},"
               "{\"type\":\"average_pooling2d\",\"pool_size\":[2,1]},"
               "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},"
               "\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"conv2d_1\\\\.kernel\":"
               "[\"unsharded\",\"unsharded\",\"unsharded\",\"model\"]}",
};
