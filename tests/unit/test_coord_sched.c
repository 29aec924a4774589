/* SPDX-License-Identifier: MIT */
/*
 * test_coord_sched.c — the coordinator's scheduling core (coordinator/sched.h) driven with typed
 * inputs only: no coordinator, no store, no RPC. Workers and jobs are plain structs, time is a
 * number, and each test checks the decisions: gang placement (all or nothing), one job per
 * worker, unequal device counts (placed, or refused with the reason), priority then submission
 * order, the restart back-off after a broken link, heartbeat timeout -> worker lost -> job
 * restarted (or FAILED at the restart limit), a failed link avoided on restart, a frozen worker
 * left out, what a task report does to its job (started, succeeded, failed with the reason,
 * resumed, not wanted), a registration (a new process loses its tasks), the reload after a
 * coordinator restart, the once-per-silence note, the collective deadline against the heartbeat
 * window, and the stall rule telling a link from a stuck device.
 * (core/sched's mt_sched_place, which places one mesh, has its own tests in test_sched.c.)
 */
#include "mt_test.h"

#include <stdio.h>
#include <string.h>

#include "coordinator/sched.h"

#define NOW   1000000
#define FRESH 1600 /* COORD_STALL_FRESH_MS(200) */

static const uint32_t d1[] = {0}, d2[] = {0, 1}, d4[] = {0, 1, 2, 3};

static coord_sched_worker wk(const char *id, const char *addr, const uint32_t *devs, size_t n)
{
    coord_sched_worker w = {id, "host", addr, COORD_WORKER_ALIVE, devs, n, NOW, NULL, "i1"};
    return w;
}

static coord_sched_job jb(const char *id, size_t devices, size_t inner, int32_t prio, uint64_t seq)
{
    coord_sched_job j;

    memset(&j, 0, sizeof(j));
    j.id = id;
    j.state = MT_JOBSTATE_QUEUED;
    j.priority = prio;
    j.seq = seq;
    j.devices = devices;
    j.inner = inner;
    j.max_restarts = 3;
    j.ckpt = COORD_SCHED_CKPT_READY;
    return j;
}

static void plan(const coord_sched_worker *w, size_t nw, const coord_sched_job *j, size_t nj,
                 int64_t now, coord_sched_plan *p)
{
    assert_int_equal(coord_sched_plan_make(w, nw, j, nj, now, FRESH, p), MT_OK);
}

/* The workers (indexes into the workers given) a placement uses, as a bit set; each device of
 * each worker at most once. */
static unsigned used_workers(const coord_sched_decision *d, const coord_sched_worker *w)
{
    unsigned set = 0, seen[8][8];

    memset(seen, 0, sizeof(seen));
    assert_int_equal(d->verdict, COORD_SCHED_PLACE);
    for (size_t r = 0; r < d->n_slots; r++) {
        size_t k = d->slots[r].worker;
        uint32_t li = d->slots[r].local_index;
        int known = 0;
        for (size_t i = 0; i < w[k].n_devices; i++)
            known |= w[k].devices[i] == li;
        assert_true(known);
        assert_int_equal(seen[k][li], 0);
        seen[k][li] = 1;
        set |= 1u << k;
    }
    return set;
}

static void test_coord_sched_gang_all_or_nothing(void **state)
{
    coord_sched_worker w[] = {wk("w1", "", d2, 2), wk("w2", "", d2, 2)};
    coord_sched_job j[] = {jb("job-1", 4, 2, 0, 1), jb("job-2", 2, 2, 0, 2)};
    coord_sched_plan p;
    (void)state;

    /* w2 runs another job: 2 of the 4 devices are free, job-1 gets none of them ... */
    w[1].held_by = "job-9";
    plan(w, 2, j, 2, NOW, &p);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.d[0].job, 0);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_WAIT);
    assert_null(p.d[0].slots);
    assert_string_equal(p.d[0].reason, "waiting for 4 free devices (2 free of 4)");
    /* ... and job-2, which would fit the 2 free ones, waits its turn behind it */
    assert_int_equal(p.d[1].verdict, COORD_SCHED_WAIT);
    assert_string_equal(p.d[1].reason, "waiting behind job-1 (priority, then submission order)");
    coord_sched_plan_fini(&p);

    /* w2 free again: job-1 gets all 4 devices at once, job-2 nothing */
    w[1].held_by = NULL;
    plan(w, 2, j, 2, NOW, &p);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_PLACE);
    assert_int_equal(p.d[0].n_slots, 4);
    assert_int_equal(used_workers(&p.d[0], w), 3u);
    assert_int_equal(p.d[1].verdict, COORD_SCHED_WAIT);
    assert_string_equal(p.d[1].reason, "waiting for 2 free devices (0 free of 4)");
    coord_sched_plan_fini(&p);
}

