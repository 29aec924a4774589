/* SPDX-License-Identifier: MIT */
/*
 * coll_world.c — the engine of the built-in backend: worlds, communicators, per-source inboxes,
 * posted receives, driving, deadlines, ABORTs, PINGs and the hang diagnosis.
 *
 * How it fits: the algorithms (coll_algo.c) run each collective inside coll__run and reach
 * the engine only through coll_engine.h (post a receive, send, wait, an exchange the engine
 * may drive). The engine calls downward only: the endpoint (coll_net.c), whose transport
 * tables carry every frame (the in-process one included) and run the direct transport's
 * synchronous mode ("driving"), the progress slots and the wire format. Frames come up through
 * the one entry point it hands the endpoint (world_engine: deliver, claim) and, for a posted
 * receive, the sink operations claim returns; the engine never calls a transport file.
 *
 * DESIGN. An exchange is split into segments of opts.segment_bytes; each goes to the
 * transport of the destination's process (coll__net_send). A receive from another process
 * over the direct transport may be posted (the reader thread reads into the caller's buffer)
 * or, with one device in this process, driven: the device thread runs the transport's
 * synchronous mode on the partner's connection between its non-blocking writes (drive_step;
 * coll_int.h "Driving"), and the transport puts each frame where claim says.
 *
 * Every received message is checked against the expected header (job, step,
 * seq, op, phase, ring step, segment, total, offset, length); a mismatch is
 * INVALID_ARGUMENT, and a member that fails (for any reason but a received
 * ABORT) sends ABORT to every other member so that all of them fail with the
 * same code instead of waiting for the deadline. Messages of a collective that
 * failed here are dropped when they arrive later.
 *
 * Threading: collective entry points run on the comm's device thread; the
 * inbox and abort state are guarded by comm->mu; deliver may run on any
 * thread. Tests: tests/unit/test_coll.c, test_coll_conformance.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "coll/coll_engine.h"
#include "coll/coll_int.h"
#include "coll/mt_coll_backend.h"
#include "log/mt_log.h"

static const char *op_name(int op)
{
    switch (op) {
    case COLL_OP_ALLREDUCE:
        return "allreduce";
    case COLL_OP_REDUCE_SCATTER:
        return "reduce_scatter";
    case COLL_OP_ALLGATHER:
        return "allgather";
    case COLL_OP_BROADCAST:
        return "broadcast";
    case COLL_OP_BARRIER:
        return "barrier";
    default:
        return "unknown op";
    }
}

uint64_t coll__world_remote_floats(mt_coll_world *w)
{
    return atomic_load(&w->remote_floats);
}

/* ------------------------------------------------------------------ inbox */

static int queue_push(coll_queue *q, coll_frame *f)
{
    if (q->count == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 8;
        coll_frame **ni = mt_malloc(ncap * sizeof(*ni));
        if (ni == NULL)
            return -1;
        for (size_t i = 0; i < q->count; i++)
            ni[i] = q->items[(q->head + i) % q->cap];
        mt_free(q->items);
        q->items = ni;
        q->cap = ncap;
        q->head = 0;
    }
    q->items[(q->head + q->count) % q->cap] = f;
    q->count++;
    return 0;
}

static coll_frame *queue_pop(coll_queue *q)
{
    if (q->count == 0)
        return NULL;
    coll_frame *f = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    return f;
}

/*
 * The engine's one entry point (w->engine->deliver): every transport, the in-process one
 * included, hands each frame that arrives for a rank of this world here.
 */
static void deliver(mt_coll_world *w, coll_frame *f)
{
    const coll_hdr *h = &f->h;
    if (h->dst < 0 || h->dst >= w->size || h->src < 0 || h->src >= w->size ||
        w->by_rank[h->dst] == NULL) {
        mt_log_warn("coll: dropping message from rank %d to rank %d: not a local rank of this "
                    "world (size %d)",
                    (int)h->src, (int)h->dst, w->size);
        coll__frame_free(f);
        return;
    }
    mt_coll_comm *c = w->by_rank[h->dst];
    pthread_mutex_lock(&c->mu);
    if (h->kind == COLL_KIND_ABORT && c->aborted &&
        (h->step < c->abort_step || (h->step == c->abort_step && h->seq < c->abort_seq))) {
        coll__frame_free(f); /* keep the newest ABORT */
    } else if (h->kind == COLL_KIND_ABORT) {
        size_t n = f->bytes < MT_ERR_MSG_SIZE - 1 ? f->bytes : MT_ERR_MSG_SIZE - 1;
        memcpy(c->abort_msg, f->data, n);
        c->abort_msg[n] = '\0';
        c->abort_code =
            mt_code_valid((int)h->code) && h->code != MT_OK ? (mt_code)h->code : MT_INTERNAL;
        c->abort_step = h->step;
        c->abort_seq = h->seq;
        c->abort_job = h->job;
        /* rstep = blamed rank + 1 (0 = none); anything else from the wire blames nobody
         * (an rstep of 0x80000000 overflowed int: fuzz_coll_msg seed crash-fb0986e41b76b7fd) */
        c->blame = h->rstep >= 1 && h->rstep <= (uint32_t)w->size ? (int)h->rstep - 1 : -1;
        c->aborted = 1;
        coll__frame_free(f);
    } else if (h->kind == COLL_KIND_PING) {
        if (c->nping < COLL_MAXPING) {
            c->ping_from[c->nping] = h->src;
            c->ping_tag[c->nping++] = coll__tag_pack(h->step, h->seq);
        }
        coll__frame_free(f);
    } else if (h->kind == COLL_KIND_PONG) {
        c->pong[h->src] =
            (uint8_t)(h->code == COLL_PONG_ENTERED ? COLL_PONG_ENTERED : COLL_PONG_NOT_ENTERED);
        coll__frame_free(f);
    } else if (h->kind == COLL_KIND_DATA) {
        if (queue_push(&c->q[h->src], f) != 0) {
            mt_log_error("coll: rank %d: out of memory queueing a message from rank %d", c->rank,
                         (int)h->src);
            coll__frame_free(f);
        }
    } else {
        coll__frame_free(f);
    }
    coll__comm_wake(c);
    pthread_mutex_unlock(&c->mu);
}

/* ------------------------------------------------------------------ comms */

static void drive_release(mt_coll_comm *c);
static void wins_free(mt_coll_comm *c);

static mt_code comm_init(mt_coll_comm *c, mt_coll_world *w, int rank, mt_err *err)
{
    pthread_condattr_t ca;
    c->w = w;
    c->rank = rank;
    c->q = mt_calloc((size_t)w->size, sizeof(*c->q));
    c->pong = mt_calloc((size_t)w->size, 1);
    if (c->q == NULL || c->pong == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll comm %d: out of memory", rank);
    mt_code rc = coll__net_comm_init(c, err);
    if (rc != MT_OK)
        return rc;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&c->entered, 0);
    atomic_init(&c->wakes, 0);
    c->post.drive_proc = -1;
    return MT_OK;
}

static void comm_fini(mt_coll_comm *c)
{
    if (c->w == NULL)
        return;
    drive_release(c);
    wins_free(c);
    mt_free(c->pong);
    for (int j = 0; j < COLL_POST_PIECES; j++)
        mt_free(c->post.piece[j]);
    coll__net_comm_fini(c);
    if (c->q != NULL) {
        for (int s = 0; s < c->w->size; s++) {
            coll_frame *f;
            while ((f = queue_pop(&c->q[s])) != NULL)
                coll__frame_free(f);
            mt_free(c->q[s].items);
        }
        mt_free(c->q);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
}

static void world_free_parts(mt_coll_world *w)
{
    if (w->comms != NULL) {
        for (int i = 0; i < w->nlocal; i++)
            comm_fini(&w->comms[i]);
    }
    if (w->peers != NULL) {
        for (int i = 0; i < w->nprocs; i++)
            pthread_mutex_destroy(&w->peers[i].mu);
    }
    if (w->proc_addr != NULL) {
        for (int i = 0; i < w->nprocs; i++)
            mt_free(w->proc_addr[i]);
    }
    mt_free(w->proc_addr);
    mt_free(w->proc_of);
    mt_free(w->by_rank);
    mt_free(w->comms);
    mt_free(w->peers);
    mt_free(w);
}

static mt_code check_opts(const mt_coll_world_opts *opts, mt_err *err)
{
    if (opts->default_deadline_ms <= 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll world: default deadline %" PRId64 " ms must be positive",
                          opts->default_deadline_ms);
    if ((opts->drive != MT_COLL_DRIVE_AUTO && opts->drive != MT_COLL_DRIVE_OFF) ||
        opts->drive_yields < 0 || opts->drive_spin_us < 0 || opts->drive_spin_us > 1000000)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll world: drive mode %d / drive_yields %d / drive_spin_us %d: want "
                          "AUTO or OFF, >= 0 and 0 .. 1e6",
                          (int)opts->drive, opts->drive_yields, opts->drive_spin_us);
    if (opts->local_spin_us < 0 || opts->local_spin_us > 1000000)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll world: local_spin_us %d: want 0 .. 1e6",
                          opts->local_spin_us);
    if (opts->window != MT_COLL_WINDOW_AUTO && opts->window != MT_COLL_WINDOW_OFF)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll world: window mode %d: want AUTO or OFF",
                          (int)opts->window);
    if (opts->segment_bytes < sizeof(float) || opts->segment_bytes > (64u << 20))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll world: segment size %zu bytes outside [4, 64 MiB]",
                          opts->segment_bytes);
    return MT_OK;
}

static int append(char *out, size_t cap, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Parse opts->mesh ("batch=4,model=2") into w's axes; sizes must multiply to w->size. */
static mt_code parse_mesh(mt_coll_world *w, const char *mesh, mt_err *err)
{
    const char *p = mesh;
    long prod = 1;
    while (p != NULL && *p != '\0') {
        char name[32];
        int n = 0;
        while (*p == ' ')
            p++;
        while (n < 31 && *p != '=' && *p != ',' && *p != ' ' && *p != '\0')
            name[n++] = *p++;
        name[n] = '\0';
        while (*p == ' ')
            p++;
        if (n == 0 || *p != '=' || w->naxes == COLL_MAX_AXES)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "coll world: mesh \"%s\": want NAME=SIZE,... (at most %d axes, "
                              "names of at most 31 characters)",
                              mesh, COLL_MAX_AXES);
        char *end;
        long size = strtol(p + 1, &end, 10);
        if (end == p + 1 || size < 1 || size > w->size)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "coll world: mesh \"%s\": axis %s: bad size", mesh, name);
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
        else if (*p != '\0')
            return mt_err_set(err, MT_INVALID_ARGUMENT, "coll world: mesh \"%s\": want commas",
                              mesh);
        memcpy(w->axis_name[w->naxes], name, (size_t)n + 1);
        w->axis_size[w->naxes++] = (int)size;
        prod *= size;
        if (prod > w->size)
            break;
    }
    if (w->naxes > 0 && prod != w->size)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll world: mesh \"%s\" has %ld devices, the world %d", mesh, prod,
                          w->size);
    return MT_OK;
}

/* The mesh axes group g runs along ("batch", "batch,model"), or "" (no mesh or one member). */
static void group_axes(const mt_coll_world *w, const mt_coll_group *g, char *out, size_t cap)
{
    size_t used = 0;
    int stride = w->size;
    out[0] = '\0';
    for (int d = 0; d < w->naxes && g != NULL && g->ranks != NULL; d++) {
        stride /= w->axis_size[d];
        int varies = 0;
        for (int i = 1; i < g->size && !varies; i++)
            varies = (g->ranks[i] / stride) % w->axis_size[d] !=
                     (g->ranks[0] / stride) % w->axis_size[d];
        if (varies && append(out, cap, &used, "%s%s", used ? "," : "", w->axis_name[d]) != 0)
            return;
    }
}

static const coll_engine_ops world_engine;

/* Allocate a world of s->size ranks on s->b over nprocs processes, with opts (checked); the
 * caller maps the ranks (proc_of) and sets my_proc. */
