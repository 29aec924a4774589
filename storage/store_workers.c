/* SPDX-License-Identifier: MIT */
/*
 * store_workers.c — workers and devices tables (mt_store.h, "workers").
 *
 * A worker row is keyed by the coordinator-assigned worker_id; its devices are
 * rows keyed by (worker_id, idx) that are replaced as a whole on every upsert
 * (ON DELETE CASCADE removes them with the worker). Upsert is an UPDATE of the
 * existing row, never a DELETE + INSERT, so rows that refer to the worker
 * (placements) are not disturbed.
 * Threading: as mt_store. Tests: tests/unit/test_store.c.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "storage/store_int.h"

static int valid_state(const char *state)
{
    return state != NULL && (strcmp(state, "alive") == 0 || strcmp(state, "lost") == 0);
}

static mt_code check_worker(const mt_store_worker *w, mt_err *err)
{
    if (w == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "upsert worker: worker is NULL");
    if (!mt_store__terminated(w->worker_id, sizeof(w->worker_id)) || w->worker_id[0] == '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "upsert worker: worker_id is %s",
                          w->worker_id[0] == '\0' ? "empty" : "not terminated");
#define CHECK_FIELD(f)                                                                             \
    if (!mt_store__terminated(w->f, sizeof(w->f)))                                                 \
        return mt_err_set(err, MT_INVALID_ARGUMENT,                                                \
                          "upsert worker %s: field " #f " is not NUL-terminated", w->worker_id);
    CHECK_FIELD(name)
    CHECK_FIELD(instance_id)
    CHECK_FIELD(host)
    CHECK_FIELD(state)
    CHECK_FIELD(data_address)
    CHECK_FIELD(version)
#undef CHECK_FIELD
    if (!valid_state(w->state))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "upsert worker %s: state \"%s\" is not \"alive\" or \"lost\"",
                          w->worker_id, w->state);
    if (w->n_devices > 0 && w->devices == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "upsert worker %s: %zu devices but no array",
                          w->worker_id, w->n_devices);
    for (size_t i = 0; i < w->n_devices; i++) {
        const mt_store_device *d = &w->devices[i];
        if (!mt_store__terminated(d->kind, sizeof(d->kind)) ||
            !mt_store__terminated(d->health, sizeof(d->health)))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "upsert worker %s: device %zu has an unterminated string",
                              w->worker_id, i);
        for (size_t j = 0; j < i; j++)
            if (w->devices[j].index == d->index)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "upsert worker %s: device index %u appears twice", w->worker_id,
                                  (unsigned)d->index);
    }
    return MT_OK;
}

static mt_code upsert_rows(mt_store *s, const mt_store_worker *w, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_WORKER_UPSERT);
    int rc;

    mt_store__bind_text(st, 1, w->worker_id);
    mt_store__bind_text(st, 2, w->name);
    mt_store__bind_text(st, 3, w->instance_id);
    mt_store__bind_text(st, 4, w->host);
    sqlite3_bind_int64(st, 5, w->pid);
    mt_store__bind_text(st, 6, w->state);
    mt_store__bind_text(st, 7, w->data_address);
    mt_store__bind_text(st, 8, w->version);
    sqlite3_bind_int64(st, 9, w->registered_at_ms);
    sqlite3_bind_int64(st, 10, w->last_heartbeat_ms);
    rc = mt_store__step_done(st);
    mt_store__stmt_done(st);
    if (rc != SQLITE_OK)
        return mt_store__fail(s, rc, err, "upsert worker %s", w->worker_id);

    st = mt_store__stmt(s, MT_STMT_DEVICES_DELETE);
    mt_store__bind_text(st, 1, w->worker_id);
    rc = mt_store__step_done(st);
    mt_store__stmt_done(st);
    if (rc != SQLITE_OK)
        return mt_store__fail(s, rc, err, "upsert worker %s: devices", w->worker_id);

    st = mt_store__stmt(s, MT_STMT_DEVICE_INSERT);
    for (size_t i = 0; i < w->n_devices; i++) {
        const mt_store_device *d = &w->devices[i];
        sqlite3_reset(st);
        mt_store__bind_text(st, 1, w->worker_id);
        sqlite3_bind_int64(st, 2, d->index);
        mt_store__bind_text(st, 3, d->kind);
        sqlite3_bind_int64(st, 4, d->cores);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)d->memory_bytes);
        mt_store__bind_text(st, 6, d->health);
        rc = mt_store__step_done(st);
        if (rc != SQLITE_OK) {
            mt_code code =
                mt_store__fail(s, rc, err, "upsert worker %s: device %u", w->worker_id, d->index);
            mt_store__stmt_done(st);
            return code;
        }
    }
    mt_store__stmt_done(st);
    return MT_OK;
}

mt_code mt_store_worker_upsert(mt_store *s, const mt_store_worker *w, mt_err *err)
{
    mt_code rc = check_worker(w, err);

    if (rc != MT_OK)
        return rc;
    rc = mt_store__call_begin(s, err);
    if (rc != MT_OK)
        return rc;
    rc = upsert_rows(s, w, err);
    return mt_store__call_end(s, rc, err);
}

/* Fill the scalar fields of w from a WORKER_* row (columns in the WORKER_GET order). */
static void read_worker_row(sqlite3_stmt *st, mt_store_worker *w)
{
    memset(w, 0, sizeof(*w));
    mt_store__col_text(st, 0, w->worker_id, sizeof(w->worker_id));
    mt_store__col_text(st, 1, w->name, sizeof(w->name));
    mt_store__col_text(st, 2, w->instance_id, sizeof(w->instance_id));
    mt_store__col_text(st, 3, w->host, sizeof(w->host));
    w->pid = (uint32_t)sqlite3_column_int64(st, 4);
    mt_store__col_text(st, 5, w->state, sizeof(w->state));
    mt_store__col_text(st, 6, w->data_address, sizeof(w->data_address));
    mt_store__col_text(st, 7, w->version, sizeof(w->version));
    w->registered_at_ms = sqlite3_column_int64(st, 8);
    w->last_heartbeat_ms = sqlite3_column_int64(st, 9);
}