static void test_coord_sched_one_job_per_worker(void **state)
{
    coord_sched_worker w[] = {wk("w1", "", d4, 4)};
    coord_sched_job j[] = {jb("job-1", 2, 2, 0, 1), jb("job-2", 2, 2, 0, 2)};
    coord_sched_plan p;
    (void)state;

    /* a worker serves one job: job-1 leaves w1's other 2 devices idle, job-2 waits */
    plan(w, 1, j, 2, NOW, &p);
    assert_int_equal(p.free_devices, 4);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_PLACE);
    assert_int_equal(used_workers(&p.d[0], w), 1u);
    assert_int_equal(p.d[1].verdict, COORD_SCHED_WAIT);
    assert_string_equal(p.d[1].reason, "waiting for 2 free devices (0 free of 4)");
    coord_sched_plan_fini(&p);

    /* the same when job-1 was placed by an earlier pass */
    w[0].held_by = "job-1";
    plan(w, 1, j + 1, 1, NOW, &p);
    assert_int_equal(p.free_devices, 0);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_WAIT);
    coord_sched_plan_fini(&p);
}

static void test_coord_sched_unequal_device_counts(void **state)
{
    coord_sched_worker w[] = {wk("w1", "", d2, 2), wk("w2", "", d1, 1)};
    coord_sched_job j[] = {jb("job-1", 3, 3, 0, 1)};
    coord_sched_job big[] = {jb("job-2", 4, 4, 0, 2), jb("job-3", 1, 1, 0, 3)};
    coord_sched_job el[] = {jb("job-4", 4, 4, 0, 4)};
    coord_sched_plan p;
    (void)state;

    /* batch=3 over 2 + 1 devices: placed, the group split, every device once */
    plan(w, 2, j, 1, NOW, &p);
    assert_int_equal(used_workers(&p.d[0], w), 3u);
    assert_int_equal(p.d[0].n_slots, 3);
    coord_sched_plan_fini(&p);

    /* 4 devices of 3 registered: refused with the reason, and it blocks nobody */
    plan(w, 2, big, 2, NOW, &p);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_WAIT);
    assert_string_equal(p.d[0].reason, "needs 4 devices, 3 registered");
    assert_int_equal(p.d[1].verdict, COORD_SCHED_PLACE);
    coord_sched_plan_fini(&p);

    /* an elastic job restarting after it ran on 4: batch=3 (divides 12, fits 3 devices) */
    el[0].state = MT_JOBSTATE_RESTARTING;
    el[0].elastic_min = 1;
    el[0].elastic_max = 4;
    el[0].batch_size = 12;
    el[0].placed_devices = 4;
    plan(w, 2, el, 1, NOW, &p);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_PLACE);
    assert_int_equal(p.d[0].batch, 3);
    assert_int_equal(p.d[0].n_slots, 3);
    assert_string_equal(p.d[0].reason, ", elastic: mesh batch=3, was batch=4");
    coord_sched_plan_fini(&p);

    /* no size in 4..4 fits 3 devices: it says so */
    el[0].elastic_min = 4;
    plan(w, 2, el, 1, NOW, &p);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_WAIT);
    assert_string_equal(p.d[0].reason, "elastic: no batch size in 4..4 divides the global batch "
                                       "12 and fits the 3 registered devices");
    coord_sched_plan_fini(&p);
}

static void test_coord_sched_priority_then_submission_order(void **state)
{
    coord_sched_worker w[] = {wk("w1", "", d2, 2)};
    coord_sched_job j[] = {jb("job-1", 2, 2, 0, 1), jb("job-2", 2, 2, 5, 2),
                           jb("job-3", 1, 1, 5, 3), jb("job-4", 8, 8, 9, 4)};
    coord_sched_plan p;
    (void)state;

    j[0].state = MT_JOBSTATE_RUNNING; /* not queued: not considered */
    plan(w, 1, j, 4, NOW, &p);
    assert_int_equal(p.n, 3);
    /* job-4 first (priority 9), but it can never fit: it does not block */
    assert_int_equal(p.d[0].job, 3);
    assert_string_equal(p.d[0].reason, "needs 8 devices, 2 registered");
    /* then priority 5 in submission order */
    assert_int_equal(p.d[1].job, 1);
    assert_int_equal(p.d[1].verdict, COORD_SCHED_PLACE);
    assert_int_equal(p.d[2].job, 2);
    assert_string_equal(p.d[2].reason, "waiting for 1 free devices (0 free of 2)");
    coord_sched_plan_fini(&p);

    /* job-1 queued again at priority 0: it waits behind job-3, which waits for devices */
    j[0].state = MT_JOBSTATE_QUEUED;
    plan(w, 1, j, 4, NOW, &p);
    assert_int_equal(p.n, 4);
    assert_int_equal(p.d[3].job, 0);
    assert_string_equal(p.d[3].reason, "waiting behind job-3 (priority, then submission order)");
    coord_sched_plan_fini(&p);
}

