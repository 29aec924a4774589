/* SPDX-License-Identifier: MIT */
/*
 * data_source.c — datasets: the files of one split, their example counts, and decoding a file
 * through its format's source adapter (contract in mt_data.h).
 *
 * Called by the pipeline, `meshtrain plan`, tests and benchmarks; calls the adapters of
 * data_csv.c, data_text.c and data_idx.c. An in-memory dataset (mt_data_dataset_from_blocks)
 * stands in for files in tests and benchmarks and for prediction inputs.
 * Invariants: sizes[f] is the count of file f as scanned at open; a later decode that disagrees
 * is DATA_LOSS (the file changed), so a plan built from the sizes never lies.
 * Threading: one thread at a time per dataset. Tests: tests/unit/test_data_pipeline.c.
 */
#include <string.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

struct mt_data_dataset {
    const mt_data_spec *spec;   /* borrowed; NULL for in-memory datasets */
    const mt_data__source *src; /* NULL for in-memory datasets */
    mt_data__fit fit;           /* vec borrowed (TEXT); classes points at `classes` */
    mt_data_classes classes;    /* owned; class names fitted on the training files */
    mt_text_tokenizer *tok;     /* owned; TOKENS: fitted on the training files */
    const mt_data_file *files;  /* borrowed from spec */
    size_t n_files;
    size_t *sizes;      /* owned; n_files counts */
    mt_data_block *mem; /* owned; in-memory blocks (n_files) or NULL */
    size_t total;       /* sum of sizes */
};

void mt_data_block_fini(mt_data_block *b)
{
    if (b == NULL)
        return;
    mt_free(b->x);
    mt_free(b->y);
    mt_free(b->t);
    memset(b, 0, sizeof(*b));
}

void mt_data__csr_fini(mt_data__csr *c)
{
    if (c == NULL)
        return;
    mt_free(c->ptr);
    mt_free(c->idx);
    mt_free(c->val);
    mt_free(c->y);
    memset(c, 0, sizeof(*c));
}

static const mt_data__source *source_for(mt_data_format f)
{
    switch (f) {
    case MT_DATA_FORMAT_CSV:
        return &mt_data__csv_source;
    case MT_DATA_FORMAT_TEXT:
        return &mt_data__text_source;
    case MT_DATA_FORMAT_IDX:
        return &mt_data__idx_source;
    case MT_DATA_FORMAT_NPY:
        return &mt_data__npy_source;
    case MT_DATA_FORMAT_IMAGES:
        return &mt_data__image_source;
    case MT_DATA_FORMAT_TOKENS:
        return &mt_data__tokens_source;
    }
    return NULL;
}

void mt_data_dataset_free(mt_data_dataset *ds)
{
    if (ds == NULL)
        return;
    if (ds->mem != NULL)
        for (size_t i = 0; i < ds->n_files; i++)
            mt_data_block_fini(&ds->mem[i]);
    mt_free(ds->mem);
    mt_free(ds->sizes);
    mt_data_classes_fini(&ds->classes);
    mt_text_tokenizer_free(ds->tok);
    mt_free(ds);
}

const mt_text_tokenizer *mt_data_dataset_tokenizer(const mt_data_dataset *ds)
{
    return ds->tok;
}

const mt_data_classes *mt_data_dataset_classes(const mt_data_dataset *ds)
{
    return &ds->classes;
}

mt_code mt_data_dataset_open(const mt_data_spec *spec, mt_data_split split,
                             const mt_data_tfidf *vec, mt_data_dataset **out, mt_err *err)
{
    const mt_data_file_list *l = split == MT_DATA_SPLIT_TEST ? &spec->test : &spec->train;
    mt_data_dataset *ds;
    mt_code rc = MT_OK;

    *out = NULL;
    if (l->n == 0)
        return mt_err_set(err, MT_NOT_FOUND, "%s.%s: no files", mt_data__spec_path(spec),
                          split == MT_DATA_SPLIT_TEST ? "test" : "train");
    if (spec->format == MT_DATA_FORMAT_TEXT && vec == NULL)
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "%s: a text dataset needs a fitted TF-IDF vectorizer",
                          mt_data__spec_path(spec));
    ds = mt_calloc(1, sizeof(*ds));
    if (ds == NULL || (ds->sizes = mt_calloc(l->n, sizeof(size_t))) == NULL) {
        mt_free(ds);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
    }
    ds->spec = spec;
    ds->src = source_for(spec->format);
    ds->fit.vec = vec;
    ds->fit.classes = &ds->classes;
    ds->files = l->files;
    ds->n_files = l->n;
    rc = mt_data_classes_fit_spec(spec, &ds->classes, err);
    if (rc == MT_OK && spec->format == MT_DATA_FORMAT_TOKENS &&
        (rc = mt_data_tokenizer_fit_spec(spec, &ds->tok, err)) == MT_OK)
        ds->fit.tok = ds->tok;
    for (size_t f = 0; f < l->n && rc == MT_OK; f++) {
        rc = ds->src->count(spec, &l->files[f], &ds->fit, &ds->sizes[f], err);
        ds->total += ds->sizes[f];
    }
    if (rc != MT_OK) {
        mt_data_dataset_free(ds);
        return rc;
    }
    *out = ds;
    return MT_OK;
}

