/* SPDX-License-Identifier: MIT */
/*
 * store_data.c — per-step metrics and checkpoint records (mt_store.h,
 * "metrics" and "checkpoints").
 *
 * DESIGN. metrics is a WITHOUT ROWID table clustered on (job_id, name, step)
 * (schema v5): each series is one contiguous range, so a query seeks once per
 * name (the names come from metrics_latest, or the caller's names= filter) and
 * reads only the points it returns, in step order; no second index is paid on
 * insert. The primary key is also the upsert target that makes a redone step
 * replace the lost one. mt_store_metrics_scan hands the rows to a callback
 * without copying them (the HTTP API streams JSON from it);
 * mt_store_metrics_query merges the series back into step-then-name order. "Latest value per name"
 * lives in the small metrics_latest table (job, name): a batch upserts it once per distinct name
 * (the point with the top step) rather than maintaining an index on every point, and a truncate
 * moves it back to the highest remaining step. A batch is one savepoint over
 * one reused INSERT, so the cost per point is one B-tree insert, and the fsync
 * is paid per batch.
 * SQLite stores NaN as NULL; NULL is read back as NaN.
 * Checkpoint records are written incomplete first and flipped to complete
 * after the file is durable; gc returns the locations it deleted so the
 * caller removes the files after the records are gone (a crash in between
 * leaves an orphan file, never a record pointing to nothing).
 * Threading: as mt_store. Tests: tests/unit/test_store_data.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "storage/store_int.h"

mt_code mt_store__need_job(mt_store *s, const char *job_id, const char *what, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_JOB_STATE);
    mt_code code = MT_OK;
    int rc;

    mt_store__bind_text(st, 1, job_id);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        code = mt_err_set(err, MT_NOT_FOUND, "%s: job %s not found", what, job_id);
    else if (rc != SQLITE_ROW)
        code = mt_store__fail(s, rc, err, "%s of job %s", what, job_id);
    mt_store__stmt_done(st);
    return code;
}

/* ------------------------------------------------------------------ metrics */

static mt_code check_points(const char *job_id, const mt_store_metric *pts, size_t n, mt_err *err)
{
    if (n > 0 && pts == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "store metrics of job %s: %zu points but no "
                          "array",
                          job_id, n);
    for (size_t i = 0; i < n; i++) {
        if (!mt_store__terminated(pts[i].name, sizeof(pts[i].name)) || pts[i].name[0] == '\0')
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "store metrics of job %s: point %zu (step %llu) has no valid name",
                              job_id, i, (unsigned long long)pts[i].step);
        if (pts[i].step > (uint64_t)INT64_MAX)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "store metrics of job %s: point %zu step %llu is out of range",
                              job_id, i, (unsigned long long)pts[i].step);
    }
    return MT_OK;
}

/* Bind a point's step and name at the given parameter numbers, epoch/value/time at 4/5/6. */
static void bind_point(sqlite3_stmt *st, int step_at, int name_at, const mt_store_metric *p)
{
    sqlite3_bind_int64(st, step_at, (sqlite3_int64)p->step);
    mt_store__bind_text(st, name_at, p->name);
    sqlite3_bind_int64(st, 4, p->epoch);
    if (isnan(p->value))
        sqlite3_bind_null(st, 5);
    else
        sqlite3_bind_double(st, 5, p->value);
    sqlite3_bind_int64(st, 6, p->time_ms);
}

/* Run one bound upsert of point p; fill err on failure. */
static mt_code step_point(mt_store *s, sqlite3_stmt *st, const char *job_id,
                          const mt_store_metric *p, mt_err *err)
{
    int rc = mt_store__step_done(st);

    if (rc != SQLITE_OK)
        return mt_store__fail(s, rc, err, "store metric %s step %llu of job %s", p->name,
                              (unsigned long long)p->step, job_id);
    return MT_OK;
}

