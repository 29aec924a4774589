/* SPDX-License-Identifier: MIT */
/*
 * test_coord_state.c — the coordinator's domain core (coordinator/state.c, schedpass.c) driven
 * directly, with no RPC: a coordinator is opened on a temp state dir (a real SQLite file) but its
 * loop never runs, so this thread is the loop thread; jobs go into the store and the table as
 * SubmitJob would put them, and the core's functions are called as the adapters call them.
 * Covers the typed state name tables, transitions (store first, the diagnosis kept or cleared,
 * the hooks told of RESTARTING and the end, a final state removing the job), the restart rule,
 * the workers of a job as the scheduling core sees them, a lost worker's jobs restarting, the
 * sweep going on past a job it removed, the scheduler pass (priority then submission order,
 * gang placement stored in one transaction, the checkpoint check before a resume through
 * hooks.verify) and the reload of placed jobs at open.
 */
#include "mt_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "coordinator/coord_int.h"

/* A spec the coordinator accepts (a reload validates the stored spec again). */
#define SPEC                                                                                       \
    "{\"steps\": 10, \"model\": {\"input_shape\": [4], \"layers\": [{\"type\": \"dense\", "        \
    "\"units\": 2}]}}"

typedef struct tctx {
    char dir[64];
    mt_coord *c;
    int flushes;       /* hooks.flush calls */
    char moved[4][64]; /* hooks.moved: "job state error" */
    int n_moved;
    coord_worker w[2];                  /* a registry the test installs (register_two) */
    mt_store_device dev[2][4];          /* ... and their devices (register_devices) */
    char verify_job[32];                /* hooks.verify: the job it was asked about ("" none) */
    coord_ckpt_verified_fn verify_done; /* ... and the answer it owes (the test gives it) */
} tctx;

static tctx *the; /* the hooks find their test through it (one test at a time) */

static void on_flush(mt_coord *c)
{
    (void)c;
    the->flushes++;
}

static void on_moved(mt_coord *c, const char *job_id, const char *state, const char *error)
{
    (void)c;
    if (the->n_moved < 4)
        snprintf(the->moved[the->n_moved++], sizeof(the->moved[0]), "%s %s %.20s", job_id, state,
                 error);
}

/* The checkpoint check, as ckpt.c's would start it: the answer comes later (the test calls
 * verify_done, as the loop would after the pool read the files). */
static mt_code on_verify(mt_coord *c, const char *job_id, coord_ckpt_verified_fn done, mt_err *err)
{
    (void)c;
    (void)err;
    snprintf(the->verify_job, sizeof(the->verify_job), "%s", job_id);
    the->verify_done = done;
    return MT_OK;
}

static int setup(void **state)
{
    tctx *t = calloc(1, sizeof(*t));
    mt_coord_opts o = MT_COORD_OPTS_DEFAULTS;
    mt_err err = MT_ERR_INIT;

    snprintf(t->dir, sizeof(t->dir), "/tmp/mt-coordstate.XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    o.listen = "tcp://127.0.0.1:0";
    o.http = "";
    o.state_dir = t->dir;
    o.heartbeat_interval_ms = 200;
    o.sync_full = 0;
    if (mt_coord_open(&o, &t->c, &err) != MT_OK)
        fail_msg("open: %s", err.msg);
    t->c->hooks.flush = on_flush;
    t->c->hooks.moved = on_moved;
    t->c->hooks.verify = on_verify;
    the = t;
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    tctx *t = *state;
    char cmd[128];

    if (t->c->workers == t->w) { /* the test's registry, also after a failed assertion */
        t->c->workers = NULL;
        t->c->n_workers = 0;
    }
    mt_coord_free(t->c);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    if (system(cmd) != 0)
        print_error("could not remove %s\n", t->dir);
    free(t);
    return 0;
}

/* A QUEUED job in the store and the table, as SubmitJob leaves it; max_restarts as given. */
static coord_job *add_job(tctx *t, uint32_t max_restarts)
{
    coord_job *j = mt_calloc(1, sizeof(*j));
    mt_store_job rec;
    mt_err err = MT_ERR_INIT;

    assert_non_null(j);
    memset(&rec, 0, sizeof(rec));
    rec.spec_json = (char *)SPEC; /* valid: a reload validates it again */
    snprintf(rec.mesh, sizeof(rec.mesh), "batch=1");
    rec.devices = 1;
    assert_int_equal(mt_store_job_insert(t->c->store, &rec, 1, &err), MT_OK);
    snprintf(j->job_id, sizeof(j->job_id), "%s", rec.job_id);
    j->state = MT_JOBSTATE_QUEUED;
    j->sum.max_restarts = max_restarts;
    j->sum.n_devices = 1;
    assert_int_equal(coord_job_add(t->c, j), MT_OK);
    return j;
}

static void stored(tctx *t, const char *job, char *state, char *diagnosis)
{
    mt_store_job rec;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_job_get(t->c->store, job, &rec, &err), MT_OK);
    snprintf(state, 16, "%s", rec.state);
    snprintf(diagnosis, 256, "%s", rec.diagnosis);
    mt_store_job_fini(&rec);
}

