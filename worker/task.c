/* SPDX-License-Identifier: MIT */
/*
 * task.c — the worker's task table and task runner (contract in task.h).
 *
 * DESIGN. The table (a small array under one mutex) holds what heartbeats report: per (job,
 * attempt) the state word, the step and the error text. Each started task also has a task_run,
 * owned by its detached runner thread; the table record points at it only to raise the cancel
 * flag, and the thread clears that pointer (under the mutex) before it frees the run. `live`
 * counts runner threads so worker_tasks_stop can wait for them.
 * A runner does, in order: parse the spec once (core/jobspec), build the mesh from the
 * assignment's dimensions, check the dataset's files (under --data-root, regular files only)
 * and the whole spec on that mesh as `plan` does (the coordinator checks the structure only),
 * build the network world from the rank table (the listener is the
 * worker's, opened at start), download the resume checkpoint when the assignment names one, then
 * train through mt_spmd_train (the entry point `train --local` uses too) with this file's
 * progress, save and stop hooks; told the process of every rank, it opens this worker's own input
 * pipeline (under the default DATA sharding a device's batch depends only on its batch
 * coordinate) or loads a whole data set that each device slices. Only the worker holding global
 * rank 0 reports metrics and writes/uploads checkpoints (the others' numbers are the same bits
 * after the allreduces). A final checkpoint is always written at the end of training so that
 * `meshtrain export JOB` has the model. A cancel also cancels the run's collective world
 * (mt_coll_world_cancel; the run publishes it under the mutex while it exists), so a device blocked
 * on a peer behind a dead link stops at once instead of at the collective deadline, and the data
 * plane is free for the next attempt. Metric names: loss, accuracy (running means over the epoch,
 * as Keras prints them), examples_per_sec, epoch_steps and epochs (once per epoch, for progress
 * bars), val_loss / val_<metric> (after a validation) and test_loss / test_<metric> (epoch end),
 * Keras's names (core/loss), best_step (the best checkpoint's step, "validation.best").
 * Reports: the training hooks only queue points and digests; each run's reporter thread
 * (report.h) sends them with ReportMetrics, at most every FLUSH_S (epoch ends included: a job of
 * short epochs would otherwise keep the coordinator committing one report after another), so a
 * frozen or restarting coordinator never slows the step loop (nor, in a job whose processes agree
 * after each progress event, every process's step loop). Only a checkpoint upload waits on the
 * coordinator: its step's points first, then its chunks. Threading: heartbeat pool thread
 * (on_assignment/on_cancel/snapshot), runner threads, their reporter threads, the shutdown path;
 * all shared fields are under t->mu; the cancel/stop flags are atomics.
 *
 * Log lines: every line the worker prints (core/log) while a task runs also goes to that task's
 * ring (log_sink): a line from a thread tagged with the job id (the runner thread tags itself),
 * or from an untagged thread (device, collective, heartbeat threads) while exactly one task runs
 * in the process. Every worker of the job, not only rank 0, sends its ring with its reports
 * (from its reporter thread, at most every LOG_FLUSH_S on the others); the ring keeps the newest
 * LOG_CAP unsent lines. The registry of rings is process-wide (log_mu), as the log sink is.
 */
#include "worker/task.h"
#include "worker/metrics.h"
#include "worker/report.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "ckpt/mt_ckpt.h"
#include "clock/mt_clock.h"
#include "coll/mt_coll_mpi.h"
#include "coll/mt_coll_progress.h"
#include "jobspec/mt_jobspec.h"
#include "log/mt_log.h"
#include "mesh/mt_mesh.h"
#include "pathsafe/mt_pathsafe.h"
#include "rpc/mt_rpc.h"
#include "spmd/mt_spmd.h"
#include "worker/taskdir.h"

#define SVC       (&meshtrain__coordinator__descriptor)
#define MAX_TASKS 64
/* metric points kept while the coordinator is unreachable (64 bytes each: 8 MiB of queue,
 * touched only as it fills), sent at most REPORT_POINTS a report (below the coordinator's
 * 10,000 per report) */
#define MAX_POINTS           131072
#define REPORT_POINTS        8192
#define MAX_DIGESTS          256 /* unreported state digests kept per task */
#define FLUSH_S              0.1 /* rank 0's process: a report at most this often */
#define CHUNK_BYTES          (4u << 20)
#define CHUNK_TIMEOUT_MS     10000
#define NET_WAIT_TRIES       600 /* x 100 ms */
#define PEER_LOSS_WAIT_TRIES 200 /* x 100 ms */
#define RETRY_S              1.0 /* metrics: next try after an unreachable coordinator */
#define LOG_CAP              256 /* unsent log lines kept per task */
#define LOG_FLUSH_S          1.0 /* workers without rank 0: log lines at most this often */
/* checkpoint transfers: retry while the coordinator restarts (below the peers' collective
 * deadline) */
#define CKPT_RETRY_S 20.0

typedef struct task_run task_run;

typedef struct log_entry {
    uint64_t seq; /* from 1 per task run */
    int64_t time_ms;
    mt_log_level level;
    char text[MT_LOG_LINE_TEXT_MAX + 1];
} log_entry;

typedef struct task_rec {
    char job_id[32];
    unsigned attempt;
    char state[16]; /* "running" | "succeeded" | "failed" | "cancelled" */
    unsigned long long step;
    char error[256];
    task_run *run; /* while its runner thread lives */
} task_rec;

struct worker_tasks {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* live dropped */
    task_rec t[MAX_TASKS];
    size_t n;
    int live; /* runner threads */
    char coordinator[256];
    char token[MT_RPC_TOKEN_MAX];
    int rpc_timeout_ms;
    mt_coll_net *net;
    char mpi_addr[64];               /* an MPI worker's "mpi://WORLD/RANK", else "" (task.h) */
    int mpi_blocking;                /* its collectives block (no deadline): task.h */
    const struct mt_pathsafe *roots; /* borrowed; NULL = no confinement */
    const struct mt_tls *tls;        /* borrowed; NULL = none */
    worker_metrics *metrics;         /* borrowed; NULL = none */
    char worker_id[64];
    char instance[64];
};

struct task_run {
    worker_tasks *tab;
    char job_id[32];
    unsigned attempt;
    char *spec_json;
    char mesh_text[256];
    int n_ranks;
    mt_coll_rank_addr *table; /* addr strings owned */
    bool has_rank0;
    uint64_t resume_step;
    char resume_job[32];  /* the job whose checkpoint resume_step is: this one, or init_from.job */
    atomic_int cancel;    /* the coordinator cancelled it */
    atomic_int term;      /* the worker is stopping */
    mt_coll_world *world; /* tab->mu: while it exists, so a cancel interrupts its collectives */
    bool ckpt_on_stop;    /* the job has periodic checkpoints */
    mt_rpc_client *cli;
    /* the unreported points and state digests, sent by its own thread (report.h): while cli */
    worker_report *rep;
    bool report_warned; /* reporter thread: the last report failed (logged once) */
    int64_t meta_epoch; /* epoch whose epoch_steps/epochs were reported */
    uint64_t ckpt_step; /* the last checkpoint uploaded: its step's points go out at once */
    /* a periodic checkpoint written before its step's progress event: uploaded once that step's
     * points went out (on_progress), so a checkpoint the coordinator holds never lacks them */
    char defer_path[4096];
    uint64_t defer_step;    /* 0: none waiting */
    uint64_t seen_step;     /* the last step whose progress event came */
    mt_err defer_err;       /* why the deferred upload failed (its code ends the training) */
    worker_taskdir td;      /* the attempt's directory (td.path "": none yet) */
    mt_coll_progress *prog; /* t->mu: set once the world exists; read by heartbeat snapshots */
    /* log_mu: the ring of unsent log lines (oldest at log_head) */
    log_entry logs[LOG_CAP];
    size_t log_head, log_n;
    uint64_t log_seq; /* the last seq given */
    /* reporter thread only: a report's copy of the lines and their messages */
    log_entry log_out[LOG_CAP];
    Meshtrain__LogLine log_msg[LOG_CAP];
    Meshtrain__LogLine *log_ptrs[LOG_CAP];
};

