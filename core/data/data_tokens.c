/* SPDX-License-Identifier: MIT */
/*
 * data_tokens.c — the "tokens" source: plain text files tokenized and cut into next-token
 * examples for language models (contract in mt_data.h, format in docs/input-pipeline.md).
 *
 * Called through mt_data__tokens_source by the dataset layer, which fits the tokenizer once on
 * the TRAINING files at open (mt_data_tokenizer_fit_spec) and hands it to count and load.
 * Calls core/text for the tokenizer and the sequence cutter. A file is read whole, encoded, and
 * cut into (n - 1) / block_size examples of block_size tokens: x the inputs as float32 ids
 * (exact below 2^24), y the next tokens as block_size int32 class labels; sequences never cross
 * files, so every shard policy, shuffling and rebatching applies to whole sequences.
 * Threading: stateless functions. Tests: tests/unit/test_data_tokens.c.
 */
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

/* Read and encode file f: *ids owned (mt_free). */
static mt_code encode_file(const mt_data_file *f, const mt_text_tokenizer *tok, uint32_t **ids,
                           size_t *n, mt_err *err)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    mt_code rc = mt_data__read_all(f->path, &buf, &len, err);

    *ids = NULL;
    *n = 0;
    if (rc != MT_OK)
        return rc;
    rc = mt_text_tokenizer_encode(tok, (const char *)buf, len, ids, n, err);
    mt_free(buf);
    return rc;
}

static mt_code no_tokenizer(const mt_data_spec *spec, mt_err *err)
{
    return mt_err_set(err, MT_FAILED_PRECONDITION, "%s: a tokens dataset needs a fitted tokenizer",
                      mt_data__spec_path(spec));
}

static mt_code tokens_count(const mt_data_spec *spec, const mt_data_file *f,
                            const mt_data__fit *fit, size_t *n, mt_err *err)
{
    uint32_t *ids = NULL;
    size_t k = 0;
    mt_code rc;

    *n = 0;
    if (fit->tok == NULL)
        return no_tokenizer(spec, err);
    if ((rc = encode_file(f, fit->tok, &ids, &k, err)) != MT_OK)
        return rc;
    *n = mt_text_sequence_count(k, spec->block_size);
    mt_free(ids);
    return MT_OK;
}

static mt_code tokens_load(const mt_data_spec *spec, const mt_data_file *f, const mt_data__fit *fit,
                           mt_data_block *out, mt_err *err)
{
    size_t T = spec->block_size, k = 0, n;
    uint32_t *ids = NULL;
    mt_code rc;

    memset(out, 0, sizeof(*out));
    if (fit->tok == NULL)
        return no_tokenizer(spec, err);
    if ((rc = encode_file(f, fit->tok, &ids, &k, err)) != MT_OK)
        return rc;
    n = mt_text_sequence_count(k, T);
    out->x = mt_malloc(n * T * sizeof(float) + 1);
    out->y = mt_malloc(n * T * sizeof(int32_t) + 1);
    if (out->x == NULL || out->y == NULL) {
        mt_data_block_fini(out);
        mt_free(ids);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", f->path);
    }
    mt_text_sequence_cut(ids, k, T, out->x, out->y);
    mt_free(ids);
    out->n = n;
    out->dim = T;
    out->y_dim = T;
    return MT_OK;
}

const mt_data__source mt_data__tokens_source = {"tokens", tokens_count, tokens_load, NULL};

mt_code mt_data_tokenizer_fit_spec(const mt_data_spec *spec, mt_text_tokenizer **out, mt_err *err)
{
    unsigned char **bufs = NULL;
    size_t *lens = NULL, n = spec->train.n;
    mt_code rc = MT_OK;

    *out = NULL;
    if (spec->format != MT_DATA_FORMAT_TOKENS)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a tokens dataset",
                          mt_data__spec_path(spec));
    if (n == 0)
        return mt_err_set(err, MT_NOT_FOUND, "%s.train: no files", mt_data__spec_path(spec));
    bufs = mt_calloc(n, sizeof(*bufs));
    lens = mt_calloc(n, sizeof(size_t));
    if (bufs == NULL || lens == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", mt_data__spec_path(spec));
    for (size_t i = 0; i < n && rc == MT_OK; i++)
        rc = mt_data__read_all(spec->train.files[i].path, &bufs[i], &lens[i], err);
    if (rc == MT_OK) {
        rc = mt_text_tokenizer_fit(spec->tokenizer, spec->vocab_size, (const char *const *)bufs,
                                   lens, n, out, err);
        if (rc == MT_INVALID_ARGUMENT && err != NULL) { /* say which spec field was wrong */
            char why[MT_ERR_MSG_SIZE];
            snprintf(why, sizeof(why), "%s", err->msg);
            rc = mt_err_set(err, rc, "%s.tokenizer: %s", mt_data__spec_path(spec), why);
        }
    }
    for (size_t i = 0; bufs != NULL && i < n; i++)
        mt_free(bufs[i]);
    mt_free(bufs);
    mt_free(lens);
    return rc;
}