static void test_coord_state_name_tables_round_trip(void **state)
{
    coord_task_state ts = COORD_TASK_FAILED;
    coord_worker_state ws = COORD_WORKER_LOST;
    (void)state;

    for (int s = COORD_TASK_ASSIGNED; s <= COORD_TASK_CANCELLED; s++) {
        assert_true(coord_task_state_parse(coord_task_state_name((coord_task_state)s), &ts));
        assert_int_equal(ts, s);
    }
    assert_string_equal(coord_task_state_name(COORD_TASK_RUNNING), "running");
    assert_false(coord_task_state_parse("runing", &ts));
    assert_int_equal(ts, COORD_TASK_CANCELLED); /* untouched */
    assert_string_equal(coord_task_state_name((coord_task_state)99), "?");
    assert_true(coord_worker_state_parse("alive", &ws));
    assert_int_equal(ws, COORD_WORKER_ALIVE);
    assert_false(coord_worker_state_parse("dead", &ws));
    assert_string_equal(coord_worker_state_name(COORD_WORKER_LOST), "lost");
    assert_true(coord_jobstate_placed(MT_JOBSTATE_STALLED));
    assert_false(coord_jobstate_placed(MT_JOBSTATE_RESTARTING));
}

/* Transitions write the store first; the diagnosis survives STALLED/RESTARTING/SCHEDULED and is
 * cleared by RUNNING; RESTARTING and the end reach the hooks; the end flushes first and removes
 * the job from the table. */
static void test_coord_state_transitions_diagnosis_and_hooks(void **state)
{
    tctx *t = *state;
    coord_job *j = add_job(t, 3);
    char id[32], st[16], diag[256];

    snprintf(id, sizeof(id), "%s", j->job_id);
    assert_ptr_equal(coord_job_find(t->c, id), j);
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_SCHEDULED, "placed"), MT_OK);
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_RUNNING, "started"), MT_OK);
    coord_job_diagnose(t->c, j, "link wa<->wb: x");
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_STALLED, "stuck"), MT_OK);
    stored(t, id, st, diag);
    assert_string_equal(st, "STALLED");
    assert_string_equal(diag, "link wa<->wb: x");
    assert_string_equal(j->diagnosis, "link wa<->wb: x");
    /* a transition the store refuses changes nothing */
    assert_int_not_equal(coord_job_move(t->c, j, MT_JOBSTATE_QUEUED, "back"), MT_OK);
    assert_int_equal(j->state, MT_JOBSTATE_STALLED);
    coord_job_restart(t->c, j, "link wa<->wb broken");
    assert_int_equal(j->state, MT_JOBSTATE_RESTARTING);
    assert_int_equal(j->restarts, 1);
    assert_int_equal(t->n_moved, 1);
    assert_string_equal(t->moved[0], "job-000001 RESTARTING link wa<->wb broken");
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_SCHEDULED, "placed again"), MT_OK);
    assert_string_equal(j->diagnosis, "link wa<->wb: x");
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_RUNNING, "started"), MT_OK);
    stored(t, id, st, diag);
    assert_string_equal(diag, "");
    assert_string_equal(j->diagnosis, "");
    assert_int_equal(coord_job_set_step(t->c, j, 7), MT_OK);
    assert_int_equal(t->flushes, 0);
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_SUCCEEDED, "done"), MT_OK);
    assert_int_equal(t->flushes, 1);
    assert_int_equal(t->n_moved, 2);
    assert_string_equal(t->moved[1], "job-000001 SUCCEEDED ");
    assert_null(coord_job_find(t->c, id));
    assert_int_equal(t->c->n_jobs, 0);
    stored(t, id, st, diag);
    assert_string_equal(st, "SUCCEEDED");
}