/* The rings of the running tasks, for the log sink (process-wide, as the sink is). */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static task_run *log_runs[MAX_TASKS];
static size_t log_n_runs;
static void log_sink(void *ctx, const char *tag, mt_log_level level, int64_t time_ms,
                     const char *text);

static double now_s(void)
{
    return (double)mt_clock_mono_us() * 1e-6;
}

mt_code worker_tasks_new(const worker_task_env *env, worker_tasks **out, mt_err *err)
{
    worker_tasks *t = mt_calloc(1, sizeof(*t));

    *out = NULL;
    if (t == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "worker tasks: out of memory");
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    snprintf(t->coordinator, sizeof(t->coordinator), "%s",
             env->coordinator ? env->coordinator : "");
    snprintf(t->token, sizeof(t->token), "%s", env->token ? env->token : "");
    t->rpc_timeout_ms = env->rpc_timeout_ms > 0 ? env->rpc_timeout_ms : 3000;
    t->net = env->net;
    snprintf(t->mpi_addr, sizeof(t->mpi_addr), "%s", env->mpi_addr ? env->mpi_addr : "");
    t->mpi_blocking = env->mpi_blocking;
    t->roots = env->roots;
    t->tls = env->tls;
    t->metrics = env->metrics;
    mt_log_set_sink(log_sink, NULL);
    *out = t;
    return MT_OK;
}

void worker_tasks_free(worker_tasks *t)
{
    if (t == NULL)
        return;
    worker_tasks_stop(t);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    mt_free(t);
}

void worker_tasks_set_identity(worker_tasks *t, const char *worker_id, const char *instance_id)
{
    pthread_mutex_lock(&t->mu);
    snprintf(t->worker_id, sizeof(t->worker_id), "%s", worker_id);
    snprintf(t->instance, sizeof(t->instance), "%s", instance_id);
    pthread_mutex_unlock(&t->mu);
}

static task_rec *find(worker_tasks *t, const char *job_id, unsigned attempt)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->t[i].attempt == attempt && strcmp(t->t[i].job_id, job_id) == 0)
            return &t->t[i];
    return NULL;
}

/* ------------------------------------------------------------------ runner: RPCs */

/* Record the task's state (and tell the coordinator at once with UpdateTask when final or new). */
static void set_state(task_run *r, const char *state, uint64_t step, const char *error)
{
    worker_tasks *t = r->tab;
    Meshtrain__UpdateTaskRequest req = MESHTRAIN__UPDATE_TASK_REQUEST__INIT;
    Meshtrain__TaskStatus ts = MESHTRAIN__TASK_STATUS__INIT;
    ProtobufCMessage *rep = NULL;
    char wid[64], inst[64];
    mt_err err = MT_ERR_INIT;
    task_rec *rec;

    pthread_mutex_lock(&t->mu);
    rec = find(t, r->job_id, r->attempt);
    if (rec != NULL) {
        snprintf(rec->state, sizeof(rec->state), "%s", state);
        if (step > rec->step)
            rec->step = step;
        snprintf(rec->error, sizeof(rec->error), "%s", error);
        step = rec->step;
    }
    snprintf(wid, sizeof(wid), "%s", t->worker_id);
    snprintf(inst, sizeof(inst), "%s", t->instance);
    pthread_mutex_unlock(&t->mu);
    if (r->cli == NULL)
        return; /* the heartbeat carries it */
    ts.job_id = r->job_id;
    ts.state = (char *)state;
    ts.step = step;
    ts.error = (char *)error;
    ts.attempt = r->attempt;
    req.worker_id = wid;
    req.instance_id = inst;
    req.task = &ts;
    if (mt_rpc_client_call(r->cli, SVC, "UpdateTask", &req.base, &rep, t->rpc_timeout_ms, &err) ==
        MT_OK)
        protobuf_c_message_free_unpacked(rep, NULL);
    else
        mt_log_warn("job %s: UpdateTask %s: %s: %s (the heartbeat will carry it)", r->job_id, state,
                    mt_code_name(err.code), err.msg);
}

/* The coordinator may come back (restart, network blip): worth retrying. */
static bool transient(mt_code rc)
{
    return rc == MT_UNAVAILABLE || rc == MT_DEADLINE_EXCEEDED;
}

static void log_sink(void *ctx, const char *tag, mt_log_level level, int64_t time_ms,
                     const char *text)
{
    task_run *r = NULL;

    (void)ctx;
    pthread_mutex_lock(&log_mu);
    if (tag != NULL) { /* the newest run of that job */
        for (size_t i = log_n_runs; r == NULL && i-- > 0;)
            if (strcmp(log_runs[i]->job_id, tag) == 0)
                r = log_runs[i];
    } else if (log_n_runs == 1) {
        r = log_runs[0];
    }
    if (r != NULL) {
        log_entry *e;
        if (r->log_n == LOG_CAP) { /* the oldest unsent line gives way */
            r->log_head = (r->log_head + 1) % LOG_CAP;
            r->log_n--;
        }
        e = &r->logs[(r->log_head + r->log_n++) % LOG_CAP];
        e->seq = ++r->log_seq;
        e->time_ms = time_ms;
        e->level = level;
        snprintf(e->text, sizeof(e->text), "%s", text);
    }
    pthread_mutex_unlock(&log_mu);
}

static void log_register(task_run *r, bool on)
{
    pthread_mutex_lock(&log_mu);
    if (on && log_n_runs < MAX_TASKS) {
        log_runs[log_n_runs++] = r;
    } else if (!on) {
        for (size_t i = 0; i < log_n_runs; i++)
            if (log_runs[i] == r) {
                memmove(&log_runs[i], &log_runs[i + 1], (log_n_runs - i - 1) * sizeof(r));
                log_n_runs--;
                break;
            }
    }
    pthread_mutex_unlock(&log_mu);
}

/* Copy the unsent lines into r->log_out and point req at their messages; returns how many. */
static size_t log_take(task_run *r, Meshtrain__ReportMetricsRequest *req)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    size_t n;

    pthread_mutex_lock(&log_mu);
    n = r->log_n;
    for (size_t i = 0; i < n; i++)
        r->log_out[i] = r->logs[(r->log_head + i) % LOG_CAP];
    pthread_mutex_unlock(&log_mu);
    for (size_t i = 0; i < n; i++) {
        Meshtrain__LogLine *m = &r->log_msg[i];
        meshtrain__log_line__init(m);
        m->seq = r->log_out[i].seq;
        m->time_ms = r->log_out[i].time_ms;
        m->level = (char *)names[r->log_out[i].level < MT_LOG_OFF ? r->log_out[i].level : 0];
        m->text = r->log_out[i].text;
        r->log_ptrs[i] = m;
    }
    req->log_lines = r->log_ptrs;
    req->n_log_lines = n;
    return n;
}

/* Forget the lines up to seq (they were delivered, or refused for good). */
static void log_drop(task_run *r, uint64_t seq)
{
    pthread_mutex_lock(&log_mu);
    while (r->log_n > 0 && r->logs[r->log_head].seq <= seq) {
        r->log_head = (r->log_head + 1) % LOG_CAP;
        r->log_n--;
    }
    pthread_mutex_unlock(&log_mu);
}

