/* SPDX-License-Identifier: MIT */
/* test_mesh.c — unit tests for core/mesh (mt_mesh.h): one test per promise and error code. */
#include "mt_test.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "mesh/mt_mesh.h"

static mt_mesh *parse_ok(const char *text, int ndevices)
{
    mt_mesh *m = NULL;
    mt_err err = MT_ERR_INIT;
    mt_code rc = mt_mesh_parse(text, NULL, ndevices, &m, &err);
    if (rc != MT_OK)
        fail_msg("parse '%s': %s", text, err.msg);
    return m;
}

static void expect_parse_error(const char *text, int ndevices, const char *needle)
{
    mt_mesh *m = (mt_mesh *)1;
    mt_err err = MT_ERR_INIT;
    assert_int_equal(mt_mesh_parse(text, NULL, ndevices, &m, &err), MT_INVALID_ARGUMENT);
    assert_null(m);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("parse '%s': message '%s' lacks '%s'", text, err.msg, needle);
}

static void test_mesh_new_and_accessors(void **state)
{
    const char *names[] = {"batch", "model"};
    int sizes[] = {4, 2};
    mt_mesh *m = NULL;
    mt_err err = MT_ERR_INIT;
    char buf[64];
    (void)state;
    assert_int_equal(mt_mesh_new(names, sizes, 2, NULL, 8, &m, &err), MT_OK);
    assert_int_equal(mt_mesh_ndims(m), 2);
    assert_string_equal(mt_mesh_dim_name(m, 0), "batch");
    assert_string_equal(mt_mesh_dim_name(m, 1), "model");
    assert_null(mt_mesh_dim_name(m, 2));
    assert_int_equal(mt_mesh_dim_size(m, 0), 4);
    assert_int_equal(mt_mesh_dim_size(m, 1), 2);
    assert_int_equal(mt_mesh_dim_size(m, 5), 0);
    assert_int_equal(mt_mesh_dim_index(m, "model"), 1);
    assert_int_equal(mt_mesh_dim_index(m, "feature"), -1);
    assert_int_equal(mt_mesh_num_devices(m), 8);
    assert_int_equal(mt_mesh_device_at(m, 7), 7);
    assert_int_equal(mt_mesh_device_at(m, 8), -1);
    assert_int_equal(mt_mesh_format(m, buf, sizeof(buf)), strlen("batch=4,model=2"));
    assert_string_equal(buf, "batch=4,model=2");
    /* truncation keeps a terminated string and reports the full length */
    assert_int_equal(mt_mesh_format(m, buf, 6), strlen("batch=4,model=2"));
    assert_string_equal(buf, "batch");
    mt_mesh_free(m);
    mt_mesh_free(NULL);
}

static void test_mesh_row_major_coords(void **state)
{
    mt_mesh *m = parse_ok("batch=4,model=2", 8);
    int c[MT_MESH_MAX_DIMS], d = -1;
    mt_err err = MT_ERR_INIT;
    (void)state;
    /* last dimension fastest: device 5 = (2, 1) */
    assert_int_equal(mt_mesh_coords(m, 5, c, &err), MT_OK);
    assert_int_equal(c[0], 2);
    assert_int_equal(c[1], 1);
    for (int dev = 0; dev < 8; dev++) {
        assert_int_equal(mt_mesh_coords(m, dev, c, NULL), MT_OK);
        assert_int_equal(c[0], dev / 2);
        assert_int_equal(c[1], dev % 2);
        assert_int_equal(mt_mesh_device(m, c, &d, NULL), MT_OK);
        assert_int_equal(d, dev);
    }
    assert_int_equal(mt_mesh_coords(m, 8, c, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "device 8"));
    c[0] = 4;
    c[1] = 0;
    assert_int_equal(mt_mesh_device(m, c, &d, &err), MT_OUT_OF_RANGE);
    assert_non_null(strstr(err.msg, "'batch'"));
    c[0] = -1;
    assert_int_equal(mt_mesh_device(m, c, &d, NULL), MT_OUT_OF_RANGE);
    mt_mesh_free(m);
}

