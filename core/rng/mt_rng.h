/* SPDX-License-Identifier: MIT */
/*
 * mt_rng.h — counter-based random numbers (Philox4x32-10) for weight initialisation, dropout
 * masks and shuffling.
 *
 * Role: every random value is a pure function of (seed, stream, counter), so any device can
 * compute any element of any tensor on its own: a device creates its SHARD of a weight
 * bit-identical to the same slice of the full tensor, and a dropout mask depends on the GLOBAL
 * example index, not on how the batch is split across replicas. Called by core/model (init,
 * dropout) and core/train (shuffle). No state, no globals.
 * Streams: a tensor's stream is mt_rng_name_id(parameter name), so ids are stable across runs and
 * processes. Threading: pure functions, any thread. Tests: tests/unit/test_rng.c.
 */
#ifndef MT_RNG_H
#define MT_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

/* Philox4x32-10: four 32-bit outputs for a 128-bit counter ctr[4] and a 64-bit key. */
void mt_rng_philox(uint32_t out[4], const uint32_t ctr[4], uint64_t key);

/* Stable 32-bit id of a name (FNV-1a), used as the stream of a named tensor. */
uint32_t mt_rng_name_id(const char *name);

/* Uniform float in [0, 1) for element `index` of stream `stream` under `seed` (24-bit mantissa). */
float mt_rng_uniform(uint64_t seed, uint32_t stream, uint64_t index);

/*
 * Keras Glorot-uniform limit sqrt(6 / (fan_in + fan_out)) for a kernel of the given global shape:
 * rank 2 (in, out): fan_in = in, fan_out = out; rank 4 conv (KH, KW, C, F): receptive field
 * KH*KW times C and F; rank 1: fan_in = fan_out = n.
 */
float mt_rng_glorot_limit(int rank, const size_t *global_shape);

/*
 * Fill the shard [offsets, offsets + local_shape) of a tensor of `global_shape` (row-major) with
 * Glorot-uniform values: element with global linear index i gets
 * limit * (2 * mt_rng_uniform(seed, stream, i) - 1). `out` (product of local_shape floats) is
 * borrowed and written contiguously. INVALID_ARGUMENT if the shard exceeds the global shape or the
 * rank is not 1..4.
 */
mt_code mt_rng_glorot_fill(float *out, uint64_t seed, uint32_t stream, int rank,
                           const size_t *global_shape, const size_t *offsets,
                           const size_t *local_shape, mt_err *err);
/* The same with a given limit (uniform in [-limit, limit)). */
mt_code mt_rng_uniform_fill(float *out, uint64_t seed, uint32_t stream, float limit, int rank,
                            const size_t *global_shape, const size_t *offsets,
                            const size_t *local_shape, mt_err *err);

/*
 * Dropout keep-mask for examples [first_example, first_example + n_examples) of one step, each
 * example having `per_example` elements: mask[e*per_example + j] = 1 with probability 1 - rate,
 * keyed by (seed, step, layer, global example index, j) only.
 */
void mt_rng_dropout_mask(uint8_t *mask, uint64_t seed, uint64_t step, uint32_t layer,
                         uint64_t first_example, size_t n_examples, size_t per_example, float rate);

/* A permutation of 0..n-1 (Fisher-Yates driven by (seed, epoch)); perm (n entries) borrowed. */
void mt_rng_permutation(uint32_t *perm, size_t n, uint64_t seed, uint64_t epoch);

#endif