static bool log_pending(task_run *r)
{
    bool any;

    pthread_mutex_lock(&log_mu);
    any = r->log_n > 0;
    pthread_mutex_unlock(&log_mu);
    return any;
}

/*
 * worker_report_send_fn: one ReportMetrics of the reporter's batch (the process holding rank 0:
 * points and digests) with this worker's unsent log lines, on the reporter thread. Log lines
 * follow the batch's fate: kept while the coordinator is unreachable, else forgotten.
 */
static mt_code report_send(void *ctx, const worker_report_batch *b)
{
    task_run *r = ctx;
    Meshtrain__ReportMetricsRequest req = MESHTRAIN__REPORT_METRICS_REQUEST__INIT;
    ProtobufCMessage *rep = NULL;
    mt_err err = MT_ERR_INIT;
    char wid[64];
    size_t nlog;
    mt_code rc;

    pthread_mutex_lock(&r->tab->mu);
    snprintf(wid, sizeof(wid), "%s", r->tab->worker_id);
    pthread_mutex_unlock(&r->tab->mu);
    req.worker_id = wid;
    req.job_id = r->job_id;
    req.points = b->points;
    req.n_points = b->n_points;
    req.attempt = r->attempt;
    req.digests = b->digests;
    req.n_digests = b->n_digests;
    nlog = log_take(r, &req);
    rc = mt_rpc_client_call(r->cli, SVC, "ReportMetrics", &req.base, &rep, r->tab->rpc_timeout_ms,
                            &err);
    if (nlog > 0 && (rc == MT_OK || !transient(rc)))
        log_drop(r, r->log_out[nlog - 1].seq);
    if (rc == MT_OK) {
        protobuf_c_message_free_unpacked(rep, NULL);
        if (r->report_warned)
            mt_log_info("job %s: ReportMetrics: delivered again", r->job_id);
        r->report_warned = false;
        return MT_OK;
    }
    if (!r->report_warned)
        mt_log_warn("job %s: ReportMetrics: %s: %s (%s)", r->job_id, mt_code_name(rc), err.msg,
                    transient(rc) ? "points kept for the next report" : "points dropped");
    r->report_warned = true;
    return rc;
}

/* worker_report_more_fn: log lines to send. */
static bool report_more(void *ctx)
{
    return log_pending(ctx);
}

/* worker_report_give_up_fn: a drain need not wait for a run that is ending. */
static bool report_give_up(void *ctx)
{
    task_run *r = ctx;
    return atomic_load(&r->cancel) || atomic_load(&r->term);
}

/* Queue a point for the reporter (never blocks on the coordinator). */
static void add_point(task_run *r, const char *name, uint64_t step, int64_t epoch, double v)
{
    size_t dropped =
        worker_report_point(r->rep, name, step, (uint32_t)epoch, v, mt_clock_wall_ms());

    if (dropped > 0) /* the coordinator was unreachable for MAX_POINTS points */
        mt_log_warn("job %s: %zu unreported metric points dropped", r->job_id, dropped);
}

/* mt_spmd_run_opts.on_digest (the process holding rank 0): the state digest after step, sent
 * with the next report (docs/reproducibility.md). */
static mt_code on_digest(void *ctx, int64_t step, const mt_digest *root, mt_err *err)
{
    task_run *r = ctx;
    char hex[MT_DIGEST_HEX];
    size_t dropped;

    (void)err;
    dropped =
        worker_report_digest(r->rep, (uint64_t)step, mt_digest_hex(root, hex), mt_clock_wall_ms());
    if (dropped > 0) /* the coordinator was unreachable for MAX_DIGESTS digests */
        mt_log_warn("job %s: %zu unreported state digests dropped", r->job_id, dropped);
    return MT_OK;
}

/* One upload of buf[0..size) as checkpoint (job, step), chunk by chunk from offset 0. */
static mt_code upload_pass(task_run *r, const unsigned char *buf, size_t size, uint64_t step,
                           const char *sum, mt_err *err)
{
    char wid[64];
    mt_code rc = MT_OK;

    pthread_mutex_lock(&r->tab->mu);
    snprintf(wid, sizeof(wid), "%s", r->tab->worker_id);
    pthread_mutex_unlock(&r->tab->mu);
    for (size_t off = 0; rc == MT_OK;) {
        Meshtrain__PutCheckpointChunkRequest req = MESHTRAIN__PUT_CHECKPOINT_CHUNK_REQUEST__INIT;
        ProtobufCMessage *rep = NULL;
        size_t n = size - off < CHUNK_BYTES ? size - off : CHUNK_BYTES;
        req.worker_id = wid;
        req.job_id = r->job_id;
        req.step = step;
        req.offset = off;
        req.data.data = (uint8_t *)buf + off;
        req.data.len = n;
        req.last = off + n == size;
        req.total_size = (uint64_t)size;
        req.checksum = req.last ? (char *)sum : (char *)"";
        rc = mt_rpc_client_call(r->cli, SVC, "PutCheckpointChunk", &req.base, &rep,
                                CHUNK_TIMEOUT_MS, err);
        if (rc == MT_OK)
            protobuf_c_message_free_unpacked(rep, NULL);
        if (rc == MT_ALREADY_EXISTS && off > 0)
            rc = MT_FAILED_PRECONDITION; /* only the first chunk proves the file is stored */
        off += n;
        if (req.last)
            break;
    }
    return rc;
}

/*
 * A checkpoint that a full disk (the coordinator's, or this machine's) has no room for: skip it
 * and train on; the next interval's checkpoint tries again. The metrics stream carries a
 * "checkpoint_skipped" point (value: the step) as the warning. Issue 19, fault 4.
 */
static void skip_ckpt(task_run *r, uint64_t step, const char *why)
{
    mt_log_warn("job %s: checkpoint step %llu skipped: %s (training goes on; the next "
                "checkpoint tries again)",
                r->job_id, (unsigned long long)step, why);
    if (r->has_rank0) {
        add_point(r, "checkpoint_skipped", step, r->meta_epoch > 0 ? r->meta_epoch : 0,
                  (double)step);
        worker_report_kick(r->rep);
    }
}

static mt_code upload(void *ctx, const char *path, uint64_t step, mt_err *err);

/*
 * mt_spmd_run_opts.on_saved. The trainer writes a periodic checkpoint in its after-step hook,
 * before that step's progress event, and a restart resumes after the checkpoint and never reports
 * its step again: uploaded at once, a worker killed between the upload and the event would leave
 * the step without its points for good. So a checkpoint of a step whose event has not come yet
 * waits (defer_*) and on_progress uploads it after sending the step's points; one whose event
 * came (a stop checkpoint, written after the event) goes at once.
 */
static mt_code on_saved(void *ctx, const char *path, uint64_t step, mt_err *err)
{
    task_run *r = ctx;

    if (path == NULL || !r->has_rank0 || step <= r->seen_step)
        return upload(ctx, path, step, err);
    if (r->defer_step != 0) { /* cannot happen (one checkpoint per step); keep the order */
        mt_code rc = upload(ctx, r->defer_path, r->defer_step, err);
        r->defer_step = 0;
        if (rc != MT_OK)
            return rc;
    }
    if (strlen(path) >= sizeof(r->defer_path))
        return upload(ctx, path, step, err);
    snprintf(r->defer_path, sizeof(r->defer_path), "%s", path);
    r->defer_step = step;
    return MT_OK;
}

/* Upload the deferred checkpoint, if any: OK, or its code with r->defer_err saying why. */
static mt_code upload_deferred(task_run *r)
{
    uint64_t step = r->defer_step;

    if (step == 0)
        return MT_OK;
    r->defer_step = 0;
    return upload(r, r->defer_path, step, &r->defer_err);
}

