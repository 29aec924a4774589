/* SPDX-License-Identifier: MIT */
/*
 * global_pool.c — global average pooling over an image (Keras GlobalAveragePooling2D):
 * (H, W, C) per example to (C), each channel's mean over the H·W positions (summed in double,
 * in row order). Backward: every position gets dy / (H·W).
 *
 * Sharding: channels sharded over the input's dim stay so; no communication. Height bands: each
 * device sums its rows, the partial means are allreduced over the bands (the output is whole).
 */
#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "repro/mt_repro.h"

static const char *const keys[] = {NULL};

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    (void)p;
    if (l->in_rank != 3)
        return mt_layer__shape_error(l, "an image input (height, width, channels)", err);
    l->out_rank = 1;
    l->out_shape[0] = l->in_shape[2];
    l->of = l->xf;
    l->ho = -1; /* height bands: the partial means are summed over them */
    return MT_OK;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    (void)dev;
    return mt_layer__io(l, st, b, a, err);
}

/*
 * mesh_invariant with Lh = mt_repro_leaves(H) > 1 height leaves: each example's channel sums
 * per height leaf (double in row order, rounded), folded in the canonical tree (a band's leaves
 * here, the bands' by the allreduce over hx), then divided by H x W (docs/reproducibility.md,
 * "Height leaves"). With one leaf (no bands then) the sum as without the mode.
 */
static mt_code inv_forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                           const mt_layer_pass *ps)
{
    size_t c = l->out_loc, n = ps->batch * c;
    int lh = mt_repro_leaves(l->in_shape[0]) / (int)mt_layer__dsz(dev, l->hx);
    mt_code rc;

    mt_repro_pool_sums(st->out, st->in, ps->batch, mt_layer__in_rows_loc(l, c), c, lh);
    rc = dev->allreduce(dev->ctx, l->hx, st->out, n);
    for (size_t i = 0; i < n; i++)
        st->out[i] = st->out[i] / (float)l->in_rows;
    return rc;
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    size_t hw = l->in_rows, c = l->out_loc, rl = mt_layer__in_rows_loc(l, c);
    if (ps->leaves > 0 && mt_repro_leaves(l->in_shape[0]) > 1)
        return inv_forward(l, st, dev, ps);
    for (size_t b = 0; b < ps->batch; b++)
        for (size_t j = 0; j < c; j++) {
            const float *x = st->in + b * rl * c + j;
            double s = 0.0;
            for (size_t r = 0; r < rl; r++)
                s += x[r * c];
            st->out[b * c + j] = (float)(s / (double)hw);
        }
    return dev->allreduce(dev->ctx, l->hx, st->out, ps->batch * c);
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    size_t hw = l->in_rows, c = l->out_loc, rl = mt_layer__in_rows_loc(l, c);
    float inv = 1.0f / (float)hw;
    (void)dev;
    *dx = st->dx_buf;
    for (size_t b = 0; st->dx_buf != NULL && b < ps->batch; b++)
        for (size_t r = 0; r < rl; r++)
            for (size_t j = 0; j < c; j++)
                st->dx_buf[(b * rl + r) * c + j] = dy[b * c + j] * inv;
    return MT_OK;
}

static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    (void)bdim;
    (void)p;
    add(per_dim, l->hx, b * l->out_loc);
}

const mt_layer_ops mt_layer_global_average_pooling2d_ops = {
    .type = "global_average_pooling2d",
    .kind = MT_LAYER_GLOBAL_AVERAGE_POOLING2D,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .bands = true,
    .bands_channels = true,
    .parse = mt_layer__parse_none,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .example = "\"model\":{\"input_shape\":[5,4,2],\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
               "\"kernel_size\":3,\"padding\":\"same\",\"activation\":\"relu\"},"
               "{\"type\":\"global_average_pooling2d\"},{\"type\":\"dense\",\"units\":3}]},"
               "\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"conv2d_1\\\\.kernel\":"
               "[\"unsharded\",\"unsharded\",\"unsharded\",\"model\"],"
               "\"dense_1\\\\.kernel\":[\"model\",\"unsharded\"]}",
    .comm = comm,
};
