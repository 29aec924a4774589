/* SPDX-License-Identifier: MIT */
/*
 * mt_fakeworker.c — a fake worker and two checkers for tests/integration/test_jobs.sh.
 *
 *   mt_fakeworker run URL NAME DEVICES ACK_LOG [STEP_MS]
 *       registers DEVICES devices, heartbeats every 200 ms, accepts assignments and "trains":
 *       one step per STEP_MS (default 20), the spec's "steps" in total; the task holding rank 0
 *       reports metrics loss/accuracy every 5 steps and uploads a checkpoint (2 chunks) at every
 *       checkpoint.every_steps; appends each ACKNOWLEDGED point ("M job step name") and
 *       checkpoint ("C job step") to ACK_LOG; reports running/succeeded. Survives coordinator
 *       restarts (retries, re-registers, keeps its tasks). Runs until killed.
 *       Env (issue 19 fault 7, test_fault_link.sh): MT_FAKE_DATA_ADDRESS registers that data-plane
 *       address (default tcp://127.0.0.1:1); MT_FAKE_LINK_FAIL="ADDR@STEP" fails every task
 *       whose rank table holds ADDR STEP steps into its attempt with "UNAVAILABLE: ... (ADDR)
 *       ..." (a broken link).
 *   mt_fakeworker verify URL ACK_LOG
 *       checks that every acknowledged point and checkpoint in ACK_LOG is in the coordinator.
 *   mt_fakeworker badinput URL JOB
 *       sends bad metric reports and checkpoint chunks for the active JOB and checks each code.
 *   mt_fakeworker watch URL JOB SINCE
 *       follows JOB with core/watch from step SINCE; prints "P step name live|history MS" per
 *       point (MS: milliseconds from the report's timestamp to its arrival here) and
 *       "FINAL state" at the end.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "clock/mt_clock.h"
#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"
#include "watch/mt_watch.h"

#define SVC (&meshtrain__coordinator__descriptor)

typedef struct task {
    char job_id[32];
    unsigned attempt;
    int rank0;
    uint64_t step, total, ckpt_every;
    char state[16];
    int final_sent;
    uint64_t fail_at; /* MT_FAKE_LINK_FAIL: fail at this step (0: never) */
    char error[512];
} task;

static task tasks[16];
static int ntasks;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static mt_rpc_client *connect_to(const char *url)
{
    mt_rpc_client_opts o = MT_RPC_CLIENT_OPTS_DEFAULTS;
    mt_rpc_client *c = NULL;

    o.url = url;
    o.connect_timeout_ms = 1000;
    while (mt_rpc_client_open(&o, &c, NULL) != MT_OK)
        sleep_ms(100);
    return c;
}

static mt_code call(mt_rpc_client *c, const char *m, const ProtobufCMessage *req,
                    ProtobufCMessage **rep, mt_err *err)
{
    return mt_rpc_client_call(c, SVC, m, req, rep, 2000, err);
}

static int do_register(mt_rpc_client *c, const char *name, const char *inst, int ndev,
                       char *coord_inst)
{
    Meshtrain__RegisterWorkerRequest req = MESHTRAIN__REGISTER_WORKER_REQUEST__INIT;
    Meshtrain__RegisterWorkerReply *rep = NULL;
    Meshtrain__Device devs[16], *dp[16];

    for (int i = 0; i < ndev; i++) {
        meshtrain__device__init(&devs[i]);
        devs[i].kind = "cpu";
        devs[i].index = (uint32_t)i;
        devs[i].cores = 1;
        devs[i].health = "ok";
        dp[i] = &devs[i];
    }
    req.name = (char *)name;
    req.instance_id = (char *)inst;
    req.host = "localhost";
    req.pid = (uint32_t)getpid();
    req.devices = dp;
    req.n_devices = (size_t)ndev;
    req.data_address =
        getenv("MT_FAKE_DATA_ADDRESS") ? getenv("MT_FAKE_DATA_ADDRESS") : "tcp://127.0.0.1:1";
    req.version = "fake";
    if (call(c, "RegisterWorker", &req.base, (ProtobufCMessage **)&rep, NULL) != MT_OK)
        return -1;
    snprintf(coord_inst, 64, "%s", rep->coordinator_instance);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return 0;
}

