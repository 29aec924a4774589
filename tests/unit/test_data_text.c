/* SPDX-License-Identifier: MIT */
/*
 * test_data_text.c — tokenizer, TF-IDF vectorizer (Keras tf_idf semantics, values computed by
 * hand below) and the labelled-text source of core/data (mt_data.h).
 */
#include "mt_test.h"

#include <math.h>

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "data_test_util.h"
#include "log/mt_log.h"

typedef struct toks {
    char buf[256];
    size_t used;
} toks;

static void collect(const char *t, size_t n, void *ctx)
{
    toks *k = ctx;
    k->used += (size_t)snprintf(k->buf + k->used, sizeof(k->buf) - k->used, "%s%.*s",
                                k->used ? "|" : "", (int)n, t);
}

static void test_data_text_tokenizer_lowercases_and_splits(void **state)
{
    const char *t = "Hello, WORLD! it's 42x  caf\xc3\xa9-Bar\t\n";
    char scratch[64];
    toks k = {{0}, 0};
    (void)state;
    mt_data_tokenize(t, strlen(t), scratch, collect, &k);
    assert_string_equal(k.buf, "hello|world|it|s|42x|caf\xc3\xa9|bar");
    k.used = 0;
    k.buf[0] = '\0';
    mt_data_tokenize("  ...  ", 7, scratch, collect, &k);
    assert_string_equal(k.buf, "");
}

static const char *docs3[] = {"the cat sat", "the dog", "The cat! the end"};

static mt_data_tfidf *fit3(size_t max_tokens)
{
    size_t lens[3];
    mt_data_tfidf *v = NULL;
    for (int i = 0; i < 3; i++)
        lens[i] = strlen(docs3[i]);
    assert_int_equal(mt_data_tfidf_fit(docs3, lens, 3, max_tokens, &v, NULL), MT_OK);
    return v;
}

/*
 * counts: the 4, cat 2, dog/end/sat 1 (ties by byte order → dog). df: the 3, cat 2, dog 1.
 * idf = ln(1 + 3 / (1 + df)): the ln 1.75, cat ln 2, dog ln 2.5; OOV = their mean.
 */
static void test_data_text_tfidf_fit_matches_keras_formula(void **state)
{
    mt_data_tfidf *v = fit3(4);
    float out[4];
    const char *q = "the cat THE unicorn";
    double oov = (log(1.75) + log(2.0) + log(2.5)) / 3;
    (void)state;
    assert_int_equal(mt_data_tfidf_dim(v), 4);
    assert_null(mt_data_tfidf_term(v, 0));
    assert_string_equal(mt_data_tfidf_term(v, 1), "the");
    assert_string_equal(mt_data_tfidf_term(v, 2), "cat");
    assert_string_equal(mt_data_tfidf_term(v, 3), "dog");
    assert_int_equal(mt_data_tfidf_index(v, "cat", 3), 2);
    assert_int_equal(mt_data_tfidf_index(v, "sat", 3), 0);
    assert_float_equal(mt_data_tfidf_idf(v, 1), log(1.75), 1e-6);
    assert_float_equal(mt_data_tfidf_idf(v, 2), log(2.0), 1e-6);
    assert_float_equal(mt_data_tfidf_idf(v, 3), log(2.5), 1e-6);
    assert_float_equal(mt_data_tfidf_idf(v, 0), oov, 1e-6);
    assert_int_equal(mt_data_tfidf_transform(v, q, strlen(q), out, NULL), MT_OK);
    assert_float_equal(out[0], oov, 1e-6);           /* one OOV token */
    assert_float_equal(out[1], 2 * log(1.75), 1e-6); /* "the" twice */
    assert_float_equal(out[2], log(2.0), 1e-6);
    assert_float_equal(out[3], 0.0, 0);
    mt_data_tfidf_free(v);
    /* fewer terms than max_tokens: dim = 1 + terms */
    v = fit3(1200);
    assert_int_equal(mt_data_tfidf_dim(v), 6);
    mt_data_tfidf_free(v);
}

