/* SPDX-License-Identifier: MIT */
/*
 * test_coord_jobs.c — the coordinator's job state machine and scheduler through its RPCs, with a
 * real coordinator in this process (coord_test_util.h): priority then submission order, the
 * "needs N devices" reason, task reports driving SCHEDULED -> RUNNING -> SUCCEEDED/FAILED,
 * reconciled cancellations, a lost worker (RESTARTING; back as a new process: attempt 2; FAILED
 * once restart.max_restarts is used up), and a coordinator restart that re-sends a SCHEDULED
 * job's assignment and re-attaches a RUNNING one. kill -9 is in tests/integration/test_jobs.sh.
 */
#include "mt_test.h"

#include "coord_test_util.h"
#include "store_test_util.h"

#define SPEC(extra)                                                                                \
    "{\"steps\": 10, \"model\": {\"input_shape\": [4], \"layers\": [{\"type\": \"dense\", "        \
    "\"units\": 2}]}" extra "}"

static int setup(void **state)
{
    ctu *t = calloc(1, sizeof(*t));

    ctu_open(t);
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    ctu_destroy(*state);
    free(*state);
    return 0;
}

static void expect_state(ctu *t, const char *job, const char *want)
{
    char st[16], reason[256];

    for (int i = 0; i < 500; i++) { /* transitions after a drain are applied within ms */
        ctu_state(t, job, st, reason);
        if (strcmp(st, want) == 0)
            return;
        usleep(10000);
    }
    print_error("job %s: state %s (%s), want %s\n", job, st, reason, want);
    fail();
}

static void run_to_success(ctu *t, const char *w, const char *inst, const char *job)
{
    unsigned a = ctu_wait_assignment(t, w, inst, job);
    Meshtrain__HeartbeatReply *rep;

    assert_int_not_equal(a, 0);
    rep = ctu_heartbeat(t, w, inst, job, a, "running");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    expect_state(t, job, "RUNNING");
    assert_int_equal(ctu_update(t, w, inst, job, a, "succeeded", NULL), MT_OK);
    expect_state(t, job, "SUCCEEDED");
}

static void test_coord_jobs_priority_then_submission_order(void **state)
{
    ctu *t = *state;
    char a[32], b[32], c[32], st[16], reason[256];

    ctu_submit(t, SPEC(""), 0, a);
    ctu_submit(t, SPEC(""), 5, b);
    ctu_submit(t, SPEC(""), 5, c);
    ctu_state(t, a, st, reason);
    assert_string_equal(st, "QUEUED");
    expect_state(t, a, "QUEUED");
    for (int i = 0; i < 100 && strcmp(reason, "needs 1 devices, 0 registered") != 0; i++) {
        usleep(10000);
        ctu_state(t, a, st, reason);
    }
    assert_string_equal(reason, "needs 1 devices, 0 registered");
    ctu_register(t, "w", "i1", 1); /* one device: the jobs run one after the other */
    run_to_success(t, "w", "i1", b);
    ctu_state(t, c, st, reason);
    ctu_state(t, a, st, reason);
    assert_string_equal(st, "QUEUED"); /* behind c */
    run_to_success(t, "w", "i1", c);
    run_to_success(t, "w", "i1", a);
}

/* A worker's data plane serves one job at a time: two 1-device jobs and one 2-device worker run
 * one after the other (placed together, the second failed "data plane already serves another
 * world" in the worker). */
static void test_coord_jobs_one_job_per_worker(void **state)
{
    ctu *t = *state;
    char a[32], b[32], st[16], reason[256];
    Meshtrain__GetJobReply *g;

    ctu_register(t, "w", "i1", 2);
    ctu_submit(t, SPEC(""), 0, a);
    ctu_submit(t, SPEC(""), 0, b);
    assert_int_not_equal(ctu_wait_assignment(t, "w", "i1", a), 0);
    expect_state(t, a, "SCHEDULED");
    ctu_state(t, b, st, reason);
    for (int i = 0; i < 500 && strncmp(reason, "waiting for", 11) != 0; i++) {
        usleep(10000);
        ctu_state(t, b, st, reason);
    }
    assert_string_equal(st, "QUEUED");
    assert_string_equal(reason, "waiting for 1 free devices (0 free of 2)");
    g = ctu_get_job(t, a);
    assert_int_equal(g->n_placement, 1);
    protobuf_c_message_free_unpacked(&g->base, NULL);
    run_to_success(t, "w", "i1", a);
    run_to_success(t, "w", "i1", b); /* the worker is free again: b takes it */
}

