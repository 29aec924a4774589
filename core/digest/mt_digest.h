/* SPDX-License-Identifier: MIT */
/*
 * mt_digest.h — a digest of LOGICAL (global, unsharded) tensors that does not depend on how they
 * are sharded: SHA-256 over fixed blocks keyed by global offset, blocks combined in a Merkle
 * tree, tensors combined in name order. Anyone can recompute a root from a safetensors file with
 * a few lines of Python's hashlib (docs/reproducibility.md has them; tests/integration/
 * test_digest.sh checks them against this code).
 *
 * Who calls it: core/ckpt (each tensor's root, recorded in every checkpoint and safetensors
 * export), core/spmd (mt_spmd_digest of the state on a mesh; the restore check), `meshtrain
 * digest`. SHA-256 comes from sha_x86.c: the x86 SHA extensions when the CPU has them, else
 * mbed TLS (digest_int.h).
 *
 * FORMAT (version "mt-merkle-sha256-v1"; H = SHA-256, integers little-endian, || = concatenation):
 *   block k of a tensor = elements [k·B, (k+1)·B) of its global row-major (C order) data, as the
 *            raw little-endian bytes a checkpoint or safetensors file stores; B = MT_DIGEST_BLOCK
 *            elements; the last block may be shorter; a tensor of 0 elements has one empty block.
 *   leaf k   = H(0x00 || u64 k || block k bytes)
 *   tree     = the leaves in order; while more than one node: pair neighbours,
 *            node = H(0x01 || left || right), an odd last node goes up unchanged.
 *   tensor   = H(0x02 || u16 len(name) || name || u8 len(dtype) || dtype || u8 rank ||
 *            u64 shape[0] .. u64 shape[rank-1] || tree root), dtype the safetensors name ("F32").
 *   root     = H(0x03 || u32 count || tensor digests in ascending byte order of their names).
 * The prefixes 0x00..0x03 keep a leaf from passing for a node (second-preimage domain split).
 *
 * DESIGN: why blocks of the global order, gathered across shards. A block is a fixed run of the
 * global row-major order, so its bytes — and the whole tree — are the same whatever the layout.
 * Shards DO cut blocks (a split of any axis but the first cuts every row into pieces), and
 * SHA-256 of a block cannot be assembled from hashes of its pieces, so the caller hands every
 * shard it holds (mt_digest_shard) and each block is gathered from them into one block-sized
 * buffer before hashing: no device and no process needs a whole tensor, memory is one block. A
 * block element that no shard in hand holds (a shard living in another process) comes from the
 * caller's fill function (the restore check reads it from the file), else the call fails. Blocks
 * that lie inside one shard (a split of the first axis, the FSDP layouts, a whole tensor) are
 * hashed in place without a copy.
 *
 * Threading: pure functions over caller memory; any thread. Blocks only in the fill callback.
 * Tests: tests/unit/test_digest.c (shard independence over 1/2/4-way splits of every axis,
 * known vectors), tests/integration/test_digest.sh (the Python of the docs against the C).
 */
#ifndef MT_DIGEST_H
#define MT_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

#define MT_DIGEST_SIZE     32   /* bytes of a SHA-256 digest */
#define MT_DIGEST_HEX      65   /* hex digits + NUL */
#define MT_DIGEST_BLOCK    4096 /* elements per leaf block */
#define MT_DIGEST_MAX_RANK 8
#define MT_DIGEST_FORMAT   "mt-merkle-sha256-v1"

/* A digest, by value. */
typedef struct mt_digest {
    uint8_t b[MT_DIGEST_SIZE];
} mt_digest;

/*
 * One shard of a tensor (all borrowed): local_shape[rank] elements at offsets[rank] of the global
 * tensor, row-major in data. Shards may overlap (replicas hold equal values; the first shard in
 * the array that holds an element is the one read).
 */
