/* SPDX-License-Identifier: MIT */
/*
 * test_watch.c — core/watch against a real coordinator running in this process (mt_coord on a
 * thread, loopback, temp state dir): history then live without duplicate at the seam, the final
 * event, OUT_OF_RANGE after it, DEADLINE_EXCEEDED when nothing comes, NOT_FOUND for an unknown
 * job, a finished job's history ending with its final state, a restart's live state events
 * (RESTARTING, SCHEDULED again) after which redone steps below the seam come through, and the
 * restart scan over state histories (new and old reason texts) with its JSON form.
 */
#include "mt_test.h"

#include <cjson/cJSON.h>

#include "coord_test_util.h"
#include "watch/mt_watch.h"

typedef struct fixture {
    ctu t;
    char job[32];
    unsigned attempt;
} fixture;

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
    ctu_call_ok(&f->t, "ReportMetrics", &req.base, (ProtobufCMessage **)&rep);
    assert_int_equal(rep->stored, n);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

static void finish(fixture *f)
{
    assert_int_equal(ctu_update(&f->t, "w", "i1", f->job, f->attempt, "succeeded", NULL), MT_OK);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    Meshtrain__HeartbeatReply *rep;
    const char *spec = "{\"steps\": 10, \"model\": {\"input_shape\": [4], \"layers\": "
                       "[{\"type\": \"dense\", \"units\": 2}]}}";

    ctu_open(&f->t);
    /* a worker with one device, a one-device job placed on it and running */
    ctu_register(&f->t, "w", "i1", 1);
    ctu_submit(&f->t, spec, 0, f->job);
    f->attempt = ctu_wait_assignment(&f->t, "w", "i1", f->job);
    assert_int_equal(f->attempt, 1);
    rep = ctu_heartbeat(&f->t, "w", "i1", f->job, f->attempt, "running");
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;

    ctu_destroy(&f->t);
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
    assert_int_equal(mt_watch_open(f->t.cli, f->job, 0, 5000, &w, &err), MT_OK);
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
    assert_int_equal(mt_watch_open(f->t.cli, f->job, 4, 5000, &w, &err), MT_OK);
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

    assert_int_equal(mt_watch_open(f->t.cli, "job-999999", 0, 5000, &w, &err), MT_NOT_FOUND);
    assert_null(w);
    assert_int_equal(mt_watch_open(NULL, "job-1", 0, 5000, &w, &err), MT_INVALID_ARGUMENT);
    mt_watch_close(NULL);
}

static void test_watch_restart_state_events_and_redone_steps(void **state)
{
    fixture *f = *state;
    static const char *const loss[] = {"loss", NULL};
    mt_watch *w = NULL;
    mt_watch_event ev;
    mt_err err = MT_ERR_INIT;
    mt_watch_restart_scan scan;
    mt_watch_restart r;
    bool restarted = false, restarting = false;
    size_t redone = 0;

    report(f, 1, 5, loss);
    ctu_close(&f->t); /* again with a short heartbeat timeout: silent for 300 ms = lost */
    f->t.hb_timeout_ms = 300;
    ctu_open(&f->t);
    Meshtrain__HeartbeatReply *hb = ctu_heartbeat(&f->t, "w", "i1", f->job, 1, "running");
    protobuf_c_message_free_unpacked(&hb->base, NULL);
    assert_int_equal(mt_watch_open(f->t.cli, f->job, 0, 5000, &w, &err), MT_OK);
    assert_int_equal(mt_watch_next(w, 1000, &ev, &err), MT_OK);
    assert_int_equal(ev.n_points, 5); /* the seam is at step 5 */
    /* the worker goes silent (RESTARTING), then comes back as a new process: the job restarts
     * on it (attempt 2, no checkpoint: from step 0) */
    for (int i = 0; i < 200 && !restarting; i++) {
        char st[16], why[256];
        usleep(10000);
        ctu_state(&f->t, f->job, st, why);
        restarting = strcmp(st, "RESTARTING") == 0;
    }
    assert_true(restarting);
    restarting = false;
    ctu_register(&f->t, "w", "i2", 1);
    assert_int_equal(ctu_wait_assignment(&f->t, "w", "i2", f->job), 2);
    mt_watch_restart_scan_init(&scan);
    for (int i = 0; i < 10 && !restarted; i++) {
        assert_int_equal(mt_watch_next(w, 2000, &ev, &err), MT_OK);
        assert_true(ev.live);
        assert_false(ev.final);
        assert_int_equal(ev.n_points, 0);
        if (strcmp(ev.state, "RESTARTING") == 0) {
            restarting = true;
            assert_non_null(strstr(ev.error, "worker w"));
        }
        restarted = mt_watch_restart_scan_event(&scan, ev.state, ev.error, 0, 0, &r);
    }
    assert_true(restarting);
    assert_true(restarted);
    assert_int_equal(r.number, 1);
    assert_int_equal(r.attempt, 2);
    assert_int_equal(r.resume_step, 0);
    assert_non_null(strstr(r.cause, "worker w"));
    /* attempt 2 redoes steps 1..2, below the seam: they come through live */
    report(f, 1, 2, loss);
    for (int i = 0; i < 10 && redone < 2; i++) {
        assert_int_equal(mt_watch_next(w, 2000, &ev, &err), MT_OK);
        for (size_t k = 0; k < ev.n_points; k++)
            assert_int_equal(ev.points[k].step, ++redone);
    }
    assert_int_equal(redone, 2);
    mt_watch_close(w);
}

