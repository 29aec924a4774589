/* SPDX-License-Identifier: MIT */
/*
 * text_tokenizer.c — the tokenizer object shared by both kinds: building it from its entries,
 * encode/decode dispatch, and the vocabulary file (save, load with every check, read/write).
 *
 * Called by core/data (data_tokens.c), client/cmd_generate.c, tests and the fuzz target; calls
 * tokenizer_char.c and tokenizer_bpe.c for fitting and encoding, zlib for the file's crc32.
 * Invariants: off[] is non-decreasing with off[vocab_size] = total bytes; every id < used has
 * bytes (bpe) or is a character (char, ids 1..used-1); ids >= used have none.
 * Threading: immutable after construction. Tests: tests/unit/test_text.c, fuzz_vocab.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "text/text_int.h"

#define VOCAB_MAGIC "meshtrain-vocab 1"
#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD: what the unknown character decodes to */

/* ------------------------------------------------------------------ map */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

mt_code mt_text__map_init(mt_text__map *m, size_t hint)
{
    size_t cap = 16;

    memset(m, 0, sizeof(*m));
    while (cap < hint * 2 + 2)
        cap *= 2;
    m->keys = mt_malloc(cap * sizeof(uint64_t));
    m->vals = mt_malloc(cap * sizeof(uint64_t));
    m->used = mt_calloc(cap, 1);
    if (m->keys == NULL || m->vals == NULL || m->used == NULL) {
        mt_text__map_fini(m);
        return MT_RESOURCE_EXHAUSTED;
    }
    m->cap = cap;
    return MT_OK;
}

void mt_text__map_fini(mt_text__map *m)
{
    if (m == NULL)
        return;
    mt_free(m->keys);
    mt_free(m->vals);
    mt_free(m->used);
    memset(m, 0, sizeof(*m));
}

