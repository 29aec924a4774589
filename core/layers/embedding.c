/* SPDX-License-Identifier: MIT */
/*
 * embedding.c — token embedding (Keras Embedding): the model input's T token ids (float32
 * values that are whole numbers in [0, input_dim)) become T rows of the (input_dim, output_dim)
 * table "embeddings". The output is (T, output_dim).
 *
 * Sharding: the table's output axis over a mesh dim shards the output's features (each device
 * looks up its columns); its vocabulary axis over a dim gives each device a slice of the rows:
 * a device writes the rows of the ids it holds and zeros for the others, and the outputs are
 * allreduced over that dim (Megatron's vocabulary-parallel embedding). The ids are sharded
 * only by position (sequence parallelism, mt_layer.sdim: the device's positions' ids).
 * Backward: each id's output gradient is added to its table row, rows in order (fixed bits).
 * A dense layer may use the table as its kernel (tied_to, a GPT-2 style LM head; dense.c): its
 * backward runs first and writes the table's gradient, and this one adds to it.
 * mesh_invariant (mt_layer_pass.leaves > 0): the rows are added per leaf and the leaves folded in
 * the canonical tree (core/repro), a sequence's positions in position leaves (mt_layer__pleaves:
 * the positions may be split over a seq dim); with a tied head each leaf starts from the head's
 * dyᵀ · x over the leaf's rows (the head handed its dy and input over in mt_layer_pass.tied).
 */
#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "repro/mt_repro.h"

enum { TABLE };

static const char *const keys[] = {"input_dim", "output_dim", NULL};

static mt_code parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    mt_code rc = mt_layer__required_int(node, "input_dim", base, 1 << 24, &out->input_dim, err);
    return rc == MT_OK ? mt_layer__required_int(node, "output_dim", base, 1 << 20, &out->units, err)
                       : rc;
}

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    size_t ts[2] = {l->s.input_dim, l->s.units};
    mt_code rc;

    if (l->in_rank != 1 || !mt_layer__reads_input(l))
        return mt_layer__shape_error(l, "the model input's token ids, shape (sequence_length)",
                                     err);
    if (l->xf >= 0 && l->xf != p->sdim)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): its token ids may not be sharded (over '%s')",
                          l->idx, l->s.name, p->dim_name(p->ctx, l->xf));
    l->out_rank = 2;
    l->out_shape[0] = l->in_shape[0];
    l->out_shape[1] = l->s.units;
    rc = p->add_param(p->ctx, l, TABLE, "embeddings", 2, ts, MT_INIT_UNIFORM_005, true,
                      MT_LAYER_FROM_MAP, err);
    if (rc != MT_OK)
        return rc;
    l->vdim = p->param_dim(p->ctx, l, TABLE, 0);
    l->kout = p->param_dim(p->ctx, l, TABLE, 1);
    l->of = l->kout;
    if (l->s.input_dim % mt_layer__psz(p, l->vdim) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): input_dim %zu is not divisible by the %zu "
                          "devices of '%s'",
                          l->idx, l->s.name, l->s.input_dim, mt_layer__psz(p, l->vdim),
                          p->dim_name(p->ctx, l->vdim));
    return MT_OK;
}

/* Megatron-SP (l->rout >= 0): the vocabulary over tdim: every device looks up its sdim rows and
 * the partial rows are reduce-scattered over tdim (scatter); else each device looks up only its
 * own rows (split), and the table's gradient is summed over tdim. */
static bool msp_scatter(const mt_layer *l)
{
    return l->rout >= 0 && l->vdim == l->rout;
}

static bool msp_split(const mt_layer *l)
{
    return l->rout >= 0 && l->vdim != l->rout;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    /* Megatron-SP's scatter: the sdim device's rows and the collective's blocks, in the work area
     * (the rows' partial lookups forward, their output gradients backward) */
    if (msp_scatter(l))
        mt_layer_work(a, 2 * b * l->out_loc * mt_layer__dsz(dev, l->tdim));
    return mt_layer_buf(a, l, (void **)&st->out_buf, b * l->out_loc, sizeof(float), err);
}

/* The table rows this device holds: [*lo, *lo + *n). */
static void local_rows(const mt_layer *l, const mt_layer_dev *dev, size_t *lo, size_t *n)
{
    *n = l->s.input_dim / mt_layer__dsz(dev, l->vdim);
    *lo = (size_t)dev->coord(dev->ctx, l->vdim) * *n;
}

