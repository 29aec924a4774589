/* SPDX-License-Identifier: MIT */
/*
 * layer_bands.c — images sharded on their height (layers_int.h; docs/spmd.md, "Images sharded on
 * their height"): which layers may read a banded activation, and the halo exchange of a layer
 * whose output band reads input rows of the neighbouring bands (conv2d, pooling).
 *
 * DESIGN: band k of p holds rows [k h, (k + 1) h) of every example. A window layer's output band
 * k reads a contiguous range of input rows that may start in band k - 1 and end in band k + 1
 * (never further: refused at plan). Every band sends the same block, its first `top` and last
 * `bot` rows (top, bot: the most any band borrows from below / above), through one allgather
 * over the height dim: core/coll has no point-to-point, so a device receives p blocks and keeps
 * its neighbours'. The layer then runs its usual kernel, "valid", on the extended band (its rows
 * plus the borrowed ones plus zero padding, columns padded as on one device). The backward sends
 * the gradient of the borrowed rows back the same way; each band adds, in a fixed order (its
 * own, then from band k - 1, then from band k + 1), what its neighbours computed for its rows.
 * Threading: called on a device thread with that device's buffers. Tests: tests/unit/test_spmd.c
 * (test_spmd_height_bands_*).
 */
#include <string.h>

#include "layers/layers_int.h"

mt_code mt_layer__bands_input(const mt_layer *l, int k, int hk, const mt_layer_planner *p,
                              mt_err *err)
{
    if (k > 0 && hk != l->hx) /* a join (add) of a banded and a whole input, say */
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): input %d is %s%s but input 0 is %s%s: the inputs "
                          "of an %s must be split into the same height bands",
                          l->idx, l->s.name, k, hk >= 0 ? "banded over " : "whole",
                          hk >= 0 ? p->dim_name(p->ctx, hk) : "",
                          l->hx >= 0 ? "banded over " : "whole",
                          l->hx >= 0 ? p->dim_name(p->ctx, l->hx) : "", l->ops->type);
    if (hk < 0 || l->ops->bands)
        return MT_OK;
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "model.layers[%d] (%s): %s does not run on height bands: its input's height "
                      "is sharded over '%s' (input_layout[1]); make the bands whole first with a "
                      "flatten or global_average_pooling2d",
                      l->idx, l->s.name, l->ops->type, p->dim_name(p->ctx, hk));
}

mt_code mt_layer__bands_check(const mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    int ch = l->xf >= 0 ? l->xf : l->of >= 0 ? l->of : l->kin >= 0 ? l->kin : l->kout;
    int hd = l->hx >= 0 ? l->hx : l->ho;
    size_t n = mt_layer__psz(p, l->ho);

    if (ch >= 0 && !l->ops->bands_channels)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): %s does not run on channels sharded over '%s' "
                          "together with height bands over '%s' (docs/spmd.md)",
                          l->idx, l->s.name, l->ops->type, p->dim_name(p->ctx, ch),
                          p->dim_name(p->ctx, hd));
    if (l->ho >= 0 && (l->out_rank != 3 || l->out_shape[0] % n != 0)) {
        char sh[64];
        mt_layer_shape_text(sh, sizeof(sh), l->out_rank, l->out_shape);
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): output %s: its height is not divisible by mesh "
                          "dimension '%s' of size %zu (the height is sharded into bands, "
                          "input_layout[1])",
                          l->idx, l->s.name, sh, p->dim_name(p->ctx, l->ho), n);
    }
    return MT_OK;
}

/* Input rows [*lo, *hi) (clipped to the image) that output band j reads. */
static void reach(const mt_layer_halo *hl, size_t ob, size_t s, size_t pt, size_t j, long *lo,
                  long *hi)
{
    long g0 = (long)(j * ob * s) - (long)pt, end = g0 + (long)hl->he;
    *lo = g0 < 0 ? 0 : g0;
    *hi = end > (long)hl->hh ? (long)hl->hh : end;
}

