/* SPDX-License-Identifier: MIT */
/*
 * model.c — the Sequential model: shape inference, named parameters, the forward/backward pass
 * over local tensors, loss, optimizer update and the train/eval steps (contract in mt_model.h).
 *
 * DESIGN: each layer owns its output buffer and its input-gradient buffer, sized once for
 * max_batch examples and reused every step (no allocation in the step). flatten and inference
 * dropout pass pointers through without copying. A layer reading the model's input never
 * computes an input gradient. The model is a graph in list order (mt_layer_spec.inputs): in the
 * backward, a layer whose output has one reader that is not a join (add, concatenate) takes that
 * reader's input gradient by pointer, as a chain always did; any other layer owns an accumulator
 * (gacc) that its readers' gradients are copied into, then added to, in reverse list order, so
 * the bits are fixed. Everything that must be summed over replicas goes through mt_model_comm.
 * Threading: one thread per model. Tests: tests/unit/test_model.c.
 */
#include "model/mt_model.h"

#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "rng/mt_rng.h"
#include "tensor/mt_tensor.h"

typedef struct layer {
    mt_layer_spec s;
    int in_rank, out_rank;
    size_t in_shape[3], out_shape[3];
    size_t in_size, out_size; /* floats per example */
    size_t p0;                /* index of the first parameter */
    mt_model_param *kernel, *bias, *gamma, *beta, *mmean, *mvar;
    mt_conv2d_geom geom; /* conv2d, batch set per call */
    size_t rows_per_ex;  /* batch_norm: rows per example (H*W for images) */
    size_t feat;         /* batch_norm: features (last axis) */
    float *out_buf;      /* owned (max_batch * out_size) */
    float *dx_buf;       /* owned (max_batch * in_size); NULL for the first layer */
    float *cols, *dcols; /* conv2d im2col scratch */
    int32_t *argmax;     /* max_pool2d */
    float *xhat;         /* batch_norm */
    float *bn;           /* batch_norm: mean, var, sum_dy, sum_dy_xhat (4 * feat) */
    uint8_t *mask;       /* dropout */
    const float *in;     /* input of the last forward (borrowed) */
    const float *ins[MT_LAYER_MAX_INPUTS]; /* add / concatenate: every input */
    size_t in_last[MT_LAYER_MAX_INPUTS];   /* concatenate: each input's last-axis width */
    float *out;                            /* output of the last forward */
    float *gacc;  /* owned: gradient of the output, accumulated over its readers; or NULL */
    float *gin;   /* backward: gradient of the output (gacc or the reader's dx) */
    bool gfresh;  /* gacc holds nothing of this step yet */
    bool dropped; /* dropout applied in the last forward */
} layer;

struct mt_model {
    int n_layers;
    layer *layers;
    mt_model_param *params;
    size_t n_params;
    size_t max_batch, in_size, num_classes;
    uint64_t seed;
    mt_optimizer_spec opt;
    int64_t t;      /* optimizer iterations */
    float *dlogits; /* (max_batch, num_classes) */
    const float *logits;
    size_t batch, global_batch;
    bool trained_forward; /* the last forward ran in training mode */
};

/* ------------------------------------------------------------------ parameters */

mt_code mt_model_param_init(const mt_model_param *p, uint64_t seed, const size_t *offsets,
                            const size_t *local_shape, float *out, mt_err *err)
{
    size_t n = 1;
    for (int i = 0; i < p->rank; i++) {
        if (offsets[i] > p->shape[i] || local_shape[i] > p->shape[i] - offsets[i])
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: shard exceeds axis %d of size %zu",
                              p->name, i, p->shape[i]);
        n *= local_shape[i];
    }
    switch (p->init) {
    case MT_INIT_ZEROS:
        memset(out, 0, n * sizeof(float));
        return MT_OK;
    case MT_INIT_ONES:
        for (size_t i = 0; i < n; i++)
            out[i] = 1.0f;
        return MT_OK;
    case MT_INIT_GLOROT_UNIFORM:
        break;
    }
    return mt_rng_glorot_fill(out, seed, mt_rng_name_id(p->name), p->rank, p->shape, offsets,
                              local_shape, err);
}