static void test_coord_jobs_task_failure_and_cancel_reconciliation(void **state)
{
    ctu *t = *state;
    char j1[32], j2[32], st[16], reason[256];
    Meshtrain__HeartbeatReply *rep;
    unsigned a;

    ctu_register(t, "w", "i1", 1);
    ctu_submit(t, SPEC(""), 0, j1);
    a = ctu_wait_assignment(t, "w", "i1", j1);
    assert_int_equal(a, 1);
    expect_state(t, j1, "SCHEDULED");
    assert_int_equal(ctu_update(t, "w", "i1", j1, a, "failed", "out of coffee"), MT_OK);
    expect_state(t, j1, "FAILED");
    ctu_state(t, j1, st, reason);
    assert_string_equal(reason, "worker w: out of coffee");

    /* a running job is cancelled: the worker's next report of it gets a TaskCancel */
    ctu_submit(t, SPEC(""), 0, j2);
    a = ctu_wait_assignment(t, "w", "i1", j2);
    rep = ctu_heartbeat(t, "w", "i1", j2, a, "running");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    expect_state(t, j2, "RUNNING");
    Meshtrain__CancelJobRequest cr = MESHTRAIN__CANCEL_JOB_REQUEST__INIT;
    Meshtrain__CancelJobReply *crep = NULL;
    cr.job_id = j2;
    ctu_call_ok(t, "CancelJob", &cr.base, (ProtobufCMessage **)&crep);
    assert_string_equal(crep->state, "CANCELLED");
    protobuf_c_message_free_unpacked(&crep->base, NULL);
    rep = ctu_heartbeat(t, "w", "i1", j2, a, "running");
    assert_int_equal(rep->n_cancellations, 1);
    assert_string_equal(rep->cancellations[0]->job_id, j2);
    assert_int_equal(rep->cancellations[0]->attempt, a);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    /* a report for a task the coordinator no longer runs */
    assert_int_equal(ctu_update(t, "w", "i1", j2, a, "running", NULL), MT_FAILED_PRECONDITION);
    assert_int_equal(ctu_update(t, "w", "other-instance", j2, a, "running", NULL),
                     MT_FAILED_PRECONDITION);
}

static void test_coord_jobs_lost_worker_restarts_then_fails(void **state)
{
    ctu *t = *state;
    char job[32], st[16], reason[256];
    Meshtrain__HeartbeatReply *rep;
    unsigned a;

    ctu_close(t);
    t->hb_timeout_ms = 300; /* silent for 300 ms = lost */
    ctu_open(t);
    ctu_register(t, "w", "i1", 2);
    ctu_submit(t, SPEC(", \"mesh\": {\"batch\": 2}, \"restart\": {\"max_restarts\": 1}"), 0, job);
    a = ctu_wait_assignment(t, "w", "i1", job);
    assert_int_equal(a, 1);
    rep = ctu_heartbeat(t, "w", "i1", job, a, "running");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    expect_state(t, job, "RUNNING");

    /* the worker goes silent: lost -> RESTARTING (the event says why), waiting for devices */
    expect_state(t, job, "RESTARTING");
    Meshtrain__GetJobRequest gr = MESHTRAIN__GET_JOB_REQUEST__INIT;
    Meshtrain__GetJobReply *grep_ = NULL;
    gr.job_id = job;
    ctu_call_ok(t, "GetJob", &gr.base, (ProtobufCMessage **)&grep_);
    assert_int_equal(grep_->n_events, 4);
    assert_string_equal(grep_->events[3]->state, "RESTARTING");
    assert_string_equal(grep_->events[3]->reason, "worker w lost (no heartbeat)");
    protobuf_c_message_free_unpacked(&grep_->base, NULL);
    for (int i = 0; i < 100 && strcmp(reason, "needs 2 devices, 0 registered") != 0; i++) {
        usleep(10000);
        ctu_state(t, job, st, reason);
    }
    assert_string_equal(reason, "needs 2 devices, 0 registered");
    /* it comes back as a new process: placed again with attempt 2 */
    ctu_register(t, "w", "i2", 2);
    a = ctu_wait_assignment(t, "w", "i2", job);
    assert_int_equal(a, 2);
    /* the old attempt's report gets a cancellation; the new one runs */
    rep = ctu_heartbeat(t, "w", "i2", job, 1, "running");
    assert_int_equal(rep->n_cancellations, 1);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    rep = ctu_heartbeat(t, "w", "i2", job, 2, "running");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    expect_state(t, job, "RUNNING");

    /* lost again: max_restarts (1) is used up -> FAILED with the cause */
    expect_state(t, job, "FAILED");
    ctu_state(t, job, st, reason);
    assert_non_null(strstr(reason, "restart limit of 1 reached"));
}