/* The best checkpoint ("validation.best"): uploaded as the checkpoint of its step, and a
 * "best_step" point (value: the step) tells `meshtrain export --best JOB` which one it is. */
static mt_code upload_best(void *ctx, const char *path, uint64_t step, mt_err *err)
{
    task_run *r = ctx;
    mt_code rc = upload(ctx, path, step, err);
    if (rc == MT_OK && r->has_rank0) {
        add_point(r, "best_step", step, r->meta_epoch > 0 ? r->meta_epoch : 0, (double)step);
        worker_report_kick(r->rep);
    }
    return rc;
}

/* Upload the checkpoint file at path as (job, step) in chunks with its CRC-32; path NULL: the
 * trainer could not write it here (err: this machine's disk is full) and skips it. */
static mt_code upload(void *ctx, const char *path, uint64_t step, mt_err *err)
{
    task_run *r = ctx;
    FILE *f = NULL;
    unsigned char *buf = NULL;
    long size;
    uLong crc = crc32(0L, Z_NULL, 0);
    char sum[32];
    double t0 = now_s(), until = t0 + CKPT_RETRY_S;
    mt_code rc = MT_OK;

    if (path == NULL) {
        skip_ckpt(r, step, err->msg);
        return MT_OK;
    }
    f = fopen(path, "rb");
    if (f == NULL)
        return mt_err_set(err, MT_NOT_FOUND, "checkpoint %s: %s", path, strerror(errno));
    /* the points up to this step go first: a restart resumes after the checkpoint and never
     * reports the steps before it again, so points still buffered here (a worker frozen or
     * killed after the upload) would leave a hole in the job's metric history. Waiting here is
     * waiting on the coordinator, as the upload itself does: both within CKPT_RETRY_S (the peers
     * wait in their next collective meanwhile) */
    worker_report_drain(r->rep, until - now_s());
    r->ckpt_step = step; /* and step's own points as soon as they exist (on_progress) */
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return mt_err_set(err, MT_INTERNAL, "checkpoint %s: cannot size it", path);
    }
    buf = mt_malloc((size_t)size + 1);
    if (buf == NULL || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        mt_free(buf);
        return mt_err_set(err, MT_INTERNAL, "checkpoint %s: cannot read it", path);
    }
    fclose(f);
    crc = crc32(crc, buf, (uInt)size);
    snprintf(sum, sizeof(sum), "crc32:%08lx", (unsigned long)crc);
    /* a coordinator restart forgets the upload (start again at 0); ALREADY_EXISTS on the first
     * chunk: the last chunk of an earlier pass was stored and only its reply was lost */
    for (;;) { /* at least one pass, however long the points took */
        rc = upload_pass(r, buf, (size_t)size, step, sum, err);
        if (rc == MT_ALREADY_EXISTS)
            rc = MT_OK;
        if (rc == MT_OK || !(transient(rc) || rc == MT_FAILED_PRECONDITION) || now_s() >= until ||
            atomic_load(&r->cancel) || atomic_load(&r->term))
            break;
        mt_log_warn("job %s: checkpoint step %llu: upload: %s: %s (retrying from offset 0)",
                    r->job_id, (unsigned long long)step, mt_code_name(rc), err->msg);
        usleep(200 * 1000);
    }
    mt_free(buf);
    worker_metrics_checkpoint(r->tab->metrics, now_s() - t0, (uint64_t)size, rc);
    if (rc == MT_OK)
        mt_log_info("job %s: checkpoint step %llu uploaded (%ld bytes)", r->job_id,
                    (unsigned long long)step, size);
    /* TEST-ONLY: MT_TEST_EXIT_AFTER_UPLOAD=N ends the process the moment checkpoint step N is
     * stored, as a kill -9 there would (test_fault_uneven_devices.sh; never set it in production)
     */
    const char *exit_at = getenv("MT_TEST_EXIT_AFTER_UPLOAD");
    if (rc == MT_OK && exit_at != NULL && strtoull(exit_at, NULL, 10) == step)
        _exit(137);
    if (rc == MT_RESOURCE_EXHAUSTED) { /* the coordinator's disk is full (its message names
                                          its host, not its paths) */
        skip_ckpt(r, step, err->msg);
        rc = MT_OK;
    }
    return rc;
}

/* Download checkpoint (r->resume_job, step) into path, once. */
static mt_code download_pass(task_run *r, uint64_t step, const char *path, mt_err *err)
{
    FILE *f = fopen(path, "wb");
    uint64_t off = 0;
    mt_code rc = MT_OK;

    if (f == NULL)
        return mt_err_set(err, MT_INTERNAL, "resume checkpoint %s: %s", path, strerror(errno));
    for (;;) {
        Meshtrain__GetCheckpointChunkRequest req = MESHTRAIN__GET_CHECKPOINT_CHUNK_REQUEST__INIT;
        Meshtrain__GetCheckpointChunkReply *rep = NULL;
        bool last;
        req.job_id = r->resume_job;
        req.step = step;
        req.offset = off;
        req.max_bytes = CHUNK_BYTES;
        rc = mt_rpc_client_call(r->cli, SVC, "GetCheckpointChunk", &req.base,
                                (ProtobufCMessage **)&rep, CHUNK_TIMEOUT_MS, err);
        if (rc != MT_OK)
            break;
        if (rep->data.len > 0 && fwrite(rep->data.data, 1, rep->data.len, f) != rep->data.len)
            rc = mt_err_set(err, MT_INTERNAL, "resume checkpoint %s: write failed", path);
        off += rep->data.len;
        last = rep->last || rep->data.len == 0;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        if (rc != MT_OK || last)
            break;
    }
    if (fclose(f) != 0 && rc == MT_OK)
        rc = mt_err_set(err, MT_INTERNAL, "resume checkpoint %s: write failed", path);
    return rc;
}

/* Download checkpoint (job, step) into path, again from offset 0 while the coordinator is
 * unreachable (restarting) for up to CKPT_RETRY_S. */
static mt_code download(task_run *r, uint64_t step, const char *path, mt_err *err)
{
    mt_code rc;

    for (double until = now_s() + CKPT_RETRY_S;;) {
        rc = download_pass(r, step, path, err);
        if (rc == MT_OK || !transient(rc) || now_s() >= until || atomic_load(&r->cancel) ||
            atomic_load(&r->term))
            return rc;
        mt_log_warn("job %s: resume checkpoint step %llu: %s: %s (retrying)", r->job_id,
                    (unsigned long long)step, mt_code_name(rc), err->msg);
        usleep(200 * 1000);
    }
}

/* ------------------------------------------------------------------ runner: training hooks */

/* The points of m's loss and metrics at p's step, named as group g reports them (Keras's names,
 * core/loss: loss, accuracy, ...; val_loss, ...; test_loss, ...; static strings). */
static void add_points(task_run *r, const mt_train_progress *p, const mt_metrics *m,
                       mt_metric_group g)
{
    add_point(r, mt_metric_report_name(g, -1), (uint64_t)p->step, p->epoch, m->loss);
    for (int k = 0; k < MT_METRIC_COUNT; k++)
        if (m->mask & (1u << k))
            add_point(r, mt_metric_report_name(g, k), (uint64_t)p->step, p->epoch, m->value[k]);
}