static mt_model_param *add_param(mt_model *m, const layer *l, const char *what, int rank,
                                 const size_t *shape, mt_param_init init, bool trainable,
                                 mt_err *err)
{
    mt_model_param *p = &m->params[m->n_params];
    bool adam = m->opt.kind == MT_OPT_ADAM;

    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s.%s", l->s.name, what);
    p->rank = rank;
    p->size = 1;
    for (int i = 0; i < rank; i++) {
        p->shape[i] = p->local_shape[i] = shape[i];
        p->size *= shape[i];
    }
    p->init = init;
    p->trainable = trainable;
    p->value = mt_malloc(p->size * sizeof(float));
    if (trainable) {
        p->grad = mt_calloc(p->size, sizeof(float));
        if (adam || m->opt.momentum > 0.0f)
            p->slot1 = mt_calloc(p->size, sizeof(float));
        if (adam)
            p->slot2 = mt_calloc(p->size, sizeof(float));
    }
    m->n_params++; /* counted before the checks so mt_model_free releases partial allocations */
    if (p->value == NULL || (trainable && p->grad == NULL) ||
        ((adam || m->opt.momentum > 0.0f) && trainable && p->slot1 == NULL) ||
        (adam && trainable && p->slot2 == NULL)) {
        mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", p->name);
        return NULL;
    }
    if (mt_model_param_init(p, m->seed, p->offsets, p->local_shape, p->value, err) != MT_OK)
        return NULL;
    return p;
}

/* ------------------------------------------------------------------ building */

static void shape_str(char *buf, size_t cap, int rank, const size_t *s)
{
    int o = snprintf(buf, cap, "(");
    for (int i = 0; i < rank && o > 0 && (size_t)o < cap; i++)
        o += snprintf(buf + o, cap - (size_t)o, i ? ", %zu" : "%zu", s[i]);
    if (o > 0 && (size_t)o < cap)
        snprintf(buf + o, cap - (size_t)o, ")");
}

/* a * b saturating at UINT64_MAX */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static mt_code layer_shapes(layer *l, int idx, mt_err *err)
{
    char sh[64];
    shape_str(sh, sizeof(sh), l->in_rank, l->in_shape);
    switch (l->s.kind) {
    case MT_LAYER_DENSE:
        if (l->in_rank != 1)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.layers[%d]: dense needs a flat input (add a flatten layer "
                              "before it); its input has shape %s",
                              idx, sh);
        l->out_rank = 1;
        l->out_shape[0] = l->s.units;
        break;
    case MT_LAYER_CONV2D:
    case MT_LAYER_MAX_POOL2D:
        if (l->in_rank != 3)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.layers[%d]: %s needs an image input (height, width, "
                              "channels); its input has shape %s",
                              idx, l->s.kind == MT_LAYER_CONV2D ? "conv2d" : "max_pool2d", sh);
        l->out_rank = 3;
        if (l->s.kind == MT_LAYER_MAX_POOL2D) {
            if (l->in_shape[0] < 2 || l->in_shape[1] < 2)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "model.layers[%d]: max_pool2d input %s is smaller than 2x2", idx,
                                  sh);
            l->out_shape[0] = l->in_shape[0] / 2;
            l->out_shape[1] = l->in_shape[1] / 2;
            l->out_shape[2] = l->in_shape[2];
            break;
        }
        l->geom = (mt_conv2d_geom){0,       l->in_shape[0], l->in_shape[1], l->in_shape[2],
                                   l->s.kh, l->s.kw,        l->s.filters,   l->s.same};
        if (mt_conv2d_out_h(&l->geom) == 0 || mt_conv2d_out_w(&l->geom) == 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "model.layers[%d].kernel_size: %zux%zu is larger than the input "
                              "%s with valid padding",
                              idx, l->s.kh, l->s.kw, sh);
        l->out_shape[0] = mt_conv2d_out_h(&l->geom);
        l->out_shape[1] = mt_conv2d_out_w(&l->geom);
        l->out_shape[2] = l->s.filters;
        break;
    case MT_LAYER_FLATTEN:
        l->out_rank = 1;
        l->out_shape[0] = l->in_size;
        break;
    case MT_LAYER_BATCH_NORM:
    case MT_LAYER_DROPOUT:
        l->out_rank = l->in_rank;
        memcpy(l->out_shape, l->in_shape, sizeof(l->in_shape));
        l->feat = l->in_shape[l->in_rank - 1];
        l->rows_per_ex = l->in_size / l->feat;
        break;
    case MT_LAYER_ADD:
    case MT_LAYER_CONCATENATE:
        break; /* graph_shapes set the output from every input (mt_layer_join_shape) */
    }
    l->out_size = 1;
    for (int i = 0; i < l->out_rank; i++)
        l->out_size *= l->out_shape[i];
    return MT_OK;
}

/*
 * Layer i's input shape(s) from the model input and the earlier layers' output shapes (ranks,
 * shapes indexed by layer), then its own output shape: layer_shapes, or mt_layer_join_shape for
 * a join. Used by mt_model_new and mt_model_spec_size alike.
 */