static void test_data_text_tfidf_fit_errors(void **state)
{
    mt_data_tfidf *v = (mt_data_tfidf *)1;
    size_t len = 3;
    const char *d = "abc";
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_data_tfidf_fit(&d, &len, 1, 1, &v, &err), MT_INVALID_ARGUMENT);
    assert_null(v);
    assert_int_equal(mt_data_tfidf_fit(&d, &len, 0, 10, &v, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "no documents"));
}

static void test_data_text_tfidf_save_load_roundtrip(void **state)
{
    mt_data_tfidf *v = fit3(4), *w = NULL;
    char *buf = NULL;
    size_t len = 0;
    float a[4], b[4];
    const char *q = "dog cat end";
    (void)state;
    assert_int_equal(mt_data_tfidf_save(v, &buf, &len, NULL), MT_OK);
    assert_non_null(strstr(buf, "meshtrain-tfidf 1\nmax_tokens 4\ndocs 3\nterms 3\n"));
    assert_int_equal(mt_data_tfidf_load(buf, len, &w, NULL), MT_OK);
    assert_int_equal(mt_data_tfidf_dim(w), 4);
    for (size_t i = 0; i < 4; i++)
        assert_true(mt_data_tfidf_idf(v, i) == mt_data_tfidf_idf(w, i)); /* bit-exact */
    assert_int_equal(mt_data_tfidf_transform(v, q, strlen(q), a, NULL), MT_OK);
    assert_int_equal(mt_data_tfidf_transform(w, q, strlen(q), b, NULL), MT_OK);
    assert_memory_equal(a, b, sizeof(a));
    mt_data_tfidf_free(w);
    mt_free(buf);
    mt_data_tfidf_free(v);
}

static void test_data_text_tfidf_load_rejects_corruption(void **state)
{
    static const char *bad[] = {
        "",
        "meshtrain-tfidf 2\n",
        "meshtrain-tfidf 1\nmax_tokens 4\ndocs 3\nterms 2\noov 0.5\n1\tthe\n",         /* short */
        "meshtrain-tfidf 1\nmax_tokens 4\ndocs 3\nterms 2\noov 0.5\n1\tthe\n1\tthe\n", /* dup */
        "meshtrain-tfidf 1\nmax_tokens 4\ndocs 3\nterms 1\noov 0.5\n1\tThe\n",         /* upper */
        "meshtrain-tfidf 1\nmax_tokens 4\ndocs 3\nterms 1\noov 0.5\nx\tthe\n",         /* idf */
        "meshtrain-tfidf 1\nmax_tokens 2\ndocs 3\nterms 5\noov 0.5\n",                 /* > max */
        "meshtrain-tfidf 1\nmax_tokens 4\ndocs 3\nterms 1\noov 0.5\n1\tthe\nextra",    /* trail */
    };
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mt_data_tfidf *v = (mt_data_tfidf *)1;
        mt_err err = MT_ERR_INIT;
        assert_int_equal(mt_data_tfidf_load(bad[i], strlen(bad[i]), &v, &err), MT_INVALID_ARGUMENT);
        assert_null(v);
        assert_non_null(strstr(err.msg, "tf-idf load"));
    }
}

/* Fitting uses the training split only; test-only words are OOV. */
static void test_data_text_fit_on_train_split_only(void **state)
{
    mt_data_spec *s;
    mt_data_tfidf *v;
    mt_data_dataset *ds;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "train.tsv", "1\tgood great good\n0\tbad awful\n\n1\tGood!\r\n");
    dt_write(dir, "test.tsv", "0\tzebra bad\n");
    assert_int_equal(dt_spec("{\"format\":\"text\",\"train\":\"train.tsv\",\"test\":\"test.tsv\","
                             "\"max_tokens\":10,\"num_classes\":2}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_tfidf_fit_spec(s, &v, &err), MT_OK);
    assert_int_equal(mt_data_tfidf_index(v, "zebra", 5), 0);
    assert_string_equal(mt_data_tfidf_term(v, 1), "good");
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TEST, v, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_size(ds), 1);
    assert_int_equal(mt_data_dataset_load(ds, 0, &b, &err), MT_OK);
    assert_int_equal(b.y[0], 0);
    assert_float_equal(b.x[0], mt_data_tfidf_idf(v, 0), 1e-6);
    assert_float_equal(b.x[mt_data_tfidf_index(v, "bad", 3)],
                       mt_data_tfidf_idf(v, mt_data_tfidf_index(v, "bad", 3)), 1e-6);
    mt_data_block_fini(&b);
    mt_data_dataset_free(ds);
    /* train: 3 documents (the blank line is skipped) */
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, v, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_size(ds), 3);
    mt_data_dataset_free(ds);
    /* a text dataset without a vectorizer is refused */
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err),
                     MT_FAILED_PRECONDITION);
    mt_data_tfidf_free(v);
    mt_data_spec_free(s);
}

