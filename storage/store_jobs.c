/* SPDX-License-Identifier: MIT */
/*
 * store_jobs.c — jobs, job events and placements (mt_store.h, "jobs").
 *
 * A job's id is derived from its sequence number ("job-%06d" of seq), so ids are
 * never reused and submission order is seq order. Every state change goes
 * through mt_store_job_transition, which checks the current state against the
 * caller's expectation and the mt_jobstate table, then updates the row and
 * appends the event inside one savepoint: the events table is the complete
 * history of the job's states.
 * Threading: as mt_store. Tests: tests/unit/test_store_jobs.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "storage/mt_jobstate.h"
#include "storage/store_int.h"

/* Decode a JOB_COLUMNS row (spec_json, at column JOB_N_COLUMNS, is the caller's). */
static void read_job_row(sqlite3_stmt *st, void *elem)
{
    mt_store_job *j = elem;

    mt_store__col_text(st, 0, j->job_id, sizeof(j->job_id));
    mt_store__col_text(st, 1, j->name, sizeof(j->name));
    mt_store__col_text(st, 2, j->state, sizeof(j->state));
    j->priority = (int32_t)sqlite3_column_int(st, 3);
    j->submitted_at_ms = sqlite3_column_int64(st, 4);
    j->updated_at_ms = sqlite3_column_int64(st, 5);
    j->step = (uint64_t)sqlite3_column_int64(st, 6);
    j->total_steps = (uint64_t)sqlite3_column_int64(st, 7);
    mt_store__col_text(st, 8, j->reason, sizeof(j->reason));
    mt_store__col_text(st, 9, j->error, sizeof(j->error));
    j->restarts = (uint32_t)sqlite3_column_int64(st, 10);
    mt_store__col_text(st, 11, j->mesh, sizeof(j->mesh));
    j->devices = (uint32_t)sqlite3_column_int64(st, 12);
    mt_store__col_text(st, 13, j->diagnosis, sizeof(j->diagnosis));
    j->spec_json = NULL;
}

/* Append an event row (part of the caller's savepoint). */
static mt_code insert_event(mt_store *s, const char *job_id, int64_t now_ms, const char *state,
                            const char *reason, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_EVENT_INSERT);
    int rc;

    mt_store__bind_text(st, 1, job_id);
    sqlite3_bind_int64(st, 2, now_ms);
    mt_store__bind_text(st, 3, state);
    mt_store__bind_text(st, 4, reason != NULL ? reason : "");
    rc = mt_store__step_done(st);
    mt_store__stmt_done(st);
    if (rc != SQLITE_OK)
        return mt_store__fail(s, rc, err, "record event of job %s", job_id);
    return MT_OK;
}

static mt_code insert_job_row(mt_store *s, mt_store_job *j, int64_t now_ms, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_JOB_INSERT);
    char id[sizeof(j->job_id)] = "";
    int rc;

    mt_store__bind_text(st, 1, j->name);
    mt_store__bind_text(st, 2, j->spec_json);
    sqlite3_bind_int(st, 3, j->priority);
    sqlite3_bind_int64(st, 4, now_ms);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)j->total_steps);
    mt_store__bind_text(st, 6, j->request_id);
    mt_store__bind_text(st, 7, j->mesh);
    sqlite3_bind_int64(st, 8, (sqlite3_int64)j->devices);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        mt_store__col_text(st, 0, id, sizeof(id));
        rc = sqlite3_step(st);
    }
    if (rc != SQLITE_DONE) {
        mt_code code = mt_store__fail(s, rc, err, "insert job \"%s\"", j->name);
        mt_store__stmt_done(st);
        return code;
    }
    mt_store__stmt_done(st);
    memcpy(j->job_id, id, sizeof(id));
    return insert_event(s, id, now_ms, "QUEUED", "submitted", err);
}

