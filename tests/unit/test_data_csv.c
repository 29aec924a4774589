/* SPDX-License-Identifier: MIT */
/* test_data_csv.c — the CSV source of core/data (mt_data.h): columns, values, errors. */
#include "mt_test.h"

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "data_test_util.h"

/* Parse spec, open train, load file 0. */
static mt_code load0(const char *json, mt_data_block *b, mt_err *err)
{
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_code rc = dt_spec(json, dir, &s, err);
    memset(b, 0, sizeof(*b));
    if (rc == MT_OK)
        rc = mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, err);
    if (rc == MT_OK)
        rc = mt_data_dataset_load(ds, 0, b, err);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
    return rc;
}

static void test_data_csv_header_label_by_name(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    dt_write(dir, "t.csv", "a,b,label\n1,2.5,0\n\n-3, 1e-3 ,2\r\n4,5,1\n");
    assert_int_equal(
        load0("{\"format\":\"csv\",\"train\":\"t.csv\",\"label_column\":\"label\"}", &b, &err),
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
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":[\"n.csv\"],\"header\":false,"
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
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"f.csv\",\"label_column\":\"c\","
                           "\"feature_columns\":[\"y\",1]}",
                           &b, &err),
                     MT_OK);
    assert_int_equal(b.dim, 2);
    assert_true(b.x[0] == 2.0f && b.x[1] == 1.0f && b.x[2] == 4.0f && b.x[3] == 3.0f);
    mt_data_block_fini(&b);
    /* the label listed as a feature is refused */
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"f.csv\",\"label_column\":\"c\","
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
        load0("{\"format\":\"csv\",\"train\":\"train.csv\",\"label_column\":\"y\"}", &b, &err),
        MT_INVALID_ARGUMENT);
    snprintf(want, sizeof(want),
             "dataset.label_column: no column 'y' in %s/train.csv (columns: a, b, label)", dir);
    assert_string_equal(err.msg, want);
    assert_int_equal(
        load0("{\"format\":\"csv\",\"train\":\"train.csv\",\"label_column\":9}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "dataset.label_column: column 9 out of range"));
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"train.csv\",\"header\":false,"
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
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"bad.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    snprintf(want, sizeof(want), "%s/bad.csv:4: column 1 ('b'): 'abc' is not a finite number", dir);
    assert_string_equal(err.msg, want);
    assert_null(b.x);
    dt_write(dir, "short.csv", "a,b,label\n1,2,0\n1,2\n");
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"short.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "short.csv:3: 2 fields, expected 3"));
    dt_write(dir, "lab.csv", "a,label\n1,0.5\n");
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"lab.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "lab.csv:2: label (column 1): '0.5' is not an integer"));
    dt_write(dir, "cls.csv", "a,label\n1,10\n");
    assert_int_equal(
        load0("{\"format\":\"csv\",\"train\":\"cls.csv\",\"num_classes\":10}", &b, &err),
        MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "cls.csv:2: label 10 outside [0, 10)"));
    dt_write(dir, "nan.csv", "a,label\nnan,1\n");
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"nan.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "nan.csv:2"));
    dt_write(dir, "empty.csv", "a,label\n\n");
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"empty.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "empty.csv: no records"));
}

static void test_data_csv_missing_and_unreadable_files(void **state)
{
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"nope.csv\"}", &b, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "nope.csv: No such file"));
    dt_mkdir(dir, "adir.csv");
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"adir.csv\"}", &b, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "adir.csv: is a directory"));
    if (geteuid() != 0) { /* root reads mode-000 files, so this case only runs as a user */
        dt_write(dir, "secret.csv", "a,label\n1,0\n");
        char p[256];
        snprintf(p, sizeof(p), "%s/secret.csv", dir);
        chmod(p, 0);
        assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"secret.csv\"}", &b, &err),
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
    assert_int_equal(load0("{\"format\":\"csv\",\"train\":\"s.csv\",\"shape\":[2,2]}", &b, &err),
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
        rc =
            load0("{\"format\":\"csv\",\"train\":\"ok.csv\",\"label_column\":\"label\"}", &b, &err);
        mt_alloc_fail_reset();
        assert_true(rc == MT_OK || rc == MT_RESOURCE_EXHAUSTED);
    } while (rc != MT_OK);
    assert_true(i > 3);
    assert_int_equal(b.n, 2);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