static void on_assignment(const Meshtrain__TaskAssignment *a)
{
    cJSON *spec;
    task *t;

    for (int i = 0; i < ntasks; i++)
        if (tasks[i].attempt == a->attempt && strcmp(tasks[i].job_id, a->job_id) == 0)
            return;
    if (ntasks == 16)
        return;
    t = &tasks[ntasks++];
    memset(t, 0, sizeof(*t));
    snprintf(t->job_id, sizeof(t->job_id), "%s", a->job_id);
    t->attempt = a->attempt;
    t->step = a->resume_step;
    t->total = 100;
    spec = cJSON_Parse(a->spec_json);
    if (spec != NULL) {
        cJSON *s = cJSON_GetObjectItem(spec, "steps"),
              *ck = cJSON_GetObjectItem(spec, "checkpoint");
        if (cJSON_IsNumber(s))
            t->total = (uint64_t)s->valuedouble;
        if (ck != NULL && cJSON_IsNumber(cJSON_GetObjectItem(ck, "every_steps")))
            t->ckpt_every = (uint64_t)cJSON_GetObjectItem(ck, "every_steps")->valuedouble;
        cJSON_Delete(spec);
    }
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i]->rank == 0)
            t->rank0 = 1;
    if (getenv("MT_FAKE_LINK_FAIL") != NULL) {
        char peer[200];
        unsigned long long at = 0;
        const char *v = getenv("MT_FAKE_LINK_FAIL"), *sep = strrchr(v, '@');
        if (sep != NULL && (size_t)(sep - v) < sizeof(peer)) {
            snprintf(peer, sizeof(peer), "%.*s", (int)(sep - v), v);
            at = strtoull(sep + 1, NULL, 10);
            for (size_t i = 0; i < a->n_ranks; i++)
                if (strcmp(a->ranks[i]->data_address, peer) == 0) {
                    t->fail_at = a->resume_step + at;
                    snprintf(t->error, sizeof(t->error),
                             "UNAVAILABLE: allreduce step %llu on axis batch: the link to rank %u "
                             "(%s) broke",
                             (unsigned long long)t->fail_at, a->ranks[i]->rank, peer);
                }
        }
    }
    snprintf(t->state, sizeof(t->state), "running");
    fprintf(stderr, "fakeworker: %s attempt %u from step %llu, rank0=%d\n", t->job_id, t->attempt,
            (unsigned long long)t->step, t->rank0);
}

static void on_cancel(const Meshtrain__TaskCancel *x)
{
    for (int i = 0; i < ntasks; i++)
        if (tasks[i].attempt == x->attempt && strcmp(tasks[i].job_id, x->job_id) == 0)
            snprintf(tasks[i].state, sizeof(tasks[i].state), "cancelled");
}

/* 0 ok, 1 register again, -1 unreachable */
static int do_heartbeat(mt_rpc_client *c, const char *name, const char *inst,
                        const char *coord_inst)
{
    Meshtrain__HeartbeatRequest req = MESHTRAIN__HEARTBEAT_REQUEST__INIT;
    Meshtrain__HeartbeatReply *rep = NULL;
    Meshtrain__TaskStatus st[16], *sp[16];
    int n = 0, again;

    for (int i = 0; i < ntasks; i++) {
        if (strcmp(tasks[i].state, "running") != 0)
            continue;
        meshtrain__task_status__init(&st[n]);
        st[n].job_id = tasks[i].job_id;
        st[n].state = tasks[i].state;
        st[n].step = tasks[i].step;
        st[n].attempt = tasks[i].attempt;
        sp[n] = &st[n];
        n++;
    }
    req.worker_id = (char *)name;
    req.instance_id = (char *)inst;
    req.tasks = sp;
    req.n_tasks = (size_t)n;
    if (call(c, "Heartbeat", &req.base, (ProtobufCMessage **)&rep, NULL) != MT_OK)
        return -1;
    again = rep->reregister || strcmp(rep->coordinator_instance, coord_inst) != 0;
    for (size_t i = 0; i < rep->n_cancellations; i++)
        on_cancel(rep->cancellations[i]);
    for (size_t i = 0; i < rep->n_assignments; i++)
        on_assignment(rep->assignments[i]);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return again;
}

static int report(mt_rpc_client *c, const char *name, task *t, uint64_t from, uint64_t to,
                  FILE *acks)
{
    Meshtrain__ReportMetricsRequest req = MESHTRAIN__REPORT_METRICS_REQUEST__INIT;
    Meshtrain__ReportMetricsReply *rep = NULL;
    Meshtrain__MetricPoint pts[64], *pp[64];
    size_t n = 0;

    for (uint64_t s = from; s <= to && n + 2 <= 64; s++) {
        for (int k = 0; k < 2; k++) {
            meshtrain__metric_point__init(&pts[n]);
            pts[n].step = s;
            pts[n].name = k ? "accuracy" : "loss";
            pts[n].value = k ? 0.5 + (double)s / (2.0 * (double)t->total) : 2.0 / (double)s;
            pts[n].time_ms = mt_clock_wall_ms();
            pp[n] = &pts[n];
            n++;
        }
    }
    req.worker_id = (char *)name;
    req.job_id = t->job_id;
    req.points = pp;
    req.n_points = n;
    if (call(c, "ReportMetrics", &req.base, (ProtobufCMessage **)&rep, NULL) != MT_OK)
        return -1;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    for (size_t i = 0; i < n; i++)
        fprintf(acks, "M %s %llu %s\n", t->job_id, (unsigned long long)pts[i].step, pts[i].name);
    fflush(acks);
    return 0;
}