typedef struct mt_digest_shard {
    const void *data;
    const int64_t *offsets;
    const int64_t *local_shape;
} mt_digest_shard;

/*
 * Fill elements [first, first + count) of the global row-major order into out (count × element
 * size bytes) for elements no shard holds. Returns MT_OK or a code with err set.
 */
typedef mt_code (*mt_digest_fill_fn)(void *ctx, uint64_t first, uint64_t count, void *out,
                                     mt_err *err);

/* Description of a tensor (all borrowed). dtype: the safetensors name ("F32", "I64"). */
typedef struct mt_digest_tensor_desc {
    const char *name;
    const char *dtype;
    size_t elem_size; /* bytes per element, 1..8 */
    int rank;         /* 0..MT_DIGEST_MAX_RANK; 0 is a scalar of one element */
    const int64_t *shape;
} mt_digest_tensor_desc;

/*
 * The tensor digest of t from n shards (borrowed; n >= 0) and, for elements none of them holds,
 * fill (may be NULL). Blocks only inside fill. Codes: MT_INVALID_ARGUMENT (empty or over-long
 * name or dtype, element size or rank out of range, negative dimension, a shard outside the
 * tensor), MT_FAILED_PRECONDITION ("tensor 'x': no shard holds element 40" when fill is NULL),
 * fill's codes, MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_digest_tensor(const mt_digest_tensor_desc *t, const mt_digest_shard *shards, int n,
                         mt_digest_fill_fn fill, void *fill_ctx, mt_digest *out, mt_err *err);

/*
 * Split form of mt_digest_tensor, for hashing one tensor's leaves in several places (replicas
 * each taking a share, core/spmd's mt_spmd_digest_world): mt_digest_leaf_count gives t's number
 * of leaves (1 for 0 elements); mt_digest_leaves hashes leaves [first, first + nleaves) from the
 * shards and fill exactly as mt_digest_tensor would, into out[0..nleaves); and
 * mt_digest_tensor_from_leaves builds the tree and the tensor digest from all of them, in order.
 * The result is mt_digest_tensor's, bit for bit. Codes: mt_digest_tensor's; MT_INVALID_ARGUMENT
 * for a leaf range outside the tensor or a leaf count that is not t's.
 */
mt_code mt_digest_leaf_count(const mt_digest_tensor_desc *t, uint64_t *out, mt_err *err);
mt_code mt_digest_leaves(const mt_digest_tensor_desc *t, const mt_digest_shard *shards, int n,
                         mt_digest_fill_fn fill, void *fill_ctx, uint64_t first, uint64_t nleaves,
                         mt_digest *out, mt_err *err);
mt_code mt_digest_tensor_from_leaves(const mt_digest_tensor_desc *t, const mt_digest *leaves,
                                     uint64_t nleaves, mt_digest *out, mt_err *err);

/* mt_digest_tensor of a whole tensor in one contiguous buffer (data borrowed). Codes as it. */
mt_code mt_digest_tensor_whole(const mt_digest_tensor_desc *t, const void *data, mt_digest *out,
                               mt_err *err);

/*
 * The root over n tensors: names[i] (borrowed) and their tensor digests tensors[i], in any order
 * (sorted here by the bytes of the names). n may be 0. Codes: MT_INVALID_ARGUMENT (a name
 * repeated, n < 0), MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_digest_root(const char *const *names, const mt_digest *tensors, int n, mt_digest *out,
                       mt_err *err);

/* Lower-case hex of d into hex (MT_DIGEST_HEX bytes, NUL-terminated); returns hex. */
char *mt_digest_hex(const mt_digest *d, char *hex);

/* Parse 64 hex digits (either case, nothing else). Codes: MT_INVALID_ARGUMENT. */
mt_code mt_digest_parse_hex(const char *hex, mt_digest *out, mt_err *err);

/* Whether a and b are the same digest. */
int mt_digest_equal(const mt_digest *a, const mt_digest *b);

#endif
