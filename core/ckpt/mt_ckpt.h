/* SPDX-License-Identifier: MIT */
/*
 * mt_ckpt.h — mesh-independent checkpoints: every tensor in its GLOBAL shape
 * (weights and optimizer slots), the training position (step, epoch, input
 * position) and the job spec, in one self-checking file (.mtc).
 *
 * Who calls it: the engine's checkpoint hook (writer; it assembles each global
 * tensor from the shards of the devices, or adds it whole), restore on any mesh
 * (reader; each device reads just its shard with mt_ckpt_read_slice), retention
 * in a checkpoint directory, and `meshtrain export` (safetensors, as stored or
 * converted by a plan: mt_ckpt_export_safetensors_map).
 *
 * Format (byte by byte in docs/checkpoints.md): a 24-byte preamble (magic
 * "MTCKPT1\n", version 2, header length, header crc32, preamble crc32), a header
 * (step, epoch, input position, data length, job spec, and per tensor: name,
 * dtype, shape, offset, byte length, crc32, and the tensor's 32-byte Merkle digest
 * of core/digest — absent in version 1 files, which are still read), zero padding to 64 bytes, then
 * the raw little-endian tensor data, each tensor 64-byte aligned, in header order. Every integer is
 * little-endian. Checksums are zlib's crc32.
 *
 * Naming: optimizer state is stored as "<param>/<slot>" (e.g.
 * "dense_1.kernel/adam_m"); a name without '/' is a weight. The safetensors
 * export keeps the weights only.
 *
 * Durability: the writer fills an anonymous temporary file, and commit writes
 * "<path>.tmp.XXXXXX" in the same directory, fsyncs it, renames it over <path>
 * and fsyncs the directory, so <path> is either the old file or the complete
 * new one, never a torn one.
 *
 * Integrity: mt_ckpt_open verifies the preamble, the header checksum, the
 * layout and every tensor's checksum before returning, so a corrupted or
 * truncated file is refused (MT_DATA_LOSS) with a message naming the tensor,
 * or "header" when the damage is in the preamble or header.
 *
 * Threading: a writer or reader belongs to one thread at a time; after open, a
 * reader's read functions may be called from several threads concurrently
 * (they use pread, never a shared file offset). All functions block on disk I/O.
 * Tests: tests/unit/test_ckpt.c, tests/integration/test_export.sh;
 * fuzz: tests/fuzz/fuzz_ckpt.c.
 */
#ifndef MT_CKPT_H
#define MT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "digest/mt_digest.h"
#include "status/mt_status.h"

#define MT_CKPT_MAX_RANK 8
#define MT_CKPT_MAX_NAME 1024 /* bytes of a tensor name, NUL excluded */
#define MT_CKPT_ALIGN    64   /* alignment of every tensor's data in the file */
/*
 * A U8 tensor named MT_CKPT_META_PREFIX "<key>" holds text metadata that travels with the model
 * (e.g. "meta/meshtrain.tokenizer", the vocabulary of a language model, core/text). It is not
 * model state: mt_ckpt_root leaves it out (so the state root stays the trainer's digest),
 * restores never look for it, and both safetensors exports copy it into "__metadata__" as
 * "<key>" (a string; a NUL byte or another dtype refuses the export).
 */
#define MT_CKPT_META_PREFIX "meta/"

typedef enum mt_ckpt_dtype {
    MT_CKPT_F32 = 1,
    MT_CKPT_F64 = 2,
    MT_CKPT_I32 = 3,
    MT_CKPT_I64 = 4,
    MT_CKPT_U8 = 5,
} mt_ckpt_dtype;

/* Bytes per element (4 for F32); 0 for an unknown dtype. */
size_t mt_ckpt_dtype_size(mt_ckpt_dtype dtype);
/* Safetensors name ("F32"); "?" for an unknown dtype. Static string. */
const char *mt_ckpt_dtype_name(mt_ckpt_dtype dtype);

/* ------------------------------------------------------------------ writer */

typedef struct mt_ckpt_writer mt_ckpt_writer;

/*
 * Start a checkpoint that commit will write to `path` (borrowed, copied). Creates
 * an anonymous temporary file in path's directory; nothing appears at path yet.
 * On success *out is a writer the caller must end with mt_ckpt_writer_commit or
 * mt_ckpt_writer_abort; on failure *out = NULL.
 * Codes: MT_NOT_FOUND / MT_PERMISSION_DENIED / MT_INTERNAL (the directory cannot
 * hold a file; message has strerror), MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_ckpt_writer_open(const char *path, mt_ckpt_writer **out, mt_err *err);

/* Training position, stored opaque (defaults 0). */
void mt_ckpt_writer_set_position(mt_ckpt_writer *w, uint64_t step, uint64_t epoch,
                                 uint64_t input_position);

