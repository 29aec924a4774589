/* SPDX-License-Identifier: MIT */
/*
 * test_text.c — core/text (mt_text.h): the byte-pair chunker, the char and bpe tokenizers (fits
 * worked out by hand, the tie rule, round trips), the vocabulary file (round trip and every
 * corruption the loader must name), sampling, the generation loop over a fake model, and the
 * next-token sequence cutter.
 */
#include "mt_test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "text/mt_text.h"

static mt_text_tokenizer *fit1(mt_text_tokenizer_type type, size_t vocab, const char *text)
{
    const char *texts[1] = {text};
    size_t lens[1] = {strlen(text)};
    mt_text_tokenizer *t = NULL;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_text_tokenizer_fit(type, vocab, texts, lens, 1, &t, &err), MT_OK);
    return t;
}

/* Encode text with t and check the ids against want[0..n). */
static void expect_ids(const mt_text_tokenizer *t, const char *text, size_t len,
                       const uint32_t *want, size_t n)
{
    uint32_t *ids = NULL;
    size_t got = 0;

    assert_int_equal(mt_text_tokenizer_encode(t, text, len, &ids, &got, NULL), MT_OK);
    assert_int_equal(got, n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want[i])
            fail_msg("id %zu: got %u, want %u", i, ids[i], want[i]);
    mt_free(ids);
}

/* The chunks of s joined by '|'. */
static void chunks_of(const char *s, char *out, size_t cap)
{
    size_t n = strlen(s), used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n;) {
        size_t l = mt_text_chunk_len((const unsigned char *)s + i, n - i);
        used += (size_t)snprintf(out + used, cap - used, "%s%.*s", i ? "|" : "", (int)l, s + i);
        i += l;
    }
}

static void test_text_chunks_follow_the_documented_rule(void **state)
{
    char out[256], longrun[100];
    (void)state;
    chunks_of("Hello, world!  It's 42.\n\nNew", out, sizeof(out));
    assert_string_equal(out, "Hello|,| world|!| | It|'|s| 42|.|\n\n|New");
    chunks_of("a  b -- c", out, sizeof(out));
    assert_string_equal(out, "a| | b| --| c");
    chunks_of("caf\xc3\xa9 \xff", out, sizeof(out));
    assert_string_equal(out, "caf\xc3\xa9| \xff");
    memset(longrun, '=', 99);
    longrun[99] = '\0';
    assert_int_equal(mt_text_chunk_len((const unsigned char *)longrun, 99), 64);
}

