/* SPDX-License-Identifier: MIT */
/*
 * layer_norm.c — layer normalisation over the last axis (Keras LayerNormalization, axis -1):
 * each row (an example, or a position of an image) is normalised by its own mean and biased
 * variance over its features, then scaled by gamma and shifted by beta (per feature). No batch
 * statistics, so nothing depends on how the batch is split.
 *
 * Sharding: features sharded over the input's dim stay so, gamma and beta follow; the per-row
 * sums (forward: the mean, then the squared deviations; backward: Σ dŷ and Σ dŷ·x̂) are
 * allreduced over that dim. Sums are accumulated in double. Height bands (docs/spmd.md): each
 * band normalises its own rows (nothing crosses rows); gamma and beta's gradients are partial
 * sums over the bands, summed over the height dim (mesh_invariant: in height leaves, the bands'
 * allreduce once per batch leaf).
 * Backward: dx = (dŷ − mean(dŷ) − x̂·mean(dŷ·x̂)) / σ with dŷ = dy·gamma; the gamma and beta
 * gradients Σ dy·x̂ and Σ dy per feature are batch norm's (core/tensor's mt_bn_grad_sums: the rows
 * in memory order, a block of features at a time, each feature's double sum in row order).
 * mesh_invariant (mt_layer_pass.leaves > 0): the gamma and beta gradients per leaf, folded in the
 * canonical tree (over a sequence's positions in position leaves, so the positions may be split
 * over a seq dim: mt_layer__pleaves), and the per-row sums in K-leaves of the features, folded in
 * the canonical tree whose top is the allreduce over a dim splitting them (core/repro).
 */
#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "repro/mt_repro.h"
#include "tensor/mt_tensor.h"

enum { GAMMA, BETA };
enum { XHAT, ROWS }; /* scratch: normalised inputs; per row: mean, 1/σ, then two sums */

static const char *const keys[] = {"center", "scale", "epsilon", NULL};

static mt_code plan(mt_layer *l, const mt_layer_planner *p, mt_err *err)
{
    size_t fs[1] = {l->in_c};
    mt_code rc = MT_OK;

    l->out_rank = l->in_rank;
    memcpy(l->out_shape, l->in_shape, sizeof(l->in_shape));
    l->of = l->xf;
    if (l->s.scale)
        rc = p->add_param(p->ctx, l, GAMMA, "gamma", 1, fs, MT_INIT_ONES, true, l->xf, err);
    if (rc == MT_OK && l->s.center)
        rc = p->add_param(p->ctx, l, BETA, "beta", 1, fs, MT_INIT_ZEROS, true, l->xf, err);
    return rc;
}

static mt_code alloc(const mt_layer *l, mt_layer_state *st, size_t b, const mt_layer_dev *dev,
                     mt_layer_alloc *a, mt_err *err)
{
    mt_code rc = mt_layer__io(l, st, b, a, err);
    (void)dev;
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[XHAT], b * l->in_loc, sizeof(float), err);
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[ROWS], 4 * b * l->in_rows, sizeof(float), err);
    if (!l->s.scale || !l->s.center) /* the backward's sum for the missing parameter */
        mt_layer_work(a, l->in_c);
    return rc;
}

/* sums[r] = Σ_j x[r, j] (or Σ_j (x[r, j] − sub[r])² when sub), over this device's c features. */
static void row_sums(float *sums, const float *x, const float *sub, size_t rows, size_t c)
{
    for (size_t r = 0; r < rows; r++) {
        double s = 0.0;
        for (size_t j = 0; j < c; j++) {
            double v = (double)x[r * c + j] - (sub != NULL ? sub[r] : 0.0);
            s += sub != NULL ? v * v : v;
        }
        sums[r] = (float)s;
    }
}

/* mesh_invariant: the K-leaves of the row's features this device holds (0: fixed_mesh). */
static int inv_kl(const mt_layer *l, const mt_layer_dev *dev, const mt_layer_pass *ps)
{
    return ps->leaves > 0 ? mt_repro_leaves(l->in_c) / (int)mt_layer__dsz(dev, l->xf) : 0;
}

/* This device's features of a row, and its rows of batch examples (a band's, with bands). */
static size_t feats(const mt_layer *l, const mt_layer_dev *dev)
{
    return l->in_c / mt_layer__dsz(dev, l->xf);
}

static size_t local_rows(const mt_layer *l, const mt_layer_dev *dev, size_t batch)
{
    return batch * mt_layer__in_rows_loc(l, feats(l, dev));
}

/* mesh_invariant: the rows of gamma and beta's gradients in height leaves for an image (its
 * band's rows; the bands' allreduce inside, once per batch leaf), in position leaves for a
 * sequence, else one leaf. */