static mt_code graph_shapes(layer *l, int i, int in_rank, const size_t *in_shape, const int *ranks,
                            const size_t (*shapes)[3], mt_err *err)
{
    int rk[MT_LAYER_MAX_INPUTS];
    size_t sh[MT_LAYER_MAX_INPUTS][3];

    for (int k = 0; k < l->s.n_inputs; k++) {
        int p = l->s.inputs[k];
        rk[k] = p == MT_LAYER_INPUT ? in_rank : ranks[p];
        memset(sh[k], 0, sizeof(sh[k]));
        memcpy(sh[k], p == MT_LAYER_INPUT ? in_shape : shapes[p], (size_t)rk[k] * sizeof(size_t));
        l->in_last[k] = sh[k][rk[k] - 1];
    }
    l->in_rank = rk[0];
    memcpy(l->in_shape, sh[0], sizeof(l->in_shape));
    l->in_size = 1;
    for (int a = 0; a < l->in_rank; a++)
        l->in_size = (size_t)mul_sat(l->in_size, l->in_shape[a]);
    if (l->s.kind == MT_LAYER_ADD || l->s.kind == MT_LAYER_CONCATENATE) {
        mt_code rc = mt_layer_join_shape(&l->s, i, rk, (const size_t(*)[3])sh, &l->out_rank,
                                         l->out_shape, err);
        if (rc != MT_OK)
            return rc;
    }
    return layer_shapes(l, i, err);
}

#define ALLOC_OR_FAIL(ptr, n, what)                                                                \
    do {                                                                                           \
        (ptr) = mt_calloc((n) + 1, sizeof(*(ptr)));                                                \
        if ((ptr) == NULL)                                                                         \
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory for %s", l->s.name,   \
                              what);                                                               \
    } while (0)

static mt_code layer_build(mt_model *m, layer *l, bool needs_acc, mt_err *err)
{
    size_t b = m->max_batch;
    bool passthrough = l->s.kind == MT_LAYER_FLATTEN;
    bool join = l->s.kind == MT_LAYER_ADD || l->s.kind == MT_LAYER_CONCATENATE;

    l->p0 = m->n_params;
    if (l->s.kind == MT_LAYER_DENSE || l->s.kind == MT_LAYER_CONV2D) {
        size_t ks[4], bs[1];
        int kr;
        if (l->s.kind == MT_LAYER_DENSE) {
            ks[0] = l->in_size, ks[1] = l->s.units, kr = 2, bs[0] = l->s.units;
        } else {
            ks[0] = l->s.kh, ks[1] = l->s.kw, ks[2] = l->in_shape[2], ks[3] = l->s.filters;
            kr = 4, bs[0] = l->s.filters;
        }
        l->kernel = add_param(m, l, "kernel", kr, ks, MT_INIT_GLOROT_UNIFORM, true, err);
        if (l->kernel == NULL)
            return err != NULL ? err->code : MT_RESOURCE_EXHAUSTED;
        if (l->s.use_bias) {
            l->bias = add_param(m, l, "bias", 1, bs, MT_INIT_ZEROS, true, err);
            if (l->bias == NULL)
                return err != NULL ? err->code : MT_RESOURCE_EXHAUSTED;
        }
    }
    if (l->s.kind == MT_LAYER_BATCH_NORM) {
        size_t fs[1] = {l->feat};
        if (l->s.scale &&
            (l->gamma = add_param(m, l, "gamma", 1, fs, MT_INIT_ONES, true, err)) == NULL)
            return err != NULL ? err->code : MT_RESOURCE_EXHAUSTED;
        if (l->s.center &&
            (l->beta = add_param(m, l, "beta", 1, fs, MT_INIT_ZEROS, true, err)) == NULL)
            return err != NULL ? err->code : MT_RESOURCE_EXHAUSTED;
        if ((l->mmean = add_param(m, l, "moving_mean", 1, fs, MT_INIT_ZEROS, false, err)) == NULL)
            return err != NULL ? err->code : MT_RESOURCE_EXHAUSTED;
        if ((l->mvar = add_param(m, l, "moving_variance", 1, fs, MT_INIT_ONES, false, err)) == NULL)
            return err != NULL ? err->code : MT_RESOURCE_EXHAUSTED;
        ALLOC_OR_FAIL(l->xhat, b * l->in_size, "normalised inputs");
        ALLOC_OR_FAIL(l->bn, 4 * l->feat, "statistics");
    }
    if (!passthrough)
        ALLOC_OR_FAIL(l->out_buf, b * l->out_size, "outputs");
    if (l->s.inputs[0] != MT_LAYER_INPUT && !passthrough && !join)
        ALLOC_OR_FAIL(l->dx_buf, b * l->in_size, "input gradients");
    if (needs_acc)
        ALLOC_OR_FAIL(l->gacc, b * l->out_size, "output gradients");
    if (l->s.kind == MT_LAYER_CONV2D) {
        mt_conv2d_geom g = l->geom;
        g.batch = b;
        ALLOC_OR_FAIL(l->cols, mt_conv2d_cols_size(&g), "im2col");
        if (l->s.inputs[0] != MT_LAYER_INPUT)
            ALLOC_OR_FAIL(l->dcols, mt_conv2d_cols_size(&g), "im2col gradients");
    }
    if (l->s.kind == MT_LAYER_MAX_POOL2D)
        ALLOC_OR_FAIL(l->argmax, b * l->out_size, "argmax");
    if (l->s.kind == MT_LAYER_DROPOUT)
        ALLOC_OR_FAIL(l->mask, b * l->in_size, "mask");
    return MT_OK;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

mt_code mt_model_spec_size(const mt_job_spec *spec, int in_rank, const size_t *in_shape,
                           mt_model_size *out, mt_err *err)
{
    int *ranks = NULL;
    size_t(*shapes)[3] = NULL;
    uint64_t params = 0, widest;
    mt_code rc = MT_OK;

    memset(out, 0, sizeof(*out));
    if (in_rank < 1 || in_rank > 3)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "model.input_shape: rank %d not in 1..3",
                          in_rank);
    ranks = mt_calloc((size_t)spec->n_layers + 1, sizeof(*ranks));
    shapes = mt_calloc((size_t)spec->n_layers + 1, sizeof(*shapes));
    if (ranks == NULL || shapes == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "model: out of memory");
        goto out;
    }
    widest = 1;
    for (int a = 0; a < in_rank; a++)
        widest = mul_sat(widest, in_shape[a]);
    for (int i = 0; i < spec->n_layers && widest <= SIZE_MAX / 4; i++) {
        layer l;
        uint64_t k = 0;

        memset(&l, 0, sizeof(l));
        l.s = spec->layers[i];
        rc = graph_shapes(&l, i, in_rank, in_shape, ranks, (const size_t(*)[3])shapes, err);
        if (rc != MT_OK)
            goto out;
        if (l.s.kind == MT_LAYER_DENSE)
            k = add_sat(mul_sat(l.in_size, l.s.units), l.s.use_bias ? l.s.units : 0);
        else if (l.s.kind == MT_LAYER_CONV2D)
            k = add_sat(mul_sat(mul_sat(mul_sat(l.s.kh, l.s.kw), l.in_shape[2]), l.s.filters),
                        l.s.use_bias ? l.s.filters : 0);
        else if (l.s.kind == MT_LAYER_BATCH_NORM)
            k = mul_sat(l.feat, 2u + (l.s.scale ? 1u : 0u) + (l.s.center ? 1u : 0u));
        params = add_sat(params, k);
        for (int a = 0; a < l.out_rank; a++) /* l.out_size may have wrapped: recompute */
            k = a == 0 ? l.out_shape[0] : mul_sat(k, l.out_shape[a]);
        widest = k > widest ? k : widest;
        ranks[i] = l.out_rank;
        memcpy(shapes[i], l.out_shape, sizeof(shapes[i]));
    }
    out->params = params;
    out->widest_activation = widest;
out:
    mt_free(ranks);
    mt_free(shapes);
    return rc;
}