static void test_data_text_directory_per_label(void **state)
{
    mt_data_spec *s;
    mt_data_tfidf *v;
    mt_data_dataset *ds;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_mkdir(dir, "reviews");
    dt_mkdir(dir, "reviews/neg");
    dt_mkdir(dir, "reviews/pos");
    dt_write(dir, "reviews/neg/1.txt", "awful\nmovie");
    dt_write(dir, "reviews/pos/1.txt", "lovely movie");
    dt_write(dir, "reviews/pos/2.txt", "lovely");
    assert_int_equal(
        dt_spec("{\"format\":\"text\",\"train\":{\"files\":[\"reviews\"]}}", dir, &s, &err), MT_OK);
    assert_int_equal(mt_data_tfidf_fit_spec(s, &v, &err), MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, v, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_size(ds), 3);
    assert_int_equal(mt_data_dataset_load(ds, 0, &b, &err), MT_OK);
    assert_int_equal(b.y[0], 0); /* neg sorts first */
    assert_int_equal(b.y[1], 1);
    assert_int_equal(b.y[2], 1);
    assert_true(b.x[0 * b.dim + mt_data_tfidf_index(v, "awful", 5)] > 0);
    mt_data_block_fini(&b);
    mt_data_dataset_free(ds);
    mt_data_tfidf_free(v);
    mt_data_spec_free(s);
}

static void test_data_text_bad_lines_name_file_and_line(void **state)
{
    mt_data_spec *s;
    mt_data_tfidf *v = NULL;
    mt_err err = MT_ERR_INIT;
    char want[256];
    (void)state;
    dt_write(dir, "bad.tsv", "1\tok\n0\tfine\nno tab here\n");
    assert_int_equal(dt_spec("{\"format\":\"text\",\"train\":\"bad.tsv\"}", dir, &s, &err), MT_OK);
    assert_int_equal(mt_data_tfidf_fit_spec(s, &v, &err), MT_INVALID_ARGUMENT);
    snprintf(want, sizeof(want), "%s/bad.tsv:3: expected label<TAB>text", dir);
    assert_string_equal(err.msg, want);
    mt_data_spec_free(s);
    dt_write(dir, "lab.tsv", "1\tok\npos\tfine\n");
    assert_int_equal(dt_spec("{\"format\":\"text\",\"train\":\"lab.tsv\"}", dir, &s, &err), MT_OK);
    assert_int_equal(mt_data_tfidf_fit_spec(s, &v, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "lab.tsv:2: label 'pos' is not an integer"));
    mt_data_spec_free(s);
    dt_write(dir, "cls.tsv", "3\tok\n");
    assert_int_equal(
        dt_spec("{\"format\":\"text\",\"train\":\"cls.tsv\",\"num_classes\":2}", dir, &s, &err),
        MT_OK);
    assert_int_equal(mt_data_tfidf_fit_spec(s, &v, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "cls.tsv:1"));
    mt_data_spec_free(s);
}

/* Generated documents: Zipf-like words (so some fall out of a small vocabulary), mixed case. */
static void write_docs(const char *name, size_t n, uint64_t r)
{
    char *buf = malloc(n * 200 + 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        at += (size_t)sprintf(buf + at, "%zu\t", i % 3);
        for (int w = 0; w < (int)(i % 17) + 1; w++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            unsigned k = (unsigned)((r % 97) * (r % 89) / 89);
            at += (size_t)sprintf(buf + at, "%s%s%u", w ? (r & 8 ? ", " : " ") : "",
                                  r & 16 ? "W" : "w", k);
        }
        buf[at++] = '\n';
    }
    buf[at] = 0;
    dt_write(dir, name, buf);
    free(buf);
}