static void test_coord_sched_checkpoint_check_keeps_the_turn(void **state)
{
    coord_sched_worker w[] = {wk("w1", "", d2, 2)};
    coord_sched_job j[] = {jb("job-1", 1, 1, 0, 1), jb("job-2", 1, 1, 0, 2)};
    coord_sched_plan p;
    (void)state;

    /* not known yet: the pass stops at it (the caller finds out and asks again) */
    j[0].state = MT_JOBSTATE_RESTARTING;
    j[0].ckpt = COORD_SCHED_CKPT_UNCHECKED;
    plan(w, 1, j, 2, NOW, &p);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_VERIFY);
    coord_sched_plan_fini(&p);
    /* being read back: it holds its turn, the job behind waits although a device is free */
    j[0].ckpt = COORD_SCHED_CKPT_VERIFYING;
    plan(w, 1, j, 2, NOW, &p);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_HOLD);
    assert_string_equal(p.d[1].reason, "waiting behind job-1 (priority, then submission order)");
    coord_sched_plan_fini(&p);
    /* an init_from without a source fails, whatever else */
    j[1].init_error = "init_from: job job-0 has no complete checkpoint";
    plan(w, 1, j + 1, 1, NOW, &p);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_FAIL);
    assert_string_equal(p.d[0].reason, j[1].init_error);
    coord_sched_plan_fini(&p);
}

static void test_coord_sched_link_backoff(void **state)
{
    coord_sched_worker w[] = {wk("w1", "127.0.0.1:7001", d2, 2), wk("w2", "127.0.0.1:7002", d2, 2)};
    coord_sched_job j[] = {jb("job-1", 3, 1, 0, 1), jb("job-2", 1, 1, 0, 2)};
    const char *err = "UNAVAILABLE: allreduce on axis batch: peer 127.0.0.1:7002 closed";
    const int64_t want[] = {2000, 4000, 8000, 16000, 32000, 60000, 60000};
    coord_sched_peer_verdict v;
    int64_t b = 0;
    coord_sched_plan p;
    (void)state;

    /* each failure of the link doubles the back-off: 2 s, 4 s, ... at most 60 s */
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        coord_sched_peer_failure(w, 2, "w1", err, b, NOW, FRESH, &v);
        assert_int_equal(v.fault, COORD_SCHED_FAULT_LINK);
        assert_int_equal(v.backoff_ms, want[i]);
        assert_int_equal(v.backoff_until_ms, NOW + want[i]);
        b = v.backoff_ms;
    }

    /* 3 devices need both ends of the link: during the back-off the job waits, without
     * blocking the job behind it, and the pass asks to be run again */
    j[0].state = MT_JOBSTATE_RESTARTING;
    j[0].link_a = "w1";
    j[0].link_b = "w2";
    j[0].backoff_ms = 2000;
    j[0].backoff_until_ms = NOW + 2000;
    plan(w, 2, j, 2, NOW, &p);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_WAIT);
    assert_string_equal(p.d[0].reason, "backing off 2 s after the link w1<->w2 broke: no "
                                       "placement avoids it");
    assert_true(p.again);
    assert_int_equal(p.d[1].verdict, COORD_SCHED_PLACE);
    coord_sched_plan_fini(&p);

    /* after it: anywhere (the link may have healed) */
    plan(w, 2, j, 1, NOW + 2000, &p);
    assert_int_equal(p.d[0].verdict, COORD_SCHED_PLACE);
    assert_int_equal(used_workers(&p.d[0], w), 3u);
    assert_string_equal(p.d[0].reason, ", again over the link w1<->w2 after 2 s of back-off");
    coord_sched_plan_fini(&p);
}