mt_code mt_store_job_insert(mt_store *s, mt_store_job *j, int64_t now_ms, mt_err *err)
{
    mt_code rc;

    if (j == NULL || j->spec_json == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "insert job: %s is NULL",
                          j == NULL ? "job" : "spec_json");
    if (!mt_store__terminated(j->name, sizeof(j->name)) ||
        !mt_store__terminated(j->request_id, sizeof(j->request_id)) ||
        !mt_store__terminated(j->mesh, sizeof(j->mesh)))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "insert job: %s is not NUL-terminated",
                          !mt_store__terminated(j->name, sizeof(j->name)) ? "name"
                          : !mt_store__terminated(j->request_id, sizeof(j->request_id))
                              ? "request_id"
                              : "mesh");
    rc = mt_store__call_begin(s, err);
    if (rc != MT_OK)
        return rc;
    rc = insert_job_row(s, j, now_ms, err);
    rc = mt_store__call_end(s, rc, err);
    if (rc != MT_OK) {
        j->job_id[0] = '\0';
        return rc;
    }
    snprintf(j->state, sizeof(j->state), "QUEUED");
    j->submitted_at_ms = j->updated_at_ms = now_ms;
    j->step = 0;
    j->restarts = 0;
    j->reason[0] = '\0';
    j->error[0] = '\0';
    return MT_OK;
}

/* One job row with its spec by the key bound to statement id (what names the key in messages). */
static mt_code get_one_job(mt_store *s, enum mt_store_stmt_id id, const char *key, const char *what,
                           mt_store_job *out, mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code = MT_OK;
    int rc;

    if (out == NULL || key == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "get job: %s is NULL",
                          out == NULL ? "out" : what);
    memset(out, 0, sizeof(*out));
    st = mt_store__stmt(s, id);
    mt_store__bind_text(st, 1, key);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        read_job_row(st, out);
        out->spec_json = mt_strdup((const char *)sqlite3_column_text(st, JOB_N_COLUMNS));
        if (out->spec_json == NULL)
            code = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "get job %s: out of memory", key);
    } else if (rc == SQLITE_DONE) {
        code = id == MT_STMT_JOB_COLUMNS_GET
                   ? mt_err_set(err, MT_NOT_FOUND, "job %s not found", key)
                   : mt_err_set(err, MT_NOT_FOUND, "no job with %s %s", what, key);
    } else {
        code = mt_store__fail(s, rc, err, "get job by %s %s", what, key);
    }
    mt_store__stmt_done(st);
    if (code != MT_OK)
        memset(out, 0, sizeof(*out));
    return code;
}

mt_code mt_store_job_get(mt_store *s, const char *job_id, mt_store_job *out, mt_err *err)
{
    return get_one_job(s, MT_STMT_JOB_COLUMNS_GET, job_id, "job_id", out, err);
}

