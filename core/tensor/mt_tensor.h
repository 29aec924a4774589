/* SPDX-License-Identifier: MIT */
/*
 * mt_tensor.h — float32 tensors (rank <= 4, NHWC for images) and the math kernels every device
 * runs: gemm, dense, conv2d, max-pool, ReLU, softmax cross-entropy, batch norm, dropout and the
 * optimizer updates.
 *
 * How it fits: core/model builds layers from these kernels; core/train and the SPMD step (issue
 * #4) call the layers on local shards. Kernels take raw row-major float pointers and explicit
 * sizes so they run on any local shard without copies; mt_tensor adds owned buffers and strided
 * views for the code that needs shapes (slicing a batch, a weight shard).
 * Every fast kernel has a plain-loop `<kernel>_ref` beside it that is obviously correct; the fast
 * path uses OpenBLAS cblas_sgemm. Reductions that must span replicas (batch-norm statistics) are
 * split into a local-sum kernel and an apply kernel so the caller can allreduce in between.
 * Invariants: row-major, dense innermost axis; shapes are in elements; sizes of 0 are valid and
 * do nothing. Threading: kernels are reentrant and use only their arguments (and OpenBLAS).
 * Tests: tests/unit/test_tensor.c (fast vs ref, finite differences); bench/bench_kernels.c.
 */
#ifndef MT_TENSOR_H
#define MT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

#define MT_TENSOR_MAX_RANK 4

/* A float32 tensor or a strided view of one. Caller memory (init/fini or a view by value). */
typedef struct mt_tensor {
    float *data;                       /* first element; owned when `owned` */
    int rank;                          /* 0..MT_TENSOR_MAX_RANK */
    size_t shape[MT_TENSOR_MAX_RANK];  /* elements per axis */
    size_t stride[MT_TENSOR_MAX_RANK]; /* elements between neighbours along each axis */
    bool owned;                        /* mt_tensor_fini frees data */
} mt_tensor;

/*
 * Allocate a zero-filled contiguous tensor. `shape` (rank entries) is borrowed. Codes:
 * INVALID_ARGUMENT (rank out of range), RESOURCE_EXHAUSTED (allocation or size overflow).
 * On failure *t is zeroed.
 */
mt_code mt_tensor_init(mt_tensor *t, int rank, const size_t *shape, mt_err *err);

/* Free an owned buffer and zero *t; views are only zeroed. NULL and zeroed memory are no-ops. */
void mt_tensor_fini(mt_tensor *t);

/* A contiguous view of borrowed memory `data` with the given shape (rank <= 4, asserted). */
mt_tensor mt_tensor_view(float *data, int rank, const size_t *shape);

/* Number of elements (product of the shape; 1 for rank 0). */
size_t mt_tensor_numel(const mt_tensor *t);

/* True when the elements are dense in row-major order. */
bool mt_tensor_is_contiguous(const mt_tensor *t);

/* Pointer to the element at index idx[0..rank-1] (no bounds check beyond an assert). */
float *mt_tensor_at(const mt_tensor *t, const size_t *idx);

/*
 * A view of t restricted to [start, start+len) along `axis` (a slice: a batch shard, a weight
 * shard). The view borrows t's memory. INVALID_ARGUMENT if axis or the range is out of bounds.
 */
mt_code mt_tensor_slice(const mt_tensor *t, int axis, size_t start, size_t len, mt_tensor *out,
                        mt_err *err);

/*
 * A view with another shape over the same elements (e.g. flatten (B,H,W,C) -> (B,H*W*C)).
 * t must be contiguous and the element counts equal, else INVALID_ARGUMENT.
 */
mt_code mt_tensor_reshape(const mt_tensor *t, int rank, const size_t *shape, mt_tensor *out,
                          mt_err *err);

/* Copy src into dst element-wise (any strides). INVALID_ARGUMENT if the shapes differ. */
mt_code mt_tensor_copy(mt_tensor *dst, const mt_tensor *src, mt_err *err);

/* ------------------------------------------------------------------ gemm */

/* C(M,N) = alpha * op(A) * op(B) + beta * C, row-major with leading dimensions (cblas_sgemm). */
void mt_gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
             size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc);
