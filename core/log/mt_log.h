/* SPDX-License-Identifier: MIT */
/*
 * mt_log.h — one line per event on stderr: "2026-11-21T20:30:01.123Z INFO  text".
 *
 * The level is process configuration, set once by main() before threads start
 * (mt_log_set_level) and read atomically afterwards; it is the one piece of
 * process-wide state in core/ besides the allocation test hook (mt_alloc.h).
 * Each call writes one line with a single write, so lines from threads do not
 * interleave. Thread-safe; never blocks beyond the write to stderr.
 * Tests: tests/unit/test_log.c.
 */
#ifndef MT_LOG_H
#define MT_LOG_H

#include "status/mt_status.h"

typedef enum mt_log_level {
    MT_LOG_DEBUG = 0,
    MT_LOG_INFO = 1,
    MT_LOG_WARN = 2,
    MT_LOG_ERROR = 3,
    MT_LOG_OFF = 4,
} mt_log_level;

/* Parse "debug" | "info" | "warn" | "error" | "off". MT_OK or MT_INVALID_ARGUMENT (err says why).
 */
mt_code mt_log_level_parse(const char *name, mt_log_level *out, mt_err *err);

/* Set the minimum level printed (default MT_LOG_INFO). Call from main() only. */
void mt_log_set_level(mt_log_level level);
mt_log_level mt_log_get_level(void);

/* Print one line if level >= the configured level. */
void mt_log(mt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define mt_log_debug(...) mt_log(MT_LOG_DEBUG, __VA_ARGS__)
#define mt_log_info(...)  mt_log(MT_LOG_INFO, __VA_ARGS__)
#define mt_log_warn(...)  mt_log(MT_LOG_WARN, __VA_ARGS__)
#define mt_log_error(...) mt_log(MT_LOG_ERROR, __VA_ARGS__)

#endif