/* Past restart.max_restarts a restart is FAILED with the limit in its reason. */
static void test_coord_state_restart_limit(void **state)
{
    tctx *t = *state;
    coord_job *j = add_job(t, 1);
    char id[32], st[16], diag[256];
    mt_store_job rec;
    mt_err err = MT_ERR_INIT;

    snprintf(id, sizeof(id), "%s", j->job_id);
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_SCHEDULED, "placed"), MT_OK);
    coord_job_restart(t->c, j, "worker w1 lost");
    assert_int_equal(j->state, MT_JOBSTATE_RESTARTING);
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_SCHEDULED, "placed"), MT_OK);
    coord_job_restart(t->c, j, "worker w1 lost again");
    assert_null(coord_job_find(t->c, id));
    stored(t, id, st, diag);
    assert_string_equal(st, "FAILED");
    assert_int_equal(mt_store_job_get(t->c->store, id, &rec, &err), MT_OK);
    assert_string_equal(rec.error, "worker w1 lost again; restart limit of 1 reached");
    mt_store_job_fini(&rec);
}

/* Two workers, wa and wb, in the registry (t->w; teardown takes them out again). */
static coord_worker *register_two(tctx *t)
{
    coord_worker *w = t->w;

    memset(w, 0, 2 * sizeof(*w));
    snprintf(w[0].rec.worker_id, sizeof(w[0].rec.worker_id), "wa");
    snprintf(w[1].rec.worker_id, sizeof(w[1].rec.worker_id), "wb");
    snprintf(w[1].rec.instance_id, sizeof(w[1].rec.instance_id), "i-b");
    coord_worker_set_state(&w[0], COORD_WORKER_ALIVE);
    coord_worker_set_state(&w[1], COORD_WORKER_ALIVE);
    t->c->workers = w;
    t->c->n_workers = 2;
    return w;
}

/* Tasks on the workers named (a placed job has one per worker of its placement). */
static void give_tasks(coord_job *j, const char *a, const char *b)
{
    j->tasks = mt_calloc(2, sizeof(*j->tasks));
    assert_non_null(j->tasks);
    j->n_tasks = b != NULL ? 2 : 1;
    snprintf(j->tasks[0].worker_id, sizeof(j->tasks[0].worker_id), "%s", a);
    if (b != NULL)
        snprintf(j->tasks[1].worker_id, sizeof(j->tasks[1].worker_id), "%s", b);
}

/* The scheduling core's view of a job's workers: those the registry knows, with their state,
 * last heartbeat and process instance. */
static void test_coord_state_job_worker_views(void **state)
{
    tctx *t = *state;
    coord_job *j = add_job(t, 3);
    coord_sched_worker v[3];
    coord_worker *w = register_two(t);

    w[1].last_seen_mono_ms = 1234;
    give_tasks(j, "wb", "wc"); /* wc: not registered */
    assert_ptr_equal(coord_worker_find(t->c, "wb"), &w[1]);
    assert_null(coord_worker_find(t->c, "wc"));
    assert_ptr_equal(coord_job_task(j, "wc"), &j->tasks[1]);
    assert_null(coord_job_task(j, "wa"));
    assert_int_equal(coord_job_worker_views(t->c, j, v), 1);
    assert_string_equal(v[0].id, "wb");
    assert_string_equal(v[0].instance, "i-b");
    assert_int_equal(v[0].state, COORD_WORKER_ALIVE);
    assert_int_equal(v[0].last_seen_ms, 1234);
}

/* A worker's tasks die with it: every placed job with a task there restarts ("worker W why"),
 * FAILED at the limit; a job not placed, or placed elsewhere, is left alone. */
