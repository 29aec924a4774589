/* SPDX-License-Identifier: MIT */
/*
 * metrics.c — the worker's Prometheus endpoint (metrics.h; the metric list is in docs/cli.md).
 *
 * DESIGN: every figure is an atomic counter or an mt_prom_hist (core/prom) that the device and
 * task threads add to without locks; a scrape reads them and writes the text. Label sets are
 * fixed tables (the five collective operations, the status codes, three checkpoint outcomes),
 * so the series a worker exports stay the same whatever jobs it runs: per-job numbers are the
 * coordinator's (its meshtrain_job_* families).
 */
#include "worker/metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "alloc/mt_alloc.h"
#include "httpd/mt_httpd.h"
#include "prom/mt_prom.h"
#include "rpc/mt_rpc.h"

static const double STEP_BOUNDS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                     0.25,  0.5,    1,     2.5,  5,     10,   30};
static const double COLL_BOUNDS[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                     0.005,   0.01,   0.025,   0.05,   0.1,   0.25,
                                     0.5,     1,      2.5,     5,      10,    30};
static const double CKPT_BOUNDS[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
static const char *const OPS[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                  "barrier"};
#define N_OPS   (sizeof(OPS) / sizeof(OPS[0]))
#define N_CODES 17 /* mt_code values 0..16 */
static const char *const CKPT_RESULT[] = {"uploaded", "skipped", "failed"};

struct worker_metrics {
    mt_httpd *srv;
    char token[MT_RPC_TOKEN_MAX];
    mt_prom_hist step;
    mt_prom_hist coll[N_OPS];
    _Atomic uint64_t coll_bytes[N_OPS];
    _Atomic uint64_t coll_fail[N_OPS][N_CODES];
    mt_prom_hist ckpt;
    _Atomic uint64_t ckpt_bytes;
    _Atomic uint64_t ckpt_last_bytes;
    _Atomic uint64_t ckpt_result[3];
    _Atomic int64_t tasks;
};

void worker_metrics_step(worker_metrics *m, double seconds)
{
    if (m != NULL)
        mt_prom_hist_observe(&m->step, seconds);
}

void worker_metrics_collective(void *arg, const char *op, uint64_t bytes, int64_t ns, mt_code rc)
{
    worker_metrics *m = arg;
    size_t i = 0;

    if (m == NULL)
        return;
    while (i < N_OPS && strcmp(OPS[i], op) != 0)
        i++;
    if (i == N_OPS)
        return;
    mt_prom_hist_observe(&m->coll[i], (double)ns / 1e9);
    atomic_fetch_add_explicit(&m->coll_bytes[i], bytes, memory_order_relaxed);
    if (rc != MT_OK)
        atomic_fetch_add_explicit(&m->coll_fail[i][(unsigned)rc < N_CODES ? (unsigned)rc : 2], 1,
                                  memory_order_relaxed); /* 2 = UNKNOWN */
}

void worker_metrics_checkpoint(worker_metrics *m, double seconds, uint64_t bytes, mt_code rc)
{
    int k = rc == MT_OK ? 0 : rc == MT_RESOURCE_EXHAUSTED ? 1 : 2;

    if (m == NULL)
        return;
    atomic_fetch_add_explicit(&m->ckpt_result[k], 1, memory_order_relaxed);
    if (k != 0)
        return;
    mt_prom_hist_observe(&m->ckpt, seconds);
    atomic_fetch_add_explicit(&m->ckpt_bytes, bytes, memory_order_relaxed);
    atomic_store_explicit(&m->ckpt_last_bytes, bytes, memory_order_relaxed);
}

void worker_metrics_task(worker_metrics *m, int delta)
{
    if (m != NULL)
        atomic_fetch_add_explicit(&m->tasks, delta, memory_order_relaxed);
}

/* ------------------------------------------------------------------ the text */

typedef struct text {
    char *data;
    size_t len, cap;
    bool oom;
} text;

/* Room for `need` more bytes (and a NUL). */
static bool reserve(text *t, size_t need)
{
    size_t cap = t->cap ? t->cap : 8192;
    char *p;

    if (t->oom)
        return false;
    if (t->len + need + 1 <= t->cap)
        return true;
    while (cap < t->len + need + 1)
        cap *= 2;
    if ((p = mt_realloc(t->data, cap)) == NULL) {
        t->oom = true;
        return false;
    }
    t->data = p;
    t->cap = cap;
    return true;
}

__attribute__((format(printf, 2, 3))) static void add(text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(t, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

static void add_hist(text *t, const mt_prom_hist *h, const char *name, const char *labels,
                     const char *help)
{
    size_t need = mt_prom_hist_write(h, name, labels, help, NULL, 0);

    if (reserve(t, need)) {
        mt_prom_hist_write(h, name, labels, help, t->data + t->len, need + 1);
        t->len += need;
    }
}

static void render(worker_metrics *m, text *t)
{
    char lab[64];
    size_t need;

    add_hist(t, &m->step, "meshtrain_worker_step_seconds", "",
             "Time of one training step on this worker's devices (collectives included).");
    for (size_t i = 0; i < N_OPS; i++) {
        snprintf(lab, sizeof(lab), "op=\"%s\"", OPS[i]);
        add_hist(t, &m->coll[i], "meshtrain_worker_collective_seconds", lab,
                 i == 0 ? "Time of one collective call of a device, by operation." : NULL);
    }
    add(t, "# HELP meshtrain_worker_collective_bytes_total Bytes of the tensors collectives "
           "worked on (elements x 4), by operation.\n"
           "# TYPE meshtrain_worker_collective_bytes_total counter\n");
    for (size_t i = 0; i < N_OPS; i++)
        add(t, "meshtrain_worker_collective_bytes_total{op=\"%s\"} %llu\n", OPS[i],
            (unsigned long long)atomic_load(&m->coll_bytes[i]));
    add(t, "# HELP meshtrain_worker_collective_failures_total Collective calls that failed, by "
           "operation and status; code=\"DEADLINE_EXCEEDED\" counts stalls (a peer that never "
           "came).\n# TYPE meshtrain_worker_collective_failures_total counter\n");
    for (size_t i = 0; i < N_OPS; i++) {
        static const mt_code shown[] = {MT_DEADLINE_EXCEEDED, MT_UNAVAILABLE, MT_CANCELLED};
        for (size_t k = 0; k < sizeof(shown) / sizeof(shown[0]); k++) /* always exported */
            add(t, "meshtrain_worker_collective_failures_total{op=\"%s\",code=\"%s\"} %llu\n",
                OPS[i], mt_code_name(shown[k]),
                (unsigned long long)atomic_load(&m->coll_fail[i][shown[k]]));
        for (unsigned c = 1; c < N_CODES; c++) { /* the others once they happened */
            uint64_t v = atomic_load(&m->coll_fail[i][c]);
            if (v > 0 && c != MT_DEADLINE_EXCEEDED && c != MT_UNAVAILABLE && c != MT_CANCELLED)
                add(t, "meshtrain_worker_collective_failures_total{op=\"%s\",code=\"%s\"} %llu\n",
                    OPS[i], mt_code_name((mt_code)c), (unsigned long long)v);
        }
    }
    add_hist(t, &m->ckpt, "meshtrain_worker_checkpoint_upload_seconds", "",
             "Time to send one checkpoint to the coordinator.");
    add(t,
        "# HELP meshtrain_worker_checkpoint_bytes_total Bytes of the checkpoints uploaded.\n"
        "# TYPE meshtrain_worker_checkpoint_bytes_total counter\n"
        "meshtrain_worker_checkpoint_bytes_total %llu\n"
        "# HELP meshtrain_worker_checkpoint_last_bytes Size of the last checkpoint uploaded.\n"
        "# TYPE meshtrain_worker_checkpoint_last_bytes gauge\n"
        "meshtrain_worker_checkpoint_last_bytes %llu\n"
        "# HELP meshtrain_worker_checkpoints_total Checkpoints by outcome (skipped: the "
        "coordinator's disk was full).\n"
        "# TYPE meshtrain_worker_checkpoints_total counter\n",
        (unsigned long long)atomic_load(&m->ckpt_bytes),
        (unsigned long long)atomic_load(&m->ckpt_last_bytes));
    for (int k = 0; k < 3; k++)
        add(t, "meshtrain_worker_checkpoints_total{result=\"%s\"} %llu\n", CKPT_RESULT[k],
            (unsigned long long)atomic_load(&m->ckpt_result[k]));
    add(t,
        "# HELP meshtrain_worker_tasks Tasks (a job's part) running on this worker.\n"
        "# TYPE meshtrain_worker_tasks gauge\nmeshtrain_worker_tasks %lld\n",
        (long long)atomic_load(&m->tasks));
    need = mt_prom_process(NULL, 0, "meshtrain-worker");
    if (reserve(t, need)) {
        mt_prom_process(t->data + t->len, need + 1, "meshtrain-worker");
        t->len += need;
    }
}

/* ------------------------------------------------------------------ the endpoint */

static bool authorized(const worker_metrics *m, const mt_httpd_req *q)
{
    const char *auth = mt_httpd_req_header(q, "Authorization");

    if (m->token[0] == '\0')
        return true;
    if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
        return false;
    auth += 7;
    while (*auth == ' ')
        auth++;
    return strlen(auth) < MT_RPC_TOKEN_MAX && mt_rpc_token_equal(auth, m->token);
}

static void plain(mt_httpd_res *r, int status, const char *body)
{
    mt_httpd_res_status(r, status);
    mt_httpd_res_header(r, "Content-Type", "text/plain; charset=utf-8");
    mt_httpd_res_body(r, body, strlen(body));
}

static void handle(void *arg, const mt_httpd_req *q, mt_httpd_res *r)
{
    worker_metrics *m = arg;
    size_t plen = strcspn(q->uri, "?");
    bool get = strcmp(q->method, "GET") == 0 || strcmp(q->method, "HEAD") == 0;
    text t = {0};

    mt_httpd_res_header(r, "Cache-Control", "no-store");
    if (!get) {
        mt_httpd_res_header(r, "Allow", "GET, HEAD");
        plain(r, 405, "the worker's metrics endpoint is read-only\n");
    } else if (plen == 8 && strncmp(q->uri, "/healthz", 8) == 0) {
        plain(r, 200, "ok\n");
    } else if (!(plen == 8 && strncmp(q->uri, "/metrics", 8) == 0)) {
        plain(r, 404, "not found: this endpoint serves /metrics and /healthz\n");
    } else if (!authorized(m, q)) {
        mt_httpd_res_header(r, "WWW-Authenticate", "Bearer realm=\"meshtrain\"");
        plain(r, 401, "this worker requires its token: send 'Authorization: Bearer TOKEN'\n");
    } else {
        render(m, &t);
        if (t.oom) {
            plain(r, 503, "out of memory\n");
        } else {
            mt_httpd_res_status(r, 200);
            mt_httpd_res_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
            mt_httpd_res_body(r, t.data, t.len);
        }
        mt_free(t.data);
    }
}

mt_code worker_metrics_open(const char *addr, const char *token, worker_metrics **out, char *bound,
                            size_t cap, mt_err *err)
{
    mt_httpd_opts o = MT_HTTPD_OPTS_DEFAULTS;
    worker_metrics *m;
    mt_code rc;

    *out = NULL;
    m = mt_calloc(1, sizeof(*m));
    if (m == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metrics endpoint: out of memory");
    snprintf(m->token, sizeof(m->token), "%s", token != NULL ? token : "");
    mt_prom_hist_init(&m->step, STEP_BOUNDS, sizeof(STEP_BOUNDS) / sizeof(STEP_BOUNDS[0]));
    for (size_t i = 0; i < N_OPS; i++)
        mt_prom_hist_init(&m->coll[i], COLL_BOUNDS, sizeof(COLL_BOUNDS) / sizeof(COLL_BOUNDS[0]));
    mt_prom_hist_init(&m->ckpt, CKPT_BOUNDS, sizeof(CKPT_BOUNDS) / sizeof(CKPT_BOUNDS[0]));
    o.max_conns = 64;
    o.threads = 1;
    o.max_body = 0;
    if ((rc = mt_httpd_open(addr, &o, handle, m, &m->srv, bound, cap, err)) != MT_OK) {
        mt_free(m);
        return rc;
    }
    *out = m;
    return MT_OK;
}

void worker_metrics_close(worker_metrics *m)
{
    if (m == NULL)
        return;
    mt_httpd_close(m->srv);
    mt_free(m);
}