static void test_coord_sched_failed_link_avoided(void **state)
{
    coord_sched_worker w[] = {wk("w1", "", d2, 2), wk("w2", "", d2, 2), wk("w3", "", d2, 2)};
    coord_sched_job j[] = {jb("job-1", 4, 2, 0, 1)};
    coord_sched_plan p;
    unsigned set;
    (void)state;

    /* without a broken link it takes w1 and w2 (the first that fit) ... */
    j[0].state = MT_JOBSTATE_RESTARTING;
    plan(w, 3, j, 1, NOW, &p);
    assert_int_equal(used_workers(&p.d[0], w), 3u);
    coord_sched_plan_fini(&p);
    /* ... after the link w1<->w2 broke, never both */
    j[0].link_a = "w1";
    j[0].link_b = "w2";
    j[0].backoff_ms = 2000;
    j[0].backoff_until_ms = NOW + 2000;
    plan(w, 3, j, 1, NOW, &p);
    set = used_workers(&p.d[0], w);
    assert_true((set & 3u) != 3u);
    assert_true((set & 4u) != 0);
    assert_string_equal(p.d[0].reason, ", avoiding the link w1<->w2");
    assert_false(p.again);
    coord_sched_plan_fini(&p);
}

static void test_coord_sched_heartbeat_timeout_restarts_the_job(void **state)
{
    coord_sched_worker w[] = {wk("w1", "", d2, 2), wk("w2", "", d2, 2)};
    coord_sched_job j[] = {jb("job-1", 2, 2, 0, 1)};
    char reason[300];
    coord_sched_plan p;
    (void)state;

    /* silent for longer than the timeout: lost; exactly the timeout: not yet */
    w[0].last_seen_ms = NOW - 10001;
    assert_true(coord_sched_worker_lost(&w[0], NOW, 10000));
    w[0].last_seen_ms = NOW - 10000;
    assert_false(coord_sched_worker_lost(&w[0], NOW, 10000));
    w[0].last_seen_ms = NOW - 10001;
    w[0].state = COORD_WORKER_LOST; /* declared once */
    assert_false(coord_sched_worker_lost(&w[0], NOW, 10000));

    /* its job restarts while restarts remain, else fails saying why */
    assert_int_equal(
        coord_sched_restart(0, 3, "worker w1 lost (no heartbeat)", reason, sizeof(reason)),
        MT_JOBSTATE_RESTARTING);
    assert_string_equal(reason, "worker w1 lost (no heartbeat)");
    assert_int_equal(
        coord_sched_restart(3, 3, "worker w1 lost (no heartbeat)", reason, sizeof(reason)),
        MT_JOBSTATE_FAILED);
    assert_string_equal(reason, "worker w1 lost (no heartbeat); restart limit of 3 reached");

    /* and is placed again on the alive worker only */
    j[0].state = MT_JOBSTATE_RESTARTING;
    j[0].restarts = 1;
    plan(w, 2, j, 1, NOW, &p);
    assert_int_equal(p.registered, 2);
    assert_int_equal(used_workers(&p.d[0], w), 2u);
    coord_sched_plan_fini(&p);
}

/* RegisterWorker: the same live process is re-attached; a new process under the name of a
 * live one is refused until that one is lost; a new process (or one already declared lost)
 * replaces the old, whose tasks are gone. */
static void test_coord_sched_new_process_loses_its_tasks(void **state)
{
    coord_sched_worker w = wk("w1", "", d2, 2);
    (void)state;

    assert_int_equal(coord_sched_register(NULL, "i1", NOW, 10000), COORD_SCHED_REGISTER_NEW);
    /* the same process again (a coordinator restart): its tasks keep running */
    assert_int_equal(coord_sched_register(&w, "i1", NOW, 10000), COORD_SCHED_REGISTER_SAME);
    w.last_seen_ms = NOW - 60000;
    assert_int_equal(coord_sched_register(&w, "i1", NOW, 10000), COORD_SCHED_REGISTER_SAME);
    /* another process while the first is heard within the timeout: refused */
    w.last_seen_ms = NOW - 10000;
    assert_int_equal(coord_sched_register(&w, "i2", NOW, 10000), COORD_SCHED_REGISTER_REFUSED);
    /* ... once the first is silent past it, the new process replaces it */
    w.last_seen_ms = NOW - 10001;
    assert_int_equal(coord_sched_register(&w, "i2", NOW, 10000), COORD_SCHED_REGISTER_REPLACED);
    /* a worker already declared lost comes back: whatever ran there for us is gone */
    w.last_seen_ms = NOW;
    w.state = COORD_WORKER_LOST;
    assert_int_equal(coord_sched_register(&w, "i1", NOW, 10000), COORD_SCHED_REGISTER_REPLACED);
    assert_int_equal(coord_sched_register(&w, "i2", NOW, 10000), COORD_SCHED_REGISTER_REPLACED);
}

/* A coordinator restart: a reloaded placed job keeps its tasks (RUNNING re-attached, SCHEDULED
 * assigned again) while the store knows its workers as alive; one the store knew as lost, or
 * does not know, restarts it now. A kept worker that stays silent past the timeout is lost later
 * (its grace period is one heartbeat timeout from the load). */