static size_t map_slot(const mt_text__map *m, uint64_t key)
{
    size_t i = (size_t)mix(key) & (m->cap - 1);

    while (m->used[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

uint64_t *mt_text__map_get(const mt_text__map *m, uint64_t key)
{
    size_t i;

    if (m->cap == 0)
        return NULL;
    i = map_slot(m, key);
    return m->used[i] ? &m->vals[i] : NULL;
}

uint64_t *mt_text__map_put(mt_text__map *m, uint64_t key)
{
    size_t i;

    if ((m->n + 1) * 2 > m->cap) {
        mt_text__map bigger;
        if (mt_text__map_init(&bigger, m->cap) != MT_OK)
            return NULL;
        for (size_t j = 0; j < m->cap; j++)
            if (m->used[j]) {
                size_t k = map_slot(&bigger, m->keys[j]);
                bigger.used[k] = 1;
                bigger.keys[k] = m->keys[j];
                bigger.vals[k] = m->vals[j];
            }
        bigger.n = m->n;
        mt_text__map_fini(m);
        *m = bigger;
    }
    i = map_slot(m, key);
    if (!m->used[i]) {
        m->used[i] = 1;
        m->keys[i] = key;
        m->vals[i] = 0;
        m->n++;
    }
    return &m->vals[i];
}

/* ------------------------------------------------------------------ helpers */

size_t mt_text__utf8_len(const unsigned char *p, size_t n)
{
    unsigned char b = p[0], lo = 0x80, hi = 0xBF;
    size_t need;

    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        need = 1;
    else if (b >= 0xE0 && b <= 0xEF)
        need = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4)
        need = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else
        return 1;
    if (n < need + 1 || p[1] < lo || p[1] > hi)
        return 1;
    for (size_t i = 2; i <= need; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 1;
    return need + 1;
}

int mt_text__bytes_cmp(const unsigned char *a, size_t na, const unsigned char *b, size_t nb)
{
    int c = memcmp(a, b, na < nb ? na : nb);

    if (c != 0)
        return c;
    return na < nb ? -1 : na > nb ? 1 : 0;
}

static bool is_space(unsigned char b)
{
    return b == ' ' || b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r';
}

/* 0 word, 1 space, 2 other */
static int byte_class(unsigned char b)
{
    if (b >= 0x80 || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'))
        return 0;
    return is_space(b) ? 1 : 2;
}

size_t mt_text_chunk_len(const unsigned char *text, size_t n)
{
    size_t i = 0;
    int c;

    if (n > MT_TEXT__MAX_CHUNK)
        n = MT_TEXT__MAX_CHUNK;
    if (text[0] == ' ' && n > 1 && byte_class(text[1]) != 1) {
        c = byte_class(text[1]);
        for (i = 2; i < n && byte_class(text[i]) == c;)
            i++;
        return i;
    }
    c = byte_class(text[0]);
    for (i = 1; i < n && byte_class(text[i]) == c;)
        i++;
    /* a run of spaces leaves its last space to a following " word" chunk */
    if (c == 1 && i > 1 && i < n && text[i - 1] == ' ')
        i--;
    return i;
}

/* ------------------------------------------------------------------ object */

const char *mt_text_tokenizer_type_name(mt_text_tokenizer_type t)
{
    return t == MT_TEXT_TOKENIZER_BPE ? "bpe" : "char";
}

mt_code mt_text_tokenizer_type_parse(const char *s, mt_text_tokenizer_type *out)
{
    if (s != NULL && strcmp(s, "char") == 0)
        *out = MT_TEXT_TOKENIZER_CHAR;
    else if (s != NULL && strcmp(s, "bpe") == 0)
        *out = MT_TEXT_TOKENIZER_BPE;
    else
        return MT_INVALID_ARGUMENT;
    return MT_OK;
}

void mt_text_tokenizer_free(mt_text_tokenizer *t)
{
    if (t == NULL)
        return;
    mt_free(t->bytes);
    mt_free(t->off);
    mt_free(t->merges);
    mt_text__map_fini(&t->ranks);
    mt_free(t);
}

static mt_code oom(mt_err *err)
{
    return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tokenizer: out of memory");
}

/* A tokenizer with off[] allocated and total bytes reserved. */
static mt_text_tokenizer *tok_alloc(mt_text_tokenizer_type type, size_t vocab_size, size_t used,
                                    size_t total)
{
    mt_text_tokenizer *t = mt_calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->type = type;
    t->vocab_size = vocab_size;
    t->used = used;
    t->off = mt_calloc(vocab_size + 1, sizeof(size_t));
    t->bytes = mt_malloc(total + 1);
    if (t->off == NULL || t->bytes == NULL) {
        mt_text_tokenizer_free(t);
        return NULL;
    }
    return t;
}

mt_code mt_text__build_char(size_t vocab_size, const unsigned char *const *chars,
                            const size_t *lens, size_t k, mt_text_tokenizer **out, mt_err *err)
{
    size_t total = sizeof(REPLACEMENT) - 1, pos;
    mt_text_tokenizer *t;

    *out = NULL;
    for (size_t i = 0; i < k; i++)
        total += lens[i];
    if ((t = tok_alloc(MT_TEXT_TOKENIZER_CHAR, vocab_size, k + 1, total)) == NULL)
        return oom(err);
    memcpy(t->bytes, REPLACEMENT, sizeof(REPLACEMENT) - 1);
    pos = sizeof(REPLACEMENT) - 1;
    t->off[1] = pos;
    for (size_t i = 0; i < k; i++) {
        memcpy(t->bytes + pos, chars[i], lens[i]);
        pos += lens[i];
        t->off[i + 2] = pos;
        if (lens[i] == 1)
            t->byte_id[chars[i][0]] = (uint32_t)(i + 1);
    }
    for (size_t i = k + 2; i <= vocab_size; i++)
        t->off[i] = pos;
    *out = t;
    return MT_OK;
}

mt_code mt_text__build_bpe(size_t vocab_size, const uint32_t *merges, size_t k,
                           mt_text_tokenizer **out, mt_err *err)
{
    size_t total = 256, pos;
    mt_text_tokenizer *t;
    size_t *len = mt_malloc((256 + k + 1) * sizeof(size_t));

    *out = NULL;
    if (len == NULL)
        return oom(err);
    for (size_t i = 0; i < 256; i++)
        len[i] = 1;
    for (size_t i = 0; i < k; i++)
        total += (len[256 + i] = len[merges[2 * i]] + len[merges[2 * i + 1]]);
    t = tok_alloc(MT_TEXT_TOKENIZER_BPE, vocab_size, 256 + k, total);
    mt_free(len);
    if (t == NULL)
        return oom(err);
    t->merges = mt_malloc(2 * k * sizeof(uint32_t) + 1);
    if (t->merges == NULL || mt_text__map_init(&t->ranks, k) != MT_OK) {
        mt_text_tokenizer_free(t);
        return oom(err);
    }
    if (k > 0)
        memcpy(t->merges, merges, 2 * k * sizeof(uint32_t));
    for (size_t i = 0; i < 256; i++) {
        t->bytes[i] = (unsigned char)i;
        t->off[i + 1] = i + 1;
    }
    pos = 256;
    for (size_t i = 0; i < k; i++) {
        uint32_t a = merges[2 * i], b = merges[2 * i + 1];
        size_t la = t->off[a + 1] - t->off[a], lb = t->off[b + 1] - t->off[b];
        uint64_t *slot = mt_text__map_put(&t->ranks, (uint64_t)a << 32 | b);
        if (slot == NULL) {
            mt_text_tokenizer_free(t);
            return oom(err);
        }
        *slot = i;
        memmove(t->bytes + pos, t->bytes + t->off[a], la);
        memmove(t->bytes + pos + la, t->bytes + t->off[b], lb);
        pos += la + lb;
        t->off[256 + i + 1] = pos;
    }
    for (size_t i = 256 + k + 1; i <= vocab_size; i++)
        t->off[i] = pos;
    *out = t;
    return MT_OK;
}

mt_code mt_text_tokenizer_fit(mt_text_tokenizer_type type, size_t vocab_size,
                              const char *const *texts, const size_t *lens, size_t n,
                              mt_text_tokenizer **out, mt_err *err)
{
    *out = NULL;
    if (vocab_size > MT_TEXT_MAX_VOCAB)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tokenizer: vocab_size %zu is above %u",
                          vocab_size, MT_TEXT_MAX_VOCAB);
    if (type == MT_TEXT_TOKENIZER_BPE) {
        if (vocab_size < 256)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "tokenizer: a bpe vocab_size is at least 256 (the bytes), not %zu",
                              vocab_size);
        return mt_text__bpe_fit(vocab_size, texts, lens, n, out, err);
    }
    if (vocab_size == 1)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "tokenizer: a char vocab_size is 0 (every character) or at least 2");
    return mt_text__char_fit(vocab_size, texts, lens, n, out, err);
}

mt_text_tokenizer_type mt_text_tokenizer_kind(const mt_text_tokenizer *t)
{
    return t->type;
}

size_t mt_text_tokenizer_vocab_size(const mt_text_tokenizer *t)
{
    return t->vocab_size;
}

size_t mt_text_tokenizer_used(const mt_text_tokenizer *t)
{
    return t->used;
}

const unsigned char *mt_text_tokenizer_token(const mt_text_tokenizer *t, uint32_t id, size_t *len)
{
    if (id >= t->vocab_size)
        return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

bool mt_text_tokenizer_equal(const mt_text_tokenizer *a, const mt_text_tokenizer *b)
{
    if (a->type != b->type || a->vocab_size != b->vocab_size || a->used != b->used)
        return false;
    if (memcmp(a->off, b->off, (a->vocab_size + 1) * sizeof(size_t)) != 0)
        return false;
    if (memcmp(a->bytes, b->bytes, a->off[a->vocab_size]) != 0)
        return false;
    return a->type != MT_TEXT_TOKENIZER_BPE ||
           memcmp(a->merges, b->merges, 2 * (a->used - 256) * sizeof(uint32_t)) == 0;
}

mt_code mt_text_tokenizer_encode(const mt_text_tokenizer *t, const char *text, size_t len,
                                 uint32_t **ids, size_t *n, mt_err *err)
{
    uint32_t *v = mt_malloc(len * sizeof(uint32_t) + 1);

    *ids = NULL;
    *n = 0;
    if (v == NULL)
        return oom(err);
    if (t->type == MT_TEXT_TOKENIZER_BPE)
        mt_text__bpe_encode(t, (const unsigned char *)text, len, v, n);
    else
        mt_text__char_encode(t, (const unsigned char *)text, len, v, n);
    if (*n == 0) {
        mt_free(v);
        return MT_OK;
    }
    *ids = v;
    return MT_OK;
}

mt_code mt_text_tokenizer_decode(const mt_text_tokenizer *t, const uint32_t *ids, size_t n,
                                 char **text, size_t *len, mt_err *err)
{
    size_t total = 0, pos = 0;
    char *s;

    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->vocab_size)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "token id %u is outside the vocabulary of %zu", ids[i],
                              t->vocab_size);
        total += t->off[ids[i] + 1] - t->off[ids[i]];
    }
    if ((s = mt_malloc(total + 1)) == NULL)
        return oom(err);
    for (size_t i = 0; i < n; i++) {
        size_t l = t->off[ids[i] + 1] - t->off[ids[i]];
        memcpy(s + pos, t->bytes + t->off[ids[i]], l);
        pos += l;
    }
    s[pos] = '\0';
    *text = s;
    *len = pos;
    return MT_OK;
}

