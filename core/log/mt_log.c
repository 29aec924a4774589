/* SPDX-License-Identifier: MIT */
/*
 * mt_log.c — timestamped stderr lines (contract in mt_log.h).
 * The line is formatted into a stack buffer and written with one write(2).
 */
#include "log/mt_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_level = MT_LOG_INFO;
static void *log_sink_ctx;               /* set before log_sink */
static _Atomic(mt_log_sink_fn) log_sink; /* NULL: none */
static _Thread_local char thread_tag[64];

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

mt_code mt_log_level_parse(const char *name, mt_log_level *out, mt_err *err)
{
    for (int i = 0; name != NULL && i <= MT_LOG_OFF; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (mt_log_level)i;
            return MT_OK;
        }
    }
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "log level '%s': expected debug, info, warn, error or off",
                      name ? name : "(null)");
}

void mt_log_set_level(mt_log_level level)
{
    atomic_store(&log_level, (int)level);
}

mt_log_level mt_log_get_level(void)
{
    return (mt_log_level)atomic_load(&log_level);
}

void mt_log_set_sink(mt_log_sink_fn fn, void *ctx)
{
    if (fn != NULL)
        log_sink_ctx = ctx;
    atomic_store(&log_sink, fn);
}

void mt_log_set_thread_tag(const char *tag)
{
    snprintf(thread_tag, sizeof(thread_tag), "%s", tag != NULL ? tag : "");
}

void mt_log(mt_log_level level, const char *fmt, ...)
{
    static const char *const tags[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t n, text;
    mt_log_sink_fn sink;
    va_list ap;
    int k;

    if ((int)level < atomic_load(&log_level) || level >= MT_LOG_OFF)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    k = snprintf(line + n, sizeof(line) - n, ".%03ldZ %s ", ts.tv_nsec / 1000000L, tags[level]);
    if (k > 0)
        n += (size_t)k;
    text = n;
    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (k > 0)
        n += (size_t)k < sizeof(line) - n - 1 ? (size_t)k : sizeof(line) - n - 2;
    line[n] = '\0';
    sink = atomic_load(&log_sink);
    if (sink != NULL)
        sink(log_sink_ctx, thread_tag[0] ? thread_tag : NULL, level,
             (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000L, line + text);
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, n) < 0) {
        /* nothing sensible to do when stderr is gone */
    }
}
