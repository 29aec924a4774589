/* SPDX-License-Identifier: MIT */
/*
 * mt_repro.h — the reduction leaves of the mesh_invariant mode (issue #18 item 1,
 * docs/reproducibility.md "Mesh-invariant mode"): how a global batch is cut into leaves, which
 * data-parallel sizes keep the bits, and the canonical binary tree that combines leaf results.
 *
 * The global batch of B examples is cut into L leaves, L the largest power of two <= 8 dividing
 * B; leaf i holds examples [i*R, (i+1)*R) of the step's global batch, R = B / L (a short last
 * batch keeps R: its last leaves are short or empty). A batch dimension of size P keeps the bits
 * iff P is a power of two dividing L; device r then owns leaves [r*L/P, (r+1)*L/P).
 *
 * The canonical tree over count leaves (count a power of two): for d = 1, 2, 4, ... < count,
 * leaf[v] = leaf[v] + leaf[v+d] for every v that is a multiple of 2d; the sum is leaf[0]. For P
 * a power of two this is also core/coll's REDUCTION ORDER over P group positions (mt_coll.h),
 * so a device folding its own L/P leaves with mt_repro_tree_fold and an allreduce over the
 * batch dimension (in batch-coordinate order) computes the canonical tree over all L leaves
 * (tests/unit/test_repro.c proves it bit for bit against a serial fold and the real allreduce).
 *
 * Used by core/spmd (leaf split of the batch, the loss per leaf and position leaf, the
 * accumulators it hands the layers in mt_layer_pass, global_clipnorm's exact sum), core/layers
 * (dense, conv2d, batch_norm, layer_norm, embedding, position_embedding, attention) and
 * core/jobspec (validation, elastic ranges). Threading: pure functions, and accumulators used by
 * one thread at a time.
 */
#ifndef MT_REPRO_H
#define MT_REPRO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"
#include "tensor/mt_tensor.h"

#define MT_REPRO_MAX_LEAVES 8

/* L for a global batch of `batch` examples (>= 1): the largest power of two <= 8 dividing it. */
int mt_repro_leaves(size_t batch);

/* Whether a batch dimension of size p keeps the bits for this global batch (p a power of two
 * dividing mt_repro_leaves(batch)). */
bool mt_repro_keeps_bits(size_t batch, int p);

/*
 * An elastic job (core/sched's mt_sched_elastic_batch) may resume on any replica count in
 * [lo, hi] that divides the global batch: INVALID_ARGUMENT unless every one of them keeps the
 * bits, naming those that do not and the sizes that do.
 */
mt_code mt_repro_check_elastic(size_t batch, uint32_t lo, uint32_t hi, mt_err *err);

/* Examples [*start, *start + *len) of leaf `leaf` of a step of n examples (n <= batch) whose
 * full batch is `batch`; a leaf past the end of a short batch is empty (*len 0, *start n). */
void mt_repro_leaf_range(size_t batch, size_t n, int leaf, size_t *start, size_t *len);

/* The canonical tree over leaves[0..count-1] (n floats each; count a power of two, >= 1) in
 * place: the sum ends in leaves[0], the others hold partial sums. */
void mt_repro_tree_fold(float *const *leaves, int count, size_t n);

/*
 * INVALID_ARGUMENT unless a batch dimension of size p keeps the bits for `batch`, with a message
 * naming the sizes that do: `reproducibility: "mesh_invariant" needs the batch dimension's size
 * (3) to be a power of two dividing the 8 leaves of batch_size 32 (sizes that keep the bits: 1,
 * 2, 4, 8)`.
 */
mt_code mt_repro_check_mesh(size_t batch, int p, mt_err *err);

/*
 * A streaming canonical tree: write leaf results in leaf order into mt_repro_acc_slot() and
 * commit each with mt_repro_acc_push(); after `count` pushes (a power of two) the result is the
 * canonical tree over them, bit for bit (a binary counter of complete subtrees, as
 * mt_coll_reference_allreduce does). It holds log2(count) + 1 buffers of n floats, never all
 * leaves.
 */
