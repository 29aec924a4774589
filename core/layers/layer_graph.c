/* SPDX-License-Identifier: MIT */
/*
 * layer_graph.c — what both engines share around the layer modules (contract in mt_layer.h):
 * planning a layer from its producers, its state buffers, and the forward / backward walk over
 * the model graph with its fixed-order gradient accumulation.
 *
 * DESIGN: the model is a graph in list order (mt_layer_spec.inputs). In the backward, a layer
 * whose output has one reader that is not a join takes that reader's input gradient by pointer;
 * any other layer owns an accumulator (gacc) that its readers' gradients are copied into, then
 * added to, in reverse list order, so the bits are fixed.
 * Threading: see mt_layer.h. Tests: tests/unit/test_layers.c.
 */
#include "layers/mt_layer.h"

#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "layers/layers_int.h"
#include "tensor/mt_tensor.h"

/* a * b saturating at SIZE_MAX */
static size_t mul_sat(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static size_t dsz(const mt_layer_planner *p, int dim)
{
    return dim < 0 ? 1 : p->dim_size(p->ctx, dim);
}

void mt_layer_shape_text(char *buf, size_t cap, int rank, const size_t *shape)
{
    int o = snprintf(buf, cap, "(");
    for (int i = 0; i < rank && o > 0 && (size_t)o < cap; i++)
        o += snprintf(buf + o, cap - (size_t)o, i ? ", %zu" : "%zu", shape[i]);
    if (o > 0 && (size_t)o < cap)
        snprintf(buf + o, cap - (size_t)o, ")");
}

/*
 * Sequence parallelism: split l's rows (positions) over l->sdim. Only layers that work row by row
 * (or gather the rows themselves: attention) may; the embedding reads its positions' ids.
 */
static mt_code plan_rows(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    size_t n = dsz(p, l->sdim);
    bool ids = l->s.kind == MT_LAYER_EMBEDDING;

    switch (l->s.kind) {
    case MT_LAYER_EMBEDDING:
    case MT_LAYER_POSITION_EMBEDDING:
    case MT_LAYER_LAYER_NORM:
    case MT_LAYER_DENSE:
    case MT_LAYER_ATTENTION:
    case MT_LAYER_ADD:
    case MT_LAYER_CONCATENATE:
    case MT_LAYER_DROPOUT:
    case MT_LAYER_ACTIVATION:
        break;
    default:
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): a %s layer mixes positions; the positions are "
                          "split over '%s' (input_layout[1]: sequence parallelism)",
                          l->idx, l->s.name, l->ops->type, p->dim_name(p->ctx, l->sdim));
    }
    for (int k = 0; k < l->s.n_inputs; k++)
        if (l->s.inputs[k] == MT_LAYER_INPUT && !ids)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.layers[%d] (%s): reads the model input, whose positions are "
                              "split over '%s'; only an embedding may (sequence parallelism)",
                              l->idx, l->s.name, p->dim_name(p->ctx, l->sdim));
    if (l->out_rows % n != 0 || (!ids && l->in_rows % n != 0))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): %zu positions are not divisible by the %zu "
                          "devices of '%s' (sequence parallelism)",
                          l->idx, l->s.name, l->out_rows, n, p->dim_name(p->ctx, l->sdim));
    if (!ids) {
        l->in_rows /= n;
        l->in_loc /= n;
        l->use_loc /= n;
    }
    l->out_rows /= n;
    l->out_loc /= n;
    return MT_OK;
}

/*
 * Megatron-SP (l->tdim >= 0, with sequence parallelism): whether l's input and output rows are
 * split over tdim as well (l->rin, l->rout) and the local sizes. The embedding starts the split;
 * a dense layer sharded on its contraction over tdim (row parallel: the attention projection,
 * the second MLP matrix) leaves the tensor-parallel region with its partial sums reduce-scattered
 * by rows; one sharded on its output over tdim (column parallel: QKV, the first MLP matrix, a
 * vocabulary-parallel head) allgathers its input rows; the row-wise layers keep their input's.
 * UNIMPLEMENTED for a model this does not cover (mixed: a join of inputs split differently):
 * the engine then plans it without Megatron-SP.
 */