static void test_coord_state_lost_worker_restarts_its_jobs(void **state)
{
    tctx *t = *state;
    coord_job *last = add_job(t, 0), *on_b = add_job(t, 3), *on_a = add_job(t, 3);
    coord_job *queued = add_job(t, 3);
    char id_last[32], st[16], diag[256];
    coord_worker *w = register_two(t);

    snprintf(id_last, sizeof(id_last), "%s", last->job_id);
    assert_int_equal(coord_job_move(t->c, last, MT_JOBSTATE_SCHEDULED, "placed"), MT_OK);
    assert_int_equal(coord_job_move(t->c, last, MT_JOBSTATE_RUNNING, "started"), MT_OK);
    assert_int_equal(coord_job_move(t->c, on_b, MT_JOBSTATE_SCHEDULED, "placed"), MT_OK);
    assert_int_equal(coord_job_move(t->c, on_a, MT_JOBSTATE_SCHEDULED, "placed"), MT_OK);
    give_tasks(last, "wb", NULL);
    give_tasks(on_b, "wa", "wb");
    give_tasks(on_a, "wa", NULL);
    t->c->sched_dirty = 0;

    coord_worker_lose(t->c, w[1].rec.worker_id, "restarted (its tasks are gone)");
    assert_null(coord_job_find(t->c, id_last)); /* no restarts left: FAILED, removed */
    stored(t, id_last, st, diag);
    assert_string_equal(st, "FAILED");
    /* the job behind the removed one is not skipped */
    assert_int_equal(on_b->state, MT_JOBSTATE_RESTARTING);
    assert_string_equal(on_b->reason, "worker wb restarted (its tasks are gone)");
    assert_int_equal(on_b->n_tasks, 0); /* released */
    assert_int_equal(on_a->state, MT_JOBSTATE_SCHEDULED);
    assert_int_equal(queued->state, MT_JOBSTATE_QUEUED);
    assert_int_equal(t->c->n_jobs, 3);
    assert_true(t->c->sched_dirty);
}

/* A STALLED job on worker wa whose one device waits in an allreduce (the stall rule's input). */
static void stall_on_wa(tctx *t, coord_job *j)
{
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_SCHEDULED, "placed"), MT_OK);
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_RUNNING, "started"), MT_OK);
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_STALLED, "no progress"), MT_OK);
    give_tasks(j, "wa", NULL);
    j->devs = mt_calloc(1, sizeof(*j->devs));
    assert_non_null(j->devs);
    j->n_place = 1;
    j->devs[0].known = 1;
    snprintf(j->devs[0].worker_id, sizeof(j->devs[0].worker_id), "wa");
    snprintf(j->devs[0].op, sizeof(j->devs[0].op), "allreduce");
    snprintf(j->devs[0].state, sizeof(j->devs[0].state), "waiting");
}

/* The sweep's stall rule restarts every job stalled past --stall-restart-ms inside a collective:
 * one at its restart limit is FAILED and removed, and the job behind it is still swept. */
static void test_coord_state_sweep_after_a_removed_job(void **state)
{
    tctx *t = *state;
    coord_job *last = add_job(t, 0), *next = add_job(t, 3);
    char id_last[32], st[16], diag[256];
    coord_worker *w = register_two(t);
    int64_t now = mt_clock_mono_ms();

    snprintf(id_last, sizeof(id_last), "%s", last->job_id);
    stall_on_wa(t, last);
    stall_on_wa(t, next);
    w[0].last_seen_mono_ms = w[1].last_seen_mono_ms = now; /* both heartbeat */
    t->c->opts.stall_timeout_ms = 1000;
    t->c->opts.stall_restart_ms = 1000;
    coord_sweep(t->c); /* first look: the devices' signature is taken, nothing moves */
    assert_int_equal(last->state, MT_JOBSTATE_STALLED);
    assert_int_equal(next->state, MT_JOBSTATE_STALLED);
    last->prog_mono_ms = next->prog_mono_ms = now - 60000; /* no progress for a minute */

    coord_sweep(t->c);
    assert_null(coord_job_find(t->c, id_last)); /* no restarts left: FAILED, removed */
    stored(t, id_last, st, diag);
    assert_string_equal(st, "FAILED");
    assert_int_equal(next->state, MT_JOBSTATE_RESTARTING); /* not skipped */
    assert_int_equal(t->c->n_jobs, 1);
}

/* ------------------------------------------------------------------ the scheduler pass */

/* register_two's workers with na and nb healthy devices (at most 4 each). */
static coord_worker *register_devices(tctx *t, size_t na, size_t nb)
{
    coord_worker *w = register_two(t);
    size_t n[2] = {na, nb};

    for (size_t k = 0; k < 2; k++) {
        for (size_t d = 0; d < n[k]; d++) {
            memset(&t->dev[k][d], 0, sizeof(t->dev[k][d]));
            t->dev[k][d].index = (uint32_t)d;
            snprintf(t->dev[k][d].health, sizeof(t->dev[k][d].health), "ok");
        }
        w[k].rec.devices = t->dev[k];
        w[k].rec.n_devices = n[k];
        w[k].last_seen_mono_ms = mt_clock_mono_ms();
    }
    return w;
}

