/* SPDX-License-Identifier: MIT */
/*
 * test_data_tokens.c — the "tokens" dataset format of core/data: its spec fields and their
 * errors, the tokenizer fitted on the TRAINING files only, the example counts of the next-token
 * cut ((tokens - 1) / block_size per file) and the examples themselves (ids in, next ids out).
 */
#include "mt_test.h"

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "data_test_util.h"

static void expect_spec_error(const char *json, const char *needle)
{
    mt_data_spec *s = (mt_data_spec *)1;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(dt_spec(json, dir, &s, &err), MT_INVALID_ARGUMENT);
    assert_null(s);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_data_tokens_spec_fields(void **state)
{
    mt_data_spec *s = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "a.txt", "hello");
    assert_int_equal(dt_spec("{\"format\": \"tokens\", \"train\": \"a.txt\", \"block_size\": 8, "
                             "\"tokenizer\": {\"type\": \"bpe\", \"vocab_size\": 300}}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(s->format, MT_DATA_FORMAT_TOKENS);
    assert_int_equal(s->tokenizer, MT_TEXT_TOKENIZER_BPE);
    assert_int_equal(s->vocab_size, 300);
    assert_int_equal(s->block_size, 8);
    mt_data_spec_free(s);
    assert_int_equal(
        dt_spec("{\"format\": \"tokens\", \"train\": \"a.txt\", \"block_size\": 4}", dir, &s, &err),
        MT_OK);
    assert_int_equal(s->tokenizer, MT_TEXT_TOKENIZER_CHAR); /* default: every character */
    assert_int_equal(s->vocab_size, 0);
    mt_data_spec_free(s);
    expect_spec_error("{\"format\": \"tokens\", \"train\": \"a.txt\"}",
                      "dataset.block_size: required for tokens datasets");
    expect_spec_error("{\"format\": \"tokens\", \"train\": \"a.txt\", \"block_size\": 4, "
                      "\"tokenizer\": {\"type\": \"bpe\"}}",
                      "dataset.tokenizer.vocab_size: required for a bpe tokenizer");
    expect_spec_error("{\"format\": \"tokens\", \"train\": \"a.txt\", \"block_size\": 4, "
                      "\"tokenizer\": {\"type\": \"bpe\", \"vocab_size\": 100}}",
                      "dataset.tokenizer.vocab_size: 100 is too small (bpe: at least 256");
    expect_spec_error("{\"format\": \"tokens\", \"train\": \"a.txt\", \"block_size\": 4, "
                      "\"tokenizer\": {\"type\": \"word\"}}",
                      "dataset.tokenizer.type: must be \"char\" or \"bpe\"");
    expect_spec_error("{\"format\": \"tokens\", \"train\": \"a.txt\", \"block_size\": 4, "
                      "\"tokenizer\": {\"merges\": 3}}",
                      "dataset.tokenizer.merges: unknown field");
    expect_spec_error("{\"format\": \"tokens\", \"train\": \"a.txt\", \"block_size\": 0}",
                      "dataset.block_size");
    expect_spec_error("{\"format\": \"text\", \"train\": \"a.txt\", \"block_size\": 4}",
                      "dataset.block_size: only token-sequence (\"format\": \"tokens\") datasets");
}

static void test_data_tokens_counts_next_token_examples(void **state)
{
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL, *ts = NULL;
    mt_text_tokenizer *fit = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "train1.txt", "abcabcabcab");   /* 11 chars: (11-1)/3 = 3 examples */
    dt_write(dir, "train2.txt", "cab");           /* 3 chars: 0 examples */
    dt_write(dir, "val.txt", "zzzzzzzzzzabc\n!"); /* 15 chars, z \n ! unknown: 4 examples */
    assert_int_equal(dt_spec("{\"format\": \"tokens\", \"train\": [\"train1.txt\", \"train2.txt\"],"
                             " \"test\": \"val.txt\", \"block_size\": 3}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_file_size(ds, 0), 3);
    assert_int_equal(mt_data_dataset_file_size(ds, 1), 0);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TEST, NULL, &ts, &err), MT_OK);
    assert_int_equal(mt_data_dataset_size(ts), 4);
    /* fitted on the training files only, the same on every open */
    assert_non_null(mt_data_dataset_tokenizer(ds));
    assert_int_equal(mt_text_tokenizer_vocab_size(mt_data_dataset_tokenizer(ds)), 4);
    assert_true(
        mt_text_tokenizer_equal(mt_data_dataset_tokenizer(ds), mt_data_dataset_tokenizer(ts)));
    assert_int_equal(mt_data_tokenizer_fit_spec(s, &fit, &err), MT_OK);
    assert_true(mt_text_tokenizer_equal(fit, mt_data_dataset_tokenizer(ds)));
    mt_text_tokenizer_free(fit);
    mt_data_dataset_free(ts);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
}

/* "abcabcabcab" with a char tokenizer (a 1, b 2, c 3), block 3: x = abc abc abc, y = bca bca bca,
 * as float ids and (n, 3) int32 labels. */
static void test_data_tokens_load_cuts_inputs_and_next_tokens(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "train.txt", "abcabcabcab");
    assert_int_equal(dt_load0("{\"format\": \"tokens\", \"train\": \"train.txt\", "
                              "\"block_size\": 3, \"tokenizer\": {\"vocab_size\": 8}}",
                              &b, &err),
                     MT_OK);
    assert_int_equal(b.n, 3);
    assert_int_equal(b.dim, 3);
    assert_int_equal(b.y_dim, 3);
    for (size_t i = 0; i < 9; i++) {
        assert_true(b.x[i] == (float)(1 + i % 3));
        assert_int_equal(b.y[i], 1 + (i + 1) % 3);
    }
    mt_data_block_fini(&b);
}

static void test_data_tokens_missing_file_is_named(void **state)
{
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_text_tokenizer *fit = (mt_text_tokenizer *)1;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "a.txt", "abc");
    assert_int_equal(
        dt_spec("{\"format\": \"tokens\", \"train\": \"a.txt\", \"block_size\": 2}", dir, &s, &err),
        MT_OK);
    assert_int_equal(remove(s->train.files[0].path), 0);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_NOT_FOUND);
    assert_null(ds);
    assert_non_null(strstr(err.msg, "a.txt"));
    assert_int_equal(mt_data_tokenizer_fit_spec(s, &fit, &err), MT_NOT_FOUND);
    assert_null(fit);
    mt_data_spec_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_data_tokens_spec_fields, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_tokens_counts_next_token_examples, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_tokens_load_cuts_inputs_and_next_tokens, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_tokens_missing_file_is_named, dt_setup,
                                        dt_teardown),
    };
    return MT_RUN_TESTS(tests);
}