static mt_code on_progress(void *ctx, const mt_train_progress *p)
{
    task_run *r = ctx;
    worker_tasks *t = r->tab;
    task_rec *rec;

    pthread_mutex_lock(&t->mu);
    rec = find(t, r->job_id, r->attempt);
    if (rec != NULL && (unsigned long long)p->step > rec->step)
        rec->step = (unsigned long long)p->step;
    pthread_mutex_unlock(&t->mu);
    if (p->event == MT_TRAIN_STEP)
        worker_metrics_step(t->metrics, p->step_ms / 1e3);
    if (p->event == MT_TRAIN_STEP && (uint64_t)p->step > r->seen_step)
        r->seen_step = (uint64_t)p->step;
    if (r->has_rank0) {
        if (p->event == MT_TRAIN_STEP) {
            if (r->meta_epoch != p->epoch) {
                add_point(r, "epochs", (uint64_t)p->step, p->epoch, (double)p->epochs);
                add_point(r, "epoch_steps", (uint64_t)p->step, p->epoch, (double)p->epoch_steps);
                r->meta_epoch = p->epoch;
            }
            add_points(r, p, &p->train, MT_METRIC_GROUP_TRAIN);
            add_point(r, "batch_loss", (uint64_t)p->step, p->epoch, p->batch_loss);
            add_point(r, "examples_per_sec", (uint64_t)p->step, p->epoch, p->examples_per_sec);
            if (p->has_val) /* the validation made after this step */
                add_points(r, p, &p->val, MT_METRIC_GROUP_VAL);
        } else if (p->has_test) {
            add_points(r, p, &p->test, MT_METRIC_GROUP_TEST);
        }
        /* the reporter sends them within FLUSH_S; at once for the step of the last checkpoint
         * uploaded */
        if ((uint64_t)p->step == r->ckpt_step)
            worker_report_kick(r->rep);
        if (r->defer_step != 0 && r->defer_step <= r->seen_step) {
            mt_code rc = upload_deferred(r); /* flushes the points first (upload) */
            if (rc != MT_OK)
                return rc;
        }
    } /* the other workers' reporters send their log lines (at most every LOG_FLUSH_S) */
    if (atomic_load(&r->cancel))
        return MT_CANCELLED;
    if (atomic_load(&r->term))
        return MT_ABORTED;
    return MT_OK;
}