static mt_code world_alloc(const coll_world_spec *s, const mt_coll_world_opts *opts, int nprocs,
                           mt_coll_world **out, mt_err *err)
{
    int size = s->size;
    mt_coll_world *w = mt_calloc(1, sizeof(*w));
    if (w == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll world: out of memory");
    w->backend = s->b;
    w->engine = &world_engine;
    w->size = size;
    w->opts = *opts;
    w->seg = opts->segment_bytes / sizeof(float);
    w->nprocs = nprocs;
    w->proc_of = mt_calloc((size_t)size, sizeof(*w->proc_of));
    w->by_rank = mt_calloc((size_t)size, sizeof(*w->by_rank));
    w->proc_addr = mt_calloc((size_t)nprocs, sizeof(*w->proc_addr));
    w->peers = mt_calloc((size_t)nprocs, sizeof(*w->peers));
    if (w->proc_of == NULL || w->by_rank == NULL || w->proc_addr == NULL || w->peers == NULL) {
        mt_free(w->peers);
        w->peers = NULL;
        world_free_parts(w);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll world: out of memory");
    }
    for (int i = 0; i < nprocs; i++)
        pthread_mutex_init(&w->peers[i].mu, NULL);
    w->opts.mesh = NULL; /* parsed below; the caller's text is not kept */
    mt_code rc = parse_mesh(w, opts->mesh, err);
    if (rc != MT_OK) {
        world_free_parts(w);
        return rc;
    }
    *out = w;
    return MT_OK;
}

/* Create comms for every rank with proc_of[r] == my_proc. */
static mt_code world_make_comms(mt_coll_world *w, mt_err *err)
{
    int n = 0;
    for (int r = 0; r < w->size; r++)
        n += w->proc_of[r] == w->my_proc;
    w->comms = mt_calloc((size_t)n, sizeof(*w->comms));
    if (w->comms == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll world: out of memory");
    for (int r = 0; r < w->size; r++) {
        if (w->proc_of[r] != w->my_proc)
            continue;
        mt_coll_comm *c = &w->comms[w->nlocal++];
        mt_code rc = comm_init(c, w, r, err);
        if (rc != MT_OK)
            return rc;
        w->by_rank[r] = c;
    }
    return MT_OK;
}

mt_code coll__world_new_local(const coll_world_spec *s, mt_coll_world **out, mt_err *err)
{
    mt_coll_world_opts def = MT_COLL_WORLD_DEFAULTS;
    const mt_coll_world_opts *opts = s->opts;
    int size = s->size;
    mt_coll_world *w = NULL;
    mt_code rc;

    *out = NULL;
    if (opts == NULL)
        opts = &def;
    if (size < 1)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "coll world: size %d must be >= 1", size);
    if ((rc = check_opts(opts, err)) != MT_OK)
        return rc;
    if ((rc = world_alloc(s, opts, 1, &w, err)) != MT_OK)
        return rc;
    w->my_proc = 0;
    w->proc_addr[0] = mt_strdup("local");
    if (w->proc_addr[0] == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll world: out of memory");
        goto fail;
    }
    if ((rc = world_make_comms(w, err)) != MT_OK)
        goto fail;
    *out = w;
    return MT_OK;
fail:
    world_free_parts(w);
    return rc;
}

mt_code coll__world_new_net(const coll_world_spec *s, mt_coll_world **out, mt_err *err)
{
    mt_coll_world_opts def = MT_COLL_WORLD_DEFAULTS;
    const mt_coll_world_opts *opts = s->opts;
    mt_coll_net *net = s->net;
    const mt_coll_rank_addr *table = s->table;
    int size = s->size;
    mt_coll_world *w = NULL;
    mt_code rc;
    int nprocs = 0, my_proc = -1;

    *out = NULL;
    if (opts == NULL)
        opts = &def;
    if (net == NULL || table == NULL || size < 1)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll world: need a net, a rank table and size >= 1 (size %d)", size);
    if ((rc = check_opts(opts, err)) != MT_OK)
        return rc;
    /* count distinct addresses (first occurrence order) */
    for (int r = 0; r < size; r++) {
        if (table[r].addr == NULL || table[r].addr[0] == '\0')
            return mt_err_set(err, MT_INVALID_ARGUMENT, "coll world: rank %d has no address", r);
        int seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = strcmp(table[q].addr, table[r].addr) == 0;
        for (int q = 0; q < r; q++) {
            if (strcmp(table[q].addr, table[r].addr) == 0 &&
                table[q].local_index == table[r].local_index)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "coll world: ranks %d and %d both are device %d of %s", q, r,
                                  table[r].local_index, table[r].addr);
        }
        nprocs += !seen;
    }
    if ((rc = world_alloc(s, opts, nprocs, &w, err)) != MT_OK)
        return rc;
    w->my_proc = -1;
    w->net = net;
    int np = 0;
    for (int r = 0; r < size; r++) {
        int p = -1;
        for (int q = 0; q < np; q++) {
            if (strcmp(w->proc_addr[q], table[r].addr) == 0)
                p = q;
        }
        if (p < 0) {
            p = np++;
            w->proc_addr[p] = mt_strdup(table[r].addr);
            if (w->proc_addr[p] == NULL) {
                rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll world: out of memory");
                goto fail;
            }
            int is_local = 0;
            if ((rc = coll__net_check_addr(net, table[r].addr, &is_local)) != MT_OK) {
                mt_err_set(err, rc, "coll world: rank %d's address %s: want %s", r, table[r].addr,
                           rc == MT_FAILED_PRECONDITION
                               ? "tls+tcp:// (this process's data plane uses TLS)"
                               : "tcp://, tls+tcp:// or ipc://");
                goto fail;
            }
            if (is_local)
                my_proc = p;
        }
        w->proc_of[r] = p;
        w->peers[p].nranks++;
    }
    if (my_proc < 0) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "coll world: no rank of the table lives at this process's address %s",
                        mt_coll_net_addr(net));
        goto fail;
    }
    w->my_proc = my_proc;
    if ((rc = world_make_comms(w, err)) != MT_OK)
        goto fail;
    /* one device here: its thread drives its exchanges (opts.drive OFF turns it off, for A/B) */
    w->drive = w->nlocal == 1 && coll__net_is_raw(w) && opts->drive == MT_COLL_DRIVE_AUTO;
    w->drive_yields = opts->drive_yields;
    w->drive_spin_ns = (int64_t)opts->drive_spin_us * 1000;
    coll__net_attach_pending(net, w);
    if (w->net == NULL) {
        rc = mt_err_set(err, MT_FAILED_PRECONDITION,
                        "coll world: data plane %s already serves another world",
                        mt_coll_net_addr(net));
        goto fail;
    }
    *out = w;
    return MT_OK;
fail:
    world_free_parts(w);
    return rc;
}

void coll__world_cancel(mt_coll_world *w)
{
    atomic_store(&w->cancelled, 1);
    for (int i = 0; i < w->nlocal; i++) {
        mt_coll_comm *c = &w->comms[i];
        coll__net_cancel_sends(c); /* a send stuck on a dead peer ends now */
        pthread_mutex_lock(&c->mu);
        coll__comm_wake(c);
        pthread_mutex_unlock(&c->mu);
    }
}

void mt_coll_world_free(mt_coll_world *w)
{
    if (w == NULL)
        return;
    if (w->net != NULL) {
        coll__peers_close(w);
        coll__net_detach(w->net, w);
    }
    if (w->backend->state_free != NULL && w->backend_state != NULL)
        w->backend->state_free(w->backend_state);
    world_free_parts(w);
}

mt_code coll__world_new_backend(const coll_world_spec *s, mt_coll_world **out, mt_err *err)
{
    mt_coll_world_opts def = MT_COLL_WORLD_DEFAULTS;
    const mt_coll_backend *b = s->b;
    const mt_coll_world_opts *opts = s->opts;
    const int *local = s->local;
    int size = s->size, nlocal = s->nlocal;
    mt_coll_world *w = NULL;
    mt_code rc;

    *out = NULL;
    if (b == NULL || b->allreduce_sum == NULL || b->reduce_scatter == NULL ||
        b->allgather == NULL || b->broadcast == NULL || b->barrier == NULL || size < 1 ||
        nlocal < 0 || (nlocal > 0 && local == NULL))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "coll world: need a backend other than the built-in one (its worlds "
                          "come from mt_coll_world_new_local / _new_net) with every collective, "
                          "size >= 1 and the local ranks (size %d)",
                          size);
    if ((rc = check_opts(opts != NULL ? opts : &def, err)) != MT_OK)
        return rc;
    /* process 0: this one (its ranks get comms), process 1: every other rank */
    if ((rc = world_alloc(s, opts != NULL ? opts : &def, 2, &w, err)) != MT_OK)
        return rc;
    w->my_proc = 0;
    for (int r = 0; r < size; r++)
        w->proc_of[r] = 1;
    for (int i = 0; i < nlocal; i++) {
        if (local[i] < 0 || local[i] >= size || w->proc_of[local[i]] == 0) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                            "coll world: local rank %d is outside [0, %d) or given twice", local[i],
                            size);
            goto fail;
        }
        w->proc_of[local[i]] = 0;
    }
    w->proc_addr[0] = mt_strdup(b->name);
    w->proc_addr[1] = mt_strdup(b->name);
    if (w->proc_addr[0] == NULL || w->proc_addr[1] == NULL) {
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "coll world: out of memory");
        goto fail;
    }
    if ((rc = world_make_comms(w, err)) != MT_OK)
        goto fail;
    w->backend_state = s->state;
    *out = w;
    return MT_OK;
fail:
    world_free_parts(w);
    return rc;
}

int mt_coll_world_size(const mt_coll_world *w)
{
    return w->size;
}

mt_coll_comm *mt_coll_world_comm(mt_coll_world *w, int rank)
{
    if (w == NULL || rank < 0 || rank >= w->size)
        return NULL;
    return w->by_rank[rank];
}

int mt_coll_comm_rank(const mt_coll_comm *c)
{
    return c->rank;
}

void mt_coll_comm_set_step(mt_coll_comm *c, uint64_t step)
{
    c->auto_step = step;
    c->auto_seq = 0;
}

const char *coll__group_problem(const mt_coll_world *w, int rank, const mt_coll_group *g,
                                coll_group_pos *out)
{
    char *why = out->why;
    size_t cap = sizeof(out->why);
    int *pos = &out->pos;
    *pos = -1;
    if (g == NULL || g->ranks == NULL || g->size < 1) {
        snprintf(why, cap, "empty or NULL group");
        return why;
    }
    for (int i = 0; i < g->size; i++) {
        int r = g->ranks[i];
        if (r < 0 || r >= w->size) {
            snprintf(why, cap, "group member %d is rank %d, outside [0, %d)", i, r, w->size);
            return why;
        }
        for (int j = 0; j < i; j++) {
            if (g->ranks[j] == r) {
                snprintf(why, cap, "rank %d appears twice in the group", r);
                return why;
            }
        }
        if (r == rank)
            *pos = i;
    }
    if (*pos < 0) {
        snprintf(why, cap, "rank %d is not a member of the group", rank);
        return why;
    }
    return NULL;
}

/* ------------------------------------------------------------ collectives */

/* One collective call on one comm: the engine's state of it. */
typedef struct coll_ctx {
    coll_call v; /* first: what the algorithm sees (coll__run hands it &v; ctx_of turns it back) */
    mt_coll_comm *c;
    const mt_coll_group *g;
    uint64_t step;
    uint32_t seq;
    int64_t deadline_ns;
    int64_t deadline_ms;
    int64_t start_ns;    /* when the call began (opts.observe) */
    int from_abort;      /* the failure came from a peer's ABORT: do not re-broadcast */
    int blame;           /* rank whose message was inconsistent, -1 none */
    int diagnosed;       /* PINGs went out after the deadline */
    coll_ctl_set ctl;    /* PING / PONG sends in flight */
    struct win_ent *win; /* the host window the call runs on (coll__win_open), NULL none */
    mt_err *err;
} coll_ctx;

static coll_ctx *ctx_of(coll_call *v)
{
    return (coll_ctx *)v; /* v is the first member */
}

static const char *rank_addr(const mt_coll_world *w, int rank)
{
    return w->proc_addr[w->proc_of[rank]];
}

