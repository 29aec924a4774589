/* SPDX-License-Identifier: MIT */
/* test_status.c — unit tests for core/status (mt_status.h). */
#include "mt_test.h"

#include <pthread.h>
#include <stdio.h>
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

typedef struct sink_seen {
    int calls;
    char tag[64];
    mt_log_level level;
    char text[128];
    int64_t time_ms;
} sink_seen;

static void sink(void *ctx, const char *tag, mt_log_level level, int64_t time_ms, const char *text)
{
    sink_seen *s = ctx;
    s->calls++;
    snprintf(s->tag, sizeof(s->tag), "%s", tag ? tag : "(none)");
    s->level = level;
    s->time_ms = time_ms;
    snprintf(s->text, sizeof(s->text), "%s", text);
}

static void *tag_thread(void *arg)
{
    (void)arg;
    mt_log_warn("from another thread"); /* its own tag: none */
    return NULL;
}

/* A sink sees each printed line's text (no prefix), level, time and the thread's tag. */
static void test_status_log_sink_and_thread_tag(void **state)
{
    sink_seen s = {0};
    pthread_t th;
    (void)state;

    mt_log_set_level(MT_LOG_INFO);
    mt_log_set_sink(sink, &s);
    mt_log_debug("below the level");
    assert_int_equal(s.calls, 0);
    mt_log_set_thread_tag("job-000007");
    mt_log_info("step %d done", 3);
    assert_int_equal(s.calls, 1);
    assert_string_equal(s.tag, "job-000007");
    assert_string_equal(s.text, "step 3 done");
    assert_int_equal(s.level, MT_LOG_INFO);
    assert_true(s.time_ms > 1700000000000LL);
    assert_int_equal(pthread_create(&th, NULL, tag_thread, NULL), 0);
    pthread_join(th, NULL);
    assert_int_equal(s.calls, 2);
    assert_string_equal(s.tag, "(none)");
    assert_int_equal(s.level, MT_LOG_WARN);
    mt_log_set_thread_tag(NULL);
    mt_log_error("untagged");
    assert_string_equal(s.tag, "(none)");
    mt_log_set_sink(NULL, NULL);
    mt_log_error("no sink");
    assert_int_equal(s.calls, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names_match_grpc),
        cmocka_unit_test(test_status_err_set_and_prefix),
        cmocka_unit_test(test_status_alloc_hook_fails_nth),
        cmocka_unit_test(test_status_log_level_parse),
        cmocka_unit_test(test_status_log_sink_and_thread_tag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
