/* SPDX-License-Identifier: MIT */
/*
 * batch_norm.c — batch normalisation over the last axis (Keras BatchNormalization): training
 * uses the batch's mean and (biased) variance over every row of the global batch and updates
 * moving_mean / moving_variance with `momentum`; inference uses the moving statistics.
 *
 * Sharding: features sharded over the input's dim stay so, and gamma, beta and the moving
 * statistics follow them. The per-feature sums (forward: mean, then squared deviations;
 * backward: sum dy and sum dy·xhat) are allreduced over the batch dim, so every replica
 * normalises with the global statistics; with height bands over hx they are summed over hx too
 * (and gamma, beta's gradients with them). Sums are accumulated in double (mt_bn_sum).
 * mesh_invariant: per batch leaf and height leaf (core/repro's mt_repro_bn_sums_h), the bands'
 * allreduce once per batch leaf inside (docs/reproducibility.md, "Height leaves").
 * Reference: mt_bn_normalize_ref / mt_bn_backward_dx_ref (core/tensor/mt_kernels_ref.c).
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "repro/mt_repro.h"
#include "tensor/mt_tensor.h"

enum { GAMMA, BETA, MMEAN, MVAR };
enum { XHAT, STATS }; /* scratch: normalised inputs; mean, var, sum dy, sum dy·xhat */

static const char *const keys[] = {"center", "scale", "momentum", "epsilon", NULL};