/* The job spec JSON text (borrowed, copied; NULL clears). Codes: MT_RESOURCE_EXHAUSTED. */
mt_code mt_ckpt_writer_set_spec(mt_ckpt_writer *w, const char *spec_json, mt_err *err);

/*
 * Add a whole tensor: name (borrowed, copied), dtype, global shape[rank] (borrowed),
 * data (borrowed; product(shape) elements, row-major, host = little-endian order).
 * Codes: MT_INVALID_ARGUMENT (empty or too long name, unknown dtype, rank > MAX,
 * negative dimension), MT_ALREADY_EXISTS (name already added),
 * MT_FAILED_PRECONDITION (a tensor begun with _begin is not ended),
 * MT_RESOURCE_EXHAUSTED, MT_INTERNAL (write error).
 */
mt_code mt_ckpt_writer_add(mt_ckpt_writer *w, const char *name, mt_ckpt_dtype dtype,
                           const int64_t *shape, int rank, const void *data, mt_err *err);

/*
 * Assemble a tensor from shards: _begin declares it (arguments and codes as
 * _add, without data), _put_slice copies one shard (local_shape[rank] elements
 * at offsets[rank] of the global tensor; data borrowed) and may be called in any
 * order, replicas may write the same slice again; _end checks that every element
 * was written and appends the tensor.
 * _put_slice codes: MT_FAILED_PRECONDITION (no tensor begun), MT_OUT_OF_RANGE
 * (slice outside the global shape). _end codes: MT_FAILED_PRECONDITION (no
 * tensor begun; "tensor 'x': shards cover 30 of 40 elements"), MT_INTERNAL.
 * After a failed _end the tensor is dropped.
 */
mt_code mt_ckpt_writer_begin(mt_ckpt_writer *w, const char *name, mt_ckpt_dtype dtype,
                             const int64_t *shape, int rank, mt_err *err);
mt_code mt_ckpt_writer_put_slice(mt_ckpt_writer *w, const int64_t *offsets,
                                 const int64_t *local_shape, const void *data, mt_err *err);
mt_code mt_ckpt_writer_end(mt_ckpt_writer *w, mt_err *err);

/*
 * Write the file durably (temp name, fsync, rename, fsync of the directory) and
 * release the writer. The writer is released whatever the outcome (as fclose);
 * on failure the previous file at path, if any, is untouched and no temporary
 * file is left — except when only the final fsync of the directory fails: the
 * new file is then in place but its rename may not survive a power loss.
 * Codes: MT_FAILED_PRECONDITION (a tensor is begun but not ended),
 * MT_PERMISSION_DENIED / MT_NOT_FOUND / MT_INTERNAL (I/O, with strerror),
 * MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_ckpt_writer_commit(mt_ckpt_writer *w, mt_err *err);

/* Discard the checkpoint and release the writer. NULL is a no-op. */
void mt_ckpt_writer_abort(mt_ckpt_writer *w);

/* ------------------------------------------------------------------ reader */

typedef struct mt_ckpt mt_ckpt;

/* Description of one tensor; `name` is borrowed from the reader (valid until close). */
typedef struct mt_ckpt_tensor_info {
    const char *name;
    mt_ckpt_dtype dtype;
    int rank;
    int64_t shape[MT_CKPT_MAX_RANK];
    uint64_t nbytes;
    bool has_digest;  /* format version 2: the writer recorded the tensor's digest */
    mt_digest digest; /* core/digest tensor digest of the data, as recorded */
} mt_ckpt_tensor_info;

/*
 * Open and fully verify the checkpoint at path (borrowed). Reads the whole file
 * once (checksums) but keeps only the header in memory; tensor data is read on
 * demand. On success *out is a reader the caller closes with mt_ckpt_close.
 * Codes: MT_NOT_FOUND (no such file), MT_PERMISSION_DENIED, MT_INVALID_ARGUMENT
 * (not a meshtrain checkpoint: bad magic), MT_FAILED_PRECONDITION (unsupported
 * version), MT_DATA_LOSS (corrupt or truncated: "checkpoint F: tensor
 * 'dense_1.kernel': checksum mismatch ..." or "checkpoint F: header: ..."),
 * MT_RESOURCE_EXHAUSTED, MT_INTERNAL (read error).
 */
mt_code mt_ckpt_open(const char *path, mt_ckpt **out, mt_err *err);

/*
 * The same over a memory image (borrowed: data must outlive the reader; it is not
 * copied). The fuzz target's entry point. Codes as mt_ckpt_open.
 */
mt_code mt_ckpt_open_mem(const void *data, size_t len, mt_ckpt **out, mt_err *err);

/* Release a reader (closes its file). NULL is a no-op. */
void mt_ckpt_close(mt_ckpt *ck);

