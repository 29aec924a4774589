/* SPDX-License-Identifier: MIT */
/*
 * cmd_logs.c — `meshtrain logs JOB [--follow] [--tail N] [--worker W] [--after ID] [--json]`:
 * the lines the job's workers logged, as the coordinator keeps them (GetJobLog pages, oldest
 * first; docs/cli.md). --follow polls once a second until the job has ended and every line is
 * printed. One connection for the whole command (it redials by itself if the coordinator
 * restarts; a call that fails ends the command with the call's error).
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "client/jobs_util.h"
#include "rpc/mt_rpc.h"

#define LOGS_PAGE    1000
#define LOGS_POLL_MS 1000

typedef struct logs_opts {
    const char *job;
    const char *worker; /* NULL: every worker */
    uint64_t after;
    long tail; /* < 0: every line */
    bool follow, json;
} logs_opts;

/* The lines kept back for --tail: a ring of the newest `cap`. */
typedef struct logs_ring {
    Meshtrain__JobLogLine **v; /* each owned (copied out of its reply) */
    size_t cap, n, head;
} logs_ring;

static void print_line(const Meshtrain__JobLogLine *l, bool json)
{
    if (json) {
        cJSON *o = cJSON_CreateObject();
        char *s;
        cJSON_AddNumberToObject(o, "id", (double)l->id);
        cJSON_AddStringToObject(o, "worker_id", l->worker_id);
        cJSON_AddNumberToObject(o, "attempt", l->attempt);
        cJSON_AddNumberToObject(o, "seq", (double)l->seq);
        cJSON_AddNumberToObject(o, "time_ms", (double)l->time_ms);
        cJSON_AddStringToObject(o, "level", l->level);
        cJSON_AddStringToObject(o, "text", l->text);
        if ((s = cJSON_PrintUnformatted(o)) != NULL)
            printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        char t[64], lv[8];
        size_t i;
        mt_cli_fmt_time(t, sizeof(t), l->time_ms);
        for (i = 0; i + 1 < sizeof(lv) && l->level[i] != '\0'; i++)
            lv[i] =
                (char)(l->level[i] >= 'a' && l->level[i] <= 'z' ? l->level[i] - 32 : l->level[i]);
        lv[i] = '\0';
        printf("%s.%03d %s #%u %-5s %s\n", t, (int)(l->time_ms % 1000 + 1000) % 1000, l->worker_id,
               l->attempt, lv, l->text);
    }
}

static Meshtrain__JobLogLine *line_copy(const Meshtrain__JobLogLine *l)
{
    Meshtrain__JobLogLine *c = mt_calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    meshtrain__job_log_line__init(c);
    c->id = l->id;
    c->attempt = l->attempt;
    c->seq = l->seq;
    c->time_ms = l->time_ms;
    c->worker_id = mt_strdup(l->worker_id);
    c->level = mt_strdup(l->level);
    c->text = mt_strdup(l->text);
    if (c->worker_id == NULL || c->level == NULL || c->text == NULL) {
        mt_free(c->worker_id);
        mt_free(c->level);
        mt_free(c->text);
        mt_free(c);
        return NULL;
    }
    return c;
}

static void line_free(Meshtrain__JobLogLine *l)
{
    if (l == NULL)
        return;
    mt_free(l->worker_id);
    mt_free(l->level);
    mt_free(l->text);
    mt_free(l);
}

/* Keep l among the newest r->cap lines. MT_OK or RESOURCE_EXHAUSTED. */
static mt_code ring_push(logs_ring *r, const Meshtrain__JobLogLine *l, mt_err *err)
{
    Meshtrain__JobLogLine *c;
    if (r->cap == 0)
        return MT_OK;
    if ((c = line_copy(l)) == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "logs: out of memory");
    if (r->n < r->cap) {
        r->v[(r->head + r->n++) % r->cap] = c;
    } else {
        line_free(r->v[r->head]);
        r->v[r->head] = c;
        r->head = (r->head + 1) % r->cap;
    }
    return MT_OK;
}

static void ring_flush(logs_ring *r, bool json)
{
    for (size_t i = 0; i < r->n; i++) {
        Meshtrain__JobLogLine *l = r->v[(r->head + i) % r->cap];
        print_line(l, json);
        line_free(l);
    }
    r->n = r->head = 0;
}