/* A QUEUED job (add_job) with priority and a mesh batch=devices, in submission order. */
static coord_job *add_mesh_job(tctx *t, int32_t priority, int devices)
{
    coord_job *j = add_job(t, 3);

    j->priority = priority;
    j->seq = strtoull(j->job_id + 4, NULL, 10);
    j->sum.n_devices = devices;
    j->sum.mesh_ndims = 1;
    j->sum.mesh_sizes[0] = devices;
    snprintf(j->sum.mesh_names[0], sizeof(j->sum.mesh_names[0]), "batch");
    return j;
}

/* The job's stored reason and placement's workers ("wa,wa" by device; "" none). */
static void stored_place(tctx *t, const char *job, char *reason, char *workers)
{
    mt_store_job rec;
    mt_store_placement *p = NULL;
    size_t n = 0, len = 0;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_store_job_get(t->c->store, job, &rec, &err), MT_OK);
    snprintf(reason, 256, "%s", rec.reason);
    mt_store_job_fini(&rec);
    assert_int_equal(mt_store_job_placement(t->c->store, job, &p, &n, &err), MT_OK);
    workers[0] = '\0';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(workers + len, 64 - len, "%s%s", i ? "," : "", p[i].worker_id);
    mt_store_placement_free(p);
}

/* Priority first, then submission order, and gang placement (every device at once, or the job
 * waits and blocks the jobs behind it): with wa holding 2 devices and wb 1, the later job of
 * priority 5 takes wa whole; the earlier 2-device job cannot have wb's single device alone and
 * waits; the 1-device job behind it waits its turn although wb is free. Each decision is stored
 * (placement + SCHEDULED in one transaction, or the reason) and the placed job's task waits for
 * its worker's report (ASSIGNED, attempt 1). A pass taking submission order before priority, or
 * placing part of a job, fails here. */
static void test_coord_state_pass_priority_order_and_gang(void **state)
{
    tctx *t = *state;
    coord_job *first = add_mesh_job(t, 0, 2), *urgent = add_mesh_job(t, 5, 2);
    coord_job *small = add_mesh_job(t, 0, 1);
    char id_first[32], id_urgent[32], id_small[32], st[16], diag[256], reason[256], where[64];
    char want[128];

    register_devices(t, 2, 1);
    snprintf(id_first, sizeof(id_first), "%s", first->job_id);
    snprintf(id_urgent, sizeof(id_urgent), "%s", urgent->job_id);
    snprintf(id_small, sizeof(id_small), "%s", small->job_id);
    t->c->sched_dirty = 1;
    coord_schedpass_run(t->c);
    assert_false(t->c->sched_dirty);

    assert_int_equal(urgent->state, MT_JOBSTATE_SCHEDULED);
    assert_int_equal(urgent->attempt, 1);
    assert_int_equal(urgent->n_place, 2);
    assert_int_equal(urgent->n_tasks, 1);
    assert_string_equal(urgent->tasks[0].worker_id, "wa");
    assert_int_equal(urgent->tasks[0].state, COORD_TASK_ASSIGNED);
    stored(t, id_urgent, st, diag);
    assert_string_equal(st, "SCHEDULED");
    stored_place(t, id_urgent, reason, where);
    assert_string_equal(where, "wa,wa");
    assert_string_equal(reason, "placed on 1 worker (attempt 1)");

    assert_int_equal(first->state, MT_JOBSTATE_QUEUED);
    assert_int_equal(first->n_place, 0);
    stored_place(t, id_first, reason, where);
    assert_string_equal(where, ""); /* not one device of it */
    assert_string_equal(reason, "waiting for 2 free devices (1 free of 3)");

    assert_int_equal(small->state, MT_JOBSTATE_QUEUED);
    stored_place(t, id_small, reason, where);
    assert_string_equal(where, "");
    snprintf(want, sizeof(want), "waiting behind %s (priority, then submission order)", id_first);
    assert_string_equal(reason, want);
    assert_int_equal(t->n_moved, 0); /* a first placement is no restart marker */

    /* nothing changed: the pass does not run again */
    coord_schedpass_run(t->c);
    assert_int_equal(small->state, MT_JOBSTATE_QUEUED);
}

