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

/* Optimal string alignment distance of a and b (an insertion, deletion, substitution or swap of
 * two neighbours is one edit), or limit + 1 when it exceeds limit. */
static size_t edit_distance(const char *a, const char *b, size_t limit)
{
    size_t na = strlen(a), nb = strlen(b);
    size_t d[MT_CLI_WORD_MAX + 1][MT_CLI_WORD_MAX + 1];

    if (na > MT_CLI_WORD_MAX || nb > MT_CLI_WORD_MAX || (na > nb ? na - nb : nb - na) > limit)
        return limit + 1;
    for (size_t i = 0; i <= na; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= na; i++) {
        for (size_t j = 1; j <= nb; j++) {
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t v = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < v)
                v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[na][nb] > limit ? limit + 1 : d[na][nb];
}

const char *mt_cli_closest(const char *word, const char *const *names, size_t n)
{
    size_t limit = strlen(word) <= 4 ? 1 : 2, best = limit + 1;
    const char *pick = NULL;

    for (size_t i = 0; i < n; i++) {
        size_t dist = edit_distance(word, names[i], limit);
        if (dist < best) {
            best = dist;
            pick = names[i];
        }
    }
    return pick;
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