mt_code mt_model_check_limits(const mt_job_spec *spec, int in_rank, const size_t *in_shape,
                              size_t batch, const mt_model_limits *lim, mt_err *err)
{
    mt_model_size sz;
    mt_code rc;

    if (batch > lim->max_batch)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                          "batch_size: %zu examples exceeds the limit of %llu", batch,
                          (unsigned long long)lim->max_batch);
    rc = mt_model_spec_size(spec, in_rank, in_shape, &sz, err);
    if (rc != MT_OK)
        return rc;
    if (sz.params > lim->max_params)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                          "model: %llu%s parameters exceed the limit of %llu",
                          (unsigned long long)sz.params, sz.params == UINT64_MAX ? "+" : "",
                          (unsigned long long)lim->max_params);
    if (sz.widest_activation > lim->max_activation)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                          "model: a layer output of %llu%s floats per example exceeds the limit "
                          "of %llu",
                          (unsigned long long)sz.widest_activation,
                          sz.widest_activation >= SIZE_MAX / 4 ? "+" : "",
                          (unsigned long long)lim->max_activation);
    return MT_OK;
}

mt_code mt_model_new(const mt_job_spec *spec, int in_rank, const size_t *in_shape, size_t max_batch,
                     mt_model **out, mt_err *err)
{
    mt_model *m;
    mt_code rc;
    int *ranks = NULL;
    size_t(*shapes)[3] = NULL;
    const layer *last;

    *out = NULL;
    if (in_rank < 1 || in_rank > 3)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "model.input_shape: rank %d not in 1..3",
                          in_rank);
    if (spec->input_rank != 0 &&
        (spec->input_rank != in_rank ||
         memcmp(spec->input_shape, in_shape, (size_t)in_rank * sizeof(size_t)) != 0)) {
        char a[64], b[64];
        shape_str(a, sizeof(a), spec->input_rank, spec->input_shape);
        shape_str(b, sizeof(b), in_rank, in_shape);
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "model.input_shape: %s does not match the dataset's examples %s", a, b);
    }
    if (max_batch == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "model: max batch must be positive");
    {
        /* refuse before allocating: sizes that would not fit or overflow size_t */
        const mt_model_limits lim = MT_MODEL_LIMITS_DEFAULTS;
        rc = mt_model_check_limits(spec, in_rank, in_shape, max_batch, &lim, err);
        if (rc != MT_OK)
            return rc;
    }
    m = mt_calloc(1, sizeof(*m));
    if (m == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "model: out of memory");
    m->max_batch = max_batch;
    m->seed = spec->seed;
    m->opt = spec->optimizer;
    m->n_layers = spec->n_layers;
    m->layers = mt_calloc((size_t)spec->n_layers, sizeof(layer));
    m->params = mt_calloc((size_t)spec->n_layers * 4, sizeof(mt_model_param));
    ranks = mt_calloc((size_t)spec->n_layers, sizeof(*ranks));
    shapes = mt_calloc((size_t)spec->n_layers, sizeof(*shapes));
    if (m->layers == NULL || m->params == NULL || ranks == NULL || shapes == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "model: out of memory");
        goto fail;
    }
    m->in_size = 1;
    for (int i = 0; i < in_rank; i++)
        m->in_size *= in_shape[i];
    for (int i = 0; i < spec->n_layers; i++) {
        layer *l = &m->layers[i];
        l->s = spec->layers[i];
        l->s.activation = mt_model_layer_activation(spec, i);
        rc = graph_shapes(l, i, in_rank, in_shape, ranks, (const size_t(*)[3])shapes, err);
        if (rc == MT_OK)
            rc = layer_build(m, l, mt_job_spec_output_shared(spec, i), err);
        if (rc != MT_OK)
            goto fail;
        ranks[i] = l->out_rank;
        memcpy(shapes[i], l->out_shape, sizeof(shapes[i]));
    }
    last = &m->layers[spec->n_layers - 1];
    if (last->out_rank != 1) {
        char sh[64];
        shape_str(sh, sizeof(sh), last->out_rank, last->out_shape);
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "model.layers[%d]: the last layer must output one logit per class (a "
                        "vector); it outputs %s",
                        spec->n_layers - 1, sh);
        goto fail;
    }
    m->num_classes = last->out_shape[0];
    m->dlogits = mt_calloc(max_batch * m->num_classes, sizeof(float));
    if (m->dlogits == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "model: out of memory");
        goto fail;
    }
    mt_free(ranks);
    mt_free(shapes);
    *out = m;
    return MT_OK;