static void test_text_char_fit_orders_by_bytes_and_round_trips(void **state)
{
    mt_text_tokenizer *t = fit1(MT_TEXT_TOKENIZER_CHAR, 0, "hello h\xc3\xa9llo");
    uint32_t *ids = NULL;
    size_t n = 0, len = 0;
    char *back = NULL;
    const unsigned char *tok;
    (void)state;
    /* characters: ' ' e h l o é → ids 1..6 in byte order, 0 unknown */
    assert_int_equal(mt_text_tokenizer_vocab_size(t), 7);
    assert_int_equal(mt_text_tokenizer_used(t), 7);
    tok = mt_text_tokenizer_token(t, 6, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(tok, "\xc3\xa9", 2);
    expect_ids(t, "oh x\xc3\xa9", 6, (const uint32_t[]){5, 3, 1, 0, 6}, 5); /* x: unknown */
    assert_int_equal(mt_text_tokenizer_encode(t, "oh x\xc3\xa9", 6, &ids, &n, NULL), MT_OK);
    assert_int_equal(mt_text_tokenizer_decode(t, ids, n, &back, &len, NULL), MT_OK);
    assert_string_equal(back, "oh \xEF\xBF\xBD\xc3\xa9");
    mt_free(back);
    mt_free(ids);
    assert_int_equal(mt_text_tokenizer_encode(t, "hello", 5, &ids, &n, NULL), MT_OK);
    assert_int_equal(mt_text_tokenizer_decode(t, ids, n, &back, &len, NULL), MT_OK);
    assert_string_equal(back, "hello");
    mt_free(back);
    mt_free(ids);
    mt_text_tokenizer_free(t);
}

static void test_text_char_vocab_size_keeps_the_most_frequent(void **state)
{
    /* counts: a 3, b 2, c 2, d 1; vocab 3 keeps a and b (b wins the tie with c by byte order) */
    mt_text_tokenizer *t = fit1(MT_TEXT_TOKENIZER_CHAR, 3, "aaabbccd");
    mt_text_tokenizer *big = fit1(MT_TEXT_TOKENIZER_CHAR, 10, "ab");
    uint32_t bad = 10;
    size_t len = 0;
    char *s = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    expect_ids(t, "abcd", 4, (const uint32_t[]){1, 2, 0, 0}, 4);
    /* a larger vocab than characters: the ids above are unused and decode to nothing */
    assert_int_equal(mt_text_tokenizer_vocab_size(big), 10);
    assert_int_equal(mt_text_tokenizer_used(big), 3);
    assert_non_null(mt_text_tokenizer_token(big, 9, &len));
    assert_int_equal(len, 0);
    assert_null(mt_text_tokenizer_token(big, 10, &len));
    assert_int_equal(mt_text_tokenizer_decode(big, &bad, 1, &s, &len, &err), MT_INVALID_ARGUMENT);
    assert_string_equal(err.msg, "token id 10 is outside the vocabulary of 10");
    mt_text_tokenizer_free(t);
    mt_text_tokenizer_free(big);
}

/* "ab ab ab": chunks ab, " ab", " ab"; (a,b) 3 → 256; then (' ', 256) 2 → 257; then no pair. */
static void test_text_bpe_fit_by_hand(void **state)
{
    mt_text_tokenizer *t = fit1(MT_TEXT_TOKENIZER_BPE, 300, "ab ab ab");
    size_t len = 0;
    const unsigned char *tok;
    (void)state;
    assert_int_equal(mt_text_tokenizer_vocab_size(t), 300);
    assert_int_equal(mt_text_tokenizer_used(t), 258);
    tok = mt_text_tokenizer_token(t, 257, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(tok, " ab", 3);
    expect_ids(t, "ab ab abc", 9, (const uint32_t[]){256, 257, 257, 'c'}, 4);
    mt_text_tokenizer_free(t);
}

/* "ab cd": every pair counts 1; ties go to the smallest (left, right): (' ', c), (a, b),
 * then (256, d). */
static void test_text_bpe_ties_go_to_the_smallest_pair(void **state)
{
    mt_text_tokenizer *t = fit1(MT_TEXT_TOKENIZER_BPE, 259, "ab cd");
    char *buf = NULL;
    size_t len = 0;
    (void)state;
    assert_int_equal(mt_text_tokenizer_save(t, &buf, &len, NULL), MT_OK);
    assert_non_null(strstr(buf, "meshtrain-vocab 1\ntype bpe\nvocab_size 259\nentries 3\n"
                                "32 99\n97 98\n256 100\ncrc32 "));
    mt_free(buf);
    mt_text_tokenizer_free(t);
}

static void test_text_bpe_round_trips_any_bytes(void **state)
{
    static const char text[] = "The cat sat on the mat. The mat sat on the cat!\n\tcaf\xc3\xa9";
    static const unsigned char odd[] = {0, 255, 'a', 0xc3, ' ', ' ', '\n', 0xe2, 0x82, 'x', 0};
    mt_text_tokenizer *t = fit1(MT_TEXT_TOKENIZER_BPE, 300, text);
    uint32_t *ids = NULL;
    size_t n = 0, len = 0;
    char *back = NULL;
    (void)state;
    assert_int_equal(mt_text_tokenizer_encode(t, text, strlen(text), &ids, &n, NULL), MT_OK);
    assert_true(n < strlen(text) / 2);
    assert_int_equal(mt_text_tokenizer_decode(t, ids, n, &back, &len, NULL), MT_OK);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(back, text, len);
    mt_free(back);
    mt_free(ids);
    assert_int_equal(mt_text_tokenizer_encode(t, (const char *)odd, sizeof(odd), &ids, &n, NULL),
                     MT_OK);
    assert_int_equal(mt_text_tokenizer_decode(t, ids, n, &back, &len, NULL), MT_OK);
    assert_int_equal(len, sizeof(odd));
    assert_memory_equal(back, odd, len);
    mt_free(back);
    mt_free(ids);
    /* empty text: no ids */
    assert_int_equal(mt_text_tokenizer_encode(t, "", 0, &ids, &n, NULL), MT_OK);
    assert_int_equal(n, 0);
    assert_null(ids);
    mt_text_tokenizer_free(t);
}

static void test_text_fit_refuses_bad_vocab_sizes(void **state)
{
    const char *texts[1] = {"abc"};
    size_t lens[1] = {3}, zero[1] = {0};
    mt_text_tokenizer *t = (mt_text_tokenizer *)1;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_text_tokenizer_fit(MT_TEXT_TOKENIZER_BPE, 255, texts, lens, 1, &t, &err),
                     MT_INVALID_ARGUMENT);
    assert_null(t);
    assert_non_null(strstr(err.msg, "at least 256"));
    assert_int_equal(mt_text_tokenizer_fit(MT_TEXT_TOKENIZER_CHAR, 1, texts, lens, 1, &t, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_text_tokenizer_fit(MT_TEXT_TOKENIZER_CHAR, MT_TEXT_MAX_VOCAB + 1, texts,
                                           lens, 1, &t, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_text_tokenizer_fit(MT_TEXT_TOKENIZER_CHAR, 0, texts, zero, 1, &t, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "no text"));
}

static void test_text_save_load_round_trip(void **state)
{
    mt_text_tokenizer *ts[2] = {fit1(MT_TEXT_TOKENIZER_CHAR, 40, "caf\xc3\xa9 \xff\n\tz"),
                                fit1(MT_TEXT_TOKENIZER_BPE, 280, "the cat, the hat; the mat")};
    (void)state;
    for (int i = 0; i < 2; i++) {
        char *buf = NULL;
        size_t len = 0;
        mt_text_tokenizer *back = NULL;
        mt_err err = MT_ERR_INIT;
        assert_int_equal(mt_text_tokenizer_save(ts[i], &buf, &len, NULL), MT_OK);
        assert_int_equal(strlen(buf), len);
        assert_int_equal(mt_text_tokenizer_load("v", buf, len, &back, &err), MT_OK);
        assert_true(mt_text_tokenizer_equal(ts[i], back));
        mt_text_tokenizer_free(back);
        mt_free(buf);
        mt_text_tokenizer_free(ts[i]);
    }
}

/* A file image with a correct crc32 line (zlib's, as the loader computes) after `body`. */
static char *with_crc(const char *body)
{
    static char out[1024];
    unsigned long crc = crc32(0L, (const Bytef *)body, (uInt)strlen(body));

    snprintf(out, sizeof(out), "%scrc32 %08lx\n", body, crc);
    return out;
}

static void expect_bad(const char *image, mt_code code, const char *needle)
{
    mt_text_tokenizer *t = (mt_text_tokenizer *)1;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_text_tokenizer_load("vocab.txt", image, strlen(image), &t, &err), code);
    assert_null(t);
    if (strstr(err.msg, needle) == NULL || strstr(err.msg, "vocab.txt") == NULL)
        fail_msg("message '%s' lacks '%s' or the file name", err.msg, needle);
}

static void test_text_load_names_every_corruption(void **state)
{
    char buf[1100];
    (void)state;
    expect_bad("", MT_INVALID_ARGUMENT, "truncated");
    expect_bad("meshtrain-tfidf 1\n", MT_INVALID_ARGUMENT, "not a meshtrain vocabulary file");
    expect_bad("meshtrain-vocab 1\ntype word\n", MT_INVALID_ARGUMENT, "line 2: expected 'type");
    expect_bad("meshtrain-vocab 1\ntype bpe\nvocab_size 100\n", MT_INVALID_ARGUMENT,
               "line 3: a bpe vocab_size is at least 256");
    expect_bad("meshtrain-vocab 1\ntype bpe\nvocab_size 0300\n", MT_INVALID_ARGUMENT,
               "line 3: expected 'vocab_size N'");
    expect_bad("meshtrain-vocab 1\ntype bpe\nvocab_size 280\nentries 30\n", MT_INVALID_ARGUMENT,
               "entries 30 but vocab_size 280 allows at most 24");
    expect_bad("meshtrain-vocab 1\ntype bpe\nvocab_size 280\nentries 2\n97 98\n",
               MT_INVALID_ARGUMENT, "line 6: unexpected end of file");
    expect_bad("meshtrain-vocab 1\ntype bpe\nvocab_size 280\nentries 1\n97 256\n",
               MT_INVALID_ARGUMENT, "line 5: expected 'LEFT RIGHT' with ids below 256");
    expect_bad("meshtrain-vocab 1\ntype bpe\nvocab_size 280\nentries 2\n97 98\n97 98\n",
               MT_INVALID_ARGUMENT, "line 6: the same pair is merged twice");
    expect_bad("meshtrain-vocab 1\ntype char\nvocab_size 5\nentries 2\n62\n61\n",
               MT_INVALID_ARGUMENT, "line 6: characters are not in strictly ascending");
    expect_bad("meshtrain-vocab 1\ntype char\nvocab_size 5\nentries 1\n6162\n", MT_INVALID_ARGUMENT,
               "line 5: not one character");
    expect_bad("meshtrain-vocab 1\ntype char\nvocab_size 5\nentries 1\n6G\n", MT_INVALID_ARGUMENT,
               "line 5: expected one character");
    expect_bad("meshtrain-vocab 1\ntype char\nvocab_size 5\nentries 1\n61\ncrc32 00000000\n",
               MT_DATA_LOSS, "crc32 mismatch");
    snprintf(buf, sizeof(buf), "%sextra",
             with_crc("meshtrain-vocab 1\ntype char\nvocab_size "
                      "5\nentries 1\n61\n"));
    expect_bad(buf, MT_INVALID_ARGUMENT, "trailing bytes");
    /* a doubling chain of merges would make tokens of 2^k bytes: refused past 64 */
    expect_bad("meshtrain-vocab 1\ntype bpe\nvocab_size 300\nentries 7\n97 97\n256 256\n257 257\n"
               "258 258\n259 259\n260 260\n261 261\n",
               MT_INVALID_ARGUMENT, "line 11: the merged token is longer than 64 bytes");
    {
        mt_text_tokenizer *t = NULL;
        const char *ok = with_crc("meshtrain-vocab 1\ntype char\nvocab_size 5\nentries 1\n61\n");
        assert_int_equal(mt_text_tokenizer_load("v", ok, strlen(ok), &t, NULL), MT_OK);
        mt_text_tokenizer_free(t);
    }
}

static void test_text_file_round_trip_and_missing_file(void **state)
{
    char dir[] = "/tmp/mt_text_XXXXXX", path[64];
    mt_text_tokenizer *t = fit1(MT_TEXT_TOKENIZER_BPE, 270, "hello hello world"), *back = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/vocab", dir);
    assert_int_equal(mt_text_tokenizer_write_file(t, path, &err), MT_OK);
    assert_int_equal(mt_text_tokenizer_read_file(path, &back, &err), MT_OK);
    assert_true(mt_text_tokenizer_equal(t, back));
    mt_text_tokenizer_free(back);
    unlink(path);
    assert_int_equal(mt_text_tokenizer_read_file(path, &back, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, path));
    rmdir(dir);
    mt_text_tokenizer_free(t);
}

static void test_text_fit_and_load_survive_allocation_failures(void **state)
{
    const char *texts[2] = {"the cat sat on the mat", "caf\xc3\xa9 au lait"};
    size_t lens[2] = {strlen(texts[0]), strlen(texts[1])};
    (void)state;
    for (int type = 0; type < 2; type++) {
        mt_text_tokenizer *ref = NULL;
        char *buf = NULL;
        size_t len = 0;
        assert_int_equal(mt_text_tokenizer_fit((mt_text_tokenizer_type)type, type ? 280 : 0, texts,
                                               lens, 2, &ref, NULL),
                         MT_OK);
        assert_int_equal(mt_text_tokenizer_save(ref, &buf, &len, NULL), MT_OK);
        for (long n = 0;; n++) {
            mt_text_tokenizer *t = NULL, *u = NULL;
            mt_code a, b;
            mt_alloc_fail_after(n);
            a = mt_text_tokenizer_fit((mt_text_tokenizer_type)type, type ? 280 : 0, texts, lens, 2,
                                      &t, NULL);
            b = mt_text_tokenizer_load("v", buf, len, &u, NULL);
            mt_alloc_fail_reset();
            assert_true(a == MT_OK || a == MT_RESOURCE_EXHAUSTED);
            assert_true(b == MT_OK || b == MT_RESOURCE_EXHAUSTED);
            assert_true((a == MT_OK) == (t != NULL));
            assert_true((b == MT_OK) == (u != NULL));
            if (a == MT_OK)
                assert_true(mt_text_tokenizer_equal(ref, t));
            mt_text_tokenizer_free(t);
            mt_text_tokenizer_free(u);
            if (a == MT_OK && b == MT_OK)
                break;
        }
        mt_free(buf);
        mt_text_tokenizer_free(ref);
    }
}

static void test_text_sample_greedy_top_k_and_seed(void **state)
{
    const float l[5] = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f};
    mt_text_sample_opts o = MT_TEXT_SAMPLE_OPTS_DEFAULTS;
    uint32_t id = 99, again = 98;
    size_t hits[5] = {0};
    (void)state;
    o.temperature = 0.0f;
    assert_int_equal(mt_text_sample(l, 5, &o, 0, &id, NULL), MT_OK);
    assert_int_equal(id, 1); /* ties to the lowest id */
    o.temperature = 1.0f;
    o.top_k = 1; /* only id 1 is kept (id 2 ties and loses) */
    for (uint64_t i = 0; i < 50; i++) {
        assert_int_equal(mt_text_sample(l, 5, &o, i, &id, NULL), MT_OK);
        assert_int_equal(id, 1);
    }
    o.top_k = 3; /* ids 0, 1, 2 */
    o.seed = 7;
    for (uint64_t i = 0; i < 3000; i++) {
        assert_int_equal(mt_text_sample(l, 5, &o, i, &id, NULL), MT_OK);
        assert_int_equal(mt_text_sample(l, 5, &o, i, &again, NULL), MT_OK);
        assert_int_equal(id, again); /* a pure function of (seed, index) */
        hits[id]++;
    }
    assert_int_equal(hits[3] + hits[4], 0);
    /* p(0) = e^1 / (e^1 + 2 e^3) = 0.0634: 190 of 3000 expected; the draws are fixed by the
       seed, so this bound is not a matter of luck from run to run */
    assert_in_range(hits[0], 120, 260);
    assert_in_range(hits[1], 1250, 1560);
    assert_in_range(hits[2], 1250, 1560);
}

static void test_text_sample_refuses_bad_input(void **state)
{
    const float nan_l[2] = {0.0f, NAN};
    mt_text_sample_opts o = MT_TEXT_SAMPLE_OPTS_DEFAULTS;
    uint32_t id;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_text_sample(nan_l, 2, &o, 0, &id, &err), MT_INVALID_ARGUMENT);
    assert_string_equal(err.msg, "sample: logit 1 is NaN");
    assert_int_equal(mt_text_sample(nan_l, 0, &o, 0, &id, &err), MT_INVALID_ARGUMENT);
    o.temperature = -1.0f;
    assert_int_equal(mt_text_sample(nan_l, 1, &o, 0, &id, &err), MT_INVALID_ARGUMENT);
}

