/* SPDX-License-Identifier: MIT */
/* test_data_csv.c — the CSV source of core/data (mt_data.h): columns, values, errors. */
#include "mt_test.h"

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "data_test_util.h"

static void test_data_csv_header_label_by_name(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "t.csv", "a,b,label\n1,2.5,0\n\n-3, 1e-3 ,2\r\n4,5,1\n");
    assert_int_equal(
        dt_load0("{\"format\":\"csv\",\"train\":\"t.csv\",\"label_column\":\"label\"}", &b, &err),
        MT_OK);
    assert_int_equal(b.n, 3);
    assert_int_equal(b.dim, 2);
    assert_true(b.x[0] == 1.0f && b.x[1] == 2.5f);
    assert_true(b.x[2] == -3.0f && b.x[3] == 1e-3f);
    assert_int_equal(b.y[0], 0);
    assert_int_equal(b.y[1], 2);
    assert_int_equal(b.y[2], 1);
    mt_data_block_fini(&b);
}

static void test_data_csv_label_by_index_no_header_scale_shape(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "n.csv", "7;255;0;51;102\n3;0;0;0;255\n");
    assert_int_equal(
        dt_load0("{\"format\":\"csv\",\"train\":[\"n.csv\"],\"header\":false,"
                 "\"label_column\":0,\"delimiter\":\";\",\"scale\":0.00392156862745098,"
                 "\"shape\":[2,2]}",
                 &b, &err),
        MT_OK);
    assert_int_equal(b.n, 2);
    assert_int_equal(b.dim, 4);
    assert_int_equal(b.y[0], 7);
    assert_float_equal(b.x[0], 1.0f, 1e-6);
    assert_float_equal(b.x[2], 0.2f, 1e-6);
    assert_int_equal(b.shape[0], 2);
    assert_int_equal(b.shape[2], 1);
    mt_data_block_fini(&b);
}

static void test_data_csv_feature_columns_subset(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "f.csv", "id,x,y,c\n100,1,2,1\n101,3,4,0\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"f.csv\",\"label_column\":\"c\","
                              "\"feature_columns\":[\"y\",1]}",
                              &b, &err),
                     MT_OK);
    assert_int_equal(b.dim, 2);
    assert_true(b.x[0] == 2.0f && b.x[1] == 1.0f && b.x[2] == 4.0f && b.x[3] == 3.0f);
    mt_data_block_fini(&b);
    /* the label listed as a feature is refused */
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"f.csv\",\"label_column\":\"c\","
                              "\"feature_columns\":[\"c\"]}",
                              &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.feature_columns[0]: column 3 is the label column"));
}

static void test_data_csv_wrong_label_column_names_columns(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    char want[512];
    (void)state;
    dt_write(dir, "train.csv", "a,b,label\n1,2,0\n");
    assert_int_equal(
        dt_load0("{\"format\":\"csv\",\"train\":\"train.csv\",\"label_column\":\"y\"}", &b, &err),
        MT_INVALID_ARGUMENT);
    snprintf(want, sizeof(want),
             "dataset.label_column: no column 'y' in %s/train.csv (columns: a, b, label)", dir);
    assert_string_equal(err.msg, want);
    assert_int_equal(
        dt_load0("{\"format\":\"csv\",\"train\":\"train.csv\",\"label_column\":9}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.label_column: column 9 out of range"));
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"train.csv\",\"header\":false,"
                              "\"label_column\":\"label\"}",
                              &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "no header"));
}

static void test_data_csv_bad_record_names_file_and_line(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    char want[512];
    (void)state;
    dt_write(dir, "bad.csv", "a,b,label\n1,2,0\n\n3,abc,1\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"bad.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    snprintf(want, sizeof(want), "%s/bad.csv:4: column 1 ('b'): 'abc' is not a finite number", dir);
    assert_string_equal(err.msg, want);
    assert_null(b.x);
    dt_write(dir, "short.csv", "a,b,label\n1,2,0\n1,2\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"short.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "short.csv:3: 2 fields, expected 3"));
    dt_write(dir, "lab.csv", "a,label\n1,0.5\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"lab.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "lab.csv:2: label (column 1): '0.5' is not an integer"));
    dt_write(dir, "cls.csv", "a,label\n1,10\n");
    assert_int_equal(
        dt_load0("{\"format\":\"csv\",\"train\":\"cls.csv\",\"num_classes\":10}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "cls.csv:2: label 10 outside [0, 10)"));
    dt_write(dir, "nan.csv", "a,label\nnan,1\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"nan.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "nan.csv:2"));
    dt_write(dir, "empty.csv", "a,label\n\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"empty.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "empty.csv: no records"));
}

