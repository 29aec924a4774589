/* SPDX-License-Identifier: MIT */
/*
 * mt_status.h — the one error model of meshtrain.
 *
 * Every function that can fail returns an mt_code (gRPC's numbering, so codes
 * cross the RPC boundary unchanged). A caller that may need to show the failure
 * to a person also passes an mt_err: a caller-owned, fixed-size message buffer
 * (may be NULL when the caller only wants the code). Foreign error codes (errno,
 * nng, libuv, SQLite, protobuf-c) are translated where they arise and never
 * cross a module boundary.
 *
 * Threading: all functions are thread-safe; mt_err is owned by one caller.
 * Tests: tests/unit/test_status.c.
 */
#ifndef MT_STATUS_H
#define MT_STATUS_H

#include <stdarg.h>
#include <stddef.h>

typedef enum mt_code {
    MT_OK = 0,
    MT_CANCELLED = 1,
    MT_UNKNOWN = 2,
    MT_INVALID_ARGUMENT = 3,
    MT_DEADLINE_EXCEEDED = 4,
    MT_NOT_FOUND = 5,
    MT_ALREADY_EXISTS = 6,
    MT_PERMISSION_DENIED = 7,
    MT_RESOURCE_EXHAUSTED = 8,
    MT_FAILED_PRECONDITION = 9,
    MT_ABORTED = 10,
    MT_OUT_OF_RANGE = 11,
    MT_UNIMPLEMENTED = 12,
    MT_INTERNAL = 13,
    MT_UNAVAILABLE = 14,
    MT_DATA_LOSS = 15,
    MT_UNAUTHENTICATED = 16,
} mt_code;

#define MT_CODE_MAX     16
#define MT_ERR_MSG_SIZE 256

/* Caller-owned error message. Zero-initialise (MT_ERR_INIT) or mt_err_clear() before use. */
typedef struct mt_err {
    mt_code code;              /* last code set; MT_OK when nothing failed */
    char msg[MT_ERR_MSG_SIZE]; /* NUL-terminated human message, "" when none */
} mt_err;

#define MT_ERR_INIT                                                                                \
    {                                                                                              \
        MT_OK,                                                                                     \
        {                                                                                          \
            0                                                                                      \
        }                                                                                          \
    }

/* "NOT_FOUND" for MT_NOT_FOUND; "UNKNOWN_CODE" for values outside the table. Static string. */
const char *mt_code_name(mt_code code);

/* Human description of the code ("not found"). Static string. */
const char *mt_code_str(mt_code code);

/* The same as mt_code_str(): the name the foundation issue asks for. */
const char *mt_status_str(mt_code code);

/* Parse "NOT_FOUND" (case-insensitive) into *out. Returns MT_OK or MT_INVALID_ARGUMENT. */
mt_code mt_code_parse(const char *name, mt_code *out);

/* True when code is a valid member of the table (0..16). */
int mt_code_valid(int code);

/*
 * Set err (if non-NULL) to code and the printf-formatted message; returns code so a
 * caller can write `return mt_err_set(err, MT_NOT_FOUND, "job %s", id);`. The message
 * is truncated to MT_ERR_MSG_SIZE - 1 bytes.
 */
mt_code mt_err_set(mt_err *err, mt_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
mt_code mt_err_vset(mt_err *err, mt_code code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Prefix the existing message with "prefix: " (keeps the code). Returns err->code (MT_OK if NULL).
 */
mt_code mt_err_prefix(mt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reset to MT_OK and an empty message. NULL is a no-op. */
void mt_err_clear(mt_err *err);

/* The message, or the code's description when the message is empty. Borrowed from err. */
const char *mt_err_msg(const mt_err *err);

#define MT_STATUS_WORD_MAX 64 /* longer words get no suggestion */

/* For "did you mean": the name of names[0..n) closest to word (case-insensitive; an insertion,
 * deletion, substitution or swap of two neighbours is one edit) if it is within 1 edit (words
 * of up to 4 characters) or 2 (longer), else NULL. Borrowed from names. Pure. */
const char *mt_status_suggest(const char *word, const char *const *names, size_t n);

#endif