static void test_coord_sched_reload_fails_over(void **state)
{
    coord_sched_worker w[] = {wk("w1", "", d2, 2), wk("w2", "", d2, 2)};
    coord_sched_task t[] = {{"w1", COORD_TASK_ASSIGNED, 0}, {"w2", COORD_TASK_ASSIGNED, 0}};
    coord_sched_reload_out out;
    (void)state;

    coord_sched_reload(MT_JOBSTATE_RUNNING, t, 2, w, 2, &out);
    assert_false(out.lost);
    assert_int_equal(out.task_state, COORD_TASK_RUNNING);
    coord_sched_reload(MT_JOBSTATE_STALLED, t, 2, w, 2, &out);
    assert_false(out.lost);
    assert_int_equal(out.task_state, COORD_TASK_RUNNING);
    coord_sched_reload(MT_JOBSTATE_SCHEDULED, t, 2, w, 2, &out);
    assert_false(out.lost);
    assert_int_equal(out.task_state, COORD_TASK_ASSIGNED);

    w[1].state = COORD_WORKER_LOST;
    coord_sched_reload(MT_JOBSTATE_RUNNING, t, 2, w, 2, &out);
    assert_true(out.lost);
    assert_string_equal(out.cause, "worker w2 was lost while the coordinator was down");
    coord_sched_reload(MT_JOBSTATE_SCHEDULED, t, 2, w, 1, &out); /* w2 unknown */
    assert_true(out.lost);
    assert_string_equal(out.cause, "worker w2 was lost while the coordinator was down");

    /* kept with a grace period of one timeout from the load (last seen = NOW) */
    w[1].state = COORD_WORKER_ALIVE;
    assert_false(coord_sched_worker_lost(&w[1], NOW + 10000, 10000));
    assert_true(coord_sched_worker_lost(&w[1], NOW + 10001, 10000));
}

/* A silent worker is named at once, once per silence: later sweeps store nothing until every
 * worker heartbeats again; then the note says so and the stall rule applies again. */
static void test_coord_sched_silent_worker_noted_once(void **state)
{
    coord_sched_worker w[] = {wk("wa", "", d1, 1), wk("wb", "", d1, 1)};
    coord_sched_silence_out out;
    (void)state;

    coord_sched_silence(w, 2, MT_JOBSTATE_RUNNING, "", 0, NOW, FRESH, 60000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_SILENCE_NONE);

    w[1].last_seen_ms = NOW - FRESH; /* exactly the window: still fresh */
    coord_sched_silence(w, 2, MT_JOBSTATE_RUNNING, "", 0, NOW, FRESH, 60000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_SILENCE_NONE);

    w[1].last_seen_ms = NOW - 3000;
    coord_sched_silence(w, 2, MT_JOBSTATE_RUNNING, "", 0, NOW, FRESH, 60000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_SILENCE_NOTE);
    assert_int_equal(out.worker, 1);
    assert_string_equal(out.reason, "worker wb (host) silent for 3 s: no heartbeat; it is declared "
                                    "lost and the job restarts 60 s after its last one");
    assert_true(strncmp(out.diagnosis, "device stuck: worker wb (host) silent for 3 s", 45) == 0);

    /* the next sweeps: named already, nothing to store, the stall rule waits */
    coord_sched_silence(w, 2, MT_JOBSTATE_RUNNING, "device stuck: x", NOW, NOW + 250, FRESH, 60000,
                        &out);
    assert_int_equal(out.verdict, COORD_SCHED_SILENCE_NOTED);
    assert_string_equal(out.reason, "");
    coord_sched_silence(w, 2, MT_JOBSTATE_STALLED, "device stuck: x", NOW, NOW + 20000, FRESH,
                        60000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_SILENCE_NOTED);

    /* back: a STALLED job keeps its diagnosis, a RUNNING one loses it */
    w[1].last_seen_ms = NOW;
    coord_sched_silence(w, 2, MT_JOBSTATE_STALLED, "device stuck: x", NOW - 1, NOW, FRESH, 60000,
                        &out);
    assert_int_equal(out.verdict, COORD_SCHED_SILENCE_BACK);
    assert_string_equal(out.reason, "every worker heartbeats again");
    assert_string_equal(out.diagnosis, "device stuck: x");
    coord_sched_silence(w, 2, MT_JOBSTATE_RUNNING, "device stuck: x", NOW - 1, NOW, FRESH, 60000,
                        &out);
    assert_int_equal(out.verdict, COORD_SCHED_SILENCE_BACK);
    assert_string_equal(out.diagnosis, "");
}

