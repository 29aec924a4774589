/* SPDX-License-Identifier: MIT */
/*
 * worker.c — registration and heartbeats of the worker daemon (worker.h).
 *
 * State machine on the loop thread: UNREGISTERED --RegisterWorker ok-->
 * REGISTERED --(reregister or new coordinator instance)--> UNREGISTERED.
 * A 'tick' timer fires every heartbeat interval (every second while
 * unregistered); if no RPC is in flight it queues one on the thread pool.
 * UNAVAILABLE is logged once per outage, not per retry.
 *
 * The data-plane address reported at registration must be one other hosts can dial
 * (docs/deploy.md, "The data-plane address"): with no --data-listen the worker listens on
 * the address its host uses to reach the coordinator (127.0.0.1 when the coordinator is on
 * loopback), on an ephemeral port; a listener on the wildcard 0.0.0.0 keeps listening
 * everywhere but reports that same address with its port.
 */
#include "worker/worker.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"
#include "coll/mt_coll.h"
#include "log/mt_log.h"
#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"
#include "tls/mt_tls.h"
#include "worker/task.h"
#include "worker/taskdir.h"

#define SVC (&meshtrain__coordinator__descriptor)

typedef enum { W_UNREGISTERED, W_REGISTERED } wstate;

struct mt_worker {
    mt_worker_opts opts;
    char name[64];
    char host[128];
    char coordinator[256];
    char token[MT_RPC_TOKEN_MAX];
    char data_listen[256];
    char instance[33];
    char worker_id[64];
    char coord_instance[64];
    int ndev;
    int cores_per_dev;
    uint64_t mem_per_dev;
    wstate state;
    int interval_ms;
    int outage_logged;
    int stopping;

    uv_loop_t loop;
    uv_timer_t tick;
    uv_signal_t sigint, sigterm;
    uv_async_t stopper;
    int busy; /* an RPC is running on the pool */
    uv_work_t work;

    mt_rpc_client *cli;  /* used only from pool work, one at a time */
    worker_tasks *tasks; /* assigned tasks and their statuses (task.h) */
    mt_coll_net *net;    /* data-plane listener, opened by mt_worker_open */

    /* result of the last pool job, read in after_work */
    mt_code rc;
    mt_err err;
    int reregister;
    char got_instance[64];
    char got_id[64];
    int got_interval;
};

static void random_hex(char out[33])
{
    unsigned char b[16];
    static const char hex[] = "0123456789abcdef";

    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        int64_t t = mt_clock_mono_us() ^ ((int64_t)getpid() << 20);
        memcpy(b, &t, 8);
        memcpy(b + 8, &t, 8);
    }
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}

/*
 * The IPv4 address this host uses to reach the coordinator at url ("tcp://HOST:PORT"): the
 * source address the kernel picks for a UDP socket connected there (nothing is sent). Writes
 * dotted decimal to ip. UNAVAILABLE when the host does not resolve or has no route.
 */
static mt_code ip_toward(const char *url, char ip[INET_ADDRSTRLEN], mt_err *err)
{
    struct addrinfo hints, *ai = NULL;
    struct sockaddr_in me;
    socklen_t len = sizeof(me);
    const char *hp = strstr(url, "://"), *colon;
    char host[256];
    int fd, rv;

    hp = hp != NULL ? hp + 3 : url;
    colon = strrchr(hp, ':');
    if (colon == NULL || colon == hp || (size_t)(colon - hp) >= sizeof(host))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coordinator %s: want tcp://HOST:PORT", url);
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    if ((rv = getaddrinfo(host, colon + 1, &hints, &ai)) != 0)
        return mt_err_set(err, MT_UNAVAILABLE, "coordinator host %s: %s", host, gai_strerror(rv));
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    rv = fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
         getsockname(fd, (struct sockaddr *)&me, &len) != 0;
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    if (rv != 0 || inet_ntop(AF_INET, &me.sin_addr, ip, INET_ADDRSTRLEN) == NULL)
        return mt_err_set(err, MT_UNAVAILABLE, "no route to coordinator host %s", host);
    return MT_OK;
}

/*
 * Open the data plane (see the file comment for the address rule). Returns NULL when it cannot
 * listen (logged: the worker registers anyway, for monitoring, but cannot run tasks).
 */