/* Upsert pts[i] into metrics_latest (the statement keeps the highest step). */
static mt_code upsert_latest(mt_store *s, const char *job_id, const mt_store_metric *p, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_METRIC_LATEST_UPSERT);
    mt_code code;

    mt_store__bind_text(st, 1, job_id);
    bind_point(st, 3, 2, p);
    code = step_point(s, st, job_id, p, err);
    mt_store__stmt_done(st);
    return code;
}

#define LATEST_SLOTS 32 /* distinct names tracked per batch; more are upserted point by point */

static mt_code insert_points(mt_store *s, const char *job_id, const mt_store_metric *pts, size_t n,
                             mt_err *err)
{
    size_t best[LATEST_SLOTS]; /* per distinct name of the batch: its point with the top step */
    size_t n_best = 0;
    sqlite3_stmt *st;
    mt_code code = mt_store__need_job(s, job_id, "store metrics", err);

    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_METRIC_UPSERT);
    mt_store__bind_text(st, 1, job_id);
    for (size_t i = 0; i < n && code == MT_OK; i++) {
        size_t k = 0;
        sqlite3_reset(st); /* keeps the job_id binding */
        bind_point(st, 2, 3, &pts[i]);
        code = step_point(s, st, job_id, &pts[i], err);
        while (k < n_best && strcmp(pts[best[k]].name, pts[i].name) != 0)
            k++;
        if (k < n_best) {
            if (pts[i].step >= pts[best[k]].step)
                best[k] = i;
        } else if (n_best < LATEST_SLOTS) {
            best[n_best++] = i;
        } else if (code == MT_OK) {
            mt_store__stmt_done(st);
            code = upsert_latest(s, job_id, &pts[i], err);
            st = mt_store__stmt(s, MT_STMT_METRIC_UPSERT);
            mt_store__bind_text(st, 1, job_id);
        }
    }
    mt_store__stmt_done(st);
    for (size_t k = 0; k < n_best && code == MT_OK; k++)
        code = upsert_latest(s, job_id, &pts[best[k]], err);
    return code;
}

mt_code mt_store_metrics_insert(mt_store *s, const char *job_id, const mt_store_metric *pts,
                                size_t n, mt_err *err)
{
    mt_code rc = mt_store__need(job_id, "store metrics: job_id", err);

    if (rc == MT_OK)
        rc = check_points(job_id, pts, n, err);
    if (rc != MT_OK || n == 0)
        return rc;
    rc = mt_store__call_begin(s, err);
    if (rc != MT_OK)
        return rc;
    rc = insert_points(s, job_id, pts, n, err);
    return mt_store__call_end(s, rc, err);
}

static void read_metric(sqlite3_stmt *st, mt_store_metric *m)
{
    m->step = (uint64_t)sqlite3_column_int64(st, 0);
    m->epoch = (uint32_t)sqlite3_column_int64(st, 1);
    mt_store__col_text(st, 2, m->name, sizeof(m->name));
    m->value = sqlite3_column_type(st, 3) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 3);
    m->time_ms = sqlite3_column_int64(st, 4);
}

static void read_metric_row(sqlite3_stmt *st, void *elem)
{
    read_metric(st, elem);
}

/* Call fn for the points of one series (METRIC_SERIES: job_id, name, step >= since, by step). */
static mt_code scan_series(mt_store *s, const char *job_id, const char *name, uint64_t since_step,
                           size_t limit, mt_store_metric_fn fn, void *arg, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_METRIC_SERIES);
    mt_store_metric_ref p = {.name = name};
    mt_code code = MT_OK;
    int rc;

    mt_store__bind_text(st, 1, job_id);
    mt_store__bind_text(st, 2, name);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)since_step);
    sqlite3_bind_int64(st, 4, limit == 0 ? -1 : (sqlite3_int64)limit);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        p.step = (uint64_t)sqlite3_column_int64(st, 0);
        p.epoch = (uint32_t)sqlite3_column_int64(st, 1);
        p.value = sqlite3_column_type(st, 2) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 2);
        p.time_ms = sqlite3_column_int64(st, 3);
        code = fn(arg, &p);
        if (code != MT_OK)
            break;
    }
    if (code == MT_OK && rc != SQLITE_DONE)
        code = mt_store__fail(s, rc, err, "query metric %s of job %s", name, job_id);
    mt_store__stmt_done(st);
    return code;
}

