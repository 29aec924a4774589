/* SPDX-License-Identifier: MIT */
/*
 * model.c — the single-device REFERENCE engine (contract in mt_model.h): the model planned on
 * one device, named parameters, loss, optimizer update and the train/eval steps. The SPMD
 * engine (core/spmd) runs the same layer modules over a mesh and is tested against this one.
 *
 * DESIGN: the layers are core/layers modules run by mt_layer_graph_forward / _backward with a
 * one-device mt_layer_dev: its batch dimension (0) is the caller's mt_model_comm hook (so the
 * batch-norm sums of a data-parallel caller are reduced), every other dim is absent, so no layer
 * reshards. Buffers are sized once for max_batch examples (no allocation in a step).
 * Everything that must be summed over replicas goes through mt_model_comm.
 * Threading: one thread per model. Tests: tests/unit/test_model.c, tests/unit/test_layers.c.
 */
#include "model/mt_model.h"

#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "layers/mt_layer.h"
#include "optim/mt_optim.h"
#include "rng/mt_rng.h"
#include "tensor/mt_tensor.h"

struct mt_model {
    int n_layers;
    mt_layer *layers;   /* the plan (core/layers) */
    mt_layer_state *st; /* per layer */
    mt_model_param *params;
    size_t n_params;
    size_t max_batch, in_size, num_classes;
    mt_loss_spec loss; /* the spec's loss and metrics (core/loss) */
    mt_loss_shape osh; /* the output's (rows, c) view; num_classes == osh.c */
    size_t out_size;   /* rows · c floats per example */
    uint64_t seed;
    mt_optimizer_spec opt;
    int64_t t;      /* optimizer iterations */
    float *dlogits; /* (max_batch, rows, c) */
    float *work;    /* the layers' shared work area (mt_layer_pass.work), or NULL */
    const float *logits;
    size_t batch, global_batch;
    bool trained_forward;      /* the last forward ran in training mode */
    const mt_model_comm *comm; /* of the current pass */
    bool ref;                  /* plain reference kernels (mt_model_use_reference_kernels) */
    bool count_only;           /* planning for mt_model_spec_size: no parameter storage */
    uint64_t counted;          /* count_only: parameters declared (saturating) */
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
    case MT_INIT_UNIFORM_005:
        return mt_rng_uniform_fill(out, seed, mt_rng_name_id(p->name), 0.05f, p->rank, p->shape,
                                   offsets, local_shape, err);
    }
    return mt_rng_glorot_fill(out, seed, mt_rng_name_id(p->name), p->rank, p->shape, offsets,
                              local_shape, err);
}

/* a * b saturating at UINT64_MAX */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* ------------------------------------------------------------------ the one-device planner */

/* mt_layer_planner.add_param: a whole, replicated parameter, allocated and initialised (or only
 * counted). */
static mt_code plan_add_param(void *ctx, mt_layer *l, int slot, const char *what, int rank,
                              const size_t *shape, mt_param_init init, bool trainable, int follow,
                              mt_err *err)
{
    mt_model *m = ctx;
    mt_model_param *p;
    int slots = mt_optim_slots(&m->opt);
    uint64_t n = 1;

    (void)follow;
    for (int i = 0; i < rank; i++)
        n = mul_sat(n, shape[i]);
    l->has[slot] = true;
    l->pi[slot] = m->n_params;
    if (m->count_only) {
        m->counted = add_sat(m->counted, n);
        m->n_params++;
        return MT_OK;
    }
    p = &m->params[m->n_params];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s.%s", l->s.name, what);
    p->rank = rank;
    p->size = (size_t)n;
    for (int i = 0; i < rank; i++)
        p->shape[i] = p->local_shape[i] = shape[i];
    p->init = init;
    p->trainable = trainable;
    p->value = mt_malloc(p->size * sizeof(float));
    if (trainable) {
        p->grad = mt_calloc(p->size, sizeof(float));
        if (slots > 0)
            p->slot1 = mt_calloc(p->size, sizeof(float));
        if (slots > 1)
            p->slot2 = mt_calloc(p->size, sizeof(float));
    }
    m->n_params++; /* counted before the checks so mt_model_free releases partial allocations */
    if (p->value == NULL || (trainable && p->grad == NULL) ||
        (slots > 0 && trainable && p->slot1 == NULL) ||
        (slots > 1 && trainable && p->slot2 == NULL))
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", p->name);
    if (trainable)
        mt_optim_init_slots(&m->opt, p->slot1, p->slot2, p->size);
    return mt_model_param_init(p, m->seed, p->offsets, p->local_shape, p->value, err);
}