/* Read a device from columns first.. of st (kind, idx, cores, memory_bytes, health). */
static void read_device_row(sqlite3_stmt *st, int first, mt_store_device *d)
{
    memset(d, 0, sizeof(*d));
    mt_store__col_text(st, first, d->kind, sizeof(d->kind));
    d->index = (uint32_t)sqlite3_column_int64(st, first + 1);
    d->cores = (uint32_t)sqlite3_column_int64(st, first + 2);
    d->memory_bytes = (uint64_t)sqlite3_column_int64(st, first + 3);
    mt_store__col_text(st, first + 4, d->health, sizeof(d->health));
}

/* Append a device to w's owned array (capacity tracked in *cap). */
static int push_device(mt_store_worker *w, size_t *cap, const mt_store_device *d)
{
    if (mt_store__grow((void **)&w->devices, cap, w->n_devices, sizeof(*d)) != 0)
        return -1;
    w->devices[w->n_devices++] = *d;
    return 0;
}

/* Load the devices of w (w->devices must be empty). */
static mt_code load_devices(mt_store *s, mt_store_worker *w, mt_err *err)
{
    sqlite3_stmt *st = mt_store__stmt(s, MT_STMT_DEVICES_OF);
    size_t cap = 0;
    mt_code code = MT_OK;
    int rc;

    mt_store__bind_text(st, 1, w->worker_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        mt_store_device d;
        read_device_row(st, 0, &d);
        if (push_device(w, &cap, &d) != 0) {
            code = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "get worker %s: out of memory",
                              w->worker_id);
            break;
        }
    }
    if (code == MT_OK && rc != SQLITE_DONE)
        code = mt_store__fail(s, rc, err, "get worker %s: devices", w->worker_id);
    mt_store__stmt_done(st);
    return code;
}

