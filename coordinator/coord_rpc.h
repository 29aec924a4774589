/* SPDX-License-Identifier: MIT */
/*
 * coord_rpc.h — the coordinator's RPC-facing declarations: the handlers coord.c dispatches to and
 * the functions that take or fill protobuf messages (proto/coordinator.pb-c.h). Only the RPC
 * adapters (jobs.c, workers.c, ckpt.c, metrics.c, joblog.c, bulk.c, rpcview.c) and coord.c
 * include it; the domain core (state.c) includes coord_int.h alone and so sees no generated
 * protobuf type (tests/integration/test_coord_no_circles.sh checks that). Threading: loop thread
 * unless a comment says otherwise.
 */
#ifndef MT_COORD_RPC_H
#define MT_COORD_RPC_H

#include "coordinator/coord_int.h"
#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"

/* The wire's task status t as the domain core takes it (coord_task_report): its state word
 * typed (COORD_TASK_ASSIGNED when empty or unknown); strings borrowed from t. The heartbeat
 * (workers.c) and UpdateTask (jobs.c) both report through it. */
static inline coord_task_status coord_task_status_of(const Meshtrain__TaskStatus *t)
{
    coord_task_status s = {t->job_id, t->attempt, COORD_TASK_ASSIGNED, t->step, t->error};

    (void)coord_task_state_parse(t->state, &s.state); /* an unknown word leaves ASSIGNED */
    return s;
}

/* ---- workers.c ---- */
void coord_handle_register(mt_coord *c, mt_rpc_call *call);
void coord_handle_heartbeat(mt_coord *c, mt_rpc_call *call);
void coord_handle_list_workers(mt_coord *c, mt_rpc_call *call);

/* ---- bulk.c ---- */
/* fn runs on a pool thread with a read-only store and must reply to call; of c it may read only
 * what never changes after open (state_dir, metrics_url) */
typedef void (*coord_bulk_fn)(const mt_coord *c, mt_store *ro, mt_rpc_call *call);
void coord_bulk(mt_coord *c, mt_rpc_call *call, coord_bulk_fn fn);

/* ---- jobs.c ---- */
void coord_handle_submit_job(mt_coord *c, mt_rpc_call *call);
void coord_handle_get_job(mt_coord *c, mt_rpc_call *call);
void coord_handle_list_jobs(mt_coord *c, mt_rpc_call *call);
void coord_handle_cancel_job(mt_coord *c, mt_rpc_call *call);
void coord_handle_update_task(mt_coord *c, mt_rpc_call *call);

/* ---- metrics.c ---- */
/* points (final_state NULL); a final state ends the job's stream; any other state name is a
 * state change without points (RESTARTING, SCHEDULED again; error = its reason) */
void coord_metrics_publish(mt_coord *c, const char *job_id,
                           const Meshtrain__MetricPoint *const *pts, size_t n,
                           const char *final_state, const char *error);
void coord_handle_report_metrics(mt_coord *c, mt_rpc_call *call); /* queues; flushed below */
void coord_handle_get_metrics(mt_coord *c, mt_rpc_call *call);

/* ---- rpcview.c: protobuf views of stored rows, shared by the RPC adapters ---- */
/* Proto views of the stored points pts[0..n) for a reply: *p gets n + 1 points and *pp
 * n + 1 pointers to them, both owned (mt_free, also after a failure); names are borrowed
 * from pts. Any thread. Codes: RESOURCE_EXHAUSTED. */
mt_code coord_metric_points(const mt_store_metric *pts, size_t n, Meshtrain__MetricPoint **p,
                            Meshtrain__MetricPoint ***pp);

/* ---- joblog.c ---- */
void coord_handle_get_job_log(mt_coord *c, mt_rpc_call *call);
void coord_handle_get_job_digests(mt_coord *c, mt_rpc_call *call);

/* ---- ckpt.c ---- */
void coord_handle_put_checkpoint_chunk(mt_coord *c, mt_rpc_call *call);
void coord_handle_list_checkpoints(mt_coord *c, mt_rpc_call *call);
void coord_handle_get_checkpoint_chunk(mt_coord *c, mt_rpc_call *call);

#endif