/* The series of every name in metrics_latest (one row per stored name), by name. The names
 * statement stays open while the series run, inside the caller's snapshot. */
static mt_code scan_all_names(mt_store *s, const char *job_id, uint64_t since_step, size_t limit,
                              mt_store_metric_fn fn, void *arg, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_METRIC_NAMES);
    mt_code code = MT_OK;
    char name[sizeof(((mt_store_metric *)0)->name)];
    int rc;

    mt_store__bind_text(st, 1, job_id);
    while (code == MT_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        mt_store__col_text(st, 0, name, sizeof(name));
        code = scan_series(s, job_id, name, since_step, limit, fn, arg, err);
    }
    if (code == MT_OK && rc != SQLITE_DONE)
        code = mt_store__fail(s, rc, err, "query metric names of job %s", job_id);
    mt_store__stmt_done(st);
    return code;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The series of names[0..n) (NULL entries skipped), in byte order, each once. */
static mt_code scan_names(mt_store *s, const char *job_id, uint64_t since_step,
                          const char *const *names, size_t n_names, size_t limit,
                          mt_store_metric_fn fn, void *arg, mt_err *err)
{
    const char **sorted = mt_malloc(n_names * sizeof(*sorted));
    size_t n = 0;
    mt_code code = MT_OK;

    if (sorted == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "query metrics of job %s: out of memory",
                          job_id);
    for (size_t i = 0; i < n_names; i++)
        if (names[i] != NULL)
            sorted[n++] = names[i];
    qsort(sorted, n, sizeof(*sorted), cmp_name);
    for (size_t i = 0; i < n && code == MT_OK; i++)
        if (i == 0 || strcmp(sorted[i], sorted[i - 1]) != 0)
            code = scan_series(s, job_id, sorted[i], since_step, limit, fn, arg, err);
    mt_free(sorted);
    return code;
}

mt_code mt_store_metrics_scan(mt_store *s, const char *job_id, uint64_t since_step,
                              const char *const *names, size_t n_names, size_t limit,
                              mt_store_metric_fn fn, void *arg, mt_err *err)
{
    mt_code code;

    if (s == NULL || job_id == NULL || fn == NULL || (n_names > 0 && names == NULL))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "scan metrics: NULL argument");
    if (since_step > (uint64_t)INT64_MAX)
        return MT_OK;
    code = mt_store__call_begin(s, err); /* one snapshot for every series */
    if (code != MT_OK)
        return code;
    if (n_names == 0)
        code = scan_all_names(s, job_id, since_step, limit, fn, arg, err);
    else
        code = scan_names(s, job_id, since_step, names, n_names, limit, fn, arg, err);
    return mt_store__call_end(s, code, err);
}

/* Series collected one after the other by mt_store_metrics_query. */
typedef struct metric_acc {
    mt_store_metric *arr;
    size_t n, cap;
    size_t *starts; /* index in arr where each series starts */
    size_t n_series, cap_series;
} metric_acc;

static mt_code acc_add(void *arg, const mt_store_metric_ref *p)
{
    metric_acc *a = arg;
    mt_store_metric *m;
    size_t len;

    if (a->n_series == 0 || strcmp(a->arr[a->starts[a->n_series - 1]].name, p->name) != 0) {
        if (mt_store__grow((void **)&a->starts, &a->cap_series, a->n_series, sizeof(*a->starts)) !=
            0)
            return MT_RESOURCE_EXHAUSTED;
        a->starts[a->n_series++] = a->n;
    }
    if (mt_store__grow((void **)&a->arr, &a->cap, a->n, sizeof(*a->arr)) != 0)
        return MT_RESOURCE_EXHAUSTED;
    m = &a->arr[a->n++];
    m->step = p->step;
    m->epoch = p->epoch;
    len = strnlen(p->name, sizeof(m->name) - 1); /* names are < 64 bytes (checked) */
    memcpy(m->name, p->name, len);
    m->name[len] = '\0';
    m->value = p->value;
    m->time_ms = p->time_ms;
    return MT_OK;
}

