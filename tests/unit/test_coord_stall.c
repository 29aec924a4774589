/* SPDX-License-Identifier: MIT */
/*
 * test_coord_stall.c — the coordinator's hang diagnosis (coordinator/stall.h, sched.h): the line
 * it writes for a group that stopped advancing, from the per-rank progress records alone (pure
 * function); and, with a real coordinator in this process (coord_test_util.h) fed heartbeats
 * carrying DeviceProgress, the STALLED detection: RUNNING -> STALLED with the diagnosis, back to
 * RUNNING on progress, never STALLED while a worker is silent, bogus ranks ignored, and a task that
 * succeeds while STALLED ends the job.
 */
#include "mt_test.h"

#include <stdio.h>
#include <string.h>

#include "coord_test_util.h"
#include "coordinator/sched.h" /* coord_stall_diagnose, coord_stall_classify */
#include "coordinator/stall.h"

#define NOW 1000000

static coord_stall_dev dev(const char *worker, uint32_t local, uint64_t step, uint32_t seq,
                           const char *state, const char *activity, int64_t act_age_ms)
{
    coord_stall_dev d;

    memset(&d, 0, sizeof(d));
    d.known = 1;
    snprintf(d.worker_id, sizeof(d.worker_id), "%s", worker);
    d.local_index = local;
    d.step = step;
    d.seq = seq;
    snprintf(d.op, sizeof(d.op), "allreduce");
    snprintf(d.axis, sizeof(d.axis), "batch");
    snprintf(d.state, sizeof(d.state), "%s", state);
    d.state_since_ms = NOW - 12000;
    snprintf(d.activity, sizeof(d.activity), "%s", activity);
    d.activity_since_ms = act_age_ms < 0 ? -1 : NOW - act_age_ms;
    return d;
}

static void test_coord_stall_names_the_device_that_never_entered(void **state)
{
    coord_stall_dev d[4] = {
        dev("worker-a", 0, 412, 57, "waiting", "computing", 12000),
        dev("worker-a", 1, 412, 57, "chunk", "computing", 12000),
        dev("worker-b", 0, 412, 57, "waiting", "computing", 13000),
        dev("worker-b", 1, 412, 56, "done", "reading input", 31400),
    };
    char out[256];
    (void)state;

    coord_stall_diagnose(d, 4, NOW, out, sizeof(out));
    assert_string_equal(out, "step 412 allreduce #57 on axis batch: worker-b cpu:1 never entered; "
                             "its last activity: reading input 31 s ago");
}

static void test_coord_stall_the_latest_collective_wins(void **state)
{
    /* rank 1 finished step 411 and is in step 412 #0; rank 0 is still in step 411 #3 */
    coord_stall_dev d[2] = {
        dev("w1", 0, 411, 3, "waiting", "computing", 5000),
        dev("w2", 0, 412, 0, "waiting", "computing", 1000),
    };
    char out[256];
    (void)state;

    snprintf(d[0].axis, sizeof(d[0].axis), "model");
    coord_stall_diagnose(d, 2, NOW, out, sizeof(out));
    assert_string_equal(out, "step 412 allreduce #0 on axis batch: w1 cpu:0 is still in step 411 "
                             "allreduce #3 on axis model (waiting for 12 s)");
}

static void test_coord_stall_several_missing_devices(void **state)
{
    coord_stall_dev d[3] = {
        dev("a", 0, 9, 2, "waiting", "computing", 2000),
        dev("b", 0, 9, 1, "done", "computing", 20000),
        dev("c", 3, 0, 0, "none", "", -1),
    };
    char out[300];
    (void)state;

    coord_stall_diagnose(d, 3, NOW, out, sizeof(out));
    assert_string_equal(out, "step 9 allreduce #2 on axis batch: 2 devices never entered it: b "
                             "cpu:0 never entered; its last activity: computing 20 s ago; c cpu:3 "
                             "never entered; its last activity: none reported");
}

static void test_coord_stall_everyone_entered(void **state)
{
    coord_stall_dev d[2] = {
        dev("a", 0, 5, 1, "waiting", "computing", 2000),
        dev("b", 0, 5, 1, "chunk", "computing", 2000),
    };
    char out[256];
    (void)state;

    d[1].state_since_ms = NOW - 7000; /* the latest state change of the group: 7 s ago */
    coord_stall_diagnose(d, 2, NOW, out, sizeof(out));
    assert_string_equal(out, "step 5 allreduce #1 on axis batch: all 2 devices entered; no data "
                             "moved for 7 s");
}

