/* SPDX-License-Identifier: MIT */
/*
 * fuzz_vocab.c — libFuzzer target for the vocabulary file reader of core/text
 * (mt_text_tokenizer_load). The input is a vocabulary file image. When it loads, the tokenizer
 * is saved and reloaded (it must load and be equal), and the input itself is encoded and
 * decoded: a bpe tokenizer must give the input back byte for byte, a char tokenizer ids inside
 * the vocabulary. The input also fits a small tokenizer of each kind, whose saved file must
 * load. Any crash, leak or sanitizer report is a bug. Seeds: tests/fuzz/corpus/fuzz_vocab/.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "text/mt_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Save t, reload it: it must come back equal. */
static void check_save_load(const mt_text_tokenizer *t)
{
    mt_text_tokenizer *back = NULL;
    char *buf = NULL;
    size_t len = 0;

    if (mt_text_tokenizer_save(t, &buf, &len, NULL) != MT_OK)
        return;
    if (mt_text_tokenizer_load("saved", buf, len, &back, NULL) != MT_OK ||
        !mt_text_tokenizer_equal(t, back))
        abort();
    mt_text_tokenizer_free(back);
    mt_free(buf);
}

/* Encode and decode data with t: bpe must round-trip exactly, ids stay in the vocabulary. */
static void check_round_trip(const mt_text_tokenizer *t, const uint8_t *data, size_t size)
{
    uint32_t *ids = NULL;
    size_t n = 0, len = 0;
    char *back = NULL;

    if (mt_text_tokenizer_encode(t, (const char *)data, size, &ids, &n, NULL) != MT_OK)
        return;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= mt_text_tokenizer_used(t))
            abort();
    if (mt_text_tokenizer_decode(t, ids, n, &back, &len, NULL) == MT_OK &&
        mt_text_tokenizer_kind(t) == MT_TEXT_TOKENIZER_BPE &&
        (len != size || memcmp(back, data, size) != 0))
        abort();
    mt_free(back);
    mt_free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_text_tokenizer *t = NULL;
    const char *texts[1] = {(const char *)data};
    size_t lens[1] = {size};

    if (mt_text_tokenizer_load("fuzz", (const char *)data, size, &t, NULL) == MT_OK) {
        check_save_load(t);
        check_round_trip(t, data, size);
        mt_text_tokenizer_free(t);
    }
    for (int type = 0; type < 2 && size > 0 && size < 4096; type++) {
        t = NULL;
        if (mt_text_tokenizer_fit((mt_text_tokenizer_type)type, type ? 256 + size % 64 : 0, texts,
                                  lens, 1, &t, NULL) != MT_OK)
            continue;
        check_save_load(t);
        check_round_trip(t, data, size);
        mt_text_tokenizer_free(t);
    }
    return 0;
}