/* SubmitJob: a collective deadline not longer than the heartbeat window is refused, naming both
 * figures; a longer one passes, and so does none while the workers' default is longer. */
static void test_coord_sched_deadline_against_heartbeat_window(void **state)
{
    char msg[256] = "";
    (void)state;

    assert_int_equal(coord_sched_deadline_check(0, FRESH, msg, sizeof(msg)), MT_OK);
    assert_int_equal(coord_sched_deadline_check(FRESH + 1, FRESH, msg, sizeof(msg)), MT_OK);
    assert_string_equal(msg, "");
    assert_int_equal(coord_sched_deadline_check(FRESH, FRESH, msg, sizeof(msg)),
                     MT_FAILED_PRECONDITION);
    assert_string_equal(msg, "restart.collective_deadline_ms: 1600 ms is not longer than this "
                             "coordinator's heartbeat window of 1600 ms (3 heartbeat intervals + "
                             "1 s)");
    assert_int_equal(coord_sched_deadline_check(100, 4000, msg, sizeof(msg)),
                     MT_FAILED_PRECONDITION);
}

/* A spec without restart.collective_deadline_ms gets the workers' default (30 s): it is checked
 * too, so a heartbeat window of 30 s or more (--heartbeat-ms 9667) is refused, naming both. */
static void test_coord_sched_default_deadline_against_heartbeat_window(void **state)
{
    char msg[256] = "";
    (void)state;

    assert_int_equal(coord_sched_deadline_check(0, COORD_STALL_FRESH_MS(9666), msg, sizeof(msg)),
                     MT_OK);
    assert_string_equal(msg, "");
    assert_int_equal(coord_sched_deadline_check(0, COORD_STALL_FRESH_MS(9667), msg, sizeof(msg)),
                     MT_FAILED_PRECONDITION);
    assert_string_equal(msg, "the workers' default collective deadline of 30000 ms (a spec "
                             "without restart.collective_deadline_ms) is not longer than this "
                             "coordinator's heartbeat window of 30001 ms (3 heartbeat intervals "
                             "+ 1 s)");
    /* an explicit longer deadline still passes under that window */
    assert_int_equal(
        coord_sched_deadline_check(60000, COORD_STALL_FRESH_MS(9667), msg, sizeof(msg)), MT_OK);
}

static void test_coord_sched_peer_failure_link_vs_device(void **state)
{
    coord_sched_worker w[] = {wk("w1", "127.0.0.1:7001", d2, 2), wk("w2", "127.0.0.1:7002", d2, 2),
                              wk("w3", "", d2, 2)};
    coord_sched_job j[] = {jb("job-1", 4, 2, 0, 1)};
    const char *err = "DEADLINE_EXCEEDED: allreduce on axis batch: no data from 127.0.0.1:7002";
    coord_sched_peer_verdict v;
    coord_sched_plan p;
    (void)state;

    /* both heartbeat, the error names w2's address: the link */
    coord_sched_peer_failure(w, 3, "w1", err, 0, NOW, FRESH, &v);
    assert_int_equal(v.fault, COORD_SCHED_FAULT_LINK);
    assert_int_equal(v.worker, 1);
    assert_true(strncmp(v.diagnosis, "link w1<->w2: ", 14) == 0);
    assert_true(strncmp(v.cause, "link w1<->w2 broken", 19) == 0);

    /* w2 silent: a stuck device, whatever the error names */
    w[1].last_seen_ms = NOW - FRESH - 1;
    coord_sched_peer_failure(w, 3, "w1", err, 0, NOW, FRESH, &v);
    assert_int_equal(v.fault, COORD_SCHED_FAULT_FROZEN);
    assert_int_equal(v.worker, 1);
    assert_true(strncmp(v.diagnosis, "device stuck: worker w2 (host) stopped answering", 48) == 0);
    assert_int_equal(v.backoff_ms, 0);

    /* the frozen worker is left out of the next placement while it stays silent */
    j[0].state = MT_JOBSTATE_RESTARTING;
    j[0].frozen = "w2";
    plan(w, 3, j, 1, NOW, &p);
    assert_int_equal(used_workers(&p.d[0], w), 5u);
    assert_true(p.again);
    coord_sched_plan_fini(&p);

    /* nobody named, nobody silent: a peer; the job's own error: not a peer failure */
    w[1].last_seen_ms = NOW;
    coord_sched_peer_failure(w, 3, "w1", "UNAVAILABLE: connection reset", 0, NOW, FRESH, &v);
    assert_int_equal(v.fault, COORD_SCHED_FAULT_PEER);
    assert_string_equal(v.cause, "worker w1 lost a peer: UNAVAILABLE: connection reset");
    assert_string_equal(v.diagnosis, "");
    coord_sched_peer_failure(w, 3, "w1", "INVALID_ARGUMENT: dataset.train_images: no such file", 0,
                             NOW, FRESH, &v);
    assert_int_equal(v.fault, COORD_SCHED_FAULT_NONE);
}