void mt_gemm_ref(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                 const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                 size_t ldc);

/* ------------------------------------------------------------------ dense */

/* x: (B, in); w: (in, out) (Keras kernel layout); b: (out) or NULL; y: (B, out) = x·w + b. */
void mt_dense_forward(float *y, const float *x, const float *w, const float *b, size_t batch,
                      size_t in, size_t out);
void mt_dense_forward_ref(float *y, const float *x, const float *w, const float *b, size_t batch,
                          size_t in, size_t out);

/*
 * dy: (B, out). dx: (B, in) = dy·wᵀ (skipped when NULL); dw: (in, out) = xᵀ·dy and db: (out) =
 * column sums of dy (each skipped when NULL). Outputs are overwritten, not accumulated.
 */
void mt_dense_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                       const float *w, size_t batch, size_t in, size_t out);
void mt_dense_backward_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, size_t batch, size_t in, size_t out);

/* ------------------------------------------------------------------ conv2d */

/*
 * Geometry of a 2-D convolution over NHWC input with an (KH, KW, C, F) kernel and strides
 * (SH, SW) (0 means 1). Padding as Keras / TensorFlow: "valid" gives floor((H - KH) / SH) + 1
 * rows; "same" gives ceil(H / SH) rows, padded by max((OH - 1)·SH + KH - H, 0) split with the
 * smaller half on top (left).
 */
typedef struct mt_conv2d_geom {
    size_t batch, h, w, c; /* input (B, H, W, C) */
    size_t kh, kw, f;      /* kernel (KH, KW, C, F) */
    bool same;             /* padding "same" or "valid" */
    size_t sh, sw;         /* strides; 0 is 1 */
} mt_conv2d_geom;

/* Output height/width for the geometry (0 when the kernel does not fit a valid conv). */
size_t mt_conv2d_out_h(const mt_conv2d_geom *g);
size_t mt_conv2d_out_w(const mt_conv2d_geom *g);
/* Padding rows above / columns left of the input ("same"; 0 for "valid"). */
size_t mt_conv2d_pad_top(const mt_conv2d_geom *g);
size_t mt_conv2d_pad_left(const mt_conv2d_geom *g);

/* Floats of the im2col scratch: B * OH * OW * KH * KW * C. */
size_t mt_conv2d_cols_size(const mt_conv2d_geom *g);

/*
 * The im2col matrix of x (B,H,W,C): row (b, oy, ox), column (ky, kx, ci) = x[b, oy*SH+ky-pt,
 * ox*SW+kx-pl, ci], 0 in the padding; mt_conv2d_cols_size() floats. col2im is its adjoint: dx
 * (B,H,W,C, overwritten) = every column entry summed into its pixel, in row then column order.
 * (mt_conv2d_forward / _backward use them; so does core/repro's mesh_invariant conv2d.)
 */
void mt_conv2d_im2col(float *cols, const float *x, const mt_conv2d_geom *g);
void mt_conv2d_col2im(float *dx, const float *dcols, const mt_conv2d_geom *g);

/*
 * x: (B,H,W,C); w: (KH,KW,C,F); b: (F) or NULL; y: (B,OH,OW,F). `cols` is caller scratch of
 * mt_conv2d_cols_size() floats; the forward leaves there what the backward needs: x's im2col,
 * or, for C = 1 on an AVX-512 CPU (direct kernel, no im2col), x zero-padded to
 * (B, OH+KH-1, OW+KW-1). Callers must treat it as opaque.
 */
void mt_conv2d_forward(float *y, float *cols, const float *x, const float *w, const float *b,
                       const mt_conv2d_geom *g);
void mt_conv2d_forward_ref(float *y, const float *x, const float *w, const float *b,
                           const mt_conv2d_geom *g);

/*
 * dy: (B,OH,OW,F); cols: as left by mt_conv2d_forward for the same x; dcols: scratch of the same
 * size (needed only when dx != NULL). dx: (B,H,W,C), dw: (KH,KW,C,F), db: (F); each may be NULL;
 * all are overwritten.
 */