/* A restarted job with a checkpoint resumes only after its checkpoint files were read back: the
 * pass asks through hooks.verify and the job keeps its turn; the answer (the newest file did not
 * verify, an older one did) makes the next pass place it from that older step, say which was
 * skipped, and tell the metrics stream (hooks.moved) for the watchers' restart marker. */
static void test_coord_state_pass_verifies_checkpoints_before_resuming(void **state)
{
    tctx *t = *state;
    coord_job *j = add_mesh_job(t, 0, 1);
    mt_store_checkpoint ck;
    char id[32], reason[256], where[64];
    mt_err err = MT_ERR_INIT;

    register_devices(t, 1, 0);
    snprintf(id, sizeof(id), "%s", j->job_id);
    memset(&ck, 0, sizeof(ck));
    snprintf(ck.location, sizeof(ck.location), "%s/ck-20", t->dir);
    snprintf(ck.checksum, sizeof(ck.checksum), "crc32:00000000");
    ck.step = 20;
    assert_int_equal(mt_store_checkpoint_insert(t->c->store, id, &ck, &err), MT_OK);
    assert_int_equal(
        mt_store_checkpoint_complete(t->c->store, id, 20, 0, "crc32:00000000", 2, &err), MT_OK);
    assert_int_equal(coord_job_move(t->c, j, MT_JOBSTATE_SCHEDULED, "placed"), MT_OK);
    coord_job_restart(t->c, j, "worker wa lost (no heartbeat)");
    assert_int_equal(j->state, MT_JOBSTATE_RESTARTING);
    assert_int_equal(t->n_moved, 1);

    coord_schedpass_run(t->c);
    assert_string_equal(t->verify_job, id);
    assert_int_equal(j->state, MT_JOBSTATE_RESTARTING); /* waits for the answer */
    stored_place(t, id, reason, where);
    assert_string_equal(reason, "checking checkpoint step 20 before resuming");
    coord_schedpass_run(t->c); /* nothing new: still waiting */
    assert_int_equal(j->state, MT_JOBSTATE_RESTARTING);

    t->verify_done(t->c, id, 10, "checkpoint step 20 skipped: its file is missing or unreadable");
    assert_true(t->c->sched_dirty);
    coord_schedpass_run(t->c);
    assert_int_equal(j->state, MT_JOBSTATE_SCHEDULED);
    assert_int_equal(j->attempt, 2);
    assert_int_equal(j->resume_step, 10);
    stored_place(t, id, reason, where);
    assert_string_equal(where, "wa");
    assert_string_equal(reason, "placed on 1 worker (attempt 2, resuming from a checkpoint at "
                                "step 10); checkpoint step 20 skipped: its file is missing or "
                                "unreadable");
    assert_int_equal(t->n_moved, 2);
    assert_string_equal(t->moved[1], "job-000001 SCHEDULED placed on 1 worker (");
}

/* The reload at open (the table rebuilt from the store): a placed job whose workers are alive
 * keeps its placement and is assigned again (SCHEDULED: its tasks ASSIGNED, the same attempt);
 * one with a worker the store knows as lost restarts at once, naming it. */
static void test_coord_state_reload_reattaches_or_restarts(void **state)
{
    tctx *t = *state;
    coord_job *kept = add_mesh_job(t, 0, 1), *lost = add_mesh_job(t, 0, 1);
    char id_a[32], id_b[32], on_a[64], on_b[64], st[16], diag[256], want[128];
    coord_job *j;
    mt_err err = MT_ERR_INIT;

    register_devices(t, 1, 1);
    snprintf(id_a, sizeof(id_a), "%s", kept->job_id);
    snprintf(id_b, sizeof(id_b), "%s", lost->job_id);
    t->c->sched_dirty = 1;
    coord_schedpass_run(t->c);
    assert_int_equal(kept->state, MT_JOBSTATE_SCHEDULED);
    assert_int_equal(lost->state, MT_JOBSTATE_SCHEDULED);
    snprintf(on_a, sizeof(on_a), "%s", kept->tasks[0].worker_id);
    snprintf(on_b, sizeof(on_b), "%s", lost->tasks[0].worker_id);
    assert_string_not_equal(on_a, on_b); /* one job per worker */
    /* the worker of the second job, as the store had it at the restart: lost */
    coord_worker_set_state(coord_worker_find(t->c, on_b), COORD_WORKER_LOST);

    coord_jobs_free(t->c);
    assert_int_equal(coord_schedpass_reload(t->c, &err), MT_OK);
    assert_int_equal(t->c->n_jobs, 2);
    j = coord_job_find(t->c, id_a);
    assert_non_null(j);
    assert_int_equal(j->state, MT_JOBSTATE_SCHEDULED);
    assert_int_equal(j->attempt, 1);
    assert_int_equal(j->n_tasks, 1);
    assert_string_equal(j->tasks[0].worker_id, on_a);
    assert_int_equal(j->tasks[0].state, COORD_TASK_ASSIGNED);
    j = coord_job_find(t->c, id_b);
    assert_non_null(j);
    assert_int_equal(j->state, MT_JOBSTATE_RESTARTING);
    snprintf(want, sizeof(want), "worker %s was lost while the coordinator was down", on_b);
    assert_string_equal(j->reason, want);
    stored(t, id_b, st, diag);
    assert_string_equal(st, "RESTARTING");
    assert_true(t->c->sched_dirty);
}

