/* SPDX-License-Identifier: MIT */
/*
 * mt_test.h — include this (not <cmocka.h>) in every cmocka test: cmocka needs
 * these system headers first, and clang-format must not reorder them.
 */
#ifndef MT_TEST_H
#define MT_TEST_H

// clang-format off
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
// clang-format on
#include <stdlib.h>

/* Run a group, honouring MT_TEST_FILTER (a cmocka glob on test names) to run a subset. */
#define MT_RUN_TESTS(tests)                                                                        \
    (getenv("MT_TEST_FILTER") ? cmocka_set_test_filter(getenv("MT_TEST_FILTER")) : (void)0,        \
     cmocka_run_group_tests(tests, NULL, NULL))

#endif