typedef struct mt_repro_acc {
    float *mem; /* (log2(count) + 1) * cap floats */
    size_t n;   /* floats per leaf of the current tree (<= cap) */
    size_t cap; /* the n given to init */
    int count, pushed, top;
    int size[8]; /* leaves summed in stack entry k */
} mt_repro_acc;

/* RESOURCE_EXHAUSTED when the buffers cannot be allocated; count is a power of two <= 128. A
 * tree of fewer leaves (a power of two) after a reset is the canonical tree over those. */
mt_code mt_repro_acc_init(mt_repro_acc *a, int count, size_t n, mt_err *err);
/* Start a tree again (same count) for leaves of n floats (at most init's n), without freeing: a
 * push adds n floats, so a tree of a few sums costs a few additions, not init's n. */
void mt_repro_acc_reset(mt_repro_acc *a, size_t n);
/* Where the next leaf's n floats are to be written. */
float *mt_repro_acc_slot(mt_repro_acc *a);
/* Commit the leaf written into the slot. */
void mt_repro_acc_push(mt_repro_acc *a);
/* The sum after all count pushes. */
const float *mt_repro_acc_result(const mt_repro_acc *a);
void mt_repro_acc_free(mt_repro_acc *a);

/*
 * The canonical product (repro_gemm.c): c[i*ldc + j] = the canonical tree over `chains` fma chains
 * (chain t: sum over q in [t*k/chains, (t+1)*k/chains) of a(i, q) * b(q, j), fused multiply-adds
 * from 0 in q order) [+ bias[j]], for i < m, j < n; a(i, q) = a[i*ars + q*acs], b(q, j) =
 * b[q*ldb + j]. chains is a power of two <= MT_REPRO_MAX_LEAVES dividing k. Each element is
 * computed by itself: its bits do not depend on m, n, the strides or where the operands lie, nor
 * on the CPU (an AVX2 + FMA path and the portable mt_repro_gemm_ref give the same bits). A
 * contraction split over f devices (each holding chains / f consecutive chains of it) and
 * summed by core/coll's allreduce gives the same bits as the whole contraction.
 */
void mt_repro_gemm(float *c, size_t ldc, const float *a, size_t ars, size_t acs, const float *b,
                   size_t ldb, const float *bias, size_t m, size_t n, size_t k, int chains);
void mt_repro_gemm_ref(float *c, size_t ldc, const float *a, size_t ars, size_t acs, const float *b,
                       size_t ldb, const float *bias, size_t m, size_t n, size_t k, int chains);
/* One chain per element continued from c's value: c[i*ldc + j] = fma chain over q < k of
 * a(i, q) * b(q, j) starting from c[i*ldc + j] (k = 0 leaves c as is). A chain computed in
 * several calls has the bits of one call over all of its terms (a float stored and loaded back
 * changes no bit); both paths (AVX2, portable) give the same bits. */
void mt_repro_gemm_more(float *c, size_t ldc, const float *a, size_t ars, size_t acs,
                        const float *b, size_t ldb, size_t m, size_t n, size_t k);
/* mt_repro_gemm whose chain t's terms are not one run of consecutive q but nrun runs of len
 * consecutive q each, run u from q = t * tstep + u * rstep, fma'd in that order (every q < the
 * operands' extent; mt_repro_gemm is tstep = len = k / chains, nrun = 1). conv2d's K-leaves over
 * the im2col columns in their own order: tstep = len = the leaf's channels, nrun = the taps,
 * rstep = all channels, so neither the columns nor the kernel's rows are permuted. The same
 * bits on both paths (AVX2, portable). */