static int run(const mt_cli_global *g, const logs_opts *o)
{
    Meshtrain__GetJobLogRequest req = MESHTRAIN__GET_JOB_LOG_REQUEST__INIT;
    struct mt_rpc_client *cli = NULL;
    logs_ring ring = {0};
    bool holding = o->tail >= 0; /* lines go to the ring until the backlog is read */
    mt_err err = MT_ERR_INIT;
    mt_code rc;

    if (holding && o->tail > 0 && (ring.v = mt_calloc((size_t)o->tail, sizeof(*ring.v))) == NULL) {
        mt_err_set(&err, MT_RESOURCE_EXHAUSTED, "logs: out of memory");
        return mt_cli_fail(&err);
    }
    ring.cap = holding ? (size_t)o->tail : 0;
    if ((rc = mt_cli_connect(g, &cli, &err)) != MT_OK)
        goto out;
    req.job_id = (char *)o->job;
    req.after = o->after;
    req.limit = LOGS_PAGE;
    for (;;) {
        Meshtrain__GetJobLogReply *rep = NULL;
        bool finished;
        size_t n;
        rc = mt_rpc_client_call(cli, &meshtrain__coordinator__descriptor, "GetJobLog", &req.base,
                                (ProtobufCMessage **)&rep, g->timeout_ms, &err);
        if (rc != MT_OK)
            goto out;
        for (size_t i = 0; i < rep->n_lines && rc == MT_OK; i++) {
            const Meshtrain__JobLogLine *l = rep->lines[i];
            if (o->worker != NULL && strcmp(l->worker_id, o->worker) != 0)
                continue;
            if (holding)
                rc = ring_push(&ring, l, &err);
            else
                print_line(l, o->json);
        }
        req.after = rep->next;
        finished = rep->finished;
        n = rep->n_lines;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        if (rc != MT_OK)
            goto out;
        if (n == LOGS_PAGE)
            continue;  /* more are kept: read on without waiting */
        if (holding) { /* the backlog is read: print its tail, then follow as it comes */
            ring_flush(&ring, o->json);
            holding = false;
        }
        fflush(stdout);
        if (!o->follow || (finished && n == 0))
            break;
        if (finished)
            continue; /* the state was read before the lines: one more page settles it */
        nanosleep(&(struct timespec){0, LOGS_POLL_MS * 1000000L}, NULL);
    }
out:
    if (holding)
        ring_flush(&ring, o->json); /* what was read before a failure */
    for (size_t i = 0; i < ring.n; i++)
        line_free(ring.v[(ring.head + i) % ring.cap]);
    mt_free(ring.v);
    if (cli != NULL)
        mt_rpc_client_close(cli);
    fflush(stdout);
    return rc == MT_OK ? MT_EXIT_OK : mt_cli_fail(&err);
}

int cmd_logs(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"follow", no_argument, NULL, 'f'},
        {"tail", required_argument, NULL, 'n'},
        {"worker", required_argument, NULL, 'w'},
        {"after", required_argument, NULL, 'a'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    logs_opts o = {.tail = -1};
    char *end;
    int c;

    while ((c = getopt_long(argc, argv, "fn:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            o.follow = true;
            break;
        case 'n':
            o.tail = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || o.tail < 0 || o.tail > 100000)
                return mt_cli_usage_error("logs", "--tail: expected a count in 0..100000, not '%s'",
                                          optarg);
            break;
        case 'w':
            o.worker = optarg;
            break;
        case 'a':
            o.after = strtoull(optarg, &end, 10);
            if (*optarg == '\0' || *optarg == '-' || *end != '\0' || o.after > (1ull << 62))
                return mt_cli_usage_error("logs", "--after: expected a line id, not '%s'", optarg);
            break;
        case 'j':
            o.json = true;
            break;
        case 'h':
            printf("usage: meshtrain logs JOB [-f|--follow] [-n|--tail N] [--worker W] "
                   "[--after ID] [--json]\n\n"
                   "The lines JOB's workers logged, oldest first, as the coordinator keeps them\n"
                   "(the newest 5000 per job): time, worker, attempt, level, text.\n\n"
                   "  -f, --follow   keep printing new lines until the job has ended\n"
                   "  -n, --tail N   start with the last N lines only\n"
                   "  --worker W     only the lines of worker W\n"
                   "  --after ID     only lines after line ID (--json prints each line's id)\n"
                   "  --json         one JSON object per line\n");
            return MT_EXIT_OK;
        default:
            return mt_cli_usage_error("logs", "unknown option");
        }
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("logs", "expected one JOB argument");
    o.job = argv[optind];
    return run(g, &o);
}