static void test_coord_sched_task_reports(void **state)
{
    coord_sched_task t[] = {{"w1", COORD_TASK_ASSIGNED, 0}, {"w2", COORD_TASK_ASSIGNED, 0}};
    coord_sched_report r;
    (void)state;

    /* not wanted: another attempt, a worker without a task, a job not placed; running -> stop */
    coord_sched_task_report(MT_JOBSTATE_SCHEDULED, 2, t, 2, "w1", 1, COORD_TASK_RUNNING, 0, "", &r);
    assert_int_equal(r.verdict, COORD_SCHED_REPORT_CANCEL);
    coord_sched_task_report(MT_JOBSTATE_SCHEDULED, 2, t, 2, "w9", 2, COORD_TASK_RUNNING, 0, "", &r);
    assert_int_equal(r.verdict, COORD_SCHED_REPORT_CANCEL);
    coord_sched_task_report(MT_JOBSTATE_CANCELLED, 2, t, 2, "w1", 2, COORD_TASK_SUCCEEDED, 0, "",
                            &r);
    assert_int_equal(r.verdict, COORD_SCHED_REPORT_IGNORE);
    assert_false(r.accepted);

    /* the first task starts: recorded, the job stays SCHEDULED; the second: RUNNING */
    coord_sched_task_report(MT_JOBSTATE_SCHEDULED, 2, t, 2, "w1", 2, COORD_TASK_RUNNING, 0, "", &r);
    assert_int_equal(r.verdict, COORD_SCHED_REPORT_RECORD);
    assert_int_equal(r.task, 0);
    assert_false(r.started);
    t[0].state = COORD_TASK_RUNNING;
    coord_sched_task_report(MT_JOBSTATE_SCHEDULED, 2, t, 2, "w2", 2, COORD_TASK_RUNNING, 0, "", &r);
    assert_true(r.started);
    assert_false(r.succeeded);
    assert_string_equal(r.reason, "all 2 tasks started (attempt 2)");
    t[1].state = COORD_TASK_RUNNING;

    /* nothing new: ignored; a new step: accepted (recorded), no move */
    t[0].step = 5;
    coord_sched_task_report(MT_JOBSTATE_RUNNING, 2, t, 2, "w1", 2, COORD_TASK_RUNNING, 5, "", &r);
    assert_false(r.accepted);
    coord_sched_task_report(MT_JOBSTATE_RUNNING, 2, t, 2, "w1", 2, COORD_TASK_RUNNING, 6, "", &r);
    assert_true(r.accepted);
    assert_false(r.started || r.succeeded || r.resume);

    /* one task succeeded, the other still runs: recorded, no move */
    coord_sched_task_report(MT_JOBSTATE_RUNNING, 2, t, 2, "w1", 2, COORD_TASK_SUCCEEDED, 7, "", &r);
    assert_int_equal(r.verdict, COORD_SCHED_REPORT_RECORD);
    assert_false(r.succeeded);

    /* a STALLED job resumes on a report; every task succeeded: SUCCEEDED */
    t[0].state = COORD_TASK_SUCCEEDED;
    coord_sched_task_report(MT_JOBSTATE_STALLED, 2, t, 2, "w2", 2, COORD_TASK_SUCCEEDED, 9, "", &r);
    assert_true(r.resume);
    assert_true(r.succeeded);

    /* a failed task fails the job with its error (the peer rule is asked first), a cancelled
     * one too; an unknown state word only records the step */
    coord_sched_task_report(MT_JOBSTATE_RUNNING, 2, t, 2, "w2", 2, COORD_TASK_FAILED, 9,
                            "INTERNAL: out of memory", &r);
    assert_int_equal(r.verdict, COORD_SCHED_REPORT_FAIL);
    assert_true(r.failed);
    assert_string_equal(r.reason, "worker w2: INTERNAL: out of memory");
    coord_sched_task_report(MT_JOBSTATE_RUNNING, 2, t, 2, "w2", 2, COORD_TASK_CANCELLED, 9, "", &r);
    assert_false(r.failed);
    assert_string_equal(r.reason, "worker w2: task cancelled by the worker");
    coord_sched_task_report(MT_JOBSTATE_RUNNING, 2, t, 2, "w2", 2, COORD_TASK_ASSIGNED, 10, "", &r);
    assert_int_equal(r.verdict, COORD_SCHED_REPORT_IGNORE);
    assert_true(r.accepted);
}

