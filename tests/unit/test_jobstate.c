/* SPDX-License-Identifier: MIT */
/* test_jobstate.c — unit tests for storage/mt_jobstate.h (names, parse, transition table). */
#include "mt_test.h"

#include <string.h>

#include "storage/mt_jobstate.h"

static void test_jobstate_names_roundtrip(void **state)
{
    mt_err err = MT_ERR_INIT;
    (void)state;
    for (int i = 0; i < MT_JOBSTATE_COUNT; i++) {
        mt_jobstate back;
        assert_int_equal(mt_jobstate_parse(mt_jobstate_name((mt_jobstate)i), &back, &err), MT_OK);
        assert_int_equal(back, i);
    }
    assert_string_equal(mt_jobstate_name(MT_JOBSTATE_RESTARTING), "RESTARTING");
    assert_string_equal(mt_jobstate_name((mt_jobstate)42), "UNKNOWN");
}

static void test_jobstate_parse_rejects_unknown(void **state)
{
    mt_err err = MT_ERR_INIT;
    mt_jobstate s = MT_JOBSTATE_RUNNING;
    (void)state;
    assert_int_equal(mt_jobstate_parse("running", &s, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "\"running\""));
    assert_int_equal(s, MT_JOBSTATE_RUNNING); /* untouched */
    assert_int_equal(mt_jobstate_parse("", &s, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_jobstate_parse(NULL, &s, NULL), MT_INVALID_ARGUMENT);
}

static void test_jobstate_final_states(void **state)
{
    (void)state;
    assert_true(mt_jobstate_is_final(MT_JOBSTATE_SUCCEEDED));
    assert_true(mt_jobstate_is_final(MT_JOBSTATE_FAILED));
    assert_true(mt_jobstate_is_final(MT_JOBSTATE_CANCELLED));
    assert_false(mt_jobstate_is_final(MT_JOBSTATE_QUEUED));
    assert_false(mt_jobstate_is_final(MT_JOBSTATE_RESTARTING));
    assert_false(mt_jobstate_is_final(MT_JOBSTATE_STALLED));
}

/* The whole table, written out independently of the implementation's bitmasks. */
static void test_jobstate_transition_table(void **state)
{
    enum { Q, SC, R, SU, F, C, RS, ST };
    static const char expect[MT_JOBSTATE_COUNT][MT_JOBSTATE_COUNT] = {
        /*          Q  SC R  SU F  C  RS ST */
        [Q] = {0, 1, 0, 0, 1, 1, 0, 0},  [SC] = {1, 0, 1, 0, 1, 1, 1, 0},
        [R] = {0, 0, 0, 1, 1, 1, 1, 1},  [SU] = {0, 0, 0, 0, 0, 0, 0, 0},
        [F] = {0, 0, 0, 0, 0, 0, 0, 0},  [C] = {0, 0, 0, 0, 0, 0, 0, 0},
        [RS] = {0, 1, 0, 0, 1, 1, 0, 0}, [ST] = {0, 0, 1, 0, 1, 1, 1, 0},
    };
    (void)state;
    for (int a = 0; a < MT_JOBSTATE_COUNT; a++)
        for (int b = 0; b < MT_JOBSTATE_COUNT; b++) {
            bool got = mt_jobstate_can_transition((mt_jobstate)a, (mt_jobstate)b);
            if (got != (expect[a][b] != 0))
                fail_msg("%s -> %s: got %d", mt_jobstate_name((mt_jobstate)a),
                         mt_jobstate_name((mt_jobstate)b), got);
        }
    assert_false(mt_jobstate_can_transition((mt_jobstate)-1, MT_JOBSTATE_QUEUED));
    assert_false(mt_jobstate_can_transition(MT_JOBSTATE_QUEUED, (mt_jobstate)99));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobstate_names_roundtrip),
        cmocka_unit_test(test_jobstate_parse_rejects_unknown),
        cmocka_unit_test(test_jobstate_final_states),
        cmocka_unit_test(test_jobstate_transition_table),
    };
    return cmocka_run_group_tests_name("jobstate", tests, NULL, NULL);
}