/* Merge the series of a (each by step, series by name) into step-then-name order, at most
 * limit points (0 = all). Returns the owned merged array (NULL when out of memory). */
static mt_store_metric *acc_merge(const metric_acc *a, size_t limit, size_t *n_out)
{
    size_t total = limit != 0 && limit < a->n ? limit : a->n;
    size_t *pos = mt_calloc(a->n_series + 1, sizeof(*pos));
    mt_store_metric *out = mt_malloc((total ? total : 1) * sizeof(*out));

    if (pos == NULL || out == NULL) {
        mt_free(pos);
        mt_free(out);
        return NULL;
    }
    for (size_t k = 0; k < a->n_series; k++)
        pos[k] = a->starts[k];
    for (size_t i = 0; i < total; i++) {
        size_t best = a->n_series;
        for (size_t k = 0; k < a->n_series; k++) {
            size_t end = k + 1 < a->n_series ? a->starts[k + 1] : a->n;
            /* ties go to the earlier series: the lower name */
            if (pos[k] < end &&
                (best == a->n_series || a->arr[pos[k]].step < a->arr[pos[best]].step))
                best = k;
        }
        out[i] = a->arr[pos[best]++];
    }
    mt_free(pos);
    *n_out = total;
    return out;
}

mt_code mt_store_metrics_query(mt_store *s, const char *job_id, uint64_t since_step,
                               const char *const *names, size_t n_names, size_t limit,
                               mt_store_metric **out, size_t *n, mt_err *err)
{
    metric_acc a = {0};
    mt_code code;

    if (out == NULL || n == NULL || job_id == NULL || (n_names > 0 && names == NULL))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "query metrics: NULL argument");
    *out = NULL;
    *n = 0;
    /* the first `limit` points by step are among the first `limit` of each series */
    code = mt_store_metrics_scan(s, job_id, since_step, names, n_names, limit, acc_add, &a, err);
    if (code == MT_RESOURCE_EXHAUSTED)
        mt_err_set(err, code, "query metrics of job %s: out of memory", job_id);
    if (code == MT_OK && a.n_series > 1) { /* interleave the series by step */
        size_t merged_n = 0;
        mt_store_metric *merged = acc_merge(&a, limit, &merged_n);
        if (merged == NULL) {
            code = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "query metrics of job %s: out of memory",
                              job_id);
        } else {
            mt_free(a.arr);
            a.arr = merged;
            a.n = merged_n;
        }
    }
    mt_free(a.starts);
    if (code != MT_OK || a.n == 0) {
        mt_free(a.arr);
        return code;
    }
    *out = a.arr;
    *n = a.n;
    return MT_OK;
}

mt_code mt_store_metrics_latest(mt_store *s, const char *job_id, mt_store_metric **out, size_t *n,
                                mt_err *err)
{
    sqlite3_stmt *st;

    if (out == NULL || n == NULL || job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "latest metrics: NULL argument");
    st = mt_store__stmt(s, MT_STMT_METRIC_LATEST);
    mt_store__bind_text(st, 1, job_id);
    return mt_store__collect(s, st, sizeof(**out), read_metric_row, (void **)out, n,
                             "latest metrics", err);
}