/* Deep copy of b into *m (zeroed on failure): RESOURCE_EXHAUSTED or MT_OK. */
static mt_code block_copy(mt_data_block *m, const mt_data_block *b)
{
    size_t yd = b->y_dim ? b->y_dim : 1;

    *m = *b;
    m->y_dim = yd;
    m->x = mt_malloc(b->n * b->dim * sizeof(float) + 1);
    m->y = mt_malloc(b->n * yd * sizeof(int32_t) + 1);
    m->t = b->t != NULL ? mt_malloc(b->n * b->t_dim * sizeof(float) + 1) : NULL;
    if (m->x == NULL || m->y == NULL || (b->t != NULL && m->t == NULL)) {
        mt_data_block_fini(m);
        return MT_RESOURCE_EXHAUSTED;
    }
    if (b->n > 0) {
        memcpy(m->x, b->x, b->n * b->dim * sizeof(float));
        memcpy(m->y, b->y, b->n * yd * sizeof(int32_t));
        if (b->t != NULL)
            memcpy(m->t, b->t, b->n * b->t_dim * sizeof(float));
    }
    return MT_OK;
}

mt_code mt_data_dataset_from_blocks(const mt_data_block *blocks, size_t n_blocks,
                                    mt_data_dataset **out, mt_err *err)
{
    mt_data_dataset *ds;

    *out = NULL;
    if (n_blocks == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "dataset: no blocks");
    for (size_t i = 0; i < n_blocks; i++)
        if (blocks[i].dim != blocks[0].dim || blocks[i].dim == 0 ||
            blocks[i].t_dim != blocks[0].t_dim)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "dataset: block %zu has %zu features, block 0 has %zu", i,
                              blocks[i].dim, blocks[0].dim);
    ds = mt_calloc(1, sizeof(*ds));
    if (ds == NULL)
        goto oom;
    ds->n_files = n_blocks;
    ds->sizes = mt_calloc(n_blocks, sizeof(size_t));
    ds->mem = mt_calloc(n_blocks, sizeof(*ds->mem));
    if (ds->sizes == NULL || ds->mem == NULL)
        goto oom;
    for (size_t i = 0; i < n_blocks; i++) {
        const mt_data_block *b = &blocks[i];
        mt_data_block *m = &ds->mem[i];
        if (block_copy(m, b) != MT_OK)
            goto oom;
        ds->sizes[i] = b->n;
        ds->total += b->n;
    }
    *out = ds;
    return MT_OK;
oom:
    mt_data_dataset_free(ds);
    return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
}

size_t mt_data_dataset_num_files(const mt_data_dataset *ds)
{
    return ds->n_files;
}

size_t mt_data_dataset_file_size(const mt_data_dataset *ds, size_t f)
{
    return f < ds->n_files ? ds->sizes[f] : 0;
}

size_t mt_data_dataset_size(const mt_data_dataset *ds)
{
    return ds->total;
}

const size_t *mt_data_dataset_file_sizes(const mt_data_dataset *ds)
{
    return ds->sizes;
}

const char *mt_data_dataset_file_name(const mt_data_dataset *ds, size_t f)
{
    if (f >= ds->n_files)
        return "?";
    return ds->files != NULL ? ds->files[f].path : "<memory>";
}

/* A decode that disagrees with the count made at open: the file changed under us. */
static mt_code check_count(const mt_data_dataset *ds, size_t f, size_t got, mt_err *err)
{
    if (got == ds->sizes[f])
        return MT_OK;
    return mt_err_set(err, MT_DATA_LOSS, "%s: decoded %zu examples but counted %zu",
                      ds->files[f].path, got, ds->sizes[f]);
}

mt_code mt_data_dataset_load(mt_data_dataset *ds, size_t f, mt_data_block *out, mt_err *err)
{
    mt_code rc;

    memset(out, 0, sizeof(*out));
    if (f >= ds->n_files)
        return mt_err_set(err, MT_OUT_OF_RANGE, "dataset: file %zu of %zu", f, ds->n_files);
    if (ds->mem != NULL) {
        if (block_copy(out, &ds->mem[f]) != MT_OK)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "dataset: out of memory");
        return MT_OK;
    }
    rc = ds->src->load(ds->spec, &ds->files[f], &ds->fit, out, err);
    if (rc == MT_OK && (rc = check_count(ds, f, out->n, err)) != MT_OK)
        mt_data_block_fini(out);
    return rc;
}

bool mt_data__dataset_sparse(const mt_data_dataset *ds)
{
    return ds->mem == NULL && ds->src != NULL && ds->src->load_csr != NULL;
}

mt_code mt_data__dataset_load_csr(mt_data_dataset *ds, size_t f, mt_data__csr *out, mt_err *err)
{
    mt_code rc;

    memset(out, 0, sizeof(*out));
    if (f >= ds->n_files)
        return mt_err_set(err, MT_OUT_OF_RANGE, "dataset: file %zu of %zu", f, ds->n_files);
    if (!mt_data__dataset_sparse(ds))
        return mt_err_set(err, MT_FAILED_PRECONDITION, "dataset: %s does not decode sparse",
                          mt_data_dataset_file_name(ds, f));
    rc = ds->src->load_csr(ds->spec, &ds->files[f], &ds->fit, out, err);
    if (rc == MT_OK && (rc = check_count(ds, f, out->n, err)) != MT_OK)
        mt_data__csr_fini(out);
    return rc;
}