mt_code mt_store_job_by_request(mt_store *s, const char *request_id, mt_store_job *out, mt_err *err)
{
    if (request_id != NULL && request_id[0] == '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "get job: request_id is empty");
    return get_one_job(s, MT_STMT_JOB_BY_REQUEST, request_id, "request id", out, err);
}

void mt_store_job_fini(mt_store_job *j)
{
    if (j == NULL)
        return;
    mt_free(j->spec_json);
    j->spec_json = NULL;
}

/* Every comma-separated name in filter must be a job state. */
static mt_code check_state_filter(const char *filter, mt_err *err)
{
    unsigned mask;

    if (mt_jobstate_parse_list(filter, &mask, err) != MT_OK)
        return mt_err_prefix(err, "list jobs");
    return MT_OK;
}

/* The common start of a listing: check the outputs and the filter, take statement id with the
 * filter bound as ?1 (NULL = every state). */
static mt_code list_begin(mt_store *s, enum mt_store_stmt_id id, const char *state_filter,
                          mt_store_job **out, size_t *n, sqlite3_stmt **st, mt_err *err)
{
    mt_code code;

    if (out == NULL || n == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "list jobs: out or n is NULL");
    *out = NULL;
    *n = 0;
    if (state_filter != NULL && state_filter[0] != '\0') {
        code = check_state_filter(state_filter, err);
        if (code != MT_OK)
            return code;
    } else {
        state_filter = NULL;
    }
    *st = mt_store__stmt(s, id);
    mt_store__bind_text(*st, 1, state_filter);
    return MT_OK;
}

mt_code mt_store_job_list(mt_store *s, const char *state_filter, mt_store_job **out, size_t *n,
                          mt_err *err)
{
    sqlite3_stmt *st = NULL;
    mt_code code = list_begin(s, MT_STMT_JOB_LIST, state_filter, out, n, &st, err);

    if (code != MT_OK)
        return code;
    return mt_store__collect(s, st, sizeof(**out), read_job_row, (void **)out, n, "list jobs", err);
}

void mt_store_job_cursor_format(const mt_store_job_cursor *c, char *out, size_t cap)
{
    snprintf(out, cap, "%d.%llu", (int)c->priority, (unsigned long long)c->seq);
}

mt_code mt_store_job_cursor_parse(const char *text, mt_store_job_cursor *c, mt_err *err)
{
    char *end = NULL;
    long prio = strtol(text, &end, 10);
    unsigned long long seq;
    const char *p = end;

    if (end == text || *p != '.' || p[1] < '0' || p[1] > '9' || prio < INT32_MIN ||
        prio > INT32_MAX)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "cursor '%.40s': malformed", text);
    seq = strtoull(p + 1, &end, 10);
    if (*end != '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "cursor '%.40s': malformed", text);
    c->priority = (int32_t)prio;
    c->seq = seq;
    return MT_OK;
}

mt_store_job_cursor mt_store_job_cursor_of(const mt_store_job *j)
{
    mt_store_job_cursor c = {j->priority, 0};

    if (strncmp(j->job_id, "job-", 4) == 0)
        c.seq = strtoull(j->job_id + 4, NULL, 10);
    return c;
}

mt_code mt_store_job_page(mt_store *s, const char *state_filter, const mt_store_job_cursor *after,
                          size_t limit, mt_store_job **out, size_t *n, mt_err *err)
{
    sqlite3_stmt *st = NULL;
    mt_code code;

    if ((code = list_begin(s, MT_STMT_JOB_PAGE, state_filter, out, n, &st, err)) != MT_OK)
        return code;
    if (limit == 0 || limit > 10000) {
        mt_store__stmt_done(st);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "list jobs: limit %zu not in 1..10000", limit);
    }
    if (after != NULL) {
        sqlite3_bind_int(st, 2, after->priority);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)after->seq);
    }
    sqlite3_bind_int64(st, 4, (sqlite3_int64)limit);
    return mt_store__collect(s, st, sizeof(**out), read_job_row, (void **)out, n, "list jobs", err);
}

void mt_store_job_list_free(mt_store_job *list, size_t n)
{
    if (list == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        mt_store_job_fini(&list[i]);
    mt_free(list);
}

_Static_assert(MT_JOBSTATE_COUNT == 8, "mt_store_job_counts documents 8 states");

mt_code mt_store_job_counts(mt_store *s, size_t counts[8], mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code = MT_OK;
    int rc;

    if (counts == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "count jobs: counts is NULL");
    memset(counts, 0, MT_JOBSTATE_COUNT * sizeof(*counts));
    st = mt_store__stmt(s, MT_STMT_JOB_COUNTS);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        mt_jobstate js;
        if (mt_jobstate_parse((const char *)sqlite3_column_text(st, 0), &js, NULL) == MT_OK)
            counts[js] = (size_t)sqlite3_column_int64(st, 1);
    }
    if (rc != SQLITE_DONE)
        code = mt_store__fail(s, rc, err, "count jobs");
    mt_store__stmt_done(st);
    return code;
}