fail:
    mt_free(ranks);
    mt_free(shapes);
    mt_model_free(m);
    return rc;
}

void mt_model_free(mt_model *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_params; i++) {
        mt_free(m->params[i].value);
        mt_free(m->params[i].grad);
        mt_free(m->params[i].slot1);
        mt_free(m->params[i].slot2);
    }
    for (int i = 0; m->layers != NULL && i < m->n_layers; i++) {
        layer *l = &m->layers[i];
        mt_free(l->out_buf);
        mt_free(l->dx_buf);
        mt_free(l->cols);
        mt_free(l->dcols);
        mt_free(l->argmax);
        mt_free(l->xhat);
        mt_free(l->bn);
        mt_free(l->mask);
        mt_free(l->gacc);
    }
    mt_free(m->layers);
    mt_free(m->params);
    mt_free(m->dlogits);
    mt_free(m);
}

size_t mt_model_param_count(const mt_model *m)
{
    return m->n_params;
}

mt_model_param *mt_model_param_at(mt_model *m, size_t i)
{
    return i < m->n_params ? &m->params[i] : NULL;
}

mt_model_param *mt_model_param_find(mt_model *m, const char *name)
{
    for (size_t i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return &m->params[i];
    return NULL;
}

size_t mt_model_num_classes(const mt_model *m)
{
    return m->num_classes;
}

size_t mt_model_input_size(const mt_model *m)
{
    return m->in_size;
}

int64_t mt_model_iterations(const mt_model *m)
{
    return m->t;
}

void mt_model_set_iterations(mt_model *m, int64_t t)
{
    m->t = t;
}

/* ------------------------------------------------------------------ forward */

static mt_code allreduce(const mt_model_comm *comm, float *buf, size_t n, int tag)
{
    if (comm == NULL || comm->allreduce_sum == NULL)
        return MT_OK;
    return comm->allreduce_sum(comm->ctx, buf, n, tag);
}

static mt_code bn_forward(layer *l, size_t batch, size_t global_batch, bool training,
                          const mt_model_comm *comm)
{
    size_t rows = batch * l->rows_per_ex, c = l->feat;
    float *mean = l->bn, *var = l->bn + c;
    const float *gamma = l->gamma ? l->gamma->value : NULL, *beta = l->beta ? l->beta->value : NULL;
    float inv_m = 1.0f / (float)(global_batch * l->rows_per_ex);
    mt_code rc;

    if (!training) {
        mt_bn_normalize(l->out, NULL, l->in, l->mmean->value, l->mvar->value, l->s.epsilon, gamma,
                        beta, rows, c);
        return MT_OK;
    }
    mt_bn_sum(mean, l->in, rows, c);
    rc = allreduce(comm, mean, c, MT_MODEL_COMM_BN_STATS);
    if (rc != MT_OK)
        return rc;
    for (size_t j = 0; j < c; j++)
        mean[j] *= inv_m;
    mt_bn_sqdev(var, l->in, mean, rows, c);
    rc = allreduce(comm, var, c, MT_MODEL_COMM_BN_STATS);
    if (rc != MT_OK)
        return rc;
    for (size_t j = 0; j < c; j++)
        var[j] *= inv_m;
    mt_bn_normalize(l->out, l->xhat, l->in, mean, var, l->s.epsilon, gamma, beta, rows, c);
    mt_bn_update_moving(l->mmean->value, mean, l->s.momentum, c);
    mt_bn_update_moving(l->mvar->value, var, l->s.momentum, c);
    return MT_OK;
}

static mt_code layer_forward(mt_model *m, layer *l, int idx, size_t batch, bool training,
                             uint64_t step, uint64_t first_example, const mt_model_comm *comm)
{
    l->out = l->out_buf;
    switch (l->s.kind) {
    case MT_LAYER_DENSE:
        mt_dense_forward(l->out, l->in, l->kernel->value, l->bias ? l->bias->value : NULL, batch,
                         l->in_size, l->out_size);
        break;
    case MT_LAYER_CONV2D:
        l->geom.batch = batch;
        mt_conv2d_forward(l->out, l->cols, l->in, l->kernel->value, l->bias ? l->bias->value : NULL,
                          &l->geom);
        break;
    case MT_LAYER_MAX_POOL2D:
        mt_maxpool2_forward(l->out, l->argmax, l->in, batch, l->in_shape[0], l->in_shape[1],
                            l->in_shape[2]);
        break;
    case MT_LAYER_FLATTEN:
        l->out = (float *)l->in; /* a view: NHWC row-major is Keras' flatten order */
        break;
    case MT_LAYER_BATCH_NORM:
        return bn_forward(l, batch, m->global_batch, training, comm);
    case MT_LAYER_DROPOUT:
        l->dropped = training && l->s.rate > 0.0f;
        if (!l->dropped) {
            l->out = (float *)l->in;
            break;
        }
        mt_rng_dropout_mask(l->mask, m->seed, step, (uint32_t)idx, first_example, batch, l->in_size,
                            l->s.rate);
        mt_dropout_forward(l->out, l->in, l->mask, 1.0f / (1.0f - l->s.rate), batch * l->in_size);
        break;
    case MT_LAYER_ADD:
        mt_add_forward(l->out, l->ins, l->s.n_inputs, batch * l->out_size);
        break;
    case MT_LAYER_CONCATENATE:
        mt_concat_forward(l->out, l->ins, l->in_last, l->s.n_inputs,
                          batch * (l->out_size / l->out_shape[l->out_rank - 1]));
        break;
    }
    /* a softmax on the last layer is fused into the loss: the output stays logits */
    if (l->s.activation == MT_ACT_RELU)
        mt_relu_forward(l->out, l->out, batch * l->out_size);
    return MT_OK;
}

mt_code mt_model_forward(mt_model *m, const float *x, size_t local_batch, size_t global_batch,
                         bool training, uint64_t step, uint64_t first_example,
                         const mt_model_comm *comm, const float **logits, mt_err *err)
{
    const float *in = x;
    mt_code rc;

    if (local_batch > m->max_batch)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "batch of %zu examples exceeds the model's %zu",
                          local_batch, m->max_batch);
    if (global_batch < local_batch)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "global batch %zu smaller than local %zu",
                          global_batch, local_batch);
    m->batch = local_batch;
    m->global_batch = global_batch;
    m->trained_forward = training;
    for (int i = 0; i < m->n_layers; i++) {
        layer *l = &m->layers[i];
        for (int k = 0; k < l->s.n_inputs; k++) {
            int p = l->s.inputs[k];
            l->ins[k] = p == MT_LAYER_INPUT ? x : m->layers[p].out;
        }
        l->in = l->ins[0];
        rc = layer_forward(m, l, i, local_batch, training, step, first_example, comm);
        if (rc != MT_OK)
            return mt_err_set(err, rc, "%s: allreduce of batch-norm statistics failed", l->s.name);
        in = l->out;
    }
    m->logits = in;
    if (logits != NULL)
        *logits = in;
    return MT_OK;
}