static void test_coord_stall_no_collective_in_progress(void **state)
{
    coord_stall_dev d[3] = {
        dev("a", 0, 5, 1, "done", "reading input", 40000),
        dev("b", 1, 5, 1, "done", "computing", 3000),
    };
    char out[256];
    (void)state;

    memset(&d[2], 0, sizeof(d[2])); /* rank 2 never reported */
    coord_stall_diagnose(d, 3, NOW, out, sizeof(out));
    assert_string_equal(out, "no device is inside a collective; a cpu:0 last activity: reading "
                             "input 40 s ago, b cpu:1 last activity: computing 3 s ago, rank 2: "
                             "no progress reported");
}

static void test_coord_stall_unknown_axis_and_truncation(void **state)
{
    coord_stall_dev d[2] = {
        dev("worker-a", 0, 1, 0, "entered", "computing", 0),
        dev("worker-b", 0, 0, 0, "none", "loading", 1000),
    };
    char small[24], out[256];
    (void)state;

    d[0].axis[0] = '\0';
    coord_stall_diagnose(d, 2, NOW, out, sizeof(out));
    assert_string_equal(out, "step 1 allreduce #0 on axis (unknown): worker-b cpu:0 never entered; "
                             "its last activity: loading 1 s ago");
    memset(small, 'x', sizeof(small));
    coord_stall_diagnose(d, 2, NOW, small, sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_memory_equal(small, out, sizeof(small) - 1);
    coord_stall_diagnose(d, 2, NOW, small, 0); /* cap 0: nothing written */
}

/* ------------------------------------------------------------------ detection, end to end */

/* Heartbeat of w1 for (job, attempt) "running" with rank 0 waiting in step 3 allreduce #0 and
 * rank 1 behind it (done with step 2, reading input) with ticks1, plus a bogus rank 9. */
static void beat(ctu *t, const char *job, unsigned attempt, uint64_t ticks1)
{
    Meshtrain__HeartbeatRequest req = MESHTRAIN__HEARTBEAT_REQUEST__INIT;
    Meshtrain__HeartbeatReply *rep = NULL;
    Meshtrain__TaskStatus st = MESHTRAIN__TASK_STATUS__INIT, *sp = &st;
    Meshtrain__DeviceProgress d[3], *dp[3] = {&d[0], &d[1], &d[2]};

    for (int i = 0; i < 3; i++) {
        meshtrain__device_progress__init(&d[i]);
        d[i].rank = i == 2 ? 9 : (uint32_t)i;
        d[i].local_index = (uint32_t)i;
        d[i].op = "allreduce";
        d[i].axis = "batch";
        d[i].activity = "computing";
    }
    d[0].step = 3;
    d[0].state = "waiting";
    d[0].ticks = 10;
    d[1].step = 2;
    d[1].state = "done";
    d[1].activity = "reading input";
    d[1].activity_age_ms = 2500;
    d[1].ticks = ticks1;
    d[2].state = "entered";
    d[2].step = 99; /* would be "the collective" if it were not ignored */
    st.job_id = (char *)job;
    st.attempt = attempt;
    st.state = "running";
    st.devices = dp;
    st.n_devices = 3;
    req.worker_id = "w1";
    req.instance_id = "i1";
    req.tasks = &sp;
    req.n_tasks = 1;
    ctu_call_ok(t, "Heartbeat", &req.base, (ProtobufCMessage **)&rep);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

/* Heartbeat every 100 ms (ticks1 unchanged) until the job is in `want` or ms passed; returns
 * whether it got there and leaves the reason in reason. */
static int beat_until(ctu *t, const char *job, unsigned a, uint64_t ticks1, const char *want,
                      int ms, char *reason)
{
    char st[16];

    for (int i = 0; i <= ms / 100; i++) {
        beat(t, job, a, ticks1);
        ctu_state(t, job, st, reason);
        if (strcmp(st, want) == 0)
            return 1;
        usleep(100000);
    }
    return 0;
}

/* Open the coordinator, register w1 (2 devices), submit a batch=2 job (spec fields `extra`
 * first, each followed by ", ") and return its first attempt. */
static unsigned start_job(ctu *t, const char *extra, char *job)
{
    char spec[512];
    unsigned a;

    snprintf(spec, sizeof(spec),
             "{%s\"steps\": 10, \"mesh\": {\"batch\": 2}, \"model\": {\"input_shape\": [4], "
             "\"layers\": [{\"type\": \"dense\", \"units\": 2}]}}",
             extra);
    ctu_open(t);
    ctu_register(t, "w1", "i1", 2);
    ctu_submit(t, spec, 0, job);
    a = ctu_wait_assignment(t, "w1", "i1", job);
    assert_int_not_equal(a, 0);
    return a;
}

/* The job's diagnosis as GetJob gives it (256 bytes). */
static void job_diagnosis(ctu *t, const char *job, char *diag)
{
    Meshtrain__GetJobReply *rep = ctu_get_job(t, job);

    snprintf(diag, 256, "%s", rep->job->diagnosis);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

static void test_coord_stall_detection_and_recovery(void **state)
{
    ctu *t = calloc(1, sizeof(*t));
    char job[32], st[16], reason[256], diag[256];
    unsigned a;
    (void)state;

    t->stall_timeout_ms = 1700; /* > COORD_STALL_FRESH_MS(200) = 1600 */
    a = start_job(t, "", job);
    assert_true(beat_until(t, job, a, 7, "RUNNING", 2000, reason));
    /* nothing moves while w1 heartbeats: STALLED, naming cpu:1 (rank 9 ignored) */
    assert_true(beat_until(t, job, a, 7, "STALLED", 3000, reason));
    assert_string_equal(reason, "step 3 allreduce #0 on axis batch: w1 cpu:1 never entered; its "
                                "last activity: reading input 2 s ago");
    job_diagnosis(t, job, diag);
    assert_string_equal(diag, "device stuck: step 3 allreduce #0 on axis batch: w1 cpu:1 never "
                              "entered; its last activity: reading input 2 s ago");
    /* rank 1 advances: RUNNING again, nothing to diagnose */
    assert_true(beat_until(t, job, a, 8, "RUNNING", 2000, reason));
    assert_non_null(strstr(reason, "progress resumed"));
    job_diagnosis(t, job, diag);
    assert_string_equal(diag, "");
    /* w1 goes silent (not yet lost): no progress, but no STALLED either; the diagnosis names it */
    usleep(2500 * 1000);
    ctu_state(t, job, st, reason);
    assert_string_equal(st, "RUNNING");
    job_diagnosis(t, job, diag);
    assert_true(strncmp(diag, "device stuck: worker w1 (", 25) == 0);
    /* it heartbeats again, still without progress: STALLED; then its task succeeds */
    assert_true(beat_until(t, job, a, 8, "STALLED", 2000, reason));
    assert_int_equal(ctu_update(t, "w1", "i1", job, a, "succeeded", NULL), MT_OK);
    ctu_state(t, job, st, reason);
    assert_string_equal(st, "SUCCEEDED");
    ctu_destroy(t);
    free(t);
}

/* The event of j in `state` whose reason contains `needle`, copied to reason; 1 when found. */
static int has_event(ctu *t, const char *job, const char *state, const char *needle, char *reason)
{
    Meshtrain__GetJobRequest req = MESHTRAIN__GET_JOB_REQUEST__INIT;
    Meshtrain__GetJobReply *rep = NULL;
    int found = 0;

    req.job_id = (char *)job;
    ctu_call_ok(t, "GetJob", &req.base, (ProtobufCMessage **)&rep);
    for (size_t i = 0; i < rep->n_events && !found; i++)
        if (strcmp(rep->events[i]->state, state) == 0 &&
            strstr(rep->events[i]->reason, needle) != NULL) {
            snprintf(reason, 256, "%s", rep->events[i]->reason);
            found = 1;
        }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return found;
}

/* STALLED for stall_restart_ms more with a rank waiting in a collective: restarted like a lost
 * worker (RESTARTING with the diagnosis, then a new attempt); past max_restarts: FAILED. */
static void test_coord_stall_restarts_then_fails(void **state)
{
    ctu *t = calloc(1, sizeof(*t));
    char job[32], st[16], reason[256];
    unsigned a, a2;
    (void)state;

    t->stall_timeout_ms = 1700;
    t->stall_restart_ms = 800;
    a = start_job(t, "\"restart\": {\"max_restarts\": 1}, ", job);
    assert_true(beat_until(t, job, a, 7, "STALLED", 5000, reason));
    /* no progress: after 0.8 s more the attempt is dropped and the job placed again */
    for (int i = 0; i < 40 && !has_event(t, job, "RESTARTING", "stalled for", reason); i++)
        beat(t, job, a, 7), usleep(100000);
    assert_non_null(strstr(reason, "stalled for "));
    assert_non_null(strstr(reason, "w1 cpu:1 never entered"));
    a2 = ctu_wait_assignment(t, "w1", "i1", job);
    assert_true(a2 > a);
    /* the second attempt stalls too: the restart limit (1) is reached, FAILED */
    assert_true(beat_until(t, job, a2, 7, "RUNNING", 2000, reason));
    assert_true(beat_until(t, job, a2, 7, "FAILED", 6000, reason));
    assert_non_null(strstr(reason, "stalled for "));
    assert_non_null(strstr(reason, "restart limit of 1 reached"));
    ctu_state(t, job, st, NULL);
    assert_string_equal(st, "FAILED");
    ctu_destroy(t);
    free(t);
}

/* The diagnosis kind: every device inside a collective over two workers is a link A<->B (also
 * when one side finished the collective and waits in the next: a partition, issue 19 fault 7,
 * used to blame the side still in the earlier one); a device outside every collective (or a
 * group on one worker) is a stuck device; three workers or more name them all. */
static void test_coord_stall_classify_link_vs_device(void **state)
{
    coord_stall_dev link[4] = {
        dev("wa", 0, 30, 4, "waiting", "computing", 9000),
        dev("wa", 1, 30, 4, "waiting", "computing", 9000),
        dev("wb", 0, 30, 4, "chunk", "computing", 9000),
        dev("wb", 1, 30, 4, "waiting", "computing", 9000),
    };
    coord_stall_dev stuck[2] = {
        dev("wa", 0, 30, 4, "waiting", "computing", 9000),
        dev("wb", 0, 30, 3, "done", "computing", 15000),
    };
    coord_stall_dev cut[2] = {
        dev("wa", 0, 100, 0, "waiting", "computing", 4000),
        dev("wb", 0, 101, 0, "waiting", "computing", 3000),
    };
    coord_stall_dev three[3] = {
        dev("wa", 0, 8, 1, "waiting", "computing", 1000),
        dev("wb", 0, 8, 1, "waiting", "computing", 1000),
        dev("wc", 0, 8, 1, "waiting", "computing", 1000),
    };
    char out[256];
    (void)state;

    coord_stall_classify(link, 4, NOW, out, sizeof(out));
    assert_string_equal(out, "link wa<->wb: step 30 allreduce #4 on axis batch: all 4 devices "
                             "entered; no data moved for 12 s; every worker heartbeats (not a "
                             "stuck device)");
    coord_stall_classify(stuck, 2, NOW, out, sizeof(out));
    assert_string_equal(out, "device stuck: step 30 allreduce #4 on axis batch: wb cpu:0 never "
                             "entered; its last activity: computing 15 s ago");
    coord_stall_classify(cut, 2, NOW, out, sizeof(out));
    assert_string_equal(out, "link wa<->wb: step 101 allreduce #0 on axis batch: wa cpu:0 is still "
                             "in step 100 allreduce #0 on axis batch (waiting for 12 s); every "
                             "worker heartbeats (not a stuck device)");
    coord_stall_classify(link, 2, NOW, out, sizeof(out)); /* one worker alone */
    assert_true(strncmp(out, "device stuck: ", 14) == 0);
    coord_stall_classify(three, 3, NOW, out, sizeof(out));
    assert_true(strncmp(out, "a link among wa, wb, wc: step 8 allreduce #1", 44) == 0);
    coord_stall_classify(three, 3, NOW, out, 10); /* truncated, terminated */
    assert_int_equal(strlen(out), 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coord_stall_names_the_device_that_never_entered),
        cmocka_unit_test(test_coord_stall_the_latest_collective_wins),
        cmocka_unit_test(test_coord_stall_several_missing_devices),
        cmocka_unit_test(test_coord_stall_everyone_entered),
        cmocka_unit_test(test_coord_stall_no_collective_in_progress),
        cmocka_unit_test(test_coord_stall_unknown_axis_and_truncation),
        cmocka_unit_test(test_coord_stall_classify_link_vs_device),
        cmocka_unit_test(test_coord_stall_detection_and_recovery),
        cmocka_unit_test(test_coord_stall_restarts_then_fails),
    };
    return MT_RUN_TESTS(tests);
}