/* The job's current state into *out; NOT_FOUND when absent. */
static mt_code job_state(mt_store *s, const char *job_id, mt_jobstate *out, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_JOB_STATE);
    char name[32] = "";
    mt_code code = MT_OK;
    int rc;

    mt_store__bind_text(st, 1, job_id);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        mt_store__col_text(st, 0, name, sizeof(name));
    else if (rc == SQLITE_DONE)
        code = mt_err_set(err, MT_NOT_FOUND, "job %s not found", job_id);
    else
        code = mt_store__fail(s, rc, err, "read state of job %s", job_id);
    mt_store__stmt_done(st);
    if (code == MT_OK && mt_jobstate_parse(name, out, err) != MT_OK)
        code = mt_err_set(err, MT_DATA_LOSS, "job %s has an unknown stored state \"%s\"", job_id,
                          name);
    return code;
}

static mt_code transition_rows(mt_store *s, const char *job_id, const mt_jobstate *expected,
                               mt_jobstate to, const char *reason, int64_t now_ms, mt_err *err)
{
    mt_jobstate cur;
    sqlite3_stmt *st;
    mt_code code = job_state(s, job_id, &cur, err);
    int rc;

    if (code != MT_OK)
        return code;
    if (expected != NULL && cur != *expected)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "job %s is %s, expected %s", job_id,
                          mt_jobstate_name(cur), mt_jobstate_name(*expected));
    if (!mt_jobstate_can_transition(cur, to))
        return mt_err_set(err, MT_FAILED_PRECONDITION, "job %s: %s -> %s is not allowed", job_id,
                          mt_jobstate_name(cur), mt_jobstate_name(to));
    st = mt_store__stmt(s, MT_STMT_JOB_TRANSITION);
    mt_store__bind_text(st, 1, job_id);
    mt_store__bind_text(st, 2, mt_jobstate_name(to));
    mt_store__bind_text(st, 3, reason);
    sqlite3_bind_int64(st, 4, now_ms);
    sqlite3_bind_int(st, 5, to == MT_JOBSTATE_RESTARTING);
    sqlite3_bind_int(st, 6, to == MT_JOBSTATE_FAILED);
    rc = mt_store__step_done(st);
    mt_store__stmt_done(st);
    if (rc != SQLITE_OK)
        return mt_store__fail(s, rc, err, "move job %s to %s", job_id, mt_jobstate_name(to));
    return insert_event(s, job_id, now_ms, mt_jobstate_name(to), reason, err);
}

mt_code mt_store_job_transition(mt_store *s, const char *job_id, const char *expected_from,
                                const char *to_state, const char *reason, int64_t now_ms,
                                mt_err *err)
{
    mt_jobstate to, from;
    mt_code rc;

    if (job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "job transition: job_id is NULL");
    if (mt_jobstate_parse(to_state, &to, err) != MT_OK ||
        (expected_from != NULL && mt_jobstate_parse(expected_from, &from, err) != MT_OK))
        return mt_err_prefix(err, "move job %s", job_id);
    if (reason == NULL)
        reason = "";
    rc = mt_store__call_begin(s, err);
    if (rc != MT_OK)
        return rc;
    rc = transition_rows(s, job_id, expected_from != NULL ? &from : NULL, to, reason, now_ms, err);
    return mt_store__call_end(s, rc, err);
}

