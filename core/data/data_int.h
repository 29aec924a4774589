/* SPDX-License-Identifier: MIT */
/*
 * data_int.h — private interfaces shared by the files of core/data (not a public contract).
 *
 * A source adapter turns one mt_data_file into examples: `count` scans cheaply (every pipeline
 * counts every file so that all compute the same plan), `load` decodes into an mt_data_block.
 * Adding a format = one file defining one `const mt_data__source` (see data_idx.c).
 * Threading: adapters keep no state; they may run on any thread.
 * Tests: tests/unit/test_data_*.c, tests/fuzz/fuzz_csv.c, fuzz_text.c.
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

typedef struct mt_data__source {
    const char *name;
    /* Examples in f. Codes: NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT (names file:line). */
    mt_code (*count)(const mt_data_spec *spec, const mt_data_file *f, size_t *n, mt_err *err);
    /* Decode f into *out (caller memory, zeroed on failure). vec: TEXT only. */
    mt_code (*load)(const mt_data_spec *spec, const mt_data_file *f, const mt_data_tfidf *vec,
                    mt_data_block *out, mt_err *err);
    /* NULL, or decode f straight into compressed sparse rows (never holding the dense matrix). */
    mt_code (*load_csr)(const mt_data_spec *spec, const mt_data_file *f, const mt_data_tfidf *vec,
                        mt_data__csr *out, mt_err *err);
} mt_data__source;

extern const mt_data__source mt_data__csv_source;
extern const mt_data__source mt_data__text_source;
extern const mt_data__source mt_data__idx_source;

/* Open a file for reading with errno translated: NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT
 * (a directory), INTERNAL. The message is "open PATH: strerror". */
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
 * CSV: decode a whole stream (borrowed) named `name` into *out with the spec's columns. Used by
 * the file adapter and by the fuzz target (over fmemopen). Codes: INVALID_ARGUMENT (file:line),
 * RESOURCE_EXHAUSTED.
 */
mt_code mt_data__csv_read(const mt_data_spec *spec, FILE *fp, const char *name, mt_data_block *out,
                          mt_err *err);

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