static mt_code ctx_fail(coll_ctx *x, mt_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static mt_code ctx_fail(coll_ctx *x, mt_code code, const char *fmt, ...)
{
    char body[MT_ERR_MSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof(body), fmt, ap);
    va_end(ap);
    char axes[COLL_MAX_AXES * 32];
    group_axes(x->c->w, x->g, axes, sizeof(axes));
    return mt_err_set(x->err, code,
                      "%s%s%s (job %" PRIu64 " step %" PRIu64 " seq %" PRIu32 ") on rank %d: %s",
                      op_name(x->v.op), axes[0] ? " over " : "", axes, x->c->w->opts.job_id,
                      x->step, x->seq, x->c->rank, body);
}

/* Enter call r on x->c over x->g (x zeroed but for c, g and err, as coll__run makes it). */
static mt_code ctx_begin(coll_ctx *x, const mt_coll_call *call, const coll_run *r)
{
    uint8_t op = r->op;
    mt_coll_comm *c = x->c;
    const mt_coll_group *g = x->g;
    mt_err *err = x->err;
    x->v.op = op;
    x->v.total = r->total;
    x->v.pos = -1;
    x->blame = -1;
    if (c == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: NULL communicator", op_name(op));
    if (call != NULL) {
        c->auto_step = call->step;
        c->auto_seq = call->seq;
    }
    /* only an allreduce, a reduce-scatter or an allgather may keep the sockets its device thread
     * drove last (tree_run; their paths that wait for the reader threads give them back first) */
    if (!((op == COLL_OP_ALLREDUCE || op == COLL_OP_REDUCE_SCATTER || op == COLL_OP_ALLGATHER) &&
          g != NULL && g->size > 1))
        drive_release(c);
    c->drive.off = !c->w->drive;
    x->step = c->auto_step;
    x->seq = c->auto_seq++;
    x->deadline_ms =
        call != NULL && call->deadline_ms > 0 ? call->deadline_ms : c->w->opts.default_deadline_ms;
    x->start_ns = coll__now_ns();
    x->deadline_ns = x->start_ns + x->deadline_ms * 1000000LL;
    coll_group_pos gp;
    if (coll__group_problem(c->w, c->rank, g, &gp) != NULL)
        return ctx_fail(x, MT_INVALID_ARGUMENT, "%s", gp.why);
    x->v.p = g->size;
    x->v.ranks = g->ranks;
    x->v.rank = c->rank;
    x->v.seg = c->w->seg;
    x->v.direct_bytes = c->w->opts.direct_bytes;
    if (atomic_load(&c->w->cancelled))
        return ctx_fail(x, MT_CANCELLED, "the world was cancelled");
    x->v.pos = gp.pos; /* from here on, ctx_end tells the other members about a failure */
    coll__progress_enter(c, op_name(op), x->step, x->seq);
    atomic_store(&c->entered, coll__tag_pack(x->step, x->seq) + 1);
    pthread_mutex_lock(&c->mu);
    c->active = 1;
    pthread_mutex_unlock(&c->mu);
    return MT_OK;
}

static void send_abort(coll_ctx *x, mt_code code, const char *text)
{
    mt_coll_world *w = x->c->w;
    size_t tl = strlen(text);
    for (int i = 0; i < x->v.p; i++) {
        int r = x->g->ranks[i], proc = w->proc_of[r];
        if (r == x->c->rank)
            continue;
        coll_hdr h = {.magic = COLL_MAGIC,
                      .kind = COLL_KIND_ABORT,
                      .op = x->v.op,
                      .job = w->opts.job_id,
                      .step = x->step,
                      .seq = x->seq,
                      .src = x->c->rank,
                      .dst = r,
                      .code = (uint32_t)code,
                      .rstep = (uint32_t)(x->blame + 1),
                      .len = tl};
        unsigned char hb[COLL_HDR_SIZE];
        coll_out f = {.hdr = hb, .hlen = COLL_HDR_SIZE, .data = text, .dlen = tl};
        coll__hdr_encode(&h, hb);
        if (proc != w->my_proc && atomic_load(&w->peers[proc].down_ns) != 0)
            continue; /* its connection is gone */
        /* best effort, bounded: the peer may be the one that is stuck */
        coll__net_send(x->c, proc, &f, coll__now_ns() + COLL_ABORT_NS, NULL);
    }
    coll__sends_wait(x->c, 0, NULL);
}

static int tag_le(uint64_t s1, uint32_t q1, uint64_t s2, uint32_t q2)
{
    return s1 < s2 || (s1 == s2 && q1 <= q2);
}

/* Messages of collectives up to (step, seq) are leftovers of a failure: drop them. */
static void mark_stale(mt_coll_comm *c, uint64_t step, uint32_t seq)
{
    if (!c->has_failed || !tag_le(step, seq, c->failed_step, c->failed_seq)) {
        c->has_failed = 1;
        c->failed_step = step;
        c->failed_seq = seq;
    }
}

/* A PING or PONG: its kind, destination rank, the collective asked about and the answer. */
typedef struct coll_ctl {
    uint8_t kind; /* COLL_KIND_PING or COLL_KIND_PONG */
    int dst;
    uint64_t step;
    uint32_t seq;
    uint32_t code; /* PONG: enum coll_pong */
} coll_ctl;

/* Send a PING or PONG to a rank of another process, without waiting. */
static void ctl_send(coll_ctx *x, const coll_ctl *m)
{
    mt_coll_world *w = x->c->w;
    int dst = m->dst;
    if (w->by_rank[dst] != NULL)
        return;
    coll_hdr h = {.magic = COLL_MAGIC,
                  .kind = m->kind,
                  .op = x->v.op,
                  .job = w->opts.job_id,
                  .step = m->step,
                  .seq = m->seq,
                  .src = x->c->rank,
                  .dst = dst,
                  .code = m->code};
    unsigned char hb[COLL_HDR_SIZE];
    coll_out f = {.hdr = hb, .hlen = COLL_HDR_SIZE};
    coll__hdr_encode(&h, hb);
    coll__net_send_ctl(w, w->proc_of[dst], &f, COLL_DIAG_NS / 1000000LL, &x->ctl);
}

/* Answer the PINGs of members diagnosing a deadline (called with c->mu held). */
static void answer_pings(coll_ctx *x)
{
    mt_coll_comm *c = x->c;
    while (c->nping > 0) {
        int from = c->ping_from[--c->nping];
        uint64_t tag = c->ping_tag[c->nping];
        int entered = atomic_load(&c->entered) >= tag + 1;
        pthread_mutex_unlock(&c->mu);
        coll_ctl pong = {.kind = COLL_KIND_PONG,
                         .dst = from,
                         .step = tag >> 24,
                         .seq = (uint32_t)(tag & 0xffffffu),
                         .code = entered ? COLL_PONG_ENTERED : COLL_PONG_NOT_ENTERED};
        ctl_send(x, &pong);
        pthread_mutex_lock(&c->mu);
    }
}

/* After the deadline: ask every member in another process whether it entered. */
static int diagnose_start(coll_ctx *x)
{
    mt_coll_comm *c = x->c;
    int asked = 0;
    memset(c->pong, COLL_PONG_NONE, (size_t)c->w->size);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < x->v.p; i++) {
        int r = x->g->ranks[i];
        if (c->w->by_rank[r] == NULL) {
            coll_ctl ping = {.kind = COLL_KIND_PING, .dst = r, .step = x->step, .seq = x->seq};
            ctl_send(x, &ping);
            asked++;
        }
    }
    pthread_mutex_lock(&c->mu);
    return asked;
}

static int append(char *out, size_t cap, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int append(char *out, size_t cap, size_t *used, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out + *used, cap - *used, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= cap - *used)
        return -1;
    *used += (size_t)k;
    return 0;
}

/*
 * The members to blame for a deadline: local ones that have not entered, and
 * remote ones that did not answer the PING (stopped, hung, unreachable) or
 * answered that they have not entered. Called with c->mu held.
 */
static void suspects(const coll_ctx *x, char *out, size_t cap)
{
    uint64_t tag = coll__tag_pack(x->step, x->seq) + 1;
    mt_coll_world *w = x->c->w;
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < x->v.p; i++) {
        int r = x->g->ranks[i];
        mt_coll_comm *o = w->by_rank[r];
        int k = 0;
        if (o == x->c)
            continue;
        if (o != NULL && atomic_load(&o->entered) < tag)
            k = append(out, cap, &used, "%srank %d", used ? ", " : "", r);
        else if (o == NULL && x->diagnosed && x->c->pong[r] != COLL_PONG_ENTERED)
            k = append(out, cap, &used, "%srank %d (%s, %s)", used ? ", " : "", r,
                       w->proc_addr[w->proc_of[r]],
                       x->c->pong[r] == COLL_PONG_NONE ? "no answer" : "not entered");
        if (k != 0)
            break;
    }
}

struct win_ent;
static void win_drop(mt_coll_comm *c, struct win_ent *e);

static mt_code ctx_end(coll_ctx *x, mt_code rc)
{
    mt_coll_comm *c = x->c;
    if (c == NULL || x->v.pos < 0)
        return rc;
    if (rc != MT_OK)
        drive_release(c); /* the reader thread delivers what comes next */
    if (rc != MT_OK && x->win != NULL)
        win_drop(c, x->win); /* the other members fail too: the next call sets one up anew */
    coll__net_ctl_reap(&x->ctl);
    mt_code wrc = coll__sends_wait(c, rc != MT_OK, rc == MT_OK ? x->err : NULL);
    if (rc == MT_OK && wrc != MT_OK)
        rc = wrc;
    if (rc != MT_OK && !x->from_abort && x->v.p > 1)
        send_abort(x, rc, x->err != NULL ? x->err->msg : mt_code_name(rc));
    pthread_mutex_lock(&c->mu);
    if (rc != MT_OK)
        mark_stale(c, x->step, x->seq);
    c->active = 0;
    pthread_mutex_unlock(&c->mu);
    coll__progress_exit(c, rc);
    if (c->w->opts.observe != NULL)
        c->w->opts.observe(c->w->opts.observe_arg, op_name(x->v.op), x->v.total * sizeof(float),
                           coll__now_ns() - x->start_ns, rc);
    return rc;
}

/* An ABORT arrived that ends this collective: 1 and its code in *rc (c->mu held). */
static int take_abort(coll_ctx *x, mt_code *rc)
{
    mt_coll_comm *c = x->c;
    if (!c->aborted)
        return 0;
    c->aborted = 0;
    /*
     * Which ABORTs end this collective:
     * - one about a collective that already failed here is a leftover: no;
     * - one about this or a later collective: yes;
     * - one that blames this rank's data: yes;
     * - one about an earlier collective that completed here: yes if the
     *   sender failed for a reason other than a mismatch (it is gone and
     *   will not feed this one); no for a mismatch (it comes from a
     *   member with a wrong tag, and its data will show the mismatch).
     */
    int leftover =
        c->has_failed && tag_le(c->abort_step, c->abort_seq, c->failed_step, c->failed_seq);
    int later = tag_le(x->step, x->seq, c->abort_step, c->abort_seq);
    if (!leftover && (later || c->blame == c->rank || c->abort_code != MT_INVALID_ARGUMENT)) {
        /* an ABORT from a member with another job id (a mismatch of the job) reached only
         * the members it was sent to, and one that arrives before a member's world exists is
         * dropped as another job's message: pass it on under this job's id */
        x->from_abort = c->abort_job == c->w->opts.job_id;
        *rc = mt_err_set(x->err, c->abort_code, "%s", c->abort_msg);
        return 1;
    }
    return 0;
}

/*
 * A send to another process failed: a member that failed first may have told
 * us why (its ABORT, e.g. a mismatch, explains the closed connection better).
 * Wait up to grace_ns for such an ABORT; 1 and its code in *rc if one came.
 */