static void test_data_csv_missing_and_unreadable_files(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"nope.csv\"}", &b, &err),
                     MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "nope.csv: No such file"));
    dt_mkdir(dir, "adir.csv");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"adir.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "adir.csv: is a directory"));
    if (geteuid() != 0) { /* root reads mode-000 files, so this case only runs as a user */
        dt_write(dir, "secret.csv", "a,label\n1,0\n");
        char p[256];
        snprintf(p, sizeof(p), "%s/secret.csv", dir);
        chmod(p, 0);
        assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"secret.csv\"}", &b, &err),
                         MT_PERMISSION_DENIED);
    }
}

/* A file that changes between counting and decoding is DATA_LOSS, never silently used. */
static void test_data_csv_changed_file_is_data_loss(void **state)
{
    mt_data_spec *s;
    mt_data_dataset *ds;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "c.csv", "a,label\n1,0\n2,1\n");
    assert_int_equal(dt_spec("{\"format\":\"csv\",\"train\":\"c.csv\"}", dir, &s, &err), MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    assert_int_equal(mt_data_dataset_size(ds), 2);
    dt_write(dir, "c.csv", "a,label\n1,0\n2,1\n3,1\n");
    assert_int_equal(mt_data_dataset_load(ds, 0, &b, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, "decoded 3 examples but counted 2"));
    assert_int_equal(mt_data_dataset_load(ds, 5, &b, &err), MT_OUT_OF_RANGE);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
}

static void test_data_csv_shape_mismatch(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "s.csv", "a,b,c,label\n1,2,3,0\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"s.csv\",\"shape\":[2,2]}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.shape: 2x2x1 = 4 values but"));
}

/* Every allocation failure of a decode returns RESOURCE_EXHAUSTED and leaks nothing (ASan). */
static void test_data_csv_alloc_failures(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    mt_code rc;
    long i = 0;
    (void)state;
    dt_write(dir, "ok.csv", "a,b,label\n1,2,0\n3,4,1\n");
    do {
        mt_alloc_fail_after(i++);
        rc = dt_load0("{\"format\":\"csv\",\"train\":\"ok.csv\",\"label_column\":\"label\"}", &b,
                      &err);
        mt_alloc_fail_reset();
        assert_true(rc == MT_OK || rc == MT_RESOURCE_EXHAUSTED);
    } while (rc != MT_OK);
    assert_true(i > 3);
    assert_int_equal(b.n, 2);
    mt_data_block_fini(&b);
}

/* String labels: ids in byte order of the names over the training files (the test split uses
 * the training ids), or in class_names order; a name outside the classes names file and line. */
static void test_data_csv_string_labels(void **state)
{
    mt_data_spec *s = NULL;
    mt_data_dataset *tr = NULL, *te = NULL;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "a.csv", "x,species\n1,virginica\n2, setosa\n");
    dt_write(dir, "b.csv", "x,species\n3,versicolor\n4,setosa\n");
    dt_write(dir, "t.csv", "x,species\n5,versicolor\n");
    assert_int_equal(dt_spec("{\"format\":\"csv\",\"train\":[\"a.csv\",\"b.csv\"],"
                             "\"test\":\"t.csv\",\"label_type\":\"string\"}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &tr, &err), MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TEST, NULL, &te, &err), MT_OK);
    assert_int_equal(mt_data_dataset_classes(tr)->n, 3);
    assert_string_equal(mt_data_dataset_classes(tr)->names[0], "setosa");
    assert_string_equal(mt_data_dataset_classes(tr)->names[2], "virginica");
    assert_int_equal(mt_data_dataset_load(tr, 0, &b, &err), MT_OK);
    assert_int_equal(b.y[0], 2);
    assert_int_equal(b.y[1], 0);
    mt_data_block_fini(&b);
    assert_int_equal(mt_data_dataset_load(te, 0, &b, &err), MT_OK);
    assert_int_equal(b.y[0], 1);
    mt_data_block_fini(&b);
    mt_data_dataset_free(tr);
    mt_data_dataset_free(te);
    mt_data_spec_free(s);
    /* the user's order */
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"a.csv\",\"label_type\":\"string\","
                              "\"class_names\":[\"virginica\",\"versicolor\",\"setosa\"]}",
                              &b, &err),
                     MT_OK);
    assert_int_equal(b.y[0], 0);
    assert_int_equal(b.y[1], 2);
    mt_data_block_fini(&b);
    /* a name that is not a class */
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"b.csv\",\"label_type\":\"string\","
                              "\"class_names\":[\"setosa\",\"virginica\"]}",
                              &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "b.csv:2: label 'versicolor' is not one of the 2 class_names"));
    /* more names than num_classes */
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"b.csv\",\"label_type\":\"string\","
                              "\"num_classes\":1}",
                              &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(
        strstr(err.msg, "dataset.num_classes: 1, but the training labels hold 2 classes"));
    /* class names without string labels, and integer labels that are names */
    assert_int_equal(
        dt_load0("{\"format\":\"csv\",\"train\":\"b.csv\",\"class_names\":[\"a\"]}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.class_names: needs \"label_type\": \"string\""));
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"b.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "b.csv:2: label (column 1): 'versicolor' is not an integer"));
}