/* Run a (job_id, after_step) statement; *changes gets the rows it changed. */
static mt_code run_job_step(mt_store *s, enum mt_store_stmt_id id, const char *job_id,
                            uint64_t after_step, size_t *changes, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, id);
    mt_code code = MT_OK;
    int rc;

    mt_store__bind_text(st, 1, job_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)after_step);
    rc = mt_store__step_done(st);
    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "truncate metrics of job %s", job_id);
    else if (changes != NULL)
        *changes = (size_t)sqlite3_changes(s->db);
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_metrics_truncate(mt_store *s, const char *job_id, uint64_t after_step,
                                  size_t *deleted, mt_err *err)
{
    size_t count = 0;
    mt_code code;

    if (deleted != NULL)
        *deleted = 0;
    if (job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "truncate metrics: job_id is NULL");
    if (after_step >= (uint64_t)INT64_MAX)
        return MT_OK;
    code = mt_store__call_begin(s, err);
    if (code != MT_OK)
        return code;
    code = run_job_step(s, MT_STMT_METRIC_TRUNCATE, job_id, after_step, &count, err);
    if (code == MT_OK && count > 0) /* then fix the latest values that were cut off */
        code = run_job_step(s, MT_STMT_METRIC_LATEST_DROP, job_id, after_step, NULL, err);
    if (code == MT_OK && count > 0)
        code = run_job_step(s, MT_STMT_METRIC_LATEST_REDO, job_id, after_step, NULL, err);
    code = mt_store__call_end(s, code, err);
    if (code == MT_OK && deleted != NULL)
        *deleted = count;
    return code;
}

void mt_store_metrics_free(mt_store_metric *pts)
{
    mt_free(pts);
}

/* ------------------------------------------------------------------ checkpoints */

static mt_code ckpt_insert_rows(mt_store *s, const char *job_id, const mt_store_checkpoint *c,
                                mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code = mt_store__need_job(s, job_id, "record checkpoint", err);
    int rc;

    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_CKPT_COMPLETE_OF);
    mt_store__bind_text(st, 1, job_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)c->step);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_int(st, 0) == 1)
        code = mt_err_set(err, MT_ALREADY_EXISTS,
                          "record checkpoint of job %s step %llu: a complete one exists", job_id,
                          (unsigned long long)c->step);
    else if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        code = mt_store__fail(s, rc, err, "record checkpoint of job %s", job_id);
    mt_store__stmt_done(st);
    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_CKPT_UPSERT);
    mt_store__bind_text(st, 1, job_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)c->step);
    mt_store__bind_text(st, 3, c->location);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)c->size_bytes);
    mt_store__bind_text(st, 5, c->checksum);
    sqlite3_bind_int64(st, 6, c->time_ms);
    rc = mt_store__step_done(st);
    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "record checkpoint of job %s step %llu", job_id,
                              (unsigned long long)c->step);
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_checkpoint_insert(mt_store *s, const char *job_id, const mt_store_checkpoint *c,
                                   mt_err *err)
{
    mt_code rc;

    if (job_id == NULL || c == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "record checkpoint: NULL argument");
    if (!mt_store__terminated(c->location, sizeof(c->location)) || c->location[0] == '\0' ||
        !mt_store__terminated(c->checksum, sizeof(c->checksum)))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "record checkpoint of job %s step %llu: empty or unterminated "
                          "location or checksum",
                          job_id, (unsigned long long)c->step);
    if (c->step > (uint64_t)INT64_MAX)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "record checkpoint of job %s: step out of "
                          "range",
                          job_id);
    rc = mt_store__call_begin(s, err);
    if (rc != MT_OK)
        return rc;
    rc = ckpt_insert_rows(s, job_id, c, err);
    return mt_store__call_end(s, rc, err);
}

