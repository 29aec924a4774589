/* SPDX-License-Identifier: MIT */
/*
 * coord.c — the coordinator's loop: open/run/stop/free, the call queue that
 * moves RPCs from nng threads to the loop thread, dispatch by method, signals,
 * and the endpoints file. Contract and threading in coord.h.
 */
#include "coordinator/coord_rpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "log/mt_log.h"

/* coord.h and coord_int.h spell these without an RPC header (their cores see no protobuf-c.h) */
_Static_assert(MT_COORD_DEFAULT_MAX_MSG == MT_RPC_DEFAULT_MAX_MSG, "coord.h: RPC message cap");
_Static_assert(COORD_TOKEN_MAX == MT_RPC_TOKEN_MAX, "coord_int.h: token size");

typedef void (*coord_handler)(mt_coord *c, mt_rpc_call *call);

static const struct {
    const char *method;
    coord_handler fn;
} handlers[] = {
    {"RegisterWorker", coord_handle_register},
    {"Heartbeat", coord_handle_heartbeat},
    {"ListWorkers", coord_handle_list_workers},
    {"SubmitJob", coord_handle_submit_job},
    {"GetJob", coord_handle_get_job},
    {"ListJobs", coord_handle_list_jobs},
    {"CancelJob", coord_handle_cancel_job},
    {"UpdateTask", coord_handle_update_task},
    {"ReportMetrics", coord_handle_report_metrics},
    {"GetMetrics", coord_handle_get_metrics},
    {"GetJobLog", coord_handle_get_job_log},
    {"GetJobDigests", coord_handle_get_job_digests},
    {"PutCheckpointChunk", coord_handle_put_checkpoint_chunk},
    {"ListCheckpoints", coord_handle_list_checkpoints},
    {"GetCheckpointChunk", coord_handle_get_checkpoint_chunk},
};

/* nng thread: queue the call and wake the loop. Never blocks beyond the queue mutex. */
static void coord_on_call(void *arg, mt_rpc_call *call)
{
    mt_coord *c = arg;
    int ok = 1;

    pthread_mutex_lock(&c->qmu);
    if (c->qlen == c->qcap) {
        size_t cap = c->qcap ? c->qcap * 2 : 64;
        mt_rpc_call **q = mt_realloc(c->queue, cap * sizeof(*q));
        if (q == NULL) {
            ok = 0;
        } else {
            c->queue = q;
            c->qcap = cap;
        }
    }
    if (ok)
        c->queue[c->qlen++] = call;
    pthread_mutex_unlock(&c->qmu);
    if (!ok) {
        mt_rpc_call_reply(call, MT_RESOURCE_EXHAUSTED, "coordinator out of memory", NULL);
        return;
    }
    uv_async_send(&c->wake);
}

/* Any thread: count the answer for /metrics. */
static void coord_on_reply(void *arg, const char *method, mt_code code, int64_t elapsed_us)
{
    coord_stats_rpc(((mt_coord *)arg)->stats, method, code, elapsed_us);
}

static void dispatch(mt_coord *c, mt_rpc_call *call)
{
    const char *name = mt_rpc_call_method(call)->name;

    if (mt_rpc_call_expired(call)) {
        mt_rpc_call_reply(call, MT_DEADLINE_EXCEEDED, "deadline passed while queued", NULL);
        return;
    }
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
        if (strcmp(name, handlers[i].method) == 0) {
            handlers[i].fn(c, call);
            return;
        }
    }
    char msg[160];
    snprintf(msg, sizeof(msg), "Coordinator.%s is not served by this coordinator version", name);
    mt_rpc_call_reply(call, MT_UNIMPLEMENTED, msg, NULL);
}

