/* SPDX-License-Identifier: MIT */
/*
 * text_int.h — private interfaces shared by the files of core/text (not a public contract).
 *
 * The tokenizer struct (text_tokenizer.c builds it, tokenizer_char.c and tokenizer_bpe.c fit and
 * encode), a small open-addressing hash map from 64-bit keys to 64-bit values used for character
 * counts, pair counts and merge ranks, and the UTF-8 character splitter of the char tokenizer.
 * Threading: a map belongs to one thread. Tests: tests/unit/test_text.c.
 */
#ifndef MT_TEXT_INT_H
#define MT_TEXT_INT_H

#include "text/mt_text.h"

#define MT_TEXT__MAX_CHUNK 64 /* bytes of a byte-pair chunk, so of any bpe token */

/* Keys are any 64-bit value; a slot is in use when used[i] != 0. */
typedef struct mt_text__map {
    size_t cap, n;       /* cap is a power of two, n < cap / 2 */
    uint64_t *keys;      /* owned (cap) */
    uint64_t *vals;      /* owned (cap) */
    unsigned char *used; /* owned (cap) */
} mt_text__map;

/* An empty map with room for about `hint` keys. Codes: RESOURCE_EXHAUSTED. */
mt_code mt_text__map_init(mt_text__map *m, size_t hint);
void mt_text__map_fini(mt_text__map *m);
/* The value slot of key, or NULL when absent. */
uint64_t *mt_text__map_get(const mt_text__map *m, uint64_t key);
/* The value slot of key, inserted with value 0 when absent (NULL: out of memory). */
uint64_t *mt_text__map_put(mt_text__map *m, uint64_t key);

struct mt_text_tokenizer {
    mt_text_tokenizer_type type;
    size_t vocab_size;     /* ids 0 .. vocab_size-1 */
    size_t used;           /* ids the fit filled (char: 1 + K, bpe: 256 + merges) */
    unsigned char *bytes;  /* owned; the bytes of every id back to back */
    size_t *off;           /* owned (vocab_size + 1): id i is bytes[off[i] .. off[i+1]) */
    uint32_t *merges;      /* owned; bpe: merge i = (merges[2i], merges[2i+1]); else NULL */
    mt_text__map ranks;    /* bpe: (left << 32 | right) -> merge index */
    uint32_t byte_id[256]; /* char: the id of each one-byte character (0 = unknown) */
};

/*
 * Build a tokenizer from its entries (what the file stores): char: k characters chars[i] of
 * lens[i] bytes, in byte order; bpe: k merges (merges[2i], merges[2i+1]). Checks nothing beyond
 * what the callers guarantee (fit by construction, load by its own checks). *out owned.
 * Codes: RESOURCE_EXHAUSTED.
 */
mt_code mt_text__build_char(size_t vocab_size, const unsigned char *const *chars,
                            const size_t *lens, size_t k, mt_text_tokenizer **out, mt_err *err);
mt_code mt_text__build_bpe(size_t vocab_size, const uint32_t *merges, size_t k,
                           mt_text_tokenizer **out, mt_err *err);

/* Length 1..4 of the character at p[0..n) (n > 0): a well-formed UTF-8 sequence, else 1. */
size_t mt_text__utf8_len(const unsigned char *p, size_t n);

/* memcmp order of byte strings, a proper prefix first. */
int mt_text__bytes_cmp(const unsigned char *a, size_t na, const unsigned char *b, size_t nb);

/* Fit bodies (vocab_size already checked). */
mt_code mt_text__char_fit(size_t vocab_size, const char *const *texts, const size_t *lens, size_t n,
                          mt_text_tokenizer **out, mt_err *err);
mt_code mt_text__bpe_fit(size_t vocab_size, const char *const *texts, const size_t *lens, size_t n,
                         mt_text_tokenizer **out, mt_err *err);

/* Encode bodies: append the ids of text[0..len) to ids (room for len ids), *n = count. */
void mt_text__char_encode(const mt_text_tokenizer *t, const unsigned char *text, size_t len,
                          uint32_t *ids, size_t *n);
void mt_text__bpe_encode(const mt_text_tokenizer *t, const unsigned char *text, size_t len,
                         uint32_t *ids, size_t *n);

#endif