uint64_t mt_ckpt_step(const mt_ckpt *ck);
uint64_t mt_ckpt_epoch(const mt_ckpt *ck);
uint64_t mt_ckpt_input_position(const mt_ckpt *ck);
/* The job spec text ("" when none was stored), borrowed until close. */
const char *mt_ckpt_spec(const mt_ckpt *ck);

/* Number of tensors. */
int mt_ckpt_count(const mt_ckpt *ck);
/* Info of tensor i (header order). Codes: MT_OUT_OF_RANGE. */
mt_code mt_ckpt_tensor_at(const mt_ckpt *ck, int i, mt_ckpt_tensor_info *out, mt_err *err);
/* Info of the tensor called name. Codes: MT_NOT_FOUND. */
mt_code mt_ckpt_find(const mt_ckpt *ck, const char *name, mt_ckpt_tensor_info *out, mt_err *err);

/*
 * Read a whole tensor into out (caller buffer of out_size bytes, >= its nbytes).
 * Codes: MT_NOT_FOUND, MT_INVALID_ARGUMENT (buffer too small), MT_DATA_LOSS /
 * MT_INTERNAL (the file changed or cannot be read since open).
 */
mt_code mt_ckpt_read(const mt_ckpt *ck, const char *name, void *out, size_t out_size, mt_err *err);

/*
 * Read the slice [offsets[i], offsets[i] + local_shape[i]) of tensor name into out
 * (caller buffer of product(local_shape) elements, row-major): what one device
 * needs when restoring onto any mesh and layout (offsets and local_shape come
 * from mt_layout_shard). Never reads the whole file: from a file, a strided slice
 * is read as the span from its first to its last element in one pread (when that
 * span is at most 64 MiB, else one pread per contiguous run) and gathered.
 * Codes: MT_NOT_FOUND, MT_OUT_OF_RANGE (slice outside the tensor: names tensor,
 * axis and sizes), MT_DATA_LOSS / MT_INTERNAL (read error).
 */
mt_code mt_ckpt_read_slice(const mt_ckpt *ck, const char *name, const int64_t *offsets,
                           const int64_t *local_shape, void *out, mt_err *err);

/*
 * Read elements [first, first + count) of tensor name's global row-major order into out
 * (count × element size bytes, caller memory): the file part of a digest check.
 * Codes: MT_NOT_FOUND, MT_OUT_OF_RANGE (the range leaves the tensor), MT_DATA_LOSS / MT_INTERNAL.
 */
mt_code mt_ckpt_read_elems(const mt_ckpt *ck, const char *name, uint64_t first, uint64_t count,
                           void *out, mt_err *err);

/* The mt_digest_fill_fn of a checkpoint tensor: ctx is an mt_ckpt_fill_ctx (borrowed); reads
 * with mt_ckpt_read_elems. Lets a digest take what no local shard holds from the file. */
typedef struct mt_ckpt_fill_ctx {
    const mt_ckpt *ck;
    const char *name;
} mt_ckpt_fill_ctx;
mt_code mt_ckpt_digest_fill(void *ctx, uint64_t first, uint64_t count, void *out, mt_err *err);

/* Recompute the core/digest tensor digest of tensor name from its data in the file (reads it). */
mt_code mt_ckpt_compute_digest(const mt_ckpt *ck, const char *name, mt_digest *out, mt_err *err);