static void test_mesh_explicit_device_ids(void **state)
{
    const char *names[] = {"batch", "model"};
    int sizes[] = {2, 2};
    int devs[] = {10, 11, 20, 21};
    int c[2], d, g[4], n;
    mt_mesh *m = NULL;
    (void)state;
    assert_int_equal(mt_mesh_new(names, sizes, 2, devs, 4, &m, NULL), MT_OK);
    assert_int_equal(mt_mesh_position(m, 20), 2);
    assert_int_equal(mt_mesh_position(m, 3), -1);
    assert_int_equal(mt_mesh_coords(m, 21, c, NULL), MT_OK);
    assert_int_equal(c[0], 1);
    assert_int_equal(c[1], 1);
    c[0] = 1;
    c[1] = 0;
    assert_int_equal(mt_mesh_device(m, c, &d, NULL), MT_OK);
    assert_int_equal(d, 20);
    const char *bd[] = {"batch"};
    assert_int_equal(mt_mesh_group(m, 11, bd, 1, g, &n, NULL, NULL), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(g[0], 11);
    assert_int_equal(g[1], 21);
    mt_mesh_free(m);
}

static void test_mesh_validation_errors(void **state)
{
    const char *dup[] = {"batch", "batch"};
    const char *bad[] = {"1x"};
    const char *resv[] = {"unsharded"};
    const char *ok[] = {"batch"};
    int s2[] = {2, 2}, s0[] = {0}, s4[] = {4};
    int devs_dup[] = {0, 1, 1, 2}, devs_neg[] = {-1, 0, 1, 2};
    mt_mesh *m = (mt_mesh *)1;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_mesh_new(dup, s2, 2, NULL, 0, &m, &err), MT_INVALID_ARGUMENT);
    assert_null(m);
    assert_non_null(strstr(err.msg, "'batch' appears twice"));
    assert_int_equal(mt_mesh_new(bad, s4, 1, NULL, 0, &m, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "not an identifier"));
    assert_int_equal(mt_mesh_new(resv, s4, 1, NULL, 0, &m, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "reserved"));
    assert_int_equal(mt_mesh_new(ok, s0, 1, NULL, 0, &m, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "size must be >= 1, got 0"));
    assert_int_equal(mt_mesh_new(ok, s4, 1, NULL, 8, &m, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "multiply to 4 devices but 8 devices"));
    assert_int_equal(mt_mesh_new(ok, s4, 1, devs_dup, 4, &m, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "device 1 appears twice"));
    assert_int_equal(mt_mesh_new(ok, s4, 1, devs_neg, 4, &m, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "negative"));
    assert_int_equal(mt_mesh_new(ok, s4, 0, NULL, 0, &m, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "at least one dimension"));
    const char *nine[9] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
    int ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(mt_mesh_new(nine, ones, 9, NULL, 0, &m, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_mesh_new(NULL, NULL, 1, NULL, 0, &m, &err), MT_INVALID_ARGUMENT);
}

static void test_mesh_parse_cli_forms(void **state)
{
    mt_mesh *m;
    (void)state;
    m = parse_ok(" batch = 4 , model=2 ", 8);
    assert_int_equal(mt_mesh_num_devices(m), 8);
    assert_string_equal(mt_mesh_dim_name(m, 1), "model");
    mt_mesh_free(m);
    /* size 1 is valid; no device count given */
    m = parse_ok("batch=1,feature=1,model=1", 0);
    assert_int_equal(mt_mesh_num_devices(m), 1);
    assert_int_equal(mt_mesh_ndims(m), 3);
    mt_mesh_free(m);
    expect_parse_error("", 0, "empty");
    expect_parse_error("batch", 0, "'batch' is not NAME=SIZE");
    expect_parse_error("batch=x", 0, "size 'x' is not an integer");
    expect_parse_error("batch=", 0, "is not an integer");
    expect_parse_error("batch=4x", 0, "size '4x' is not an integer");
    expect_parse_error("batch=0", 0, "size must be >= 1, got 0");
    expect_parse_error("batch=-2", 0, "size must be >= 1, got -2");
    expect_parse_error("batch=4,", 0, "is not NAME=SIZE");
    expect_parse_error("batch=4,batch=2", 0, "appears twice");
    expect_parse_error("my-dim=4", 0, "not an identifier");
    expect_parse_error("batch=4,model=2", 4, "multiply to 8 devices but 4");
    expect_parse_error("a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1", 0, "more than 8 dimensions");
    expect_parse_error("abcdefghijabcdefghijabcdefghijabcdefghij=2", 0, "longer than");
    mt_mesh *out = (mt_mesh *)1;
    assert_int_equal(mt_mesh_parse(NULL, NULL, 0, &out, NULL), MT_INVALID_ARGUMENT);
    assert_null(out);
}

static void test_mesh_from_json_object_and_pairs(void **state)
{
    cJSON *obj = cJSON_Parse("{\"batch\": 4, \"model\": 2}");
    cJSON *arr = cJSON_Parse("[[\"model\", 2], [\"batch\", 4]]");
    mt_mesh *m = NULL;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_mesh_from_json(obj, NULL, NULL, 8, &m, &err), MT_OK);
    assert_string_equal(mt_mesh_dim_name(m, 0), "batch"); /* object order kept */
    mt_mesh_free(m);
    assert_int_equal(mt_mesh_from_json(arr, "spec.mesh", NULL, 0, &m, &err), MT_OK);
    assert_string_equal(mt_mesh_dim_name(m, 0), "model");
    assert_int_equal(mt_mesh_dim_size(m, 1), 4);
    mt_mesh_free(m);
    cJSON_Delete(obj);
    cJSON_Delete(arr);
}