static int plan_param_dim(void *ctx, const mt_layer *l, int slot, int axis)
{
    (void)ctx;
    (void)l;
    (void)slot;
    (void)axis;
    return -1; /* one device: nothing is sharded */
}

static const char *plan_dim_name(void *ctx, int dim)
{
    (void)ctx;
    (void)dim;
    return "batch";
}

static size_t one(void *ctx, int dim)
{
    (void)ctx;
    (void)dim;
    return 1;
}

/*
 * Plan every layer of spec for input in_shape into m->layers (parameters allocated, or only
 * counted when m->count_only). *widest: the largest per-example activation (saturating).
 */
static mt_code plan_model(mt_model *m, const mt_job_spec *spec, int in_rank, const size_t *in_shape,
                          uint64_t *widest, mt_err *err)
{
    mt_layer_planner p = {.ctx = m,
                          .add_param = plan_add_param,
                          .param_dim = plan_param_dim,
                          .dim_name = plan_dim_name,
                          .dim_size = one,
                          .sdim = -1, /* one device: no dim splits the positions */
                          .tdim = -1};
    uint64_t w = 1;

    for (int a = 0; a < in_rank; a++)
        w = mul_sat(w, in_shape[a]);
    for (int i = 0; i < spec->n_layers; i++) {
        mt_layer *l = &m->layers[i];
        mt_code rc = mt_layer_plan(spec, i, m->layers, in_rank, in_shape, -1, -1, &p, l, err);
        uint64_t k = 1;
        if (rc != MT_OK)
            return rc;
        for (int a = 0; a < l->out_rank; a++)
            k = mul_sat(k, l->out_shape[a]);
        w = k > w ? k : w;
    }
    if (widest != NULL)
        *widest = w;
    return MT_OK;
}

/* ------------------------------------------------------------------ the one-device services */

/* mt_layer_dev.allreduce: the batch dim (0) is the caller's mt_model_comm; nothing else is
 * sharded. */
static mt_code dev_allreduce(void *ctx, int dim, float *buf, size_t n)
{
    mt_model *m = ctx;
    if (dim != 0 || m->comm == NULL || m->comm->allreduce_sum == NULL)
        return MT_OK;
    return m->comm->allreduce_sum(m->comm->ctx, buf, n, MT_MODEL_COMM_BN_STATS);
}

static mt_code dev_reshard(void *ctx, const float *src, size_t rows, size_t c, int from, int to,
                           float *dst)
{
    (void)ctx;
    (void)src;
    (void)rows;
    (void)c;
    (void)from;
    (void)to;
    (void)dst;
    return MT_INTERNAL; /* nothing is sharded on one device: no layer asks */
}

static int dev_coord(void *ctx, int dim)
{
    (void)ctx;
    (void)dim;
    return 0;
}

static mt_code dev_bind(void *ctx, int idx)
{
    mt_model *m = ctx;
    const mt_layer *l = &m->layers[idx];
    mt_layer_state *st = &m->st[idx];
    for (int k = 0; k < MT_LAYER_MAX_PARAMS; k++) {
        st->pv[k] = l->has[k] ? m->params[l->pi[k]].value : NULL;
        st->pg[k] = l->has[k] ? m->params[l->pi[k]].grad : NULL;
    }
    return MT_OK;
}

static mt_layer_dev model_dev(mt_model *m)
{
    mt_layer_dev d = {m,        dev_allreduce, dev_reshard, one,     dev_coord, NULL,
                      dev_bind, NULL,          0,           m->seed, NULL,      NULL};
    return d;
}

/* ------------------------------------------------------------------ building */

/*
 * Plan spec without allocating parameters or buffers (m->count_only): m->layers holds the plan
 * (owned: mt_free), m->counted the parameter count, *widest the widest activation.
 */
