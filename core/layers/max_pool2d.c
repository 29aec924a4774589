/* SPDX-License-Identifier: MIT */
/*
 * max_pool2d.c — max and average pooling over NHWC images with any window ("pool_size",
 * default 2) and stride ("strides", default the window), without padding (Keras' "valid": the
 * edges that do not fill a window are dropped). Max pooling keeps the argmax of every window
 * for the backward; the 2x2 window with stride 2 takes the vectorised kernel.
 *
 * Sharding: channels sharded over the input's dim stay so (each device pools its channels);
 * height bands pool alone (windows no taller than their stride, bands of whole strides).
 * Reference: mt_maxpool2_forward_ref / mt_maxpool2_backward_ref for 2x2 (core/tensor); the
 * general windows are plain loops (mt_maxpool_forward, mt_avgpool_forward).
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "tensor/mt_tensor.h"

enum { ARGMAX }; /* scratch */

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

/* Height bands pool alone: windows that do not overlap (pool_size <= strides on the height)
 * and bands that hold whole strides. */
static mt_code band_plan(const mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    size_t n = mt_layer__psz(p, l->hx), h = l->in_shape[0] / n;
    const char *dim = p->dim_name(p->ctx, l->hx);

    if (l->s.kh > l->s.sh)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s).pool_size: windows of %zu rows overlap at stride "
                          "%zu; pooling on height bands (over '%s') needs pool_size <= strides on "
                          "the height",
                          l->idx, l->s.name, l->s.kh, l->s.sh, dim);
    if (h % l->s.sh != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s).strides: a band of %zu rows (height %zu over "
                          "'%s' of size %zu) is not divisible by the stride %zu",
                          l->idx, l->s.name, h, l->in_shape[0], dim, n, l->s.sh);
    return MT_OK;
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

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    mt_code rc = mt_layer__io(l, st, b, a, err);
    (void)dev;
    if (rc == MT_OK && l->s.kind == MT_LAYER_MAX_POOL2D)
        rc = mt_layer_buf(a, l, &st->scr[ARGMAX], b * l->out_loc, sizeof(int32_t), err);
    return rc;
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    mt_pool2d_geom g = dev_geom(l, ps->batch, dev);
    if (two_by_two(l))
        (ps->ref ? mt_maxpool2_forward_ref : mt_maxpool2_forward)(st->out, st->scr[ARGMAX], st->in,
                                                                  ps->batch, g.h, g.w, g.c);
    else if (l->s.kind == MT_LAYER_MAX_POOL2D)
        mt_maxpool_forward(st->out, st->scr[ARGMAX], st->in, &g);
    else
        mt_avgpool_forward(st->out, st->in, &g);
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    mt_pool2d_geom g = dev_geom(l, ps->batch, dev);
    *dx = st->dx_buf;
    if (st->dx_buf == NULL)
        return MT_OK;
    if (two_by_two(l))
        (ps->ref ? mt_maxpool2_backward_ref : mt_maxpool2_backward)(
            st->dx_buf, dy, st->scr[ARGMAX], ps->batch * l->in_loc, ps->batch * l->out_loc);
    else if (l->s.kind == MT_LAYER_MAX_POOL2D)
        mt_maxpool_backward(st->dx_buf, dy, st->scr[ARGMAX], &g);
    else
        mt_avgpool_backward(st->dx_buf, dy, &g);
    return MT_OK;
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
    .example = "\"model\":{\"input_shape\":[7,6,2],\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
               "\"kernel_size\":3,\"padding\":\"same\",\"activation\":\"relu\"},"
               "{\"type\":\"average_pooling2d\",\"pool_size\":3,\"strides\":2},"
               "{\"type\":\"average_pooling2d\",\"pool_size\":[2,1]},"
               "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},"
               "\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"conv2d_1\\\\.kernel\":"
               "[\"unsharded\",\"unsharded\",\"unsharded\",\"model\"]}",
};
