/* SPDX-License-Identifier: MIT */
/*
 * coord_test_util.h — a real coordinator in the test process (mt_coord on a thread, loopback,
 * temp state dir) and RPC helpers acting as workers and clients. Used by test_watch.c and
 * test_coord_jobs.c. Include after mt_test.h.
 */
#ifndef MT_COORD_TEST_UTIL_H
#define MT_COORD_TEST_UTIL_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/coord.h"
#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"

#define CTU_SVC (&meshtrain__coordinator__descriptor)

typedef struct ctu {
    char dir[64];
    char url[256];
    mt_coord *c;
    pthread_t th;
    mt_rpc_client *cli;
    int hb_timeout_ms;    /* 0 = 30 s (nobody is lost during a test) */
    int stall_timeout_ms; /* 0 = the coordinator's default */
    int stall_restart_ms; /* 0 = the coordinator's default, < 0 = never */
} ctu;

static inline void *ctu_run_(void *arg)
{
    mt_coord_run(arg, NULL);
    return NULL;
}

/* Open (or reopen on the same dir and port) the coordinator and connect a client. */
static inline void ctu_open(ctu *t)
{
    mt_coord_opts o = MT_COORD_OPTS_DEFAULTS;
    mt_rpc_client_opts co = MT_RPC_CLIENT_OPTS_DEFAULTS;
    mt_err err = MT_ERR_INIT;
    char ep[128];
    FILE *fp;

    if (t->dir[0] == '\0') {
        snprintf(t->dir, sizeof(t->dir), "/tmp/mt-coordtest.XXXXXX");
        assert_non_null(mkdtemp(t->dir));
    }
    o.listen = t->url[0] ? t->url : "tcp://127.0.0.1:0";
    o.http = "";
    o.state_dir = t->dir;
    o.heartbeat_interval_ms = 200;
    o.heartbeat_timeout_ms = t->hb_timeout_ms ? t->hb_timeout_ms : 30000;
    o.sync_full = 0;
    if (t->stall_timeout_ms > 0)
        o.stall_timeout_ms = t->stall_timeout_ms;
    if (t->stall_restart_ms != 0)
        o.stall_restart_ms = t->stall_restart_ms < 0 ? 0 : t->stall_restart_ms;
    if (mt_coord_open(&o, &t->c, &err) != MT_OK)
        print_error("coordinator: %s\n", err.msg);
    assert_non_null(t->c);
    assert_int_equal(pthread_create(&t->th, NULL, ctu_run_, t->c), 0);
    snprintf(ep, sizeof(ep), "%s/endpoints.json", t->dir);
    fp = fopen(ep, "r");
    assert_non_null(fp);
    assert_int_equal(fscanf(fp, "{\"rpc\": \"%255[^\"]\"", t->url), 1);
    fclose(fp);
    co.url = t->url;
    assert_int_equal(mt_rpc_client_open(&co, &t->cli, &err), MT_OK);
}

/* Stop the coordinator cleanly (the state dir stays). */
static inline void ctu_close(ctu *t)
{
    mt_rpc_client_close(t->cli);
    t->cli = NULL;
    mt_coord_stop(t->c);
    pthread_join(t->th, NULL);
    mt_coord_free(t->c);
    t->c = NULL;
}

/* Close and remove the state dir. */
static inline void ctu_destroy(ctu *t)
{
    char cmd[128];

    if (t->c != NULL)
        ctu_close(t);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    if (system(cmd) != 0)
        print_error("could not remove %s\n", t->dir);
}

static inline mt_code ctu_call(ctu *t, const char *m, const ProtobufCMessage *req,
                               ProtobufCMessage **rep, mt_err *err)
{
    return mt_rpc_client_call(t->cli, CTU_SVC, m, req, rep, 5000, err);
}

static inline void ctu_call_ok(ctu *t, const char *m, const ProtobufCMessage *req,
                               ProtobufCMessage **rep)
{
    mt_err err = MT_ERR_INIT;
    mt_code rc = ctu_call(t, m, req, rep, &err);

    if (rc != MT_OK)
        print_error("%s: %s: %s\n", m, mt_code_name(rc), err.msg);
    assert_int_equal(rc, MT_OK);
}

