/* SPDX-License-Identifier: MIT */
/*
 * join.c — the layers that join several inputs: add (element-wise sum of inputs of one shape,
 * for residual connections) and concatenate (inputs joined along their last axis).
 *
 * Their output shapes come from mt_layer_join_shape (errors name the layer and both shapes).
 * Backward: the output gradient goes to every input (add), or each input gets its columns
 * (concatenate); the graph walk routes it (mt_layer_ops.concat_grads).
 * Sharding: an add needs its inputs sharded alike and keeps that sharding; a concatenate needs
 * every input whole on the last axis. Height bands (docs/spmd.md): an add of inputs split into
 * the same bands sums band by band (element-wise, no communication; a residual block's add of
 * its convolutions and its shortcut).
 */
#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "tensor/mt_tensor.h"

static const char *const add_keys[] = {NULL};
static const char *const concat_keys[] = {"axis", NULL};

static mt_code concat_parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    const cJSON *ax = cJSON_GetObjectItemCaseSensitive(node, "axis");
    char path[112];
    (void)out;
    MT_LAYER_PATH(path, base, "axis");
    if (ax != NULL && !(cJSON_IsNumber(ax) && ax->valuedouble == -1.0))
        return mt_model_field_bad(err, path, "only -1 (the last axis) is supported");
    return MT_OK;
}

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    bool add = l->s.kind == MT_LAYER_ADD;
    for (int k = 0; k < l->s.n_inputs; k++)
        if (l->in_xf[k] != l->in_xf[0] || (!add && l->in_xf[k] >= 0))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.layers[%d] (%s): %s; input %d is sharded over '%s' on its "
                              "last axis (check the layouts of the layers feeding it)",
                              l->idx, l->s.name,
                              add ? "the inputs of an add must be sharded alike"
                                  : "the inputs of a concatenate must be whole on the last axis",
                              k, l->in_xf[k] >= 0 ? p->dim_name(p->ctx, l->in_xf[k]) : "nothing");
    l->of = add ? l->xf : -1;
    return mt_layer_join_shape(&l->s, l->idx, l->in_ranks, (const size_t(*)[3])l->in_shapes,
                               &l->out_rank, l->out_shape, err);
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    (void)dev;
    return mt_layer_buf(a, l, (void **)&st->out_buf, b * l->out_loc, sizeof(float), err);
}

static mt_code add_forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                           const mt_layer_pass *ps)
{
    (void)dev;
    mt_add_forward(st->out, st->ins, l->s.n_inputs, ps->batch * l->out_loc);
    return MT_OK;
}

static mt_code concat_forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                              const mt_layer_pass *ps)
{
    (void)dev;
    mt_concat_forward(st->out, st->ins, l->in_last, l->s.n_inputs, ps->batch * l->out_rows);
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    (void)l;
    (void)st;
    (void)dev;
    (void)ps;
    *dx = dy; /* routed to every input by the graph walk */
    return MT_OK;
}

const mt_layer_ops mt_layer_add_ops = {
    .type = "add",
    .kind = MT_LAYER_ADD,
    .keys = add_keys,
    .min_inputs = 2,
    .max_inputs = MT_LAYER_MAX_INPUTS,
    .reads_input_only = true,
    .bands = true,
    .bands_channels = true,
    .seq_leaves = true, /* sums over no positions */
    .parse = mt_layer__parse_none,
    .plan = plan,
    .alloc = alloc,
    .forward = add_forward,
    .backward = backward,
    .example =
        "\"model\":{\"input_shape\":[6],\"layers\":[{\"type\":\"dense\",\"units\":8,\"name\":\"a\","
        "\"activation\":\"relu\"},{\"type\":\"dense\",\"units\":8,\"name\":\"b\"},{\"type\":"
        "\"add\","
        "\"inputs\":[\"a\",\"b\"]},{\"type\":\"dense\",\"units\":3}]},\"mesh\":{\"batch\":2,"
        "\"model\":2},"
        "\"layouts\":{\"a\\\\.kernel\":[\"unsharded\",\"model\"],\"b\\\\.kernel\":[\"unsharded\","
        "\"model\"],\"dense_1\\\\.kernel\":[\"model\",\"unsharded\"]}",
};

const mt_layer_ops mt_layer_concatenate_ops = {
    .type = "concatenate",
    .kind = MT_LAYER_CONCATENATE,
    .keys = concat_keys,
    .min_inputs = 2,
    .max_inputs = MT_LAYER_MAX_INPUTS,
    .concat_grads = true,
    .reads_input_only = true,
    .seq_leaves = true, /* sums over no positions */
    .parse = concat_parse,
    .plan = plan,
    .alloc = alloc,
    .forward = concat_forward,
    .backward = backward,
    .example =
        "\"model\":{\"input_shape\":[8],\"layers\":[{\"type\":\"dense\",\"units\":4,\"name\":\"a\","
        "\"activation\":\"relu\"},{\"type\":\"dense\",\"units\":5,\"name\":\"b\",\"inputs\":["
        "\"input\"]},"
        "{\"type\":\"concatenate\",\"inputs\":[\"a\",\"b\"]},{\"type\":\"dense\",\"units\":3}]},"
        "\"mesh\":{\"batch\":4},\"layouts\":{\"a\\\\.kernel\":[\"batch\",\"unsharded\"]}",
};