static mt_code plan_msp(mt_layer *l, const mt_layer_planner *p, bool mixed, mt_err *err)
{
    size_t m = dsz(p, l->tdim);
    const char *why = mixed ? "a join of split and whole rows" : NULL;

    switch (l->s.kind) {
    case MT_LAYER_EMBEDDING:
        if (l->kout >= 0)
            why = "an embedding with sharded features";
        l->rout = l->tdim;
        break;
    case MT_LAYER_DENSE:
        if (l->kin == l->tdim) {
            if (l->rin >= 0 || l->xf != l->kin)
                why = "a row-parallel dense layer whose input is not its heads' or units' shards";
            l->rout = l->tdim;
        } else if (l->kout == l->tdim) {
            if (l->xf >= 0 || l->kin >= 0)
                why = "a column-parallel dense layer with a sharded input";
            l->rout = -1;
        } else {
            if (l->rin >= 0 && (l->xf >= 0 || l->kin >= 0 || l->kout >= 0))
                why = "a sharded dense layer outside the tensor-parallel region";
            l->rout = l->rin;
        }
        break;
    case MT_LAYER_ATTENTION:
        if (l->rin >= 0)
            why = "attention whose input is not a column-parallel dense layer's";
        l->rout = -1;
        break;
    default: /* row by row: position_embedding, layer_norm, dropout, add, activation, ... */
        if (l->rin >= 0 && l->xf >= 0)
            why = "sharded features outside the tensor-parallel region";
        l->rout = l->rin;
        break;
    }
    if (why == NULL && ((l->rin >= 0 && l->in_rows % m != 0) || l->out_rows % m != 0))
        why = "rows not divisible by the dim's size";
    if (why != NULL)
        return mt_err_set(err, MT_UNIMPLEMENTED, "model.layers[%d] (%s): Megatron-SP over '%s': %s",
                          l->idx, l->s.name, p->dim_name(p->ctx, l->tdim), why);
    if (l->rin >= 0) {
        l->in_rows /= m;
        l->in_loc /= m;
        l->use_loc /= m;
    }
    if (l->rout >= 0) {
        l->out_rows /= m;
        l->out_loc /= m;
    }
    return MT_OK;
}

mt_code mt_layer_plan(const mt_job_spec *spec, int i, const mt_layer *planned, int in_rank,
                      const size_t *in_shape, int in_xf, int in_hx, const mt_layer_planner *p,
                      mt_layer *l, mt_err *err)
{
    mt_layer_planner lp;
    bool mixed = false; /* inputs with rows split differently (Megatron-SP) */
    mt_code rc;

    memset(l, 0, sizeof(*l));
    l->s = spec->layers[i];
    l->s.activation = mt_model_layer_activation(spec, i);
    l->ops = mt_layer_ops_of(l->s.kind);
    l->idx = i;
    l->kin = l->kout = l->vdim = l->hx = -1;
    l->sdim = p->sdim;
    l->tdim = p->sdim >= 0 ? p->tdim : -1;
    l->rin = l->rout = -1;
    if (l->ops == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "model.layers[%d]: unknown layer kind", i);
    for (int k = 0; k < l->s.n_inputs; k++) {
        int q = l->s.inputs[k];
        const mt_layer *src = q == MT_LAYER_INPUT ? NULL : &planned[q];
        int hk = src != NULL ? src->ho : in_hx;
        if ((rc = mt_layer__bands_input(l, k, hk, p, err)) != MT_OK)
            return rc;
        if (k == 0)
            l->hx = hk;
        if (k == 0)
            l->rin = src != NULL ? src->rout : -1;
        else
            mixed = mixed || (src != NULL ? src->rout : -1) != l->rin;
        l->in_ranks[k] = src != NULL ? src->out_rank : in_rank;
        memset(l->in_shapes[k], 0, sizeof(l->in_shapes[k]));
        memcpy(l->in_shapes[k], src != NULL ? src->out_shape : in_shape,
               (size_t)l->in_ranks[k] * sizeof(size_t));
        l->in_xf[k] = src != NULL ? src->of : in_xf;
        l->in_last[k] = l->in_shapes[k][l->in_ranks[k] - 1];
    }
    l->no_dx = true;
    for (int k = 0; k < l->s.n_inputs; k++) {
        int q = l->s.inputs[k];
        if (q != MT_LAYER_INPUT && (!planned[q].no_dx || mt_layer__has_params(&planned[q])))
            l->no_dx = false;
    }
    l->in_rank = l->in_ranks[0];
    memcpy(l->in_shape, l->in_shapes[0], sizeof(l->in_shape));
    l->in_size = 1;
    for (int a = 0; a < l->in_rank; a++)
        l->in_size = mul_sat(l->in_size, l->in_shape[a]);
    l->xf = l->in_xf[0];
    l->in_c = l->in_shape[l->in_rank - 1];
    l->in_rows = l->in_c > 0 ? l->in_size / l->in_c : 0;
    l->ho = l->hx; /* a band kind's plan may gather the bands (flatten, global pooling) */
    lp = *p;
    lp.planned = planned;
    if ((rc = l->ops->plan(l, &lp, err)) != MT_OK)
        return rc;
    for (int j = i + 1; j < spec->n_layers; j++)
        l->grads_shared = l->grads_shared || (spec->layers[j].tied && spec->layers[j].tied_to == i);
    l->out_size = 1;
    for (int a = 0; a < l->out_rank; a++)
        l->out_size = mul_sat(l->out_size, l->out_shape[a]);
    l->out_c = l->out_shape[l->out_rank - 1];
    l->out_rows = l->out_c > 0 ? l->out_size / l->out_c : 0;
    if (l->in_c % dsz(p, l->xf) != 0 || l->out_c % dsz(p, l->of) != 0 ||
        l->in_c % dsz(p, l->kin) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.layers[%d] (%s): feature axis not divisible by its mesh dimension",
                          i, l->s.name);
    if ((l->hx >= 0 || l->ho >= 0) && (rc = mt_layer__bands_check(l, p, err)) != MT_OK)
        return rc;
    l->in_loc = l->in_size / dsz(p, l->xf) / dsz(p, l->hx);
    l->out_loc = l->out_size / dsz(p, l->of) / dsz(p, l->ho);
    l->use_loc = l->in_size / dsz(p, l->kin) / dsz(p, l->hx);
    l->needs_acc = mt_job_spec_output_shared(spec, i);
    if (l->sdim >= 0 && (rc = plan_rows(l, p, err)) != MT_OK)
        return rc;
    return l->tdim >= 0 ? plan_msp(l, p, mixed, err) : MT_OK;
}