typedef struct mt_repro_runs {
    size_t tstep, nrun, rstep, len;
} mt_repro_runs;
void mt_repro_gemm_runs(float *c, size_t ldc, const float *a, size_t ars, size_t acs,
                        const float *b, size_t ldb, const float *bias, size_t m, size_t n,
                        const mt_repro_runs *rs, int chains);

/*
 * Height leaves (docs/reproducibility.md, "Height leaves"): a sum over the rows of an image
 * (conv2d's dW and db over its output rows, batch norm's sums, global average pooling's) is cut,
 * within each batch leaf, into Lh = mt_repro_leaves(H) height leaves of H / Lh image rows each
 * (H: the image's global height), each leaf one chain over its examples, then its rows; the
 * height leaves of a batch leaf combine by the canonical tree, whose top is the allreduce over
 * the dim splitting the height into bands (a band count must be a power of two dividing Lh),
 * once per batch leaf; the batch leaves then combine as without bands. lh = Lh / bands leaves
 * on this device, hrows its rows per example (the band's image rows x columns), reduce the
 * bands' allreduce (NULL: none), acc the height leaves' accumulator (any count <= its init's).
 */
typedef struct mt_repro_bands {
    int lh;
    size_t hrows;
    /* Position leaves (sequence parallelism): a device's rows are its two zig-zag blocks of the
     * sequence (mt_layer_seq_blocks: blocks k and 2S-1-k of T/2S positions on seq coordinate k
     * of S), and the canonical order of the Lt = mt_repro_leaves(T) position leaves pairs each
     * leaf of the first half with its mirror (p, Lt-1-p for p = 0, 1, ...), so every device's
     * lh = Lt/S leaves are a run of that order and the allreduce over the seq dim is the top of
     * its tree: local leaf j is leaf j/2 of the first block (j even) or leaf lh/2-1-j/2 of the
     * second (j odd). false: leaf j is rows [j*hrows/lh, (j+1)*hrows/lh) (height leaves). */
    bool zig;
    mt_code (*reduce)(void *ctx, float *buf, size_t n);
    void *ctx;
    struct mt_repro_acc *acc;
} mt_repro_bands;

/* The first row (of an example's hb->hrows) of the device's leaf j (< hb->lh) of hb->hrows /
 * hb->lh rows, in the order above (the loss's position leaves, core/spmd). */
size_t mt_repro_bands_row(const mt_repro_bands *hb, int j);

/* INVALID_ARGUMENT unless `bands` (a dim's size) is a power of two dividing the height leaves of
 * `rows` image rows, naming the layer, the dim and the sizes that keep the bits. */
mt_code mt_repro_check_bands(int layer, const char *name, size_t rows, const char *dim, int bands,
                             mt_err *err);

/* INVALID_ARGUMENT unless `s` (the size of the dim splitting a sequence of `positions` into
 * zig-zag blocks) keeps the bits: a power of two dividing half its position leaves (each block
 * whole leaves; 1 always), naming the input axis, the dim and the sizes that do. */
mt_code mt_repro_check_seq(size_t positions, const char *dim, int s, mt_err *err);

/*
 * The dense layer's kernels (mesh_invariant) on a device's `leaves` leaves of `r` rows each (rows
 * [i*r, (i+1)*r) of x, y, dy, dx; `rows` <= leaves * r rows in all: the leaves past the end of a
 * short batch are short or empty), all through mt_repro_gemm. in and out are the device's widths
 * of the kernel (in, out) it holds.
 * Forward: y = x.w (+ b), the contraction over in in `kl` chains (the K-leaves this device holds:
 * mt_repro_leaves(global in) / the size of the dim splitting it), one call for all rows.
 * Backward: dx = dy.w^T (NULL: skipped) in `jl` chains over out (likewise), wt a scratch of
 * in*out floats (w transposed); dw and db per leaf (a chain over the leaf's rows) summed over the
 * leaves in the canonical tree (accumulators of leaves leaves, in*out and out floats; NULL:
 * skipped), the result copied to dw and db: the device's subtree, for the allreduce over the
 * batch dimension to finish.
 */