mt_code mt_model_loss(mt_model *m, const int32_t *labels, size_t global_batch, double *loss_sum,
                      size_t *correct, mt_err *err)
{
    if (m->logits == NULL)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "model loss before any forward pass");
    return mt_softmax_xent(m->dlogits, loss_sum, correct, m->logits, labels, m->batch,
                           m->num_classes, 1.0f / (float)global_batch, err);
}

/* ------------------------------------------------------------------ backward */

static mt_code bn_backward(layer *l, float *dy, float *dx, size_t batch, size_t global_batch,
                           const mt_model_comm *comm)
{
    size_t rows = batch * l->rows_per_ex, c = l->feat;
    float *var = l->bn + c, *sdy = l->bn + 2 * c, *sdyh = l->bn + 3 * c;
    mt_code rc;

    mt_bn_grad_sums(sdy, sdyh, dy, l->xhat, rows, c);
    if (l->beta)
        memcpy(l->beta->grad, sdy, c * sizeof(float)); /* local: reduced with the other grads */
    if (l->gamma)
        memcpy(l->gamma->grad, sdyh, c * sizeof(float));
    if (dx == NULL)
        return MT_OK;
    rc = allreduce(comm, sdy, 2 * c, MT_MODEL_COMM_BN_STATS);
    if (rc != MT_OK)
        return rc;
    mt_bn_backward_dx(dx, dy, l->xhat, l->gamma ? l->gamma->value : NULL, var, l->s.epsilon, sdy,
                      sdyh, global_batch * l->rows_per_ex, rows, c);
    return MT_OK;
}

