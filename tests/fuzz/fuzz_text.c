/* SPDX-License-Identifier: MIT */
/*
 * fuzz_text.c — libFuzzer target for the labelled-text decoder, tokenizer and TF-IDF vectorizer
 * of core/data (data_text.c). The first byte picks max_tokens; the rest is a `label<TAB>text`
 * file read through fmemopen. When it decodes, the vectorizer is fitted, every document
 * vectorized, saved, reloaded and compared; the raw input is also fed to mt_data_tfidf_load.
 * Any crash, leak or sanitizer report is a bug. Seeds: tests/fuzz/corpus/fuzz_text/.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Fit, vectorize, save, reload: the reloaded vectorizer must give the same vectors. */
static void check_vectorizer(const mt_data__docs *d, size_t max_tokens)
{
    const char **texts = malloc(d->n * sizeof(*texts));
    size_t *lens = malloc(d->n * sizeof(*lens));
    mt_data_tfidf *v = NULL, *w = NULL;
    char *buf = NULL;
    size_t len = 0;

    for (size_t i = 0; i < d->n; i++) {
        texts[i] = d->v[i].text;
        lens[i] = d->v[i].len;
    }
    if (mt_data_tfidf_fit(texts, lens, d->n, max_tokens, &v, NULL) != MT_OK)
        goto out;
    if (mt_data_tfidf_dim(v) > max_tokens)
        abort();
    if (mt_data_tfidf_save(v, &buf, &len, NULL) != MT_OK)
        goto out;
    if (mt_data_tfidf_load(buf, len, &w, NULL) != MT_OK)
        abort(); /* what we save we must load */
    for (size_t i = 0; i < d->n && i < 8; i++) {
        size_t dim = mt_data_tfidf_dim(v);
        float *a = malloc(dim * sizeof(float)), *b = malloc(dim * sizeof(float));
        if (mt_data_tfidf_transform(v, texts[i], lens[i], a, NULL) != MT_OK)
            abort();
        if (mt_data_tfidf_transform(w, texts[i], lens[i], b, NULL) != MT_OK)
            abort();
        for (size_t j = 0; j < dim; j++)
            if (!isfinite(a[j]) || a[j] < 0 || a[j] != b[j])
                abort();
        free(a);
        free(b);
    }
out:
    mt_data_tfidf_free(w);
    mt_data_tfidf_free(v);
    mt_free(buf);
    free(texts);
    free(lens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_data__docs d = {0, 0, NULL};
    mt_data_tfidf *v = NULL;
    mt_err err = MT_ERR_INIT;
    FILE *fp;

    if (size < 2)
        return 0;
    if (mt_data_tfidf_load((const char *)data, size, &v, NULL) == MT_OK)
        mt_data_tfidf_free(v);
    fp = fmemopen((void *)(data + 1), size - 1, "rb");
    if (fp == NULL)
        return 0;
    if (mt_data__text_read_tsv(fp, "fuzz.tsv", data[0] & 1 ? 3 : 0, &d, &err) == MT_OK && d.n > 0)
        check_vectorizer(&d, 2 + data[0] % 64);
    fclose(fp);
    mt_data__docs_fini(&d);
    return 0;
}