void mt_repro_dense_forward(float *y, const float *x, const float *w, const float *b, size_t rows,
                            size_t in, size_t out, int kl);
void mt_repro_dense_backward(float *dx, float *dw, float *db, float *wt, const float *dy,
                             const float *x, const float *w, size_t rows, size_t r, int leaves,
                             size_t in, size_t out, int jl, mt_repro_acc *acc_w,
                             mt_repro_acc *acc_b);

/*
 * INVALID_ARGUMENT unless a kernel axis of `width` elements split over a dim of size f keeps the
 * bits (f a power of two dividing mt_repro_leaves(width)), naming the layer, axis and dim.
 */
mt_code mt_repro_check_split(int layer, const char *name, int axis, size_t width, const char *dim,
                             int f, mt_err *err);

/*
 * Batch norm's sums over rows (core/tensor's mt_bn_sum, mt_bn_sqdev, mt_bn_grad_sums) per leaf of
 * `r` rows (r = examples per leaf x rows per example), folded over the device's `leaves` leaves
 * in the canonical tree: the device's subtree, for the allreduce over the batch dimension. acc
 * holds c floats (sum, sqdev) or 2c (grad_sums: sum_dy then sum_dy_xhat). Also layer norm's
 * gamma and beta gradients (grad_sums) and position_embedding's table gradient (sum: a row per
 * example of T x C).
 */
void mt_repro_bn_sum(float *out, const float *x, size_t rows, size_t r, int leaves, size_t c,
                     mt_repro_acc *acc);
void mt_repro_bn_sqdev(float *out, const float *x, const float *mean, size_t rows, size_t r,
                       int leaves, size_t c, mt_repro_acc *acc);
void mt_repro_bn_grad_sums(float *sum_dy, float *sum_dy_xhat, const float *dy, const float *xhat,
                           size_t rows, size_t r, int leaves, size_t c, mt_repro_acc *acc);

/*
 * Batch norm's sums with height leaves (hb): per batch leaf of r rows and per height leaf, one
 * double sum per feature over the leaf's examples, then its rows, rounded to float; folded as
 * mt_repro_bands says (the bands' allreduce inside, once per batch leaf), then over the
 * device's leaves (acc: the batch leaves' accumulator). y given: out = the sums of x, out2 those
 * of x * y (the backward's dy, dy * xhat); mean given: out = the sums of (x - mean)^2; else out =
 * the sums of x. With one height leaf and no bands, the bits of mt_repro_bn_sum and its kin.
 */
mt_code mt_repro_bn_sums_h(float *out, float *out2, const float *x, const float *y,
                           const float *mean, size_t rows, size_t r, int leaves, size_t c,
                           const mt_repro_bands *hb, mt_repro_acc *acc);

/* Global average pooling's sums: out[b * c + j] = the canonical tree over the lh height leaves of
 * example b (hrows / lh rows each, summed in double in row order and rounded to float) of x's
 * feature j; x holds batch examples of hrows rows of c features. */
void mt_repro_pool_sums(float *out, const float *x, size_t batch, size_t hrows, size_t c, int lh);

/*
 * layer_norm's per-row sums over its features: each row's kl K-leaves (c / kl consecutive
 * features each; c the device's features, kl = mt_repro_leaves(global features) / the size of
 * the dim splitting them) summed in double and rounded to float, folded in the canonical tree (the
 * device's subtree, for the allreduce over that dim). out[r] = the sum over the row of x (sub and
 * h NULL), of (x - sub[r])^2 (sub given), or of g = x * (w ? w[j] : 1) into out and g * h[r, j]
 * into out2 (h given).
 */
void mt_repro_row_sums(float *out, float *out2, const float *x, const float *sub, const float *w,
                       const float *h, size_t rows, size_t c, int kl);