/*
 * The Merkle root (mt_digest_root) of the weights (weights_only: names without '/', what a
 * safetensors export holds) or of every tensor but the meta/ texts (the state: weights,
 * optimizer slots, iterations),
 * from the recorded tensor digests, or recomputed from the data (recompute; each one also checked
 * against the recorded digest when there is one). *count (may be NULL) = tensors in it.
 * Codes: MT_FAILED_PRECONDITION (a version 1 file without recompute: no digests recorded),
 * MT_DATA_LOSS ("checkpoint F: tensor 'x': Merkle digest of the data ... differs from the
 * recorded ..."), read codes, MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_ckpt_root(const mt_ckpt *ck, bool weights_only, bool recompute, mt_digest *out,
                     int *count, mt_err *err);

/*
 * The Merkle root of the tensors of the safetensors file at path (borrowed; any file, not only
 * ours: dtypes F64/F32/F16/BF16/I64/I32/I16/I8/U64/U32/U16/U8/BOOL/F8_*), recomputed from its
 * data; *count (may be NULL) = tensors; *has_recorded = the file's "__metadata__" has an
 * "mt_digest" (a meshtrain export), which must then equal the root. Reads the file once.
 * Codes: MT_NOT_FOUND / MT_PERMISSION_DENIED (open), MT_INVALID_ARGUMENT (not safetensors, an
 * unsupported entry), MT_DATA_LOSS (data_offsets outside the file; "F: the data's Merkle root ...
 * differs from the recorded ..."; *root is then the recomputed one), MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_ckpt_safetensors_digest(const char *path, mt_digest *root, int *count,
                                   bool *has_recorded, mt_err *err);

/*
 * Write the weights (tensors whose name has no '/') to `path` (borrowed) in the
 * safetensors format: u64 little-endian header length N, N bytes of JSON
 * {"__metadata__": {...}, "name": {"dtype": "F32", "shape": [...],
 * "data_offsets": [b, e]}, ...} padded with spaces to a multiple of 8, then the
 * raw little-endian data, tensors back to back in checkpoint order. Written to a
 * temporary name, fsynced and renamed. Metadata: producer, step, epoch, "mt_digest" (the hex
 * Merkle root of the tensors in the file, core/digest; equal to mt_ckpt_root(weights_only) of the
 * checkpoint), "mt_digest_format" (MT_DIGEST_FORMAT) and every MT_CKPT_META_PREFIX text
 * tensor as "<key>": "<text>" (INVALID_ARGUMENT when one is not U8 text).
 * Codes: MT_FAILED_PRECONDITION (no weight to export), I/O codes as commit,
 * MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_ckpt_export_safetensors(const mt_ckpt *ck, const char *path, mt_err *err);

/*
 * One tensor of a converted export (mt_ckpt_export_safetensors_map): output tensor `name`
 * (F32, shape[rank]) made from checkpoint weight `source` viewed as view_shape[view_rank] (the
 * same elements, row-major) with its axes permuted: output axis k is view axis perm[k], as
 * numpy's transpose(perm) followed by a reshape to `shape`. view_rank 0 copies the source
 * as is (reshaped to `shape`). source NULL: every element is `fill` (a parameter the
 * checkpoint does not hold, e.g. a batch-norm scale of ones). Borrowed by the call.
 */
typedef struct mt_ckpt_export_tensor {
    char name[MT_CKPT_MAX_NAME + 1];
    const char *source; /* checkpoint weight (F32), or NULL for a constant */
    float fill;         /* the constant when source is NULL */
    int rank;           /* output shape, 0..MT_CKPT_MAX_RANK */
    int64_t shape[MT_CKPT_MAX_RANK];
    int view_rank;                        /* 0: no permutation */
    int64_t view_shape[MT_CKPT_MAX_RANK]; /* the source seen as this shape */
    int perm[MT_CKPT_MAX_RANK];           /* output axis k = view axis perm[k] */
} mt_ckpt_export_tensor;

/*
 * Write the n tensors of `plan` (borrowed, in that order) to `path` (borrowed) as safetensors,
 * like mt_ckpt_export_safetensors but renamed, reshaped and permuted as each entry says (used
 * by `meshtrain export --layout torch`). meta (borrowed, may be NULL) holds key/value string
 * pairs ending with a NULL key, written to "__metadata__" after producer, step and epoch.
 * Each tensor is read whole into memory once. Blocks on disk I/O; any thread.
 * Codes: MT_INVALID_ARGUMENT (an entry with an empty or duplicate name, a rank or a perm out
 * of range, element counts of source, view and output that differ), MT_NOT_FOUND (no such
 * source tensor), MT_FAILED_PRECONDITION (n == 0 or a source that is not F32),
 * MT_DATA_LOSS / I/O codes as commit, MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_ckpt_export_safetensors_map(const mt_ckpt *ck, const mt_ckpt_export_tensor *plan, int n,
                                       const char *const *meta, const char *path, mt_err *err);

/* ------------------------------------------------------------------ directory */

/*
 * Checkpoints of a job live in one directory as "ckpt-<step>.mtc" (step in decimal,
 * no padding). mt_ckpt_path writes "<dir>/ckpt-<step>.mtc" into buf (size n);
 * returns MT_INVALID_ARGUMENT when it does not fit.
 */
mt_code mt_ckpt_path(char *buf, size_t n, const char *dir, uint64_t step, mt_err *err);

/*
 * Steps of the checkpoints in dir, ascending, in a new array *steps (caller frees
 * with mt_free; NULL when *n == 0). Other files are ignored.
 * Codes: MT_NOT_FOUND (no such directory), MT_INTERNAL, MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_ckpt_list(const char *dir, uint64_t **steps, int *n, mt_err *err);

/* The highest step in dir. Codes: MT_NOT_FOUND (no checkpoint or no directory), as list. */
mt_code mt_ckpt_latest(const char *dir, uint64_t *step, mt_err *err);

/*
 * Keep the `keep` checkpoints with the highest steps and delete the others;
 * *removed (may be NULL) gets the number deleted. Temporary files of a writer in
 * progress are never touched. Codes: MT_INVALID_ARGUMENT (keep < 1), as list,
 * MT_INTERNAL (unlink failed).
 */
mt_code mt_ckpt_retain(const char *dir, int keep, int *removed, mt_err *err);

#endif
