/* SPDX-License-Identifier: MIT */
/*
 * mt_idx.h — reader for the IDX format of (Fashion-)MNIST, gzipped or plain.
 *
 * Role: turn an IDX file (or an in-memory buffer) into a validated array with
 * its dimensions, then into float32 pixels in [0,1] or int32 labels. Called by
 * the dataset layer (core/data) and the local trainer; calls zlib.
 * Format: 2 zero bytes, a type byte (0x08 ubyte, 0x09 sbyte, 0x0B int16, 0x0C
 * int32, 0x0D float32, 0x0E float64), a rank byte (1..4), rank big-endian
 * uint32 dimensions, then the elements big-endian, row-major.
 * Invariants: after a successful read, bytes == count * element size and the
 * buffer holds exactly the file's payload (no trailing bytes were accepted).
 * Errors: a wrong magic/type/rank, a zero/overflowing dimension or trailing
 * bytes is INVALID_ARGUMENT; a short (truncated) payload or a corrupt gzip
 * stream is DATA_LOSS; a missing file NOT_FOUND; every message names the file.
 * Threading: no shared state; distinct objects may be used from any thread.
 * Tests: tests/unit/test_idx.c, fuzz target tests/fuzz/fuzz_idx.c.
 */
#ifndef MT_IDX_H
#define MT_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

#define MT_IDX_MAX_RANK 4
/* Refuse payloads above this many bytes (4 GiB) as corrupt headers rather than allocate. */
#define MT_IDX_MAX_BYTES ((size_t)1 << 32)

enum {
    MT_IDX_UBYTE = 0x08,
    MT_IDX_SBYTE = 0x09,
    MT_IDX_INT16 = 0x0B,
    MT_IDX_INT32 = 0x0C,
    MT_IDX_FLOAT32 = 0x0D,
    MT_IDX_FLOAT64 = 0x0E,
};

/* A decoded IDX array. Caller-provided memory: mt_idx_read_*() fill it, mt_idx_fini() frees. */
typedef struct mt_idx {
    int type;                       /* MT_IDX_* type byte */
    int rank;                       /* 1..MT_IDX_MAX_RANK */
    uint32_t dims[MT_IDX_MAX_RANK]; /* dims[0] = number of items */
    size_t count;                   /* product of dims */
    size_t elem_size;               /* bytes per element (1, 2, 4 or 8) */
    unsigned char *data;            /* owned; count*elem_size bytes, big-endian as in the file */
} mt_idx;

/*
 * Decode an IDX image held in memory. `buf` (len bytes) is borrowed; `name` names the source in
 * messages. On MT_OK *out owns a copy of the payload (release with mt_idx_fini); on failure *out
 * is zeroed. Codes: INVALID_ARGUMENT, DATA_LOSS (truncated), RESOURCE_EXHAUSTED.
 */
mt_code mt_idx_read_mem(const void *buf, size_t len, const char *name, mt_idx *out, mt_err *err);

/*
 * Read and decode an IDX file, gzipped or plain (zlib detects which). Blocks on file I/O.
 * Codes: NOT_FOUND (no such file), PERMISSION_DENIED, DATA_LOSS (truncated or corrupt gzip),
 * INVALID_ARGUMENT (bad header, trailing bytes), RESOURCE_EXHAUSTED.
 */
mt_code mt_idx_read_file(const char *path, mt_idx *out, mt_err *err);

/* Free the payload and zero *idx. Zeroed memory and NULL are no-ops. */
void mt_idx_fini(mt_idx *idx);

/*
 * Images: a ubyte array of rank 3 (n, rows, cols) or 4 (n, rows, cols, channels) → float32 NHWC
 * pixels scaled by 1/255 into [0,1]. Returns owned *pixels (mt_free) of count floats; *n, *h, *w,
 * *c describe it (c = 1 for rank 3). Codes: INVALID_ARGUMENT (type/rank), RESOURCE_EXHAUSTED.
 */
mt_code mt_idx_to_images(const mt_idx *idx, const char *name, float **pixels, size_t *n, size_t *h,
                         size_t *w, size_t *c, mt_err *err);

/*
 * Labels: a rank-1 ubyte array → owned int32 labels (mt_free), all checked < num_classes
 * (num_classes <= 0 skips that check). Codes: INVALID_ARGUMENT, RESOURCE_EXHAUSTED.
 */
mt_code mt_idx_to_labels(const mt_idx *idx, const char *name, int num_classes, int32_t **labels,
                         size_t *n, mt_err *err);

/*
 * An in-memory split: an image/label pair loaded from two IDX files, or any decoded split (the
 * engines' whole-data form). Caller memory; mt_idx_set_fini() frees.
 */
typedef struct mt_idx_set {
    float *images;   /* owned (n, h, w, c) float32 (IDX: in [0,1]) */
    int32_t *labels; /* owned (n, y_dim) class labels */
    size_t n, h, w, c;
    size_t y_dim;   /* class labels per example; 0 is read as 1 (IDX sets have one) */
    float *targets; /* owned (n, t_dim) float (regression) targets, or NULL for class labels */
    size_t t_dim;   /* float targets per example; 0 for class labels */
} mt_idx_set;

/*
 * Load images and labels and check that their counts match (INVALID_ARGUMENT naming both files
 * and counts otherwise). Labels are checked < num_classes when num_classes > 0. On failure *out is
 * zeroed and nothing leaks. Codes: as mt_idx_read_file plus the conversions above.
 */
mt_code mt_idx_set_load(const char *images_path, const char *labels_path, int num_classes,
                        mt_idx_set *out, mt_err *err);

/* Free both arrays and zero *set. Zeroed memory and NULL are no-ops. */
void mt_idx_set_fini(mt_idx_set *set);

#endif
