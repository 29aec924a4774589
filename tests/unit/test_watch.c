/* SPDX-License-Identifier: MIT */
/*
 * test_watch.c — core/watch against a real coordinator running in this process (mt_coord on a
 * thread, loopback, temp state dir): history then live without duplicate at the seam, the final
 * event, OUT_OF_RANGE after it, DEADLINE_EXCEEDED when nothing comes, NOT_FOUND for an unknown
 * job, and a finished job's history ending with its final state.
 */
#include "mt_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/coord.h"
#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"
#include "watch/mt_watch.h"

#define SVC (&meshtrain__coordinator__descriptor)

typedef struct fixture {
    char dir[64];
    mt_coord *c;
    pthread_t th;
    mt_rpc_client *cli;
    char job[32];
    unsigned attempt;
} fixture;

static void *run_coord(void *arg)
{
    mt_coord_run(arg, NULL);
    return NULL;
}

static void call_ok(fixture *f, const char *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
    mt_err err = MT_ERR_INIT;
    mt_code rc = mt_rpc_client_call(f->cli, SVC, m, req, rep, 5000, &err);

    if (rc != MT_OK)
        print_error("%s: %s: %s\n", m, mt_code_name(rc), err.msg);
    assert_int_equal(rc, MT_OK);
}

static void heartbeat(fixture *f, const char *state)
{
    Meshtrain__HeartbeatRequest req = MESHTRAIN__HEARTBEAT_REQUEST__INIT;
    Meshtrain__HeartbeatReply *rep = NULL;
    Meshtrain__TaskStatus st = MESHTRAIN__TASK_STATUS__INIT, *sp = &st;

    req.worker_id = "w";
    req.instance_id = "i1";
    if (state != NULL) {
        st.job_id = f->job;
        st.attempt = f->attempt;
        st.state = (char *)state;
        req.tasks = &sp;
        req.n_tasks = 1;
    }
    call_ok(f, "Heartbeat", &req.base, (ProtobufCMessage **)&rep);
    if (rep->n_assignments > 0)
        f->attempt = rep->assignments[0]->attempt;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

/* Report one point per name in names (NULL-terminated) at each step in [from, to]. */
static void report(fixture *f, uint64_t from, uint64_t to, const char *const *names)
{
    Meshtrain__ReportMetricsRequest req = MESHTRAIN__REPORT_METRICS_REQUEST__INIT;
    Meshtrain__ReportMetricsReply *rep = NULL;
    Meshtrain__MetricPoint pts[32], *pp[32];
    size_t n = 0;

    for (uint64_t s = from; s <= to; s++) {
        for (int k = 0; names[k] != NULL && n < 32; k++) {
            meshtrain__metric_point__init(&pts[n]);
            pts[n].step = s;
            pts[n].name = (char *)names[k];
            pts[n].value = (double)s;
            pp[n] = &pts[n];
            n++;
        }
    }
    req.job_id = f->job;
    req.points = pp;
    req.n_points = n;
    call_ok(f, "ReportMetrics", &req.base, (ProtobufCMessage **)&rep);
    assert_int_equal(rep->stored, n);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

static void finish(fixture *f)
{
    Meshtrain__UpdateTaskRequest req = MESHTRAIN__UPDATE_TASK_REQUEST__INIT;
    Meshtrain__UpdateTaskReply *rep = NULL;
    Meshtrain__TaskStatus st = MESHTRAIN__TASK_STATUS__INIT;

    st.job_id = f->job;
    st.attempt = f->attempt;
    st.state = "succeeded";
    req.worker_id = "w";
    req.instance_id = "i1";
    req.task = &st;
    call_ok(f, "UpdateTask", &req.base, (ProtobufCMessage **)&rep);
    assert_string_equal(rep->job_state, "SUCCEEDED");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    mt_coord_opts o = MT_COORD_OPTS_DEFAULTS;
    mt_rpc_client_opts co = MT_RPC_CLIENT_OPTS_DEFAULTS;
    mt_err err = MT_ERR_INIT;
    char ep[128], url[256];
    FILE *fp;
    const char *spec = "{\"steps\": 10, \"model\": {\"input_shape\": [4], \"layers\": "
                       "[{\"type\": \"dense\", \"units\": 2}]}}";

    snprintf(f->dir, sizeof(f->dir), "/tmp/mt-watch.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    o.listen = "tcp://127.0.0.1:0";
    o.http = "";
    o.state_dir = f->dir;
    o.heartbeat_interval_ms = 200;
    o.heartbeat_timeout_ms = 30000;
    o.sync_full = 0;
    assert_int_equal(mt_coord_open(&o, &f->c, &err), MT_OK);
    assert_int_equal(pthread_create(&f->th, NULL, run_coord, f->c), 0);
    snprintf(ep, sizeof(ep), "%s/endpoints.json", f->dir);
    fp = fopen(ep, "r");
    assert_non_null(fp);
    assert_int_equal(fscanf(fp, "{\"rpc\": \"%255[^\"]\"", url), 1);
    fclose(fp);
    co.url = url;
    assert_int_equal(mt_rpc_client_open(&co, &f->cli, &err), MT_OK);

    /* a worker with one device, a one-device job placed on it and running */
    Meshtrain__RegisterWorkerRequest rr = MESHTRAIN__REGISTER_WORKER_REQUEST__INIT;
    Meshtrain__RegisterWorkerReply *rrep = NULL;
    Meshtrain__Device d = MESHTRAIN__DEVICE__INIT, *dp = &d;
    d.kind = "cpu";
    d.health = "ok";
    rr.name = "w";
    rr.instance_id = "i1";
    rr.devices = &dp;
    rr.n_devices = 1;
    call_ok(f, "RegisterWorker", &rr.base, (ProtobufCMessage **)&rrep);
    protobuf_c_message_free_unpacked(&rrep->base, NULL);
    Meshtrain__SubmitJobRequest sr = MESHTRAIN__SUBMIT_JOB_REQUEST__INIT;
    Meshtrain__SubmitJobReply *srep = NULL;
    sr.spec_json = (char *)spec;
    call_ok(f, "SubmitJob", &sr.base, (ProtobufCMessage **)&srep);
    snprintf(f->job, sizeof(f->job), "%s", srep->job_id);
    protobuf_c_message_free_unpacked(&srep->base, NULL);
    for (int i = 0; i < 100 && f->attempt == 0; i++) { /* scheduled after the submit's drain */
        heartbeat(f, NULL);
        if (f->attempt == 0)
            usleep(10000);
    }
    assert_int_equal(f->attempt, 1);
    heartbeat(f, "running");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char cmd[128];

    mt_rpc_client_close(f->cli);
    mt_coord_stop(f->c);
    pthread_join(f->th, NULL);
    mt_coord_free(f->c);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        print_error("could not remove %s\n", f->dir);
    free(f);
    return 0;
}

static void test_watch_history_then_live_without_duplicates(void **state)
{
    fixture *f = *state;
    static const char *const loss[] = {"loss", NULL}, *const both[] = {"loss", "acc", NULL};
    mt_watch *w = NULL;
    mt_watch_event ev;
    mt_err err = MT_ERR_INIT;

    report(f, 1, 3, loss);
    assert_int_equal(mt_watch_open(f->cli, f->job, 0, 5000, &w, &err), MT_OK);
    /* stored and published after the subscription, before the history is read: the history
     * has them and the live copies must be dropped at the seam (step 3) */
    report(f, 3, 3, both);
    assert_int_equal(mt_watch_next(w, 1000, &ev, &err), MT_OK);
    assert_false(ev.live);
    assert_false(ev.final);
    assert_int_equal(ev.n_points, 4); /* 1 loss, 2 loss, 3 acc, 3 loss */
    assert_int_equal(ev.points[0].step, 1);
    assert_int_equal(ev.points[3].step, 3);
    /* the live copies of step 3 come through empty; then step 4 */
    report(f, 4, 4, loss);
    size_t live = 0;
    uint64_t last = 0;
    for (int i = 0; i < 10 && last < 4; i++) {
        mt_code rc = mt_watch_next(w, 2000, &ev, &err);
        assert_int_equal(rc, MT_OK);
        assert_true(ev.live);
        for (size_t k = 0; k < ev.n_points; k++) {
            assert_int_equal(ev.points[k].step, 4); /* never 3 again */
            last = ev.points[k].step;
            live++;
        }
    }
    assert_int_equal(live, 1);
    /* nothing more: DEADLINE_EXCEEDED, the watch stays usable */
    assert_int_equal(mt_watch_next(w, 100, &ev, &err), MT_DEADLINE_EXCEEDED);
    finish(f);
    assert_int_equal(mt_watch_next(w, 2000, &ev, &err), MT_OK);
    assert_true(ev.final);
    assert_string_equal(ev.state, "SUCCEEDED");
    assert_int_equal(mt_watch_next(w, 100, &ev, &err), MT_OUT_OF_RANGE);
    mt_watch_close(w);
}

static void test_watch_finished_job_and_since_step(void **state)
{
    fixture *f = *state;
    static const char *const loss[] = {"loss", NULL};
    mt_watch *w = NULL;
    mt_watch_event ev;
    mt_err err = MT_ERR_INIT;

    report(f, 1, 6, loss);
    finish(f);
    assert_int_equal(mt_watch_open(f->cli, f->job, 4, 5000, &w, &err), MT_OK);
    assert_int_equal(mt_watch_next(w, 1000, &ev, &err), MT_OK);
    assert_int_equal(ev.n_points, 3); /* steps 4, 5, 6 */
    assert_int_equal(ev.points[0].step, 4);
    assert_true(ev.final); /* it had ended: the history carries the final state */
    assert_string_equal(ev.state, "SUCCEEDED");
    assert_int_equal(mt_watch_next(w, 100, &ev, &err), MT_OUT_OF_RANGE);
    mt_watch_close(w);
}

static void test_watch_unknown_job_and_bad_arguments(void **state)
{
    fixture *f = *state;
    mt_watch *w = (mt_watch *)1;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_watch_open(f->cli, "job-999999", 0, 5000, &w, &err), MT_NOT_FOUND);
    assert_null(w);
    assert_int_equal(mt_watch_open(NULL, "job-1", 0, 5000, &w, &err), MT_INVALID_ARGUMENT);
    mt_watch_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_watch_history_then_live_without_duplicates, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_watch_finished_job_and_since_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_unknown_job_and_bad_arguments, setup, teardown),
    };
    return MT_RUN_TESTS(tests);
}