static coord_stall_dev sdev(const char *worker, uint32_t local, const char *state)
{
    coord_stall_dev d;

    memset(&d, 0, sizeof(d));
    d.known = 1;
    snprintf(d.worker_id, sizeof(d.worker_id), "%s", worker);
    d.local_index = local;
    d.step = 7;
    d.seq = 3;
    snprintf(d.op, sizeof(d.op), "allreduce");
    snprintf(d.axis, sizeof(d.axis), "batch");
    snprintf(d.state, sizeof(d.state), "%s", state);
    d.state_since_ms = NOW - 20000;
    d.activity_since_ms = -1;
    d.ticks = 40;
    return d;
}

static void test_coord_sched_stall_link_vs_device(void **state)
{
    coord_stall_dev d[] = {sdev("w1", 0, "waiting"), sdev("w2", 0, "waiting")};
    coord_sched_stall_in in = {MT_JOBSTATE_RUNNING, d, 2, 7, 0, 0, 0, true, 5000, 30000};
    coord_sched_stall_out out;
    (void)state;

    /* the first signature of an attempt compares nothing */
    coord_sched_stall(&in, NOW, 5000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_STALL_NONE);
    assert_int_not_equal(out.prog_sig, 0);
    assert_int_equal(out.prog_ms, NOW);
    in.prog_sig = out.prog_sig;
    in.prog_ms = NOW - 5000;

    /* quiet for the stall timeout, both inside, both heartbeat: STALLED, the link */
    coord_sched_stall(&in, NOW, 5000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_STALL_STALLED);
    assert_true(strncmp(out.reason, "step 7 allreduce #3 on axis batch: all 2 devices", 48) == 0);
    assert_true(strncmp(out.diagnosis, "link w1<->w2: ", 14) == 0);

    /* a worker not heard lately: the lost-worker path decides, never STALLED */
    in.workers_fresh = false;
    coord_sched_stall(&in, NOW, 5000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_STALL_NONE);
    in.workers_fresh = true;

    /* one device computing while the other waits: a stuck device */
    snprintf(d[1].state, sizeof(d[1].state), "done");
    in.prog_sig = 0;
    coord_sched_stall(&in, NOW, 5000, &out);
    in.prog_sig = out.prog_sig;
    coord_sched_stall(&in, NOW, 5000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_STALL_STALLED);
    assert_true(strncmp(out.diagnosis, "device stuck: ", 14) == 0);

    /* STALLED past stall_timeout + stall_restart with a rank inside: restart */
    in.state = MT_JOBSTATE_STALLED;
    in.stall_note_ms = NOW;
    coord_sched_stall(&in, NOW, 5000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_STALL_NONE); /* refreshed just now */
    in.prog_ms = NOW - 35000;
    coord_sched_stall(&in, NOW, 5000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_STALL_RESTART);
    assert_true(strncmp(out.reason, "stalled for 35 s: ", 18) == 0);

    /* progress: back to RUNNING */
    d[0].ticks++;
    coord_sched_stall(&in, NOW, 5000, &out);
    assert_int_equal(out.verdict, COORD_SCHED_STALL_RESUMED);
    assert_string_equal(out.reason, "progress resumed after 35 s without progress");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coord_sched_gang_all_or_nothing),
        cmocka_unit_test(test_coord_sched_one_job_per_worker),
        cmocka_unit_test(test_coord_sched_unequal_device_counts),
        cmocka_unit_test(test_coord_sched_priority_then_submission_order),
        cmocka_unit_test(test_coord_sched_checkpoint_check_keeps_the_turn),
        cmocka_unit_test(test_coord_sched_link_backoff),
        cmocka_unit_test(test_coord_sched_failed_link_avoided),
        cmocka_unit_test(test_coord_sched_heartbeat_timeout_restarts_the_job),
        cmocka_unit_test(test_coord_sched_new_process_loses_its_tasks),
        cmocka_unit_test(test_coord_sched_reload_fails_over),
        cmocka_unit_test(test_coord_sched_silent_worker_noted_once),
        cmocka_unit_test(test_coord_sched_deadline_against_heartbeat_window),
        cmocka_unit_test(test_coord_sched_default_deadline_against_heartbeat_window),
        cmocka_unit_test(test_coord_sched_peer_failure_link_vs_device),
        cmocka_unit_test(test_coord_sched_task_reports),
        cmocka_unit_test(test_coord_sched_stall_link_vs_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