/* A fake model over V = 8: the next token is (last + 1) % 8 by a wide margin; it checks that
 * it is given the last block_size tokens of the sequence. */
typedef struct fake_model {
    float logits[8];
    size_t block, calls;
    uint32_t expect_last;
} fake_model;

static mt_code fake_logits(void *ctx, const uint32_t *ids, size_t n, const float **logits,
                           mt_err *err)
{
    fake_model *m = ctx;
    (void)err;
    assert_true(n >= 1 && n <= m->block);
    if (m->calls > 0)
        assert_int_equal(ids[n - 1], m->expect_last);
    for (int i = 0; i < 8; i++)
        m->logits[i] = i == (int)((ids[n - 1] + 1) % 8) ? 20.0f : 0.0f;
    m->expect_last = (ids[n - 1] + 1) % 8;
    m->calls++;
    *logits = m->logits;
    return MT_OK;
}

static void test_text_generate_loops_over_the_last_block(void **state)
{
    const uint32_t prompt[3] = {5, 6, 7};
    fake_model m = {{0}, 2, 0, 0};
    mt_text_sample_opts o = MT_TEXT_SAMPLE_OPTS_DEFAULTS;
    uint32_t *out = NULL;
    size_t n = 0;
    mt_err err = MT_ERR_INIT;
    (void)state;
    o.temperature = 0.0f;
    assert_int_equal(mt_text_generate(prompt, 3, 10, 2, 8, &o, fake_logits, &m, &out, &n, &err),
                     MT_OK);
    assert_int_equal(n, 13);
    assert_int_equal(m.calls, 10);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(out[i], (5 + i) % 8);
    mt_free(out);
    assert_int_equal(mt_text_generate(prompt, 0, 1, 2, 8, &o, fake_logits, &m, &out, &n, &err),
                     MT_INVALID_ARGUMENT);
    assert_null(out);
}

