/* SPDX-License-Identifier: MIT */
/*
 * test_prom.c — core/prom (mt_prom.h): histogram buckets are cumulative with +Inf, _sum and
 * _count, labels joined before le; observations from several threads all count; the process
 * text has meshtrain_build_info with the program; writers return the length they need and
 * truncate into a short buffer (the exposition itself is checked by promtool in
 * test_worker_metrics.sh and test_http_api.sh).
 */
#include "mt_test.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "prom/mt_prom.h"

static const double BOUNDS[] = {0.01, 0.1, 1};

static void test_prom_hist_buckets_sum_count(void **state)
{
    mt_prom_hist h = {0};
    char out[2048];
    (void)state;

    mt_prom_hist_init(&h, BOUNDS, 3);
    mt_prom_hist_observe(&h, 0.005); /* le 0.01 */
    mt_prom_hist_observe(&h, 0.01);  /* le 0.01: bounds are inclusive */
    mt_prom_hist_observe(&h, 0.5);   /* le 1 */
    mt_prom_hist_observe(&h, 7);     /* +Inf */
    mt_prom_hist_observe(&h, -1);    /* counts as 0 */
    assert_int_equal(mt_prom_hist_count(&h), 5);
    size_t need = mt_prom_hist_write(&h, "x_seconds", "op=\"a\"", "Help.", out, sizeof(out));
    assert_int_equal(need, strlen(out));
    assert_non_null(strstr(out, "# HELP x_seconds Help.\n# TYPE x_seconds histogram\n"));
    assert_non_null(strstr(out, "x_seconds_bucket{op=\"a\",le=\"0.01\"} 3\n"));
    assert_non_null(strstr(out, "x_seconds_bucket{op=\"a\",le=\"0.1\"} 3\n"));
    assert_non_null(strstr(out, "x_seconds_bucket{op=\"a\",le=\"1\"} 4\n"));
    assert_non_null(strstr(out, "x_seconds_bucket{op=\"a\",le=\"+Inf\"} 5\n"));
    assert_non_null(strstr(out, "x_seconds_sum{op=\"a\"} 7.515000000\n"));
    assert_non_null(strstr(out, "x_seconds_count{op=\"a\"} 5\n"));
    /* no labels, no HELP */
    mt_prom_hist_write(&h, "y", "", NULL, out, sizeof(out));
    assert_null(strstr(out, "# HELP"));
    assert_non_null(strstr(out, "y_bucket{le=\"+Inf\"} 5\ny_sum 7.515000000\ny_count 5\n"));
}

static void test_prom_writers_report_needed_length(void **state)
{
    mt_prom_hist h = {0};
    char small[16], big[8192];
    (void)state;

    mt_prom_hist_init(&h, BOUNDS, 3);
    size_t need = mt_prom_hist_write(&h, "z", "", "H.", NULL, 0);
    assert_true(need > sizeof(small));
    assert_int_equal(mt_prom_hist_write(&h, "z", "", "H.", small, sizeof(small)), need);
    assert_int_equal(strlen(small), sizeof(small) - 1); /* truncated, NUL-terminated */
    need = mt_prom_process(NULL, 0, "meshtrain-test");
    assert_int_equal(mt_prom_process(big, sizeof(big), "meshtrain-test"), need);
    assert_int_equal(strlen(big), need);
    assert_non_null(strstr(big, "meshtrain_build_info{version=\"" MT_VERSION
                                "\",program=\"meshtrain-test\"} 1\n"));
    assert_non_null(strstr(big, "\nprocess_resident_memory_bytes "));
    assert_non_null(strstr(big, "\nprocess_open_fds "));
}

static void *observer(void *arg)
{
    for (int i = 0; i < 10000; i++)
        mt_prom_hist_observe(arg, (i % 3) * 0.05);
    return NULL;
}

static void test_prom_hist_concurrent_observations(void **state)
{
    mt_prom_hist h = {0};
    pthread_t th[4];
    (void)state;

    mt_prom_hist_init(&h, BOUNDS, 3);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, observer, &h), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(mt_prom_hist_count(&h), 40000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prom_hist_buckets_sum_count),
        cmocka_unit_test(test_prom_writers_report_needed_length),
        cmocka_unit_test(test_prom_hist_concurrent_observations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