static void expect_json_error(const char *json, const char *needle)
{
    cJSON *j = cJSON_Parse(json);
    mt_mesh *m = (mt_mesh *)1;
    mt_err err = MT_ERR_INIT;
    assert_non_null(j);
    assert_int_equal(mt_mesh_from_json(j, NULL, NULL, 0, &m, &err), MT_INVALID_ARGUMENT);
    assert_null(m);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("json %s: message '%s' lacks '%s'", json, err.msg, needle);
    cJSON_Delete(j);
}

static void test_mesh_from_json_errors_carry_path(void **state)
{
    (void)state;
    expect_json_error("{\"batch\": 4, \"model\": 0}", "mesh.model: size must be an integer >= 1");
    expect_json_error("{\"batch\": 2.5}", "mesh.batch: size must be an integer");
    /* beyond long long: refused without an undefined cast (a fuzz finding) */
    expect_json_error("{\"batch\": 4, \"model\": 44444444444444444444444444444444442}",
                      "mesh.model: size must be an integer >= 1, got 4444444444444443");
    expect_json_error("{\"batch\": \"4\"}", "mesh.batch: size must be an integer");
    expect_json_error("[[\"batch\"]]", "mesh[0]: expected [\"name\", size]");
    expect_json_error("[[\"batch\", 2], [\"b c\", 2]]", "mesh[1]: dimension name 'b c'");
    expect_json_error("{\"batch\": 2, \"batch\": 2}", "appears twice");
    expect_json_error("{}", "at least one dimension");
    expect_json_error("4", "expected an object");
    mt_mesh *m = (mt_mesh *)1;
    assert_int_equal(mt_mesh_from_json(NULL, NULL, NULL, 0, &m, NULL), MT_INVALID_ARGUMENT);
}