/* ------------------------------------------------------------------ file */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int k;

    if (b->failed)
        return;
    for (;;) {
        va_start(ap, fmt);
        k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        char *grown = mt_realloc(b->p, b->cap * 2 + (size_t)k + 64);
        if (grown == NULL) {
            b->failed = true;
            return;
        }
        b->p = grown;
        b->cap = b->cap * 2 + (size_t)k + 64;
    }
}

mt_code mt_text_tokenizer_save(const mt_text_tokenizer *t, char **buf, size_t *len, mt_err *err)
{
    size_t k = t->type == MT_TEXT_TOKENIZER_BPE ? t->used - 256 : t->used - 1;
    sbuf b = {NULL, 0, 0, false};

    *buf = NULL;
    *len = 0;
    if ((b.p = mt_malloc(b.cap = 256)) == NULL)
        return oom(err);
    b.p[0] = '\0';
    sb_printf(&b, VOCAB_MAGIC "\ntype %s\nvocab_size %zu\nentries %zu\n",
              mt_text_tokenizer_type_name(t->type), t->vocab_size, k);
    for (size_t i = 0; i < k; i++) {
        if (t->type == MT_TEXT_TOKENIZER_BPE) {
            sb_printf(&b, "%u %u\n", t->merges[2 * i], t->merges[2 * i + 1]);
            continue;
        }
        for (size_t j = t->off[i + 1]; j < t->off[i + 2]; j++)
            sb_printf(&b, "%02x", t->bytes[j]);
        sb_printf(&b, "\n");
    }
    if (!b.failed) {
        unsigned long crc = crc32_z(0L, (const Bytef *)b.p, b.n);
        sb_printf(&b, "crc32 %08lx\n", crc);
    }
    if (b.failed) {
        mt_free(b.p);
        return oom(err);
    }
    *buf = b.p;
    *len = b.n;
    return MT_OK;
}