static mt_code plan_counting(mt_model *m, const mt_job_spec *spec, int in_rank,
                             const size_t *in_shape, uint64_t *widest, mt_err *err)
{
    memset(m, 0, sizeof(*m));
    if (in_rank < 1 || in_rank > 3)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "model.input_shape: rank %d not in 1..3",
                          in_rank);
    m->count_only = true;
    m->opt = spec->optimizer;
    m->layers = mt_calloc((size_t)spec->n_layers + 1, sizeof(mt_layer));
    if (m->layers == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "model: out of memory");
    return plan_model(m, spec, in_rank, in_shape, widest, err);
}

mt_code mt_model_spec_size(const mt_job_spec *spec, int in_rank, const size_t *in_shape,
                           mt_model_size *out, mt_err *err)
{
    mt_model m;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    rc = plan_counting(&m, spec, in_rank, in_shape, &out->widest_activation, err);
    out->params = m.counted;
    mt_free(m.layers);
    return rc;
}

mt_code mt_model_spec_shapes(const mt_job_spec *spec, int in_rank, const size_t *in_shape,
                             int *ranks, size_t (*shapes)[3], mt_err *err)
{
    mt_model m;
    mt_code rc = plan_counting(&m, spec, in_rank, in_shape, NULL, err);
    for (int i = 0; rc == MT_OK && i < spec->n_layers; i++) {
        ranks[i] = m.layers[i].out_rank;
        memcpy(shapes[i], m.layers[i].out_shape, sizeof(shapes[i]));
    }
    mt_free(m.layers);
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
    const mt_layer *last;

    *out = NULL;
    if (in_rank < 1 || in_rank > 3)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "model.input_shape: rank %d not in 1..3",
                          in_rank);
    if (spec->input_rank != 0 &&
        (spec->input_rank != in_rank ||
         memcmp(spec->input_shape, in_shape, (size_t)in_rank * sizeof(size_t)) != 0)) {
        char a[64], b[64];
        mt_layer_shape_text(a, sizeof(a), spec->input_rank, spec->input_shape);
        mt_layer_shape_text(b, sizeof(b), in_rank, in_shape);
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
    m->layers = mt_calloc((size_t)spec->n_layers, sizeof(mt_layer));
    m->st = mt_calloc((size_t)spec->n_layers, sizeof(mt_layer_state));
    m->params = mt_calloc((size_t)spec->n_layers * MT_LAYER_MAX_PARAMS, sizeof(mt_model_param));
    if (m->layers == NULL || m->st == NULL || m->params == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "model: out of memory");
        goto fail;
    }
    m->in_size = 1;
    for (int i = 0; i < in_rank; i++)
        m->in_size *= in_shape[i];
    if ((rc = plan_model(m, spec, in_rank, in_shape, NULL, err)) != MT_OK)
        goto fail;
    last = &m->layers[spec->n_layers - 1];
    mt_model_output_view(last->out_rank, last->out_shape, &m->osh);
    m->loss = spec->loss;
    {
        mt_layer_dev d = model_dev(m);
        mt_layer_alloc a = {.count_only = false};
        for (int i = 0; i < m->n_layers; i++)
            if ((rc = mt_layer_state_init(&m->layers[i], &m->st[i], max_batch, &d, &a, err)) !=
                MT_OK)
                goto fail;
        if (a.work > 0 && (m->work = mt_calloc(a.work, sizeof(float))) == NULL) {
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "model: out of memory");
            goto fail;
        }
    }
    m->num_classes = m->osh.c;
    m->out_size = m->osh.rows * m->osh.c;
    m->dlogits = mt_calloc(max_batch * m->out_size, sizeof(float));
    if (m->dlogits == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "model: out of memory");
        goto fail;
    }
    *out = m;
    return MT_OK;
fail:
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
    for (int i = 0; m->st != NULL && i < m->n_layers; i++)
        mt_layer_state_fini(&m->st[i]);
    mt_free(m->layers);
    mt_free(m->st);
    mt_free(m->params);
    mt_free(m->dlogits);
    mt_free(m->work);
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

void mt_model_output_view(int rank, const size_t *shape, mt_loss_shape *out)
{
    out->rows = 1;
    for (int a = 0; a + 1 < rank; a++)
        out->rows *= shape[a];
    out->c = rank > 0 ? shape[rank - 1] : 1;
}

mt_loss_shape mt_model_output_shape(const mt_model *m)
{
    return m->osh;
}