static void test_text_sequences_are_next_token_pairs(void **state)
{
    const uint32_t ids[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    float x[9];
    int32_t y[9];
    (void)state;
    assert_int_equal(mt_text_sequence_count(10, 3), 3);
    assert_int_equal(mt_text_sequence_count(9, 3), 2); /* the last target needs a 10th token */
    assert_int_equal(mt_text_sequence_count(1, 3), 0);
    assert_int_equal(mt_text_sequence_count(10, 0), 0);
    mt_text_sequence_cut(ids, 10, 3, x, y);
    for (int e = 0; e < 3; e++)
        for (int j = 0; j < 3; j++) {
            assert_true(x[e * 3 + j] == (float)(e * 3 + j));
            assert_int_equal(y[e * 3 + j], e * 3 + j + 1);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_chunks_follow_the_documented_rule),
        cmocka_unit_test(test_text_char_fit_orders_by_bytes_and_round_trips),
        cmocka_unit_test(test_text_char_vocab_size_keeps_the_most_frequent),
        cmocka_unit_test(test_text_bpe_fit_by_hand),
        cmocka_unit_test(test_text_bpe_ties_go_to_the_smallest_pair),
        cmocka_unit_test(test_text_bpe_round_trips_any_bytes),
        cmocka_unit_test(test_text_fit_refuses_bad_vocab_sizes),
        cmocka_unit_test(test_text_save_load_round_trip),
        cmocka_unit_test(test_text_load_names_every_corruption),
        cmocka_unit_test(test_text_file_round_trip_and_missing_file),
        cmocka_unit_test(test_text_fit_and_load_survive_allocation_failures),
        cmocka_unit_test(test_text_sample_greedy_top_k_and_seed),
        cmocka_unit_test(test_text_sample_refuses_bad_input),
        cmocka_unit_test(test_text_generate_loops_over_the_last_block),
        cmocka_unit_test(test_text_sequences_are_next_token_pairs),
    };
    return MT_RUN_TESTS(tests);
}