/*
 * embedding's table gradient: per leaf of r rows (token positions), each row's dy (c floats)
 * added to the table row of its id in row order, for the ids in [lo, lo + n) (the rows this
 * device holds), folded in the canonical tree into g (n x c floats; acc holds n x c).
 */
void mt_repro_embedding_grad(float *g, const float *ids, const float *dy, size_t rows, size_t r,
                             int leaves, size_t lo, size_t n, size_t c, mt_repro_acc *acc);

/*
 * A dense head tied to the embedding (its kernel the table used transposed): its backward hands
 * its output gradient dy (rows x n: the table rows [lo, lo + n) this device holds) and input x
 * (rows x c) here, in leaves of r rows, and the table's gradient is built per leaf as the head's
 * dy^T . x (mt_repro_gemm's chain per element over the leaf's rows, from 0), then the
 * embedding's rows added in row order (mt_repro_embedding_grad's), the leaves folded in the
 * canonical tree into g. h NULL: mt_repro_embedding_grad. The head's buffers must live until the
 * embedding's backward (the layer graph keeps every layer's input and output gradient).
 */
typedef struct mt_repro_head {
    const float *dy, *x;
    size_t rows, r;
} mt_repro_head;
void mt_repro_tied_grad(float *g, const mt_repro_head *h, const float *ids, const float *dy,
                        size_t rows, size_t r, int leaves, size_t lo, size_t n, size_t c,
                        mt_repro_acc *acc);
/* The same with position leaves (hb, its zig order; rows = examples x hb->hrows, the head's rows
 * the embedding's): per (batch leaf, position leaf) one chain over the leaf's examples, then its
 * rows (the head's dy^T . x, then the embedding's rows), folded as mt_repro_bands says (the seq
 * allreduce inside, once per batch leaf), then over the batch leaves. h NULL: the embedding
 * alone. With one position leaf and no reduce, the bits of mt_repro_tied_grad. */
mt_code mt_repro_tied_grad_h(float *g, const mt_repro_head *h, const float *ids, const float *dy,
                             size_t rows, size_t r, int leaves, size_t lo, size_t n, size_t c,
                             const mt_repro_bands *hb, mt_repro_acc *acc);

/*
 * conv2d (mesh_invariant): a dense layer over the im2col rows (a row per example and output
 * pixel), so every output element, dw and db element is mt_repro_gemm's own chain and its bits do
 * not depend on how many examples or filters a device holds. The contraction (KH x KW x C) is cut
 * into K-leaves of whole channels: lc = mt_repro_leaves(global C) / the size of the dim splitting
 * the input channels leaves on this device, leaf t = its channels [t*cl, (t+1)*cl) (cl = g->c /
 * lc) at every tap, tap-major, one fma chain each, combined by the canonical tree (the top of
 * which is the channel split's allreduce). The im2col columns and the kernel's rows stay in their
 * own order (tap, then channel): leaf t's chain reads its channels' run at each tap in place
 * (mt_repro_gemm_runs), and dcols and dw come out in that order too.
 * Forward: cols = mt_conv2d_im2col(x) (the device's g->batch examples in one call), y = cols . w
 * (+ b); wp: unused (the kernel's rows were once permuted into it; kept for the callers).
 * Backward: dw and db per leaf of r examples (r x OH x OW rows) folded in the canonical tree (the
 * device's subtree), and dcols = dy . w^T with the contraction over the device's g->f filters in
 * jl chains (mt_repro_leaves(filters) / the size of the dim splitting them; dcols NULL: skipped);
 * scr: a scratch of KH x KW x g->c x g->f floats (w^T). dx = mt_repro_conv2d_col2im(dcols) (lc
 * unused: mt_conv2d_col2im, each pixel's entries summed in row, then tap order) — after a
 * filter split's allreduce has summed dcols (the top of the tree over the filters' chains), not
 * before.
 */
void mt_repro_conv2d_forward(float *y, float *cols, float *wp, const float *x, const float *w,
                             const float *b, const mt_conv2d_geom *g, int lc);
