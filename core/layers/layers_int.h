/* SPDX-License-Identifier: MIT */
/*
 * layers_int.h — helpers the layer modules share (not part of the contract in mt_layer.h).
 */
#ifndef MT_LAYERS_INT_H
#define MT_LAYERS_INT_H

#include <stdio.h>

#include "layers/mt_layer.h"
#include "model/mt_model_fields.h"
#include "repro/mt_repro.h"

/* "<base>.<key>" into a local buffer named path. */
#define MT_LAYER_PATH(path, base, key) snprintf((path), sizeof(path), "%s.%s", (base), (key))

static inline size_t mt_layer__dsz(const mt_layer_dev *dev, int dim)
{
    return dim < 0 ? 1 : dev->dim_size(dev->ctx, dim);
}

static inline size_t mt_layer__psz(const mt_layer_planner *p, int dim)
{
    return dim < 0 ? 1 : p->dim_size(p->ctx, dim);
}

/* This device's blocks of positions (mt_layer_seq_blocks) when l's rows are split over l->sdim
 * into rl rows per device (one block starting at 0 without sequence parallelism). */
static inline size_t mt_layer__seq_blocks(const mt_layer *l, const mt_layer_dev *dev, size_t rl,
                                          size_t start[2])
{
    return mt_layer_seq_blocks(mt_layer__dsz(dev, l->sdim), (size_t)dev->coord(dev->ctx, l->sdim),
                               rl, start);
}

/* The position of local row r of an activation of `rows` rows per example split over l->sdim
 * and, when rdim >= 0 (l->rin or l->rout), Megatron-SP's tdim: member j of tdim holds rows
 * [j·rows, (j+1)·rows) of its sdim rows (mt_layer_seq_position). */
size_t mt_layer__position(const mt_layer *l, const mt_layer_dev *dev, int rdim, size_t rows,
                          size_t r);

/*
 * Megatron-SP's row collectives over l->tdim (size m). Gather: dst (batch, m·rl, w) gets every
 * member's src (batch, rl, w) rows. Scatter: dst (batch, rl, w) gets this member's rows of src
 * (batch, m·rl, w) summed over the members. work: m·batch·rl·w floats.
 */
mt_code mt_layer__msp_gather(const mt_layer *l, const mt_layer_dev *dev, const float *src,
                             size_t batch, size_t rl, size_t w, float *work, float *dst);
mt_code mt_layer__msp_scatter(const mt_layer *l, const mt_layer_dev *dev, float *src, size_t batch,
                              size_t rl, size_t w, float *work, float *dst);

/* Whether the layer reads the model input (so it computes no input gradient). */
static inline bool mt_layer__reads_input(const mt_layer *l)
{
    return l->s.inputs[0] == MT_LAYER_INPUT;
}

/* Whether the layer computes no input gradient (mt_layer.no_dx: nothing before it needs one). */
static inline bool mt_layer__no_dx(const mt_layer *l)
{
    return l->no_dx;
}

/* Whether the layer has parameters (declared by its plan). */
static inline bool mt_layer__has_params(const mt_layer *l)
{
    for (int k = 0; k < MT_LAYER_MAX_PARAMS; k++)
        if (l->has[k])
            return true;
    return false;
}

/* The output buffer and, unless no earlier layer needs it, the input-gradient buffer. */
static inline mt_code mt_layer__io(const mt_layer *l, mt_layer_state *st, size_t b,
                                   mt_layer_alloc *a, mt_err *err)
{
    mt_code rc = mt_layer_buf(a, l, (void **)&st->out_buf, b * l->out_loc, sizeof(float), err);
    if (rc == MT_OK && !mt_layer__no_dx(l))
        rc = mt_layer_buf(a, l, (void **)&st->dx_buf, b * l->in_loc, sizeof(float), err);
    return rc;
}

/* "model.layers[i]: <kind> needs ...; its input has shape (..)" */
mt_code mt_layer__shape_error(const mt_layer *l, const char *need, mt_err *err);

/*
 * A kernel layer whose contraction axis is sharded over l->kin: sum the partial outputs (rows of
 * width floats in st->out) over kin, then add the bias (width floats, or NULL) to every row.
 */
mt_code mt_layer__kin_finish(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                             size_t rows, size_t width, const float *bias);

/* mt_layer_ops.comm of a kernel layer (dense, conv2d): the input's reshard to kin and back,
 * the forward allreduce over kin and the backward one over kout. */
void mt_layer__comm_kernel(const mt_layer *l, size_t b, int bdim, const mt_layer_planner *p,
                           void (*add)(uint64_t *, int, uint64_t), uint64_t *per_dim);

/* A required positive integer field "<base>.<key>" (at most max) into *out. */
mt_code mt_layer__required_int(const struct cJSON *node, const char *key, const char *base,
                               int64_t max, size_t *out, mt_err *err);

