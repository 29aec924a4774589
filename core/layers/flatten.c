/* SPDX-License-Identifier: MIT */
/*
 * flatten.c — (H, W, C) per example to a vector (NHWC row-major is Keras' flatten order), as a
 * view of its input: nothing is copied.
 *
 * Sharding: a vector input keeps its feature sharding; an image with sharded channels is
 * allgathered into whole rows first (and its gradient sliced back); so is an image sharded
 * into height bands (docs/spmd.md).
 */
#include <cjson/cJSON.h>

#include "layers/layers_int.h"

static const char *const keys[] = {NULL};

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    (void)p;
    (void)err;
    l->out_rank = 1;
    l->out_shape[0] = l->in_size;
    l->of = l->in_rank == 1 ? l->xf : -1;
    l->ho = -1; /* height bands are gathered */
    return MT_OK;
}

/* Whether the output is a view of the input (nothing gathered). */
static bool is_view(const mt_layer *l)
{
    return l->xf == l->of && l->hx < 0;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    (void)dev;
    if (is_view(l))
        return MT_OK;
    return mt_layer__io(l, st, b, a, err);
}

/* Height bands: each example's band is one block of in_loc floats (NHWC, rows in order), so
 * the gather over hx, member k's block k, is the whole example. */
static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    if (is_view(l)) {
        st->out = (float *)st->in;
        return MT_OK;
    }
    if (l->hx >= 0)
        return dev->reshard(dev->ctx, st->in, ps->batch, l->in_size, l->hx, -1, st->out);
    return dev->reshard(dev->ctx, st->in, ps->batch * l->in_rows, l->in_c, l->xf, -1, st->out);
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    *dx = NULL;
    if (mt_layer__no_dx(l))
        return MT_OK;
    if (is_view(l)) {
        *dx = dy;
        return MT_OK;
    }
    *dx = st->dx_buf;
    if (l->hx >= 0) /* the band's slice: no communication */
        return dev->reshard(dev->ctx, dy, ps->batch, l->in_size, -1, l->hx, st->dx_buf);
    return dev->reshard(dev->ctx, dy, ps->batch * l->in_rows, l->in_c, -1, l->xf, st->dx_buf);
}

static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    (void)bdim;
    (void)p;
    if (l->xf != l->of)
        add(per_dim, l->xf, 2 * b * l->in_size);
    add(per_dim, l->hx, b * l->in_size);
}

const mt_layer_ops mt_layer_flatten_ops = {
    .type = "flatten",
    .kind = MT_LAYER_FLATTEN,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = false,
    .views_input = true,
    .bands = true,
    .parse = mt_layer__parse_none,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .example =
        "\"model\":{\"input_shape\":[4,4,2],\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
        "\"kernel_size\":2},{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},"
        "\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"conv2d_1\\\\.kernel\":[\"unsharded\","
        "\"unsharded\",\"unsharded\",\"model\"],\"dense_1\\\\.kernel\":[\"model\",\"unsharded\"]}",
    .comm = comm,
};