/* Run a one-row UPDATE of jobs bound (id, v2 text or int, now); NOT_FOUND when no row. */
static mt_code update_job(mt_store *s, enum mt_store_stmt_id id, const char *job_id,
                          const char *text, uint64_t num, int64_t now_ms, const char *what,
                          mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code = MT_OK;
    int rc;

    if (job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: job_id is NULL", what);
    code = mt_store__tx_guard(s, err);
    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, id);
    mt_store__bind_text(st, 1, job_id);
    if (id == MT_STMT_JOB_SET_REASON || id == MT_STMT_JOB_SET_DIAGNOSIS)
        mt_store__bind_text(st, 2, text != NULL ? text : "");
    else
        sqlite3_bind_int64(st, 2, (sqlite3_int64)num);
    sqlite3_bind_int64(st, 3, now_ms);
    rc = mt_store__step_done(st);
    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "%s of job %s", what, job_id);
    else if (sqlite3_changes(s->db) == 0)
        code = mt_err_set(err, MT_NOT_FOUND, "%s: job %s not found", what, job_id);
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_job_set_step(mt_store *s, const char *job_id, uint64_t step, int64_t now_ms,
                              mt_err *err)
{
    return update_job(s, MT_STMT_JOB_SET_STEP, job_id, NULL, step, now_ms, "set step", err);
}

mt_code mt_store_job_set_reason(mt_store *s, const char *job_id, const char *reason, int64_t now_ms,
                                mt_err *err)
{
    return update_job(s, MT_STMT_JOB_SET_REASON, job_id, reason, 0, now_ms, "set reason", err);
}

mt_code mt_store_job_set_diagnosis(mt_store *s, const char *job_id, const char *diagnosis,
                                   int64_t now_ms, mt_err *err)
{
    return update_job(s, MT_STMT_JOB_SET_DIAGNOSIS, job_id, diagnosis, 0, now_ms, "set diagnosis",
                      err);
}

static void read_event_row(sqlite3_stmt *st, void *elem)
{
    mt_store_job_event *e = elem;

    e->time_ms = sqlite3_column_int64(st, 0);
    mt_store__col_text(st, 1, e->state, sizeof(e->state));
    mt_store__col_text(st, 2, e->reason, sizeof(e->reason));
    e->step = (uint64_t)sqlite3_column_int64(st, 3);
}

