/* SPDX-License-Identifier: MIT */
/*
 * dropout.c — inverted dropout: in training each element is kept with probability 1 - rate and
 * scaled by 1 / (1 - rate); in inference (or rate 0) the output is the input itself.
 *
 * The mask is keyed by (seed, step, layer index, GLOBAL example index) (mt_rng_dropout_mask),
 * so it is the same on every mesh. Sharding: features sharded over the input's dim stay so;
 * such a device draws the whole rows' masks and keeps its columns. With rows split (sequence
 * parallelism's positions, an image's height bands) it keeps its rows of the whole masks.
 * Reference: mt_dropout_forward_ref (core/tensor/mt_kernels_ref.c).
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"
#include "rng/mt_rng.h"
#include "tensor/mt_tensor.h"

enum { MASK, FULLMASK }; /* scratch */

static const char *const keys[] = {"rate", NULL};

static mt_code parse(const cJSON *node, const char *base, mt_layer_spec *out, mt_err *err)
{
    char path[112];
    MT_LAYER_PATH(path, base, "rate");
    if (cJSON_GetObjectItemCaseSensitive(node, "rate") == NULL)
        return mt_model_field_bad(err, path, "is required");
    return mt_model_field_num(node, "rate", path, 0, 1, false, true, 0.0f, &out->rate, err);
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
    mt_code rc = mt_layer__io(l, st, b, a, err);
    (void)dev;
    if (rc == MT_OK)
        rc = mt_layer_buf(a, l, &st->scr[MASK], b * l->in_loc, sizeof(uint8_t), err);
    if (rc == MT_OK && (l->xf >= 0 || l->sdim >= 0 || l->hx >= 0))
        rc = mt_layer_buf(a, l, &st->scr[FULLMASK], b * l->in_size, sizeof(uint8_t), err);
    return rc;
}

static mt_code forward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                       const mt_layer_pass *ps)
{
    uint8_t *mask = st->scr[MASK], *full = st->scr[FULLMASK];
    size_t batch = ps->batch;

    st->flag = ps->training && l->s.rate > 0.0f; /* a mask was applied */
    if (!st->flag) {
        st->out = (float *)st->in;
        return MT_OK;
    }
    if (l->xf < 0 && l->sdim < 0 && l->hx < 0) {
        mt_rng_dropout_mask(mask, dev->seed, ps->step, (uint32_t)l->idx, ps->first, batch,
                            l->in_size, l->s.rate);
    } else { /* the whole examples' masks, then this device's columns of its rows: rows split
                over sdim (positions) or hx (height bands: band k holds rows [k rl, (k+1) rl)) */
        size_t cl = l->in_c / mt_layer__dsz(dev, l->xf);
        size_t rl = l->hx >= 0 ? mt_layer__in_rows_loc(l, cl) : l->in_rows;
        size_t off = (size_t)dev->coord(dev->ctx, l->xf) * cl;
        size_t r0 = (size_t)dev->coord(dev->ctx, l->hx) * rl; /* a band's first row */
        mt_rng_dropout_mask(full, dev->seed, ps->step, (uint32_t)l->idx, ps->first, batch,
                            l->in_size, l->s.rate);
        for (size_t e = 0; e < batch; e++)
            for (size_t r = 0; r < rl; r++) /* the mask's row at the local row's position */
                memcpy(mask + (e * rl + r) * cl,
                       full + e * l->in_size +
                           (r0 + mt_layer__position(l, dev, l->rin, rl, r)) * l->in_c + off,
                       cl);
    }
    (ps->ref ? mt_dropout_forward_ref : mt_dropout_forward)(
        st->out, st->in, mask, 1.0f / (1.0f - l->s.rate), batch * l->in_loc);
    return MT_OK;
}

static mt_code backward(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                        const mt_layer_pass *ps, float *dy, float **dx)
{
    (void)dev;
    *dx = NULL;
    if (st->dx_buf == NULL)
        return MT_OK;
    if (!st->flag) {
        *dx = dy;
        return MT_OK;
    }
    *dx = st->dx_buf;
    mt_dropout_backward(st->dx_buf, dy, st->scr[MASK], 1.0f / (1.0f - l->s.rate),
                        ps->batch * l->in_loc);
    return MT_OK;
}

const mt_layer_ops mt_layer_dropout_ops = {
    .type = "dropout",
    .kind = MT_LAYER_DROPOUT,
    .keys = keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .reads_input_only = false,
    .views_input = true,
    .bands = true,
    .seq_leaves = true, /* sums over no positions */
    .bands_channels = true,
    .parse = parse,
    .plan = plan,
    .alloc = alloc,
    .forward = forward,
    .backward = backward,
    .example =
        "\"model\":{\"input_shape\":[6],\"layers\":[{\"type\":\"dense\",\"units\":8,"
        "\"activation\":\"relu\"},{\"type\":\"dropout\",\"rate\":0.3},{\"type\":\"dense\","
        "\"units\":3}]},"
        "\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{\"dense_1\\\\.kernel\":[\"unsharded\","
        "\"model\"],\"dense_2\\\\.kernel\":[\"model\",\"unsharded\"]}",
};