static int abort_explains(coll_ctx *x, int64_t grace_ns, mt_code *rc)
{
    mt_coll_comm *c = x->c;
    int64_t until = coll__now_ns() + grace_ns;
    int got = 0;
    pthread_mutex_lock(&c->mu);
    while (!(got = take_abort(x, rc)) && coll__now_ns() < until) {
        struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
    return got;
}

/* The collective was cancelled or aborted by a member (c->mu held): its code, else MT_OK. */
static mt_code ended(coll_ctx *x)
{
    mt_code arc;
    if (atomic_load(&x->c->w->cancelled)) {
        x->from_abort = 1; /* every local member is cancelled too; remote ones by their owner */
        return ctx_fail(x, MT_CANCELLED, "the world was cancelled");
    }
    if (take_abort(x, &arc))
        return arc;
    return MT_OK;
}

/*
 * The collective's deadline passed without rank r's data (or room toward it): if the tcp
 * link to its process is broken (what this process sent it stays unacknowledged, where a
 * stopped or hung process's kernel would still acknowledge), UNAVAILABLE naming both ends;
 * else MT_OK (the caller reports the deadline).
 */
static mt_code link_broken(coll_ctx *x, int r)
{
    mt_coll_world *w = x->c->w;
    int64_t ms = 0;
    if (w->by_rank[r] != NULL || !coll__net_link_stalled(w, w->proc_of[r], &ms))
        return MT_OK;
    return ctx_fail(x, MT_UNAVAILABLE,
                    "link between rank %d (%s) and rank %d (%s) is broken: nothing sent on it "
                    "was acknowledged for %" PRId64 " ms",
                    x->c->rank, w->proc_addr[w->my_proc], r, rank_addr(w, r), ms);
}

/*
 * Waiting for data from global rank src (c->mu held, still held on return): the failure (the
 * peer's connection lost, the deadline), else MT_OK, with *busy when it answered PINGs or
 * started the diagnosis (look again before sleeping).
 */
static mt_code wait_check(coll_ctx *x, int src, bool *busy)
{
    mt_coll_comm *c = x->c;
    mt_coll_world *w = c->w;
    mt_code rc;
    int remote = w->by_rank[src] == NULL;
    int64_t now = coll__now_ns();
    if (remote) {
        int64_t down = atomic_load(&w->peers[w->proc_of[src]].down_ns);
        if (down != 0 && atomic_load(&w->peers[w->proc_of[src]].refused))
            return ctx_fail(x, MT_UNAUTHENTICATED,
                            "rank %d (%s) failed data-plane authentication (wrong token): "
                            "UNAUTHENTICATED",
                            src, rank_addr(w, src));
        if (down != 0 && now - down > COLL_GRACE_NS)
            return ctx_fail(x, MT_UNAVAILABLE, "connection to rank %d (%s) lost", src,
                            rank_addr(w, src));
    }
    if (c->nping > 0) {
        answer_pings(x);
        *busy = true;
        return MT_OK;
    }
    if (now >= x->deadline_ns && !x->diagnosed) {
        x->diagnosed = 1;
        if (diagnose_start(x) > 0) {
            x->deadline_ns = coll__now_ns() + COLL_DIAG_NS; /* keep waiting for data too */
            *busy = true;
            return MT_OK;
        }
    }
    if (now >= x->deadline_ns && remote && (rc = link_broken(x, src)) != MT_OK)
        return rc;
    if (now >= x->deadline_ns) {
        char late[160];
        suspects(x, late, sizeof(late));
        if (late[0] != '\0')
            return ctx_fail(x, MT_DEADLINE_EXCEEDED,
                            "no data from rank %d (%s) within %" PRId64 " ms; never arrived: %s",
                            src, rank_addr(w, src), x->deadline_ms, late);
        return ctx_fail(x, MT_DEADLINE_EXCEEDED, "no data from rank %d (%s) within %" PRId64 " ms",
                        src, rank_addr(w, src), x->deadline_ms);
    }
    return MT_OK;
}

/* True when this wait skips its polls (b's backoff), counting it. */
static bool backoff_skip(coll_backoff *b)
{
    if (b->skip <= 0)
        return false;
    b->skip--;
    return true;
}

/* A poll ended without progress: the next 2^miss - 1 waits skip theirs. */
static void backoff_miss(coll_backoff *b)
{
    b->miss = b->miss < 6 ? b->miss + 1 : 6;
    b->skip = (1 << b->miss) - 1;
}

/*
 * Before a device thread sleeps waiting for another device of its process: poll c->wakes with
 * c->mu released for opts.local_spin_us (at most until until_ns), yielding the core between looks,
 * so that a partner answers into a running thread — a sleeper's wake-up puts it on its waker's
 * core, where the two then take turns while the other core idles; two threads that stay runnable
 * are spread over the cores by the scheduler, and the yields let a partner queued on this core
 * run (docs/benchmarks.md has the figures). True when c was woken meanwhile (look again).
 * After k polls in a row that ended without a wake-up the next 2^k - 1 waits (at most 63) sleep
 * at once: with more runnable threads than cores the partner is not running, and polling would
 * only keep it from a core. c->mu held on entry and return; every bump of c->wakes is made under
 * it, so none is lost between the poll and the sleep.
 */
static bool poll_wakes(mt_coll_comm *c, int64_t until_ns)
{
    if (backoff_skip(&c->spin))
        return false;
    uint64_t seen = atomic_load_explicit(&c->wakes, memory_order_relaxed);
    int64_t end = coll__now_ns() + (int64_t)c->w->opts.local_spin_us * 1000;
    if (end > until_ns)
        end = until_ns;
    pthread_mutex_unlock(&c->mu);
    for (unsigned i = 1; atomic_load_explicit(&c->wakes, memory_order_acquire) == seen; i++) {
        if ((i & 63) == 0) {
            if (coll__now_ns() >= end)
                break;
            sched_yield(); /* a partner queued on this core runs now */
        }
        coll__cpu_relax();
    }
    pthread_mutex_lock(&c->mu);
    if (atomic_load_explicit(&c->wakes, memory_order_relaxed) != seen) {
        c->spin.miss = 0;
        return true;
    }
    backoff_miss(&c->spin);
    return false;
}

/*
 * One turn of waiting for data from global rank src (c->mu held, still held on return):
 * MT_OK after answering PINGs or sleeping until a wake-up (look again), else the failure
 * (the peer's connection lost, the deadline).
 */
static mt_code wait_turn(coll_ctx *x, int src)
{
    mt_coll_comm *c = x->c;
    bool busy = false;
    mt_code rc = wait_check(x, src, &busy);
    if (rc != MT_OK || busy)
        return rc;
    int remote = c->w->by_rank[src] == NULL;
    int64_t now = coll__now_ns(), until = x->deadline_ns;
    if (remote && until - now > 50000000LL)
        until = now + 50000000LL; /* poll the connection state */
    if (!remote && c->w->opts.local_spin_us > 0 && poll_wakes(c, until))
        return MT_OK;
    struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
    coll__progress_wait(c);
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    return MT_OK;
}

/* Pop the next frame from src that is not a leftover of a failed collective (c->mu held). */
static coll_frame *pop_live(mt_coll_comm *c, int src)
{
    coll_frame *f;
    while ((f = queue_pop(&c->q[src])) != NULL) {
        if (f->h.job == c->w->opts.job_id && c->has_failed &&
            tag_le(f->h.step, f->h.seq, c->failed_step, c->failed_seq)) {
            coll__frame_free(f); /* left over from a collective that failed here */
            continue;
        }
        return f;
    }
    return NULL;
}

/* Every field of header h (from src: a frame's, or a host window's stamp) must be what this
 * member expects; else INVALID_ARGUMENT naming src and the field. */
static mt_code check_hdr(coll_ctx *x, int src, const coll_hdr *hp, const coll_hdr *want)
{
    mt_coll_world *w = x->c->w;
    const coll_hdr h = *hp;
    /* in this order of blame */
    const struct {
        const char *what;
        uint64_t got, exp;
    } f[] = {
        {"job", h.job, want->job},
        {"step", h.step, want->step},
        {"sequence number", h.seq, want->seq},
        {"operation", h.op, want->op},
        {"size", h.total, want->total},
        {"phase", h.phase, want->phase},
        {"ring step", h.rstep, want->rstep},
        {"chunk", h.chunk, want->chunk},
        {"offset", h.offset, want->offset},
        {"length", h.len, want->len},
    };
    const char *what = NULL;
    uint64_t got = 0, exp = 0;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]) && what == NULL; i++) {
        if (f[i].got != f[i].exp)
            what = f[i].what, got = f[i].got, exp = f[i].exp;
    }
    if (what == NULL)
        return MT_OK;
    x->blame = src;
    if (h.op != want->op)
        return ctx_fail(x, MT_INVALID_ARGUMENT,
                        "rank %d (%s) sent a %s message: %s %" PRIu64 ", expected %" PRIu64, src,
                        rank_addr(w, src), op_name(h.op), what, got, exp);
    return ctx_fail(x, MT_INVALID_ARGUMENT,
                    "message from rank %d (%s) has %s %" PRIu64 ", expected %" PRIu64, src,
                    rank_addr(w, src), what, got, exp);
}

/* Every field of frame fr (from src) must be what this member expects; else INVALID_ARGUMENT
 * (frees fr). */
static mt_code check_msg(coll_ctx *x, int src, coll_frame *fr, const coll_hdr *want)
{
    mt_code rc = check_hdr(x, src, &fr->h, want);
    if (rc != MT_OK)
        coll__frame_free(fr);
    return rc;
}

/* Receive the next frame from global rank src; validate it against *want. */
static mt_code recv_msg(coll_ctx *x, int src, const coll_hdr *want, coll_frame **out)
{
    mt_coll_comm *c = x->c;
    coll_frame *f = NULL;
    mt_code rc = MT_OK;

    *out = NULL;
    pthread_mutex_lock(&c->mu);
    while ((rc = ended(x)) == MT_OK && (f = pop_live(c, src)) == NULL &&
           (rc = wait_turn(x, src)) == MT_OK)
        ;
    pthread_mutex_unlock(&c->mu);
    if (f == NULL)
        return rc;
    if ((rc = check_msg(x, src, f, want)) != MT_OK)
        return rc;
    *out = f;
    return MT_OK;
}

/*
 * A send to rank dst in another process failed (direct transport): the error, or the code of
 * an ABORT that explains it (a member that failed first closed its sockets).
 */
static mt_code send_failed(coll_ctx *x, int dst, mt_code rc, const char *why)
{
    mt_code arc, lrc;
    if (rc == MT_DEADLINE_EXCEEDED && (lrc = link_broken(x, dst)) != MT_OK)
        return lrc;
    if ((rc == MT_UNAVAILABLE || rc == MT_DEADLINE_EXCEEDED) &&
        abort_explains(x, rc == MT_UNAVAILABLE ? COLL_ABORT_EXPLAIN_NS : 0, &arc))
        return arc;
    return ctx_fail(x, rc, "send to rank %d (%s): %s", dst, rank_addr(x->c->w, dst), why);
}

/*
 * Segment h (its payload at data, borrowed) to rank dst through the transport to its process
 * (the in-process one for a rank of this process): the direct transport writes it from data,
 * nng and the in-process hop copy it.
 */
static mt_code send_seg(coll_ctx *x, int dst, const coll_hdr *h, const float *data)
{
    mt_coll_world *w = x->c->w;
    int proc = w->proc_of[dst];
    unsigned char hb[COLL_HDR_SIZE];
    coll_out f = {.hdr = hb, .hlen = COLL_HDR_SIZE, .data = data, .dlen = h->len * sizeof(float)};
    mt_err e = MT_ERR_INIT;
    coll__hdr_encode(h, hb);
    if (proc != w->my_proc)
        atomic_fetch_add(&w->remote_floats, h->len);
    mt_code rc = coll__net_send(x->c, proc, &f, x->deadline_ns, &e);
    if (rc == MT_OK)
        return MT_OK;
    if (proc != w->my_proc && coll__net_is_raw(w))
        return send_failed(x, dst, rc, e.msg); /* an ABORT may explain a closed connection */
    return ctx_fail(x, rc, "send to rank %d: %s", dst, e.msg);
}

static size_t nseg(const coll_ctx *x, size_t len)
{
    size_t s = x->c->w->seg;
    return len == 0 ? 1 : (len + s - 1) / s;
}

static void seg_range(const coll_ctx *x, size_t len, size_t k, size_t *off, size_t *n)
{
    size_t s = x->c->w->seg;
    *off = k * s;
    *n = len == 0 ? 0 : (len - *off < s ? len - *off : s);
}

/* Header h of segment k of the region [off, off+len) (chunk, offset and length filled in). */
static void hdr_seg(const coll_ctx *x, coll_hdr *h, size_t off, size_t len, size_t k)
{
    size_t o, n;
    seg_range(x, len, k, &o, &n);
    h->chunk = (uint32_t)k;
    h->offset = off + o;
    h->len = n;
}

