/* SPDX-License-Identifier: MIT */
/*
 * data_int.h — private interfaces shared by the files of core/data (not a public contract).
 *
 * A source adapter turns one mt_data_file into examples: `count` scans cheaply (every pipeline
 * counts every file so that all compute the same plan), `load` decodes into an mt_data_block.
 * Adding a format = one file defining one `const mt_data__source` (see data_idx.c).
 * Threading: adapters keep no state; they may run on any thread.
 * Sources see the class names and the vectorizer fitted on the training split (mt_data__fit).
 * Tests: tests/unit/test_data_*.c, tests/fuzz/fuzz_csv.c, fuzz_text.c, fuzz_npy.c, fuzz_image.c.
 */
#ifndef MT_DATA_INT_H
#define MT_DATA_INT_H

#include <stdio.h>

#include "data/mt_data.h"

/*
 * A decoded file in compressed sparse rows (TEXT, where ~1 % of the features are nonzero): row i's
 * nonzero features are idx/val[ptr[i] .. ptr[i+1]) in increasing index order; every other
 * feature is 0. Densified it equals the mt_data_block of the same file bit for bit. Memory: 8
 * bytes per nonzero plus 12 per example. Owned buffers, released by mt_data__csr_fini.
 */
typedef struct mt_data__csr {
    size_t n, dim, nnz;
    size_t *ptr;   /* n + 1 */
    uint32_t *idx; /* nnz feature indices */
    float *val;    /* nnz feature values (count × idf for TF-IDF) */
    int32_t *y;    /* n labels */
} mt_data__csr;

/* Free the buffers and zero *c. Zeroed memory and NULL are no-ops. */
void mt_data__csr_fini(mt_data__csr *c);

/* What a source needs besides the spec, fitted on the training split: borrowed. */
typedef struct mt_data__fit {
    const mt_data_tfidf *vec;       /* TEXT: the vectorizer */
    const mt_text_tokenizer *tok;   /* TOKENS: the tokenizer */
    const mt_data_classes *classes; /* string labels / image folders: the class names */
} mt_data__fit;

typedef struct mt_data__source {
    const char *name;
    /* Examples in f. Codes: NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT (names file:line). */
    mt_code (*count)(const mt_data_spec *spec, const mt_data_file *f, const mt_data__fit *fit,
                     size_t *n, mt_err *err);
    /* Decode f into *out (caller memory, zeroed on failure). */
    mt_code (*load)(const mt_data_spec *spec, const mt_data_file *f, const mt_data__fit *fit,
                    mt_data_block *out, mt_err *err);
    /* NULL, or decode f straight into compressed sparse rows (never holding the dense matrix). */
    mt_code (*load_csr)(const mt_data_spec *spec, const mt_data_file *f, const mt_data__fit *fit,
                        mt_data__csr *out, mt_err *err);
} mt_data__source;

extern const mt_data__source mt_data__csv_source;
extern const mt_data__source mt_data__text_source;
extern const mt_data__source mt_data__idx_source;
extern const mt_data__source mt_data__npy_source;
extern const mt_data__source mt_data__image_source;
extern const mt_data__source mt_data__tokens_source;

/* Index of `name` in classes (binary search: names are sorted unless given by "class_names",
 * then a linear scan), or -1. */
int32_t mt_data__class_id(const mt_data_spec *spec, const mt_data_classes *classes,
                          const char *name, size_t len);

/* Append a copy of name[0..len) to c when not present yet (kept sorted by strcmp). */
mt_code mt_data__classes_add(mt_data_classes *c, const char *name, size_t len);

/* CSV: add the distinct label values of the file at path to c (string labels). */
mt_code mt_data__csv_label_names(const mt_data_spec *spec, const char *path, mt_data_classes *c,
                                 mt_err *err);

/* IMAGES: add the class sub-folder names of root to c. */
mt_code mt_data__image_class_dirs(const char *root, mt_data_classes *c, mt_err *err);

/*
 * NPY: decode a .npy image (borrowed bytes) named `name` into a float32 array: *shape gets the
 * dims (rank <= 8), *out (product of dims) is owned (mt_free); `want_int` refuses float dtypes
 * (class labels). Used by the source, the npz reader and the fuzz target. Codes:
 * INVALID_ARGUMENT ("NAME: truncated: header says 600 bytes of data, 37 present", "NAME: dtype
 * '<c16' is not supported (u1 i1 u2 i2 u4 i4 u8 i8 f4 f8, b1)"), RESOURCE_EXHAUSTED.
 */