static mt_coll_net *open_data_plane(const mt_worker_opts *o)
{
    bool tls = o->tls != NULL && mt_tls_can_listen(o->tls);
    const char *scheme = tls ? "tls+tcp://" : "tcp://";
    char wildcard[32], url[300], ip[INET_ADDRSTRLEN];
    mt_err nerr = MT_ERR_INIT;
    mt_coll_net *net = NULL;
    bool dflt = o->data_listen == NULL || o->data_listen[0] == '\0';

    snprintf(wildcard, sizeof(wildcard), "%s0.0.0.0:", scheme);

    if (dflt) {
        if (ip_toward(o->coordinator, ip, &nerr) != MT_OK) {
            mt_log_warn("data plane: %s; listening on 127.0.0.1 (start with --data-listen)",
                        nerr.msg);
            snprintf(ip, sizeof(ip), "127.0.0.1");
        }
        snprintf(url, sizeof(url), "%s%s:0", scheme, ip);
    } else {
        snprintf(url, sizeof(url), "%s", o->data_listen);
    }
    /* TLS: peers prove themselves with certificates (mutual TLS); otherwise the shared token
     * guards the data plane: peers prove it on every connection */
    if ((tls ? mt_coll_net_new_tls(url, o->tls, &net, &nerr)
             : mt_coll_net_new_auth(url, o->token, &net, &nerr)) != MT_OK) {
        mt_log_error("data plane %s: %s: %s; this worker cannot run tasks", url,
                     mt_code_name(nerr.code), nerr.msg);
        return NULL;
    }
    if (strncmp(mt_coll_net_addr(net), wildcard, strlen(wildcard)) == 0) {
        const char *port = mt_coll_net_addr(net) + strlen(wildcard);
        if (ip_toward(o->coordinator, ip, &nerr) != MT_OK) {
            mt_log_warn("data plane %s: %s; reporting it as is (peers cannot dial 0.0.0.0: "
                        "give --data-listen this host's address)",
                        mt_coll_net_addr(net), nerr.msg);
            return net;
        }
        snprintf(url, sizeof(url), "%s%s:%s", scheme, ip, port);
        if (mt_coll_net_set_addr(net, url, &nerr) != MT_OK)
            mt_log_warn("data plane: %s", nerr.msg);
    }
    return net;
}

mt_code mt_worker_open(const mt_worker_opts *o, mt_worker **out, mt_err *err)
{
    mt_worker *w;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

    *out = NULL;
    if (o->devices < 0 || o->devices > 1024)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "--devices %d: expected 1..1024", o->devices);
    w = mt_calloc(1, sizeof(*w));
    if (w == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "worker: out of memory");
    w->opts = *o;
    int swept = worker_taskdir_sweep(getenv("TMPDIR"));
    if (swept > 0)
        mt_log_info("worker: removed %d task directories left by workers that died", swept);
    {
        worker_task_env env = {o->coordinator,    o->token,      NULL,
                               o->rpc_timeout_ms, o->data_roots, o->tls,
                               o->metrics,        o->mpi_addr,   o->mpi_blocking};
        mt_code rc;
        /* an MPI worker opens no listener: its data plane is the MPI world */
        w->net = o->mpi_addr != NULL ? NULL : open_data_plane(o); /* NULL: register anyway */
        env.net = w->net;
        if ((rc = worker_tasks_new(&env, &w->tasks, err)) != MT_OK) {
            mt_coll_net_free(w->net);
            mt_free(w);
            return rc;
        }
    }
    if (gethostname(w->host, sizeof(w->host) - 1) != 0)
        snprintf(w->host, sizeof(w->host), "localhost");
    snprintf(w->name, sizeof(w->name), "%.63s", o->name && o->name[0] ? o->name : w->host);
    snprintf(w->coordinator, sizeof(w->coordinator), "%s", o->coordinator);
    snprintf(w->token, sizeof(w->token), "%s", o->token ? o->token : "");
    snprintf(w->data_listen, sizeof(w->data_listen), "%s",
             o->mpi_addr != NULL ? o->mpi_addr
             : w->net != NULL    ? mt_coll_net_addr(w->net)
                                 : (o->data_listen ? o->data_listen : ""));
    random_hex(w->instance);
    if (ncpu < 1)
        ncpu = 1;
    w->ndev = o->devices > 0 ? o->devices : (int)ncpu;
    w->cores_per_dev = ncpu / w->ndev > 0 ? (int)(ncpu / w->ndev) : 1;
    w->mem_per_dev = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / (uint64_t)w->ndev : 0;
    w->interval_ms = 1000;
    *out = w;
    return MT_OK;
}