static mt_code parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    char path[112];
    mt_code rc = mt_layer__parse_norm(node, base, out, err);
    MT_LAYER_PATH(path, base, "momentum");
    if (rc == MT_OK)
        rc = mt_model_field_num(node, "momentum", path, 0, 1, false, false, 0.99f, &out->momentum,
                                err);
    return rc;
}

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    static const char *const names[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
    static const mt_param_init init[4] = {MT_INIT_ONES, MT_INIT_ZEROS, MT_INIT_ZEROS, MT_INIT_ONES};
    bool on[4] = {l->s.scale, l->s.center, true, true};
    size_t fs[1] = {l->in_c};

    l->out_rank = l->in_rank;
    memcpy(l->out_shape, l->in_shape, sizeof(l->in_shape));
    l->of = l->xf;
    for (int k = 0; k < 4; k++) {
        mt_code rc;
        if (!on[k])
            continue;
        rc = p->add_param(p->ctx, l, k, names[k], 1, fs, init[k], k < 2, l->xf, err);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

static size_t feats(const mt_layer *l, const mt_layer_dev *dev)
{
    return l->in_c / mt_layer__dsz(dev, l->xf);
}

/* Per-feature sums over every row of the global batch: over the batch dim, then over the
 * height bands. */
static mt_code allreduce_rows(const mt_layer *l, const mt_layer_dev *dev, float *buf, size_t c)
{
    mt_code rc = dev->allreduce(dev->ctx, dev->bdim, buf, c);
    return rc == MT_OK ? dev->allreduce(dev->ctx, l->hx, buf, c) : rc;
}

/* mesh_invariant: an image's rows in height leaves (mt_layer__hleaves; other inputs: one leaf). */
static const mt_repro_bands *hleaves(mt_layer_hleaves *hv, const mt_layer *l,
                                     const mt_layer_dev *dev, const mt_layer_pass *ps, size_t c)
{
    return mt_layer__hleaves(hv, l, dev, ps, l->in_rank == 3 ? l->in_shape[0] : 0,
                             mt_layer__in_rows_loc(l, c));
}

/* mesh_invariant: the forward's sums (x; (x - mean)^2 with mean) per batch leaf and height leaf,
 * folded in the leaf trees (the bands' allreduce inside), then summed over the batch dim. */
static mt_code inv_sums(const mt_layer *l, const mt_layer_dev *dev, const mt_layer_pass *ps,
                        float *out, const float *x, const float *mean, size_t rows, size_t c)
{
    mt_layer_hleaves hv;
    mt_code rc = mt_repro_bn_sums_h(out, NULL, x, NULL, mean, rows,
                                    ps->leaf_examples * mt_layer__in_rows_loc(l, c), ps->leaves, c,
                                    hleaves(&hv, l, dev, ps, c), ps->acc_w);
    return rc == MT_OK ? dev->allreduce(dev->ctx, dev->bdim, out, c) : rc;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    mt_code rc = mt_layer__io(l, st, b, a, err);
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[XHAT], b * l->in_loc, sizeof(float), err);
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[STATS], 4 * feats(l, dev), sizeof(float), err);
    return rc;
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    size_t c = feats(l, dev), rows = ps->batch * mt_layer__in_rows_loc(l, c);
    float *mean = st->scr[STATS], *var = mean + c, *xhat = st->scr[XHAT];
    float inv_m = 1.0f / (float)(ps->global_batch * l->in_rows);
    mt_code rc;

    if (!ps->training) {
        (ps->ref ? mt_bn_normalize_ref : mt_bn_normalize)(st->out, NULL, st->in, st->pv[MMEAN],
                                                          st->pv[MVAR], l->s.epsilon, st->pv[GAMMA],
                                                          st->pv[BETA], rows, c);
        return MT_OK;
    }
    if (ps->leaves > 0) /* mesh_invariant: per leaf, folded in the leaf trees */
        rc = inv_sums(l, dev, ps, mean, st->in, NULL, rows, c);
    else {
        mt_bn_sum(mean, st->in, rows, c);
        rc = allreduce_rows(l, dev, mean, c);
    }
    if (rc != MT_OK)
        return rc;
    for (size_t j = 0; j < c; j++)
        mean[j] *= inv_m;
    if (ps->leaves > 0)
        rc = inv_sums(l, dev, ps, var, st->in, mean, rows, c);
    else {
        mt_bn_sqdev(var, st->in, mean, rows, c);
        rc = allreduce_rows(l, dev, var, c);
    }
    if (rc != MT_OK)
        return rc;
    for (size_t j = 0; j < c; j++)
        var[j] *= inv_m;
    (ps->ref ? mt_bn_normalize_ref : mt_bn_normalize)(
        st->out, xhat, st->in, mean, var, l->s.epsilon, st->pv[GAMMA], st->pv[BETA], rows, c);
    mt_bn_update_moving(st->pv[MMEAN], mean, l->s.momentum, c);
    mt_bn_update_moving(st->pv[MVAR], var, l->s.momentum, c);
    if (dev->keep != NULL) {
        dev->keep(dev->ctx, l->pi[MMEAN]);
        dev->keep(dev->ctx, l->pi[MVAR]);
    }
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    size_t c = feats(l, dev), rows = ps->batch * mt_layer__in_rows_loc(l, c);
    float *stats = st->scr[STATS], *var = stats + c, *sdy = stats + 2 * c, *sdyh = stats + 3 * c;
    mt_code rc;

    *dx = st->dx_buf;
    if (ps->leaves > 0) { /* mesh_invariant: summed over the bands per batch leaf inside */
        mt_layer_hleaves hv;
        rc = mt_repro_bn_sums_h(sdy, sdyh, dy, st->scr[XHAT], NULL, rows,
                                ps->leaf_examples * mt_layer__in_rows_loc(l, c), ps->leaves, c,
                                hleaves(&hv, l, dev, ps, c), ps->acc_w);
    } else {
        mt_bn_grad_sums(sdy, sdyh, dy, st->scr[XHAT], rows, c);
        /* height bands: the sums over the bands are the gamma and beta gradients of the replica */
        rc = dev->allreduce(dev->ctx, l->hx, sdy, 2 * c);
    }
    if (rc != MT_OK)
        return rc;
    if (l->has[BETA]) /* local: reduced with the other gradients */
        memcpy(st->pg[BETA], sdy, c * sizeof(float));
    if (l->has[GAMMA])
        memcpy(st->pg[GAMMA], sdyh, c * sizeof(float));
    if (st->dx_buf == NULL)
        return MT_OK;
    if ((rc = dev->allreduce(dev->ctx, dev->bdim, sdy, 2 * c)) != MT_OK)
        return rc;
    (ps->ref ? mt_bn_backward_dx_ref
             : mt_bn_backward_dx)(st->dx_buf, dy, st->scr[XHAT], st->pv[GAMMA], var, l->s.epsilon,
                                  sdy, sdyh, ps->global_batch * l->in_rows, rows, c);
    return MT_OK;
}

static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    (void)b;
    add(per_dim, bdim, 4 * (l->in_c / mt_layer__psz(p, l->xf)));
    add(per_dim, l->hx, 4 * l->in_c);
}

const mt_layer_ops mt_layer_batch_norm_ops = {
    .type = "batch_norm",
    .kind = MT_LAYER_BATCH_NORM,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = false,
    .bands = true,
    .bands_channels = true,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .example =
        "\"model\":{\"input_shape\":[6],\"layers\":[{\"type\":\"dense\",\"units\":8,"
        "\"use_bias\":false},"
        "{\"type\":\"batch_norm\",\"momentum\":0.9},{\"type\":\"dense\",\"units\":3}]},"
        "\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"dense_1\\\\.kernel\":[\"unsharded\","
        "\"model\"],\"dense_2\\\\.kernel\":[\"model\",\"unsharded\"]}",
    .comm = comm,
};