/* Rows of a per-job statement (job must exist: NOT_FOUND otherwise), one snapshot. */
static mt_code collect_of_job(mt_store *s, enum mt_store_stmt_id id, const char *job_id,
                              size_t elem, mt_store__row_fn read, void **out, size_t *n,
                              const char *what, mt_err *err)
{
    mt_jobstate cur;
    sqlite3_stmt *st;
    mt_code code;

    if (out == NULL || n == NULL || job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: NULL argument", what);
    *out = NULL;
    *n = 0;
    code = mt_store__call_begin(s, err);
    if (code != MT_OK)
        return code;
    code = job_state(s, job_id, &cur, err);
    if (code == MT_OK) {
        st = mt_store__stmt(s, id);
        mt_store__bind_text(st, 1, job_id);
        code = mt_store__collect(s, st, elem, read, out, n, what, err);
    }
    code = mt_store__call_end(s, code, err);
    if (code != MT_OK) {
        mt_free(*out);
        *out = NULL;
        *n = 0;
    }
    return code;
}

mt_code mt_store_job_events(mt_store *s, const char *job_id, mt_store_job_event **out, size_t *n,
                            mt_err *err)
{
    return collect_of_job(s, MT_STMT_EVENT_LIST, job_id, sizeof(**out), read_event_row,
                          (void **)out, n, "list job events", err);
}

void mt_store_job_events_free(mt_store_job_event *events)
{
    mt_free(events);
}

/* "0,3,1" from coords. */
static void format_coords(const mt_store_placement *p, char *buf, size_t cap)
{
    size_t used = 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < p->n_coords && used < cap; i++) {
        int k = snprintf(buf + used, cap - used, i ? ",%u" : "%u", (unsigned)p->coords[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
}

static void read_placement_row(sqlite3_stmt *st, void *elem)
{
    mt_store_placement *p = elem;
    const char *c = (const char *)sqlite3_column_text(st, 3);

    p->device = (uint32_t)sqlite3_column_int64(st, 0);
    mt_store__col_text(st, 1, p->worker_id, sizeof(p->worker_id));
    p->local_index = (uint32_t)sqlite3_column_int64(st, 2);
    while (c != NULL && *c != '\0' && p->n_coords < MT_STORE_MAX_MESH_DIMS) {
        char *end;
        p->coords[p->n_coords++] = (uint32_t)strtoul(c, &end, 10);
        if (*end != ',')
            break;
        c = end + 1;
    }
    mt_store__col_text(st, 4, p->task_state, sizeof(p->task_state));
}

static mt_code check_placement(const char *job_id, const mt_store_placement *p, size_t n,
                               mt_err *err)
{
    if (n > 0 && p == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "place job %s: %zu devices but no array",
                          job_id, n);
    for (size_t i = 0; i < n; i++) {
        if (!mt_store__terminated(p[i].worker_id, sizeof(p[i].worker_id)) ||
            p[i].worker_id[0] == '\0')
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "place job %s: device %u has no valid worker_id", job_id,
                              (unsigned)p[i].device);
        if (p[i].n_coords > MT_STORE_MAX_MESH_DIMS)
            return mt_err_set(
                err, MT_INVALID_ARGUMENT, "place job %s: device %u has %u coordinates (max %d)",
                job_id, (unsigned)p[i].device, (unsigned)p[i].n_coords, MT_STORE_MAX_MESH_DIMS);
        for (size_t k = 0; k < i; k++)
            if (p[k].device == p[i].device)
                return mt_err_set(err, MT_INVALID_ARGUMENT, "place job %s: device %u appears twice",
                                  job_id, (unsigned)p[i].device);
    }
    return MT_OK;
}

static mt_code placement_rows(mt_store *s, const char *job_id, const mt_store_placement *p,
                              size_t n, mt_err *err)
{
    mt_jobstate cur;
    sqlite3_stmt *st;
    mt_code code = job_state(s, job_id, &cur, err);
    int rc;

    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_PLACEMENT_DELETE);
    mt_store__bind_text(st, 1, job_id);
    rc = mt_store__step_done(st);
    mt_store__stmt_done(st);
    if (rc != SQLITE_OK)
        return mt_store__fail(s, rc, err, "place job %s", job_id);
    st = mt_store__stmt(s, MT_STMT_PLACEMENT_INSERT);
    for (size_t i = 0; i < n && code == MT_OK; i++) {
        char coords[MT_STORE_MAX_MESH_DIMS * 11 + 1];
        format_coords(&p[i], coords, sizeof(coords));
        sqlite3_reset(st);
        mt_store__bind_text(st, 1, job_id);
        sqlite3_bind_int64(st, 2, p[i].device);
        mt_store__bind_text(st, 3, p[i].worker_id);
        sqlite3_bind_int64(st, 4, p[i].local_index);
        sqlite3_bind_text(st, 5, coords, -1, SQLITE_TRANSIENT);
        rc = mt_store__step_done(st);
        if (rc != SQLITE_OK)
            code = mt_store__fail(s, rc, err, "place job %s: device %u", job_id,
                                  (unsigned)p[i].device);
    }
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_job_set_placement(mt_store *s, const char *job_id, const mt_store_placement *p,
                                   size_t n, mt_err *err)
{
    mt_code rc;

    if (job_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "place job: job_id is NULL");
    rc = check_placement(job_id, p, n, err);
    if (rc != MT_OK)
        return rc;
    rc = mt_store__call_begin(s, err);
    if (rc != MT_OK)
        return rc;
    rc = placement_rows(s, job_id, p, n, err);
    return mt_store__call_end(s, rc, err);
}

mt_code mt_store_job_placement(mt_store *s, const char *job_id, mt_store_placement **out, size_t *n,
                               mt_err *err)
{
    return collect_of_job(s, MT_STMT_PLACEMENT_LIST, job_id, sizeof(**out), read_placement_row,
                          (void **)out, n, "get placement", err);
}

void mt_store_placement_free(mt_store_placement *p)
{
    mt_free(p);
}

mt_code mt_store_job_set_task_state(mt_store *s, const char *job_id, const char *worker_id,
                                    const char *state, mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code;
    int rc;

    if (job_id == NULL || worker_id == NULL || state == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "set task state: NULL argument");
    code = mt_store__tx_guard(s, err);
    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_PLACEMENT_TASK_STATE);
    mt_store__bind_text(st, 1, job_id);
    mt_store__bind_text(st, 2, worker_id);
    mt_store__bind_text(st, 3, state);
    rc = mt_store__step_done(st);
    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "set task state of job %s on %s", job_id, worker_id);
    else if (sqlite3_changes(s->db) == 0)
        code = mt_err_set(err, MT_NOT_FOUND, "set task state: worker %s has no device in job %s",
                          worker_id, job_id);
    mt_store__stmt_done(st);
    return code;
}