/* The parse of a kind without fields of its own. */
mt_code mt_layer__parse_none(const struct cJSON *node, const char *base, mt_layer_spec *out,
                             mt_err *err);

/* "center", "scale" (true) and "epsilon" (0.001) of a normalisation layer. */
mt_code mt_layer__parse_norm(const struct cJSON *node, const char *base, mt_layer_spec *out,
                             mt_err *err);

/* "activation" and "use_bias" of a kernel layer (dense, conv2d). */
mt_code mt_layer__parse_act_bias(const struct cJSON *node, const char *base, mt_layer_spec *out,
                                 mt_err *err);

/*
 * A kernel layer's input gradient dxk, computed in the layout the layer used (features over
 * used_dim; a partial sum over kout), made the input's: allreduced over kout, then resharded
 * into st->dx_buf unless dxk is st->dx_buf. batch: local examples (their bands' rows with
 * height bands).
 */
mt_code mt_layer__dx_finish(const mt_layer *l, mt_layer_state *st, const mt_layer_dev *dev,
                            float *dxk, size_t batch, int used_dim);

/* ------------------------------------------------------------------ height bands (layer_bands.c)
 *
 * An image activation whose height is sharded over the mesh dim hx: each device holds rows
 * [k h, (k + 1) h) of every example, h = H / p (docs/spmd.md, "Images sharded on their height").
 */

/* Input k of layer l is banded over dim hk (-1: whole; l->hx holds input 0's when k > 0):
 * INVALID_ARGUMENT unless its kind runs on bands and every input of a join has the same bands. */
mt_code mt_layer__bands_input(const mt_layer *l, int k, int hk, const mt_layer_planner *p,
                              mt_err *err);

/* After a band kind's plan: channel sharding with bands is refused unless the kind says it
 * runs so (mt_layer_ops.bands_channels), the output height must divide by ho's size.
 * INVALID_ARGUMENT naming the layer and the sizes. */
mt_code mt_layer__bands_check(const mt_layer *l, const mt_layer_planner *p, mt_err *err);

/* Rows of the local band per example: in_loc / local channels (the whole rows without bands). */
static inline size_t mt_layer__in_rows_loc(const mt_layer *l, size_t c_loc)
{
    return c_loc > 0 ? l->in_loc / c_loc : 0;
}

/*
 * The halo of a layer reading rows beyond its band (conv2d, pooling): band k's "extended band" is
 * he rows starting at global input row g0 (rows outside [0, H) are zero padding), each of we
 * columns starting at column -pl (padding outside [0, W)). Every band sends its first `top` and
 * last `bot` rows to all of the dim's members (an allgather: core/coll has no point-to-point);
 * each keeps the rows of its neighbours k - 1 and k + 1.
 */
typedef struct mt_layer_halo {
    int dim;            /* the height dim */
    size_t p, k;        /* its size; this device's band */
    size_t hh, h, w, c; /* the whole height, the band's rows, the width, the channels */
    size_t top, bot;    /* rows every band sends from its top / bottom */
    long g0;            /* global input row of extended row 0 (< 0: padding) */
    size_t he, we, pl;  /* extended rows, columns, padding columns on the left */
} mt_layer_halo;

/*
 * Band k of p of a window reading, for output band rows [k ob, (k + 1) ob), the input rows
 * [k ob s - pt, k ob s - pt + he) with he = (ob - 1) s + kh. INVALID_ARGUMENT naming layer l's
 * `field` and the dim (dim_name, for messages) when a band would read beyond its neighbours.
 */
mt_code mt_layer__halo_plan(const mt_layer *l, const char *field, int dim, const char *dim_name,
                            size_t p, size_t k, size_t ob, size_t s, size_t pt, size_t kh,
                            size_t we, size_t pl, mt_layer_halo *hl, mt_err *err);

/* A window layer's halo for band k of p (dim_name: for messages, may be NULL). */
typedef mt_code (*mt_layer_halo_fn)(const mt_layer *l, const char *dim_name, size_t p, size_t k,
                                    mt_layer_halo *hl, mt_err *err);

/* mt_layer_ops.halo of a window layer whose halo fn computes: 0 without bands. */
uint64_t mt_layer__halo_step(const mt_layer *l, size_t batch, const mt_layer_planner *p,
                             mt_layer_halo_fn fn);

/* mt_layer_ops.comm's share of the halo: the allgathers' blocks over l->hx (every member's). */
void mt_layer__halo_comm(const mt_layer *l, size_t batch, const mt_layer_planner *p,
                         mt_layer_halo_fn fn, void (*add)(uint64_t *, int, uint64_t),
                         uint64_t *per_dim);