static void test_mesh_group_along_dims(void **state)
{
    mt_mesh *m = parse_ok("batch=2,feature=2,model=2", 8);
    int g[8], n = 0, me = -1;
    mt_err err = MT_ERR_INIT;
    (void)state;
    /* device 5 = (1, 0, 1) */
    const char *b[] = {"batch"};
    assert_int_equal(mt_mesh_group(m, 5, b, 1, g, &n, &me, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(g[0], 1);
    assert_int_equal(g[1], 5);
    assert_int_equal(me, 1);
    const char *mdl[] = {"model"};
    assert_int_equal(mt_mesh_group(m, 5, mdl, 1, g, &n, &me, NULL), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(g[0], 4);
    assert_int_equal(g[1], 5);
    assert_int_equal(me, 1);
    /* two dims, listed out of mesh order: order is still by mesh coordinates */
    const char *mb[] = {"model", "batch"};
    assert_int_equal(mt_mesh_group(m, 5, mb, 2, g, &n, &me, NULL), MT_OK);
    assert_int_equal(n, 4);
    int want[] = {0, 1, 4, 5};
    for (int i = 0; i < 4; i++)
        assert_int_equal(g[i], want[i]);
    assert_int_equal(me, 3);
    /* no dims: just the device; all dims: the whole mesh in order */
    assert_int_equal(mt_mesh_group(m, 6, NULL, 0, g, &n, &me, NULL), MT_OK);
    assert_int_equal(n, 1);
    assert_int_equal(g[0], 6);
    assert_int_equal(me, 0);
    const char *all[] = {"feature", "model", "batch"};
    assert_int_equal(mt_mesh_group(m, 6, all, 3, g, &n, &me, NULL), MT_OK);
    assert_int_equal(n, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(g[i], i);
    assert_int_equal(me, 6);
    /* every member of a group computes the same group */
    int g2[8], n2;
    for (int dev = 0; dev < 8; dev++) {
        const char *f[] = {"feature"};
        assert_int_equal(mt_mesh_group(m, dev, f, 1, g, &n, &me, NULL), MT_OK);
        assert_int_equal(g[me], dev);
        assert_int_equal(mt_mesh_group(m, g[1 - me], f, 1, g2, &n2, NULL, NULL), MT_OK);
        assert_memory_equal(g, g2, sizeof(int) * 2);
    }
    /* errors */
    const char *unk[] = {"pipeline"};
    assert_int_equal(mt_mesh_group(m, 5, unk, 1, g, &n, NULL, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "no dimension 'pipeline'"));
    const char *twice[] = {"batch", "batch"};
    assert_int_equal(mt_mesh_group(m, 5, twice, 2, g, &n, NULL, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "listed twice"));
    assert_int_equal(mt_mesh_group(m, 99, b, 1, g, &n, NULL, &err), MT_NOT_FOUND);
    int bad_idx[] = {7};
    assert_int_equal(mt_mesh_group_idx(m, 5, bad_idx, 1, g, &n, NULL, &err), MT_INVALID_ARGUMENT);
    mt_mesh_free(m);
}

static void test_mesh_name_valid(void **state)
{
    (void)state;
    assert_true(mt_mesh_name_valid("batch"));
    assert_true(mt_mesh_name_valid("_x9"));
    assert_false(mt_mesh_name_valid(""));
    assert_false(mt_mesh_name_valid(NULL));
    assert_false(mt_mesh_name_valid("9x"));
    assert_false(mt_mesh_name_valid("a.b"));
    assert_false(mt_mesh_name_valid("unsharded"));
    assert_false(mt_mesh_name_valid("abcdefghijabcdefghijabcdefghijab")); /* 32 bytes */
}

static void test_mesh_alloc_failure_no_leak(void **state)
{
    (void)state;
    for (long n = 0;; n++) {
        mt_mesh *m = (mt_mesh *)1;
        mt_code rc;
        mt_alloc_fail_after(n);
        rc = mt_mesh_parse("batch=4,model=2", NULL, 8, &m, NULL);
        mt_alloc_fail_reset();
        if (rc == MT_OK) {
            assert_non_null(m);
            mt_mesh_free(m);
            assert_true(n >= 2);
            break;
        }
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_new_and_accessors),
        cmocka_unit_test(test_mesh_row_major_coords),
        cmocka_unit_test(test_mesh_explicit_device_ids),
        cmocka_unit_test(test_mesh_validation_errors),
        cmocka_unit_test(test_mesh_parse_cli_forms),
        cmocka_unit_test(test_mesh_from_json_object_and_pairs),
        cmocka_unit_test(test_mesh_from_json_errors_carry_path),
        cmocka_unit_test(test_mesh_group_along_dims),
        cmocka_unit_test(test_mesh_name_valid),
        cmocka_unit_test(test_mesh_alloc_failure_no_leak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
