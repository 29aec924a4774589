/* SPDX-License-Identifier: MIT */
/*
 * coord_int.h — the coordinator's private state, shared by its files: the domain core — state.c
 * (job and worker tables, typed states, transitions, the restart rule, a lost worker's jobs,
 * task reports) and schedpass.c (the scheduler pass, the reload at open) — with sched.c, the
 * scheduling core (sched.h: the rules, pure); above them the adapters: RPC handlers (jobs.c,
 * workers.c, ckpt.c, metrics.c, joblog.c; none calls another), the periodic sweep (sweep.c) and
 * the status endpoint (http.c), which never call each other. coord.c: loop and dispatch.
 * docs/architecture.md draws the call graph (no circles; layers checked by
 * tests/tools/coord_graph.py). No RPC header and so no protobuf header, generated or protobuf-c's
 * own: what takes protobuf messages or RPC calls is declared in coord_rpc.h, which only the RPC
 * adapters and coord.c include. Every field is owned by the loop thread unless its comment says
 * otherwise.
 */
#ifndef MT_COORD_INT_H
#define MT_COORD_INT_H

#include <pthread.h>
#include <uv.h>

#include "coordinator/coord.h"
#include "coordinator/sched.h"
#include "coordinator/stall.h"
#include "coordinator/stats.h"
#include "jobspec/mt_jobspec.h"
#include "storage/mt_jobstate.h"
#include "storage/mt_store.h"

struct coord_http;
struct coord_mcache;
struct coord_upload;
/* core/rpc's handles, by name only: this header includes no RPC header, so the domain core
 * (state.c) and the scheduling core (sched.c) see no protobuf-c.h (coord_graph.py checks). */
typedef struct mt_rpc_server mt_rpc_server;
typedef struct mt_rpc_call mt_rpc_call;
#define COORD_TOKEN_MAX 256 /* core/rpc's MT_RPC_TOKEN_MAX (coord.c checks that they agree) */

/* One registered worker as the loop sees it (the store holds the durable copy; the typed
 * states coord_worker_state and coord_task_state are the scheduling core's, sched.h). */
typedef struct coord_worker {
    coord_worker_state state;  /* what rec.state says, typed; set together */
    mt_store_worker rec;       /* durable fields; rec.devices owned */
    int64_t last_seen_mono_ms; /* monotonic time of the last register/heartbeat */
    int hb_dirty;              /* rec.last_heartbeat_ms not yet flushed to the store */
} coord_worker;

/* One worker's part of an active job (schedpass.c builds them; coord_task_report updates them). */
typedef struct coord_task {
    char worker_id[64];
    coord_task_state state;
    uint64_t step; /* last step the worker reported */
} coord_task;

/* A job that is not final, as the scheduler sees it (the store holds the durable copy). */
typedef struct coord_job {
    char job_id[32];
    mt_jobstate state;
    int32_t priority;
    uint64_t seq;              /* submission order (numeric part of the id) */
    mt_jobspec_summary sum;    /* the validated spec */
    char reason[256];          /* status reason last stored */
    char diagnosis[256];       /* fault diagnosis last stored ("" none; coord_job_diagnose) */
    uint32_t attempt;          /* assignments handed out so far (1 = first start) */
    uint32_t restarts;         /* transitions to RESTARTING */
    uint64_t step;             /* last step stored */
    uint64_t resume_step;      /* checkpoint step the current attempt resumes from */
    char resume_job[32];       /* whose checkpoint that is: "" = this job's, else init_from's */
    int placed_devices;        /* devices of the last placed attempt (elastic: its batch size) */
    mt_store_placement *place; /* n_place = sum.n_devices when placed, else NULL */
    size_t n_place;
    coord_task *tasks; /* one per distinct worker of the placement */
    size_t n_tasks;
    coord_stall_dev
        *devs;         /* [n_place] device progress from heartbeats (coord_job_progress), or NULL */
    uint64_t prog_sig; /* signature of devs when it last changed */
    int64_t prog_mono_ms;       /* ... and when */
    int64_t stall_note_mono_ms; /* STALLED: when the diagnosis was last stored */
    int ckpt_check;             /* COORD_CKPT_*: its checkpoints' files checked before it resumes */
    uint64_t ckpt_step;  /* COORD_CKPT_VERIFIED: the newest complete one that verified; 0 none */
    char ckpt_note[200]; /* ... and which were skipped and why ("" none) */
    /* a collective of an attempt failed between two workers that both kept heartbeating: the
     * next placement avoids holding both ("" none); else it waits until backoff_until */
    char link_a[64], link_b[64];
    char frozen[64];    /* a worker that stopped answering during the last attempt: not placed on
                           while it stays silent ("" none) */
    int64_t backoff_ms; /* the current back-off (doubles per link failure, <= 60 s) */
    int64_t backoff_until_mono_ms; /* no placement on the same pair before this */
    int64_t silent_note_mono_ms;   /* when a silent worker was named in the reason (0: none named
                                      in this silence; coord_sched_silence) */
} coord_job;