/* Backward of one layer: dy (batch, out_size) may be overwritten; returns dx or NULL. */
static mt_code layer_backward(mt_model *m, layer *l, float *dy, float **dx_out,
                              const mt_model_comm *comm)
{
    size_t batch = m->batch;
    float *dx = l->dx_buf;

    if (l->s.activation == MT_ACT_RELU)
        mt_relu_backward(dy, dy, l->out, batch * l->out_size);
    switch (l->s.kind) {
    case MT_LAYER_DENSE:
        mt_dense_backward(dx, l->kernel->grad, l->bias ? l->bias->grad : NULL, dy, l->in,
                          l->kernel->value, batch, l->in_size, l->out_size);
        break;
    case MT_LAYER_CONV2D:
        l->geom.batch = batch;
        mt_conv2d_backward(dx, l->kernel->grad, l->bias ? l->bias->grad : NULL, l->dcols, dy,
                           l->cols, l->kernel->value, &l->geom);
        break;
    case MT_LAYER_MAX_POOL2D:
        if (dx != NULL)
            mt_maxpool2_backward(dx, dy, l->argmax, batch * l->in_size, batch * l->out_size);
        break;
    case MT_LAYER_FLATTEN:
        dx = l->s.inputs[0] == MT_LAYER_INPUT ? NULL : dy;
        break;
    case MT_LAYER_ADD:
    case MT_LAYER_CONCATENATE:
        dx = dy; /* routed to every input by give_grad */
        break;
    case MT_LAYER_BATCH_NORM: {
        mt_code rc = bn_backward(l, dy, dx, batch, m->global_batch, comm);
        if (rc != MT_OK)
            return rc;
        break;
    }
    case MT_LAYER_DROPOUT:
        if (dx == NULL)
            break;
        if (l->dropped)
            mt_dropout_backward(dx, dy, l->mask, 1.0f / (1.0f - l->s.rate), batch * l->in_size);
        else
            dx = dy;
        break;
    }
    *dx_out = dx;
    return MT_OK;
}

/*
 * Hand the gradient g of layer i's k-th input to its producer: by pointer when the producer has
 * no accumulator, else copied into it (the first reader in reverse order) or added. A
 * concatenate hands each input its columns [off, off + w) of g's rows of width c.
 */