void mt_repro_conv2d_backward(float *dcols, float *dw, float *db, float *scr, const float *dy,
                              const float *cols, const float *w, const mt_conv2d_geom *g, int lc,
                              size_t r, int leaves, int jl, mt_repro_acc *acc_w,
                              mt_repro_acc *acc_b);
void mt_repro_conv2d_col2im(float *dx, const float *dcols, const mt_conv2d_geom *g, int lc);

/* dcols (rows x KH KW C, im2col's order) = dy (rows x the device's g->f filters) . w^T, the
 * contraction in jl chains; scr as for mt_repro_conv2d_backward. */
void mt_repro_conv2d_dcols(float *dcols, float *scr, const float *dy, const float *w,
                           const mt_conv2d_geom *g, int lc, size_t rows, int jl);

/* dw and db as mt_repro_conv2d_backward computes them, with height leaves (hb: the output rows'
 * leaves, hb->hrows = the device's output rows x columns per example; NULL: one chain per batch
 * leaf, the bits of mt_repro_conv2d_backward). The bands' allreduce runs inside. scr, lc: unused
 * (dw's rows are the kernel's, as cols' columns are im2col's). */
mt_code mt_repro_conv2d_wgrad(float *dw, float *db, float *scr, const float *dy, const float *cols,
                              const mt_conv2d_geom *g, int lc, size_t r, int leaves,
                              const mt_repro_bands *hb, mt_repro_acc *acc_w, mt_repro_acc *acc_b);

/*
 * Height bands: the col2im of the input rows a band holds, each pixel's entries summed in the
 * order of the whole image's col2im (output row, column, tap), so a band's dx has the bits of the
 * same rows on one device. g: the whole image's geometry (its height, padding) for the device's
 * g->batch examples; dcols holds rw->heo output rows per example from global output row rw->go
 * (dy's rows gathered from the neighbours, times w^T: mt_repro_conv2d_dcols); dx the input rows
 * [rw->y0, rw->y0 + rw->hb) of each example (overwritten).
 */
typedef struct mt_repro_rows {
    size_t go, heo, y0, hb;
} mt_repro_rows;
void mt_repro_conv2d_col2im_band(float *dx, const float *dcols, const mt_conv2d_geom *g, int lc,
                                 const mt_repro_rows *rw);

/*
 * global_clipnorm under mesh_invariant: the exact sum of squares of float32 values, so the norm
 * depends on neither the order, nor how the tensors are split, nor on which device holds what.
 * Each square (exact: a 24-bit significand squared) is added into a 640-bit fixed-point integer
 * (least significant bit 2^-298, the square of the smallest subnormal float; room for 2^64
 * squares of the largest float), which integer addition makes independent of the order.
 * Across devices: mt_repro_sumsq_pack writes the integer as 54 floats of 12 bits each (plus the
 * NaN and infinity counts); an allreduce of those sums exact integers below 2^24 in any order for
 * up to 4096 devices; mt_repro_sumsq_unpack turns the sums back into the integer and rounds it
 * to a double (NaN if any value was NaN, else infinity if any was infinite). Each logical element
 * must be added on exactly one device.
 */
#define MT_REPRO_SUMSQ_LIMBS  10
#define MT_REPRO_SUMSQ_FLOATS 56

typedef struct mt_repro_sumsq {
    uint64_t limb[MT_REPRO_SUMSQ_LIMBS]; /* little-endian limbs of the fixed-point sum */
    uint64_t nan, inf;                   /* non-finite values seen */
} mt_repro_sumsq;

void mt_repro_sumsq_init(mt_repro_sumsq *s);
void mt_repro_sumsq_add(mt_repro_sumsq *s, const float *x, size_t n);
void mt_repro_sumsq_pack(const mt_repro_sumsq *s, float out[MT_REPRO_SUMSQ_FLOATS]);
double mt_repro_sumsq_unpack(const float in[MT_REPRO_SUMSQ_FLOATS]);