/* coord_job.ckpt_check. NONE: found to have no checkpoint (or the check could not be queued) in
 * this scheduler pass; it becomes UNCHECKED again when the pass ends (schedpass.c). */
enum { COORD_CKPT_UNCHECKED, COORD_CKPT_VERIFYING, COORD_CKPT_VERIFIED, COORD_CKPT_NONE };

/* Loop thread, when the files of job_id's checkpoints were checked (coord_ckpt_verify): step is
 * the newest complete checkpoint whose file verified (0: none), skipped says which newer ones
 * failed and why ("checkpoint step 30 skipped: crc32:..., recorded crc32:..."; "" none). */
typedef void (*coord_ckpt_verified_fn)(mt_coord *c, const char *job_id, uint64_t step,
                                       const char *skipped);

/* What the domain core (state.c) tells the adapters above it, and the one thing it asks of
 * them, installed by coord.c: it never calls them by name. Each may be NULL (a test driving the
 * core alone). Loop thread. */
typedef struct coord_hooks {
    /* store and publish the metric points accepted so far (before a job can end) */
    void (*flush)(mt_coord *c);
    /* job_id moved to state (RESTARTING; SCHEDULED again after a restart, where watchers print
     * the restart marker; or a final state: its metrics stream ends); error: the reason of a
     * RESTARTING, SCHEDULED or FAILED move, else "" */
    void (*moved)(mt_coord *c, const char *job_id, const char *state, const char *error);
    /* check the files of job_id's complete checkpoints off the loop thread (coord_ckpt_verify,
     * ckpt.c): OK, and done runs once on the loop thread; else done never runs (err says why).
     * NULL: no check (the job resumes from its latest complete checkpoint unchecked) */
    mt_code (*verify)(mt_coord *c, const char *job_id, coord_ckpt_verified_fn done, mt_err *err);
} coord_hooks;

struct mt_coord {
    mt_coord_opts opts;
    coord_hooks hooks; /* the adapters the core notifies (state.c) */
    char listen_url[256];
    char state_dir[1024];
    char token[COORD_TOKEN_MAX];
    char instance[33]; /* random per start; workers re-register when it changes */
    uv_loop_t loop;
    uv_async_t wake;    /* nng threads -> loop */
    uv_async_t stopper; /* mt_coord_stop from any thread */
    uv_timer_t sweep;   /* coord_sweep (sweep.c), then the scheduler pass */
    uv_signal_t sigint, sigterm;
    int handles_open; /* closed handles not yet called back */
    mt_store *store;
    mt_rpc_server *rpc;
    mt_rpc_server *rpc_local; /* the same service on local_url, for the dashboard's actions */
    char local_url[96];       /* inproc://meshtrain-coordinator-INSTANCE */
    struct coord_http *http;
    struct coord_mcache *mcache; /* the HTTP server's metrics cache (NULL: none), set by coord.c
                                    so metrics.c feeds it without calling the HTTP adapter */
    coord_stats *stats; /* process metrics; any thread (atomics), freed after the servers */

    pthread_mutex_t qmu; /* guards the call queue (nng threads push) */
    mt_rpc_call **queue;
    size_t qlen, qcap;

    coord_worker *workers; /* registry, loop thread only */
    size_t n_workers, cap_workers;
    int64_t last_flush_mono_ms;
    int64_t last_sweep_mono_ms; /* coord_sweep's last run (0: none yet) */

    coord_job **jobs; /* active (non-final) jobs, loop thread only */
    size_t n_jobs, cap_jobs;
    int sched_dirty; /* something changed that may let a job start */

    void *pub;              /* nng_socket* of the metrics PUB socket (metrics.c) */
    char metrics_url[256];  /* its address, in endpoints.json and GetJob */
    mt_rpc_call **mreports; /* ReportMetrics calls of this drain, stored in one commit */
    size_t n_mreports, cap_mreports;

    struct coord_upload *uploads; /* checkpoint uploads in progress (ckpt.c) */

    pthread_mutex_t ro_mu; /* guards ro/n_ro: pool threads take and give connections */
    mt_store *ro[4];       /* idle read-only connections for bulk reads (bulk.c) */
    size_t n_ro;
};

/* ---- state.c: the domain core (loop thread only; no protobuf, no nng) ---- */
/* "alive" / "lost" (a static string). */
const char *coord_worker_state_name(coord_worker_state s);
/* The state named name; 0 when name is not one (out untouched). */
int coord_worker_state_parse(const char *name, coord_worker_state *out);
/* Set w's state, typed and in its record (the store is the caller's). */
void coord_worker_set_state(coord_worker *w, coord_worker_state s);
coord_worker *coord_worker_find(mt_coord *c, const char *worker_id);
/* w as the scheduling core sees it (id, host, data address, state, last seen; borrowed from w;
 * no devices, held_by NULL). */