static int upload(mt_rpc_client *c, const char *name, task *t, FILE *acks)
{
    uint8_t data[3000];
    uLong crc = crc32(0L, Z_NULL, 0);
    char sum[32];

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(t->step * 31 + i);
    crc = crc32(crc, data, sizeof(data));
    snprintf(sum, sizeof(sum), "crc32:%08lx", (unsigned long)crc);
    for (int part = 0; part < 2; part++) {
        Meshtrain__PutCheckpointChunkRequest req = MESHTRAIN__PUT_CHECKPOINT_CHUNK_REQUEST__INIT;
        Meshtrain__PutCheckpointChunkReply *rep = NULL;
        req.worker_id = (char *)name;
        req.job_id = t->job_id;
        req.step = t->step;
        req.offset = part ? 1000 : 0;
        req.data.data = data + req.offset;
        req.data.len = part ? 2000 : 1000;
        req.last = part == 1;
        req.total_size = sizeof(data);
        req.checksum = part ? sum : "";
        mt_code rc = call(c, "PutCheckpointChunk", &req.base, (ProtobufCMessage **)&rep, NULL);
        /* a coordinator killed after storing the checkpoint but before its reply: the retry
         * finds it complete (as worker/task.c, that is an acknowledgement) */
        if (rc == MT_ALREADY_EXISTS)
            break;
        if (rc != MT_OK)
            return -1;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    fprintf(acks, "C %s %llu\n", t->job_id, (unsigned long long)t->step);
    fflush(acks);
    return 0;
}

static int update_final(mt_rpc_client *c, const char *name, const char *inst, task *t)
{
    Meshtrain__UpdateTaskRequest req = MESHTRAIN__UPDATE_TASK_REQUEST__INIT;
    Meshtrain__UpdateTaskReply *rep = NULL;
    Meshtrain__TaskStatus st = MESHTRAIN__TASK_STATUS__INIT;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    st.job_id = t->job_id;
    st.state = t->state;
    st.step = t->step;
    st.attempt = t->attempt;
    st.error = t->error;
    req.worker_id = (char *)name;
    req.instance_id = (char *)inst;
    req.task = &st;
    rc = call(c, "UpdateTask", &req.base, (ProtobufCMessage **)&rep, &err);
    if (rc == MT_OK)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc == MT_OK || rc == MT_FAILED_PRECONDITION ? 0 : -1;
}

static int run(const char *url, const char *name, int ndev, const char *ack_path, int step_ms)
{
    FILE *acks = fopen(ack_path, "a");
    mt_rpc_client *c = connect_to(url);
    char inst[33], coord_inst[64] = "";
    int registered = 0;
    int64_t next_hb = 0;

    if (acks == NULL)
        return 2;
    snprintf(inst, sizeof(inst), "fake%d", (int)getpid());
    for (;;) {
        int64_t now = mt_clock_mono_ms();
        if (!registered) {
            if (do_register(c, name, inst, ndev, coord_inst) == 0)
                registered = 1;
            else
                sleep_ms(100);
            continue;
        }
        if (now >= next_hb) {
            int r = do_heartbeat(c, name, inst, coord_inst);
            if (r == 1)
                registered = 0;
            next_hb = now + 200;
        }
        for (int i = 0; i < ntasks; i++) {
            task *t = &tasks[i];
            if (strcmp(t->state, "running") == 0 && t->step < t->total) {
                t->step++;
                if (t->rank0 && (t->step % 5 == 0 || t->step == t->total))
                    while (report(c, name, t, t->step - (t->step % 5 ? t->step % 5 : 5) + 1,
                                  t->step, acks) != 0)
                        sleep_ms(100);
                if (t->rank0 && t->ckpt_every && t->step % t->ckpt_every == 0)
                    while (upload(c, name, t, acks) != 0)
                        sleep_ms(100);
                if (t->step == t->total)
                    snprintf(t->state, sizeof(t->state), "succeeded");
                if (t->fail_at != 0 && t->step == t->fail_at)
                    snprintf(t->state, sizeof(t->state), "failed");
            }
            if (strcmp(t->state, "running") != 0 && !t->final_sent &&
                update_final(c, name, inst, t) == 0) {
                t->final_sent = 1;
                if (t->rank0)
                    fprintf(acks, "S %s\n", t->job_id);
                fflush(acks);
            }
        }
        sleep_ms(step_ms);
    }
}

static int verify(const char *url, const char *ack_path)
{
    FILE *f = fopen(ack_path, "r");
    mt_rpc_client *c = connect_to(url);
    char line[256], kind[4], job[32], metric[64];
    unsigned long long step;
    long n_m = 0, n_c = 0, missing = 0;

    if (f == NULL)
        return 2;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%3s %31s %llu %63s", kind, job, &step, metric) == 4 &&
            strcmp(kind, "M") == 0) {
            Meshtrain__GetMetricsRequest req = MESHTRAIN__GET_METRICS_REQUEST__INIT;
            Meshtrain__GetMetricsReply *rep = NULL;
            char *names[1] = {metric};
            req.job_id = job;
            req.since_step = step;
            req.names = names;
            req.n_names = 1;
            req.limit = 1;
            n_m++;
            if (call(c, "GetMetrics", &req.base, (ProtobufCMessage **)&rep, NULL) != MT_OK ||
                rep->n_points != 1 || rep->points[0]->step != step) {
                printf("MISSING metric %s %llu %s\n", job, step, metric);
                missing++;
            }
            if (rep != NULL)
                protobuf_c_message_free_unpacked(&rep->base, NULL);
        } else if (sscanf(line, "%3s %31s %llu", kind, job, &step) == 3 && strcmp(kind, "C") == 0) {
            Meshtrain__GetCheckpointChunkRequest req =
                MESHTRAIN__GET_CHECKPOINT_CHUNK_REQUEST__INIT;
            Meshtrain__GetCheckpointChunkReply *rep = NULL;
            mt_err err = MT_ERR_INIT;
            mt_code rc;
            req.job_id = job;
            req.step = step;
            n_c++;
            rc = call(c, "GetCheckpointChunk", &req.base, (ProtobufCMessage **)&rep, &err);
            /* keep-N may have collected old ones: NOT_FOUND is fine for those */
            if (rc == MT_OK && (rep->total_size != 3000 || rep->data.len != 3000 ||
                                rep->data.data[7] != (uint8_t)(step * 31 + 7))) {
                printf("BAD checkpoint %s %llu\n", job, step);
                missing++;
            } else if (rc != MT_OK && rc != MT_NOT_FOUND) {
                printf("MISSING checkpoint %s %llu: %s\n", job, step, err.msg);
                missing++;
            }
            if (rep != NULL)
                protobuf_c_message_free_unpacked(&rep->base, NULL);
        }
    }
    fclose(f);
    mt_rpc_client_close(c);
    printf("verified %ld metric points, %ld checkpoints, %ld missing\n", n_m, n_c, missing);
    return missing ? 1 : 0;
}