/* The ids this device looks up per example: *per of them from *off of its in_loc. */
static void looked_up(const mt_layer *l, const mt_layer_dev *dev, size_t *off, size_t *per)
{
    *per = msp_split(l) ? l->out_rows : l->in_loc;
    *off = msp_split(l) ? (size_t)dev->coord(dev->ctx, l->rout) * *per : 0;
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    size_t c = l->out_loc / l->out_rows, lo, n, off, per;
    const float *table = st->pv[TABLE];
    float *out = msp_scatter(l) ? ps->work : st->out;

    local_rows(l, dev, &lo, &n);
    looked_up(l, dev, &off, &per);
    for (size_t r = 0; r < ps->batch * per; r++) {
        float v = st->in[(r / per) * l->in_loc + off + r % per];
        if (!(v >= 0.0f && v < (float)l->s.input_dim) || v != floorf(v)) {
            if (ps->err != NULL)
                mt_err_set(ps->err, MT_INVALID_ARGUMENT,
                           "%s: token id %g at position %zu of an example is not a whole number "
                           "in [0, %zu) (input_dim)",
                           l->s.name, (double)v,
                           mt_layer__position(l, dev, -1, l->in_loc, off + r % per),
                           l->s.input_dim);
            return MT_INVALID_ARGUMENT;
        }
        size_t id = (size_t)v;
        if (id >= lo && id < lo + n)
            memcpy(out + r * c, table + (id - lo) * c, c * sizeof(float));
        else
            memset(out + r * c, 0, c * sizeof(float));
    }
    if (msp_scatter(l))
        return mt_layer__msp_scatter(
            l, dev, out, ps->batch, l->out_rows, c,
            ps->work + ps->batch * l->out_loc * mt_layer__dsz(dev, l->tdim), st->out);
    return dev->allreduce(dev->ctx, l->vdim, st->out, ps->batch * per * c);
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    size_t c = l->out_loc / l->out_rows, lo, n, off, per;
    float *g = st->pg[TABLE];
    mt_code rc;

    *dx = NULL;
    local_rows(l, dev, &lo, &n);
    looked_up(l, dev, &off, &per);
    if (ps->leaves > 0) { /* mesh_invariant: per leaf and position leaf, folded in the leaf trees
                             (the seq allreduce inside: mt_layer__pleaves) */
        const mt_repro_head *h = l->grads_shared ? ps->tied : NULL;
        mt_layer_hleaves pv;
        if (l->grads_shared && (h == NULL || h->dy == NULL))
            return mt_err_set(ps->err, MT_INTERNAL,
                              "%s: the tied head's backward handed no gradient over", l->s.name);
        rc = mt_repro_tied_grad_h(g, h, st->in, dy, ps->batch * l->in_loc,
                                  ps->leaf_examples * l->in_loc, ps->leaves, lo, n, c,
                                  mt_layer__pleaves(&pv, l, dev, ps), ps->acc_w);
        if (h != NULL)
            ps->tied->dy = NULL; /* used: the next step's head hands its own */
        return rc;
    }
    if (msp_scatter(l)) { /* every device's rows' gradients, for its vocabulary rows */
        rc = mt_layer__msp_gather(l, dev, dy, ps->batch, l->out_rows, c,
                                  ps->work + ps->batch * l->out_loc * mt_layer__dsz(dev, l->tdim),
                                  ps->work);
        if (rc != MT_OK)
            return rc;
        dy = ps->work;
    }
    if (!l->grads_shared) /* else a tied head's backward wrote its part first: add to it */
        memset(g, 0, n * c * sizeof(float));
    for (size_t r = 0; r < ps->batch * per; r++) {
        size_t id = (size_t)st->in[(r / per) * l->in_loc + off + r % per];
        if (id < lo || id >= lo + n)
            continue;
        for (size_t j = 0; j < c; j++)
            g[(id - lo) * c + j] += dy[r * c + j];
    }
    return msp_split(l) ? dev->allreduce(dev->ctx, l->rout, g, n * c) : MT_OK;
}

static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    size_t m = mt_layer__psz(p, l->tdim);
    (void)bdim;
    if (msp_scatter(l)) { /* the forward's reduce-scatter, the backward's allgather */
        add(per_dim, l->tdim, 2 * b * l->out_loc * m);
        return;
    }
    add(per_dim, l->vdim, b * l->out_loc);
    if (msp_split(l))
        add(per_dim, l->tdim, l->s.input_dim / mt_layer__psz(p, l->vdim) * l->out_c);
}

const mt_layer_ops mt_layer_embedding_ops = {
    .type = "embedding",
    .kind = MT_LAYER_EMBEDDING,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .seq_leaves = true,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .comm = comm,
    .example = "\"model\":{\"input_shape\":[5],\"layers\":["
               "{\"type\":\"embedding\",\"input_dim\":12,\"output_dim\":8},"
               "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]},"
               "\"mesh\":{\"batch\":2,\"model\":2},"
               "\"layouts\":{\"embedding_1\\\\.embeddings\":[\"model\",\"unsharded\"]}",
};
