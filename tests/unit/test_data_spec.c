/* SPDX-License-Identifier: MIT */
/* test_data_spec.c — parsing the `dataset` section (mt_data_spec_parse): fields, defaults, file
 * lists and globs, and errors that carry the JSON path. */
#include "mt_test.h"

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "data_test_util.h"

static int setup(void **state)
{
    dt_setup(state);
    dt_write(dir, "a.csv", "x,label\n1,0\n");
    dt_write(dir, "b.csv", "x,label\n2,1\n");
    dt_write(dir, "c.tsv", "1\thello\n");
    return 0;
}

static void test_data_spec_defaults(void **state)
{
    mt_data_spec *s;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(dt_spec("{\"format\":\"csv\",\"train\":\"a.csv\"}", dir, &s, &err), MT_OK);
    assert_int_equal(s->format, MT_DATA_FORMAT_CSV);
    assert_int_equal(s->train.n, 1);
    assert_int_equal(s->test.n, 0);
    assert_true(s->header);
    assert_int_equal(s->delimiter, ',');
    assert_true(s->scale == 1.0f);
    assert_int_equal(s->max_tokens, 1200);
    assert_int_equal(s->shuffle_buffer, 0);
    assert_int_equal(s->shard, MT_DATA_SHARD_AUTO);
    assert_int_equal(s->batching, MT_DATA_BATCH_GLOBAL);
    assert_false(s->drop_remainder);
    assert_int_equal(s->prefetch, 2);
    assert_false(s->prefetch_set); /* the trainer chooses (docs/input-pipeline.md) */
    assert_false(s->seed_set);
    assert_false(s->label_column_set);
    mt_data_pipeline_opts o;
    mt_data_pipeline_opts_from_spec(s, &o);
    assert_int_equal(o.prefetch, 2);
    assert_int_equal(o.policy, MT_DATA_SHARD_AUTO);
    mt_data_spec_free(s);
}

static void test_data_spec_every_field(void **state)
{
    mt_data_spec *s;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(
        dt_spec("{\"format\":\"csv\",\"train\":{\"files\":[\"a.csv\",\"b.csv\"]},"
                "\"test\":{\"glob\":\"?.csv\"},\"label_column\":\"label\","
                "\"feature_columns\":[\"x\"],\"header\":true,\"delimiter\":\",\",\"scale\":0.5,"
                "\"num_classes\":2,\"max_tokens\":50,\"shuffle_buffer\":100,\"seed\":9,"
                "\"shard_policy\":\"data\",\"batching\":\"per_replica\",\"drop_remainder\":true,"
                "\"prefetch\":4}",
                dir, &s, &err),
        MT_OK);
    assert_int_equal(s->train.n, 2);
    assert_int_equal(s->test.n, 2); /* glob sorted: a.csv, b.csv */
    assert_non_null(strstr(s->test.files[0].path, "/a.csv"));
    assert_non_null(strstr(s->test.files[1].path, "/b.csv"));
    assert_string_equal(s->label_column.name, "label");
    assert_int_equal(s->n_feature_cols, 1);
    assert_true(s->scale == 0.5f);
    assert_int_equal(s->num_classes, 2);
    assert_int_equal(s->max_tokens, 50);
    assert_int_equal(s->shuffle_buffer, 100);
    assert_int_equal(s->seed, 9);
    assert_true(s->seed_set);
    assert_int_equal(s->shard, MT_DATA_SHARD_DATA);
    assert_int_equal(s->batching, MT_DATA_BATCH_PER_REPLICA);
    assert_true(s->drop_remainder);
    assert_int_equal(s->prefetch, 4);
    assert_true(s->prefetch_set);
    mt_data_spec_free(s);
}