static void test_coord_jobs_coordinator_restart_reattaches(void **state)
{
    ctu *t = *state;
    char sched[32], run[32];
    Meshtrain__HeartbeatReply *rep;
    unsigned a;

    /* two workers: a worker runs one job at a time (test_coord_jobs_one_job_per_worker) */
    ctu_register(t, "w", "i1", 1);
    ctu_submit(t, SPEC(""), 0, run);
    a = ctu_wait_assignment(t, "w", "i1", run);
    rep = ctu_heartbeat(t, "w", "i1", run, a, "running");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    expect_state(t, run, "RUNNING");
    ctu_register(t, "v", "i2", 1);
    ctu_submit(t, SPEC(""), 0, sched);
    assert_int_equal(ctu_wait_assignment(t, "v", "i2", sched), 1);
    expect_state(t, sched, "SCHEDULED");

    ctu_close(t); /* same dir, same port */
    ctu_open(t);
    expect_state(t, run, "RUNNING");
    expect_state(t, sched, "SCHEDULED");
    /* the same worker processes re-register: nothing restarts; the unacknowledged assignment is
     * handed out again with the same attempt; the running one is not */
    ctu_register(t, "w", "i1", 1);
    ctu_register(t, "v", "i2", 1);
    rep = ctu_heartbeat(t, "w", "i1", run, a, "running");
    assert_int_equal(rep->n_assignments, 0);
    assert_int_equal(rep->n_cancellations, 0);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    rep = ctu_heartbeat(t, "v", "i2", NULL, 0, NULL);
    assert_int_equal(rep->n_assignments, 1);
    assert_string_equal(rep->assignments[0]->job_id, sched);
    assert_int_equal(rep->assignments[0]->attempt, 1);
    assert_int_equal(rep->assignments[0]->n_devices, 1);
    assert_int_equal(rep->assignments[0]->n_ranks, 1);
    assert_int_equal(rep->n_cancellations, 0);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    assert_int_equal(ctu_update(t, "w", "i1", run, a, "succeeded", NULL), MT_OK);
    expect_state(t, run, "SUCCEEDED");
    rep = ctu_heartbeat(t, "v", "i2", sched, 1, "running");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    expect_state(t, sched, "RUNNING");
}

static void test_coord_jobs_submit_refuses_invalid_specs(void **state)
{
    ctu *t = *state;
    Meshtrain__SubmitJobRequest req = MESHTRAIN__SUBMIT_JOB_REQUEST__INIT;
    Meshtrain__SubmitJobReply *rep = NULL;
    Meshtrain__ListJobsRequest lr = MESHTRAIN__LIST_JOBS_REQUEST__INIT;
    Meshtrain__ListJobsReply *lrep = NULL;
    mt_err err = MT_ERR_INIT;
    char name[200];

    req.spec_json = SPEC(", \"mesh\": {\"batch\": -1}");
    assert_int_equal(ctu_call(t, "SubmitJob", &req.base, (ProtobufCMessage **)&rep, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "mesh.batch"));
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    req.spec_json = SPEC("");
    req.name = name;
    assert_int_equal(ctu_call(t, "SubmitJob", &req.base, (ProtobufCMessage **)&rep, &err),
                     MT_INVALID_ARGUMENT);
    ctu_call_ok(t, "ListJobs", &lr.base, (ProtobufCMessage **)&lrep);
    assert_int_equal(lrep->n_jobs, 0);
    protobuf_c_message_free_unpacked(&lrep->base, NULL);
    lr.state = "BOGUS";
    assert_int_equal(ctu_call(t, "ListJobs", &lr.base, (ProtobufCMessage **)&lrep, &err),
                     MT_INVALID_ARGUMENT);
}