static mt_code get_one(mt_store *s, enum mt_store_stmt_id id, const char *key, const char *what,
                       mt_store_worker *out, mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code;
    int rc;

    if (out == NULL || key == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "get worker: %s is NULL",
                          out == NULL ? "out" : what);
    memset(out, 0, sizeof(*out));
    code = mt_store__call_begin(s, err); /* one snapshot for the worker and its devices */
    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, id);
    mt_store__bind_text(st, 1, key);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        read_worker_row(st, out);
    if (rc == SQLITE_DONE)
        code = mt_err_set(err, MT_NOT_FOUND, "worker %s %s not found", what, key);
    else if (rc != SQLITE_ROW)
        code = mt_store__fail(s, rc, err, "get worker %s %s", what, key);
    else
        code = MT_OK;
    mt_store__stmt_done(st);
    if (code == MT_OK)
        code = load_devices(s, out, err);
    code = mt_store__call_end(s, code, err);
    if (code != MT_OK)
        mt_store_worker_fini(out);
    if (code != MT_OK)
        memset(out, 0, sizeof(*out));
    return code;
}

mt_code mt_store_worker_get(mt_store *s, const char *worker_id, mt_store_worker *out, mt_err *err)
{
    return get_one(s, MT_STMT_WORKER_GET, worker_id, "id", out, err);
}

mt_code mt_store_worker_find_by_name(mt_store *s, const char *name, mt_store_worker *out,
                                     mt_err *err)
{
    return get_one(s, MT_STMT_WORKER_BY_NAME, name, "name", out, err);
}

void mt_store_worker_fini(mt_store_worker *w)
{
    if (w == NULL)
        return;
    mt_free(w->devices);
    w->devices = NULL;
    w->n_devices = 0;
}

mt_code mt_store_worker_heartbeats(mt_store *s, const char *const *worker_ids,
                                   const int64_t *times_ms, size_t n, size_t *updated, mt_err *err)
{
    sqlite3_stmt *st;
    size_t count = 0;
    mt_code code = MT_OK;

    if (updated != NULL)
        *updated = 0;
    if (n == 0)
        return MT_OK;
    if (worker_ids == NULL || times_ms == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "record heartbeats: %zu ids but no array", n);
    for (size_t i = 0; i < n; i++)
        if (worker_ids[i] == NULL)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "record heartbeats: id %zu is NULL", i);
    code = mt_store__call_begin(s, err);
    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_WORKER_HEARTBEAT);
    for (size_t i = 0; i < n; i++) {
        int rc;
        sqlite3_reset(st);
        mt_store__bind_text(st, 1, worker_ids[i]);
        sqlite3_bind_int64(st, 2, times_ms[i]);
        rc = mt_store__step_done(st);
        if (rc != SQLITE_OK) {
            code = mt_store__fail(s, rc, err, "record heartbeat of worker %s", worker_ids[i]);
            break;
        }
        count += (size_t)sqlite3_changes(s->db);
    }
    mt_store__stmt_done(st);
    code = mt_store__call_end(s, code, err);
    if (code == MT_OK && updated != NULL)
        *updated = count;
    return code;
}

/* Run a one-row UPDATE/DELETE keyed by worker_id; NOT_FOUND when no row changed. */
static mt_code change_one(mt_store *s, enum mt_store_stmt_id id, const char *worker_id,
                          const char *state, const char *what, mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code = MT_OK;
    int rc;

    if (worker_id == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s worker: id is NULL", what);
    code = mt_store__tx_guard(s, err);
    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, id);
    mt_store__bind_text(st, 1, worker_id);
    if (state != NULL)
        mt_store__bind_text(st, 2, state);
    rc = mt_store__step_done(st);
    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "%s worker %s", what, worker_id);
    else if (sqlite3_changes(s->db) == 0)
        code = mt_err_set(err, MT_NOT_FOUND, "%s worker %s: not found", what, worker_id);
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_worker_set_state(mt_store *s, const char *worker_id, const char *state,
                                  mt_err *err)
{
    if (!valid_state(state))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "set state of worker %s: state \"%s\" is not \"alive\" or \"lost\"",
                          worker_id != NULL ? worker_id : "(null)",
                          state != NULL ? state : "(null)");
    return change_one(s, MT_STMT_WORKER_SET_STATE, worker_id, state, "set state of", err);
}