/* The line reader of the loader: line numbers for messages. */
typedef struct reader {
    const char *name, *buf;
    size_t len, pos, line;
    mt_err *err;
} reader;

static mt_code bad(reader *r, const char *what)
{
    return mt_err_set(r->err, MT_INVALID_ARGUMENT, "vocab %s: line %zu: %s", r->name, r->line,
                      what);
}

/* The next line (without '\n') in *s, *n; a line must end with '\n'. */
static mt_code next_line(reader *r, const char **s, size_t *n)
{
    const char *nl;

    r->line++;
    if (r->pos >= r->len)
        return bad(r, "unexpected end of file (truncated?)");
    nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
    if (nl == NULL)
        return bad(r, "line does not end with a newline (truncated?)");
    *s = r->buf + r->pos;
    *n = (size_t)(nl - *s);
    r->pos += *n + 1;
    return MT_OK;
}

/* A decimal number without sign or leading zeros, <= max, from s[0..n); *used = digits read. */
static bool parse_num(const char *s, size_t n, uint64_t max, uint64_t *out, size_t *used)
{
    uint64_t v = 0;
    size_t i = 0;

    while (i < n && s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > max || (i == 1 && s[0] == '0'))
            return false;
        i++;
    }
    *out = v;
    *used = i;
    return i > 0;
}