static void test_data_spec_idx_pairs(void **state)
{
    mt_data_spec *s;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(dt_spec("{\"format\":\"idx\",\"train\":{\"images\":\"/d/ti.gz\","
                             "\"labels\":\"/d/tl.gz\"},\"test\":{\"files\":[{\"images\":\"i\","
                             "\"labels\":\"l\"}]}}",
                             dir, &s, &err),
                     MT_OK);
    assert_string_equal(s->train.files[0].path, "/d/ti.gz");
    assert_string_equal(s->train.files[0].labels_path, "/d/tl.gz");
    assert_non_null(strstr(s->test.files[0].labels_path, "/l"));
    mt_data_spec_free(s);
    assert_int_equal(dt_spec("{\"format\":\"idx\",\"train\":{\"images\":\"x\"}}", dir, &s, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.train: an IDX entry needs"));
}

/* The training engine's job files: flat IDX keys, and an absent section = Fashion-MNIST. */
static void test_data_spec_engine_idx_form_and_default(void **state)
{
    mt_data_spec *s;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(dt_spec("{\"train_images\":\"ti.gz\",\"train_labels\":\"tl.gz\","
                             "\"test_images\":\"/x/vi.gz\",\"test_labels\":\"/x/vl.gz\"}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(s->format, MT_DATA_FORMAT_IDX);
    assert_int_equal(s->train.n, 1);
    assert_non_null(strstr(s->train.files[0].labels_path, "/tl.gz"));
    assert_string_equal(s->test.files[0].path, "/x/vi.gz");
    mt_data_spec_free(s);
    assert_int_equal(dt_spec("{\"format\":\"idx\",\"train_images\":\"a\"}", dir, &s, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.train_labels: must be a non-empty path"));
    assert_int_equal(dt_spec("{\"format\":\"idx\",\"train_images\":\"a\",\"train_labels\":"
                             "\"b\",\"train\":{\"images\":\"a\",\"labels\":\"b\"}}",
                             dir, &s, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.train_images: give either"));
    assert_int_equal(mt_data_spec_parse(NULL, NULL, NULL, &s, &err), MT_OK);
    assert_int_equal(s->format, MT_DATA_FORMAT_IDX);
    assert_int_equal(s->num_classes, 10);
    assert_non_null(strstr(s->train.files[0].path, "fashion-mnist/train-images-idx3-ubyte.gz"));
    assert_non_null(strstr(s->test.files[0].labels_path, "t10k-labels-idx1-ubyte.gz"));
    mt_data_spec_free(s);
}

static void test_data_spec_errors_carry_json_path(void **state)
{
    static const struct {
        const char *json;
        mt_code code;
        const char *msg;
    } cases[] = {
        {"[]", MT_INVALID_ARGUMENT, "dataset: must be an object"},
        {"{\"train\":\"a.csv\"}", MT_INVALID_ARGUMENT, "dataset.format: must be"},
        {"{\"format\":\"csv\"}", MT_INVALID_ARGUMENT, "dataset.train: missing"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"shufle_buffer\":3}", MT_INVALID_ARGUMENT,
         "dataset.shufle_buffer: unknown field"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"prefetch\":-1}", MT_INVALID_ARGUMENT,
         "dataset.prefetch: must be an integer in [0, 64]"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"shard_policy\":\"row\"}", MT_INVALID_ARGUMENT,
         "dataset.shard_policy: must be"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"batching\":1}", MT_INVALID_ARGUMENT,
         "dataset.batching: must be"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"drop_remainder\":1}", MT_INVALID_ARGUMENT,
         "dataset.drop_remainder: must be true or false"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"delimiter\":\",,\"}", MT_INVALID_ARGUMENT,
         "dataset.delimiter:"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"scale\":0}", MT_INVALID_ARGUMENT,
         "dataset.scale: must be a positive number"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"shape\":[0,3]}", MT_INVALID_ARGUMENT,
         "dataset.shape[0]: must be an integer"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"label_column\":-1}", MT_INVALID_ARGUMENT,
         "dataset.label_column: must be a column name"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"feature_columns\":[]}", MT_INVALID_ARGUMENT,
         "dataset.feature_columns: must be a non-empty list"},
        {"{\"format\":\"csv\",\"train\":\"a.csv\",\"max_tokens\":1}", MT_INVALID_ARGUMENT,
         "dataset.max_tokens: must be an integer in [2,"},
        {"{\"format\":\"csv\",\"train\":[\"a.csv\",3]}", MT_INVALID_ARGUMENT,
         "dataset.train[1]: must be a non-empty path string"},
        {"{\"format\":\"csv\",\"train\":[]}", MT_INVALID_ARGUMENT, "dataset.train: no files"},
        {"{\"format\":\"csv\",\"train\":{\"files\":[\"zz*.csv\"]}}", MT_NOT_FOUND,
         "dataset.train.files[0]: no file matches"},
        {"{\"format\":\"csv\",\"train\":{\"glob\":\"a.csv\",\"files\":[]}}", MT_INVALID_ARGUMENT,
         "dataset.train: give either"},
        {"{\"format\":\"csv\",\"train\":{}}", MT_INVALID_ARGUMENT, "dataset.train: needs"},
        {"{\"format\":\"text\",\"train\":\"c.tsv\",\"label_column\":\"x\"}", MT_INVALID_ARGUMENT,
         "dataset.label_column: only CSV datasets have columns"},
        {"{\"format\":\"idx\",\"train\":[\"a\"]}", MT_INVALID_ARGUMENT,
         "dataset.train[0]: must be an object"},
        {"{\"format\":\"csv\",\"train\":\"missing.csv\"}", MT_NOT_FOUND, "missing.csv"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        mt_data_spec *s = (mt_data_spec *)1;
        mt_err err = MT_ERR_INIT;
        mt_code rc = dt_spec(cases[i].json, dir, &s, &err);
        if (rc != cases[i].code || strstr(err.msg, cases[i].msg) == NULL)
            fail_msg("case %zu %s: got %s '%s', want %s '%s'", i, cases[i].json, mt_code_name(rc),
                     err.msg, mt_code_name(cases[i].code), cases[i].msg);
        assert_null(s);
    }
}

static void test_data_spec_custom_json_path(void **state)
{
    cJSON *j = cJSON_Parse("{\"format\":\"csv\",\"train\":\"a.csv\",\"seed\":\"x\"}");
    mt_data_spec *s;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_data_spec_parse(j, "job.dataset", dir, &s, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "job.dataset.seed: must be an integer"));
    cJSON_Delete(j);
}

static void test_data_spec_policy_names(void **state)
{
    mt_data_shard_policy p;
    (void)state;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(
            mt_data_shard_policy_parse(mt_data_shard_policy_name((mt_data_shard_policy)i), &p),
            MT_OK);
        assert_int_equal(p, i);
    }
    assert_int_equal(mt_data_shard_policy_parse("AUTO", &p), MT_INVALID_ARGUMENT);
}

static void test_data_spec_alloc_failures(void **state)
{
    const char *json = "{\"format\":\"csv\",\"train\":{\"glob\":\"*.csv\"},\"label_column\":"
                       "\"label\",\"feature_columns\":[\"x\"],\"test\":[\"a.csv\"]}";
    mt_data_spec *s = NULL;
    mt_code rc;
    long i = 0;
    (void)state;
    do {
        mt_alloc_fail_after(i++);
        rc = dt_spec(json, dir, &s, NULL);
        mt_alloc_fail_reset();
        assert_true(rc == MT_OK || rc == MT_RESOURCE_EXHAUSTED);
    } while (rc != MT_OK);
    assert_int_equal(s->train.n, 2);
    mt_data_spec_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_data_spec_defaults, setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_spec_every_field, setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_spec_idx_pairs, setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_spec_engine_idx_form_and_default, setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_spec_errors_carry_json_path, setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_spec_custom_json_path, setup, dt_teardown),
        cmocka_unit_test(test_data_spec_policy_names),
        cmocka_unit_test_setup_teardown(test_data_spec_alloc_failures, setup, dt_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
