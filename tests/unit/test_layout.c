/* SPDX-License-Identifier: MIT */
/* test_layout.c — unit tests for core/layout (mt_layout.h): layouts, shards, LayoutMap. */
#include "mt_test.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "layout/mt_layout.h"

static mt_mesh *mesh_of(const char *text)
{
    mt_mesh *m = NULL;
    assert_int_equal(mt_mesh_parse(text, NULL, 0, &m, NULL), MT_OK);
    return m;
}

static void assert_contains(const char *msg, const char *needle)
{
    if (strstr(msg, needle) == NULL)
        fail_msg("message '%s' lacks '%s'", msg, needle);
}

static void test_layout_init_and_helpers(void **state)
{
    mt_layout l;
    char buf[64];
    const char *ax[] = {"unsharded", "model"};
    (void)state;
    assert_int_equal(mt_layout_init(&l, ax, 2, NULL), MT_OK);
    assert_int_equal(l.rank, 2);
    assert_true(mt_layout_axis_unsharded(&l, 0));
    assert_false(mt_layout_axis_unsharded(&l, 1));
    assert_int_equal(mt_layout_axis_of(&l, "model"), 1);
    assert_int_equal(mt_layout_axis_of(&l, "batch"), -1);
    assert_false(mt_layout_is_replicated(&l));
    mt_layout_format(&l, buf, sizeof(buf));
    assert_string_equal(buf, "[unsharded, model]");

    assert_int_equal(mt_layout_init_replicated(&l, 3, NULL), MT_OK);
    assert_int_equal(l.rank, 3);
    assert_true(mt_layout_is_replicated(&l));
    assert_int_equal(mt_layout_init_replicated(&l, 0, NULL), MT_OK);
    mt_layout_format(&l, buf, sizeof(buf));
    assert_string_equal(buf, "[]");

    assert_int_equal(mt_layout_init_batch_sharded(&l, "batch", 2, NULL), MT_OK);
    mt_layout_format(&l, buf, sizeof(buf));
    assert_string_equal(buf, "[batch, unsharded]");
    assert_int_equal(mt_layout_axis_of(&l, "batch"), 0);
}