/* "KEY NUMBER" with NUMBER <= max. */
static mt_code keyed_num(reader *r, const char *key, uint64_t max, uint64_t *out)
{
    const char *s = NULL;
    size_t n = 0, k = strlen(key), used;
    mt_code rc = next_line(r, &s, &n);

    if (rc != MT_OK)
        return rc;
    if (n <= k + 1 || memcmp(s, key, k) != 0 || s[k] != ' ' ||
        !parse_num(s + k + 1, n - k - 1, max, out, &used) || used != n - k - 1)
        return mt_err_set(r->err, MT_INVALID_ARGUMENT,
                          "vocab %s: line %zu: expected '%s N' with N at most %" PRIu64, r->name,
                          r->line, key, max);
    return MT_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* char entries: k lines of lower-case hex, one character each, strictly ascending. */
static mt_code load_chars(reader *r, size_t vocab_size, size_t k, mt_text_tokenizer **out)
{
    unsigned char *store = mt_malloc(4 * k + 1);
    const unsigned char **chars = mt_malloc(k * sizeof(*chars) + 1);
    size_t *lens = mt_malloc(k * sizeof(size_t) + 1);
    mt_code rc = MT_OK;

    if (store == NULL || chars == NULL || lens == NULL) {
        rc = oom(r->err);
        goto done;
    }
    for (size_t i = 0; i < k && rc == MT_OK; i++) {
        const char *s;
        size_t n;
        unsigned char *c = store + 4 * i;
        if ((rc = next_line(r, &s, &n)) != MT_OK)
            break;
        if (n == 0 || n % 2 != 0 || n > 8) {
            rc = bad(r, "expected one character as 2 to 8 lower-case hex digits");
            break;
        }
        for (size_t j = 0; j < n / 2 && rc == MT_OK; j++) {
            int hi = hexval(s[2 * j]), lo = hexval(s[2 * j + 1]);
            if (hi < 0 || lo < 0)
                rc = bad(r, "expected one character as 2 to 8 lower-case hex digits");
            else
                c[j] = (unsigned char)(hi << 4 | lo);
        }
        if (rc != MT_OK)
            break;
        chars[i] = c;
        lens[i] = n / 2;
        if (mt_text__utf8_len(c, lens[i]) != lens[i])
            rc = bad(r, "not one character (a well-formed UTF-8 sequence or one byte)");
        else if (i > 0 && mt_text__bytes_cmp(chars[i - 1], lens[i - 1], c, lens[i]) >= 0)
            rc = bad(r, "characters are not in strictly ascending byte order");
    }
    if (rc == MT_OK)
        rc = mt_text__build_char(vocab_size, chars, lens, k, out, r->err);
done:
    mt_free(store);
    mt_free(chars);
    mt_free(lens);
    return rc;
}

/* bpe entries: k lines "LEFT RIGHT", both below 256 + the entry's index, no pair twice. */
static mt_code load_merges(reader *r, size_t vocab_size, size_t k, mt_text_tokenizer **out)
{
    uint32_t *m = mt_malloc(2 * k * sizeof(uint32_t) + 1);
    size_t *len = mt_malloc((256 + k) * sizeof(size_t));
    mt_text__map seen;
    mt_code rc = MT_OK;

    memset(&seen, 0, sizeof(seen));
    if (m == NULL || len == NULL || mt_text__map_init(&seen, k) != MT_OK) {
        rc = oom(r->err);
        goto done;
    }
    for (size_t i = 0; i < 256; i++)
        len[i] = 1;
    for (size_t i = 0; i < k && rc == MT_OK; i++) {
        const char *s;
        size_t n, u1 = 0, u2 = 0;
        uint64_t a = 0, b = 0, *slot;
        if ((rc = next_line(r, &s, &n)) != MT_OK)
            break;
        if (!parse_num(s, n, 255 + i, &a, &u1) || u1 + 1 >= n || s[u1] != ' ' ||
            !parse_num(s + u1 + 1, n - u1 - 1, 255 + i, &b, &u2) || u1 + 1 + u2 != n) {
            char what[96];
            snprintf(what, sizeof(what), "expected 'LEFT RIGHT' with ids below %zu", 256 + i);
            rc = bad(r, what);
            break;
        }
        if ((len[256 + i] = len[a] + len[b]) > MT_TEXT__MAX_CHUNK) {
            rc = bad(r, "the merged token is longer than 64 bytes");
            break;
        }
        if ((slot = mt_text__map_get(&seen, a << 32 | b)) != NULL) {
            rc = bad(r, "the same pair is merged twice");
            break;
        }
        if ((slot = mt_text__map_put(&seen, a << 32 | b)) == NULL) {
            rc = oom(r->err);
            break;
        }
        m[2 * i] = (uint32_t)a;
        m[2 * i + 1] = (uint32_t)b;
    }
    if (rc == MT_OK)
        rc = mt_text__build_bpe(vocab_size, m, k, out, r->err);
done:
    mt_text__map_fini(&seen);
    mt_free(m);
    mt_free(len);
    return rc;
}

mt_code mt_text_tokenizer_load(const char *name, const char *buf, size_t len,
                               mt_text_tokenizer **out, mt_err *err)
{
    reader r = {name, buf, len, 0, 0, err};
    mt_text_tokenizer_type type;
    uint64_t vocab_size = 0, k = 0, crc = 0;
    size_t n = 0, crc_at, used;
    const char *s = NULL;
    mt_text_tokenizer *t = NULL;
    char typ[8];
    mt_code rc;

    *out = NULL;
    if ((rc = next_line(&r, &s, &n)) != MT_OK)
        return rc;
    if (n != strlen(VOCAB_MAGIC) || memcmp(s, VOCAB_MAGIC, n) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "vocab %s: not a meshtrain vocabulary file (the first line is not '%s')",
                          name, VOCAB_MAGIC);
    if ((rc = next_line(&r, &s, &n)) != MT_OK)
        return rc;
    if (n < 8 || n > 9 || memcmp(s, "type ", 5) != 0)
        return bad(&r, "expected 'type char' or 'type bpe'");
    memcpy(typ, s + 5, n - 5);
    typ[n - 5] = '\0';
    if (mt_text_tokenizer_type_parse(typ, &type) != MT_OK)
        return bad(&r, "expected 'type char' or 'type bpe'");
    if ((rc = keyed_num(&r, "vocab_size", MT_TEXT_MAX_VOCAB, &vocab_size)) != MT_OK)
        return rc;
    if (vocab_size < (type == MT_TEXT_TOKENIZER_BPE ? 256 : 2))
        return bad(&r, type == MT_TEXT_TOKENIZER_BPE ? "a bpe vocab_size is at least 256"
                                                     : "a char vocab_size is at least 2");
    if ((rc = keyed_num(&r, "entries", MT_TEXT_MAX_VOCAB, &k)) != MT_OK)
        return rc;
    if (k > vocab_size - (type == MT_TEXT_TOKENIZER_BPE ? 256 : 1))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "vocab %s: line %zu: entries %" PRIu64 " but vocab_size %" PRIu64
                          " allows at most %" PRIu64,
                          name, r.line, k, vocab_size,
                          vocab_size - (type == MT_TEXT_TOKENIZER_BPE ? 256 : 1));
    if (k > len / 2) /* every entry line has at least two bytes: no allocation for a lie */
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "vocab %s: entries %" PRIu64 " do not fit in %zu bytes (truncated?)",
                          name, k, len);
    rc = type == MT_TEXT_TOKENIZER_BPE ? load_merges(&r, vocab_size, k, &t)
                                       : load_chars(&r, vocab_size, k, &t);
    if (rc != MT_OK)
        return rc;
    crc_at = r.pos;
    if ((rc = next_line(&r, &s, &n)) != MT_OK)
        goto fail;
    if (n != 14 || memcmp(s, "crc32 ", 6) != 0) {
        rc = bad(&r, "expected 'crc32 XXXXXXXX' after the entries");
        goto fail;
    }
    for (size_t i = 6; i < 14; i++) {
        int h = hexval(s[i]);
        if (h < 0) {
            rc = bad(&r, "expected 'crc32 XXXXXXXX' after the entries");
            goto fail;
        }
        crc = crc << 4 | (uint64_t)h;
    }
    if (r.pos != len) {
        rc = bad(&r, "trailing bytes after the crc32 line");
        goto fail;
    }
    used = (size_t)crc32_z(0L, (const Bytef *)buf, crc_at);
    if (used != crc) {
        rc = mt_err_set(err, MT_DATA_LOSS,
                        "vocab %s: crc32 mismatch: the file says %08" PRIx64
                        ", its contents give %08zx (corrupt)",
                        name, crc, used);
        goto fail;
    }
    *out = t;
    return MT_OK;