/* Receive segment k of t's region rbuf[ro, ro+rl) from t->src (h: the header expected, filled
 * per segment) and copy or add it (acc = partial + own). */
static mt_code recv_seg(coll_ctx *x, coll_hdr *h, const coll_xchg *t, float *rbuf, size_t k)
{
    coll_frame *m;
    mt_code rc;
    hdr_seg(x, h, t->ro, t->rl, k);
    if ((rc = recv_msg(x, t->src, h, &m)) != MT_OK)
        return rc;
    coll__progress_chunk(x->c, k, nseg(x, t->rl));
    const unsigned char *pl = m->data;
    float *d = rbuf + h->offset;
    if (t->mix == COLL_MIX_COPY) {
        if (h->len > 0)
            memcpy(d, pl, h->len * sizeof(float));
    } else {
        coll__add_into(d, pl, h->len);
    }
    coll__frame_free(m);
    return MT_OK;
}

/* ---------------------------------------------------- posted receive */

/* Header expected for segment k of a posted step (chunk, offset and length filled in). */
static void post_want(const coll_post_step *p, size_t k, coll_hdr *h)
{
    *h = p->want;
    h->chunk = (uint32_t)k;
    h->offset = p->roff + k * p->seg;
    h->len = p->rlen == 0 ? 0 : (p->rlen - k * p->seg < p->seg ? p->rlen - k * p->seg : p->seg);
}

/* 1 when header h is the expected e (every field the frame's placement depends on). */
static int post_match(const coll_hdr *e, const coll_hdr *h)
{
    return e->job == h->job && e->step == h->step && e->seq == h->seq && e->op == h->op &&
           e->total == h->total && e->phase == h->phase && e->rstep == h->rstep &&
           e->chunk == h->chunk && e->offset == h->offset && e->len == h->len && e->src == h->src &&
           e->dst == h->dst;
}

static const coll_sink_ops post_sink_ops;

static coll_claim post_claim(mt_coll_world *w, const coll_hdr *h, coll_claim_mode mode,
                             coll_sink *s)
{
    if (h->dst < 0 || h->dst >= w->size || h->src < 0 || h->src >= w->size ||
        w->by_rank[h->dst] == NULL)
        return COLL_CLAIM_QUEUE;
    mt_coll_comm *c = w->by_rank[h->dst];
    coll_post *p = &c->post;
    int ok = 0;
    pthread_mutex_lock(&c->mu);
    if (mode == COLL_CLAIM_BY_READER_HANDOVER && p->drive_proc >= 0 &&
        p->drive_proc == w->proc_of[h->src]) {
        pthread_mutex_unlock(&c->mu);
        return COLL_CLAIM_DRIVER; /* the device thread reads that connection itself (drive_step) */
    }
    coll_post_step *st = &p->st[p->head];
    if (p->state == COLL_POST_POSTED && p->count > 0 && st->want.src == h->src &&
        c->q[h->src].count == 0 && st->next_k < st->nk) {
        coll_hdr e;
        post_want(st, st->next_k, &e);
        ok = post_match(&e, h);
    }
    /*
     * COLL_CLAIM_WAIT must hold only for frames that will be posted (tree_run's phases of an
     * allreduce or reduce-scatter above direct_bytes, ring_allgather, from another process over the
     * direct transport): any other frame would wait RAW_ARM_WAIT_NS for nothing. It also holds
     * while a step from another source is posted (a peer already in a later exchange of tree_run,
     * whose step is posted or whose connection is driven next), not for a frame from the posted
     * step's own source that does not match it (a mismatch: check_msg).
     */
    int idle =
        (p->count == 0 && p->state == COLL_POST_NONE) || (p->count > 0 && st->want.src != h->src);
    if (!ok && idle && mode != COLL_CLAIM_BY_DRIVER && c->q[h->src].count == 0 && w->nlocal == 1 &&
        w->peers[w->proc_of[h->src]].nranks == 1 &&
        (h->phase == COLL_PHASE_INPUTS || h->phase == COLL_PHASE_RESULT ||
         (h->phase <= COLL_PHASE_GATHER &&
          (h->op == COLL_OP_ALLREDUCE || h->op == COLL_OP_REDUCE_SCATTER ||
           h->op == COLL_OP_ALLGATHER) &&
          (h->op == COLL_OP_ALLGATHER || h->total * sizeof(float) > w->opts.direct_bytes)))) {
        p->reader_waiting = 1;
        pthread_mutex_unlock(&c->mu);
        return COLL_CLAIM_WAIT;
    }
    if (ok) {
        p->state = COLL_POST_CLAIMED;
        s->ops = &post_sink_ops;
        s->c = c;
        s->dest = (unsigned char *)(st->rbuf + h->offset);
        s->bytes = (size_t)h->len * sizeof(float);
        s->add = st->add;
    }
    pthread_mutex_unlock(&c->mu);
    return ok ? COLL_CLAIM_POSTED : COLL_CLAIM_QUEUE;
}

static const coll_engine_ops world_engine = {.deliver = deliver, .claim = post_claim};

/* Segment next_k of the head step is in the buffer (c->mu held). */
static void post_advance(mt_coll_comm *c)
{
    coll_post *p = &c->post;
    if (++p->st[p->head].next_k == p->st[p->head].nk) {
        p->head = (p->head + 1) % COLL_POST_DEPTH;
        p->count--;
        p->done++;
        coll__comm_wake(c);
    }
}

static void post_finish(const coll_sink *s, int ok)
{
    mt_coll_comm *c = s->c;
    coll_post *p = &c->post;
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&p->cancel) || !ok) {
        p->state = COLL_POST_NONE; /* the device thread stops waiting for the reader */
        coll__comm_wake(c);
    } else {
        post_advance(c);
        p->state = p->count > 0 ? COLL_POST_POSTED : COLL_POST_NONE;
    }
    pthread_mutex_unlock(&c->mu);
}

static int post_piece_get(const coll_sink *s, unsigned char **buf)
{
    coll_post *p = &s->c->post;
    int j = -1;
    pthread_mutex_lock(&s->c->mu);
    for (int i = 0; i < COLL_POST_PIECES && j < 0; i++) {
        if (p->piece[i] != NULL && p->piece_state[i] == COLL_PIECE_FREE)
            j = i;
    }
    if (j >= 0)
        p->piece_state[j] = COLL_PIECE_FILLING;
    pthread_mutex_unlock(&s->c->mu);
    *buf = j >= 0 ? p->piece[j] : NULL;
    return j;
}

static int post_cancelled(const coll_sink *s)
{
    return atomic_load(&s->c->post.cancel);
}

static void post_piece_full(const coll_sink *s, int j, unsigned char *dest, size_t bytes)
{
    coll_post *p = &s->c->post;
    pthread_mutex_lock(&s->c->mu);
    p->piece_dest[j] = (float *)dest;
    p->piece_n[j] = bytes / sizeof(float);
    p->piece_state[j] = COLL_PIECE_FULL;
    p->nfull++;
    coll__comm_wake(s->c);
    pthread_mutex_unlock(&s->c->mu);
}

/* The posted receive as a transport's reader thread fills it (coll_sink in coll_int.h). */
static const coll_sink_ops post_sink_ops = {
    .piece_get = post_piece_get,
    .piece_full = post_piece_full,
    .cancelled = post_cancelled,
    .finish = post_finish,
};

/* Add one full piece into its destination (c->mu held, released while adding): 1, or 0. */
static int post_add_piece(mt_coll_comm *c)
{
    coll_post *p = &c->post;
    for (int j = 0; j < COLL_POST_PIECES; j++) {
        if (p->piece_state[j] != COLL_PIECE_FULL)
            continue;
        p->piece_state[j] = COLL_PIECE_ADDING;
        p->nfull--;
        pthread_mutex_unlock(&c->mu);
        coll__add_into(p->piece_dest[j], p->piece[j], p->piece_n[j]);
        pthread_mutex_lock(&c->mu);
        p->piece_state[j] = COLL_PIECE_FREE;
        return 1;
    }
    return 0;
}

/* Post the receive of t's region rbuf[ro, ro+rl) in nk segments (want: the header template). */
static void post_arm(mt_coll_comm *c, const coll_hdr *want, const coll_xchg *t, float *rbuf,
                     size_t nk)
{
    coll_post *p = &c->post;
    pthread_mutex_lock(&c->mu);
    coll_post_step *st = &p->st[(p->head + p->count) % COLL_POST_DEPTH];
    st->want = *want;
    st->rbuf = rbuf;
    st->roff = t->ro;
    st->rlen = t->rl;
    st->seg = c->w->seg;
    st->next_k = 0;
    st->nk = nk;
    st->add = t->mix == COLL_MIX_ADD;
    for (int j = 0; j < COLL_POST_PIECES && st->add; j++) {
        if (p->piece[j] == NULL)
            p->piece[j] = mt_malloc(COLL_PIECE_BYTES); /* NULL: the reader adds it itself */
    }
    p->count++;
    p->armed++;
    if (p->state != COLL_POST_CLAIMED)
        p->state = COLL_POST_POSTED;
    int wake = p->reader_waiting;
    p->reader_waiting = 0;
    pthread_mutex_unlock(&c->mu);
    if (wake)
        coll__net_wake_claim(c->w->net);
}

/* Withdraw every posted step (c->mu held); waits for a reader writing into the buffer. */
static void post_disarm(mt_coll_comm *c)
{
    coll_post *p = &c->post;
    if (p->state == COLL_POST_CLAIMED) {
        atomic_store(&p->cancel, 1); /* the reader checks it after every read (<= 10 ms) */
        while (p->state == COLL_POST_CLAIMED)
            pthread_cond_wait(&c->cv, &c->mu);
    }
    atomic_store(&p->cancel, 0);
    p->state = COLL_POST_NONE;
    p->count = 0;
    p->done = p->armed;
    for (int j = 0; j < COLL_POST_PIECES; j++)
        p->piece_state[j] = COLL_PIECE_FREE; /* pieces not added yet belong to a failed step */
    p->nfull = 0;
}

/* Withdraw every posted step of c (takes c->mu). */
static void post_withdraw(mt_coll_comm *c)
{
    pthread_mutex_lock(&c->mu);
    post_disarm(c);
    pthread_mutex_unlock(&c->mu);
}

/* The id the next post_arm of c gets (recv_posted waits for it). */
static uint64_t post_next_id(mt_coll_comm *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t id = c->post.armed;
    pthread_mutex_unlock(&c->mu);
    return id;
}

/*
 * Wait until posted step `id` is complete: segments the reader thread took are already in
 * the buffer; frames that arrived before the post (or did not match it: a mismatch,
 * reported by check_msg) are taken from the inbox in order, as recv_seg does.
 */
/*
 * Take the next message from src that the reader thread queued (it arrived before its step was
 * posted, or did not match it) into the posted step, in order (c->mu held, released while
 * copying): 1 and *rc (INVALID_ARGUMENT from check_msg, or MT_OK), or 0 when there is none or a
 * claimed frame is being read.
 */
static int post_take_queued(coll_ctx *x, int src, mt_code *rc)
{
    mt_coll_comm *c = x->c;
    coll_post *p = &c->post;
    coll_frame *m = NULL;
    if (p->state == COLL_POST_CLAIMED || (m = pop_live(c, src)) == NULL)
        return 0;
    coll_post_step st = p->st[p->head];
    coll_hdr want;
    p->state = COLL_POST_NONE; /* nothing is claimed while this one is handled */
    post_want(&st, st.next_k, &want);
    pthread_mutex_unlock(&c->mu);
    *rc = check_msg(x, src, m, &want);
    if (*rc == MT_OK) {
        float *d = st.rbuf + want.offset;
        if (!st.add && want.len > 0)
            memcpy(d, m->data, want.len * sizeof(float));
        else if (st.add)
            coll__add_into(d, m->data, want.len);
        coll__frame_free(m);
    }
    pthread_mutex_lock(&c->mu);
    if (*rc == MT_OK) {
        post_advance(c);
        p->state = p->count > 0 ? COLL_POST_POSTED : COLL_POST_NONE;
    }
    return 1;
}