/* Float targets: one column or several ("label_column" as a list), kept as floats. */
static void test_data_csv_float_targets(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "r.csv", "rooms,age,price,tax\n3,10,250.5,2.5\n4,2,-1e2,0\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"r.csv\",\"label_type\":\"float\","
                              "\"label_column\":\"price\",\"feature_columns\":[\"rooms\",\"age\"]}",
                              &b, &err),
                     MT_OK);
    assert_int_equal(b.dim, 2);
    assert_int_equal(b.t_dim, 1);
    assert_true(b.t[0] == 250.5f && b.t[1] == -100.0f);
    assert_true(b.y[0] == 0 && b.y[1] == 0);
    mt_data_block_fini(&b);
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"r.csv\",\"label_type\":\"float\","
                              "\"label_column\":[\"tax\",\"price\"]}",
                              &b, &err),
                     MT_OK);
    assert_int_equal(b.dim, 2); /* rooms, age */
    assert_int_equal(b.t_dim, 2);
    assert_true(b.t[0] == 2.5f && b.t[1] == 250.5f && b.t[2] == 0.0f && b.t[3] == -100.0f);
    assert_true(b.x[2] == 4.0f && b.x[3] == 2.0f);
    mt_data_block_fini(&b);
    /* a list of label columns needs float labels; a missing target is refused */
    assert_int_equal(
        dt_load0("{\"format\":\"csv\",\"train\":\"r.csv\",\"label_column\":[\"tax\"]}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "several label columns need \"label_type\": \"float\""));
    dt_write(dir, "m.csv", "a,y\n1,\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"m.csv\",\"label_type\":\"float\","
                              "\"missing\":\"fill\"}",
                              &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "m.csv:2: target column 1 ('y') is missing"));
}

/* Float targets across several files and pipelines: each batch row's target stays with its
 * features (t = 10·x here) whatever the shard policy and shuffle. */
static void test_data_csv_float_targets_pipelines(void **state)
{
    static const struct {
        size_t N, L;
        mt_data_shard_policy pol;
        bool permute;
    } cfg[] = {{1, 1, MT_DATA_SHARD_OFF, false},
               {2, 1, MT_DATA_SHARD_FILE, true},
               {2, 2, MT_DATA_SHARD_DATA, true},
               {1, 3, MT_DATA_SHARD_OFF, true}};
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "a.csv", "x,t\n1,10\n2,20\n3,30\n");
    dt_write(dir, "b.csv", "x,t\n4,40\n5,50\n");
    assert_int_equal(dt_spec("{\"format\":\"csv\",\"train\":[\"a.csv\",\"b.csv\"],"
                             "\"label_type\":\"float\",\"prefetch\":1}",
                             dir, &s, &err),
                     MT_OK);
    assert_int_equal(mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err), MT_OK);
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
        size_t seen = 0;
        for (size_t w = 0; w < cfg[c].N; w++) {
            mt_data_input_ctx ctx = {cfg[c].N, w, cfg[c].L, 4, 0, 0};
            mt_data_pipeline_opts o;
            mt_data_pipeline *p = NULL;
            const mt_data_step *st;
            mt_data_pipeline_opts_from_spec(s, &o);
            o.policy = cfg[c].pol;
            o.permute = cfg[c].permute;
            o.seed = 3;
            if (mt_data_pipeline_open(ds, &ctx, &o, &p, &err) != MT_OK)
                fail_msg("config %zu: %s", c, err.msg);
            assert_int_equal(mt_data_pipeline_start_epoch(p, 1, &err), MT_OK);
            while (mt_data_pipeline_next(p, &st, &err) == MT_OK)
                for (size_t l = 0; l < st->n_replicas; l++)
                    for (size_t i = 0; i < st->replicas[l].n; i++, seen++)
                        assert_true(st->replicas[l].t[i] == 10.0f * st->replicas[l].x[i]);
            mt_data_pipeline_free(p);
        }
        assert_int_equal(seen, cfg[c].pol == MT_DATA_SHARD_OFF ? 5 * cfg[c].N : 5);
    }
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
}

