/* SPDX-License-Identifier: MIT */
/*
 * test_coord_stats.c — the coordinator's process metrics (coordinator/stats.h)
 * and the HTTP side's text buffer and JSON writers (coordinator/http_int.h):
 * counting by method and code, concurrent updates from several threads, the
 * Prometheus text, JSON string escaping and number formatting.
 */
#include "mt_test.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "coordinator/http_int.h"
#include "coordinator/stats.h"

static void test_coord_stats_counts_by_method_and_code(void **state)
{
    coord_stats *s = coord_stats_new();
    (void)state;

    assert_non_null(s);
    coord_stats_rpc(s, "Heartbeat", MT_OK, 50);
    coord_stats_rpc(s, "Heartbeat", MT_OK, 70);
    coord_stats_rpc(s, "Heartbeat", MT_NOT_FOUND, 10);
    coord_stats_rpc(s, "RegisterWorker", MT_OK, 1500);
    coord_stats_rpc(s, "", MT_UNAUTHENTICATED, 5);
    coord_stats_rpc(s, "X", (mt_code)99, 5); /* out of range -> UNKNOWN */
    assert_int_equal(coord_stats_rpc_count(s, "Heartbeat", MT_OK), 2);
    assert_int_equal(coord_stats_rpc_count(s, "Heartbeat", MT_NOT_FOUND), 1);
    assert_int_equal(coord_stats_rpc_count(s, NULL, MT_OK), 3);
    assert_int_equal(coord_stats_rpc_count(s, "", MT_UNAUTHENTICATED), 1);
    assert_int_equal(coord_stats_rpc_count(s, "X", MT_UNKNOWN), 1);
    assert_int_equal(coord_stats_rpc_count(s, "Nope", MT_OK), 0);
    coord_stats_store_write(s, 800);
    coord_stats_store_write(s, -3); /* clamped to 0, still counted */
    assert_int_equal(coord_stats_store_writes(s), 2);
    coord_stats_rpc(NULL, "Heartbeat", MT_OK, 1); /* NULL stats: no-op */
    coord_stats_store_write(NULL, 1);
    coord_stats_free(s);
    coord_stats_free(NULL);
}

static void test_coord_stats_method_slots_overflow_to_other(void **state)
{
    static char names[COORD_STATS_MAX_METHODS + 5][16];
    coord_stats *s = coord_stats_new();
    (void)state;

    for (int i = 0; i < COORD_STATS_MAX_METHODS + 5; i++) {
        snprintf(names[i], sizeof(names[i]), "M%d", i);
        coord_stats_rpc(s, names[i], MT_OK, 1);
    }
    assert_int_equal(coord_stats_rpc_count(s, NULL, MT_OK), COORD_STATS_MAX_METHODS + 5);
    assert_int_equal(coord_stats_rpc_count(s, "other", MT_OK), 5);
    coord_stats_free(s);
}

typedef struct hammer {
    coord_stats *s;
    const char *method;
} hammer;

static void *hammer_run(void *arg)
{
    hammer *h = arg;

    for (int i = 0; i < 20000; i++) {
        coord_stats_rpc(h->s, h->method, (mt_code)(i % 3), i % 1000);
        coord_stats_store_write(h->s, i % 100);
    }
    return NULL;
}

