/* SPDX-License-Identifier: MIT */
/*
 * position_embedding.c — learned position embedding: (T, C) in, the same plus row t of the
 * (T, C) table "embeddings" at every position t (keras_nlp's PositionEmbedding, added to its
 * input as TokenAndPositionEmbedding does; GPT-2's wpe).
 *
 * Sharding: the table follows the input's feature sharding (its C axis over the same dim);
 * nothing is communicated. Backward: the input gradient is the output gradient (passed on by
 * pointer), the table's is the sum over the batch per position (mesh_invariant: per leaf, the
 * leaves folded in the canonical tree, core/repro; no sum over positions, so no position leaves).
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
    size_t rows = l->out_rows, c = l->out_loc / rows;
    for (size_t r = 0; r < rows; r++) { /* the table's row at each local row's position */
        const float *t = st->pv[TABLE] + mt_layer__position(l, dev, l->rout, rows, r) * c;
        for (size_t b = 0; b < ps->batch; b++)
            for (size_t j = 0; j < c; j++)
                st->out[(b * rows + r) * c + j] = st->in[(b * rows + r) * c + j] + t[j];
    }
    return MT_OK;
}

/*
 * mesh_invariant: each element of the table's gradient sums one position's dy over the examples,
 * per leaf, folded in the leaf tree: no sum over positions, so no position leaves. With the
 * positions split over sdim the device's rows go to their positions of the whole table and the
 * allreduce over sdim (the bucket's in fixed_mesh) adds the others' zeros: x + 0 is x, the bits of
 * one device (no Megatron-SP under mesh_invariant).
 */
static mt_code backward_inv(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                            const mt_layer_pass *ps, const float *dy)
{
    size_t rows = l->out_rows, c = l->out_loc / rows, all = rows * c * mt_layer__dsz(dev, l->sdim);

    if (l->sdim < 0) {
        mt_repro_bn_sum(st->pg[TABLE], dy, ps->batch, ps->leaf_examples, ps->leaves, l->out_loc,
                        ps->acc_w);
        return MT_OK;
    }
    mt_repro_bn_sum(ps->scratch, dy, ps->batch, ps->leaf_examples, ps->leaves, l->out_loc,
                    ps->acc_w);
    memset(st->pg[TABLE], 0, all * sizeof(float));
    for (size_t r = 0; r < rows; r++)
        memcpy(st->pg[TABLE] + mt_layer__position(l, dev, -1, rows, r) * c, ps->scratch + r * c,
               c * sizeof(float));
    return dev->allreduce(dev->ctx, l->sdim, st->pg[TABLE], all);
}

/* The table's gradient: non-zero at this device's positions only; with Megatron-SP summed over
 * tdim (the other rows of the sdim device's positions). */
static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    size_t rows = l->out_rows, c = l->out_loc / rows;
    size_t all = rows * c * mt_layer__dsz(dev, l->sdim) * mt_layer__dsz(dev, l->rout);
    *dx = mt_layer__no_dx(l) ? NULL : dy;
    if (ps->leaves > 0)
        return backward_inv(l, st, dev, ps, dy);
    memset(st->pg[TABLE], 0, all * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        float *g = st->pg[TABLE] + mt_layer__position(l, dev, l->rout, rows, r) * c;
        for (size_t b = 0; b < ps->batch; b++)
            for (size_t j = 0; j < c; j++)
                g[j] += dy[(b * rows + r) * c + j];
    }
    return dev->allreduce(dev->ctx, l->rout, st->pg[TABLE], all);
}

static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    (void)b;
    (void)bdim;
    if (l->rout >= 0) /* Megatron-SP: the table's gradient */
        add(per_dim, l->rout, l->in_size / mt_layer__psz(p, l->xf));
}

const mt_layer_ops mt_layer_position_embedding_ops = {
    .type = "position_embedding",
    .kind = MT_LAYER_POSITION_EMBEDDING,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .seq_leaves = true,
    .parse = mt_layer__parse_none,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .comm = comm,
    .example = "\"model\":{\"input_shape\":[4],\"layers\":["
               "{\"type\":\"embedding\",\"input_dim\":10,\"output_dim\":6},"
               "{\"type\":\"position_embedding\"},"
               "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},"
               "\"mesh\":{\"batch\":2,\"model\":2},"
               "\"layouts\":{\"embedding_1\\\\.embeddings\":[\"unsharded\",\"model\"],"
               "\"dense_1\\\\.kernel\":[\"model\",\"unsharded\"]}",
};