void coord_worker_view(const coord_worker *w, coord_sched_worker *v);
/* "", "running", "succeeded", "failed", "cancelled" (the wire's TaskStatus.state) */
const char *coord_task_state_name(coord_task_state s);
int coord_task_state_parse(const char *name, coord_task_state *out);
/* SCHEDULED, RUNNING or STALLED: the job holds a placement */
int coord_jobstate_placed(mt_jobstate s);
coord_job *coord_job_find(mt_coord *c, const char *job_id);
/* append j to the table (owned from then on); RESOURCE_EXHAUSTED */
mt_code coord_job_add(mt_coord *c, coord_job *j);
/* drop j from the table and free it */
void coord_job_remove(mt_coord *c, coord_job *j);
void coord_job_free(coord_job *j);    /* NULL: no-op */
void coord_jobs_free(mt_coord *c);    /* free every job of the table, and the table */
void coord_job_release(coord_job *j); /* forget its placement, tasks and progress records */
/* job state change / reason update as the scheduler does them (store first); a final state
 * frees j (the hooks are told: its metrics stream ends) */
mt_code coord_job_move(mt_coord *c, coord_job *j, mt_jobstate to, const char *reason);
void coord_job_note(mt_coord *c, coord_job *j, const char *reason);
/* Store j's fault diagnosis (docs/jobs.md#diagnosis; "" clears it) when it changed. Transitions
 * other than to STALLED, RESTARTING or SCHEDULED clear it (the store does, coord_job_move
 * mirrors it). */
/* One rank's collective progress from a heartbeat (d, typed; its worker_id and local_index are
 * set here from the placement): kept in j->devs for the stall rule when job_id is active
 * (SCHEDULED, RUNNING, STALLED) at that attempt and rank runs on worker_id, else ignored. */
void coord_job_progress(mt_coord *c, const char *job_id, uint32_t attempt, const char *worker_id,
                        uint32_t rank, const coord_stall_dev *d);
void coord_job_diagnose(mt_coord *c, coord_job *j, const char *diagnosis);
/* Both at once, in one store commit (a sweep that names a fault updates both). */
void coord_job_note_diagnose(mt_coord *c, coord_job *j, const char *reason, const char *diagnosis);
mt_code coord_job_set_step(mt_coord *c, coord_job *j, uint64_t step);
/* j's task on worker_id (NULL: none). */
coord_task *coord_job_task(coord_job *j, const char *worker_id);
/* The workers of j's tasks as the scheduling core sees them (coord_worker_view; those the
 * registry does not know are left out): out has room for j->n_tasks; returns how many. */
size_t coord_job_worker_views(mt_coord *c, const coord_job *j, coord_sched_worker *out);
/* Move j to RESTARTING with reason `cause` (its tasks are dropped; it is placed again and resumes
 * from its last complete checkpoint), or to FAILED with "<cause>; restart limit of N reached". */
void coord_job_restart(mt_coord *c, coord_job *j, const char *cause);
/* The worker's tasks died with it (declared lost, or replaced by a new process): every placed
 * job with a task on worker_id restarts with cause "worker <worker_id> <why>" (coord_job_restart:
 * RESTARTING, or FAILED at the limit). worker_id: borrowed, not a job's own string (a restart
 * frees the job's tasks). */
void coord_worker_lose(mt_coord *c, const char *worker_id, const char *why);

/* A worker's report of one of its tasks, typed (the RPC adapters build it from the wire's
 * TaskStatus: the heartbeat's tasks, UpdateTask's task). Strings borrowed for the call. */
typedef struct coord_task_status {
    const char *job_id;
    uint32_t attempt;
    coord_task_state state; /* COORD_TASK_ASSIGNED when the wire's word is empty or unknown */
    uint64_t step;
    const char *error; /* "CODE: text" of a failed task, "" none */
} coord_task_status;

/* Apply the status t that worker_id reported, as the scheduling core reads it
 * (coord_sched_task_report): record the step, record the task's state and move the job
 * (RUNNING when every task started, STALLED -> RUNNING on news, SUCCEEDED when all succeeded),
 * or fail it ("worker W: error"), or, for a task that failed on a peer, restart it naming the
 * frozen worker or the broken link (coord_sched_peer_failure; the next placement avoids it).
 * A task that succeeded while others still run has that state written to the store first
 * (mt_store_job_set_task_state): the worker forgets it once acknowledged, and a restarted
 * coordinator reads it back (the reload). Loop thread. */