void mt_conv2d_backward(float *dx, float *dw, float *db, float *dcols, const float *dy,
                        const float *cols, const float *w, const mt_conv2d_geom *g);
void mt_conv2d_backward_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                            const float *w, const mt_conv2d_geom *g);

/* ------------------------------------------------------------------ max pool 2x2, stride 2 */

/*
 * x: (B,H,W,C) -> y: (B,H/2,W/2,C) (floor: a last odd row/column is dropped, as Keras "valid").
 * argmax: (B,H/2,W/2,C) int32 flat index into x of each maximum (first one on ties).
 */
void mt_maxpool2_forward(float *y, int32_t *argmax, const float *x, size_t batch, size_t h,
                         size_t w, size_t c);
void mt_maxpool2_forward_ref(float *y, int32_t *argmax, const float *x, size_t batch, size_t h,
                             size_t w, size_t c);
/* dx: (B,H,W,C) overwritten: zero except dy routed to each argmax. n_out = B*(H/2)*(W/2)*C. */
void mt_maxpool2_backward(float *dx, const float *dy, const int32_t *argmax, size_t n_in,
                          size_t n_out);
void mt_maxpool2_backward_ref(float *dx, const float *dy, const int32_t *argmax, size_t n_in,
                              size_t n_out);

/* ------------------------------------------------------------------ pooling, any window */

/* A pooling window (PH, PW) moved by strides (SH, SW) over (B, H, W, C) without padding:
 * OH = (H - PH) / SH + 1 (Keras "valid"). */
typedef struct mt_pool2d_geom {
    size_t batch, h, w, c;
    size_t ph, pw, sh, sw;
} mt_pool2d_geom;

size_t mt_pool2d_out_h(const mt_pool2d_geom *g);
size_t mt_pool2d_out_w(const mt_pool2d_geom *g);

/* Max pooling: y (B, OH, OW, C), argmax the flat index into x of each maximum (first wins). */
void mt_maxpool_forward(float *y, int32_t *argmax, const float *x, const mt_pool2d_geom *g);
/* dx (B, H, W, C) overwritten: dy summed into each window's argmax (windows may overlap). */
void mt_maxpool_backward(float *dx, const float *dy, const int32_t *argmax,
                         const mt_pool2d_geom *g);
/* Average pooling: each window's mean (summed in double); the backward spreads dy / (PH·PW)
 * over the window, summing where windows overlap. Plain loops: their own reference. */
void mt_avgpool_forward(float *y, const float *x, const mt_pool2d_geom *g);
void mt_avgpool_backward(float *dx, const float *dy, const mt_pool2d_geom *g);

/* ------------------------------------------------------------------ ReLU */

/* y[i] = max(x[i], 0); y may equal x. */
void mt_relu_forward(float *y, const float *x, size_t n);
void mt_relu_forward_ref(float *y, const float *x, size_t n);
/* dx[i] = y[i] > 0 ? dy[i] : 0 (y is the forward output); dx may equal dy. */
void mt_relu_backward(float *dx, const float *dy, const float *y, size_t n);
void mt_relu_backward_ref(float *dx, const float *dy, const float *y, size_t n);

/* ------------------------------------------------------------------ other activations */

/*
 * Element-wise, y may equal x, dx may equal dy. The backward of tanh and sigmoid reads the
 * output y, of leaky_relu the sign of y, of gelu the input x. gelu is the exact form
 * x·Φ(x) = x/2·(1 + erf(x/√2)) (Keras' and PyTorch's default; erf by a float rational approximation
 * within 6.5e-8); leaky_relu has slope `alpha`
 * below zero. Plain loops: they are their own reference.
 */
void mt_gelu_forward(float *y, const float *x, size_t n);
void mt_gelu_backward(float *dx, const float *dy, const float *x, size_t n);
void mt_tanh_forward(float *y, const float *x, size_t n);
void mt_tanh_backward(float *dx, const float *dy, const float *y, size_t n);
void mt_sigmoid_forward(float *y, const float *x, size_t n);
void mt_sigmoid_backward(float *dx, const float *dy, const float *y, size_t n);
void mt_leaky_relu_forward(float *y, const float *x, float alpha, size_t n);
void mt_leaky_relu_backward(float *dx, const float *dy, const float *y, float alpha, size_t n);