/* The mesh of a job as GetJob and ListJobs give it (mesh 64 bytes). */
static void job_mesh(ctu *t, const char *job, char *mesh, unsigned *devices)
{
    Meshtrain__GetJobReply *rep = ctu_get_job(t, job);
    Meshtrain__ListJobsRequest lr = MESHTRAIN__LIST_JOBS_REQUEST__INIT;
    Meshtrain__ListJobsReply *lrep = NULL;

    snprintf(mesh, 64, "%s", rep->job->mesh);
    *devices = rep->job->devices;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    ctu_call_ok(t, "ListJobs", &lr.base, (ProtobufCMessage **)&lrep);
    for (size_t i = 0; i < lrep->n_jobs; i++)
        if (strcmp(lrep->jobs[i]->job_id, job) == 0) { /* the listing agrees */
            assert_string_equal(lrep->jobs[i]->mesh, mesh);
            assert_int_equal(lrep->jobs[i]->devices, *devices);
        }
    protobuf_c_message_free_unpacked(&lrep->base, NULL);
}

/* The mesh text and device count are stored at submit (issue 17: the coordinator does not parse
 * a stored spec again); a database of schema 7 (before those columns) is migrated at open and
 * its finished jobs still show their mesh. */
static void test_coord_jobs_mesh_stored_and_old_database_migrates(void **state)
{
    ctu *t = *state;
    char job[32], mesh[64], db[128], st[16];
    unsigned devices = 0;
    Meshtrain__CancelJobRequest cr = MESHTRAIN__CANCEL_JOB_REQUEST__INIT;
    Meshtrain__CancelJobReply *crep = NULL;

    ctu_submit(t, SPEC(", \"mesh\": {\"batch\": 2, \"model\": 3}"), 0, job);
    cr.job_id = job;
    ctu_call_ok(t, "CancelJob", &cr.base, (ProtobufCMessage **)&crep);
    protobuf_c_message_free_unpacked(&crep->base, NULL);
    expect_state(t, job, "CANCELLED");
    job_mesh(t, job, mesh, &devices);
    assert_string_equal(mesh, "batch=2,model=3");
    assert_int_equal(devices, 6);
    ctu_close(t);
    snprintf(db, sizeof(db), "%s/meshtrain.db", t->dir);
    assert_int_equal(store_raw_int(db, "SELECT devices FROM jobs"), 6);
    /* turn it into what the schema-7 coordinator wrote */
    assert_int_equal(store_raw_exec(db, "ALTER TABLE jobs DROP COLUMN mesh;"
                                        "ALTER TABLE jobs DROP COLUMN devices;"
                                        "ALTER TABLE jobs DROP COLUMN diagnosis;"
                                        "DROP TABLE job_logs; DROP TABLE job_digests;"
                                        "ALTER TABLE placements DROP COLUMN task_state;"
                                        "DELETE FROM schema_migrations WHERE version >= 8;"
                                        "PRAGMA user_version = 7;"),
                     SQLITE_OK);
    ctu_open(t);
    ctu_state(t, job, st, NULL);
    assert_string_equal(st, "CANCELLED");
    job_mesh(t, job, mesh, &devices);
    assert_string_equal(mesh, "batch=2,model=3");
    assert_int_equal(devices, 6);
    assert_int_equal(store_raw_int(db, "PRAGMA user_version"), MT_STORE_SCHEMA_VERSION);
    assert_int_equal(store_raw_int(db, "SELECT count(*) FROM jobs WHERE devices = 0"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_coord_jobs_priority_then_submission_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_coord_jobs_one_job_per_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_coord_jobs_task_failure_and_cancel_reconciliation,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_coord_jobs_lost_worker_restarts_then_fails, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_coord_jobs_coordinator_restart_reattaches, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_coord_jobs_submit_refuses_invalid_specs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_coord_jobs_mesh_stored_and_old_database_migrates,
                                        setup, teardown),
    };
    return MT_RUN_TESTS(tests);
}