/* A task that succeeded while the other still runs is stored before it is acknowledged: its
 * worker forgets it then, so a coordinator restarted before the last task ends must read it
 * back, and the other task's success ends the job (the coordinator-crash test's last kill
 * point hung here). The write comes only from a success that does not end the job. */
static void test_coord_state_task_success_survives_a_restart(void **state)
{
    tctx *t = *state;
    coord_job *j = add_mesh_job(t, 0, 2);
    char id[32], st[16], diag[256];
    mt_store_placement *p = NULL;
    size_t n = 0;
    mt_err err = MT_ERR_INIT;
    coord_task_status rep = {.attempt = 1, .step = 10, .error = ""};

    register_devices(t, 1, 1);
    snprintf(id, sizeof(id), "%s", j->job_id);
    rep.job_id = id;
    t->c->sched_dirty = 1;
    coord_schedpass_run(t->c);
    assert_int_equal(j->state, MT_JOBSTATE_SCHEDULED);
    assert_int_equal(j->n_tasks, 2);
    rep.state = COORD_TASK_RUNNING;
    assert_int_equal(coord_task_report(t->c, "wa", &rep), COORD_REPORT_ACK);
    assert_int_equal(coord_task_report(t->c, "wb", &rep), COORD_REPORT_ACK);
    assert_int_equal(j->state, MT_JOBSTATE_RUNNING);
    rep.state = COORD_TASK_SUCCEEDED;
    assert_int_equal(coord_task_report(t->c, "wa", &rep), COORD_REPORT_ACK);
    assert_int_equal(j->state, MT_JOBSTATE_RUNNING);
    assert_int_equal(mt_store_job_placement(t->c->store, id, &p, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(p[i].task_state, strcmp(p[i].worker_id, "wa") == 0 ? "succeeded" : "");
    mt_store_placement_free(p);

    /* the restart: the table rebuilt from the store; wa never reports the task again */
    coord_jobs_free(t->c);
    assert_int_equal(coord_schedpass_reload(t->c, &err), MT_OK);
    j = coord_job_find(t->c, id);
    assert_non_null(j);
    assert_int_equal(j->state, MT_JOBSTATE_RUNNING);
    assert_int_equal(coord_job_task(j, "wa")->state, COORD_TASK_SUCCEEDED);
    assert_int_equal(coord_job_task(j, "wb")->state, COORD_TASK_RUNNING);
    assert_int_equal(coord_task_report(t->c, "wb", &rep), COORD_REPORT_ACK);
    assert_null(coord_job_find(t->c, id)); /* final: out of the table */
    stored(t, id, st, diag);
    assert_string_equal(st, "SUCCEEDED");
    assert_int_equal(mt_store_job_set_task_state(t->c->store, id, "nobody", "succeeded", &err),
                     MT_NOT_FOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coord_state_name_tables_round_trip),
        cmocka_unit_test_setup_teardown(test_coord_state_transitions_diagnosis_and_hooks, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_coord_state_restart_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coord_state_job_worker_views, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coord_state_lost_worker_restarts_its_jobs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_coord_state_sweep_after_a_removed_job, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_coord_state_pass_priority_order_and_gang, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_coord_state_pass_verifies_checkpoints_before_resuming,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_coord_state_reload_reattaches_or_restarts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_coord_state_task_success_survives_a_restart, setup,
                                        teardown),
    };
    return MT_RUN_TESTS(tests);
}