/*
 * The pipeline keeps text as compressed sparse rows and densifies each batch by scattering into
 * reused rows: its batches equal, bit for bit, those of the same pipeline over the dense vectors
 * of mt_data_dataset_load (mt_data_tfidf_transform per document), for shuffled and in-order
 * epochs, every shard policy, several replicas, feature slices, partial batches and prefetch.
 */
static void test_data_text_sparse_pipeline_equals_dense(void **state)
{
    mt_data_spec *s;
    mt_data_tfidf *v;
    mt_data_dataset *sparse, *dense;
    mt_data_block b[2];
    mt_err err = MT_ERR_INIT;
    static const struct {
        mt_data_shard_policy pol;
        size_t N, L, B, off, len, shuffle, prefetch;
        bool permute;
    } cfg[] = {
        {MT_DATA_SHARD_OFF, 1, 1, 16, 0, 0, 0, 0, false},
        {MT_DATA_SHARD_OFF, 1, 1, 16, 0, 0, 0, 2, false},
        {MT_DATA_SHARD_DATA, 2, 2, 12, 0, 0, 40, 0, false},
        {MT_DATA_SHARD_DATA, 2, 2, 12, 0, 0, 40, 2, false},
        {MT_DATA_SHARD_FILE, 2, 3, 7, 5, 30, 500, 3, false},
        {MT_DATA_SHARD_DATA, 1, 2, 9, 40, 0, 0, 2, true},
    };
    (void)state;
    mt_log_set_level(MT_LOG_WARN);
    write_docs("a.tsv", 230, 99);
    write_docs("b.tsv", 171, 7);
    assert_int_equal(dt_spec("{\"format\":\"text\",\"train\":[\"a.tsv\",\"b.tsv\"],"
                             "\"max_tokens\":60}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_tfidf_fit_spec(s, &v, &err), MT_OK);
    assert_int_equal(mt_data_tfidf_dim(v), 60);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, v, &sparse, &err), MT_OK);
    for (size_t f = 0; f < 2; f++)
        assert_int_equal(mt_data_dataset_load(sparse, f, &b[f], &err), MT_OK);
    assert_int_equal(mt_data_dataset_from_blocks(b, 2, &dense, &err), MT_OK);
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++)
        for (size_t w = 0; w < cfg[c].N; w++) {
            mt_data_input_ctx ctx = {cfg[c].N, w, cfg[c].L, cfg[c].B, cfg[c].off, cfg[c].len};
            mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
            mt_data_pipeline *ps, *pd;
            o.policy = cfg[c].pol;
            o.shuffle_buffer = cfg[c].shuffle;
            o.prefetch = cfg[c].prefetch;
            o.permute = cfg[c].permute;
            o.seed = 3;
            assert_int_equal(mt_data_pipeline_open(sparse, &ctx, &o, &ps, &err), MT_OK);
            o.prefetch = 0;
            assert_int_equal(mt_data_pipeline_open(dense, &ctx, &o, &pd, &err), MT_OK);
            assert_int_equal(mt_data_pipeline_dim(ps), mt_data_pipeline_dim(pd));
            for (size_t e = 0; e < 3; e++) {
                const mt_data_step *a, *d;
                size_t steps = 0, nz = 0;
                assert_int_equal(mt_data_pipeline_start_epoch(ps, e, NULL), MT_OK);
                assert_int_equal(mt_data_pipeline_start_epoch(pd, e, NULL), MT_OK);
                while (mt_data_pipeline_next(pd, &d, NULL) == MT_OK) {
                    assert_int_equal(mt_data_pipeline_next(ps, &a, NULL), MT_OK);
                    assert_int_equal(a->global_count, d->global_count);
                    for (size_t l = 0; l < d->n_replicas; l++) {
                        const mt_data_batch *x = &a->replicas[l], *y = &d->replicas[l];
                        assert_int_equal(x->n, y->n);
                        assert_int_equal(x->dim, y->dim);
                        if (y->n == 0)
                            continue;
                        assert_memory_equal(x->x, y->x, y->n * y->dim * sizeof(float));
                        assert_memory_equal(x->y, y->y, y->n * sizeof(int32_t));
                        for (size_t i = 0; i < y->n * y->dim; i++)
                            nz += y->x[i] != 0.0f;
                    }
                    steps++;
                }
                assert_int_equal(mt_data_pipeline_next(ps, &a, NULL), MT_OUT_OF_RANGE);
                assert_true(steps > 0 && nz > 0);
            }
            mt_data_pipeline_free(ps);
            mt_data_pipeline_free(pd);
        }
    /* a file that changes between counting and the sparse decode is DATA_LOSS */
    {
        mt_data_input_ctx ctx = {1, 0, 1, 8, 0, 0};
        mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
        mt_data_pipeline *p = NULL;
        mt_data_dataset *changed;
        assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, v, &changed, &err), MT_OK);
        write_docs("b.tsv", 170, 7);
        assert_int_equal(mt_data_pipeline_open(changed, &ctx, &o, &p, &err), MT_DATA_LOSS);
        assert_non_null(strstr(err.msg, "b.tsv: decoded 170 examples but counted 171"));
        assert_null(p);
        mt_data_dataset_free(changed);
        write_docs("b.tsv", 171, 7);
    }
    /* every allocation of the sparse decode can fail cleanly (ASan: no leak) */
    for (long i = 0;; i++) {
        mt_data_input_ctx ctx = {1, 0, 1, 8, 0, 0};
        mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
        mt_data_pipeline *p = NULL;
        mt_code rc;
        mt_alloc_fail_after(i);
        rc = mt_data_pipeline_open(sparse, &ctx, &o, &p, NULL);
        mt_alloc_fail_reset();
        assert_true(rc == MT_OK || rc == MT_RESOURCE_EXHAUSTED);
        mt_data_pipeline_free(p);
        if (rc == MT_OK)
            break;
    }
    mt_data_dataset_free(dense);
    mt_data_block_fini(&b[0]);
    mt_data_block_fini(&b[1]);
    mt_data_dataset_free(sparse);
    mt_data_tfidf_free(v);
    mt_data_spec_free(s);
}