/* ---- pool side: blocking RPCs (touch only the worker's RPC fields) ---- */

static mt_code ensure_client(mt_worker *w)
{
    mt_rpc_client_opts co = MT_RPC_CLIENT_OPTS_DEFAULTS;

    if (w->cli != NULL)
        return MT_OK;
    co.url = w->coordinator;
    co.token = w->token[0] ? w->token : NULL;
    co.connect_timeout_ms = w->opts.rpc_timeout_ms;
    co.tls = w->opts.tls;
    return mt_rpc_client_open(&co, &w->cli, &w->err);
}

static void do_register(mt_worker *w)
{
    Meshtrain__RegisterWorkerRequest req = MESHTRAIN__REGISTER_WORKER_REQUEST__INIT;
    Meshtrain__RegisterWorkerReply *rep = NULL;
    Meshtrain__Device *devs = mt_calloc((size_t)w->ndev, sizeof(*devs));
    Meshtrain__Device **ptrs = mt_calloc((size_t)w->ndev, sizeof(*ptrs));

    if (devs == NULL || ptrs == NULL) {
        w->rc = mt_err_set(&w->err, MT_RESOURCE_EXHAUSTED, "register: out of memory");
        goto out;
    }
    for (int i = 0; i < w->ndev; i++) {
        meshtrain__device__init(&devs[i]);
        devs[i].kind = "cpu";
        devs[i].index = (uint32_t)i;
        devs[i].cores = (uint32_t)w->cores_per_dev;
        devs[i].memory_bytes = w->mem_per_dev;
        devs[i].health = "ok";
        ptrs[i] = &devs[i];
    }
    req.name = w->name;
    req.instance_id = w->instance;
    req.host = w->host;
    req.pid = (uint32_t)getpid();
    req.devices = ptrs;
    req.n_devices = (size_t)w->ndev;
    req.data_address = w->data_listen;
    req.version = MT_VERSION;
    w->rc = mt_rpc_client_call(w->cli, SVC, "RegisterWorker", &req.base, (ProtobufCMessage **)&rep,
                               w->opts.rpc_timeout_ms, &w->err);
    if (w->rc == MT_OK) {
        snprintf(w->got_id, sizeof(w->got_id), "%s", rep->worker_id);
        snprintf(w->got_instance, sizeof(w->got_instance), "%s", rep->coordinator_instance);
        w->got_interval = (int)rep->heartbeat_interval_ms;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
out:
    mt_free(devs);
    mt_free(ptrs);
}

static void do_heartbeat(mt_worker *w)
{
    Meshtrain__HeartbeatRequest req = MESHTRAIN__HEARTBEAT_REQUEST__INIT;
    Meshtrain__HeartbeatReply *rep = NULL;

    req.worker_id = w->worker_id;
    req.instance_id = w->instance;
    worker_tasks_snapshot(w->tasks, &req.tasks, &req.n_tasks);
    w->rc = mt_rpc_client_call(w->cli, SVC, "Heartbeat", &req.base, (ProtobufCMessage **)&rep,
                               w->opts.rpc_timeout_ms, &w->err);
    if (w->rc == MT_OK) {
        w->reregister = rep->reregister;
        snprintf(w->got_instance, sizeof(w->got_instance), "%s", rep->coordinator_instance);
        /* a coordinator that asks us to register again has not applied the statuses */
        if (!rep->reregister)
            worker_tasks_reported(w->tasks, req.tasks, req.n_tasks);
        for (size_t i = 0; i < rep->n_cancellations; i++)
            worker_on_cancel(w->tasks, rep->cancellations[i]);
        for (size_t i = 0; i < rep->n_assignments; i++)
            worker_on_assignment(w->tasks, rep->assignments[i]);
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    worker_tasks_snapshot_free(req.tasks, req.n_tasks);
}

static void work_cb(uv_work_t *req)
{
    mt_worker *w = req->data;

    mt_err_clear(&w->err);
    w->reregister = 0;
    if ((w->rc = ensure_client(w)) != MT_OK)
        return;
    if (w->state == W_UNREGISTERED)
        do_register(w);
    else
        do_heartbeat(w);
}

/* ---- loop side ---- */

static void after_work(uv_work_t *req, int status)
{
    mt_worker *w = req->data;

    w->busy = 0;
    if (status != 0 || w->stopping)
        return;
    if (w->rc != MT_OK) {
        if (w->rc == MT_UNAVAILABLE || w->rc == MT_DEADLINE_EXCEEDED) {
            if (!w->outage_logged)
                mt_log_warn("coordinator unreachable (%s: %s); retrying", mt_code_name(w->rc),
                            w->err.msg);
            w->outage_logged = 1;
        } else {
            mt_log_error("%s %s: %s: %s", w->state == W_UNREGISTERED ? "register" : "heartbeat",
                         w->name, mt_code_name(w->rc), w->err.msg);
        }
        return;
    }
    if (w->outage_logged) {
        mt_log_info("coordinator %s reachable again", w->coordinator);
        w->outage_logged = 0;
    }
    if (w->state == W_UNREGISTERED) {
        snprintf(w->worker_id, sizeof(w->worker_id), "%s", w->got_id);
        snprintf(w->coord_instance, sizeof(w->coord_instance), "%s", w->got_instance);
        if (w->got_interval >= 50)
            w->interval_ms = w->got_interval;
        w->state = W_REGISTERED;
        worker_tasks_set_identity(w->tasks, w->worker_id, w->instance);
        mt_log_info("registered as %s with %d devices at %s (coordinator %s), data plane %s",
                    w->worker_id, w->ndev, w->coordinator, w->coord_instance, w->data_listen);
        uv_timer_set_repeat(&w->tick, (uint64_t)w->interval_ms);
        return;
    }
    if (w->reregister || strcmp(w->got_instance, w->coord_instance) != 0) {
        mt_log_info("coordinator %s asks %s to register again", w->got_instance,
                    w->reregister ? "(unknown worker)" : "(restarted)");
        w->state = W_UNREGISTERED;
        uv_timer_set_repeat(&w->tick, 1000);
    }
}

static void on_tick(uv_timer_t *t)
{
    mt_worker *w = t->data;

    if (w->busy || w->stopping)
        return;
    w->busy = 1;
    w->work.data = w;
    if (uv_queue_work(&w->loop, &w->work, work_cb, after_work) != 0)
        w->busy = 0;
}

static void begin_stop(mt_worker *w)
{
    if (w->stopping)
        return;
    w->stopping = 1;
    uv_timer_stop(&w->tick);
    uv_close((uv_handle_t *)&w->tick, NULL);
    uv_close((uv_handle_t *)&w->sigint, NULL);
    uv_close((uv_handle_t *)&w->sigterm, NULL);
    uv_close((uv_handle_t *)&w->stopper, NULL);
    /* uv_run returns once the in-flight RPC (bounded by its deadline) completes */
}

static void on_signal(uv_signal_t *s, int signum)
{
    mt_log_info("received %s, leaving", signum == SIGINT ? "SIGINT" : "SIGTERM");
    begin_stop(s->data);
}

static void on_stop(uv_async_t *a)
{
    begin_stop(a->data);
}

mt_code mt_worker_run(mt_worker *w, mt_err *err)
{
    (void)err;
    uv_loop_init(&w->loop);
    uv_timer_init(&w->loop, &w->tick);
    w->tick.data = w;
    uv_signal_init(&w->loop, &w->sigint);
    w->sigint.data = w;
    uv_signal_init(&w->loop, &w->sigterm);
    w->sigterm.data = w;
    uv_async_init(&w->loop, &w->stopper, on_stop);
    w->stopper.data = w;
    uv_signal_start(&w->sigint, on_signal, SIGINT);
    uv_signal_start(&w->sigterm, on_signal, SIGTERM);
    mt_log_info("worker %s starting: %d devices, coordinator %s", w->name, w->ndev, w->coordinator);
    uv_timer_start(&w->tick, on_tick, 0, 1000);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    worker_tasks_stop(w->tasks); /* running tasks checkpoint (when their job allows) and end */
    return MT_OK;
}

void mt_worker_stop(mt_worker *w)
{
    uv_async_send(&w->stopper);
}

void mt_worker_free(mt_worker *w)
{
    if (w == NULL)
        return;
    mt_rpc_client_close(w->cli);
    worker_tasks_free(w->tasks);
    mt_coll_net_free(w->net);
    mt_free(w);
}