mt_code mt_store_checkpoint_complete(mt_store *s, const char *job_id, uint64_t step,
                                     uint64_t size_bytes, const char *checksum, int64_t now_ms,
                                     mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code = MT_OK;
    int rc;

    if (job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "complete checkpoint: job_id is NULL");
    code = mt_store__tx_guard(s, err);
    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_CKPT_COMPLETE);
    mt_store__bind_text(st, 1, job_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)step);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)size_bytes);
    mt_store__bind_text(st, 4, checksum);
    sqlite3_bind_int64(st, 5, now_ms);
    rc = mt_store__step_done(st);
    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "complete checkpoint of job %s step %llu", job_id,
                              (unsigned long long)step);
    else if (sqlite3_changes(s->db) == 0)
        code = mt_err_set(err, MT_NOT_FOUND, "checkpoint of job %s step %llu not found", job_id,
                          (unsigned long long)step);
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_checkpoint_drop_incomplete(mt_store *s, const char *job_id, uint64_t step,
                                            mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code;
    int rc;

    if (job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "drop checkpoint: job_id is NULL");
    if ((code = mt_store__tx_guard(s, err)) != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_CKPT_DROP_INCOMPLETE);
    mt_store__bind_text(st, 1, job_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)step);
    rc = mt_store__step_done(st);
    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "drop checkpoint of job %s step %llu", job_id,
                              (unsigned long long)step);
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_checkpoint_set_corrupt(mt_store *s, const char *job_id, uint64_t step,
                                        int64_t now_ms, mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code;
    int rc;

    if (job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "mark checkpoint: job_id is NULL");
    if ((code = mt_store__tx_guard(s, err)) != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_CKPT_SET_CORRUPT);
    mt_store__bind_text(st, 1, job_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)step);
    sqlite3_bind_int64(st, 3, now_ms);
    rc = mt_store__step_done(st);
    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "mark checkpoint of job %s step %llu", job_id,
                              (unsigned long long)step);
    else if (sqlite3_changes(s->db) == 0)
        code = mt_err_set(err, MT_NOT_FOUND, "checkpoint of job %s step %llu not found", job_id,
                          (unsigned long long)step);
    mt_store__stmt_done(st);
    return code;
}

static void read_ckpt_row(sqlite3_stmt *st, void *elem)
{
    mt_store_checkpoint *c = elem;

    c->step = (uint64_t)sqlite3_column_int64(st, 0);
    mt_store__col_text(st, 1, c->location, sizeof(c->location));
    c->size_bytes = (uint64_t)sqlite3_column_int64(st, 2);
    mt_store__col_text(st, 3, c->checksum, sizeof(c->checksum));
    c->complete = sqlite3_column_int(st, 4) != 0;
    c->time_ms = sqlite3_column_int64(st, 5);
}

mt_code mt_store_checkpoint_list(mt_store *s, const char *job_id, mt_store_checkpoint **out,
                                 size_t *n, mt_err *err)
{
    sqlite3_stmt *st;

    if (out == NULL || n == NULL || job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "list checkpoints: NULL argument");
    st = mt_store__stmt(s, MT_STMT_CKPT_LIST);
    mt_store__bind_text(st, 1, job_id);
    return mt_store__collect(s, st, sizeof(**out), read_ckpt_row, (void **)out, n,
                             "list checkpoints", err);
}

/* One checkpoint row from a bound statement; NOT_FOUND (with `what`) when none. */
static mt_code one_ckpt(mt_store *s, sqlite3_stmt *st, mt_store_checkpoint *out, const char *job_id,
                        const char *what, mt_err *err)
{
    mt_code code = MT_OK;
    int rc = sqlite3_step(st);

    memset(out, 0, sizeof(*out));
    if (rc == SQLITE_ROW)
        read_ckpt_row(st, out);
    else if (rc == SQLITE_DONE)
        code = mt_err_set(err, MT_NOT_FOUND, "job %s has no %s", job_id, what);
    else
        code = mt_store__fail(s, rc, err, "read %s of job %s", what, job_id);
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_checkpoint_latest(mt_store *s, const char *job_id, mt_store_checkpoint *out,
                                   mt_err *err)
{
    sqlite3_stmt *st;

    if (out == NULL || job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "latest checkpoint: NULL argument");
    st = mt_store__stmt(s, MT_STMT_CKPT_LATEST);
    mt_store__bind_text(st, 1, job_id);
    return one_ckpt(s, st, out, job_id, "complete checkpoint", err);
}

mt_code mt_store_checkpoint_get(mt_store *s, const char *job_id, uint64_t step,
                                mt_store_checkpoint *out, mt_err *err)
{
    sqlite3_stmt *st;
    char what[64];

    if (out == NULL || job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "get checkpoint: NULL argument");
    snprintf(what, sizeof(what), "checkpoint at step %llu", (unsigned long long)step);
    st = mt_store__stmt(s, MT_STMT_CKPT_GET);
    mt_store__bind_text(st, 1, job_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)step);
    return one_ckpt(s, st, out, job_id, what, err);
}