static int watch(const char *url, const char *job, uint64_t since)
{
    mt_rpc_client *c = connect_to(url);
    mt_watch *w = NULL;
    mt_watch_event ev;
    mt_err err = MT_ERR_INIT;

    if (mt_watch_open(c, job, since, 2000, &w, &err) != MT_OK) {
        fprintf(stderr, "watch: %s: %s\n", mt_code_name(err.code), err.msg);
        mt_rpc_client_close(c);
        return 1;
    }
    for (;;) {
        mt_code rc = mt_watch_next(w, 1000, &ev, &err);
        if (rc == MT_DEADLINE_EXCEEDED)
            continue;
        if (rc != MT_OK) {
            fprintf(stderr, "watch: %s: %s\n", mt_code_name(rc), err.msg);
            break;
        }
        for (size_t i = 0; i < ev.n_points; i++) /* live: ms since the worker reported it */
            printf("P %llu %s %s %lld\n", (unsigned long long)ev.points[i].step, ev.points[i].name,
                   ev.live ? "live" : "history",
                   (long long)(mt_clock_wall_ms() - ev.points[i].time_ms));
        if (ev.final) {
            printf("FINAL %s\n", ev.state);
            break;
        }
    }
    fflush(stdout);
    mt_watch_close(w);
    mt_rpc_client_close(c);
    return 0;
}