static void give_grad(mt_model *m, const layer *l, int k, float *g, size_t off)
{
    int p = l->s.inputs[k];
    layer *q;
    size_t rows, w, c;

    if (p == MT_LAYER_INPUT)
        return;
    q = &m->layers[p];
    if (q->gacc == NULL) {
        q->gin = g;
        return;
    }
    c = l->s.kind == MT_LAYER_CONCATENATE ? l->out_shape[l->out_rank - 1] : q->out_size;
    w = l->s.kind == MT_LAYER_CONCATENATE ? l->in_last[k] : c;
    rows = m->batch * q->out_size / w;
    mt_grad_accumulate(q->gacc, g, rows, w, c, off, !q->gfresh);
    q->gfresh = false;
    q->gin = q->gacc;
}

mt_code mt_model_backward(mt_model *m, const mt_model_comm *comm, mt_err *err)
{
    if (!m->trained_forward)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "backward needs a training forward pass");
    for (int i = 0; i < m->n_layers; i++)
        m->layers[i].gfresh = true;
    m->layers[m->n_layers - 1].gin = m->dlogits;
    for (int i = m->n_layers - 1; i >= 0; i--) {
        layer *l = &m->layers[i];
        float *dx = NULL;
        size_t off = 0;
        mt_code rc = layer_backward(m, l, l->gin, &dx, comm);
        if (rc != MT_OK)
            return mt_err_set(err, rc, "%s: allreduce of batch-norm gradients failed", l->s.name);
        for (int k = 0; dx != NULL && k < l->s.n_inputs; k++) {
            give_grad(m, l, k, dx, off);
            off += l->in_last[k];
        }
    }
    return MT_OK;
}

void mt_model_apply_gradients(mt_model *m)
{
    const mt_optimizer_spec *o = &m->opt;
    m->t++;
    for (size_t i = 0; i < m->n_params; i++) {
        mt_model_param *p = &m->params[i];
        if (!p->trainable)
            continue;
        if (o->kind == MT_OPT_ADAM)
            mt_adam_update(p->value, p->slot1, p->slot2, p->grad, o->learning_rate, o->beta1,
                           o->beta2, o->epsilon, m->t, p->size);
        else
            mt_sgd_update(p->value, p->slot1, p->grad, o->learning_rate, o->momentum, p->size);
    }
}

/* ------------------------------------------------------------------ steps */

mt_code mt_model_train_step(mt_model *m, const float *x, const int32_t *labels, size_t local_batch,
                            size_t global_batch, uint64_t step, uint64_t first_example,
                            const mt_model_comm *comm, mt_step_metrics *metrics, mt_err *err)
{
    double loss = 0.0;
    size_t correct = 0;
    float sums[2];
    mt_code rc;

    rc = mt_model_forward(m, x, local_batch, global_batch, true, step, first_example, comm, NULL,
                          err);
    if (rc == MT_OK)
        rc = mt_model_loss(m, labels, global_batch, &loss, &correct, err);
    if (rc == MT_OK)
        rc = mt_model_backward(m, comm, err);
    if (rc != MT_OK)
        return rc;
    for (size_t i = 0; i < m->n_params; i++) {
        mt_model_param *p = &m->params[i];
        if (!p->trainable)
            continue;
        rc = allreduce(comm, p->grad, p->size, MT_MODEL_COMM_GRAD_BASE + (int)i);
        if (rc != MT_OK)
            return mt_err_set(err, rc, "%s: allreduce of the gradient failed", p->name);
    }
    sums[0] = (float)loss;
    sums[1] = (float)correct;
    rc = allreduce(comm, sums, 2, MT_MODEL_COMM_METRICS);
    if (rc != MT_OK)
        return mt_err_set(err, rc, "allreduce of the step metrics failed");
    mt_model_apply_gradients(m);
    if (metrics != NULL) {
        metrics->loss = (double)sums[0] / (double)global_batch;
        metrics->accuracy = (double)sums[1] / (double)global_batch;
    }
    return MT_OK;
}

mt_code mt_model_evaluate(mt_model *m, const float *x, const int32_t *labels, size_t n,
                          double *loss_sum, size_t *correct, mt_err *err)
{
    for (size_t i = 0; i < n; i += m->max_batch) {
        size_t b = n - i < m->max_batch ? n - i : m->max_batch;
        mt_code rc = mt_model_forward(m, x + i * m->in_size, b, b, false, 0, i, NULL, NULL, err);
        if (rc != MT_OK)
            return rc;
        rc = mt_softmax_xent(NULL, loss_sum, correct, m->logits, labels + i, b, m->num_classes,
                             1.0f, err);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}