/* ------------------------------------------------------------------ activations */

/* Whether the backward of the activation needs its input (kept in st->pre). */
static bool act_needs_input(mt_activation a)
{
    return a == MT_ACT_GELU;
}

/* The layer's activation, in place on its output. A softmax on the last layer is fused into the
 * loss: the output stays logits. */
static void act_forward(const mt_layer *l, mt_layer_state *s, const mt_layer_pass *ps)
{
    size_t n = ps->batch * l->out_loc;
    switch (l->s.activation) {
    case MT_ACT_LINEAR:
    case MT_ACT_SOFTMAX:
        return;
    case MT_ACT_RELU:
        (ps->ref ? mt_relu_forward_ref : mt_relu_forward)(s->out, s->out, n);
        return;
    case MT_ACT_GELU:
        memcpy(s->pre, s->out, n * sizeof(float));
        mt_gelu_forward(s->out, s->pre, n);
        return;
    case MT_ACT_TANH:
        mt_tanh_forward(s->out, s->out, n);
        return;
    case MT_ACT_SIGMOID:
        mt_sigmoid_forward(s->out, s->out, n);
        return;
    case MT_ACT_LEAKY_RELU:
        mt_leaky_relu_forward(s->out, s->out, MT_LEAKY_RELU_SLOPE, n);
        return;
    }
}

/* The activation's backward, in place on the output gradient s->gin. */
static void act_backward(const mt_layer *l, mt_layer_state *s, const mt_layer_pass *ps)
{
    size_t n = ps->batch * l->out_loc;
    switch (l->s.activation) {
    case MT_ACT_LINEAR:
    case MT_ACT_SOFTMAX:
        return;
    case MT_ACT_RELU:
        (ps->ref ? mt_relu_backward_ref : mt_relu_backward)(s->gin, s->gin, s->out, n);
        return;
    case MT_ACT_GELU:
        mt_gelu_backward(s->gin, s->gin, s->pre, n);
        return;
    case MT_ACT_TANH:
        mt_tanh_backward(s->gin, s->gin, s->out, n);
        return;
    case MT_ACT_SIGMOID:
        mt_sigmoid_backward(s->gin, s->gin, s->out, n);
        return;
    case MT_ACT_LEAKY_RELU:
        mt_leaky_relu_backward(s->gin, s->gin, s->out, MT_LEAKY_RELU_SLOPE, n);
        return;
    }
}

/* ------------------------------------------------------------------ state */

mt_code mt_layer_buf(mt_layer_alloc *a, const mt_layer *l, void **ptr, size_t n, size_t size,
                     mt_err *err)
{
    uint64_t bytes = (uint64_t)mul_sat(n, size);
    a->bytes = a->bytes > UINT64_MAX - bytes ? UINT64_MAX : a->bytes + bytes;
    if (a->count_only)
        return MT_OK;
    *ptr = mt_calloc(n + 1, size);
    if (*ptr == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu floats", l->s.name,
                          n);
    return MT_OK;
}