static void test_data_text_alloc_failures(void **state)
{
    size_t lens[3];
    mt_data_tfidf *v = NULL, *w = NULL;
    char *buf = NULL;
    size_t len;
    mt_code rc;
    long i = 0;
    (void)state;
    for (int k = 0; k < 3; k++)
        lens[k] = strlen(docs3[k]);
    do {
        mt_alloc_fail_after(i++);
        rc = mt_data_tfidf_fit(docs3, lens, 3, 4, &v, NULL);
        mt_alloc_fail_reset();
        assert_true(rc == MT_OK || rc == MT_RESOURCE_EXHAUSTED);
    } while (rc != MT_OK);
    assert_int_equal(mt_data_tfidf_save(v, &buf, &len, NULL), MT_OK);
    i = 0;
    do {
        mt_alloc_fail_after(i++);
        rc = mt_data_tfidf_load(buf, len, &w, NULL);
        mt_alloc_fail_reset();
        assert_true(rc == MT_OK || rc == MT_RESOURCE_EXHAUSTED || rc == MT_INVALID_ARGUMENT);
    } while (rc != MT_OK);
    assert_int_equal(mt_data_tfidf_dim(w), 4);
    mt_data_tfidf_free(w);
    mt_data_tfidf_free(v);
    mt_free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_text_tokenizer_lowercases_and_splits),
        cmocka_unit_test(test_data_text_tfidf_fit_matches_keras_formula),
        cmocka_unit_test(test_data_text_tfidf_fit_errors),
        cmocka_unit_test(test_data_text_tfidf_save_load_roundtrip),
        cmocka_unit_test(test_data_text_tfidf_load_rejects_corruption),
        cmocka_unit_test_setup_teardown(test_data_text_fit_on_train_split_only, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_text_directory_per_label, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_text_bad_lines_name_file_and_line, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_text_sparse_pipeline_equals_dense, dt_setup,
                                        dt_teardown),
        cmocka_unit_test(test_data_text_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