static int expect(const char *what, mt_code got, mt_code want, const mt_err *err)
{
    printf("%-40s %s%s%s\n", what, mt_code_name(got), got == want ? "" : " (want ",
           got == want ? "" : mt_code_name(want));
    if (got != want)
        printf("    message: %s\n", err->msg);
    return got == want ? 0 : 1;
}

static mt_code put_chunk(mt_rpc_client *c, const char *job, uint64_t off, size_t len, int last,
                         const char *sum, mt_err *err)
{
    static uint8_t data[512];
    Meshtrain__PutCheckpointChunkRequest req = MESHTRAIN__PUT_CHECKPOINT_CHUNK_REQUEST__INIT;
    Meshtrain__PutCheckpointChunkReply *rep = NULL;
    mt_code rc;

    req.job_id = (char *)job;
    req.step = 7;
    req.offset = off;
    req.data.data = data;
    req.data.len = len;
    req.last = last;
    req.total_size = off + len;
    req.checksum = (char *)sum;
    rc = call(c, "PutCheckpointChunk", &req.base, (ProtobufCMessage **)&rep, err);
    if (rep != NULL)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc;
}

static mt_code report_one(mt_rpc_client *c, const char *job, const char *name, double v,
                          size_t copies, mt_err *err)
{
    Meshtrain__ReportMetricsRequest req = MESHTRAIN__REPORT_METRICS_REQUEST__INIT;
    Meshtrain__ReportMetricsReply *rep = NULL;
    Meshtrain__MetricPoint p = MESHTRAIN__METRIC_POINT__INIT;
    Meshtrain__MetricPoint **pp = calloc(copies, sizeof(*pp));
    mt_code rc;

    p.step = 1;
    p.name = (char *)name;
    p.value = v;
    for (size_t i = 0; i < copies; i++)
        pp[i] = &p;
    req.job_id = (char *)job;
    req.points = pp;
    req.n_points = copies;
    rc = call(c, "ReportMetrics", &req.base, (ProtobufCMessage **)&rep, err);
    if (rep != NULL)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    free(pp);
    return rc;
}

static int badinput(const char *url, const char *job)
{
    mt_rpc_client *c = connect_to(url);
    mt_err err = MT_ERR_INIT;
    char longname[80];
    int bad = 0;

    memset(longname, 'x', 64);
    longname[64] = '\0';
    bad += expect("metrics: NaN value", report_one(c, job, "loss", NAN, 1, &err),
                  MT_INVALID_ARGUMENT, &err);
    bad += expect("metrics: 64-byte name", report_one(c, job, longname, 1, 1, &err),
                  MT_INVALID_ARGUMENT, &err);
    bad += expect("metrics: 10001 points", report_one(c, job, "loss", 1, 10001, &err),
                  MT_RESOURCE_EXHAUSTED, &err);
    bad += expect("metrics: unknown job", report_one(c, "job-999999", "loss", 1, 1, &err),
                  MT_NOT_FOUND, &err);
    bad += expect("metrics: valid point", report_one(c, job, "loss", 1, 1, &err), MT_OK, &err);
    bad += expect("chunk: no upload started", put_chunk(c, job, 100, 10, 0, "", &err),
                  MT_FAILED_PRECONDITION, &err);
    bad += expect("chunk: first", put_chunk(c, job, 0, 100, 0, "", &err), MT_OK, &err);
    bad += expect("chunk: gap", put_chunk(c, job, 300, 100, 0, "", &err), MT_OUT_OF_RANGE, &err);
    bad += expect("chunk: wrong checksum", put_chunk(c, job, 100, 100, 1, "crc32:00000000", &err),
                  MT_DATA_LOSS, &err);
    bad += expect("chunk: after a discarded upload", put_chunk(c, job, 200, 10, 0, "", &err),
                  MT_FAILED_PRECONDITION, &err);
    mt_rpc_client_close(c);
    return bad ? 1 : 0;
}

static int num(const char *s)
{
    return (int)strtol(s, NULL, 10);
}

int main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "run") == 0)
        return run(argv[2], argv[3], num(argv[4]) > 0 && num(argv[4]) <= 16 ? num(argv[4]) : 1,
                   argv[5], argc > 6 ? num(argv[6]) : 20);
    if (argc == 4 && strcmp(argv[1], "verify") == 0)
        return verify(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "badinput") == 0)
        return badinput(argv[2], argv[3]);
    if (argc == 5 && strcmp(argv[1], "watch") == 0)
        return watch(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    fprintf(stderr, "usage: mt_fakeworker run URL NAME DEVICES ACK_LOG [STEP_MS] | verify URL "
                    "ACK_LOG | badinput URL JOB | watch URL JOB SINCE\n");
    return 2;
}