/* Feed (state, reason, step) rows; return how many restarts came out, the last in *last. */
static int scan_rows(const char *const rows[][2], size_t n, mt_watch_restart *last)
{
    mt_watch_restart_scan s;
    mt_watch_restart r;
    int found = 0;

    mt_watch_restart_scan_init(&s);
    for (size_t i = 0; i < n; i++) {
        if (mt_watch_restart_scan_event(&s, rows[i][0], rows[i][1], (int64_t)i, 10 * i, &r)) {
            *last = r;
            found++;
        }
    }
    return found;
}

static void test_watch_restart_scan_reads_histories(void **state)
{
    static const char *const fresh[][2] = {
        {"QUEUED", "submitted"},
        {"SCHEDULED", "placed on 2 workers (attempt 1)"},
        {"RUNNING", "all 2 tasks started (attempt 1)"},
        {"RESTARTING", "worker w2 lost (no heartbeat for 3.0 s)"},
        {"SCHEDULED", "placed on 1 worker (attempt 2, resuming from a checkpoint at step 40, "
                      "elastic: mesh batch=1, was batch=2)"},
        {"RUNNING", "all 1 tasks started (attempt 2)"},
        {"RESTARTING", "coordinator restarted"},
        {"SCHEDULED", "placed on 1 worker (attempt 3, starting over from step 0)"},
    };
    static const char *const old[][2] = {
        {"RESTARTING", "worker w2 lost"},
        {"SCHEDULED", "placed on 1 worker (attempt 2, resuming from a checkpoint)"},
        {"SCHEDULED", NULL},
        {NULL, "ignored"},
    };
    static const char *const init[][2] = {
        {"SCHEDULED", "placed on 1 worker (attempt 1, starting from the checkpoint of job-3 "
                      "(init_from) at step 6)"},
        {"RESTARTING", "worker w lost"},
        {"SCHEDULED", "placed on 1 worker (attempt 2, starting from the checkpoint of job-3 "
                      "(init_from) at step 6)"},
    };
    mt_watch_restart r;
    (void)state;

    assert_int_equal(scan_rows(fresh, 5, &r), 1);
    assert_int_equal(r.number, 1);
    assert_int_equal(r.attempt, 2);
    assert_int_equal(r.resume_step, 40);
    assert_int_equal(r.lost_step, 30); /* the RESTARTING row's step */
    assert_int_equal(r.time_ms, 4);
    assert_string_equal(r.cause, "worker w2 lost (no heartbeat for 3.0 s)");
    assert_int_equal(scan_rows(fresh, 8, &r), 2);
    assert_int_equal(r.number, 2);
    assert_int_equal(r.resume_step, 0);
    assert_string_equal(r.cause, "coordinator restarted");
    /* a history written before the step was: resumed from an unknown checkpoint */
    assert_int_equal(scan_rows(old, 4, &r), 1);
    assert_int_equal(r.resume_step, -1);
    assert_int_equal(scan_rows(init, 3, &r), 1);
    assert_int_equal(r.number, 1);
    assert_int_equal(r.resume_step, 6);

    cJSON *o = mt_watch_restart_json(&r);
    char *txt = cJSON_PrintUnformatted(o);
    assert_string_equal(txt, "{\"restart\":1,\"attempt\":2,\"time_ms\":2,\"resume_step\":6,"
                             "\"lost_step\":10,\"cause\":\"worker w lost\"}");
    cJSON_free(txt);
    cJSON_Delete(o);
    r.resume_step = -1;
    o = mt_watch_restart_json(&r);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "resume_step")));
    cJSON_Delete(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_watch_history_then_live_without_duplicates, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_watch_finished_job_and_since_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_unknown_job_and_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_restart_state_events_and_redone_steps, setup,
                                        teardown),
        cmocka_unit_test(test_watch_restart_scan_reads_histories),
    };
    return MT_RUN_TESTS(tests);
}
