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
 * Status: the engine does not run the mode yet; core/jobspec validates the field with these
 * rules and refuses the mode with UNIMPLEMENTED.
 * Threading: pure functions; any thread.
 */
#ifndef MT_REPRO_H
#define MT_REPRO_H

#include <stdbool.h>
#include <stddef.h>

#include "status/mt_status.h"

#define MT_REPRO_MAX_LEAVES 8

/* L for a global batch of `batch` examples (>= 1): the largest power of two <= 8 dividing it. */
int mt_repro_leaves(size_t batch);

/* Whether a batch dimension of size p keeps the bits for this global batch (p a power of two
 * dividing mt_repro_leaves(batch)). */
bool mt_repro_keeps_bits(size_t batch, int p);

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

#endif
