/* SPDX-License-Identifier: MIT */
/*
 * layer_common.c — pieces several layer modules share (layers_int.h): messages, the fields of
 * the kernel layers, and the return of a contraction's input gradient.
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "layers/layers_int.h"

mt_code mt_layer__shape_error(const mt_layer *l, const char *need, mt_err *err)
{
    char sh[64];
    mt_layer_shape_text(sh, sizeof(sh), l->in_rank, l->in_shape);
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "model.layers[%d]: %s needs %s; its input has shape %s", l->idx, l->ops->type,
                      need, sh);
}

mt_code mt_layer__parse_act_bias(const struct cJSON *node, const char *base, mt_layer_spec *out,
                                 mt_err *err)
{
    char path[112];
    mt_code rc;
    MT_LAYER_PATH(path, base, "activation");
    rc = mt_model_field_activation(node, path, &out->activation, err);
    MT_LAYER_PATH(path, base, "use_bias");
    if (rc == MT_OK)
        rc = mt_model_field_bool(node, "use_bias", path, true, &out->use_bias, err);
    return rc;
}

mt_code mt_layer__required_int(const struct cJSON *node, const char *key, const char *base,
                               int64_t max, size_t *out, mt_err *err)
{
    char path[112];
    int64_t v = 0;
    mt_code rc;

    snprintf(path, sizeof(path), "%s.%s", base, key);
    if (cJSON_GetObjectItemCaseSensitive(node, key) == NULL)
        return mt_model_field_bad(err, path, "is required");
    rc = mt_model_field_pos_int(node, key, path, max, 0, &v, err);
    *out = (size_t)v;
    return rc;
}

mt_code mt_layer__parse_none(const struct cJSON *node, const char *base, mt_layer_spec *out,
                             mt_err *err)
{
    (void)node;
    (void)base;
    (void)out;
    (void)err;
    return MT_OK;
}

mt_code mt_layer__parse_norm(const struct cJSON *node, const char *base, mt_layer_spec *out,
                             mt_err *err)
{
    char path[112];
    mt_code rc;

    MT_LAYER_PATH(path, base, "center");
    rc = mt_model_field_bool(node, "center", path, true, &out->center, err);
    MT_LAYER_PATH(path, base, "scale");
    if (rc == MT_OK)
        rc = mt_model_field_bool(node, "scale", path, true, &out->scale, err);
    MT_LAYER_PATH(path, base, "epsilon");
    if (rc == MT_OK)
        rc =
            mt_model_field_num(node, "epsilon", path, 0, 1, true, false, 1e-3f, &out->epsilon, err);
    return rc;
}

mt_code mt_layer__dx_finish(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                            float *dxk, size_t batch, int used_dim)
{
    mt_code rc = dev->allreduce(dev->ctx, l->kout, dxk, batch * l->use_loc);
    if (rc != MT_OK || dxk == st->dx_buf)
        return rc;
    return dev->reshard(dev->ctx, dxk, batch * l->in_rows / mt_layer__dsz(dev, l->hx), l->in_c,
                        used_dim, l->xf, st->dx_buf);
}

mt_code mt_layer__kin_finish(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                             size_t rows, size_t width, const float *bias)
{
    mt_code rc = dev->allreduce(dev->ctx, l->kin, st->out, rows * width);
    if (rc != MT_OK)
        return rc;
    for (size_t r = 0; bias != NULL && r < rows; r++)
        for (size_t j = 0; j < width; j++)
            st->out[r * width + j] += bias[j];
    return MT_OK;
}

void mt_layer__comm_kernel(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                           void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim)
{
    size_t band = b * l->in_size / mt_layer__psz(p, l->hx); /* a band's floats with bands */
    (void)bdim;
    if (l->xf != l->kin)
        add(per_dim, l->xf, band);
    add(per_dim, l->kin, b * l->out_loc);
    if (mt_layer__no_dx(l))
        return;
    add(per_dim, l->kout, b * l->use_loc);
    if (l->xf != l->kin)
        add(per_dim, l->kin, band);
}

size_t mt_layer__position(const mt_layer *l, const mt_layer_dev *dev, int rdim, size_t rows,
                          size_t r)
{
    size_t m = mt_layer__dsz(dev, rdim), j = (size_t)dev->coord(dev->ctx, rdim);
    return mt_layer_seq_position(mt_layer__dsz(dev, l->sdim), (size_t)dev->coord(dev->ctx, l->sdim),
                                 rows * m, j * rows + r);
}

/* rows (batch, m·rl, w) -> members (m, batch, rl, w), or back. */
static void msp_order(float *members, float *rows, size_t batch, size_t m, size_t rl, size_t w,
                      bool back)
{
    for (size_t j = 0; j < m; j++)
        for (size_t e = 0; e < batch; e++) {
            float *a = members + (j * batch + e) * rl * w, *b = rows + (e * m + j) * rl * w;
            memcpy(back ? b : a, back ? a : b, rl * w * sizeof(float));
        }
}

mt_code mt_layer__msp_gather(const mt_layer *l, const mt_layer_dev *dev, const float *src,
                             size_t batch, size_t rl, size_t w, float *work, float *dst)
{
    size_t m = mt_layer__dsz(dev, l->tdim);
    mt_code rc = dev->allgather(dev->ctx, l->tdim, src, batch * rl * w, work);
    if (rc == MT_OK)
        msp_order(work, dst, batch, m, rl, w, true);
    return rc;
}

mt_code mt_layer__msp_scatter(const mt_layer *l, const mt_layer_dev *dev, float *src, size_t batch,
                              size_t rl, size_t w, float *work, float *dst)
{
    size_t m = mt_layer__dsz(dev, l->tdim);
    msp_order(work, src, batch, m, rl, w, false);
    return dev->reduce_scatter(dev->ctx, l->tdim, work, m * batch * rl * w, dst);
}
