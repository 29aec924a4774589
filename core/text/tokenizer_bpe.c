/* SPDX-License-Identifier: MIT */
/*
 * tokenizer_bpe.c — byte-level byte-pair encoding: fit (learn merges on chunk counts) and encode
 * (apply the merges inside each chunk, lowest merge index first).
 *
 * DESIGN. The fitting text is cut into chunks (mt_text_chunk_len, at most 64 bytes) and only
 * the distinct chunks are kept, each with its count: a 5 MB English text has about 60 thousand.
 * Each chunk is an array of ids (its bytes at first). A hash map holds the count of every
 * adjacent pair, weighted by the chunk counts. One merge step picks the pair of highest count
 * (ties: the smallest (left, right), compared as the 64-bit key left << 32 | right), then walks
 * the chunks: a chunk that contains the pair has its pairs subtracted, the pair replaced left to
 * right by the new id, and its new pairs added, so the counts stay exact without a recount.
 * Pairs whose count drops to 0 stay in the map and are never picked. The result depends only on
 * the multiset of chunks. Encoding repeats "merge every occurrence of the adjacent pair of lowest
 * merge index" inside a chunk until no pair of the chunk is a merge (GPT-2's rule); since fit and
 * encode cut chunks the same way, encoding the fitting text reproduces the fit's segmentation.
 * Called by text_tokenizer.c. Threading: pure functions of their arguments.
 * Tests: tests/unit/test_text.c.
 */
#include <string.h>

#include "alloc/mt_alloc.h"
#include "text/text_int.h"

typedef struct chunks {
    mt_text__map index;  /* hash of the bytes -> chunk index + 1 */
    unsigned char *text; /* owned; the chunks' bytes back to back */
    size_t *start;       /* owned; chunk w is text[start[w] .. start[w] + len0[w]) */
    uint32_t *len0;      /* owned; its length in bytes */
    uint64_t *count;     /* owned; occurrences */
    size_t n, cap, text_n, text_cap;
} chunks;

static void chunks_fini(chunks *c)
{
    mt_text__map_fini(&c->index);
    mt_free(c->text);
    mt_free(c->start);
    mt_free(c->len0);
    mt_free(c->count);
}

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* Count one occurrence of chunk p[0..n). Codes: RESOURCE_EXHAUSTED. */
static mt_code chunks_add(chunks *c, const unsigned char *p, size_t n)
{
    uint64_t h = fnv1a(p, n), *slot;

    for (;;) {
        if ((slot = mt_text__map_get(&c->index, h)) == NULL)
            break;
        size_t w = (size_t)*slot - 1;
        if (c->len0[w] == n && memcmp(c->text + c->start[w], p, n) == 0) {
            c->count[w]++;
            return MT_OK;
        }
        h = h * 0x9E3779B97F4A7C15ULL + 1; /* another chunk with this hash: probe on */
    }
    if (c->n == c->cap) {
        size_t cap = c->cap * 2 + 1024;
        size_t *s = mt_realloc(c->start, cap * sizeof(size_t));
        if (s != NULL)
            c->start = s;
        uint32_t *l = mt_realloc(c->len0, cap * sizeof(uint32_t));
        if (l != NULL)
            c->len0 = l;
        uint64_t *k = mt_realloc(c->count, cap * sizeof(uint64_t));
        if (k != NULL)
            c->count = k;
        if (s == NULL || l == NULL || k == NULL)
            return MT_RESOURCE_EXHAUSTED;
        c->cap = cap;
    }
    if (c->text_n + n > c->text_cap) {
        size_t cap = c->text_cap * 2 + 65536;
        unsigned char *t = mt_realloc(c->text, cap);
        if (t == NULL)
            return MT_RESOURCE_EXHAUSTED;
        c->text = t;
        c->text_cap = cap;
    }
    if ((slot = mt_text__map_put(&c->index, h)) == NULL)
        return MT_RESOURCE_EXHAUSTED;
    memcpy(c->text + c->text_n, p, n);
    c->start[c->n] = c->text_n;
    c->len0[c->n] = (uint32_t)n;
    c->count[c->n] = 1;
    c->text_n += n;
    *slot = ++c->n;
    return MT_OK;
}

/* Add w × every adjacent pair of s[0..n) to the pair counts (sign -1 subtracts). */
static mt_code count_pairs(mt_text__map *pairs, const uint32_t *s, size_t n, uint64_t w, int sign)
{
    for (size_t i = 0; i + 1 < n; i++) {
        uint64_t *slot = mt_text__map_put(pairs, (uint64_t)s[i] << 32 | s[i + 1]);
        if (slot == NULL)
            return MT_RESOURCE_EXHAUSTED;
        *slot = sign > 0 ? *slot + w : *slot - w;
    }
    return MT_OK;
}

/* Replace every occurrence of (a, b) in s[0..*n) by id, left to right. */
static void merge_in(uint32_t *s, size_t *n, uint32_t a, uint32_t b, uint32_t id)
{
    size_t r = 0, w = 0;

    while (r < *n) {
        if (r + 1 < *n && s[r] == a && s[r + 1] == b) {
            s[w++] = id;
            r += 2;
        } else {
            s[w++] = s[r++];
        }
    }
    *n = w;
}

