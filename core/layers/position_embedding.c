/* SPDX-License-Identifier: MIT */
/*
 * position_embedding.c — learned position embedding: (T, C) in, the same plus row t of the
 * (T, C) table "embeddings" at every position t (keras_nlp's PositionEmbedding, added to its
 * input as TokenAndPositionEmbedding does; GPT-2's wpe).
 *
 * Sharding: the table follows the input's feature sharding (its C axis over the same dim);
 * nothing is communicated. Backward: the input gradient is the output gradient (passed on by
 * pointer), the table's is the sum over the batch per position (mesh_invariant: per leaf, the
 * leaves folded in the canonical tree, core/repro).
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "repro/mt_repro.h"

enum { TABLE };

static const char *const keys[] = {NULL};

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    size_t ts[2] = {l->in_rows, l->in_c};

    if (l->in_rank != 2)
        return mt_layer__shape_error(l, "a sequence input, shape (sequence_length, features)", err);
    l->out_rank = 2;
    memcpy(l->out_shape, l->in_shape, sizeof(l->out_shape));
    l->of = l->xf;
    return p->add_param(p->ctx, l, TABLE, "embeddings", 2, ts, MT_INIT_UNIFORM_005, true, l->xf,
                        err);
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    (void)dev;
    return mt_layer_buf(a, l, (void **)&st->out_buf, b * l->out_loc, sizeof(float), err);
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    size_t n = l->out_loc;
    const float *table = st->pv[TABLE] + (size_t)dev->coord(dev->ctx, l->sdim) * n;
    for (size_t b = 0; b < ps->batch; b++)
        for (size_t i = 0; i < n; i++)
            st->out[b * n + i] = st->in[b * n + i] + table[i];
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    size_t n = l->out_loc;
    float *g = st->pg[TABLE];
    *dx = mt_layer__reads_input(l) ? NULL : dy;
    if (ps->leaves > 0) { /* mesh_invariant: per leaf, folded in the leaf tree (no sdim) */
        mt_repro_bn_sum(g, dy, ps->batch, ps->leaf_examples, ps->leaves, n, ps->acc_w);
        return MT_OK;
    }
    memset(g, 0, n * mt_layer__dsz(dev, l->sdim) * sizeof(float));
    g += (size_t)dev->coord(dev->ctx, l->sdim) * n; /* this device's positions' rows */
    for (size_t b = 0; b < ps->batch; b++)
        for (size_t i = 0; i < n; i++)
            g[i] += dy[b * n + i];
    return MT_OK;
}

const mt_layer_ops mt_layer_position_embedding_ops = {
    .type = "position_embedding",
    .kind = MT_LAYER_POSITION_EMBEDDING,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .parse = mt_layer__parse_none,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .example = "\"model\":{\"input_shape\":[4],\"layers\":["
               "{\"type\":\"embedding\",\"input_dim\":10,\"output_dim\":6},"
               "{\"type\":\"position_embedding\"},"
               "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},"
               "\"mesh\":{\"batch\":2,\"model\":2},"
               "\"layouts\":{\"embedding_1\\\\.embeddings\":[\"unsharded\",\"model\"],"
               "\"dense_1\\\\.kernel\":[\"model\",\"unsharded\"]}",
};