static inline void ctu_register(ctu *t, const char *name, const char *inst, size_t ndev)
{
    Meshtrain__RegisterWorkerRequest req = MESHTRAIN__REGISTER_WORKER_REQUEST__INIT;
    Meshtrain__RegisterWorkerReply *rep = NULL;
    Meshtrain__Device d[8], *dp[8];

    for (size_t i = 0; i < ndev && i < 8; i++) {
        meshtrain__device__init(&d[i]);
        d[i].kind = "cpu";
        d[i].index = (uint32_t)i;
        d[i].health = "ok";
        dp[i] = &d[i];
    }
    req.name = (char *)name;
    req.instance_id = (char *)inst;
    req.devices = dp;
    req.n_devices = ndev;
    ctu_call_ok(t, "RegisterWorker", &req.base, (ProtobufCMessage **)&rep);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

/* Heartbeat of worker name/inst reporting (job, attempt, state) when job != NULL. Returns the
 * reply (owned: protobuf_c_message_free_unpacked). */
static inline Meshtrain__HeartbeatReply *ctu_heartbeat(ctu *t, const char *name, const char *inst,
                                                       const char *job, unsigned attempt,
                                                       const char *state)
{
    Meshtrain__HeartbeatRequest req = MESHTRAIN__HEARTBEAT_REQUEST__INIT;
    Meshtrain__HeartbeatReply *rep = NULL;
    Meshtrain__TaskStatus st = MESHTRAIN__TASK_STATUS__INIT, *sp = &st;

    req.worker_id = (char *)name;
    req.instance_id = (char *)inst;
    if (job != NULL) {
        st.job_id = (char *)job;
        st.attempt = attempt;
        st.state = (char *)state;
        req.tasks = &sp;
        req.n_tasks = 1;
    }
    ctu_call_ok(t, "Heartbeat", &req.base, (ProtobufCMessage **)&rep);
    return rep;
}

/* Heartbeat until the reply assigns `job` (any job when NULL); returns its attempt (0 if none
 * came within ~5 s). */
static inline unsigned ctu_wait_assignment(ctu *t, const char *name, const char *inst,
                                           const char *job)
{
    for (int i = 0; i < 500; i++) {
        Meshtrain__HeartbeatReply *rep = ctu_heartbeat(t, name, inst, NULL, 0, NULL);
        unsigned a = 0;
        for (size_t k = 0; k < rep->n_assignments; k++)
            if (job == NULL || strcmp(rep->assignments[k]->job_id, job) == 0)
                a = rep->assignments[k]->attempt;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        if (a != 0)
            return a;
        usleep(10000);
    }
    return 0;
}

/* Submit spec with priority; the new id goes to job (32 bytes). */
static inline void ctu_submit(ctu *t, const char *spec, int prio, char *job)
{
    Meshtrain__SubmitJobRequest req = MESHTRAIN__SUBMIT_JOB_REQUEST__INIT;
    Meshtrain__SubmitJobReply *rep = NULL;

    req.spec_json = (char *)spec;
    req.priority = prio;
    ctu_call_ok(t, "SubmitJob", &req.base, (ProtobufCMessage **)&rep);
    snprintf(job, 32, "%s", rep->job_id);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

/* GetJob of job (must succeed); free with protobuf_c_message_free_unpacked. */
static inline Meshtrain__GetJobReply *ctu_get_job(ctu *t, const char *job)
{
    Meshtrain__GetJobRequest req = MESHTRAIN__GET_JOB_REQUEST__INIT;
    Meshtrain__GetJobReply *rep = NULL;

    req.job_id = (char *)job;
    ctu_call_ok(t, "GetJob", &req.base, (ProtobufCMessage **)&rep);
    return rep;
}

/* The job's state and reason (reason may be NULL; 256 bytes). */
static inline void ctu_state(ctu *t, const char *job, char *state, char *reason)
{
    Meshtrain__GetJobReply *rep = ctu_get_job(t, job);

    snprintf(state, 16, "%s", rep->job->state);
    if (reason != NULL)
        snprintf(reason, 256, "%s", rep->job->reason);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
}

/* Report a task state at once (UpdateTask); returns the code. */
static inline mt_code ctu_update(ctu *t, const char *name, const char *inst, const char *job,
                                 unsigned attempt, const char *state, const char *error)
{
    Meshtrain__UpdateTaskRequest req = MESHTRAIN__UPDATE_TASK_REQUEST__INIT;
    Meshtrain__UpdateTaskReply *rep = NULL;
    Meshtrain__TaskStatus st = MESHTRAIN__TASK_STATUS__INIT;
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    st.job_id = (char *)job;
    st.attempt = attempt;
    st.state = (char *)state;
    st.error = (char *)(error ? error : "");
    req.worker_id = (char *)name;
    req.instance_id = (char *)inst;
    req.task = &st;
    rc = ctu_call(t, "UpdateTask", &req.base, (ProtobufCMessage **)&rep, &err);
    if (rep != NULL)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc;
}

#endif
