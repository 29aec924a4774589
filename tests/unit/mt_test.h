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

#endif