typedef enum coord_report_ack {
    COORD_REPORT_ACK,      /* applied (or ignored): acknowledge it */
    COORD_REPORT_CANCEL,   /* the worker should stop that task (the coordinator does not run it:
                              unknown or final job, another attempt, not placed there) */
    COORD_REPORT_UNSTORED, /* the store refused the write: do not acknowledge (the worker
                              reports it again) */
} coord_report_ack;
coord_report_ack coord_task_report(mt_coord *c, const char *worker_id, const coord_task_status *t);

/* ---- schedpass.c: the scheduler pass and the reload (domain core; loop thread only) ---- */
/* The active jobs (QUEUED, SCHEDULED, RUNNING, RESTARTING, STALLED) from the store into the
 * table, once at open after the registry (coord_workers_load): each with its validated spec
 * summary (a spec the build no longer accepts: FAILED), a placed one with its placement and
 * tasks as the scheduling core's reload rule says (coord_sched_reload: re-attached, assigned
 * again, or restarted now when a worker of it is unknown or lost). Also summarises the jobs of
 * an older schema and sets the per-state counts. Sets sched_dirty. Codes: the store's,
 * RESOURCE_EXHAUSTED. */
mt_code coord_schedpass_reload(mt_coord *c, mt_err *err);
/* One scheduler pass when sched_dirty (clears it): QUEUED and RESTARTING jobs placed, kept
 * waiting (their reason stored) or FAILED as coord_sched_plan_make decides, in its order; a
 * placement is the placement rows and SCHEDULED in one store transaction, with the job's tasks
 * ASSIGNED and the checkpoint it resumes from chosen (the newest whose file verified, via
 * hooks.verify; else the latest; else init_from's); a restarted job's SCHEDULED goes to
 * hooks.moved. A store failure or lack of memory leaves sched_dirty set (the sweep tries again). */
void coord_schedpass_run(mt_coord *c);
/* The checkpoint a job with "init_from" (sum->init_job) starts from: the named step of that
 * job, else its latest complete one, into *step. NOT_FOUND / FAILED_PRECONDITION with the
 * reason in err (may be NULL) when there is none. */
mt_code coord_job_init_source(mt_coord *c, const mt_jobspec_summary *sum, uint64_t *step,
                              mt_err *err);

/* ---- workers.c ---- */
mt_code coord_workers_load(mt_coord *c, mt_err *err);
void coord_workers_free(mt_coord *c);

/* ---- sweep.c: the periodic sweep (an adapter: it calls only the two cores) ---- */
/* Lost workers (their jobs restart), the once-per-silence note, the stall rule, and the
 * heartbeat times written once a second. Sweep timer; loop thread. */
void coord_sweep(mt_coord *c);
/* Its first part alone: lost workers and the heartbeat times (also once at shutdown). */
void coord_sweep_workers(mt_coord *c);

/* A read-only store for a pool thread (an idle one, else a new one; NULL with err), and its
 * return. Any thread. */
mt_store *coord_bulk_ro_take(mt_coord *c, mt_err *err);
void coord_bulk_ro_give(mt_coord *c, mt_store *s);
void coord_bulk_fini(mt_coord *c); /* close the idle connections; after the loop is done */

/* ---- metrics.c ---- */
mt_code coord_metrics_open(mt_coord *c, mt_err *err); /* the PUB socket */
void coord_metrics_close(mt_coord *c);
void coord_metrics_flush(mt_coord *c); /* store queued reports in one commit, then reply */

/* ---- ckpt.c ---- */
void coord_ckpt_free(mt_coord *c);
/* Check the files of job_id's complete checkpoints, newest first, on the pool, until one
 * matches its recorded size and CRC; those that do not are marked incomplete in the store (and
 * logged) before done runs on the loop thread. OK: done runs once (also at shutdown, with what
 * was found); else it never runs. Codes: RESOURCE_EXHAUSTED, INTERNAL (cannot queue). */
mt_code coord_ckpt_verify(mt_coord *c, const char *job_id, coord_ckpt_verified_fn done,
                          mt_err *err);
/* At start, before any upload: in STATE_DIR/checkpoints/<job>/ of each job the store knows,
 * delete the files that are not the file of one of that job's complete checkpoint records (a
 * .part of an upload cut by a crash, a file whose record keep-N gc removed just before a crash).
 * Directories of jobs the store does not know are left alone (logged). Logs each deletion;
 * failures are logged, never fatal. Returns the number of files deleted. */
size_t coord_ckpt_sweep_orphans(mt_coord *c);

/* ---- http.c ---- */
mt_code coord_http_open(mt_coord *c, const char *addr, struct coord_http **out, char *bound,
                        size_t cap, mt_err *err);
void coord_http_close(struct coord_http *h);
/* The metrics cache the status endpoint answers from (NULL: no HTTP or no cache); metrics.c
 * feeds it the points of each commit. Valid until coord_http_close. */
struct coord_mcache *coord_http_mcache(struct coord_http *h);

#endif