mt_code mt_model_check_data(const mt_model *m, size_t y_dim, size_t t_dim, mt_err *err)
{
    return mt_loss_check(&m->loss, &m->osh, y_dim, t_dim, err);
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

/* ------------------------------------------------------------------ passes */

static mt_code allreduce(const mt_model_comm *comm, float *buf, size_t n, int tag)
{
    if (comm == NULL || comm->allreduce_sum == NULL)
        return MT_OK;
    return comm->allreduce_sum(comm->ctx, buf, n, tag);
}

mt_code mt_model_forward(mt_model *m, const float *x, size_t local_batch, size_t global_batch,
                         bool training, uint64_t step, uint64_t first_example,
                         const mt_model_comm *comm, const float **logits, mt_err *err)
{
    mt_layer_dev d = model_dev(m);
    mt_layer_pass ps = {.batch = local_batch,
                        .global_batch = global_batch,
                        .training = training,
                        .step = step,
                        .first = first_example,
                        .ref = m->ref,
                        .err = err,
                        .work = m->work};
    int failed = 0;
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
    m->comm = comm;
    if (err != NULL)
        err->code = MT_OK;
    rc = mt_layer_graph_forward(m->layers, m->st, m->n_layers, x, &d, &ps, &m->logits, &failed);
    if (rc != MT_OK && (err == NULL || err->code == MT_OK))
        return mt_err_set(err, rc, "%s: allreduce of batch-norm statistics failed",
                          m->layers[failed].s.name);
    if (rc != MT_OK)
        return rc;
    if (logits != NULL)
        *logits = m->logits;
    return MT_OK;
}

/* The loss of the last forward against labels or targets: adds to sums (MT_LOSS_NSUMS); the
 * gradient goes to m->dlogits when dout, scaled for global_batch examples. */
static mt_code model_loss(mt_model *m, const int32_t *labels, const float *targets,
                          size_t global_batch, bool dout, double *sums, double *hist, mt_err *err)
{
    mt_loss_batch b = {m->logits, m->batch, labels, targets,
                       mt_loss_grad_scale(&m->loss, &m->osh, global_batch)};
    if (m->logits == NULL)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "model loss before any forward pass");
    if (mt_loss_uses_targets(&m->loss, targets != NULL ? 1 : 0) ? targets == NULL : labels == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "loss: %s needs the batch's %s",
                          mt_loss_name(m->loss.kind), targets == NULL ? "targets" : "labels");
    return mt_loss_forward(&m->loss, &m->osh, &b, m->ref, dout ? m->dlogits : NULL, sums, hist,
                           err);
}

mt_code mt_model_loss(mt_model *m, const int32_t *labels, size_t global_batch, double *loss_sum,
                      size_t *correct, mt_err *err)
{
    double sums[MT_LOSS_NSUMS] = {0};
    mt_code rc = model_loss(m, labels, NULL, global_batch, true, sums, NULL, err);
    if (rc == MT_OK) {
        *loss_sum += sums[MT_LOSS_SUM_LOSS] / (double)mt_loss_units(&m->loss, &m->osh);
        *correct += (size_t)sums[MT_LOSS_SUM_CORRECT];
    }
    return rc;
}

void mt_model_use_reference_kernels(mt_model *m, bool on)
{
    m->ref = on;
}

mt_code mt_model_backward(mt_model *m, const mt_model_comm *comm, mt_err *err)
{
    mt_layer_dev d = model_dev(m);
    mt_layer_pass ps = {.batch = m->batch,
                        .global_batch = m->global_batch,
                        .training = true,
                        .ref = m->ref,
                        .work = m->work};
    int failed = 0;
    mt_code rc;

    if (!m->trained_forward)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "backward needs a training forward pass");
    m->comm = comm;
    rc = mt_layer_graph_backward(m->layers, m->st, m->n_layers, m->dlogits, &d, &ps, &failed);
    if (rc != MT_OK)
        return mt_err_set(err, rc, "%s: allreduce of batch-norm gradients failed",
                          m->layers[failed].s.name);
    return MT_OK;
}

