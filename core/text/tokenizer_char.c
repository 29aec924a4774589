/* SPDX-License-Identifier: MIT */
/*
 * tokenizer_char.c — the character-level tokenizer: fit (count the characters of the fitting
 * text, keep the most frequent) and encode (binary search of each character among ids 1..K).
 *
 * A character is what mt_text__utf8_len says: a well-formed UTF-8 sequence, else one byte, so
 * any byte string splits the same way at fit and at encode. Counting keys pack a character's
 * length and bytes into 64 bits. Called by text_tokenizer.c. Threading: pure functions of their
 * arguments. Tests: tests/unit/test_text.c.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "text/text_int.h"

typedef struct char_count {
    unsigned char b[4];
    size_t len;
    uint64_t count;
} char_count;

static uint64_t char_key(const unsigned char *p, size_t len)
{
    uint64_t k = (uint64_t)len << 32;

    for (size_t i = 0; i < len; i++)
        k |= (uint64_t)p[i] << (8 * (3 - i));
    return k;
}

static void key_char(uint64_t k, char_count *c)
{
    c->len = (size_t)(k >> 32);
    for (size_t i = 0; i < 4; i++)
        c->b[i] = (unsigned char)(k >> (8 * (3 - i)));
}

static int by_count_desc(const void *pa, const void *pb)
{
    const char_count *a = pa, *b = pb;

    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    return mt_text__bytes_cmp(a->b, a->len, b->b, b->len);
}

static int by_bytes(const void *pa, const void *pb)
{
    const char_count *a = pa, *b = pb;

    return mt_text__bytes_cmp(a->b, a->len, b->b, b->len);
}

mt_code mt_text__char_fit(size_t vocab_size, const char *const *texts, const size_t *lens, size_t n,
                          mt_text_tokenizer **out, mt_err *err)
{
    mt_text__map counts;
    char_count *cs = NULL;
    const unsigned char **chars = NULL;
    size_t *clens = NULL, k = 0, j = 0;
    mt_code rc = MT_OK;

    *out = NULL;
    if (mt_text__map_init(&counts, 256) != MT_OK)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tokenizer: out of memory");
    for (size_t d = 0; d < n && rc == MT_OK; d++) {
        const unsigned char *p = (const unsigned char *)texts[d];
        for (size_t i = 0; i < lens[d];) {
            size_t l = mt_text__utf8_len(p + i, lens[d] - i);
            uint64_t *slot = mt_text__map_put(&counts, char_key(p + i, l));
            if (slot == NULL) {
                rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tokenizer: out of memory");
                break;
            }
            (*slot)++;
            i += l;
        }
    }
    if (rc == MT_OK && counts.n == 0)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "tokenizer: no text to fit a char vocabulary on");
    if (rc != MT_OK)
        goto done;
    cs = mt_malloc(counts.n * sizeof(*cs));
    chars = mt_malloc(counts.n * sizeof(*chars));
    clens = mt_malloc(counts.n * sizeof(size_t));
    if (cs == NULL || chars == NULL || clens == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tokenizer: out of memory");
        goto done;
    }
    for (size_t i = 0; i < counts.cap; i++)
        if (counts.used[i]) {
            key_char(counts.keys[i], &cs[j]);
            cs[j++].count = counts.vals[i];
        }
    if (vocab_size == 0)
        vocab_size = counts.n + 1;
    k = counts.n < vocab_size - 1 ? counts.n : vocab_size - 1;
    qsort(cs, counts.n, sizeof(*cs), by_count_desc);
    qsort(cs, k, sizeof(*cs), by_bytes);
    for (size_t i = 0; i < k; i++) {
        chars[i] = cs[i].b;
        clens[i] = cs[i].len;
    }
    rc = mt_text__build_char(vocab_size, chars, clens, k, out, err);
done:
    mt_free(cs);
    mt_free(chars);
    mt_free(clens);
    mt_text__map_fini(&counts);
    return rc;
}

/* The id of character p[0..l) among ids 1..used-1 (byte order), 0 when unknown. */
static uint32_t char_id(const mt_text_tokenizer *t, const unsigned char *p, size_t l)
{
    size_t lo = 1, hi = t->used;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = mt_text__bytes_cmp(t->bytes + t->off[mid], t->off[mid + 1] - t->off[mid], p, l);
        if (c == 0)
            return (uint32_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

void mt_text__char_encode(const mt_text_tokenizer *t, const unsigned char *text, size_t len,
                          uint32_t *ids, size_t *n)
{
    size_t k = 0;

    for (size_t i = 0; i < len;) {
        size_t l = mt_text__utf8_len(text + i, len - i);
        ids[k++] = l == 1 ? t->byte_id[text[i]] : char_id(t, text + i, l);
        i += l;
    }
    *n = k;
}
