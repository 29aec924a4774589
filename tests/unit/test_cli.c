/* SPDX-License-Identifier: MIT */
/*
 * test_cli.c — the CLI's message helpers (client/cli.h): "did you mean" (mt_cli_closest) for
 * every kind of one-edit typo of a command, two edits in longer words, nothing for words too
 * far, too long or empty, case ignored, the first on a tie; and the exit-code mapping of the
 * codes the hint is printed for.
 */
#include "mt_test.h"

#include <string.h>

#include "client/cli.h"

static const char *const cmds[] = {"workers", "train",  "export",  "submit",
                                   "jobs",    "status", "cancel",  "checkpoints",
                                   "plan",    "watch",  "predict", "generate"};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static void expect(const char *word, const char *want)
{
    const char *got = mt_cli_closest(word, cmds, NCMDS);
    if (want == NULL)
        assert_null(got);
    else
        assert_string_equal(got, want);
}

static void test_cli_closest_one_edit(void **state)
{
    (void)state;
    expect("sumbit", "submit"); /* swap */
    expect("wacth", "watch");   /* swap */
    expect("job", "jobs");      /* deletion */
    expect("jobss", "jobs");    /* insertion */
    expect("plen", "plan");     /* substitution */
    expect("Watch", "watch");   /* case */
    expect("expert", "export"); /* substitution */
    expect("stauts", "status"); /* swap */
    expect("cancle", "cancel"); /* swap */
    expect("checkpoint", "checkpoints");
}

static void test_cli_closest_limits(void **state)
{
    (void)state;
    expect("wrkrs", "workers"); /* two edits in a long word */
    expect("jb", NULL);         /* two edits in a short word */
    expect("xyz", NULL);
    expect("", NULL);
    expect("submit", "submit"); /* distance 0: the command itself */
    expect("completely-different", NULL);
    char longw[200];
    memset(longw, 'a', sizeof(longw) - 1);
    longw[sizeof(longw) - 1] = '\0';
    expect(longw, NULL);
    assert_null(mt_cli_closest("jobs", cmds, 0));
}

static void test_cli_closest_tie(void **state)
{
    static const char *const two[] = {"cat", "car"};
    (void)state;
    assert_string_equal(mt_cli_closest("caz", two, 2), "cat");
}

static void test_cli_exit_codes(void **state)
{
    (void)state;
    assert_int_equal(mt_cli_exit_from_code(MT_UNAVAILABLE), MT_EXIT_UNREACHABLE);
    assert_int_equal(mt_cli_exit_from_code(MT_DEADLINE_EXCEEDED), MT_EXIT_UNREACHABLE);
    assert_int_equal(mt_cli_exit_from_code(MT_INVALID_ARGUMENT), MT_EXIT_REJECTED);
    assert_int_equal(mt_cli_exit_from_code(MT_OK), MT_EXIT_OK);
    assert_int_equal(mt_cli_exit_from_code(MT_INTERNAL), MT_EXIT_FAILED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_closest_one_edit),
        cmocka_unit_test(test_cli_closest_limits),
        cmocka_unit_test(test_cli_closest_tie),
        cmocka_unit_test(test_cli_exit_codes),
    };
    return MT_RUN_TESTS(tests);
}