static bool on_stop_save(void *ctx)
{
    task_run *r = ctx;
    return atomic_load(&r->term) && r->ckpt_on_stop;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/*
 * Train (mt_spmd_train): the process index of every rank (ranks with the same data-plane address
 * live in one process) tells an input pipeline how many pipelines there are and which one is this
 * worker's; a whole data set (IDX, synthetic) is loaded by every worker and sliced per device.
 */
static mt_code run_train(task_run *r, const mt_jobspec *js, const mt_mesh *mesh,
                         const mt_spmd_run_opts *ro, mt_train_result *res, mt_err *err)
{
    int *proc = mt_calloc((size_t)r->n_ranks + 1, sizeof(int)), nproc = 0;
    mt_spmd_job job = {js->model, js->dataset, ".", mesh, js->cfg.layouts, NULL};
    mt_code rc;

    if (proc == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "job %s: out of memory", r->job_id);
    for (int i = 0; i < r->n_ranks; i++) {
        proc[i] = -1;
        for (int j = 0; j < i && proc[i] < 0; j++)
            if (strcmp(r->table[i].addr, r->table[j].addr) == 0)
                proc[i] = proc[j];
        if (proc[i] < 0)
            proc[i] = nproc++;
    }
    job.rank_process = proc;
    rc = mt_spmd_train(&job, ro, on_progress, r, res, err);
    mt_free(proc);
    return rc;
}

/*
 * A failure inside the attempt's private directory (a checkpoint its disk had no room for)
 * reaches status readers through the task's error: it names this machine and the cause, not the
 * directory (the log keeps the full message). Issue 19, fault 4.
 */
static void hide_task_dir(const task_run *r, mt_code rc, mt_err *err)
{
    char host[128] = "?";

    if (rc == MT_OK || r->td.path[0] == '\0' || strstr(err->msg, r->td.path) == NULL)
        return;
    mt_log_error("job %s attempt %u: %s: %s", r->job_id, r->attempt, mt_code_name(rc), err->msg);
    gethostname(host, sizeof(host) - 1);
    mt_err_set(err, rc, "checkpoint not written on %s: %s (the worker's log has the path)", host,
               rc == MT_RESOURCE_EXHAUSTED ? "its disk is full"
                                           : "its temporary directory cannot be written");
}

/*
 * Give the world a progress table (one slot per local device) that heartbeats report, and arm the
 * TEST-ONLY stall hook: MT_TEST_STALL_AT_STEP=N makes local device MT_TEST_STALL_DEVICE (default
 * 0) sleep MT_TEST_STALL_MS (default 8000) ms before its first collective of step N, once
 * (tests/integration/test_stall.sh; never set it in production).
 */
static mt_code attach_progress(task_run *r, mt_coll_world *world, mt_err *err)
{
    mt_coll_progress *p = NULL;
    const char *at = getenv("MT_TEST_STALL_AT_STEP");
    int nlocal = 0;
    mt_code rc;

    for (int i = 0; i < r->n_ranks; i++)
        nlocal += mt_coll_world_comm(world, i) != NULL;
    if ((rc = mt_coll_progress_new(nlocal, &p, err)) != MT_OK)
        return rc;
    if ((rc = mt_coll_world_set_progress(world, p, err)) != MT_OK) {
        mt_coll_progress_free(p);
        return rc;
    }
    if (at != NULL && at[0] != '\0') {
        const char *dev = getenv("MT_TEST_STALL_DEVICE"), *ms = getenv("MT_TEST_STALL_MS");
        int slot = dev != NULL ? atoi(dev) : 0;
        long long sleep_ms = ms != NULL ? atoll(ms) : 8000;
        if (slot >= nlocal)
            slot = nlocal - 1;
        if (mt_coll_progress_test_stall(p, slot, strtoull(at, NULL, 10), sleep_ms, NULL) == MT_OK)
            mt_log_warn("job %s: TEST HOOK armed: local slot %d sleeps %lld ms before a "
                        "collective of step %s",
                        r->job_id, slot, sleep_ms, at);
    }
    pthread_mutex_lock(&r->tab->mu);
    r->prog = p;
    pthread_mutex_unlock(&r->tab->mu);
    return MT_OK;
}

/*
 * An MPI worker's world (core/coll/mt_coll_mpi.h): every rank's address is "mpi://WORLD/RANK" of
 * this worker's MPI world (run_from checked). Blocks until every member process gets here.
 */
static mt_code mpi_world(task_run *r, const mt_coll_world_opts *wo, mt_coll_world **out,
                         mt_err *err)
{
    int *mpi_rank = mt_calloc((size_t)r->n_ranks, sizeof(int));
    char world[MT_COLL_MPI_WORLD_ID + 1];
    mt_coll_mpi_opts mo = MT_COLL_MPI_DEFAULTS;
    mt_code rc;

    if (mpi_rank == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "job %s: out of memory", r->job_id);
    for (int i = 0; i < r->n_ranks; i++)
        mt_coll_mpi_parse_addr(r->table[i].addr, world, &mpi_rank[i]);
    mo.blocking = r->tab->mpi_blocking;
    rc = mt_coll_world_new_mpi(r->n_ranks, mpi_rank, wo, &mo, out, err);
    if (rc == MT_OK)
        mt_log_info("job %s attempt %u: collectives on the MPI backend (%d ranks, %s)", r->job_id,
                    r->attempt, r->n_ranks, mo.blocking ? "blocking" : "polled to the deadline");
    mt_free(mpi_rank);
    return rc;
}

/* Everything between "running" and the final state. */
static mt_code run_task(task_run *r, mt_err *err)
{
    mt_jobspec *js = NULL;
    mt_jobspec_opts jo = MT_JOBSPEC_OPTS_DEFAULTS;
    mt_jobspec_summary sum;
    mt_coll_world_opts wo = MT_COLL_WORLD_DEFAULTS;
    mt_spmd_run_opts ro = MT_SPMD_RUN_OPTS_DEFAULTS;

    mt_mesh *mesh = NULL;
    mt_coll_world *world = NULL;
    mt_train_result res;
    char resume[600];
    const char *tmp = getenv("TMPDIR");
    mt_code rc;

    if (r->tab->net == NULL && r->tab->mpi_addr[0] == '\0')
        return mt_err_set(err, MT_FAILED_PRECONDITION,
                          "worker has no data-plane listener (see its log: --data-listen)");
    if ((rc = mt_jobspec_parse(r->spec_json, strlen(r->spec_json), &js, err)) != MT_OK ||
        (rc = mt_mesh_parse(r->mesh_text, NULL, 0, &mesh, err)) != MT_OK)
        goto done;
    r->ckpt_on_stop = js->cfg.ckpt_every > 0;
    /* a job may only read files under the worker's --data-root directories, and only regular
     * ones (a FIFO would block the reader): checked before any file is opened */
    if ((rc = mt_jobspec_check_files(js, NULL, r->tab->roots, err)) != MT_OK ||
        (r->tab->roots != NULL &&
         (rc = mt_pathsafe_check_dataset(r->tab->roots, js->dataset, ".", err)) != MT_OK))
        goto done;
    /* the checks `plan` and `train --local` run, on this attempt's mesh: the coordinator checked
     * the structure only (it never opens data files), so a data set that does not fit the model
     * fails the task here, before the data plane is set up, with the same message */
    jo.mesh = r->mesh_text;
    if ((rc = mt_jobspec_check(js, &jo, &sum, err)) != MT_OK)
        goto done;
    wo.job_id = fnv1a(r->job_id) + r->attempt;
    /* the job's "restart.collective_deadline_ms", checked at submit against the coordinator's
     * heartbeat window; a lost peer then fails the attempt and the coordinator restarts it */
    wo.default_deadline_ms =
        sum.coll_deadline_ms > 0 ? (int)sum.coll_deadline_ms : MT_JOBSPEC_COLL_DEADLINE_DEFAULT_MS;
    wo.mesh = r->mesh_text; /* ranks are mesh positions: errors name the mesh axis */
    wo.observe = worker_metrics_collective;
    wo.observe_arg = r->tab->metrics;
    /* the data plane serves one job at a time: wait for a task still ending (bounded) */
    for (int tries = 0; r->tab->mpi_addr[0] == '\0'; tries++) {
        rc = mt_coll_world_new_net(r->tab->net, r->n_ranks, r->table, &wo, &world, err);
        if (rc != MT_FAILED_PRECONDITION || tries == NET_WAIT_TRIES || atomic_load(&r->cancel))
            break;
        usleep(100 * 1000);
    }
    if (r->tab->mpi_addr[0] != '\0')
        rc = mpi_world(r, &wo, &world, err);
    if (rc != MT_OK || (rc = attach_progress(r, world, err)) != MT_OK)
        goto done;
    pthread_mutex_lock(&r->tab->mu);
    r->world = world;
    if (atomic_load(&r->cancel))
        mt_coll_world_cancel(world);
    pthread_mutex_unlock(&r->tab->mu);
    /* a fresh directory of its own (mkdtemp): a fixed name could be a directory left by a
     * killed worker whose pid this process reuses, and its newer checkpoints would make
     * keep-1 retention delete the one just written (CI saw exactly that); nor can another
     * user prepare it in a shared /tmp. Its lock tells a later worker's sweep it is in use. */
    if ((rc = worker_taskdir_create(&r->td, tmp, r->job_id, r->attempt, err)) != MT_OK)
        goto done;
    if (r->resume_step > 0) {
        snprintf(resume, sizeof(resume), "%s/resume.mtc", r->td.path);
        if ((rc = download(r, r->resume_step, resume, err)) != MT_OK)
            goto done;
        ro.resume = resume;
        /* --init-from: another job's checkpoint starts a fresh validation record */
        ro.resume_fresh_validation = strcmp(r->resume_job, r->job_id) != 0;
        mt_log_info("job %s: resuming from checkpoint step %llu of %s", r->job_id,
                    (unsigned long long)r->resume_step, r->resume_job);
    }
    ro.save_dir = r->td.path;
    ro.ckpt_every = js->cfg.ckpt_every;
    ro.ckpt_keep = 1;
    ro.spec_json = js->json;
    ro.world = world;
    ro.on_saved = on_saved;
    ro.on_best = upload_best;
    ro.save_on_stop = on_stop_save;
    ro.on_digest = on_digest;
    rc = run_train(r, js, mesh, &ro, &res, err);
    if (r->defer_err.code != MT_OK) /* the deferred upload's reason, not "training stopped" */
        mt_err_set(err, r->defer_err.code, "%s", r->defer_err.msg);
    else if (r->defer_step != 0) { /* training ended before the step's event */
        mt_code urc = upload_deferred(r);
        if (urc != MT_OK && rc == MT_OK)
            rc = mt_err_set(err, urc, "%s", r->defer_err.msg);
    }
    /* the data plane is done: close it now (with its BYE frames), not after the reports below,
     * so peers that finish later do not see this process's connections end under a live world */
    pthread_mutex_lock(&r->tab->mu);
    r->world = NULL;
    pthread_mutex_unlock(&r->tab->mu);
    mt_coll_world_free(world);
    world = NULL;
    /* the last points: keep trying while the coordinator may be restarting */
    worker_report_drain(r->rep, CKPT_RETRY_S);
    if (rc == MT_OK)
        mt_log_info("job %s: finished: %lld steps, test accuracy %.4f, %.0f examples/s", r->job_id,
                    (long long)res.steps, res.test_accuracy, res.examples_per_sec);
done:
    hide_task_dir(r, rc, err);
    pthread_mutex_lock(&r->tab->mu);
    r->world = NULL;
    pthread_mutex_unlock(&r->tab->mu);
    mt_coll_world_free(world);
    if (r->td.path[0] != '\0')
        worker_taskdir_remove(&r->td);
    mt_mesh_free(mesh);
    mt_jobspec_free(js);
    return rc;
}

static void run_free(task_run *r)
{
    for (int i = 0; r->table != NULL && i < r->n_ranks; i++)
        mt_free((char *)r->table[i].addr);
    mt_free(r->table);
    mt_free(r->spec_json);
    mt_coll_progress_free(r->prog);
    mt_free(r);
}

/* The run's reporter (report.h), sending on r->cli: rank 0's process reports every FLUSH_S at
 * most, the others send their log lines every LOG_FLUSH_S at most. */
static mt_code report_start(task_run *r, mt_err *err)
{
    worker_report_opts o = WORKER_REPORT_OPTS_DEFAULTS;

    o.period_s = r->has_rank0 ? FLUSH_S : LOG_FLUSH_S;
    o.retry_s = RETRY_S;
    o.max_points = MAX_POINTS;
    o.batch_points = REPORT_POINTS;
    o.max_digests = MAX_DIGESTS;
    o.send = report_send;
    o.more = report_more;
    o.give_up = report_give_up;
    o.ctx = r;
    o.tag = r->job_id; /* its warnings go to the job's log too */
    return worker_report_new(&o, &r->rep, err);
}

/* One last report (the final log lines) before the final state goes out. */
static void report_last(task_run *r)
{
    if (r->rep != NULL)
        worker_report_flush(r->rep, r->tab->rpc_timeout_ms / 1000.0 + 1.0);
}

static void *run_main(void *arg)
{
    task_run *r = arg;
    worker_tasks *t = r->tab;
    mt_rpc_client_opts co = MT_RPC_CLIENT_OPTS_DEFAULTS;
    mt_err err = MT_ERR_INIT;
    mt_code rc;
    task_rec *rec;

    co.url = t->coordinator;
    co.token = t->token[0] ? t->token : NULL;
    co.connect_timeout_ms = t->rpc_timeout_ms;
    co.tls = t->tls;
    mt_log_set_thread_tag(r->job_id);
    pthread_setname_np(pthread_self(), "mt-task"); /* runs the job's only device, if one */
    /* a coordinator restarting just as it assigned the task is not a lost peer: keep dialing */
    for (double until = now_s() + CKPT_RETRY_S;;) {
        rc = mt_rpc_client_open(&co, &r->cli, &err);
        if (!transient(rc) || now_s() >= until || atomic_load(&r->cancel) || atomic_load(&r->term))
            break;
        usleep(200 * 1000);
    }
    if (rc == MT_OK)
        rc = report_start(r, &err);
    if (rc == MT_OK) {
        set_state(r, "running", 0, "");
        worker_metrics_task(t->metrics, 1);
        rc = run_task(r, &err);
        worker_metrics_task(t->metrics, -1);
    }
    if ((rc == MT_UNAVAILABLE || rc == MT_DEADLINE_EXCEEDED) && !atomic_load(&r->term)) {
        /* a peer was lost: the coordinator decides (a restart cancels this attempt) once it
         * notices the lost worker; report the failure only if it does not within the wait */
        mt_log_warn("job %s attempt %u: %s; waiting for the coordinator's decision", r->job_id,
                    r->attempt, err.msg);
        for (int i = 0;
             i < PEER_LOSS_WAIT_TRIES && !atomic_load(&r->cancel) && !atomic_load(&r->term); i++)
            usleep(100 * 1000);
    }
    if (atomic_load(&r->cancel)) {
        mt_log_info("job %s attempt %u: cancelled", r->job_id, r->attempt);
        set_state(r, "cancelled", 0, "");
    } else if (atomic_load(&r->term)) {
        /* the worker leaves: the coordinator sees it lost and restarts from the checkpoint */
        mt_log_info("job %s attempt %u: stopped with the worker", r->job_id, r->attempt);
    } else if (rc == MT_OK) {
        report_last(r); /* the last lines, while the job still runs */
        set_state(r, "succeeded", 0, "");
    } else {
        char msg[300];
        snprintf(msg, sizeof(msg), "%s: %s", mt_code_name(rc), err.msg);
        mt_log_error("job %s attempt %u failed: %s", r->job_id, r->attempt, msg);
        report_last(r); /* the last lines, while the job still runs */
        set_state(r, "failed", 0, msg);
    }
    worker_report_free(r->rep); /* before the client it sends on */
    r->rep = NULL;
    log_register(r, false);
    mt_log_set_thread_tag(NULL);
    mt_rpc_client_close(r->cli);
    pthread_mutex_lock(&t->mu);
    rec = find(t, r->job_id, r->attempt);
    if (rec != NULL && rec->run == r)
        rec->run = NULL;
    t->live--;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    run_free(r);
    return NULL;
}

/*
 * 1 with msg set when the job's members do not share this worker's data plane: an MPI worker
 * needs every member to be an MPI worker of its MPI world (mpi://WORLD/RANK), a worker on the
 * direct transport needs none to be one. The message names the workers that differ.
 */
static int mixed_planes(const worker_tasks *t, const Meshtrain__TaskAssignment *a, char *msg,
                        size_t cap)
{
    char mine[MT_COLL_MPI_WORLD_ID + 1] = "", world[MT_COLL_MPI_WORLD_ID + 1], who[120] = "";
    int mpi = t->mpi_addr[0] != '\0', rank, nbad = 0;
    size_t at = 0;

    if (mpi)
        mt_coll_mpi_parse_addr(t->mpi_addr, mine, &rank);
    for (size_t i = 0; i < a->n_ranks; i++) {
        const Meshtrain__RankAddress *ra = a->ranks[i];
        int is_mpi = mt_coll_mpi_parse_addr(ra->data_address, world, &rank);
        if (mpi ? is_mpi && strcmp(world, mine) == 0 : !is_mpi)
            continue;
        if (nbad++ < 4 && at < sizeof(who)) {
            int n = snprintf(who + at, sizeof(who) - at, "%s%s (rank %u)", at ? ", " : "",
                             ra->worker_id, ra->rank);
            at += n > 0 ? (size_t)n : 0;
        }
    }
    if (nbad == 0)
        return 0;
    if (mpi)
        snprintf(msg, cap,
                 "job mixes data planes: %d member(s) are not MPI workers of this worker's MPI "
                 "world %s: %s%s (start every member in one mpirun/srun with --data-plane mpi)",
                 nbad, mine, who, nbad > 4 ? ", ..." : "");
    else
        snprintf(msg, cap,
                 "job mixes data planes: %d member(s) are MPI workers (--data-plane mpi), this "
                 "worker is not: %s%s",
                 nbad, who, nbad > 4 ? ", ..." : "");
    return 1;
}

/* A task_run from the assignment, or NULL with msg set. */
static task_run *run_from(worker_tasks *t, const Meshtrain__TaskAssignment *a, char *msg,
                          size_t cap)
{
    task_run *r = mt_calloc(1, sizeof(*r));
    size_t at = 0;
    const char *mine = t->mpi_addr[0] != '\0' ? t->mpi_addr
                       : t->net != NULL       ? mt_coll_net_addr(t->net)
                                              : "";

    if (r != NULL)
        r->td.lock_fd = -1;
    if (r == NULL) {
        snprintf(msg, cap, "out of memory");
        return NULL;
    }
    r->tab = t;
    snprintf(r->job_id, sizeof(r->job_id), "%s", a->job_id);
    r->attempt = a->attempt;
    r->resume_step = a->resume_step;
    snprintf(r->resume_job, sizeof(r->resume_job), "%s",
             a->resume_job != NULL && a->resume_job[0] ? a->resume_job : a->job_id);
    r->meta_epoch = -1;
    r->spec_json = mt_calloc(1, strlen(a->spec_json) + 1);
    r->n_ranks = (int)a->n_ranks;
    r->table = mt_calloc(a->n_ranks + 1, sizeof(*r->table));
    if (r->spec_json == NULL || r->table == NULL) {
        snprintf(msg, cap, "out of memory");
        goto fail;
    }
    memcpy(r->spec_json, a->spec_json, strlen(a->spec_json) + 1);
    for (size_t d = 0; d < a->n_mesh; d++) {
        int n = snprintf(r->mesh_text + at, sizeof(r->mesh_text) - at, "%s%s=%u", d ? "," : "",
                         a->mesh[d]->name, a->mesh[d]->size);
        if (n < 0 || (size_t)n >= sizeof(r->mesh_text) - at) {
            snprintf(msg, cap, "mesh: too many dimensions");
            goto fail;
        }
        at += (size_t)n;
    }
    if (a->n_mesh == 0)
        snprintf(r->mesh_text, sizeof(r->mesh_text), "batch=%zu", a->n_ranks);
    for (size_t i = 0; i < a->n_ranks; i++) {
        const Meshtrain__RankAddress *ra = a->ranks[i];
        char *s;
        if (ra->rank >= a->n_ranks || r->table[ra->rank].addr != NULL) {
            snprintf(msg, cap, "rank table: rank %u out of range or repeated", ra->rank);
            goto fail;
        }
        if (ra->data_address == NULL || ra->data_address[0] == '\0') {
            snprintf(msg, cap,
                     "rank %u: worker %s has no data-plane address (start it with --data-listen)",
                     ra->rank, ra->worker_id);
            goto fail;
        }
        s = mt_calloc(1, strlen(ra->data_address) + 1);
        if (s == NULL) {
            snprintf(msg, cap, "out of memory");
            goto fail;
        }
        memcpy(s, ra->data_address, strlen(ra->data_address) + 1);
        r->table[ra->rank].addr = s;
        r->table[ra->rank].local_index = (int)ra->local_index;
    }
    for (size_t i = 0; i < a->n_ranks; i++)
        if (r->table[i].addr == NULL) {
            snprintf(msg, cap, "rank table: rank %zu missing", i);
            goto fail;
        }
    if (mixed_planes(t, a, msg, cap))
        goto fail;
    r->has_rank0 = a->n_ranks > 0 && strcmp(r->table[0].addr, mine) == 0;
    return r;
fail:
    run_free(r);
    return NULL;
}

void worker_on_assignment(worker_tasks *t, const Meshtrain__TaskAssignment *a)
{
    task_rec *rec;
    task_run *r;
    char msg[256] = "";
    pthread_t th;
    pthread_attr_t attr;

    pthread_mutex_lock(&t->mu);
    if (find(t, a->job_id, a->attempt) != NULL || t->n == MAX_TASKS) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    rec = &t->t[t->n++];
    memset(rec, 0, sizeof(*rec));
    snprintf(rec->job_id, sizeof(rec->job_id), "%s", a->job_id);
    rec->attempt = a->attempt;
    snprintf(rec->state, sizeof(rec->state), "running");
    r = run_from(t, a, msg, sizeof(msg));
    if (r != NULL) {
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        log_register(r, true); /* the runner thread unregisters it */
        if (pthread_create(&th, &attr, run_main, r) == 0) {
            rec->run = r;
            t->live++;
        } else {
            snprintf(msg, sizeof(msg), "cannot start the task thread");
            log_register(r, false);
            run_free(r);
            r = NULL;
        }
        pthread_attr_destroy(&attr);
    }
    if (r == NULL) {
        snprintf(rec->state, sizeof(rec->state), "failed");
        snprintf(rec->error, sizeof(rec->error), "%s", msg);
    }
    pthread_mutex_unlock(&t->mu);
    mt_log_set_thread_tag(a->job_id); /* the line goes to the job's log too */
    if (r == NULL)
        mt_log_error("job %s attempt %u: %s", a->job_id, a->attempt, msg);
    else
        mt_log_info("job %s attempt %u: starting with %zu of %zu devices here (resume step %llu)",
                    a->job_id, a->attempt, a->n_devices, a->n_ranks,
                    (unsigned long long)a->resume_step);
    mt_log_set_thread_tag(NULL);
}

void worker_on_cancel(worker_tasks *t, const Meshtrain__TaskCancel *x)
{
    task_rec *r;

    pthread_mutex_lock(&t->mu);
    r = find(t, x->job_id, x->attempt);
    if (r != NULL && r->run != NULL) {
        atomic_store(&r->run->cancel, 1);
        /* a device blocked in a collective (a peer behind a dead link) stops now, not at the
         * collective's deadline, and frees the data plane for the job's next attempt */
        mt_coll_world_cancel(r->run->world);
    } else if (r != NULL && strcmp(r->state, "running") == 0)
        snprintf(r->state, sizeof(r->state), "cancelled");
    pthread_mutex_unlock(&t->mu);
    mt_log_info("job %s attempt %u: cancelled by the coordinator (%s)", x->job_id, x->attempt,
                x->reason);
}

void worker_tasks_stop(worker_tasks *t)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n; i++)
        if (t->t[i].run != NULL)
            atomic_store(&t->t[i].run->term, 1);
    while (t->live > 0)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