/* Loop thread: drain the whole queue (uv_async wake-ups coalesce). */
static void on_wake(uv_async_t *h)
{
    mt_coord *c = h->data;

    for (;;) {
        mt_rpc_call **batch;
        size_t n;

        pthread_mutex_lock(&c->qmu);
        batch = c->queue;
        n = c->qlen;
        c->queue = NULL;
        c->qlen = c->qcap = 0;
        pthread_mutex_unlock(&c->qmu);
        if (n == 0) {
            mt_free(batch);
            coord_schedpass_run(c);
            return;
        }
        for (size_t i = 0; i < n; i++)
            dispatch(c, batch[i]);
        mt_free(batch);
        coord_metrics_flush(c); /* the batch's metric reports: one commit, then the replies */
    }
}

static void on_stop(uv_async_t *h)
{
    uv_stop(h->loop);
}

static void on_sweep(uv_timer_t *t)
{
    coord_sweep(t->data);
    coord_schedpass_run(t->data);
}

static void on_signal(uv_signal_t *s, int signum)
{
    mt_coord *c = s->data;

    mt_log_info("received %s, shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    uv_stop(&c->loop);
}

static mt_code make_dirs(const char *dir, mt_err *err)
{
    char path[1024];
    size_t n = strlen(dir);

    if (n == 0 || n >= sizeof(path))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "state dir '%s': invalid path", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] == '/' || path[i] == '\0') {
            char keep = path[i];
            path[i] = '\0';
            if (mkdir(path, 0700) != 0 && errno != EEXIST)
                return mt_err_set(err, MT_PERMISSION_DENIED, "create state dir %s: %s", path,
                                  strerror(errno));
            path[i] = keep;
        }
    }
    return MT_OK;
}

/* Write state_dir/endpoints.json atomically (temp file + rename). */
static mt_code write_endpoints(mt_coord *c, const char *http_url, mt_err *err)
{
    char tmp[1100], path[1100];
    FILE *f;

    snprintf(path, sizeof(path), "%s/endpoints.json", c->state_dir);
    snprintf(tmp, sizeof(tmp), "%s/.endpoints.json.tmp", c->state_dir);
    f = fopen(tmp, "w");
    if (f == NULL)
        return mt_err_set(err, MT_PERMISSION_DENIED, "write %s: %s", tmp, strerror(errno));
    fprintf(f,
            "{\"rpc\": \"%s\", \"http\": \"%s\", \"metrics\": \"%s\", \"pid\": %d, "
            "\"instance\": \"%s\"}\n",
            c->listen_url, http_url, c->metrics_url, (int)getpid(), c->instance);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return mt_err_set(err, MT_INTERNAL, "write %s: %s", path, strerror(errno));
    return MT_OK;
}

static void new_instance_id(char out[33])
{
    unsigned char b[16];
    static const char hex[] = "0123456789abcdef";

    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        int64_t t = mt_clock_mono_us() ^ (int64_t)getpid();
        memcpy(b, &t, sizeof(t));
        memcpy(b + 8, &t, sizeof(t));
    }
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}

/* true when addr ("scheme://HOST:PORT" or "HOST:PORT") is reachable only from this machine: a
 * loopback IP (127.0.0.0/8, ::1), "localhost", or no network at all (ipc://, inproc://). Any
 * other name counts as reachable: it is not resolved here. */
