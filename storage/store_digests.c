/* SPDX-License-Identifier: MIT */
/*
 * store_digests.c — the state digests of a job's steps (contract in mt_store.h, "state
 * digests"): one row per (job, step), replaced when the step is redone.
 */
#include <string.h>

#include "alloc/mt_alloc.h"
#include "storage/store_int.h"

static bool is_hex64(const char *h)
{
    size_t i;
    for (i = 0; i < 64; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return false;
    return h[i] == '\0';
}

mt_code mt_store_job_digests_put(mt_store *s, const char *job_id, const mt_store_digest *d,
                                 size_t n, mt_err *err)
{
    mt_code code = mt_store__need(job_id, "store digests: job_id", err);
    sqlite3_stmt *st;
    int rc;

    for (size_t i = 0; code == MT_OK && i < n; i++) {
        if (d[i].step >= (1ull << 63))
            code = mt_err_set(err, MT_INVALID_ARGUMENT, "store digests: step %llu out of range",
                              (unsigned long long)d[i].step);
        else if (!mt_store__terminated(d[i].digest, sizeof(d[i].digest)) || !is_hex64(d[i].digest))
            code = mt_err_set(err, MT_INVALID_ARGUMENT,
                              "store digests: step %llu: expected 64 lower-case hex digits",
                              (unsigned long long)d[i].step);
    }
    if (code != MT_OK || n == 0)
        return code;
    code = mt_store__call_begin(s, err);
    if (code != MT_OK)
        return code;
    code = mt_store__need_job(s, job_id, "store digests", err);
    st = mt_store__stmt(s, MT_STMT_DIGEST_UPSERT);
    mt_store__bind_text(st, 1, job_id);
    for (size_t i = 0; i < n && code == MT_OK; i++) {
        sqlite3_reset(st); /* keeps the job binding */
        sqlite3_bind_int64(st, 2, (sqlite3_int64)d[i].step);
        mt_store__bind_text(st, 3, d[i].digest);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)d[i].time_ms);
        rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            code = mt_store__fail(s, rc, err, "store digest of step %llu of job %s",
                                  (unsigned long long)d[i].step, job_id);
    }
    mt_store__stmt_done(st);
    return mt_store__call_end(s, code, err);
}

static void read_digest_row(sqlite3_stmt *st, void *elem)
{
    mt_store_digest *d = elem;

    d->step = (uint64_t)sqlite3_column_int64(st, 0);
    mt_store__col_text(st, 1, d->digest, sizeof(d->digest));
    d->time_ms = sqlite3_column_int64(st, 2);
}

mt_code mt_store_job_digests(mt_store *s, const char *job_id, uint64_t since_step, size_t limit,
                             mt_store_digest **out, size_t *n, mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code;

    if (out == NULL || n == NULL || job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "list digests: NULL argument");
    *out = NULL;
    *n = 0;
    code = mt_store__call_begin(s, err);
    if (code != MT_OK)
        return code;
    code = mt_store__need_job(s, job_id, "list digests", err);
    if (code == MT_OK) {
        st = mt_store__stmt(s, MT_STMT_DIGEST_LIST);
        mt_store__bind_text(st, 1, job_id);
        sqlite3_bind_int64(
            st, 2, (sqlite3_int64)(since_step < (1ull << 63) ? since_step : (1ull << 63) - 1));
        sqlite3_bind_int64(st, 3, (sqlite3_int64)(limit == 0 ? 10000 : limit));
        code = mt_store__collect(s, st, sizeof(**out), read_digest_row, (void **)out, n,
                                 "list digests", err);
    }
    code = mt_store__call_end(s, code, err);
    if (code != MT_OK) {
        mt_free(*out);
        *out = NULL;
        *n = 0;
    }
    return code;
}

mt_code mt_store_job_digest_latest(mt_store *s, const char *job_id, mt_store_digest *out,
                                   bool *found, mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code;
    int rc;

    if (out == NULL || found == NULL || job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "latest digest: NULL argument");
    memset(out, 0, sizeof(*out));
    *found = false;
    code = mt_store__call_begin(s, err);
    if (code != MT_OK)
        return code;
    code = mt_store__need_job(s, job_id, "latest digest", err);
    if (code == MT_OK) {
        st = mt_store__stmt(s, MT_STMT_DIGEST_LATEST);
        mt_store__bind_text(st, 1, job_id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            read_digest_row(st, out);
            *found = true;
        } else if (rc != SQLITE_DONE) {
            code = mt_store__fail(s, rc, err, "latest digest of job %s", job_id);
        }
        mt_store__stmt_done(st);
    }
    return mt_store__call_end(s, code, err);
}