static mt_code recv_posted(coll_ctx *x, int src, uint64_t id)
{
    mt_coll_comm *c = x->c;
    coll_post *p = &c->post;
    mt_code rc = MT_OK;
    pthread_mutex_lock(&c->mu);
    while (p->done <= id || p->nfull > 0) {
        if ((rc = ended(x)) != MT_OK)
            break;
        if (post_add_piece(c))
            continue; /* the reader reads on meanwhile */
        if (post_take_queued(x, src, &rc)) {
            if (rc != MT_OK)
                break;
            continue;
        }
        if ((rc = wait_turn(x, src)) != MT_OK)
            break;
    }
    if (rc != MT_OK)
        post_disarm(c);
    pthread_mutex_unlock(&c->mu);
    return rc;
}
/* The header of a DATA frame of exchange t (chunk, offset, len: 0): one this member receives
 * from t->src (in), or sends to t->dst. */
static coll_hdr xchg_hdr(const coll_ctx *x, const coll_xchg *t, bool in)
{
    coll_hdr h = {.magic = COLL_MAGIC,
                  .kind = COLL_KIND_DATA,
                  .op = x->v.op,
                  .phase = t->phase,
                  .job = x->c->w->opts.job_id,
                  .step = x->step,
                  .seq = x->seq,
                  .src = in ? t->src : x->c->rank,
                  .dst = in ? x->c->rank : t->dst,
                  .rstep = in ? t->rstep_in : t->rstep,
                  .total = x->v.total};
    return h;
}

mt_code coll__xchg(coll_call *v, const coll_xchg *t, const float *sbuf, float *rbuf)
{
    coll_ctx *x = ctx_of(v);
    size_t ns = t->dst >= 0 ? nseg(x, t->sl) : 0, nr = t->src >= 0 ? nseg(x, t->rl) : 0;
    size_t nk = ns > nr ? ns : nr;
    coll_hdr sh = xchg_hdr(x, t, false), rh = xchg_hdr(x, t, true);
    for (size_t k = 0; k < nk; k++) {
        mt_code rc;
        if (t->chain && k < nr && (rc = recv_seg(x, &rh, t, rbuf, k)) != MT_OK)
            return rc;
        if (k < ns) {
            hdr_seg(x, &sh, t->so, t->sl, k);
            if ((rc = send_seg(x, t->dst, &sh, sbuf + sh.offset)) != MT_OK)
                return rc;
        }
        if (!t->chain && k < nr && (rc = recv_seg(x, &rh, t, rbuf, k)) != MT_OK)
            return rc;
    }
    return MT_OK;
}

uint64_t coll__post(coll_call *v, const coll_xchg *t, float *rbuf)
{
    coll_ctx *x = ctx_of(v);
    uint64_t id = post_next_id(x->c);
    coll_hdr h = xchg_hdr(x, t, true);
    post_arm(x->c, &h, t, rbuf, nseg(x, t->rl));
    return id;
}