static bool addr_is_local(const char *addr)
{
    const char *sep = strstr(addr, "://"), *host = sep != NULL ? sep + 3 : addr, *colon;
    char h[256];
    size_t n;
    struct in_addr a4;
    struct in6_addr a6;

    if (strncmp(addr, "ipc://", 6) == 0 || strncmp(addr, "inproc://", 9) == 0)
        return true;
    colon = strrchr(host, ':');
    n = colon != NULL ? (size_t)(colon - host) : strlen(host);
    if (n >= sizeof(h))
        return false;
    memcpy(h, host, n);
    h[n] = '\0';
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        memmove(h, h + 1, n - 2);
        h[n - 2] = '\0';
    }
    if (strcmp(h, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    return inet_pton(AF_INET6, h, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

/* Redis's protected mode: no token and an address other machines reach is refused, unless
 * the operator said --insecure (then each such address is logged as a warning). */
static mt_code check_exposure(const mt_coord_opts *o, mt_err *err)
{
    const char *flag[] = {"--listen", "--http", "--metrics-listen"};
    const char *addr[] = {o->listen, o->http, o->metrics_listen};

    if (o->token != NULL && o->token[0] != '\0')
        return MT_OK;
    for (size_t i = 0; i < sizeof(addr) / sizeof(addr[0]); i++) {
        if (addr[i] == NULL || addr[i][0] == '\0' || addr_is_local(addr[i]))
            continue;
        if (!o->insecure)
            return mt_err_set(err, MT_FAILED_PRECONDITION,
                              "%s %s is reachable from other machines and there is no "
                              "--token-file: give one, listen on 127.0.0.1, or pass --insecure "
                              "(docs/security.md)",
                              flag[i], addr[i]);
        mt_log_warn("%s %s is reachable from other machines without a token (--insecure): "
                    "anyone who reaches it can register workers and submit or cancel jobs",
                    flag[i], addr[i]);
    }
    return MT_OK;
}

/* The core's hook for a job's move to RESTARTING, SCHEDULED again after a restart, or a final
 * state: a state change on its metrics stream (a final one ends it). */
static void job_moved(mt_coord *c, const char *job_id, const char *state, const char *error)
{
    coord_metrics_publish(c, job_id, NULL, 0, state, error);
}

mt_code mt_coord_open(const mt_coord_opts *opts, mt_coord **out, mt_err *err)
{
    mt_rpc_server_opts so = MT_RPC_SERVER_OPTS_DEFAULTS;
    char db[1100], http_url[300] = "";
    mt_coord *c;
    mt_code rc;

    *out = NULL;
    if ((rc = check_exposure(opts, err)) != MT_OK)
        return rc;
    c = mt_calloc(1, sizeof(*c));
    if (c == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coordinator: out of memory");
    c->opts = *opts;
    c->hooks.flush = coord_metrics_flush; /* the core (state.c) reaches the adapters only so */
    c->hooks.moved = job_moved;
    c->hooks.verify = coord_ckpt_verify;
    snprintf(c->state_dir, sizeof(c->state_dir), "%s", opts->state_dir);
    if (opts->token != NULL)
        snprintf(c->token, sizeof(c->token), "%s", opts->token);
    c->opts.state_dir = c->state_dir;
    c->opts.token = c->token[0] ? c->token : NULL;
    new_instance_id(c->instance);
    pthread_mutex_init(&c->qmu, NULL);
    pthread_mutex_init(&c->ro_mu, NULL);
    uv_loop_init(&c->loop);

    c->stats = coord_stats_new();
    if (c->stats == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coordinator: out of memory");
        goto fail;
    }
    if ((rc = make_dirs(c->state_dir, err)) != MT_OK)
        goto fail;
    snprintf(db, sizeof(db), "%s/meshtrain.db", c->state_dir);
    {
        mt_store_options so_db = MT_STORE_OPTIONS_DEFAULTS;
        so_db.sync_full = opts->sync_full;
        if ((rc = mt_store_open_opts(db, &so_db, &c->store, err)) != MT_OK)
            goto fail;
    }
    if ((rc = coord_workers_load(c, err)) != MT_OK)
        goto fail;
    if ((rc = coord_schedpass_reload(c, err)) != MT_OK)
        goto fail;
    (void)coord_ckpt_sweep_orphans(c);

    uv_async_init(&c->loop, &c->wake, on_wake);
    c->wake.data = c;
    uv_async_init(&c->loop, &c->stopper, on_stop);
    uv_timer_init(&c->loop, &c->sweep);
    c->sweep.data = c;
    uv_signal_init(&c->loop, &c->sigint);
    c->sigint.data = c;
    uv_signal_init(&c->loop, &c->sigterm);
    c->sigterm.data = c;
    c->handles_open = 1;

    so.url = opts->listen;
    so.service = &meshtrain__coordinator__descriptor;
    so.on_call = coord_on_call;
    so.arg = c;
    so.on_reply = coord_on_reply;
    so.token = c->opts.token;
    so.max_msg_bytes = opts->max_msg_bytes;
    so.tls = opts->tls;
    if ((rc = mt_rpc_server_open(&so, &c->rpc, err)) != MT_OK)
        goto fail;
    snprintf(c->listen_url, sizeof(c->listen_url), "%s", mt_rpc_server_url(c->rpc));
    /* the same service in-process, for the dashboard's actions (http_act.c): no TLS, same token */
    snprintf(c->local_url, sizeof(c->local_url), "inproc://meshtrain-coordinator-%s", c->instance);
    so.url = c->local_url;
    so.tls = NULL;
    so.contexts = 2;
    if ((rc = mt_rpc_server_open(&so, &c->rpc_local, err)) != MT_OK)
        goto fail;
    if ((rc = coord_metrics_open(c, err)) != MT_OK)
        goto fail;
    if (opts->http != NULL && opts->http[0] != '\0') {
        rc = coord_http_open(c, opts->http, &c->http, http_url, sizeof(http_url), err);
        if (rc != MT_OK)
            goto fail;
        c->mcache = coord_http_mcache(c->http);
    }
    if ((rc = write_endpoints(c, http_url, err)) != MT_OK)
        goto fail;
    mt_log_info("coordinator %s listening on %s%s%s, state in %s, %zu workers known", c->instance,
                c->listen_url, http_url[0] ? ", status on " : "", http_url, c->state_dir,
                c->n_workers);
    *out = c;
    return MT_OK;
fail:
    mt_coord_free(c);
    return rc;
}

mt_code mt_coord_run(mt_coord *c, mt_err *err)
{
    (void)err;
    uv_signal_start(&c->sigint, on_signal, SIGINT);
    uv_signal_start(&c->sigterm, on_signal, SIGTERM);
    uv_timer_start(&c->sweep, on_sweep, 250, 250);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    return MT_OK;
}

void mt_coord_stop(mt_coord *c)
{
    uv_async_send(&c->stopper); /* uv_stop itself is not thread-safe */
}

static void on_handle_closed(uv_handle_t *h)
{
    (void)h;
}

void mt_coord_free(mt_coord *c)
{
    if (c == NULL)
        return;
    /* phase 1: stop intake (RPC, HTTP), answer what is queued, close loop handles */
    mt_rpc_server_close(c->rpc);
    c->rpc = NULL;
    c->mcache = NULL; /* the HTTP server owns it */
    coord_http_close(c->http);
    c->http = NULL;
    mt_rpc_server_close(c->rpc_local); /* after HTTP: its actions call through it */
    c->rpc_local = NULL;
    pthread_mutex_lock(&c->qmu);
    for (size_t i = 0; i < c->qlen; i++)
        mt_rpc_call_reply(c->queue[i], MT_UNAVAILABLE, "coordinator shutting down", NULL);
    mt_free(c->queue);
    c->queue = NULL;
    c->qlen = c->qcap = 0;
    pthread_mutex_unlock(&c->qmu);
    if (c->handles_open) {
        uv_close((uv_handle_t *)&c->wake, on_handle_closed);
        uv_close((uv_handle_t *)&c->stopper, on_handle_closed);
        uv_close((uv_handle_t *)&c->sweep, on_handle_closed);
        uv_close((uv_handle_t *)&c->sigint, on_handle_closed);
        uv_close((uv_handle_t *)&c->sigterm, on_handle_closed);
        uv_run(&c->loop, UV_RUN_DEFAULT);
    }
    uv_loop_close(&c->loop);
    /* phase 2: persist and free */
    if (c->store != NULL)
        coord_sweep_workers(c);
    coord_metrics_close(c);
    coord_bulk_fini(c);
    coord_ckpt_free(c);
    coord_jobs_free(c);
    coord_workers_free(c);
    mt_store_close(c->store);
    coord_stats_free(c->stats);
    pthread_mutex_destroy(&c->qmu);
    pthread_mutex_destroy(&c->ro_mu);
    mt_free(c);
}