/* ------------------------------------------------------------------ softmax cross-entropy */

/*
 * logits: (B, K); labels: (B) in [0, K). Adds to *loss_sum the SUM over examples of
 * -log softmax(logits)[label] (computed stably with the row maximum subtracted, in double) and to
 * *correct the number of rows whose argmax (first on ties) equals the label. When dlogits (B, K)
 * is not NULL it receives (softmax - onehot) * grad_scale; pass 1/global_batch so replica
 * gradients sum to the single-device gradient. INVALID_ARGUMENT (nothing written) when a label is
 * out of range.
 */
mt_code mt_softmax_xent(float *dlogits, double *loss_sum, size_t *correct, const float *logits,
                        const int32_t *labels, size_t batch, size_t k, float grad_scale,
                        mt_err *err);
mt_code mt_softmax_xent_ref(float *dlogits, double *loss_sum, size_t *correct, const float *logits,
                            const int32_t *labels, size_t batch, size_t k, float grad_scale,
                            mt_err *err);

/* ------------------------------------------------------------------ attention */

/* A row s (t wide) into its softmax over [0, n) in place (its maximum subtracted, expf, a float
 * sum in order, a division), zeros from n on (n >= 1). */
void mt_softmax_row(float *s, size_t n, size_t t);

/*
 * Multi-head scaled dot-product attention over fused projections. qkv: (B, T, H·3·hd), each
 * head's columns [q | k | v] side by side (head h at columns [3·hd·h, 3·hd·(h+1))), so a slice of
 * whole heads is a contiguous column range. out: (B, T, H·hd), head h at columns [hd·h, hd·(h+1)).
 * probs: (B, H, T, T), the softmax of q·kᵀ/√hd per head (row i over j ≤ i when causal, zeros
 * above the diagonal), kept for the backward.
 */
void mt_attention_forward(float *out, float *probs, const float *qkv, size_t batch, size_t t,
                          size_t heads, size_t hd, bool causal);
void mt_attention_forward_ref(float *out, float *probs, const float *qkv, size_t batch, size_t t,
                              size_t heads, size_t hd, bool causal);

/*
 * dqkv: (B, T, H·3·hd), overwritten, from dout (B, T, H·hd), the forward's qkv and probs.
 * scratch: t·t floats. causal as in the forward: the fast kernel then skips the products above
 * the diagonal; the reference computes the full sums (p is zero there).
 */
void mt_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *probs, size_t batch, size_t t, size_t heads, size_t hd,
                           bool causal);
void mt_attention_backward_ref(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *probs, size_t batch, size_t t, size_t heads, size_t hd,
                               bool causal);

/* ------------------------------------------------------------------ graph joins */

/* out: (n) = ins[0] + ins[1] + ... + ins[k-1], added in that order (k >= 1). */
void mt_add_forward(float *out, const float *const *ins, int k, size_t n);

/*
 * Concatenate along the last axis: out is (rows, Σ widths[j]); input j is (rows, widths[j]).
 */
void mt_concat_forward(float *out, const float *const *ins, const size_t *widths, int k,
                       size_t rows);

/*
 * dst (rows, w) = src[:, off:off + w] of src (rows, c), or += when add. With w == c and off 0
 * it is a plain copy / sum (a residual's gradient); otherwise a concatenate's slice.
 */
void mt_grad_accumulate(float *dst, const float *src, size_t rows, size_t w, size_t c, size_t off,
                        bool add);

/* ------------------------------------------------------------------ batch norm */
/*
 * Over the batch axis: x is viewed as (N, C) with N = rows (B for dense, B*H*W for NHWC conv).
 * Training with global statistics is four steps, with an allreduce after 1, 2 and 4:
 *   1. mt_bn_sum(x) -> per-feature sums; mean = sum / M (M = global row count)
 *   2. mt_bn_sqdev(x, mean) -> per-feature sums of (x-mean)^2; var = sqdev / M
 *   3. mt_bn_normalize(...) -> y and xhat
 *   4. backward: mt_bn_grad_sums(dy, xhat) -> sums of dy and dy*xhat (= dbeta, dgamma), then
 *      mt_bn_backward_dx with the global sums.
 */