/* One device's progress in a heartbeat snapshot (kept inside the TaskStatus allocation). */
typedef struct snap_dev {
    Meshtrain__DeviceProgress msg;
    mt_coll_progress_rec rec; /* owns the axis and activity text */
} snap_dev;

/* Bytes snap_devices needs after the TaskStatus strings for nd devices. */
#define SNAP_DEV_BYTES(nd) ((nd) * (sizeof(Meshtrain__DeviceProgress *) + sizeof(snap_dev)))

/* Read r's nd progress records into mem (SNAP_DEV_BYTES(nd), pointer-aligned) and point
 * m->devices at them (t->mu held). */
static void snap_devices(const task_run *r, mt_coll_progress *prog, void *mem, size_t nd,
                         Meshtrain__TaskStatus *m)
{
    Meshtrain__DeviceProgress **ptrs = mem;
    snap_dev *d = (snap_dev *)(void *)(ptrs + nd);
    size_t k = 0;

    m->devices = ptrs;
    for (size_t i = 0; i < nd; i++) {
        mt_coll_progress_rec *x = &d[k].rec;
        Meshtrain__DeviceProgress *p = &d[k].msg;
        mt_coll_progress_read(prog, (int)i, x);
        if (x->rank < 0 || x->rank >= r->n_ranks)
            continue;
        ptrs[k] = p;
        meshtrain__device_progress__init(p);
        p->rank = (uint32_t)x->rank;
        p->local_index = (uint32_t)r->table[x->rank].local_index;
        p->step = x->step;
        p->seq = x->seq;
        p->op = (char *)x->op;
        p->axis = x->axis;
        p->state = (char *)mt_coll_pstate_name(x->state);
        p->chunk = x->chunk;
        p->chunks = x->chunks;
        p->state_age_ms = x->state_age_ms;
        p->activity = x->activity;
        p->activity_age_ms = x->activity_age_ms;
        p->ticks = x->ticks;
        k++;
    }
    m->n_devices = k;
}