mt_code coll__send(coll_call *v, const coll_xchg *t, const float *sbuf)
{
    coll_ctx *x = ctx_of(v);
    coll_hdr h = xchg_hdr(x, t, false);
    size_t ns = nseg(x, t->sl);
    for (size_t k = 0; k < ns; k++) {
        hdr_seg(x, &h, t->so, t->sl, k);
        mt_code rc = send_seg(x, t->dst, &h, sbuf + h.offset);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

mt_code coll__wait(coll_call *v, int src, uint64_t id)
{
    return recv_posted(ctx_of(v), src, id);
}

void coll__withdraw(coll_call *v)
{
    post_withdraw(ctx_of(v)->c);
}

bool coll__can_post(const coll_call *v, int src)
{
    const coll_ctx *x = (const coll_ctx *)v;
    return x->c->w->by_rank[src] == NULL && coll__net_is_raw(x->c->w);
}

bool coll__sole_ranks(const coll_call *v)
{
    const coll_ctx *x = (const coll_ctx *)v;
    mt_coll_world *w = x->c->w;
    if (!coll__net_is_raw(w))
        return false;
    for (int i = 0; i < x->v.p; i++) {
        if (w->peers[w->proc_of[x->g->ranks[i]]].nranks != 1)
            return false;
    }
    return true;
}

mt_code coll__send_frame(coll_call *v, const coll_xchg *t, const float *sbuf)
{
    coll_ctx *x = ctx_of(v);
    coll_hdr h = xchg_hdr(x, t, false);
    h.offset = t->so;
    h.len = t->sl;
    return send_seg(x, t->dst, &h, sbuf + t->so);
}

mt_code coll__recv_frame(coll_call *v, const coll_xchg *t, float *rbuf)
{
    coll_ctx *x = ctx_of(v);
    coll_hdr h = xchg_hdr(x, t, true);
    coll_frame *m;
    h.offset = t->ro;
    h.len = t->rl;
    mt_code rc = recv_msg(x, t->src, &h, &m);
    if (rc != MT_OK)
        return rc;
    if (t->rl > 0)
        memcpy(rbuf + t->ro, m->data, t->rl * sizeof(float));
    coll__frame_free(m);
    return MT_OK;
}

void coll__progress(coll_call *v, size_t k, size_t n)
{
    coll__progress_chunk(ctx_of(v)->c, k, n);
}

/* ---------------------------------------------------------------- driving */

/*
 * With the direct transport and one device in this process, tree_run's exchanges with
 * another process are run by the device thread alone (see "Driving" in coll_int.h): between
 * its own non-blocking writes it runs the transport's synchronous mode on the peer's
 * connection (coll__net_drive), which reads the frames and puts each where the engine's claim
 * says (drive_step). The engine chooses which connections to drive and when to give them back;
 * it never reads one. It keeps a connection from one large allreduce to the next (c->drive):
 * every other
 * collective, and every path that waits for the reader thread or blocks in a write, gives it
 * back first (drive_release), so the reader thread stays out of the steady state.
 */

/* Give slot d's connection back (with the part of a frame begun) and drop the reference. */
static void drive_release_one(mt_coll_comm *c, coll_drive_conn *d)
{
    if (d->k == NULL)
        return;
    coll__net_drive_close(c->w, d->k);
    d->k = NULL;
}

/* Give every driven socket back: the reader threads deliver what comes next. */
static void drive_release(mt_coll_comm *c)
{
    int any = 0;
    for (int i = 0; i < COLL_DRIVE_SLOTS; i++) {
        any |= c->drive.s[i].k != NULL;
        drive_release_one(c, &c->drive.s[i]);
    }
    if (any) {
        pthread_mutex_lock(&c->mu);
        c->post.drive_proc = -1;
        pthread_mutex_unlock(&c->mu);
    }
}

/* Stop driving for the rest of this collective: the reader thread and recv_posted take over. */
static void drive_off(mt_coll_comm *c)
{
    drive_release(c);
    c->drive.off = 1;
}

/*
 * The slot driving the connection from process proc for the next exchange (taking it up if
 * needed, giving back the least recently used one when all are taken), or NULL: the reader
 * thread serves this exchange.
 */
static coll_drive_conn *drive_acquire(mt_coll_comm *c, int proc)
{
    coll_drive *dv = &c->drive;
    coll_drive_conn *d = NULL;
    if (dv->off)
        return NULL;
    for (int i = 0; i < COLL_DRIVE_SLOTS && d == NULL; i++) {
        if (dv->s[i].k != NULL && dv->s[i].proc == proc)
            d = &dv->s[i];
    }
    if (d == NULL) {
        d = &dv->s[0];
        for (int i = 1; i < COLL_DRIVE_SLOTS && d->k != NULL; i++) {
            if (dv->s[i].k == NULL || dv->s[i].used < d->used)
                d = &dv->s[i];
        }
        drive_release_one(c, d); /* between frames: its exchange is complete */
        if ((d->k = coll__net_drive_open(c->w, proc)) == NULL)
            return NULL; /* no frame came from it yet: its first exchange uses the reader */
        d->proc = proc;
    }
    d->used = ++dv->tick;
    pthread_mutex_lock(&c->mu);
    c->post.drive_proc = proc; /* a reader holding its header hands the socket over (claim 3) */
    int wake = c->post.reader_waiting;
    c->post.reader_waiting = 0;
    pthread_mutex_unlock(&c->mu);
    if (wake)
        coll__net_wake_claim(c->w->net);
    if (coll__net_drive_take(c->w, d->k) == COLL_IO_ENDED) {
        drive_off(c);
        return NULL;
    }
    return d;
}

/* Give back the driven sockets of processes that are not a source in st[0, ns) (tree_run). */
static void drive_keep_only(mt_coll_comm *c, const coll_xchg *st, int ns)
{
    for (int i = 0; i < COLL_DRIVE_SLOTS; i++) {
        coll_drive_conn *d = &c->drive.s[i];
        int needed = 0;
        for (int j = 0; j < ns && d->k != NULL && !needed; j++)
            needed = st[j].src >= 0 && c->w->proc_of[st[j].src] == d->proc;
        if (d->k != NULL && !needed)
            drive_release_one(c, d);
    }
}

/* What drive_recv did for the posted step. */
typedef enum drive_rc {
    DRIVE_MISMATCH = -2,    /* a queued frame did not match (check_msg's code in rx->rc) */
    DRIVE_HANDED_BACK = -1, /* the socket went back to the reader thread (a frame that is not
                               the step's next one, the connection ended): recv_posted
                               finishes the step */
    DRIVE_MORE = 0,         /* more is to come */
    DRIVE_DONE = 1,         /* the step is complete */
} drive_rc;

/* One driven receive: posted step id from src over the connection of slot dv. */
typedef struct drive_rx {
    coll_drive_conn *dv;
    int src;
    uint64_t id;
    bool moved; /* out: something was read */
    mt_code rc; /* out: DRIVE_MISMATCH's code */
} drive_rx;

/*
 * Take what the reader thread queued from src and let the transport read what the driven
 * connection holds for the posted step (see enum drive_rc).
 */
static drive_rc drive_recv(coll_ctx *x, drive_rx *rx)
{
    mt_coll_comm *c = x->c;
    coll_post *p = &c->post;
    coll_io r = coll__net_drive_take(c->w, rx->dv->k);
    if (r == COLL_IO_ENDED) {
        drive_off(c);
        return DRIVE_HANDED_BACK;
    }
    pthread_mutex_lock(&c->mu);
    /* frames the reader thread queued (before the step was posted, or before it handed the
     * socket over) come before the socket's; once the socket is ours no more are queued */
    while (p->done <= rx->id && post_take_queued(x, rx->src, &rx->rc)) {
        rx->moved = true;
        if (rx->rc != MT_OK) {
            pthread_mutex_unlock(&c->mu);
            drive_off(c);
            return DRIVE_MISMATCH;
        }
    }
    int fin = p->done > rx->id;
    pthread_mutex_unlock(&c->mu);
    if (fin)
        return DRIVE_DONE;
    if (r == COLL_IO_AGAIN)
        return DRIVE_MORE;
    for (;;) {
        coll_drive_io io = coll__net_drive(c->w, rx->dv->k);
        if (io == COLL_DRIVE_BACK) { /* the reader thread handles that frame, or the end */
            drive_off(c);
            return DRIVE_HANDED_BACK;
        }
        if (io == COLL_DRIVE_IDLE)
            return DRIVE_MORE;
        rx->moved = true;
        if (io == COLL_DRIVE_MOVED)
            return DRIVE_MORE;
        pthread_mutex_lock(&c->mu);
        fin = p->done > rx->id;
        pthread_mutex_unlock(&c->mu);
        if (fin)
            return DRIVE_DONE;
    }
}

/*
 * Polling before the yields (opts.drive_spin_us, small allreduces): true while the current
 * wait polls on, spinning once (*until: when its polls end; 0 at the start of a wait, -1: no
 * more polls in it). After k waits in a row whose polls ended without progress the next
 * 2^k - 1 waits (at most 63) yield at once: a partner that was not running then (more runnable
 * threads than cores) will not be soon, and spinning would only keep it from a core.
 */
static bool drive_poll(coll_drive *dv, int64_t spin_ns, int64_t *until)
{
    if (*until < 0)
        return false;
    int64_t now = coll__now_ns();
    if (*until == 0) {
        if (backoff_skip(&dv->spin)) {
            *until = -1;
            return false;
        }
        *until = now + spin_ns;
    }
    if (now < *until) {
        coll__cpu_relax();
        return true;
    }
    backoff_miss(&dv->spin);
    *until = -1;
    return false;
}

/*
 * One exchange of tree_run driven by this thread (posted as step id): the segments of t's
 * send region go out with non-blocking writes and the peer's frames are read off the driven
 * connection in between (the transport's synchronous mode), sleeping only when neither can
 * move. Every failure and every frame that is not the next of this step hand the connection
 * back (recv_posted then finishes the step with the reader thread, as without driving, and
 * reports what happened); a write that fails part-way closes the connection, as raw_send does.
 */
static mt_code drive_step(coll_ctx *x, const coll_xchg *t, const float *sbuf, drive_rx *rx)
{
    mt_coll_comm *c = x->c;
    mt_coll_world *w = c->w;
    size_t ns = t->dst >= 0 ? nseg(x, t->sl) : 0, ks = 0;
    int sproc = t->dst >= 0 ? w->proc_of[t->dst] : -1;
    bool recv_on = true;
    coll_hdr sh = xchg_hdr(x, t, false);
    unsigned char shb[COLL_HDR_SIZE];
    coll_out f = {.hdr = shb, .hlen = COLL_HDR_SIZE};
    mt_code rc = MT_OK;
    mt_err e = MT_ERR_INIT;
    if (ns > 0 && (rc = coll__net_dial(w, sproc, x->deadline_ns, &e)) != MT_OK) {
        drive_off(c);
        return send_failed(x, t->dst, rc, e.msg);
    }
    int yields = 0;
    /* a small allreduce of 2 members polls before it yields (drive_poll; with more members on
     * fewer cores the polls cost more than they saved); until: this wait's polls */
    int64_t until = w->drive_spin_ns > 0 && x->v.op == COLL_OP_ALLREDUCE && x->v.p == 2 &&
                            x->v.total * sizeof(float) <= x->v.direct_bytes
                        ? 0
                        : -1;
    bool polls = until == 0;
    for (;;) {
        rx->moved = false;
        while (ks < ns) {
            size_t o, n;
            seg_range(x, t->sl, ks, &o, &n);
            if (f.sent == 0) {
                sh.chunk = (uint32_t)ks;
                sh.offset = t->so + o;
                sh.len = n;
                coll__hdr_encode(&sh, shb);
                f.data = sbuf + t->so + o;
                f.dlen = n * sizeof(float);
            }
            coll_io wr = coll__net_write_some(w, sproc, &f);
            if (wr == COLL_IO_ENDED) {
                int en = errno;
                coll__net_drop(w, sproc);
                drive_off(c);
                return send_failed(x, t->dst, MT_UNAVAILABLE, strerror(en));
            }
            if (wr == COLL_IO_AGAIN)
                break;
            atomic_fetch_add(&w->remote_floats, n);
            ks++;
            f.sent = 0;
            rx->moved = true;
        }
        drive_rc dr = recv_on ? drive_recv(x, rx) : DRIVE_MORE;
        if (dr == DRIVE_MISMATCH)
            return rx->rc; /* a queued frame did not match (check_msg said why) */
        if (dr != DRIVE_MORE)
            recv_on = false;
        if (ks == ns && !recv_on)
            break;
        if (rx->moved) {
            yields = 0;
            if (until > 0)
                c->drive.spin.miss = 0; /* the partner answered while this thread polled */
            until = polls ? 0 : -1;
            continue;
        }
        if (drive_poll(&c->drive, w->drive_spin_ns, &until))
            continue;
        if (yields < w->drive_yields) {
            yields++;
            sched_yield(); /* let a co-scheduled partner run before sleeping */
            continue;
        }
        /* yields is reset only by progress: a long wait sleeps in poll, it does not spin */
        pthread_mutex_lock(&c->mu);
        rc = ended(x);
        if (rc == MT_OK && c->nping > 0)
            answer_pings(x);
        pthread_mutex_unlock(&c->mu);
        if (rc != MT_OK) {
            drive_off(c);
            return rc;
        }
        int64_t now = coll__now_ns();
        if (now >= x->deadline_ns) {
            drive_off(c); /* recv_posted reports the silent peer */
            if (ks < ns) {
                if (f.sent > 0)
                    coll__net_drop(w, sproc); /* a partial frame */
                return send_failed(x, t->dst, MT_DEADLINE_EXCEEDED, "not reading (send timed out)");
            }
            break;
        }
        int64_t ms = (x->deadline_ns - now) / 1000000LL + 1;
        /* at most 10 ms, so ABORTs and PINGs are seen */
        coll_drive_wait wt = {
            .send_proc = ks < ns ? sproc : -1, .recv = recv_on, .ms = ms > 10 ? 10 : (int)ms};
        if (coll__net_drive_wait(w, rx->dv->k, &wt) == COLL_IO_ENDED) {
            drive_off(c); /* the ring's writer died: the reader thread reports it */
            recv_on = false;
        }
    }
    return recv_posted(x, t->src, rx->id); /* at once unless the reader thread has a part */
}

mt_code coll__drive(coll_call *v, const coll_xchg *t, const float *sbuf, float *rbuf, bool *driven)
{
    coll_ctx *x = ctx_of(v);
    mt_coll_comm *c = x->c;
    coll_drive_conn *d;
    *driven = false;
    if (t->src < 0 || c->w->by_rank[t->src] != NULL ||
        (d = drive_acquire(c, c->w->proc_of[t->src])) == NULL)
        return MT_OK; /* drive_acquire: not while driving is off (another transport, OFF) */
    *driven = true;
    drive_rx rx = {.dv = d, .src = t->src, .id = coll__post(v, t, rbuf)};
    return drive_step(x, t, sbuf, &rx);
}

void coll__drive_end(coll_call *v, bool keep)
{
    if (!keep)
        drive_release(ctx_of(v)->c);
}

/*
 * Before the exchanges st[0, ns): give back the driven connections none of them receives from
 * (kept from an allreduce over another group), then, over the direct transport, dial every
 * process st[0, ns) sends to, so that a member which finds a mismatch early (before its own
 * sends) reaches every partner with its ABORT at once; an ABORT that first had to dial could
 * miss its 100 ms bound on a loaded host. Nothing to dial once connected (from the second
 * collective on).
 */
mt_code coll__prepare(coll_call *v, const coll_xchg *st, int ns)
{
    coll_ctx *x = ctx_of(v);
    mt_coll_world *w = x->c->w;
    drive_keep_only(x->c, st, ns);
    for (int i = 0; i < ns && coll__net_is_raw(w); i++) {
        mt_err e = MT_ERR_INIT;
        if (st[i].dst < 0 || w->by_rank[st[i].dst] != NULL)
            continue;
        mt_code rc = coll__net_dial(w, w->proc_of[st[i].dst], x->deadline_ns, &e);
        if (rc != MT_OK)
            return send_failed(x, st[i].dst, rc, e.msg);
    }
    return MT_OK;
}

/* ------------------------------------------------------------ host windows */

/*
 * The host-local fast path (coll_engine.h, coll__win_open): an allreduce whose members are each
 * the only rank of a process of this host runs on one shared-memory segment they all map (a
 * coll_shm.c window, reached through the endpoint: coll__net_win), chunk by chunk: the
 * algorithm copies its input into its slot, the engine's barrier (coll__win_sync) waits for
 * every member, the algorithm folds its part of every slot, a second barrier, the algorithm
 * copies the result out. Two waits per chunk, no frames.
 *
 * Agreement: a group's first call sets the window up in one round of DATA frames (phase
 * COLL_PHASE_WINDOW, the call's tag): position 0 creates it (when it can: shared memory allowed,
 * its links to every member are rings) and sends each member its name ("" when it cannot); each
 * other member maps it and sends every member other than itself its answer; everyone then knows
 * whether every member mapped it, and uses it only then (the same choice everywhere), else
 * records that the group runs the tree. Position 0 unlinks the name once every member answered
 * (a process killed before that leaves it to coll__shm_sweep: the name carries its pid). The
 * round also leaves a connection from every member to every other, so a member that dies is seen
 * (its connection ends) by every other.
 *
 * Barrier k of the window (epochs 2c+1 and 2c+2 for its chunk c; chunks count on across calls,
 * so consecutive chunks alternate buffers and a member never writes a slot another still reads):
 * the first stamps this member's tag (job, step, seq, op, size, chunk, range) and compares every
 * member's after the wait (a mismatch is INVALID_ARGUMENT on every member: each sees every
 * stamp). While waiting the engine does what it does for a frame: PINGs answered, a cancel, an
 * ABORT, a lost member (UNAVAILABLE), the deadline and its diagnosis (DEADLINE_EXCEEDED naming
 * the members that never arrived), and a frame a member sent this one meanwhile (it runs another
 * collective or path: INVALID_ARGUMENT). A call that fails drops the window (unmapped); so does
 * every other member's, as they fail too, and the group's next call sets up a new one.
 */
#define COLL_WIN_SLOT_SEG 4 /* a slot holds this many segments (opts.segment_bytes) ... */
#define COLL_WIN_SLOT_MAX ((size_t)4 << 20) /* ... up to 4 MiB */
#define COLL_WIN_SLICE_NS 10000000LL /* a waiter checks the deadline, ABORTs, peers this often */
#define COLL_WIN_MSG      (COLL_SHM_NAME / sizeof(float)) /* floats of a set-up frame */

typedef struct win_ent {
    int *ranks; /* the group (copied), NULL: a free entry */
    int p;
    coll_win *g;     /* NULL: the group runs without a window */
    uint32_t chunks; /* chunks run on it (its barriers: epochs 2 chunks + 1 and + 2) */
} win_ent;

struct coll_wins {
    const coll_win_ops *ops;
    int64_t spin_ns;
    win_ent **e; /* [n] the groups with a recorded choice (every member records every group, so
                    every member knows whether a group's first call is still to come) */
    int n;
};

/* Forget entry e (its window unmapped). */
static void win_ent_clear(const struct coll_wins *ws, win_ent *e)
{
    if (e->g != NULL)
        ws->ops->free(e->g);
    mt_free(e->ranks);
    *e = (win_ent){0};
}

static void win_drop(mt_coll_comm *c, win_ent *e)
{
    win_ent_clear(c->wins, e);
}

/* Free every window of c (comm_fini). */
static void wins_free(mt_coll_comm *c)
{
    struct coll_wins *ws = c->wins;
    if (ws == NULL)
        return;
    for (int i = 0; i < ws->n; i++) {
        win_ent_clear(ws, ws->e[i]);
        mt_free(ws->e[i]);
    }
    mt_free(ws->e);
    mt_free(ws);
    c->wins = NULL;
}

/* The entry of group g, or NULL. */
static win_ent *win_find(struct coll_wins *ws, const mt_coll_group *g)
{
    for (int i = 0; i < ws->n; i++) {
        win_ent *e = ws->e[i];
        if (e->ranks != NULL && e->p == g->size &&
            memcmp(e->ranks, g->ranks, (size_t)g->size * sizeof(int)) == 0)
            return e;
    }
    return NULL;
}

/* A free entry (a dropped one, or a new one), or NULL: out of memory. */
static win_ent *win_free_ent(struct coll_wins *ws)
{
    for (int i = 0; i < ws->n; i++) {
        if (ws->e[i]->ranks == NULL)
            return ws->e[i];
    }
    win_ent **ne = mt_realloc(ws->e, (size_t)(ws->n + 1) * sizeof(*ne));
    if (ne == NULL)
        return NULL;
    ws->e = ne;
    if ((ne[ws->n] = mt_calloc(1, sizeof(win_ent))) == NULL)
        return NULL;
    return ws->e[ws->n++];
}

/* The header of a set-up frame from src (to this member) or to dst (from it), rstep 0: the
 * window's name, 1: a member's answer. */
static coll_hdr win_msg_hdr(const coll_ctx *x, uint32_t rstep, int src, int dst)
{
    coll_xchg t = {
        .phase = COLL_PHASE_WINDOW, .rstep = rstep, .rstep_in = rstep, .src = src, .dst = dst};
    coll_hdr h = xchg_hdr(x, &t, src >= 0);
    h.len = COLL_WIN_MSG;
    return h;
}

/* Set-up frame msg to dst. */
static mt_code win_send(coll_ctx *x, uint32_t rstep, int dst, const char msg[COLL_SHM_NAME])
{
    float buf[COLL_WIN_MSG];
    coll_hdr h = win_msg_hdr(x, rstep, -1, dst);
    memcpy(buf, msg, sizeof(buf));
    return send_seg(x, dst, &h, buf);
}

/* Set-up frame from src into msg (NUL-terminated). */
static mt_code win_recv(coll_ctx *x, uint32_t rstep, int src, char msg[COLL_SHM_NAME])
{
    coll_hdr h = win_msg_hdr(x, rstep, src, -1);
    coll_frame *f;
    mt_code rc = recv_msg(x, src, &h, &f);
    if (rc != MT_OK)
        return rc;
    memcpy(msg, f->data, COLL_SHM_NAME);
    msg[COLL_SHM_NAME - 1] = '\0';
    coll__frame_free(f);
    return MT_OK;
}

/* Whether this member can take part: window ops, a free entry, and rings to every member (each
 * dialed now: the set-up round then finds every connection made). */
static mt_code win_can(coll_ctx *x, const struct coll_wins *ws, bool *can)
{
    mt_coll_world *w = x->c->w;
    *can = ws->ops != NULL && w->opts.window == MT_COLL_WINDOW_AUTO;
    for (int i = 0; i < x->v.p; i++) {
        int r = x->g->ranks[i], proc = w->proc_of[r];
        mt_err e = MT_ERR_INIT;
        if (r == x->c->rank)
            continue;
        mt_code rc = coll__net_dial(w, proc, x->deadline_ns, &e);
        if (rc != MT_OK)
            return send_failed(x, r, rc, e.msg);
        if (strcmp(mt_coll_world_link(w, w->proc_addr[proc]), "shm") != 0)
            *can = false;
    }
    return MT_OK;
}

/*
 * The group's first call: the set-up round (see above). On MT_OK *out is the group's entry (its
 * window, or none); on a failure nothing is recorded (and nothing is left mapped or named).
 */
static mt_code win_setup(coll_ctx *x, struct coll_wins *ws, win_ent **out)
{
    int p = x->v.p, pos = x->v.pos;
    const int *ranks = x->g->ranks;
    win_ent *e = win_free_ent(ws);
    coll_win *g = NULL;
    if (e == NULL)
        return ctx_fail(x, MT_RESOURCE_EXHAUSTED, "out of memory");
    char name[COLL_SHM_NAME] = "", msg[COLL_SHM_NAME] = "";
    bool can, all = true;
    size_t slot = x->v.seg * sizeof(float) * COLL_WIN_SLOT_SEG;
    coll_win_spec q = {.job = x->c->w->opts.job_id,
                       .p = p,
                       .slot_bytes = slot < COLL_WIN_SLOT_MAX ? (slot + 4095) & ~(size_t)4095
                                                              : COLL_WIN_SLOT_MAX,
                       .spin_ns = ws->spin_ns};
    mt_code rc = win_can(x, ws, &can);
    for (int i = 1; i < p && rc == MT_OK && pos == 0; i++) {
        mt_err er = MT_ERR_INIT;
        if (i == 1 && can && ws->ops->create(&q, &g, name, &er) != MT_OK)
            mt_log_warn("coll: no host window for a group of %d: %s", p, er.msg);
        rc = win_send(x, 0, ranks[i], name); /* "" when there is none */
    }
    if (rc == MT_OK && pos > 0 && (rc = win_recv(x, 0, ranks[0], name)) == MT_OK) {
        mt_err er = MT_ERR_INIT;
        if (can && name[0] != '\0' && ws->ops->attach(name, &q, &g, &er) != MT_OK)
            mt_log_warn("coll: cannot map the host window %s: %s", name, er.msg);
        msg[0] = g != NULL ? 'y' : '\0';
        all = g != NULL;
        for (int i = 0; i < p && rc == MT_OK; i++) {
            if (i != pos)
                rc = win_send(x, 1, ranks[i], msg);
        }
    }
    for (int i = 1; i < p && rc == MT_OK; i++) {
        if (i != pos && (rc = win_recv(x, 1, ranks[i], msg)) == MT_OK)
            all = all && msg[0] == 'y';
    }
    if (g != NULL && pos == 0)
        ws->ops->unlink(name); /* every member answered (or the call failed) */
    if (g != NULL && (rc != MT_OK || !all)) {
        ws->ops->free(g);
        g = NULL;
    }
    if (rc != MT_OK)
        return rc;
    e->ranks = mt_malloc((size_t)p * sizeof(int));
    if (e->ranks == NULL) {
        if (g != NULL)
            ws->ops->free(g);
        return ctx_fail(x, MT_RESOURCE_EXHAUSTED, "out of memory");
    }
    memcpy(e->ranks, ranks, (size_t)p * sizeof(int));
    e->p = p;
    e->g = g;
    e->chunks = 0;
    *out = e;
    if (g != NULL && pos == 0)
        mt_log_info("coll: allreduces of job %" PRIu64 " over %d processes of this host (rank %d "
                    "first) run on a host window (%zu KiB slots)",
                    x->c->w->opts.job_id, p, ranks[0],
                    ws->ops->slot_floats(g) * sizeof(float) / 1024);
    return MT_OK;
}

/* The host a rank table address names: HOST of tcp://HOST:PORT (*len bytes), or NULL for a
 * local socket path (ipc://, shm://: this host). */
static const char *addr_host(const char *addr, size_t *len)
{
    if (strncmp(addr, "tcp://", 6) != 0) {
        *len = 0;
        return NULL;
    }
    const char *h = addr + 6, *colon = strrchr(h, ':');
    *len = colon != NULL ? (size_t)(colon - h) : strlen(h);
    return h;
}

int mt_coll_world_host_ranks(const mt_coll_world *w)
{
    size_t l0 = 0, l;
    const char *h0 = w->proc_addr != NULL ? addr_host(w->proc_addr[w->my_proc], &l0) : NULL;
    int n = 0;
    for (int r = 0; r < w->size; r++) {
        const char *h = h0 != NULL ? addr_host(rank_addr(w, r), &l) : NULL;
        n += w->by_rank[r] != NULL || (h != NULL && l == l0 && strncmp(h, h0, l) == 0);
    }
    return n;
}

/* Every member's address names the same host: the rank table says so, the same on every member
 * (members on several hosts then never set a window up, nor connect to every other member). */
static bool win_one_host(const coll_ctx *x)
{
    const mt_coll_world *w = x->c->w;
    size_t l0, l;
    const char *h0 = addr_host(rank_addr(w, x->g->ranks[0]), &l0);
    for (int i = 1; i < x->v.p; i++) {
        const char *h = addr_host(rank_addr(w, x->g->ranks[i]), &l);
        if ((h == NULL) != (h0 == NULL) || l != l0 || (h != NULL && strncmp(h, h0, l) != 0))
            return false;
    }
    return true;
}

mt_code coll__win_open(coll_call *v, bool *ok, size_t *slot_floats)
{
    coll_ctx *x = ctx_of(v);
    mt_coll_comm *c = x->c;
    win_ent *e;
    *ok = false;
    /* the same on every member: the operation, the group and the rank table (one host) */
    if (x->v.op != COLL_OP_ALLREDUCE || x->v.p < 3 || x->v.p > COLL_WIN_MAX ||
        !coll__sole_ranks(v) || !win_one_host(x))
        return MT_OK;
    if (c->wins == NULL) {
        c->wins = mt_calloc(1, sizeof(*c->wins));
        if (c->wins == NULL)
            return ctx_fail(x, MT_RESOURCE_EXHAUSTED, "out of memory");
        c->wins->ops = coll__net_win(c->w, &c->wins->spin_ns);
    }
    if ((e = win_find(c->wins, x->g)) == NULL) {
        drive_release(c); /* the set-up's frames come through the reader threads */
        mt_code rc = win_setup(x, c->wins, &e);
        if (rc != MT_OK)
            return rc;
    }
    if (e->g == NULL)
        return MT_OK;
    drive_release(c); /* the reader threads watch every member's connection meanwhile */
    x->win = e;
    *ok = true;
    *slot_floats = c->wins->ops->slot_floats(e->g);
    return MT_OK;
}

float *coll__win_slot(coll_call *v, int i)
{
    coll_ctx *x = ctx_of(v);
    return x->c->wins->ops->slot(x->win->g, (int)(x->win->chunks & 1), i);
}

/*
 * While waiting at barrier epoch for member m (group position), a frame from it is queued (c->mu
 * held): if m still has not arrived, it sent that frame instead (it runs another collective or
 * path), INVALID_ARGUMENT naming it. A member that arrived may already send frames of its next
 * call (this barrier completed meanwhile): those stay queued.
 */
static mt_code win_stray(coll_ctx *x, uint32_t epoch, int m)
{
    int r = x->g->ranks[m];
    if (x->c->q[r].count == 0 || x->c->wins->ops->wait(x->win->g, epoch, 0) != m)
        return MT_OK;
    coll_frame *f = pop_live(x->c, r);
    if (f == NULL)
        return MT_OK;
    coll_hdr want = win_msg_hdr(x, 2, r, -1); /* rstep 2: no set-up frame matches */
    mt_code rc = check_msg(x, r, f, &want);
    if (rc == MT_OK) { /* every field matched a set-up step that does not exist: cannot be */
        coll__frame_free(f);
        rc = ctx_fail(x, MT_INVALID_ARGUMENT, "unexpected message from rank %d (%s)", r,
                      rank_addr(x->c->w, r));
    }
    return rc;
}

/* Wait until every member arrived at epoch, checking between slices what a wait for data
 * checks. */
static mt_code win_wait(coll_ctx *x, uint32_t epoch)
{
    mt_coll_comm *c = x->c;
    const coll_win_ops *ops = c->wins->ops;
    for (;;) {
        int m = ops->wait(x->win->g, epoch, coll__now_ns() + COLL_WIN_SLICE_NS);
        if (m < 0)
            return MT_OK;
        bool busy = false;
        pthread_mutex_lock(&c->mu);
        mt_code rc = ended(x);
        if (rc == MT_OK)
            rc = win_stray(x, epoch, m);
        if (rc == MT_OK)
            rc = wait_check(x, x->g->ranks[m], &busy);
        if (rc == MT_OK && !busy)
            coll__progress_wait(c);
        pthread_mutex_unlock(&c->mu);
        if (rc != MT_OK)
            return rc;
    }
}

mt_code coll__win_sync(coll_call *v, bool inputs, size_t off, size_t len)
{
    coll_ctx *x = ctx_of(v);
    win_ent *e = x->win;
    const coll_win_ops *ops = x->c->wins->ops;
    uint32_t epoch = 2 * e->chunks + (inputs ? 1u : 2u);
    coll_xchg t = {.phase = COLL_PHASE_WINDOW, .rstep = 2, .dst = -1};
    coll_hdr st = xchg_hdr(x, &t, false);
    st.chunk = e->chunks;
    st.offset = off;
    st.len = len;
    ops->arrive(e->g, x->v.pos, epoch, inputs ? &st : NULL);
    mt_code rc = win_wait(x, epoch);
    for (int i = 0; i < x->v.p && rc == MT_OK && inputs; i++) {
        coll_hdr h;
        if (i == x->v.pos)
            continue;
        ops->stamp(e->g, i, &h);
        rc = check_hdr(x, x->g->ranks[i], &h, &st);
    }
    if (rc == MT_OK && !inputs)
        e->chunks++;
    return rc;
}

mt_code coll__fail(coll_call *v, mt_code code, const char *fmt, ...)
{
    char body[MT_ERR_MSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof(body), fmt, ap);
    va_end(ap);
    return ctx_fail(ctx_of(v), code, "%s", body);
}

mt_code coll__run(mt_coll_comm *comm, const mt_coll_group *group, const mt_coll_call *call,
                  const coll_run *r, mt_err *err)
{
    coll_ctx x = {.c = comm, .g = group, .err = err};
    mt_code rc = ctx_begin(&x, call, r);
    if (rc == MT_OK)
        rc = r->fn(&x.v, r->arg);
    return ctx_end(&x, rc);
}