typedef struct gc_victim {
    uint64_t step;
    char *location; /* owned */
} gc_victim;

static void free_victims(gc_victim *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        mt_free(v[i].location);
    mt_free(v);
}

/* Select the victims (with owned copies of their locations), then delete their rows. */
static mt_code gc_rows(mt_store *s, const char *job_id, size_t keep, gc_victim **out, size_t *n,
                       mt_err *err)
{
    gc_victim *v = NULL;
    size_t count = 0, cap = 0;
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_CKPT_GC_VICTIMS);
    mt_code code = MT_OK;
    int rc;

    mt_store__bind_text(st, 1, job_id);
    sqlite3_bind_int64(st, 2, keep > (size_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)keep);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (mt_store__grow((void **)&v, &cap, count, sizeof(*v)) != 0 ||
            (v[count].location = mt_strdup((const char *)sqlite3_column_text(st, 1))) == NULL) {
            code = mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                              "gc checkpoints of job %s: out of "
                              "memory",
                              job_id);
            break;
        }
        v[count++].step = (uint64_t)sqlite3_column_int64(st, 0);
    }
    if (code == MT_OK && rc != SQLITE_DONE)
        code = mt_store__fail(s, rc, err, "gc checkpoints of job %s", job_id);
    mt_store__stmt_done(st);
    st = mt_store__stmt(s, MT_STMT_CKPT_DELETE);
    for (size_t i = 0; i < count && code == MT_OK; i++) {
        sqlite3_reset(st);
        mt_store__bind_text(st, 1, job_id);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)v[i].step);
        rc = mt_store__step_done(st);
        if (rc != SQLITE_OK)
            code = mt_store__fail(s, rc, err, "gc checkpoints of job %s", job_id);
    }
    mt_store__stmt_done(st);
    *out = v;
    *n = count;
    return code;
}

mt_code mt_store_checkpoint_gc(mt_store *s, const char *job_id, size_t keep, char ***locations,
                               size_t *n, mt_err *err)
{
    gc_victim *v = NULL;
    char **locs = NULL;
    size_t count = 0;
    mt_code rc;

    if (locations == NULL || n == NULL || job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "gc checkpoints: NULL argument");
    *locations = NULL;
    *n = 0;
    rc = mt_store__call_begin(s, err);
    if (rc != MT_OK)
        return rc;
    rc = gc_rows(s, job_id, keep, &v, &count, err);
    if (rc == MT_OK && count > 0) {
        locs = mt_calloc(count, sizeof(*locs));
        if (locs == NULL)
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "gc checkpoints of job %s: out of memory",
                            job_id);
    }
    rc = mt_store__call_end(s, rc, err);
    if (rc != MT_OK) {
        free_victims(v, count);
        mt_free(locs);
        return rc;
    }
    for (size_t i = 0; i < count; i++)
        locs[i] = v[i].location; /* ownership moves to the result */
    mt_free(v);
    *locations = locs;
    *n = count;
    return MT_OK;
}

void mt_store_checkpoints_free(mt_store_checkpoint *c)
{
    mt_free(c);
}

void mt_store_strings_free(char **strs, size_t n)
{
    if (strs == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        mt_free(strs[i]);
    mt_free(strs);
}