static bool has_pair(const uint32_t *s, size_t n, uint32_t a, uint32_t b)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == a && s[i + 1] == b)
            return true;
    return false;
}

/* The merge loop over the distinct chunks; merges[2 × want] caller's; *k = merges learned. */
static mt_code learn(const chunks *c, size_t want, uint32_t *merges, size_t *k)
{
    uint32_t *sym = mt_malloc(c->text_n * sizeof(uint32_t) + 1);
    size_t *len = mt_malloc(c->n * sizeof(size_t) + 1);
    mt_text__map pairs;
    mt_code rc = MT_RESOURCE_EXHAUSTED;

    *k = 0;
    memset(&pairs, 0, sizeof(pairs));
    if (sym == NULL || len == NULL || mt_text__map_init(&pairs, 256) != MT_OK)
        goto done;
    rc = MT_OK;
    for (size_t w = 0; w < c->n && rc == MT_OK; w++) {
        for (size_t i = 0; i < c->len0[w]; i++)
            sym[c->start[w] + i] = c->text[c->start[w] + i];
        len[w] = c->len0[w];
        rc = count_pairs(&pairs, sym + c->start[w], len[w], c->count[w], 1);
    }
    while (rc == MT_OK && *k < want) {
        uint64_t best = 0, best_count = 0;
        uint32_t a, b, id = (uint32_t)(256 + *k);
        for (size_t i = 0; i < pairs.cap; i++)
            if (pairs.used[i] && pairs.vals[i] > 0 &&
                (pairs.vals[i] > best_count ||
                 (pairs.vals[i] == best_count && pairs.keys[i] < best))) {
                best = pairs.keys[i];
                best_count = pairs.vals[i];
            }
        if (best_count == 0)
            break; /* every chunk is one token */
        a = (uint32_t)(best >> 32);
        b = (uint32_t)best;
        for (size_t w = 0; w < c->n && rc == MT_OK; w++) {
            uint32_t *s = sym + c->start[w];
            if (!has_pair(s, len[w], a, b))
                continue;
            rc = count_pairs(&pairs, s, len[w], c->count[w], -1);
            merge_in(s, &len[w], a, b, id);
            if (rc == MT_OK)
                rc = count_pairs(&pairs, s, len[w], c->count[w], 1);
        }
        merges[2 * *k] = a;
        merges[2 * *k + 1] = b;
        (*k)++;
    }
done:
    mt_text__map_fini(&pairs);
    mt_free(sym);
    mt_free(len);
    return rc;
}

mt_code mt_text__bpe_fit(size_t vocab_size, const char *const *texts, const size_t *lens, size_t n,
                         mt_text_tokenizer **out, mt_err *err)
{
    size_t want = vocab_size - 256, k = 0;
    uint32_t *merges = mt_malloc(2 * want * sizeof(uint32_t) + 1);
    chunks c;
    mt_code rc = MT_OK;

    *out = NULL;
    memset(&c, 0, sizeof(c));
    if (merges == NULL || mt_text__map_init(&c.index, 1024) != MT_OK)
        rc = MT_RESOURCE_EXHAUSTED;
    for (size_t d = 0; d < n && rc == MT_OK; d++) {
        const unsigned char *p = (const unsigned char *)texts[d];
        for (size_t i = 0; i < lens[d] && rc == MT_OK;) {
            size_t l = mt_text_chunk_len(p + i, lens[d] - i);
            rc = chunks_add(&c, p + i, l);
            i += l;
        }
    }
    if (rc == MT_OK)
        rc = learn(&c, want, merges, &k);
    chunks_fini(&c);
    if (rc == MT_OK)
        rc = mt_text__build_bpe(vocab_size, merges, k, out, err);
    else
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tokenizer: out of memory");
    mt_free(merges);
    return rc;
}

/* Encode one chunk p[0..n) (n <= MT_TEXT__MAX_CHUNK) into ids; returns the count. */
static size_t encode_chunk(const mt_text_tokenizer *t, const unsigned char *p, size_t n,
                           uint32_t *ids)
{
    size_t k = n;

    for (size_t i = 0; i < n; i++)
        ids[i] = p[i];
    while (k > 1) {
        uint64_t best = UINT64_MAX, *r;
        for (size_t i = 0; i + 1 < k; i++)
            if ((r = mt_text__map_get(&t->ranks, (uint64_t)ids[i] << 32 | ids[i + 1])) != NULL &&
                *r < best)
                best = *r;
        if (best == UINT64_MAX)
            break;
        merge_in(ids, &k, t->merges[2 * best], t->merges[2 * best + 1], (uint32_t)(256 + best));
    }
    return k;
}

void mt_text__bpe_encode(const mt_text_tokenizer *t, const unsigned char *text, size_t len,
                         uint32_t *ids, size_t *n)
{
    size_t k = 0;

    for (size_t i = 0; i < len;) {
        size_t l = mt_text_chunk_len(text + i, len - i);
        k += encode_chunk(t, text + i, l, ids + k);
        i += l;
    }
    *n = k;
}
