/* SPDX-License-Identifier: MIT */
/*
 * mt_status.c — code table and mt_err helpers (contract in mt_status.h).
 * One static table serves mt_code_name, mt_code_str and mt_code_parse.
 * Thread-safe: only reads const data and the caller's mt_err.
 * Tests: tests/unit/test_status.c.
 */
#include "status/mt_status.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    const char *text;
} code_table[MT_CODE_MAX + 1] = {
    [MT_OK] = {"OK", "ok"},
    [MT_CANCELLED] = {"CANCELLED", "cancelled"},
    [MT_UNKNOWN] = {"UNKNOWN", "unknown error"},
    [MT_INVALID_ARGUMENT] = {"INVALID_ARGUMENT", "invalid argument"},
    [MT_DEADLINE_EXCEEDED] = {"DEADLINE_EXCEEDED", "deadline exceeded"},
    [MT_NOT_FOUND] = {"NOT_FOUND", "not found"},
    [MT_ALREADY_EXISTS] = {"ALREADY_EXISTS", "already exists"},
    [MT_PERMISSION_DENIED] = {"PERMISSION_DENIED", "permission denied"},
    [MT_RESOURCE_EXHAUSTED] = {"RESOURCE_EXHAUSTED", "resource exhausted"},
    [MT_FAILED_PRECONDITION] = {"FAILED_PRECONDITION", "failed precondition"},
    [MT_ABORTED] = {"ABORTED", "aborted"},
    [MT_OUT_OF_RANGE] = {"OUT_OF_RANGE", "out of range"},
    [MT_UNIMPLEMENTED] = {"UNIMPLEMENTED", "not implemented"},
    [MT_INTERNAL] = {"INTERNAL", "internal error"},
    [MT_UNAVAILABLE] = {"UNAVAILABLE", "unavailable"},
    [MT_DATA_LOSS] = {"DATA_LOSS", "data loss"},
    [MT_UNAUTHENTICATED] = {"UNAUTHENTICATED", "unauthenticated"},
};

int mt_code_valid(int code)
{
    return code >= 0 && code <= MT_CODE_MAX;
}

const char *mt_code_name(mt_code code)
{
    return mt_code_valid((int)code) ? code_table[code].name : "UNKNOWN_CODE";
}

const char *mt_code_str(mt_code code)
{
    return mt_code_valid((int)code) ? code_table[code].text : "unknown status code";
}

const char *mt_status_str(mt_code code)
{
    return mt_code_str(code);
}

mt_code mt_code_parse(const char *name, mt_code *out)
{
    if (name == NULL)
        return MT_INVALID_ARGUMENT;
    for (int i = 0; i <= MT_CODE_MAX; i++) {
        if (strcasecmp(name, code_table[i].name) == 0) {
            *out = (mt_code)i;
            return MT_OK;
        }
    }
    return MT_INVALID_ARGUMENT;
}

mt_code mt_err_vset(mt_err *err, mt_code code, const char *fmt, va_list ap)
{
    if (err == NULL)
        return code;
    err->code = code;
    if (fmt == NULL) {
        err->msg[0] = '\0';
        return code;
    }
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    return code;
}

mt_code mt_err_set(mt_err *err, mt_code code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    mt_err_vset(err, code, fmt, ap);
    va_end(ap);
    return code;
}

mt_code mt_err_prefix(mt_err *err, const char *fmt, ...)
{
    char prefix[MT_ERR_MSG_SIZE];
    char old[MT_ERR_MSG_SIZE];
    va_list ap;

    if (err == NULL)
        return MT_OK;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    /* truncation is intended: the message is bounded by design */
    size_t np = strnlen(prefix, sizeof(err->msg) - 1);
    memcpy(err->msg, prefix, np);
    size_t n = np;
    for (const char *s = ": "; *s != '\0' && n < sizeof(err->msg) - 1; s++)
        err->msg[n++] = *s;
    size_t no = strnlen(old, sizeof(old));
    if (no > sizeof(err->msg) - 1 - n)
        no = sizeof(err->msg) - 1 - n;
    memcpy(err->msg + n, old, no);
    err->msg[n + no] = '\0';
    return err->code;
}

void mt_err_clear(mt_err *err)
{
    if (err == NULL)
        return;
    err->code = MT_OK;
    err->msg[0] = '\0';
}

const char *mt_err_msg(const mt_err *err)
{
    if (err == NULL)
        return "";
    return err->msg[0] != '\0' ? err->msg : mt_code_str(err->code);
}

/* Optimal string alignment distance of a and b (an insertion, deletion, substitution or swap of
 * two neighbours is one edit), or limit + 1 when it exceeds limit. */
static size_t edit_distance(const char *a, const char *b, size_t limit)
{
    size_t na = strlen(a), nb = strlen(b);
    size_t d[MT_STATUS_WORD_MAX + 1][MT_STATUS_WORD_MAX + 1];

    if (na > MT_STATUS_WORD_MAX || nb > MT_STATUS_WORD_MAX || (na > nb ? na - nb : nb - na) > limit)
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

const char *mt_status_suggest(const char *word, const char *const *names, size_t n)
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
