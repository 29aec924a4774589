/* SPDX-License-Identifier: MIT */
/* test_status.c — unit tests for core/status (mt_status.h). */
#include "mt_test.h"

#include <string.h>

#include "alloc/mt_alloc.h"
#include "log/mt_log.h"
#include "status/mt_status.h"

static void test_status_names_match_grpc(void **state)
{
    (void)state;
    assert_string_equal(mt_code_name(MT_OK), "OK");
    assert_string_equal(mt_code_name(MT_INVALID_ARGUMENT), "INVALID_ARGUMENT");
    assert_string_equal(mt_code_name(MT_UNAUTHENTICATED), "UNAUTHENTICATED");
    assert_int_equal(MT_UNAVAILABLE, 14);
    assert_int_equal(MT_UNIMPLEMENTED, 12);
    assert_string_equal(mt_code_name((mt_code)99), "UNKNOWN_CODE");
    assert_string_equal(mt_status_str(MT_NOT_FOUND), "not found");
    for (int i = 0; i <= MT_CODE_MAX; i++) {
        mt_code back;
        assert_int_equal(mt_code_parse(mt_code_name((mt_code)i), &back), MT_OK);
        assert_int_equal(back, i);
    }
    mt_code c;
    assert_int_equal(mt_code_parse("no_such", &c), MT_INVALID_ARGUMENT);
}

static void test_status_err_set_and_prefix(void **state)
{
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_err_set(&err, MT_NOT_FOUND, "job %d", 7), MT_NOT_FOUND);
    assert_string_equal(err.msg, "job 7");
    mt_err_prefix(&err, "cancel");
    assert_string_equal(err.msg, "cancel: job 7");
    assert_int_equal(err.code, MT_NOT_FOUND);
    mt_err_clear(&err);
    assert_string_equal(mt_err_msg(&err), "ok");
    /* NULL err is allowed everywhere */
    assert_int_equal(mt_err_set(NULL, MT_INTERNAL, "x"), MT_INTERNAL);
    /* truncation keeps a terminated string */
    char big[600];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    mt_err_set(&err, MT_INTERNAL, "%s", big);
    assert_int_equal(strlen(err.msg), MT_ERR_MSG_SIZE - 1);
}

static void test_status_alloc_hook_fails_nth(void **state)
{
    (void)state;
    mt_alloc_fail_after(2);
    void *a = mt_malloc(8), *b = mt_malloc(8), *c = mt_malloc(8);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c);
    assert_int_equal(mt_alloc_failures(), 1);
    mt_alloc_fail_reset();
    c = mt_malloc(8);
    assert_non_null(c);
    mt_free(a);
    mt_free(b);
    mt_free(c);
}

static void test_status_log_level_parse(void **state)
{
    mt_log_level l;
    mt_err err = MT_ERR_INIT;
    (void)state;
    assert_int_equal(mt_log_level_parse("warn", &l, &err), MT_OK);
    assert_int_equal(l, MT_LOG_WARN);
    assert_int_equal(mt_log_level_parse("loud", &l, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "loud"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names_match_grpc),
        cmocka_unit_test(test_status_err_set_and_prefix),
        cmocka_unit_test(test_status_alloc_hook_fails_nth),
        cmocka_unit_test(test_status_log_level_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
