/* SPDX-License-Identifier: MIT */
/*
 * activation.c — an activation as a layer of its own (Keras' Activation): the output is the
 * input with the layer's "activation" applied (relu, gelu, tanh, sigmoid, leaky_relu or
 * linear; softmax only on the last layer). The graph walk applies the activation and its
 * backward (layer_graph.c), as for any layer's "activation" option; this module copies.
 *
 * Sharding: keeps its input's feature sharding; no communication.
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"

static const char *const keys[] = {"activation", NULL};

static mt_code parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    char path[112];
    MT_LAYER_PATH(path, base, "activation");
    if (cJSON_GetObjectItemCaseSensitive(node, "activation") == NULL)
        return mt_model_field_bad(err, path, "is required");
    return mt_model_field_activation(node, path, &out->activation, err);
}

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    (void)p;
    (void)err;
    l->out_rank = l->in_rank;
    memcpy(l->out_shape, l->in_shape, sizeof(l->in_shape));
    l->of = l->xf;
    return MT_OK;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    (void)dev;
    return mt_layer__io(l, st, b, a, err);
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    (void)dev;
    memcpy(st->out, st->in, ps->batch * l->in_loc * sizeof(float));
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    (void)st;
    (void)dev;
    (void)ps;
    *dx = mt_layer__no_dx(l) ? NULL : dy; /* the activation's backward already ran on dy */
    return MT_OK;
}

const mt_layer_ops mt_layer_activation_ops = {
    .type = "activation",
    .kind = MT_LAYER_ACTIVATION,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .bands = true,
    .seq_leaves = true, /* sums over no positions */
    .bands_channels = true,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .example = "\"model\":{\"input_shape\":[6],\"layers\":[{\"type\":\"dense\",\"units\":8},"
               "{\"type\":\"activation\",\"activation\":\"gelu\"},{\"type\":\"dense\",\"units\":8,"
               "\"activation\":\"tanh\"},{\"type\":\"activation\",\"activation\":\"sigmoid\"},"
               "{\"type\":\"dense\",\"units\":8,\"activation\":\"leaky_relu\"},"
               "{\"type\":\"dense\",\"units\":3}]},\"mesh\":{\"batch\":2,\"model\":2},"
               "\"layouts\":{\"dense_1\\\\.kernel\":[\"unsharded\",\"model\"],"
               "\"dense_2\\\\.kernel\":[\"model\",\"unsharded\"],"
               "\"dense_3\\\\.kernel\":[\"unsharded\",\"model\"]}",
};
