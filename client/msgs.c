/* SPDX-License-Identifier: MIT */
/*
 * msgs.c — user messages and exit-code mapping of the CLI (contract in cli.h),
 * in one place as curl's tool_msgs.c.
 */
#include "client/cli.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

mt_exit mt_cli_exit_from_code(mt_code code)
{
    switch (code) {
    case MT_OK:
        return MT_EXIT_OK;
    case MT_UNAVAILABLE:
    case MT_DEADLINE_EXCEEDED:
        return MT_EXIT_UNREACHABLE;
    case MT_INVALID_ARGUMENT:
    case MT_NOT_FOUND:
    case MT_ALREADY_EXISTS:
    case MT_UNAUTHENTICATED:
    case MT_PERMISSION_DENIED:
    case MT_FAILED_PRECONDITION:
    case MT_RESOURCE_EXHAUSTED:
    case MT_UNIMPLEMENTED:
    case MT_OUT_OF_RANGE:
        return MT_EXIT_REJECTED;
    default:
        return MT_EXIT_FAILED;
    }
}

mt_exit mt_cli_fail(const mt_err *err)
{
    fprintf(stderr, "meshtrain: %s: %s\n", mt_code_name(err->code), mt_err_msg(err));
    if (err->code == MT_UNAVAILABLE) /* the message names the address the CLI tried */
        fprintf(stderr, "meshtrain: hint: is the coordinator running at that address? Start one "
                        "with 'make cluster' (or meshtrain-coordinator), or set --coordinator URL "
                        "or MESHTRAIN_COORDINATOR.\n");
    return mt_cli_exit_from_code(err->code);
}

const char *mt_cli_closest(const char *word, const char *const *names, size_t n)
{
    return mt_status_suggest(word, names, n);
}

mt_exit mt_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "meshtrain %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'meshtrain %s --help'.\n", cmd);
    return MT_EXIT_USAGE;
}