static void test_layout_init_errors_leave_output_untouched(void **state)
{
    mt_layout l, before;
    mt_err err = MT_ERR_INIT;
    const char *twice[] = {"model", "model"};
    const char *bad[] = {"unsharded", "mo-del"};
    (void)state;
    assert_int_equal(mt_layout_init_replicated(&l, 2, NULL), MT_OK);
    before = l;
    assert_int_equal(mt_layout_init(&l, twice, 2, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "'model' is already used by axis 0");
    assert_int_equal(mt_layout_init(&l, bad, 2, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "'mo-del'");
    assert_int_equal(mt_layout_init_replicated(&l, 9, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_layout_init_replicated(&l, -1, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_layout_init_batch_sharded(&l, "batch", 0, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_layout_init_batch_sharded(&l, "b b", 2, &err), MT_INVALID_ARGUMENT);
    assert_memory_equal(&l, &before, sizeof(l));
    /* unsharded may repeat */
    const char *uu[] = {"unsharded", "unsharded"};
    assert_int_equal(mt_layout_init(&l, uu, 2, NULL), MT_OK);
}

static void test_layout_from_json(void **state)
{
    cJSON *good = cJSON_Parse("[\"batch\", \"feature\"]");
    cJSON *num = cJSON_Parse("[\"batch\", 3]");
    cJSON *twice = cJSON_Parse("[\"batch\", \"batch\"]");
    cJSON *obj = cJSON_Parse("{}");
    mt_layout l;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_layout_from_json(&l, good, "input_layout", &err), MT_OK);
    assert_int_equal(l.rank, 2);
    assert_string_equal(l.axes[1], "feature");
    assert_int_equal(mt_layout_from_json(&l, num, "input_layout", &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "input_layout[1]: expected a string");
    assert_int_equal(mt_layout_from_json(&l, twice, "input_layout", &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "input_layout[1]: mesh dimension 'batch' is already used by axis 0");
    assert_int_equal(mt_layout_from_json(&l, obj, NULL, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "layout: expected an array");
    cJSON_Delete(good);
    cJSON_Delete(num);
    cJSON_Delete(twice);
    cJSON_Delete(obj);
}

static void test_layout_validate_errors_name_tensor_axis_sizes(void **state)
{
    mt_mesh *m = mesh_of("batch=4,model=5");
    mt_layout l;
    mt_err err = MT_ERR_INIT;
    int64_t shape[] = {1200, 48};
    const char *ax[] = {"unsharded", "model"};
    const char *fe[] = {"feature", "unsharded"};
    (void)state;
    assert_int_equal(mt_layout_init(&l, ax, 2, NULL), MT_OK);
    assert_int_equal(mt_layout_validate(&l, m, "dense_1.kernel", shape, 2, NULL, &err),
                     MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "tensor dense_1.kernel: axis 1 of size 48 is not divisible by mesh "
                             "dimension 'model' of size 5");
    assert_int_equal(mt_layout_validate(&l, m, "dense_1.kernel", shape, 1, NULL, &err),
                     MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "has rank 2 but tensor dense_1.kernel has rank 1");
    assert_int_equal(mt_layout_init(&l, fe, 2, NULL), MT_OK);
    assert_int_equal(mt_layout_validate(&l, m, "x", shape, 2, "input_layout", &err),
                     MT_INVALID_ARGUMENT);
    assert_contains(err.msg,
                    "input_layout[0]: mesh has no dimension 'feature' (mesh batch=4,model=5)");
    /* a dimension used twice (a layout built by hand, bypassing init) */
    snprintf(l.axes[0], sizeof(l.axes[0]), "batch");
    snprintf(l.axes[1], sizeof(l.axes[1]), "batch");
    int64_t sq[] = {8, 8};
    assert_int_equal(mt_layout_validate(&l, m, "w", sq, 2, NULL, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "'batch' is already used by axis 0");
    int64_t neg[] = {-4, 8};
    assert_int_equal(mt_layout_init_replicated(&l, 2, NULL), MT_OK);
    assert_int_equal(mt_layout_validate(&l, m, "w", neg, 2, NULL, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "negative size");
    /* valid */
    int64_t ok[] = {1200, 40};
    assert_int_equal(mt_layout_init(&l, ax, 2, NULL), MT_OK);
    assert_int_equal(mt_layout_validate(&l, m, "w", ok, 2, NULL, &err), MT_OK);
    mt_mesh_free(m);
}

static void test_layout_shard_shapes_and_offsets(void **state)
{
    mt_mesh *m = mesh_of("batch=2,feature=2,model=2");
    mt_layout l;
    const char *ax[] = {"feature", "model"};
    int64_t shape[] = {1200, 48}, ls[2], off[2];
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_layout_init(&l, ax, 2, NULL), MT_OK);
    /* device 6 = (batch 1, feature 1, model 0) */
    assert_int_equal(mt_layout_shard(&l, m, shape, 6, ls, off, &err), MT_OK);
    assert_int_equal(ls[0], 600);
    assert_int_equal(ls[1], 24);
    assert_int_equal(off[0], 600);
    assert_int_equal(off[1], 0);
    /* every (feature, model) block is held, and by exactly 2 devices (the batch replicas) */
    int held[2][2] = {{0}};
    for (int d = 0; d < 8; d++) {
        assert_int_equal(mt_layout_shard(&l, m, shape, d, ls, off, NULL), MT_OK);
        held[off[0] / 600][off[1] / 24]++;
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            assert_int_equal(held[i][j], 2);
    assert_int_equal(mt_layout_shard(&l, m, shape, 8, ls, off, &err), MT_NOT_FOUND);
    int64_t odd[] = {1201, 48};
    assert_int_equal(mt_layout_shard(&l, m, odd, 0, ls, off, &err), MT_INVALID_ARGUMENT);
    const char *pp[] = {"pipeline", "unsharded"};
    assert_int_equal(mt_layout_init(&l, pp, 2, NULL), MT_OK);
    assert_int_equal(mt_layout_shard(&l, m, shape, 0, ls, off, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "no dimension 'pipeline'");
    mt_mesh_free(m);
}

static void test_layout_replicated_dims(void **state)
{
    mt_mesh *m = mesh_of("batch=2,feature=2,model=2");
    mt_layout l;
    int dims[MT_MESH_MAX_DIMS];
    const char *ax[] = {"unsharded", "model"};
    (void)state;
    assert_int_equal(mt_layout_init(&l, ax, 2, NULL), MT_OK);
    assert_int_equal(mt_layout_replicated_dims(&l, m, dims), 2);
    assert_int_equal(dims[0], 0);
    assert_int_equal(dims[1], 1);
    assert_int_equal(mt_layout_init_replicated(&l, 1, NULL), MT_OK);
    assert_int_equal(mt_layout_replicated_dims(&l, m, dims), 3);
    mt_mesh_free(m);
}

static const char *spec_mp = "{\"mesh\": {\"batch\": 4, \"model\": 2},"
                             " \"layouts\": {\"dense_1\\\\.kernel\": [\"unsharded\", \"model\"],"
                             "  \"dense_.*\\\\.kernel\": [\"model\", \"unsharded\"]},"
                             " \"input_layout\": [\"batch\", \"unsharded\"]}";

static mt_layout_map *map_of(const char *json)
{
    cJSON *j = cJSON_Parse(json);
    mt_layout_map *map = NULL;
    mt_err err = MT_ERR_INIT;
    assert_non_null(j);
    if (mt_layout_map_from_json(j, &map, &err) != MT_OK)
        fail_msg("%s", err.msg);
    cJSON_Delete(j);
    return map;
}

static void test_layout_map_first_match_full_name(void **state)
{
    mt_layout_map *map = map_of(spec_mp);
    mt_layout l;
    int entry;
    char path[128];
    (void)state;
    assert_int_equal(mt_layout_map_count(map), 2);
    assert_string_equal(mt_layout_map_key(map, 0), "dense_1\\.kernel");
    assert_null(mt_layout_map_key(map, 2));
    assert_null(mt_layout_map_layout(map, -1));
    assert_non_null(mt_layout_map_input(map));
    assert_string_equal(mt_layout_map_input(map)->axes[0], "batch");
    /* first match wins in spec order */
    assert_int_equal(mt_layout_map_match(map, "dense_1.kernel"), 0);
    assert_int_equal(mt_layout_map_match(map, "dense_2.kernel"), 1);
    /* full match: no prefix/suffix matches, '.' escaped */
    assert_int_equal(mt_layout_map_match(map, "dense_1.kernel/adam_m"), -1);
    assert_int_equal(mt_layout_map_match(map, "xdense_1.kernel"), -1);
    assert_int_equal(mt_layout_map_match(map, "dense_1Xkernel"), -1); /* escaped dot */
    assert_int_equal(mt_layout_map_match(map, "dense_1.x.kernel"), 1);
    assert_int_equal(mt_layout_map_match(map, "dense_1.bias"), -1);
    /* resolve: matched layout, or replicated */
    assert_int_equal(mt_layout_map_resolve(map, "dense_2.kernel", 2, &l, &entry, NULL), MT_OK);
    assert_int_equal(entry, 1);
    assert_string_equal(l.axes[0], "model");
    assert_int_equal(mt_layout_map_resolve(map, "dense_1.bias", 1, &l, &entry, NULL), MT_OK);
    assert_int_equal(entry, -1);
    assert_true(mt_layout_is_replicated(&l));
    assert_int_equal(l.rank, 1);
    mt_layout_map_path(map, 0, path, sizeof(path));
    assert_string_equal(path, "layouts[\"dense_1\\\\.kernel\"]");
    mt_layout_map_free(map);
    mt_layout_map_free(NULL);
}

static void test_layout_map_resolve_rank_mismatch(void **state)
{
    mt_layout_map *map = map_of("{\"layouts\": {\"dense_1\\\\..*\": [\"unsharded\", \"model\"]}}");
    mt_layout l;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_null(mt_layout_map_input(map));
    assert_int_equal(mt_layout_map_resolve(map, "dense_1.bias", 1, &l, NULL, &err),
                     MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "layouts[\"dense_1\\\\..*\"]: layout [unsharded, model] has rank 2 "
                             "but parameter dense_1.bias has rank 1");
    mt_layout_map_free(map);
}

static void expect_map_json_error(const char *json, const char *needle)
{
    cJSON *j = cJSON_Parse(json);
    mt_layout_map *map = (mt_layout_map *)1;
    mt_err err = MT_ERR_INIT;
    assert_non_null(j);
    assert_int_equal(mt_layout_map_from_json(j, &map, &err), MT_INVALID_ARGUMENT);
    assert_null(map);
    assert_contains(err.msg, needle);
    cJSON_Delete(j);
}

static void test_layout_map_from_json_errors(void **state)
{
    (void)state;
    expect_map_json_error("{\"layouts\": {\"a\": [\"batch\", 1]}}",
                          "layouts[\"a\"][1]: expected a string");
    expect_map_json_error("{\"layouts\": {\"(\": [\"batch\"]}}",
                          "layouts[\"(\"]: invalid regular expression");
    expect_map_json_error("{\"layouts\": {\"a\": \"batch\"}}", "layouts[\"a\"]: expected an array");
    expect_map_json_error("{\"layouts\": {\"a\": [\"x\"], \"a\": [\"y\"]}}", "key appears twice");
    expect_map_json_error("{\"layouts\": [1]}", "layouts: expected an object");
    expect_map_json_error("{\"input_layout\": [\"batch\", \"batch\"]}",
                          "input_layout[1]: mesh dimension 'batch' is already used");
    expect_map_json_error("[]", "spec: expected a JSON object");
    /* empty spec: empty map */
    mt_layout_map *map = map_of("{}");
    assert_int_equal(mt_layout_map_count(map), 0);
    assert_int_equal(mt_layout_map_match(map, "anything"), -1);
    mt_layout_map_free(map);
}

static void test_layout_map_check_reports_first_problem_with_path(void **state)
{
    mt_layout_map *map = map_of(spec_mp);
    mt_err err = MT_ERR_INIT;
    int64_t k1[] = {1200, 48}, b1[] = {48}, k2[] = {48, 2}, in[] = {64, 1200};
    mt_layout_param params[] = {
        {"dense_1.kernel", k1, 2},
        {"dense_1.bias", b1, 1},
        {"dense_2.kernel", k2, 2},
    };
    mt_mesh *mp = mesh_of("batch=4,model=2");
    mt_mesh *dp = mesh_of("batch=8");
    mt_mesh *m5 = mesh_of("batch=1,model=5");
    mt_mesh *b3 = mesh_of("batch=3,model=2");
    (void)state;
    assert_int_equal(mt_layout_map_check(map, mp, params, 3, in, 2, &err), MT_OK);
    /* the mesh lacks 'model': the first entry's path names the axis */
    assert_int_equal(mt_layout_map_check(map, dp, params, 3, in, 2, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "layouts[\"dense_1\\\\.kernel\"][1]: mesh has no dimension 'model'");
    /* not divisible: path, tensor, axis and both sizes */
    assert_int_equal(mt_layout_map_check(map, m5, params, 3, in, 2, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "layouts[\"dense_1\\\\.kernel\"][1]: tensor dense_1.kernel: axis 1 of "
                             "size 48 is not divisible by mesh dimension 'model' of size 5");
    /* input layout against the input shape */
    assert_int_equal(mt_layout_map_check(map, b3, params, 0, in, 2, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "input_layout[0]: tensor input: axis 0 of size 64");
    /* no input shape: only names are checked */
    assert_int_equal(mt_layout_map_check(map, b3, NULL, 0, NULL, 0, &err), MT_OK);
    /* an unmatched parameter is replicated; a rank mismatch is reported with its path */
    int64_t k3[] = {2, 3, 4};
    mt_layout_param bad_rank[] = {params[0], params[1], params[2], {"dense_9.kernel", k3, 3}};
    assert_int_equal(mt_layout_map_check(map, mp, bad_rank, 4, NULL, 0, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg,
                    "layouts[\"dense_.*\\\\.kernel\"]: layout [model, unsharded] has rank 2");
    /* a key that matches no weight is a typo: named, with an example of the weight names */
    assert_int_equal(mt_layout_map_check(map, mp, &params[2], 1, NULL, 0, &err),
                     MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "layouts[\"dense_1\\\\.kernel\"]: matches no weight of the model");
    assert_contains(err.msg, "e.g. dense_2.kernel");
    mt_layout_map_free(map);
    mt_mesh_free(mp);
    mt_mesh_free(dp);
    mt_mesh_free(m5);
    mt_mesh_free(b3);
}

/* Keras LayoutMap: an exact key wins over an earlier regex; layouts compare by meaning. */
static void test_layout_map_exact_key_first_and_equality(void **state)
{
    mt_layout_map *map = map_of("{\"mesh\":{\"batch\":2,\"model\":2},\"layouts\":{"
                                "\"dense.*\":[\"model\"],\"dense_1.bias\":[\"unsharded\"]}}");
    mt_layout a, b;
    const char *ax1[] = {"model", "unsharded"}, *ax2[] = {"model", "unsharded"};
    (void)state;
    assert_int_equal(mt_layout_map_match(map, "dense_1.bias"), 1);
    assert_int_equal(mt_layout_map_match(map, "dense_2.bias"), 0);
    memset(&a, 0xAB, sizeof(a)); /* bytes after each name's NUL must not matter */
    memset(&b, 0x00, sizeof(b));
    assert_int_equal(mt_layout_init(&a, ax1, 2, NULL), MT_OK);
    assert_int_equal(mt_layout_init(&b, ax2, 2, NULL), MT_OK);
    assert_true(mt_layout_equal(&a, &b));
    snprintf(b.axes[0], sizeof(b.axes[0]), "batch");
    assert_false(mt_layout_equal(&a, &b));
    b.rank = 1;
    assert_false(mt_layout_equal(&a, &b));
    mt_layout_map_free(map);
}

static void test_layout_map_add_api(void **state)
{
    mt_layout_map *map = NULL;
    mt_layout l;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_layout_map_new(&map, NULL), MT_OK);
    assert_int_equal(mt_layout_init_batch_sharded(&l, "batch", 2, NULL), MT_OK);
    for (int i = 0; i < 20; i++) { /* grows past the initial capacity */
        char key[32];
        snprintf(key, sizeof(key), "p%d", i);
        assert_int_equal(mt_layout_map_add(map, key, &l, &err), MT_OK);
    }
    assert_int_equal(mt_layout_map_count(map), 20);
    assert_int_equal(mt_layout_map_match(map, "p19"), 19);
    assert_int_equal(mt_layout_map_add(map, "p[", &l, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_layout_map_count(map), 20);
    assert_int_equal(mt_layout_map_add(map, NULL, &l, &err), MT_INVALID_ARGUMENT);
    mt_layout_map_set_input(map, &l);
    assert_non_null(mt_layout_map_input(map));
    mt_layout_map_free(map);
}

/* Regexes whose compiled form would explode (glibc copies repeated sub-expressions) are refused
 * before regcomp; ordinary keys, bounded repeats and escapes pass. */
static void test_layout_map_regex_limits(void **state)
{
    static const char *const ok[] = {
        "dense_.*\\.kernel",
        "(dense|conv2d)_[0-9]+\\.(kernel|bias)",
        "x{2,4}",
        "[]a+*]+",
        "(a{1,16}){1,16}",
        "((((((a?)+)?)+)?)+)",
        "a\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+\\+",
    };
    static const char *const bad[] = {
        "den+++++++++++++++++++++++++++++se_1\\.kernel", /* the fuzz finding: > 2 GB */
        "(((((((((((((((a+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+",
        "(a{1,255}){1,255}",
        "a{2}{2}{2}{2}{2}{2}{2}{2}{2}{2}{2}{2}{2}{2}{2}",
        "a{99999}",
        "a+++++??????+++++++", /* the second finding: minutes in regcomp */
        "a+?",
        "(((((((a?)+)?)+)?)+)?)+",
    };
    mt_layout_map *map = NULL;
    mt_layout l;
    mt_err err = MT_ERR_INIT;
    char deep[80], longkey[MT_LAYOUT_REGEX_MAX_LEN + 2];
    (void)state;
    assert_int_equal(mt_layout_map_new(&map, NULL), MT_OK);
    assert_int_equal(mt_layout_init_batch_sharded(&l, "batch", 2, NULL), MT_OK);
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (mt_layout_map_add(map, ok[i], &l, &err) != MT_OK)
            fail_msg("%s: %s", ok[i], err.msg);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(mt_layout_map_add(map, bad[i], &l, &err), MT_RESOURCE_EXHAUSTED);
        assert_non_null(strstr(err.msg, "too many nested or stacked repetitions"));
    }
    memset(deep, '(', 40);
    deep[40] = 'a';
    memset(deep + 41, ')', 38);
    deep[79] = '\0'; /* 40 open, 38 closed: deeper than the limit either way */
    assert_int_equal(mt_layout_map_add(map, deep, &l, &err), MT_RESOURCE_EXHAUSTED);
    memset(longkey, 'a', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    assert_int_equal(mt_layout_map_add(map, longkey, &l, &err), MT_RESOURCE_EXHAUSTED);
    assert_int_equal(mt_layout_map_count(map), (int)(sizeof(ok) / sizeof(ok[0])));
    mt_layout_map_free(map);
}

static void test_layout_map_alloc_failure_no_leak(void **state)
{
    cJSON *j = cJSON_Parse(spec_mp);
    (void)state;
    for (long n = 0;; n++) {
        mt_layout_map *map = (mt_layout_map *)1;
        mt_code rc;
        mt_alloc_fail_after(n);
        rc = mt_layout_map_from_json(j, &map, NULL);
        mt_alloc_fail_reset();
        if (rc == MT_OK) {
            assert_int_equal(mt_layout_map_count(map), 2);
            mt_layout_map_free(map);
            assert_true(n >= 3);
            break;
        }
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(map);
    }
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_init_and_helpers),
        cmocka_unit_test(test_layout_init_errors_leave_output_untouched),
        cmocka_unit_test(test_layout_from_json),
        cmocka_unit_test(test_layout_validate_errors_name_tensor_axis_sizes),
        cmocka_unit_test(test_layout_shard_shapes_and_offsets),
        cmocka_unit_test(test_layout_replicated_dims),
        cmocka_unit_test(test_layout_map_first_match_full_name),
        cmocka_unit_test(test_layout_map_resolve_rank_mismatch),
        cmocka_unit_test(test_layout_map_from_json_errors),
        cmocka_unit_test(test_layout_map_check_reports_first_problem_with_path),
        cmocka_unit_test(test_layout_map_exact_key_first_and_equality),
        cmocka_unit_test(test_layout_map_add_api),
        cmocka_unit_test(test_layout_map_regex_limits),
        cmocka_unit_test(test_layout_map_alloc_failure_no_leak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