/*
 * Attention under mesh_invariant (repro_attn.c; docs/reproducibility.md, "Attention"): the
 * heads of one device's query rows, whose bits depend neither on how the rows are grouped into
 * calls nor on how the sequence is split over a seq dim. The device holds rl rows of each
 * example: nb (1 or 2) blocks of rl / nb consecutive positions from start[0], start[1]
 * (mt_layer_seq_blocks; without a seq split one block at 0, rl = t), of t positions in all;
 * heads (the device's) of hd features each. qkv (borrowed): (batch, t, 3 heads hd), every
 * position's fused query, key and value at its position (the rows gathered over seq).
 * lh: the device's position leaves, mt_repro_leaves(t) / S (S the seq dim's size, a power of two
 * dividing half the leaves: mt_repro_check_seq); zig: the canonical order of mt_repro_bands.zig
 * (false: the device's rows in local order, which gives other bits on another S: tests only).
 */
typedef struct mt_repro_attn {
    size_t batch, t, rl, heads, hd;
    size_t nb, start[2];
    bool causal, zig;
    int lh;
} mt_repro_attn;

/* Floats of the scratch mt_repro_attn_forward and _backward use: hd x t (a transposed key or
 * value), rl x t (the rows' score gradients) and lh x t x 2 hd (the position leaves' dK | dV). */
size_t mt_repro_attn_scratch(const mt_repro_attn *a);

/*
 * Forward: out (batch, rl, heads hd) and probs (batch, heads, rl, t), written. Score (i, j) = the
 * fma chain over the head's features of q_i . k_j (mt_repro_gemm, one chain), times 1 / sqrt(hd);
 * row i's softmax over its keys j < nk_i (nk_i = position + 1 when causal, else t; a max, then
 * expf and a sum in key order, then a division), zeros beyond; out_i = the fma chain from 0 over
 * exactly the keys 0 .. nk_i - 1 in order of p_ij v_j (calls of many rows continued per row with
 * mt_repro_gemm_more, so the key count of a causal row is its own). All row-local: the bits of a
 * row are those of the same row on any mesh. scr: mt_repro_attn_scratch floats.
 */
void mt_repro_attn_forward(const mt_repro_attn *a, float *out, float *probs, const float *qkv,
                           float *scr);

/*
 * Backward: dqkv (batch, t, 3 heads hd), overwritten, from dout (batch, rl, heads hd), qkv and the
 * forward's probs. Row-local: ds_ij = p_ij (dp_ij - sum_j' dp_ij' p_ij') / sqrt(hd), dp_ij the fma
 * chain over the features of dout_i . v_j, zeros beyond nk_i; the query gradient of the device's
 * rows dq_i = the fma chain over keys 0 .. nk_i - 1 of ds_ij k_j. The other positions' query
 * columns are -0.0f, which adds nothing to any float (also to -0.0f) in the reduce-scatter.
 * Key and value gradients (sums over the query rows: per-example activations' gradients, not
 * parameters, so only position leaves, no batch leaves): per position leaf (Lt =
 * mt_repro_leaves(t) leaves of t / Lt positions), dk_j = the fma chain from 0 over the leaf's rows
 * in order of ds_ij q_i and dv_j = that of p_ij dout_i, for keys j up to the leaf's last position
 * when causal (later keys: +0) or all; the device's lh leaves (zig order) folded in the canonical
 * tree into every position's key and value columns: the device's subtree. A reduce-scatter over
 * the seq dim in seq-coordinate order (core/coll's tree for a power-of-two group) is the top of
 * the tree over all Lt leaves: the bits of one device. scr: mt_repro_attn_scratch floats.
 */
void mt_repro_attn_backward(const mt_repro_attn *a, float *dqkv, const float *dout,
                            const float *qkv, const float *probs, float *scr);

#endif