mt_code mt_store_worker_set_device_health(mt_store *s, const char *worker_id, uint32_t index,
                                          const char *health, mt_err *err)
{
    sqlite3_stmt *st;
    mt_code code = MT_OK;
    int rc;

    if (worker_id == NULL || health == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "set device health: NULL argument");
    if (strlen(health) >= sizeof(((mt_store_device *)0)->health))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "set health of worker %s device %u: health text longer than %zu bytes",
                          worker_id, (unsigned)index, sizeof(((mt_store_device *)0)->health) - 1);
    code = mt_store__tx_guard(s, err);
    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_DEVICE_SET_HEALTH);
    mt_store__bind_text(st, 1, worker_id);
    sqlite3_bind_int64(st, 2, index);
    mt_store__bind_text(st, 3, health);
    rc = mt_store__step_done(st);
    if (rc != SQLITE_OK)
        code = mt_store__fail(s, rc, err, "set health of worker %s device %u", worker_id,
                              (unsigned)index);
    else if (sqlite3_changes(s->db) == 0)
        code =
            mt_err_set(err, MT_NOT_FOUND, "worker %s has no device %u", worker_id, (unsigned)index);
    mt_store__stmt_done(st);
    return code;
}

mt_code mt_store_worker_delete(mt_store *s, const char *worker_id, mt_err *err)
{
    return change_one(s, MT_STMT_WORKER_DELETE, worker_id, NULL, "delete", err);
}

/* Order worker pointers by worker_id (for bsearch in attach_devices). */
static int cmp_by_id(const void *a, const void *b)
{
    const mt_store_worker *const *x = a;
    const mt_store_worker *const *y = b;
    return strcmp((*x)->worker_id, (*y)->worker_id);
}

/* Attach every device row to its worker in list (one pass over DEVICES_ALL). */
static mt_code attach_devices(mt_store *s, mt_store_worker *list, size_t n, mt_err *err)
{
    mt_store_worker **by_id = NULL;
    size_t *caps = NULL;
    sqlite3_stmt *st;
    mt_code code = MT_OK;
    int rc;

    by_id = mt_calloc(n, sizeof(*by_id));
    caps = mt_calloc(n, sizeof(*caps));
    if (by_id == NULL || caps == NULL) {
        mt_free(by_id);
        mt_free(caps);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "list workers: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        by_id[i] = &list[i];
    qsort(by_id, n, sizeof(*by_id), cmp_by_id);
    st = mt_store__stmt(s, MT_STMT_DEVICES_ALL);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        mt_store_worker key, *kp = &key, **hit;
        mt_store_device d;
        mt_store__col_text(st, 0, key.worker_id, sizeof(key.worker_id));
        hit = bsearch(&kp, by_id, n, sizeof(*by_id), cmp_by_id);
        if (hit == NULL)
            continue; /* a worker outside the state filter */
        read_device_row(st, 1, &d);
        if (push_device(*hit, &caps[*hit - list], &d) != 0) {
            code = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "list workers: out of memory");
            break;
        }
    }
    if (code == MT_OK && rc != SQLITE_DONE)
        code = mt_store__fail(s, rc, err, "list workers: devices");
    mt_store__stmt_done(st);
    mt_free(by_id);
    mt_free(caps);
    return code;
}

static void read_worker_elem(sqlite3_stmt *st, void *elem)
{
    read_worker_row(st, elem);
}

mt_code mt_store_worker_list(mt_store *s, const char *state_filter, mt_store_worker **out,
                             size_t *n, mt_err *err)
{
    mt_store_worker *list = NULL;
    size_t count = 0;
    sqlite3_stmt *st;
    mt_code code;

    if (out == NULL || n == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "list workers: out or n is NULL");
    *out = NULL;
    *n = 0;
    code = mt_store__call_begin(s, err); /* one snapshot for workers and devices */
    if (code != MT_OK)
        return code;
    st = mt_store__stmt(s, MT_STMT_WORKER_LIST);
    if (state_filter != NULL && state_filter[0] != '\0')
        mt_store__bind_text(st, 1, state_filter);
    code = mt_store__collect(s, st, sizeof(*list), read_worker_elem, (void **)&list, &count,
                             "list workers", err);
    if (code == MT_OK && count > 0)
        code = attach_devices(s, list, count, err);
    code = mt_store__call_end(s, code, err);
    if (code != MT_OK) {
        mt_store_worker_list_free(list, count);
        return code;
    }
    *out = list;
    *n = count;
    return MT_OK;
}

void mt_store_worker_list_free(mt_store_worker *list, size_t n)
{
    if (list == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        mt_store_worker_fini(&list[i]);
    mt_free(list);
}
