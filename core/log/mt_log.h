/* SPDX-License-Identifier: MIT */
/*
 * mt_log.h — one line per event on stderr: "2026-11-21T20:30:01.123Z INFO  text".
 *
 * The level is process configuration, set once by main() before threads start
 * (mt_log_set_level) and read atomically afterwards; it is the one piece of
 * process-wide state in core/ besides the allocation test hook (mt_alloc.h) and
 * the optional sink below. Each call writes one line with a single write, so
 * lines from threads do not interleave. Thread-safe; never blocks beyond the
 * write to stderr and the sink.
 * Tests: tests/unit/test_log.c.
 */
#ifndef MT_LOG_H
#define MT_LOG_H

#include <stdint.h>

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

/*
 * A sink sees every printed line as well (the level filter applies first): its
 * level, its wall time in ms, the text without the timestamp and level prefix,
 * and the calling thread's tag (mt_log_set_thread_tag; NULL when the thread has
 * none). The worker uses it to ship a job's lines to the coordinator. Called on
 * the logging thread; it must not log and must not block for long. Set it once
 * from main() before threads start (or NULL to remove it with no thread left
 * that logs).
 */
#define MT_LOG_LINE_TEXT_MAX 1000 /* bytes of a line's text a sink sees at most */

typedef void (*mt_log_sink_fn)(void *ctx, const char *tag, mt_log_level level, int64_t time_ms,
                               const char *text);
void mt_log_set_sink(mt_log_sink_fn fn, void *ctx);

/* The calling thread's tag (copied, at most 63 bytes; NULL or "" clears it). */
void mt_log_set_thread_tag(const char *tag);

#define mt_log_debug(...) mt_log(MT_LOG_DEBUG, __VA_ARGS__)
#define mt_log_info(...)  mt_log(MT_LOG_INFO, __VA_ARGS__)
#define mt_log_warn(...)  mt_log(MT_LOG_WARN, __VA_ARGS__)
#define mt_log_error(...) mt_log(MT_LOG_ERROR, __VA_ARGS__)

#endif