/* The extended band's buffers for b examples: st->xin, st->dxk (unless the layer reads the
 * model input) and the blocks sent and gathered, st->scr[slot] and st->scr[slot + 1]. */
mt_code mt_layer__halo_alloc(const mt_layer *l, const mt_layer_halo *hl, mt_layer_state *st,
                             size_t b, int slot, mt_layer_alloc *a, mt_err *err);

/* Floats a device hands the allgathers of one training step (forward and backward). */
uint64_t mt_layer__halo_floats(const mt_layer_halo *hl, size_t batch);

/* Scratch floats: the send block (batch rows) and the gathered blocks. */
size_t mt_layer__halo_send_size(const mt_layer_halo *hl, size_t batch);

/* The extended band ext (batch, he, we, c) of the local band x (batch, h, w, c): exchanges
 * the boundary rows over hl->dim (send, recv: scratch of the sizes above). */
mt_code mt_layer__halo_forward(const mt_layer_halo *hl, const mt_layer_dev *dev, const float *x,
                               size_t batch, float *send, float *recv, float *ext);

/* The input gradient dx (batch, h, w, c) from the extended band's dext: its own rows, plus the
 * gradients of its rows that its neighbours borrowed (sent back over hl->dim). */
mt_code mt_layer__halo_backward(const mt_layer_halo *hl, const mt_layer_dev *dev, const float *dext,
                                size_t batch, float *send, float *recv, float *dx);

/*
 * mesh_invariant on height bands (docs/reproducibility.md, "Height leaves"): the halo of dy (the
 * output's rows in bands of OH / p, OW columns, c floats per pixel) that input band k of p of a
 * window layer (l->s.kh rows at stride l->s.sh, pt padding rows on top) gathers so that it can
 * sum its own pixels' gradients in the whole image's order, nothing sent back: output rows
 * [hl->g0, hl->g0 + hl->he), those whose windows read its rows (exchanged with
 * mt_layer__halo_forward, the extended band then being dy's). INVALID_ARGUMENT naming the layer
 * when a band would take gradients beyond its neighbours' rows.
 */
mt_code mt_layer__dy_halo(const mt_layer *l, size_t p, size_t k, size_t pt, size_t c,
                          mt_layer_halo *hl, mt_err *err);
/* The most rows (*he) any band's dy halo extends to, and the block a band sends for batch
 * examples (*send floats; the gathered blocks are p times that). */
mt_code mt_layer__dy_halo_most(const mt_layer *l, size_t p, size_t pt, size_t c, size_t batch,
                               size_t *he, size_t *send, mt_err *err);

/*
 * mesh_invariant: the height leaves of a sum over the rows of an image `height` rows high (global;
 * 0: not an image, one leaf) of which the device holds rows_loc rows per example (its band's
 * image rows x columns): Lh = mt_repro_leaves(height) leaves over the bands of l->hx (each
 * band's Lh / |hx| leaves folded, then the allreduce over hx). Filled into h (which the returned
 * pointer lives in) for core/repro's kernels.
 */
typedef struct mt_layer_hleaves {
    mt_repro_bands b;
    const mt_layer_dev *dev;
    int dim;
} mt_layer_hleaves;
const mt_repro_bands *mt_layer__hleaves(mt_layer_hleaves *h, const mt_layer *l,
                                        const mt_layer_dev *dev, const mt_layer_pass *ps,
                                        size_t height, size_t rows_loc);

/*
 * mesh_invariant: the position leaves of a sum over the rows of a sequence
 * (docs/reproducibility.md, "Position leaves"): a layer whose output is (T, C) per example has Lt =
 * mt_repro_leaves(T) position leaves in the zig-zag canonical order; its rows (l->out_rows per
 * example: the device's positions) are split over l->sdim into Lt / |sdim| leaves each, their
 * fold's top the allreduce over sdim (none without sequence parallelism: one device's leaves are
 * every mesh's). Other outputs (a vector, an image) have one leaf and no reduce: the kernels' plain
 * per-leaf sums. Filled into h, which the returned pointer lives in.
 */
const mt_repro_bands *mt_layer__pleaves(mt_layer_hleaves *h, const mt_layer *l,
                                        const mt_layer_dev *dev, const mt_layer_pass *ps);

extern const mt_layer_ops mt_layer_dense_ops, mt_layer_conv2d_ops, mt_layer_max_pool2d_ops,
    mt_layer_flatten_ops, mt_layer_batch_norm_ops, mt_layer_dropout_ops, mt_layer_add_ops,
    mt_layer_concatenate_ops, mt_layer_activation_ops, mt_layer_global_average_pooling2d_ops,
    mt_layer_layer_norm_ops, mt_layer_average_pooling2d_ops, mt_layer_embedding_ops,
    mt_layer_position_embedding_ops, mt_layer_attention_ops;

#endif