void mt_model_apply_gradients(mt_model *m)
{
    float scale = 1.0f;
    m->t++;
    if (m->opt.global_clipnorm > 0.0f) {
        double sq = 0.0;
        for (size_t i = 0; i < m->n_params; i++)
            for (size_t e = 0; m->params[i].trainable && e < m->params[i].size; e++)
                sq += (double)m->params[i].grad[e] * m->params[i].grad[e];
        scale = mt_optim_clip_scale(&m->opt, sq);
    }
    for (size_t i = 0; i < m->n_params; i++) {
        mt_model_param *p = &m->params[i];
        if (p->trainable)
            mt_optim_apply(&m->opt, m->t, scale, p->value, p->slot1, p->slot2, p->grad, p->size);
    }
}

/* ------------------------------------------------------------------ steps */

mt_code mt_model_train_step(mt_model *m, const float *x, const int32_t *labels, size_t local_batch,
                            size_t global_batch, uint64_t step, uint64_t first_example,
                            const mt_model_comm *comm, mt_step_metrics *metrics, mt_err *err)
{
    return mt_model_train_step_targets(m, x, labels, NULL, local_batch, global_batch, step,
                                       first_example, comm, metrics, err);
}

void mt_step_metrics_fill(mt_step_metrics *sm, const mt_loss_spec *ls, const mt_loss_shape *sh,
                          const float *sums, size_t global_batch)
{
    for (int k = 0; k < MT_LOSS_NSUMS; k++)
        sm->sums[k] = (double)sums[k];
    sm->examples = (double)global_batch;
    sm->loss =
        (double)sums[MT_LOSS_SUM_LOSS] / ((double)global_batch * (double)mt_loss_units(ls, sh));
    sm->accuracy = (double)sums[MT_LOSS_SUM_CORRECT] / ((double)global_batch * (double)sh->rows);
}

mt_code mt_model_train_step_targets(mt_model *m, const float *x, const int32_t *labels,
                                    const float *targets, size_t local_batch, size_t global_batch,
                                    uint64_t step, uint64_t first_example,
                                    const mt_model_comm *comm, mt_step_metrics *metrics,
                                    mt_err *err)
{
    double loss[MT_LOSS_NSUMS] = {0};
    float sums[MT_LOSS_NSUMS];
    mt_code rc;

    rc = mt_model_forward(m, x, local_batch, global_batch, true, step, first_example, comm, NULL,
                          err);
    if (rc == MT_OK)
        rc = model_loss(m, labels, targets, global_batch, true, loss, NULL, err);
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
    for (int k = 0; k < MT_LOSS_NSUMS; k++)
        sums[k] = (float)loss[k];
    rc = allreduce(comm, sums, MT_LOSS_NSUMS, MT_MODEL_COMM_METRICS);
    if (rc != MT_OK)
        return mt_err_set(err, rc, "allreduce of the step metrics failed");
    mt_model_apply_gradients(m);
    if (metrics != NULL)
        mt_step_metrics_fill(metrics, &m->loss, &m->osh, sums, global_batch);
    return MT_OK;
}

mt_code mt_model_evaluate_sums(mt_model *m, const float *x, const int32_t *labels,
                               const float *targets, size_t n, double *sums, double *hist,
                               mt_err *err)
{
    size_t yd = m->loss.kind == MT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? m->osh.rows : m->out_size;

    for (size_t i = 0; i < n; i += m->max_batch) {
        size_t b = n - i < m->max_batch ? n - i : m->max_batch;
        mt_code rc = mt_model_forward(m, x + i * m->in_size, b, b, false, 0, i, NULL, NULL, err);
        if (rc != MT_OK)
            return rc;
        rc = model_loss(m, labels != NULL ? labels + i * yd : NULL,
                        targets != NULL ? targets + i * m->out_size : NULL, b, false, sums, hist,
                        err);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

mt_code mt_model_evaluate(mt_model *m, const float *x, const int32_t *labels, size_t n,
                          double *loss_sum, size_t *correct, mt_err *err)
{
    double sums[MT_LOSS_NSUMS] = {0};
    mt_code rc = mt_model_evaluate_sums(m, x, labels, NULL, n, sums, NULL, err);
    if (rc == MT_OK) {
        *loss_sum += sums[MT_LOSS_SUM_LOSS] / (double)mt_loss_units(&m->loss, &m->osh);
        *correct += (size_t)sums[MT_LOSS_SUM_CORRECT];
    }
    return rc;
}
