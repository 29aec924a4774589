/* SPDX-License-Identifier: MIT */
/*
 * max_pool2d.c — 2x2 max pooling, stride 2, over NHWC images (odd edges dropped, as Keras'
 * "valid"). Keeps the argmax of every window for the backward.
 *
 * Sharding: channels sharded over the input's dim stay so (each device pools its channels).
 * Reference: mt_maxpool2_forward_ref / mt_maxpool2_backward_ref (core/tensor/mt_kernels_ref.c).
 */
#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "tensor/mt_tensor.h"

enum { ARGMAX }; /* scratch */

static const char *const keys[] = {"pool_size", NULL};

static mt_code parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    char path[112];
    size_t a = 2, b = 2;
    mt_code rc;

    (void)out;
    MT_LAYER_PATH(path, base, "pool_size");
    rc = mt_model_field_pair(node, "pool_size", path, &a, &b, false, err);
    if (rc == MT_OK && (a != 2 || b != 2))
        rc = mt_model_field_bad(err, path, "only 2x2 pooling is supported");
    return rc;
}

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    (void)p;
    if (l->in_rank != 3)
        return mt_layer__shape_error(l, "an image input (height, width, channels)", err);
    if (l->in_shape[0] < 2 || l->in_shape[1] < 2) {
        char sh[64];
        mt_layer_shape_text(sh, sizeof(sh), l->in_rank, l->in_shape);
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d]: max_pool2d input %s is smaller than 2x2", l->idx, sh);
    }
    l->out_rank = 3;
    l->out_shape[0] = l->in_shape[0] / 2;
    l->out_shape[1] = l->in_shape[1] / 2;
    l->out_shape[2] = l->in_shape[2];
    l->of = l->xf;
    return MT_OK;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    mt_code rc = mt_layer__io(l, st, b, a, err);
    (void)dev;
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[ARGMAX], b * l->out_loc, sizeof(int32_t), err);
    return rc;
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    (ps->ref ? mt_maxpool2_forward_ref
             : mt_maxpool2_forward)(st->out, st->scr[ARGMAX], st->in, ps->batch, l->in_shape[0],
                                    l->in_shape[1], l->in_c / mt_layer__dsz(dev, l->xf));
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    (void)dev;
    *dx = st->dx_buf;
    if (st->dx_buf != NULL)
        (ps->ref ? mt_maxpool2_backward_ref : mt_maxpool2_backward)(
            st->dx_buf, dy, st->scr[ARGMAX], ps->batch * l->in_loc, ps->batch * l->out_loc);
    return MT_OK;
}

const mt_layer_ops mt_layer_max_pool2d_ops = {
    .type = "max_pool2d",
    .kind = MT_LAYER_MAX_POOL2D,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = false,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .example = "\"model\":{\"input_shape\":[6,5,2],\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
               "\"kernel_size\":3,\"padding\":\"same\"},{\"type\":\"max_pool2d\"},"
               "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},\"mesh\":{\"batch\":2,"
               "\"model\":2},"
               "\"layouts\":{\"conv2d_1\\\\.kernel\":[\"unsharded\",\"unsharded\",\"unsharded\","
               "\"model\"]}",
};