void worker_tasks_snapshot(worker_tasks *t, Meshtrain__TaskStatus ***out, size_t *n)
{
    Meshtrain__TaskStatus **s;

    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&t->mu);
    if (t->n == 0 || (s = mt_calloc(t->n, sizeof(*s))) == NULL) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        /* one allocation: the message, its strings, then its device progress records */
        mt_coll_progress *prog = t->t[i].run != NULL ? t->t[i].run->prog : NULL;
        size_t nd = prog != NULL ? (size_t)mt_coll_progress_slots(prog) : 0;
        Meshtrain__TaskStatus *m = mt_calloc(1, sizeof(*m) + 32 + 16 + 256 + SNAP_DEV_BYTES(nd));
        if (m == NULL)
            break;
        meshtrain__task_status__init(m);
        m->job_id = (char *)(m + 1);
        m->state = m->job_id + 32;
        m->error = m->state + 16;
        memcpy(m->job_id, t->t[i].job_id, 32);
        memcpy(m->state, t->t[i].state, 16);
        memcpy(m->error, t->t[i].error, 256);
        m->attempt = t->t[i].attempt;
        m->step = t->t[i].step;
        if (nd > 0)
            snap_devices(t->t[i].run, prog, m->error + 256, nd, m);
        s[(*n)++] = m;
    }
    pthread_mutex_unlock(&t->mu);
    *out = s;
}

void worker_tasks_snapshot_free(Meshtrain__TaskStatus **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        mt_free(s[i]);
    mt_free(s);
}

void worker_tasks_reported(worker_tasks *t, Meshtrain__TaskStatus *const *s, size_t n)
{
    pthread_mutex_lock(&t->mu);
    for (size_t k = 0; k < n; k++) {
        task_rec *r = find(t, s[k]->job_id, s[k]->attempt);
        if (r == NULL || r->run != NULL || strcmp(s[k]->state, "running") == 0 ||
            strcmp(r->state, s[k]->state) != 0)
            continue;
        *r = t->t[--t->n]; /* final, seen by the coordinator, thread gone: forget it */
    }
    pthread_mutex_unlock(&t->mu);
}