mt_code mt_layer_state_init(const mt_layer *l, mt_layer_state *st, size_t max_batch,
                            const mt_layer_dev *dev, mt_layer_alloc *a, mt_err *err)
{
    mt_code rc = l->ops->alloc(l, st, max_batch, dev, a, err);
    if (rc == MT_OK && l->needs_acc)
        rc = mt_layer_buf(a, l, (void **)&st->gacc, max_batch * l->out_loc, sizeof(float), err);
    if (rc == MT_OK && act_needs_input(l->s.activation))
        rc = mt_layer_buf(a, l, (void **)&st->pre, max_batch * l->out_loc, sizeof(float), err);
    return rc;
}

void mt_layer_state_fini(mt_layer_state *st)
{
    if (st == NULL)
        return;
    mt_free(st->out_buf);
    mt_free(st->dx_buf);
    mt_free(st->xin);
    mt_free(st->dxk);
    for (int k = 0; k < MT_LAYER_MAX_SCRATCH; k++)
        mt_free(st->scr[k]);
    mt_free(st->gacc);
    mt_free(st->pre);
    memset(st, 0, sizeof(*st));
}

/* ------------------------------------------------------------------ the walk */

mt_code mt_layer_graph_forward(const mt_layer *ls, mt_layer_state *st, int n, const float *x,
                               const mt_layer_dev *dev, const mt_layer_pass *ps, const float **out,
                               int *failed)
{
    const float *o = x;
    for (int i = 0; i < n; i++) {
        const mt_layer *l = &ls[i];
        mt_layer_state *s = &st[i];
        mt_code rc = MT_OK;
        for (int k = 0; k < l->s.n_inputs; k++) {
            int q = l->s.inputs[k];
            s->ins[k] = q == MT_LAYER_INPUT ? x : st[q].out;
        }
        s->in = s->used = s->ins[0];
        s->out = s->out_buf;
        if (dev->bind != NULL)
            rc = dev->bind(dev->ctx, i);
        if (rc == MT_OK)
            rc = l->ops->forward(l, s, dev, ps);
        if (rc != MT_OK) {
            *failed = i;
            return rc;
        }
        act_forward(l, s, ps);
        o = s->out;
    }
    *out = o;
    return MT_OK;
}

/*
 * Hand the gradient g of layer l's k-th input to its producer: by pointer when the producer has
 * no accumulator, else copied into it (the first reader in reverse order) or added; a
 * concatenate hands each input its columns [off, off + w) of g's rows of width c.
 */
static void give_grad(const mt_layer *ls, mt_layer_state *st, const mt_layer *l, int k, float *g,
                      size_t off, size_t batch)
{
    int p = l->s.inputs[k];
    const mt_layer *q;
    mt_layer_state *qs;
    size_t w, c;

    if (p == MT_LAYER_INPUT)
        return;
    q = &ls[p];
    qs = &st[p];
    if (qs->gacc == NULL) {
        qs->gin = g;
        return;
    }
    c = l->ops->concat_grads ? l->out_c : q->out_loc;
    w = l->ops->concat_grads ? l->in_last[k] : c;
    mt_grad_accumulate(qs->gacc, g, batch * q->out_loc / w, w, c, off, !qs->gfresh);
    qs->gfresh = false;
    qs->gin = qs->gacc;
}

mt_code mt_layer_graph_backward(const mt_layer *ls, mt_layer_state *st, int n, float *dy,
                                const mt_layer_dev *dev, const mt_layer_pass *ps, int *failed)
{
    for (int i = 0; i < n; i++)
        st[i].gfresh = true;
    st[n - 1].gin = dy;
    for (int i = n - 1; i >= 0; i--) {
        const mt_layer *l = &ls[i];
        mt_layer_state *s = &st[i];
        float *dx = NULL;
        size_t off = 0;
        mt_code rc = MT_OK;
        if (l->no_dx && !mt_layer__has_params(l))
            continue; /* nothing before it needs a gradient, and it has none of its own */
        if (dev->bind != NULL)
            rc = dev->bind(dev->ctx, i);
        if (rc == MT_OK)
            act_backward(l, s, ps);
        if (rc == MT_OK)
            rc = l->ops->backward(l, s, dev, ps, s->gin, &dx);
        if (rc == MT_OK && dev->after_backward != NULL)
            rc = dev->after_backward(dev->ctx, i);
        if (rc != MT_OK) {
            *failed = i;
            return rc;
        }
        for (int k = 0; dx != NULL && k < l->s.n_inputs; k++) {
            give_grad(ls, st, l, k, dx, off, ps->batch);
            off += l->in_last[k];
        }
    }
    return MT_OK;
}