static void test_coord_stats_concurrent_updates_lose_nothing(void **state)
{
    coord_stats *s = coord_stats_new();
    const char *methods[] = {"A", "B", "A", "C"}; /* two threads race for "A"'s slot */
    pthread_t th[4];
    hammer h[4];
    coord_buf b = {0};
    (void)state;

    for (int i = 0; i < 4; i++) {
        h[i].s = s;
        h[i].method = methods[i];
        pthread_create(&th[i], NULL, hammer_run, &h[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    uint64_t total = 0;
    for (int c = 0; c < 3; c++)
        total += coord_stats_rpc_count(s, NULL, (mt_code)c);
    assert_int_equal(total, 80000);
    assert_int_equal(coord_stats_rpc_count(s, "A", MT_OK) + coord_stats_rpc_count(s, "A", 1) +
                         coord_stats_rpc_count(s, "A", 2),
                     40000);
    assert_int_equal(coord_stats_store_writes(s), 80000);
    assert_int_equal(coord_stats_prom(s, &b), MT_OK);
    /* "A" has exactly one series per code: no duplicate label sets */
    const char *first = strstr(b.data, "meshtrain_rpc_requests_total{method=\"A\",code=\"OK\"}");
    assert_non_null(first);
    assert_null(strstr(first + 1, "meshtrain_rpc_requests_total{method=\"A\",code=\"OK\"}"));
    coord_buf_fini(&b);
    coord_stats_free(s);
}

static void test_coord_stats_prometheus_text(void **state)
{
    coord_stats *s = coord_stats_new();
    coord_buf b = {0};
    (void)state;

    coord_stats_rpc(s, "Heartbeat", MT_OK, 90);      /* <= 100 us bucket */
    coord_stats_rpc(s, "Heartbeat", MT_OK, 2000);    /* <= 2.5 ms */
    coord_stats_rpc(s, "Heartbeat", MT_OK, 9000000); /* +Inf only */
    coord_stats_store_write(s, 400);
    assert_int_equal(coord_stats_prom(s, &b), MT_OK);
    assert_non_null(strstr(b.data, "# TYPE meshtrain_rpc_requests_total counter\n"));
    assert_non_null(
        strstr(b.data, "meshtrain_rpc_requests_total{method=\"Heartbeat\",code=\"OK\"} 3\n"));
    assert_non_null(strstr(b.data, "# TYPE meshtrain_rpc_duration_seconds histogram\n"));
    assert_non_null(strstr(
        b.data, "meshtrain_rpc_duration_seconds_bucket{method=\"Heartbeat\",le=\"0.0001\"} 1\n"));
    assert_non_null(strstr(
        b.data, "meshtrain_rpc_duration_seconds_bucket{method=\"Heartbeat\",le=\"0.0025\"} 2\n"));
    assert_non_null(
        strstr(b.data, "meshtrain_rpc_duration_seconds_bucket{method=\"Heartbeat\",le=\"5\"} 2\n"));
    assert_non_null(strstr(
        b.data, "meshtrain_rpc_duration_seconds_bucket{method=\"Heartbeat\",le=\"+Inf\"} 3\n"));
    assert_non_null(
        strstr(b.data, "meshtrain_rpc_duration_seconds_sum{method=\"Heartbeat\"} 9.002090\n"));
    assert_non_null(
        strstr(b.data, "meshtrain_rpc_duration_seconds_count{method=\"Heartbeat\"} 3\n"));
    assert_non_null(
        strstr(b.data, "meshtrain_store_write_duration_seconds_bucket{le=\"0.0005\"} 1\n"));
    assert_non_null(strstr(b.data, "meshtrain_store_write_duration_seconds_count 1\n"));
    coord_buf_fini(&b);
    coord_stats_free(s);
}

static void test_coord_stats_prom_reports_oom(void **state)
{
    coord_stats *s = coord_stats_new();
    coord_buf b = {0};
    (void)state;

    coord_stats_rpc(s, "Heartbeat", MT_OK, 1);
    mt_alloc_fail_after(0);
    assert_int_equal(coord_stats_prom(s, &b), MT_RESOURCE_EXHAUSTED);
    mt_alloc_fail_reset();
    assert_true(b.oom);
    coord_buf_fini(&b);
    coord_stats_free(s);
}

static void test_coord_buf_json_writers(void **state)
{
    coord_buf b = {0};
    (void)state;

    coord_buf_json_str(&b, "a\"b\\c\n\x01");
    assert_string_equal(b.data, "\"a\\\"b\\\\c\\u000a\\u0001\"");
    coord_buf_fini(&b);
    coord_buf_u64(&b, 0);
    coord_buf_add(&b, " ", 1);
    coord_buf_u64(&b, UINT64_MAX);
    assert_string_equal(b.data, "0 18446744073709551615");
    coord_buf_fini(&b);
    coord_buf_printf(&b, "%s-%d", "x", 42);
    assert_string_equal(b.data, "x-42");
    coord_buf_fini(&b);
}

static void test_coord_buf_json_numbers(void **state)
{
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {0.0, "0"},
        {1.0, "1"},
        {0.5, "0.5"},
        {-2.25, "-2.25"},
        {100.0, "100"},
        {123456789.0, "123456789"},
        {0.1, "0.1"},
        {0.0001, "0.0001"},
        {2.302585093, "2.30258509"},
        {9.9999999999, "10"},
        {4970.725658614674, "4970.72566"},
        {1e-7, "1e-07"},
        {1e12, "1e+12"}, /* outside the fast range: printf */
        {NAN, "null"},
        {INFINITY, "null"},
        {-INFINITY, "null"},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        coord_buf b = {0};
        coord_buf_json_num(&b, cases[i].v);
        assert_string_equal(b.data, cases[i].want);
        coord_buf_fini(&b);
    }
    /* agrees with printf's %.9g to within one unit of the 9th digit */
    for (int i = 1; i < 20000; i++) {
        double v = sin(i) * pow(10.0, (i % 13) - 4);
        char want[40];
        coord_buf b = {0};
        coord_buf_json_num(&b, v);
        snprintf(want, sizeof(want), "%.9g", v);
        double got = strtod(b.data, NULL), ref = strtod(want, NULL);
        assert_true(fabs(got - ref) <= fabs(ref) * 1.01e-8);
        coord_buf_fini(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coord_stats_counts_by_method_and_code),
        cmocka_unit_test(test_coord_stats_method_slots_overflow_to_other),
        cmocka_unit_test(test_coord_stats_concurrent_updates_lose_nothing),
        cmocka_unit_test(test_coord_stats_prometheus_text),
        cmocka_unit_test(test_coord_stats_prom_reports_oom),
        cmocka_unit_test(test_coord_buf_json_writers),
        cmocka_unit_test(test_coord_buf_json_numbers),
    };
    return MT_RUN_TESTS(tests);
}
