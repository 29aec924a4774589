/* SPDX-License-Identifier: MIT */
/*
 * bulk.c — bulk reads off the loop thread (STYLE.md §4): GetJob, GetMetrics, GetJobLog,
 * ListCheckpoints and GetCheckpointChunk run on libuv's thread pool, each with a read-only
 * connection of its own (WAL lets it read while the loop writes), and reply from there
 * (mt_rpc_call_reply is thread-safe). The work touches only its call and its connection, never the
 * coordinator's loop state; the loop only frees the request in after_work.
 *
 * Read-only connections are kept in a small pool (guarded by ro_mu) so a request does not pay
 * for opening one. Ordering: every write a client was told about is committed before the
 * reply, so a read that starts after it sees it.
 */
#include "coordinator/coord_rpc.h"

#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "log/mt_log.h"

#define RO_POOL 4

typedef struct bulk_req {
    uv_work_t work;
    mt_coord *c;
    mt_rpc_call *call;
    coord_bulk_fn fn;
} bulk_req;

mt_store *coord_bulk_ro_take(mt_coord *c, mt_err *err)
{
    mt_store *s = NULL;
    char db[1100];

    pthread_mutex_lock(&c->ro_mu);
    if (c->n_ro > 0)
        s = c->ro[--c->n_ro];
    pthread_mutex_unlock(&c->ro_mu);
    if (s != NULL)
        return s;
    snprintf(db, sizeof(db), "%s/meshtrain.db", c->state_dir);
    if (mt_store_open_readonly(db, &s, err) != MT_OK)
        return NULL;
    return s;
}

void coord_bulk_ro_give(mt_coord *c, mt_store *s)
{
    pthread_mutex_lock(&c->ro_mu);
    if (c->n_ro < RO_POOL) {
        c->ro[c->n_ro++] = s;
        s = NULL;
    }
    pthread_mutex_unlock(&c->ro_mu);
    mt_store_close(s);
}

static void bulk_work(uv_work_t *w)
{
    bulk_req *r = w->data;
    mt_err err = MT_ERR_INIT;
    mt_store *s = coord_bulk_ro_take(r->c, &err);

    if (s == NULL) {
        mt_rpc_call_reply(r->call, err.code, err.msg, NULL);
        return;
    }
    r->fn(r->c, s, r->call); /* replies */
    coord_bulk_ro_give(r->c, s);
}

static void bulk_done(uv_work_t *w, int status)
{
    bulk_req *r = w->data;

    if (status != 0) /* cancelled before it ran */
        mt_rpc_call_reply(r->call, MT_UNAVAILABLE, "coordinator shutting down", NULL);
    mt_free(r);
}

void coord_bulk(mt_coord *c, mt_rpc_call *call, coord_bulk_fn fn)
{
    bulk_req *r = mt_calloc(1, sizeof(*r));

    if (r == NULL) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        return;
    }
    r->c = c;
    r->call = call;
    r->fn = fn;
    r->work.data = r;
    if (uv_queue_work(&c->loop, &r->work, bulk_work, bulk_done) != 0) {
        mt_free(r);
        mt_rpc_call_reply(call, MT_INTERNAL, "cannot queue the read", NULL);
    }
}

void coord_bulk_fini(mt_coord *c)
{
    for (size_t i = 0; i < c->n_ro; i++)
        mt_store_close(c->ro[i]);
    c->n_ro = 0;
}
