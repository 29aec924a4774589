/* SPDX-License-Identifier: MIT */
/* test_blas.c — unit tests for core/blas (mt_blas.h): the core type choice never exceeds the CPU,
 * and boot with the type already set neither re-executes nor changes it. */
#include "mt_test.h"

#include <stdlib.h>
#include <string.h>

#include "blas/mt_blas.h"

static void test_blas_pick(void **state)
{
    (void)state;
    assert_string_equal(mt_blas_pick_coretype(true, true), "SkylakeX");
    assert_string_equal(mt_blas_pick_coretype(false, true), "Haswell");
    assert_null(mt_blas_pick_coretype(false, false));
}

static void test_blas_boot_keeps_existing_type(void **state)
{
    char *argv[] = {"test_blas", NULL};
    (void)state;
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    mt_blas_boot(1, argv); /* would exec (and rerun this test) if it ignored the variable */
    assert_string_equal(getenv("OPENBLAS_CORETYPE"), "Haswell");
    assert_non_null(mt_blas_corename());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blas_pick),
        cmocka_unit_test(test_blas_boot_keeps_existing_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