mt_code mt_layer__halo_plan(const mt_layer *l, const char *field, int dim, const char *dim_name,
                            size_t p, size_t k, size_t ob, size_t s, size_t pt, size_t kh,
                            size_t we, size_t pl, mt_layer_halo *hl, mt_err *err)
{
    memset(hl, 0, sizeof(*hl));
    hl->dim = dim;
    hl->p = p;
    hl->k = k;
    hl->hh = l->in_shape[0];
    hl->h = hl->hh / p;
    hl->w = l->in_shape[1];
    hl->c = l->in_c;
    hl->he = (ob - 1) * s + kh;
    hl->we = we;
    hl->pl = pl;
    hl->g0 = (long)(k * ob * s) - (long)pt;
    for (size_t j = 0; j < p; j++) {
        long lo, hi, up = (long)(j * hl->h), down = up + (long)hl->h;
        reach(hl, ob, s, pt, j, &lo, &hi);
        if (lo < up - (long)hl->h || hi > down + (long)hl->h)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.layers[%d] (%s).%s: output band %zu reads input rows %ld-%ld "
                              "but bands hold %zu rows (height %zu over '%s' of size %zu), and a "
                              "band reads only its neighbours' rows (%zu-row window, stride %zu)",
                              l->idx, l->s.name, field, j, lo, hi - 1, hl->h, hl->hh,
                              dim_name != NULL ? dim_name : "?", p, kh, s);
        if (up - lo > (long)hl->bot)
            hl->bot = (size_t)(up - lo);
        if (hi - down > (long)hl->top)
            hl->top = (size_t)(hi - down);
    }
    return MT_OK;
}

size_t mt_layer__halo_send_size(const mt_layer_halo *hl, size_t batch)
{
    return batch * (hl->top + hl->bot) * hl->w * hl->c;
}

uint64_t mt_layer__halo_floats(const mt_layer_halo *hl, size_t batch)
{
    return 2 * (uint64_t)mt_layer__halo_send_size(hl, batch);
}

uint64_t mt_layer__halo_step(const mt_layer *l, size_t batch, const mt_layer_planner *p,
                             mt_layer_halo_fn fn)
{
    mt_layer_halo hl;
    if (l->hx < 0 || fn(l, NULL, mt_layer__psz(p, l->hx), 0, &hl, NULL) != MT_OK)
        return 0;
    return mt_layer__halo_floats(&hl, batch);
}

void mt_layer__halo_comm(const mt_layer *l, size_t batch, const mt_layer_planner *p,
                         mt_layer_halo_fn fn, void (*add)(uint64_t *, int, uint64_t),
                         uint64_t *per_dim)
{
    add(per_dim, l->hx, mt_layer__psz(p, l->hx) * mt_layer__halo_step(l, batch, p, fn));
}

mt_code mt_layer__halo_alloc(const mt_layer *l, const mt_layer_halo *hl, mt_layer_state *st,
                             size_t b, int slot, mt_layer_alloc *a, mt_err *err)
{
    size_t ext = b * hl->he * hl->we * hl->c, send = mt_layer__halo_send_size(hl, b);
    mt_code rc = mt_layer_buf(a, l, (void **)&st->xin, ext, sizeof(float), err);
    if (rc == MT_OK && !mt_layer__no_dx(l))
        rc = mt_layer_buf(a, l, (void **)&st->dxk, ext, sizeof(float), err);
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[slot], send, sizeof(float), err);
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[slot + 1], hl->p * send, sizeof(float), err);
    return rc;
}

/* Columns of a source row copied into an extended row (valid padding may leave some out). */
static size_t halo_cols(const mt_layer_halo *hl)
{
    size_t room = hl->we > hl->pl ? hl->we - hl->pl : 0;
    return room < hl->w ? room : hl->w;
}

/*
 * Where global row gr of example b is: in the local band x, in the gathered block of a
 * neighbour (recv), or nowhere (padding: NULL). Blocks are [first top rows][last bot rows].
 */
static const float *row_of(const mt_layer_halo *hl, const float *x, const float *recv, size_t b,
                           long gr)
{
    size_t row = hl->w * hl->c, blk = (hl->top + hl->bot) * row, band;
    const float *nb;

    if (gr < 0 || gr >= (long)hl->hh)
        return NULL;
    band = (size_t)gr / hl->h;
    if (band == hl->k)
        return x + (b * hl->h + (size_t)gr - hl->k * hl->h) * row;
    nb = recv + (b * hl->p + band) * blk;
    if (band + 1 == hl->k) /* its last bot rows */
        return nb + (hl->top + (size_t)gr - (hl->k * hl->h - hl->bot)) * row;
    return nb + ((size_t)gr - band * hl->h) * row; /* band k + 1: its first top rows */
}