/* Missing feature values: refused by default (FILE:LINE, column), filled with "fill". */
static void test_data_csv_missing_values(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "m.csv", "a,b,label\n1,NA,0\n,2,1\n?,nan,1\n");
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"m.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "m.csv:2: feature column 1 ('b') is missing"));
    assert_int_equal(dt_load0("{\"format\":\"csv\",\"train\":\"m.csv\",\"missing\":\"fill\","
                              "\"fill_value\":-1}",
                              &b, &err),
                     MT_OK);
    assert_true(b.x[0] == 1.0f && b.x[1] == -1.0f && b.x[2] == -1.0f && b.x[3] == 2.0f);
    assert_true(b.x[4] == -1.0f && b.x[5] == -1.0f);
    mt_data_block_fini(&b);
    /* a missing class label is never filled */
    dt_write(dir, "l.csv", "a,label\n1,\n");
    assert_int_equal(
        dt_load0("{\"format\":\"csv\",\"train\":\"l.csv\",\"missing\":\"fill\"}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "l.csv:2: label (column 1) is missing"));
    /* options of other formats */
    assert_int_equal(
        dt_load0("{\"format\":\"csv\",\"train\":\"l.csv\",\"missing\":\"zero\"}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.missing: must be \"refuse\" or \"fill\""));
}

/* Prediction input: features found by name in any order, label column absent or ignored. */
static void test_data_csv_read_features_by_name(void **state)
{
    mt_data_spec *s = NULL;
    mt_err err = MT_ERR_INIT;
    float *x = NULL;
    size_t n, d;
    (void)state;
    dt_write(dir, "train.csv", "sl,sw,species\n1,2,setosa\n");
    dt_write(dir, "row.csv", "extra,sw,sl\n9,0.5,1.5\n");
    dt_write(dir, "row2.csv", "sw,species\n9,setosa\n");
    assert_int_equal(dt_spec("{\"format\":\"csv\",\"train\":\"train.csv\",\"label_type\":"
                             "\"string\",\"label_column\":\"species\",\"feature_columns\":[\"sl\","
                             "\"sw\"],\"missing\":\"fill\"}",
                             dir, &s, &err),
                     MT_OK);
    {
        char p[512];
        snprintf(p, sizeof(p), "%s/row.csv", dir);
        assert_int_equal(mt_data_csv_read_features(s, p, &x, &n, &d, &err), MT_OK);
        assert_int_equal(n, 1);
        assert_int_equal(d, 2);
        assert_true(x[0] == 1.5f && x[1] == 0.5f);
        mt_free(x);
        snprintf(p, sizeof(p), "%s/row2.csv", dir);
        assert_int_equal(mt_data_csv_read_features(s, p, &x, &n, &d, &err), MT_INVALID_ARGUMENT);
        assert_non_null(strstr(err.msg, "no column 'sl' in"));
    }
    mt_data_spec_free(s);
}

/* Every allocation failure while fitting and decoding string labels is RESOURCE_EXHAUSTED. */
static void test_data_csv_string_labels_alloc_failures(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    mt_code rc;
    long i = 0;
    (void)state;
    dt_write(dir, "ok.csv", "a,b,label\n1,2,cat\n3,4,dog\n");
    do {
        mt_alloc_fail_after(i++);
        rc = dt_load0("{\"format\":\"csv\",\"train\":\"ok.csv\",\"label_type\":\"string\"}", &b,
                      &err);
        mt_alloc_fail_reset();
        assert_true(rc == MT_OK || rc == MT_RESOURCE_EXHAUSTED);
    } while (rc != MT_OK);
    assert_int_equal(b.y[1], 1);
    mt_data_block_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_data_csv_header_label_by_name, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_label_by_index_no_header_scale_shape,
                                        dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_feature_columns_subset, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_wrong_label_column_names_columns, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_bad_record_names_file_and_line, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_missing_and_unreadable_files, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_changed_file_is_data_loss, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_shape_mismatch, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_alloc_failures, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_string_labels, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_float_targets, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_missing_values, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_float_targets_pipelines, dt_setup,
                                        dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_read_features_by_name, dt_setup, dt_teardown),
        cmocka_unit_test_setup_teardown(test_data_csv_string_labels_alloc_failures, dt_setup,
                                        dt_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
