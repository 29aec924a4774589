/* SPDX-License-Identifier: MIT */
/*
 * store_logs.c — the lines workers logged for a job (contract in mt_store.h, "worker log
 * lines"): appended in arrival order, deduplicated by (job, worker, attempt, seq), trimmed
 * to the newest MT_STORE_JOB_LOG_KEEP per job after each append.
 */
#include <string.h>

#include "alloc/mt_alloc.h"
#include "storage/store_int.h"

static mt_code check_lines(const char *worker_id, const mt_store_log_line *lines, size_t n,
                           mt_err *err)
{
    if (n > 0 && lines == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "store log lines: %zu lines but no array", n);
    if (strlen(worker_id) >= sizeof(lines[0].worker_id))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "store log lines: worker id too long");
    for (size_t i = 0; i < n; i++)
        if (!mt_store__terminated(lines[i].level, sizeof(lines[i].level)) ||
            !mt_store__terminated(lines[i].text, sizeof(lines[i].text)))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "store log lines: line %zu: unterminated level or text", i);
    return MT_OK;
}

mt_code mt_store_job_log_insert(mt_store *s, const char *job_id, const char *worker_id,
                                uint32_t attempt, const mt_store_log_line *lines, size_t n,
                                mt_err *err)
{
    mt_code code = mt_store__need(job_id, "store log lines: job_id", err);
    sqlite3_stmt *st;
    int rc = SQLITE_DONE;

    if (code == MT_OK)
        code = mt_store__need(worker_id, "store log lines: worker_id", err);
    if (code == MT_OK)
        code = check_lines(worker_id, lines, n, err);
    if (code != MT_OK || n == 0)
        return code;
    code = mt_store__call_begin(s, err);
    if (code != MT_OK)
        return code;
    code = mt_store__need_job(s, job_id, "store log lines", err);
    st = mt_store__stmt(s, MT_STMT_LOG_INSERT);
    mt_store__bind_text(st, 1, job_id);
    mt_store__bind_text(st, 2, worker_id);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)attempt);
    for (size_t i = 0; i < n && code == MT_OK; i++) {
        sqlite3_reset(st); /* keeps the job, worker and attempt bindings */
        sqlite3_bind_int64(st, 4, (sqlite3_int64)lines[i].seq);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)lines[i].time_ms);
        mt_store__bind_text(st, 6, lines[i].level);
        mt_store__bind_text(st, 7, lines[i].text);
        rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            code = mt_store__fail(s, rc, err, "store log line %zu of job %s", i, job_id);
    }
    mt_store__stmt_done(st);
    if (code == MT_OK) {
        st = mt_store__stmt(s, MT_STMT_LOG_TRIM);
        mt_store__bind_text(st, 1, job_id);
        sqlite3_bind_int64(st, 2, MT_STORE_JOB_LOG_KEEP);
        rc = mt_store__step_done(st);
        if (rc != SQLITE_OK)
            code = mt_store__fail(s, rc, err, "trim the log lines of job %s", job_id);
        mt_store__stmt_done(st);
    }
    return mt_store__call_end(s, code, err);
}

static void read_line_row(sqlite3_stmt *st, void *elem)
{
    mt_store_log_line *l = elem;

    l->id = sqlite3_column_int64(st, 0);
    mt_store__col_text(st, 1, l->worker_id, sizeof(l->worker_id));
    l->attempt = (uint32_t)sqlite3_column_int64(st, 2);
    l->seq = (uint64_t)sqlite3_column_int64(st, 3);
    l->time_ms = sqlite3_column_int64(st, 4);
    mt_store__col_text(st, 5, l->level, sizeof(l->level));
    mt_store__col_text(st, 6, l->text, sizeof(l->text));
}

mt_code mt_store_job_log_page(mt_store *s, const char *job_id, int64_t after_id, size_t limit,
                              mt_store_log_line **out, size_t *n, mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code;

    if (out == NULL || n == NULL || job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "list log lines: NULL argument");
    *out = NULL;
    *n = 0;
    code = mt_store__call_begin(s, err);
    if (code != MT_OK)
        return code;
    code = mt_store__need_job(s, job_id, "list log lines", err);
    if (code == MT_OK) {
        st = mt_store__stmt(s, MT_STMT_LOG_PAGE);
        mt_store__bind_text(st, 1, job_id);
        sqlite3_bind_int64(st, 2, after_id);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)(limit == 0 ? 1000 : limit));
        code = mt_store__collect(s, st, sizeof(**out), read_line_row, (void **)out, n,
                                 "list log lines", err);
    }
    code = mt_store__call_end(s, code, err);
    if (code != MT_OK) {
        mt_free(*out);
        *out = NULL;
        *n = 0;
    }
    return code;
}

void mt_store_job_log_free(mt_store_log_line *lines)
{
    mt_free(lines);
}