/* The allgather of every member's block of `batch` x blk floats, interleaved per example. */
static mt_code exchange(const mt_layer_halo *hl, const mt_layer_dev *dev, const float *send,
                        size_t batch, float *recv)
{
    size_t blk = (hl->top + hl->bot) * hl->w * hl->c;
    if (blk == 0)
        return MT_OK; /* the same on every band: nobody borrows */
    return dev->reshard(dev->ctx, send, batch, hl->p * blk, hl->dim, -1, recv);
}

mt_code mt_layer__halo_forward(const mt_layer_halo *hl, const mt_layer_dev *dev, const float *x,
                               size_t batch, float *send, float *recv, float *ext)
{
    size_t row = hl->w * hl->c, blk = (hl->top + hl->bot) * row, erow = hl->we * hl->c;
    size_t ncol = halo_cols(hl);
    mt_code rc;

    for (size_t b = 0; b < batch; b++) {
        const float *xb = x + b * hl->h * row;
        memcpy(send + b * blk, xb, hl->top * row * sizeof(float));
        memcpy(send + b * blk + hl->top * row, xb + (hl->h - hl->bot) * row,
               hl->bot * row * sizeof(float));
    }
    if ((rc = exchange(hl, dev, send, batch, recv)) != MT_OK)
        return rc;
    memset(ext, 0, batch * hl->he * erow * sizeof(float));
    for (size_t b = 0; b < batch; b++)
        for (size_t r = 0; r < hl->he; r++) {
            const float *src = row_of(hl, x, recv, b, hl->g0 + (long)r);
            if (src != NULL)
                memcpy(ext + (b * hl->he + r) * erow + hl->pl * hl->c, src,
                       ncol * hl->c * sizeof(float));
        }
    return MT_OK;
}

mt_code mt_layer__halo_backward(const mt_layer_halo *hl, const mt_layer_dev *dev, const float *dext,
                                size_t batch, float *send, float *recv, float *dx)
{
    size_t row = hl->w * hl->c, blk = (hl->top + hl->bot) * row, erow = hl->we * hl->c;
    size_t n = halo_cols(hl) * hl->c, k = hl->k, h = hl->h;
    mt_code rc;

    memset(dx, 0, batch * h * row * sizeof(float));
    memset(send, 0, batch * blk * sizeof(float));
    for (size_t b = 0; b < batch; b++)
        for (size_t r = 0; r < hl->he; r++) {
            long gr = hl->g0 + (long)r;
            const float *g = dext + (b * hl->he + r) * erow + hl->pl * hl->c;
            size_t band;
            float *dst;
            if (gr < 0 || gr >= (long)hl->hh)
                continue;
            band = (size_t)gr / h; /* sent back: [k - 1's last bot rows][k + 1's first top] */
            if (band == k)
                dst = dx + (b * h + (size_t)gr - k * h) * row;
            else if (band + 1 == k)
                dst = send + b * blk + ((size_t)gr - (k * h - hl->bot)) * row;
            else
                dst = send + b * blk + (hl->bot + (size_t)gr - (k + 1) * h) * row;
            for (size_t j = 0; j < n; j++)
                dst[j] += g[j];
        }
    if ((rc = exchange(hl, dev, send, batch, recv)) != MT_OK)
        return rc;
    for (size_t b = 0; blk > 0 && b < batch; b++) {
        float *db = dx + b * h * row;
        if (k > 0) { /* band k - 1's gradient of my first top rows */
            const float *up = recv + (b * hl->p + k - 1) * blk + hl->bot * row;
            for (size_t j = 0; j < hl->top * row; j++)
                db[j] += up[j];
        }
        if (k + 1 < hl->p) { /* band k + 1's gradient of my last bot rows */
            const float *down = recv + (b * hl->p + k + 1) * blk;
            for (size_t j = 0; j < hl->bot * row; j++)
                db[(h - hl->bot) * row + j] += down[j];
        }
    }
    return MT_OK;
}

/* ------------------------------------------------------------------ mesh_invariant */

/*
 * Output rows [*lo, *hi) whose windows (kh rows at stride sh, pt padding rows on top) read input
 * band j of p (clipped to the output): the rows of dy band j needs to sum its own pixels'
 * gradients in the whole image's order.
 */