#define MT_DATA__NPY_MAX_RANK 8
typedef struct mt_data__array {
    int rank;
    size_t dims[MT_DATA__NPY_MAX_RANK];
    size_t count; /* product of dims */
    bool integer; /* the dtype was an integer (or bool) type */
    float *f;     /* owned (count) values, NULL when count == 0 */
} mt_data__array;
void mt_data__array_fini(mt_data__array *a);
mt_code mt_data__npy_parse(const unsigned char *buf, size_t len, const char *name,
                           mt_data__array *out, mt_err *err);
/* The member `key`.npy of a .npz archive in memory, inflated when deflated: *data owned. */
mt_code mt_data__npz_member(const unsigned char *zip, size_t len, const char *name, const char *key,
                            unsigned char **data, size_t *data_len, mt_err *err);
/* Build a block from decoded x and y arrays (checks counts, dtypes, label ranges). */
mt_code mt_data__npy_block(const mt_data_spec *spec, const char *xname, const char *yname,
                           mt_data__array *x, mt_data__array *y, mt_data_block *out, mt_err *err);

/* IMAGES: decode an encoded PNG/JPEG image in memory into spec's H×W×C floats (out caller's). */
mt_code mt_data__image_decode(const mt_data_spec *spec, const unsigned char *buf, size_t len,
                              const char *name, float *out, mt_err *err);

/* Read a whole file into *buf (owned, mt_free; NUL-terminated). Codes as mt_data__fopen,
 * DATA_LOSS (read error), RESOURCE_EXHAUSTED. */
mt_code mt_data__read_all(const char *path, unsigned char **buf, size_t *len, mt_err *err);

/* The augmentation of example `gidx` in `epoch`: src and dst (h, w, c), distinct. */
void mt_data__augment(const mt_data_augment *a, const size_t shape[3], uint64_t seed,
                      uint64_t epoch, uint64_t gidx, const float *src, float *dst);

/* Open a file for reading with errno translated: NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT
 * (a directory, a FIFO, socket or device: never opened, so nothing blocks), INTERNAL. The message
 * is "open PATH: strerror". */
mt_code mt_data__fopen(const char *path, FILE **out, mt_err *err);

/* Lines holding more than '\r' in `path`, minus one when `header`. Codes: as mt_data__fopen,
 * DATA_LOSS (read error). */
mt_code mt_data__count_records(const char *path, bool header, size_t *n, mt_err *err);

/* Whether the dataset's files decode into compressed sparse rows (mt_data__dataset_load_csr). */
bool mt_data__dataset_sparse(const mt_data_dataset *ds);

/* Decode file f into *out (caller memory; mt_data__csr_fini). Codes: as mt_data_dataset_load;
 * FAILED_PRECONDITION when the dataset is not sparse. */
mt_code mt_data__dataset_load_csr(mt_data_dataset *ds, size_t f, mt_data__csr *out, mt_err *err);

/* Message prefix for spec errors ("dataset"). */
const char *mt_data__spec_path(const mt_data_spec *spec);

/*
 * CSV: decode a whole stream (borrowed) named `name` into *out with the spec's columns; string
 * labels are looked up in `classes` (borrowed; NULL refuses every name). Used by the file adapter
 * and by the fuzz target (over fmemopen). Codes: INVALID_ARGUMENT (file:line),
 * RESOURCE_EXHAUSTED.
 */
mt_code mt_data__csv_read(const mt_data_spec *spec, FILE *fp, const char *name,
                          const mt_data_classes *classes, mt_data_block *out, mt_err *err);

/*
 * CSV header check used by the spec parser: resolves the label and feature columns of `path`.
 * Errors carry the spec's JSON path (`dataset.label_column: no column 'y' in F (columns: ...)`).
 */
mt_code mt_data__csv_check(const mt_data_spec *spec, const char *path, mt_err *err);

/* One labelled document. */
typedef struct mt_data__doc {
    int32_t label;
    char *text; /* owned, NUL-terminated */
    size_t len;
} mt_data__doc;

typedef struct mt_data__docs {
    size_t n, cap;
    mt_data__doc *v; /* owned */
} mt_data__docs;

/* Append the documents of a `label<TAB>text` stream (borrowed) named `name`. Codes:
 * INVALID_ARGUMENT (file:line), RESOURCE_EXHAUSTED. num_classes > 0 bounds the labels. */
mt_code mt_data__text_read_tsv(FILE *fp, const char *name, int num_classes, mt_data__docs *docs,
                               mt_err *err);
/* Append the documents of f (TSV file or directory per label). */
mt_code mt_data__text_read_file(const mt_data_spec *spec, const mt_data_file *f,
                                mt_data__docs *docs, mt_err *err);
void mt_data__docs_fini(mt_data__docs *docs);

#endif