static const mt_repro_bands *row_leaves(mt_layer_hleaves *pv, const mt_layer *l,
                                        const mt_layer_dev *dev, const mt_layer_pass *ps)
{
    if (l->in_rank == 3)
        return mt_layer__hleaves(pv, l, dev, ps, l->in_shape[0], local_rows(l, dev, 1));
    return mt_layer__pleaves(pv, l, dev, ps);
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    size_t rows = local_rows(l, dev, ps->batch), c = feats(l, dev);
    float *mean = st->scr[ROWS], *rstd = mean + rows, *xhat = st->scr[XHAT];
    const float *gamma = st->pv[GAMMA], *beta = st->pv[BETA];
    float inv_c = 1.0f / (float)l->in_c;
    int kl = inv_kl(l, dev, ps);
    mt_code rc;

    if (kl > 0) /* mesh_invariant: the rows' K-leaves */
        mt_repro_row_sums(mean, NULL, st->in, NULL, NULL, NULL, rows, c, kl);
    else
        row_sums(mean, st->in, NULL, rows, c);
    if ((rc = dev->allreduce(dev->ctx, l->xf, mean, rows)) != MT_OK)
        return rc;
    for (size_t r = 0; r < rows; r++)
        mean[r] *= inv_c;
    if (kl > 0)
        mt_repro_row_sums(rstd, NULL, st->in, mean, NULL, NULL, rows, c, kl);
    else
        row_sums(rstd, st->in, mean, rows, c);
    if ((rc = dev->allreduce(dev->ctx, l->xf, rstd, rows)) != MT_OK)
        return rc;
    for (size_t r = 0; r < rows; r++) {
        rstd[r] = 1.0f / sqrtf(rstd[r] * inv_c + l->s.epsilon);
        for (size_t j = 0; j < c; j++) {
            float h = (st->in[r * c + j] - mean[r]) * rstd[r];
            xhat[r * c + j] = h;
            st->out[r * c + j] = (gamma != NULL ? gamma[j] * h : h) + (beta != NULL ? beta[j] : 0);
        }
    }
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    size_t rows = local_rows(l, dev, ps->batch), c = feats(l, dev);
    float *rstd = (float *)st->scr[ROWS] + rows, *s1 = rstd + rows, *s2 = s1 + rows;
    const float *xhat = st->scr[XHAT], *gamma = st->pv[GAMMA];
    float inv_c = 1.0f / (float)l->in_c;
    mt_code rc;

    *dx = st->dx_buf;
    if (ps->leaves > 0) { /* mesh_invariant: per leaf (double within it), folded in the leaf tree;
                             a sequence's positions in position leaves, the seq allreduce inside */
        mt_layer_hleaves pv;
        rc = mt_repro_bn_sums_h(st->pg[BETA] != NULL ? st->pg[BETA] : ps->scratch,
                                st->pg[GAMMA] != NULL ? st->pg[GAMMA] : ps->scratch + c, dy, xhat,
                                NULL, rows, local_rows(l, dev, ps->leaf_examples), ps->leaves, c,
                                row_leaves(&pv, l, dev, ps), ps->acc_w);
        if (rc != MT_OK)
            return rc;
    }
    if (ps->leaves == 0 && (st->pg[GAMMA] != NULL || st->pg[BETA] != NULL))
        mt_bn_grad_sums(st->pg[BETA] != NULL ? st->pg[BETA] : ps->work,
                        st->pg[GAMMA] != NULL ? st->pg[GAMMA] : ps->work, dy, xhat, rows, c);
    /* Megatron-SP: the rows are split over tdim too; height bands: over hx; the sum over them
     * (mesh_invariant: the bands' sum ran inside the height leaves' trees) */
    for (int d = 0; d < 2; d++) {
        int dim = d == 0 ? l->rin : ps->leaves > 0 ? -1 : l->hx;
        if (st->pg[GAMMA] != NULL &&
            (rc = dev->allreduce(dev->ctx, dim, st->pg[GAMMA], c)) != MT_OK)
            return rc;
        if (st->pg[BETA] != NULL && (rc = dev->allreduce(dev->ctx, dim, st->pg[BETA], c)) != MT_OK)
            return rc;
    }
    if (st->dx_buf == NULL)
        return MT_OK;
    if (ps->leaves > 0) /* mesh_invariant: the rows' K-leaves */
        mt_repro_row_sums(s1, s2, dy, NULL, gamma, xhat, rows, c, inv_kl(l, dev, ps));
    for (size_t r = 0; ps->leaves == 0 && r < rows; r++) {
        double a = 0.0, b = 0.0;
        for (size_t j = 0; j < c; j++) {
            double g = (double)dy[r * c + j] * (gamma != NULL ? gamma[j] : 1.0f);
            a += g;
            b += g * xhat[r * c + j];
        }
        s1[r] = (float)a;
        s2[r] = (float)b;
    }
    if ((rc = dev->allreduce(dev->ctx, l->xf, s1, 2 * rows)) != MT_OK)
        return rc;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < c; j++) {
            float g = dy[r * c + j] * (gamma != NULL ? gamma[j] : 1.0f);
            st->dx_buf[r * c + j] = (g - s1[r] * inv_c - xhat[r * c + j] * s2[r] * inv_c) * rstd[r];
        }
    return MT_OK;
}

static void comm(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                 void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    size_t gb = (l->s.scale ? l->in_c : 0) + (l->s.center ? l->in_c : 0);
    (void)bdim;
    add(per_dim, l->xf, (mt_layer__no_dx(l) ? 2 : 4) * b * l->in_rows / mt_layer__psz(p, l->hx));
    add(per_dim, l->rin, gb);
    add(per_dim, l->hx, gb);
}

const mt_layer_ops mt_layer_layer_norm_ops = {
    .type = "layer_norm",
    .kind = MT_LAYER_LAYER_NORM,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = true,
    .bands = true,
    .seq_leaves = true,
    .parse = mt_layer__parse_norm,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .comm = comm,
    .example = "\"model\":{\"input_shape\":[6],\"layers\":[{\"type\":\"dense\",\"units\":8},"
               "{\"type\":\"layer_norm\"},{\"type\":\"dense\",\"units\":8,\"activation\":\"gelu\"},"
               "{\"type\":\"layer_norm\",\"center\":false,\"epsilon\":0.01},"
               "{\"type\":\"dense\",\"units\":3}]},\"mesh\":{\"batch\":2,\"model\":2},"
               "\"layouts\":{\"dense_1\\\\.kernel\":[\"unsharded\",\"model\"],"
               "\"dense_2\\\\.kernel\":[\"model\",\"unsharded\"]}",
};