static void dy_reach(const mt_layer *l, size_t p, size_t j, size_t pt, long *lo, long *hi)
{
    long h = (long)(l->in_shape[0] / p), sh = (long)(l->s.sh ? l->s.sh : 1);
    long oh = (long)l->out_shape[0];
    long a = (long)j * h + (long)pt - (long)l->s.kh + 1, b = ((long)j + 1) * h - 1 + (long)pt;

    *lo = a <= 0 ? 0 : (a + sh - 1) / sh;
    *hi = b < 0 ? 0 : b / sh + 1;
    *hi = *hi < oh ? *hi : oh;
    *hi = *hi > *lo ? *hi : *lo;
}

mt_code mt_layer__dy_halo(const mt_layer *l, size_t p, size_t k, size_t pt, size_t c,
                          mt_layer_halo *hl, mt_err *err)
{
    size_t ob = l->out_shape[0] / p;

    memset(hl, 0, sizeof(*hl));
    hl->dim = l->hx;
    hl->p = p;
    hl->k = k;
    hl->hh = l->out_shape[0];
    hl->h = ob;
    hl->w = hl->we = l->out_shape[1];
    hl->c = c;
    for (size_t j = 0; j < p; j++) {
        long lo, hi, up = (long)(j * ob), down = up + (long)ob;
        dy_reach(l, p, j, pt, &lo, &hi);
        if (lo < up - (long)ob || hi > down + (long)ob)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.layers[%d] (%s): input band %zu takes gradients from output "
                              "rows %ld-%ld, beyond its neighbours' %zu-row bands",
                              l->idx, l->s.name, j, lo, hi - 1, ob);
        if (up - lo > (long)hl->bot)
            hl->bot = (size_t)(up - lo);
        if (hi - down > (long)hl->top)
            hl->top = (size_t)(hi - down);
        if (j == k) {
            hl->g0 = lo;
            hl->he = (size_t)(hi - lo);
        }
    }
    return MT_OK;
}

mt_code mt_layer__dy_halo_most(const mt_layer *l, size_t p, size_t pt, size_t c, size_t batch,
                               size_t *he, size_t *send, mt_err *err)
{
    *he = *send = 0;
    for (size_t j = 0; j < p; j++) {
        mt_layer_halo hl;
        mt_code rc = mt_layer__dy_halo(l, p, j, pt, c, &hl, err);
        if (rc != MT_OK)
            return rc;
        *he = hl.he > *he ? hl.he : *he;
        *send = mt_layer__halo_send_size(&hl, batch);
    }
    return MT_OK;
}

static mt_code hleaves_reduce(void *ctx, float *buf, size_t n)
{
    const mt_layer_hleaves *h = ctx;
    return h->dev->allreduce(h->dev->ctx, h->dim, buf, n);
}

const mt_repro_bands *mt_layer__hleaves(mt_layer_hleaves *h, const mt_layer *l,
                                        const mt_layer_dev *dev, const mt_layer_pass *ps,
                                        size_t height, size_t rows_loc)
{
    int lh = (height > 0 ? mt_repro_leaves(height) : 1) / (int)mt_layer__dsz(dev, l->hx);

    h->dev = dev;
    h->dim = l->hx;
    h->b.lh = lh > 0 ? lh : 1; /* a band count not dividing Lh is refused at plan */
    h->b.hrows = rows_loc;
    h->b.zig = false; /* height leaves: contiguous rows */
    h->b.reduce = mt_layer__dsz(dev, l->hx) > 1 ? hleaves_reduce : NULL;
    h->b.ctx = h;
    h->b.acc = ps->acc_h;
    return &h->b;
}

const mt_repro_bands *mt_layer__pleaves(mt_layer_hleaves *h, const mt_layer *l,
                                        const mt_layer_dev *dev, const mt_layer_pass *ps)
{
    int lt = l->out_rank == 2 ? mt_repro_leaves(l->out_shape[0]) : 1;
    int lh = lt / (int)mt_layer__dsz(dev, l->sdim);

    h->dev = dev;
    h->dim = l->sdim;
    h->b.lh = lh > 0 ? lh : 1; /* a seq size not dividing Lt / 2 is refused at plan */
    h->b.hrows = l->out_rows;
    h->b.zig = true; /* the zig-zag blocks' canonical order */
    h->b.reduce = mt_layer__dsz(dev, l->sdim) > 1 ? hleaves_reduce : NULL;
    h->b.ctx = h;
    h->b.acc = ps->acc_h;
    return &h->b;
}