static void read_job_id_row(sqlite3_stmt *st, void *elem)
{
    mt_store_job_id *j = elem;
    mt_store__col_text(st, 0, j->id, sizeof(j->id));
}

mt_code mt_store_jobs_on_worker(mt_store *s, const char *worker_id, mt_store_job_id **out,
                                size_t *n, mt_err *err)
{
    sqlite3_stmt *st;

    if (out == NULL || n == NULL || worker_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "jobs on worker: NULL argument");
    st = mt_store__stmt(s, MT_STMT_JOBS_ON_WORKER);
    mt_store__bind_text(st, 1, worker_id);
    return mt_store__collect(s, st, sizeof(**out), read_job_id_row, (void **)out, n,
                             "jobs on worker", err);
}

void mt_store_job_ids_free(mt_store_job_id *ids)
{
    mt_free(ids);
}

/* The id of a job stored before schema 8 (its spec is read one job at a time). */
typedef struct old_job {
    char id[32];
} old_job;

static void read_old_job(sqlite3_stmt *st, void *elem)
{
    mt_store__col_text(st, 0, ((old_job *)elem)->id, sizeof(((old_job *)elem)->id));
}

static mt_code set_summary(mt_store *s, const char *id, mt_store_summarise_fn fn, void *arg,
                           size_t *n, mt_err *err)
{
    mt_store_job j;
    char mesh[256] = "";
    uint32_t devices = 0;
    sqlite3_stmt *st;
    mt_code rc;
    int src;

    if ((rc = mt_store_job_get(s, id, &j, err)) != MT_OK)
        return rc;
    fn(arg, j.spec_json, mesh, sizeof(mesh), &devices);
    mt_store_job_fini(&j);
    if (devices == 0)
        return MT_OK;
    st = mt_store__stmt(s, MT_STMT_JOB_SET_SUMMARY);
    mt_store__bind_text(st, 1, id);
    mt_store__bind_text(st, 2, mesh);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)devices);
    src = mt_store__step_done(st);
    mt_store__stmt_done(st);
    if (src != SQLITE_OK)
        return mt_store__fail(s, src, err, "summarise job %s", id);
    (*n)++;
    return MT_OK;
}

mt_code mt_store_job_summarise_old(mt_store *s, mt_store_summarise_fn summarise, void *arg,
                                   size_t *n, mt_err *err)
{
    old_job *list = NULL;
    size_t count = 0, done = 0;
    mt_code rc;

    if (n != NULL)
        *n = 0;
    rc = mt_store__collect(s, mt_store__stmt(s, MT_STMT_JOBS_UNSUMMARISED), sizeof(*list),
                           read_old_job, (void **)&list, &count, "list old jobs", err);
    if (rc != MT_OK || count == 0)
        return rc;
    if ((rc = mt_store__call_begin(s, err)) == MT_OK) {
        for (size_t i = 0; i < count && rc == MT_OK; i++)
            rc = set_summary(s, list[i].id, summarise, arg, &done, err);
        rc = mt_store__call_end(s, rc, err);
    }
    mt_free(list);
    if (rc == MT_OK && n != NULL)
        *n = done;
    return rc;
}