fail:
    mt_text_tokenizer_free(t);
    return rc;
}

static mt_code io_code(int e)
{
    return e == ENOENT                 ? MT_NOT_FOUND
           : e == EACCES || e == EPERM ? MT_PERMISSION_DENIED
                                       : MT_INTERNAL;
}

mt_code mt_text_tokenizer_read_file(const char *path, mt_text_tokenizer **out, mt_err *err)
{
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    mt_code rc;

    *out = NULL;
    if (fp == NULL)
        return mt_err_set(err, io_code(errno), "open %s: %s", path, strerror(errno));
    do {
        if (len == cap) {
            char *grown = mt_realloc(buf, cap = cap * 2 + 4096);
            if (grown == NULL) {
                mt_free(buf);
                fclose(fp);
                return oom(err);
            }
            buf = grown;
        }
        got = fread(buf + len, 1, cap - len, fp);
        len += got;
    } while (got > 0 && len <= (size_t)64 << 20);
    if (ferror(fp) || len > (size_t)64 << 20)
        rc = mt_err_set(err, ferror(fp) ? MT_DATA_LOSS : MT_INVALID_ARGUMENT, "vocab %s: %s", path,
                        ferror(fp) ? "read error" : "larger than 64 MiB: not a vocabulary file");
    else
        rc = mt_text_tokenizer_load(path, buf, len, out, err);
    fclose(fp);
    mt_free(buf);
    return rc;
}

mt_code mt_text_tokenizer_write_file(const mt_text_tokenizer *t, const char *path, mt_err *err)
{
    char *buf = NULL, tmp[4096];
    size_t len = 0;
    FILE *fp;
    mt_code rc = mt_text_tokenizer_save(t, &buf, &len, err);

    if (rc != MT_OK)
        return rc;
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= sizeof(tmp)) {
        mt_free(buf);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "vocab %s: path too long", path);
    }
    fp = fopen(tmp, "wb");
    if (fp == NULL) {
        rc = mt_err_set(err, io_code(errno), "open %s: %s", tmp, strerror(errno));
    } else {
        bool ok = fwrite(buf, 1, len, fp) == len;
        ok = fflush(fp) == 0 && ok;
        ok = fsync(fileno(fp)) == 0 && ok;
        if (fclose(fp) != 0 || !ok || rename(tmp, path) != 0) {
            rc = mt_err_set(err, io_code(errno), "write %s: %s", path, strerror(errno));
            unlink(tmp);
        }
    }
    mt_free(buf);
    return rc;
}