/* The three sums below accumulate in double and round once (the mean of 43k conv rows is within
 * 1e-7 relative of float64, where a float accumulator drifts by 1e-4). */
/* out: (C) = Σ_n x[n, c]. */
void mt_bn_sum(float *out, const float *x, size_t n, size_t c);
/* out: (C) = Σ_n (x[n, c] - mean[c])^2. */
void mt_bn_sqdev(float *out, const float *x, const float *mean, size_t n, size_t c);
/*
 * xhat = (x - mean) / sqrt(var + eps) (xhat may be NULL at inference);
 * y = gamma * xhat + beta (gamma, beta may be NULL: 1 and 0).
 */
void mt_bn_normalize(float *y, float *xhat, const float *x, const float *mean, const float *var,
                     float eps, const float *gamma, const float *beta, size_t n, size_t c);
void mt_bn_normalize_ref(float *y, float *xhat, const float *x, const float *mean, const float *var,
                         float eps, const float *gamma, const float *beta, size_t n, size_t c);
/* sum_dy: (C) = Σ dy; sum_dy_xhat: (C) = Σ dy*xhat. */
void mt_bn_grad_sums(float *sum_dy, float *sum_dy_xhat, const float *dy, const float *xhat,
                     size_t n, size_t c);
/*
 * dx = gamma/sqrt(var+eps) * (dy - sum_dy/M - xhat * sum_dy_xhat/M), the sums global over M
 * rows; gamma may be NULL (1).
 */
void mt_bn_backward_dx(float *dx, const float *dy, const float *xhat, const float *gamma,
                       const float *var, float eps, const float *sum_dy, const float *sum_dy_xhat,
                       size_t m_global, size_t n, size_t c);
void mt_bn_backward_dx_ref(float *dx, const float *dy, const float *xhat, const float *gamma,
                           const float *var, float eps, const float *sum_dy,
                           const float *sum_dy_xhat, size_t m_global, size_t n, size_t c);
/* moving = momentum * moving + (1 - momentum) * batch, element-wise over c features. */
void mt_bn_update_moving(float *moving, const float *batch, float momentum, size_t c);

/* ------------------------------------------------------------------ dropout */

/* y[i] = mask[i] ? x[i] * scale : 0 (scale = 1/(1-rate)); y may equal x. Masks: mt_rng.h. */
void mt_dropout_forward(float *y, const float *x, const uint8_t *mask, float scale, size_t n);
void mt_dropout_forward_ref(float *y, const float *x, const uint8_t *mask, float scale, size_t n);
/* dx[i] = mask[i] ? dy[i] * scale : 0; dx may equal dy. */
void mt_dropout_backward(float *dx, const float *dy, const uint8_t *mask, float scale, size_t n);

/* ------------------------------------------------------------------ flatten */

/*
 * Flatten (B, d1, ..., dk) -> (B, d1*...*dk): row-major NHWC is already in Keras' flatten order,
 * so this returns a view (mt_tensor_reshape). INVALID_ARGUMENT for a non-contiguous or rank-0 t.
 */
mt_code mt_flatten(const mt_tensor *t, mt_tensor *out, mt_err *err);

/* ------------------------------------------------------------------ optimizers */

/* Keras SGD: v = momentum*v - lr*g; w += v (v may be NULL when momentum == 0: w -= lr*g). */
void mt_sgd_update(float *w, float *v, const float *g, float lr, float momentum, size_t n);
/*
 * Keras Adam, step t >= 1: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
 * w -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps).
 */
void mt_adam_update(float *w, float *m, float *v, const float *g, float lr, float beta1,
                    float beta2, float eps, int64_t t, size_t n);
/* mt_adam_update on at most `lanes` SIMD lanes: 8 (AVX when the CPU has it; what mt_adam_update
 * uses), 4 (SSE) or 1 (the scalar loop). The same bits whatever lanes (tests run each). */
void mt_adam_update_lanes(float *w, float *m, float *v, const float *g, float lr, float beta1,
                          float beta2, float eps, int64_t t, size_t n, int lanes);

#endif
