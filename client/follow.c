/* SPDX-License-Identifier: MIT */
/*
 * follow.c — the progress view of `meshtrain watch` and `submit --follow` (contract in follow.h).
 *
 * The view keeps the latest value of each metric the runner reports. The step inside an epoch
 * is step - (epoch - 1) * S where S is the longest epoch_steps seen (every epoch but a capped
 * last one has the full length). An epoch's line is closed when its eval results arrive or the
 * next epoch begins, so history pages that span several epochs print every epoch.
 * mt_cli_wait runs the same loop in the quiet mode: points are read and dropped, only the final
 * state is printed, and an optional deadline bounds the wait. In every mode a stream that stays
 * silent for 5 s is backed by a GetJob, so a missed final event cannot make the CLI wait forever.
 *
 * Restart markers ("-- restart 1 (worker w2 lost ...): resuming from step 40 --"): the restarts
 * come from the job's state history (core/watch mt_watch_restart_scan) — a GetJob right after
 * subscribing (those already in the history), the live state events the coordinator publishes
 * (RESTARTING, SCHEDULED again), and a GetJob again when the stream is silent or a live loss
 * step goes backwards (a missed state event). They are queued and printed once each, by number:
 * in the history before the first point past the resume step, live at once. After a marker the
 * progress continues from the resume step.
 */
#include "client/follow.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client/jobs_util.h"
#include "client/progress.h"
#include "clock/mt_clock.h"
#include "loss/mt_loss.h"
#include "rpc/mt_rpc.h"
#include "watch/mt_watch.h"

#define STATE_POLL_MS 5000 /* GetJob after this long without a stream event */
#define MAX_PENDING   32   /* restart markers queued before they are printed */

typedef enum follow_mode { FOLLOW_BAR, FOLLOW_JSON, FOLLOW_QUIET } follow_mode;

#define MAX_METRICS 16 /* names shown per group (loss and metrics; val_ and test_ ones) */

/* The latest value of each metric name of a group, in Keras's order whatever order the points
 * came in (a job's history comes by name): loss, the metrics in core/loss's order, val_ ones,
 * test_ ones, then names outside the vocabulary. */
typedef struct metrics {
    char name[MAX_METRICS][40];
    double value[MAX_METRICS];
    size_t n;
} metrics;

/* The place of a name in that order. */
static int metric_rank(const char *name)
{
    for (int g = MT_METRIC_GROUP_TRAIN; g <= MT_METRIC_GROUP_TEST; g++)
        for (int k = -1; k < MT_METRIC_COUNT; k++)
            if (strcmp(name, mt_metric_report_name((mt_metric_group)g, k)) == 0)
                return g * (MT_METRIC_COUNT + 1) + k + 1;
    return 3 * (MT_METRIC_COUNT + 1);
}

static void metrics_set(metrics *m, const char *name, double value)
{
    size_t i = 0;
    int r = metric_rank(name);

    while (i < m->n && strcmp(m->name[i], name) != 0)
        i++;
    if (i < m->n) {
        m->value[i] = value;
        return;
    }
    if (m->n == MAX_METRICS)
        return;
    for (i = m->n; i > 0 && metric_rank(m->name[i - 1]) > r; i--) { /* keep the order */
        memcpy(m->name[i], m->name[i - 1], sizeof(m->name[i]));
        m->value[i] = m->value[i - 1];
    }
    snprintf(m->name[i], sizeof(m->name[i]), "%s", name);
    m->value[i] = value;
    m->n++;
}

/* " - name: value" for each, appended at out[at..cap); returns the new length. */
static size_t metrics_fmt(const metrics *m, char *out, size_t at, size_t cap)
{
    for (size_t i = 0; i < m->n && at < cap; i++) {
        int k = snprintf(out + at, cap - at, " - %s: %.4f", m->name[i], m->value[i]);
        at = k < 0 ? at : at + (size_t)k < cap ? at + (size_t)k : cap - 1;
    }
    return at;
}

/* Points that are not metrics of the model: progress, throughput, markers. */
static bool metric_name(const char *name)
{
    static const char *const other[] = {"epochs", "epoch_steps", "examples_per_sec", "best_step",
                                        "checkpoint_skipped"};
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        if (strcmp(name, other[i]) == 0)
            return false;
    return true;
}

typedef struct view {
    bool tty, json, quiet;
    int64_t epochs, epoch, epoch_steps, full;
    uint64_t step, drawn; /* latest step; the step of the last plain line */
    metrics train;        /* loss, accuracy, ... of this epoch (Keras's names, core/loss) */
    metrics eval;         /* val_* (after a validation) and test_* (epoch end) */
    bool have_eval, printed_step;
    bool line_open;                     /* the epoch has progress whose line is not closed */
    int64_t t0_ms, last_ms;             /* first and latest point times of the epoch */
    mt_watch_restart_scan scan;         /* the state history read so far */
    mt_watch_restart pend[MAX_PENDING]; /* restarts queued, not yet printed */
    size_t n_pend;
    uint32_t queued;      /* highest restart number queued (printed or pending) */
    mt_cli_progress prog; /* the line on a terminal; the pace of plain lines elsewhere */
} view;

static int64_t epoch_step(const view *v)
{
    int64_t s = (int64_t)v->step - (v->epoch - 1) * v->full;
    if (v->full == 0 || s < 0)
        s = (int64_t)v->step;
    if (v->epoch_steps > 0 && s > v->epoch_steps)
        s = v->epoch_steps;
    return s;
}

static void fmt_metrics(const view *v, char *out, size_t cap)
{
    out[0] = '\0';
    metrics_fmt(&v->train, out, 0, cap);
}

static void fmt_head(const view *v, char *out, size_t cap)
{
    snprintf(out, cap, "Epoch %" PRId64 "/%" PRId64, v->epoch,
             v->epochs > 0 ? v->epochs : v->epoch);
}

static int64_t epoch_total(const view *v, int64_t s)
{
    return v->epoch_steps > 0 ? v->epoch_steps : s;
}

/* Not a terminal: the plain progress line ("Epoch 2/3  step 512/938 - loss: ..."), now. */
static void print_plain(view *v)
{
    char m[128], head[64];
    int64_t s = epoch_step(v);

    fmt_metrics(v, m, sizeof(m));
    fmt_head(v, head, sizeof(head));
    printf("%s  step %" PRId64 "/%" PRId64 "%s\n", head, s, epoch_total(v, s), m);
    fflush(stdout);
    v->drawn = v->step;
    mt_cli_progress_mark(&v->prog, mt_clock_mono_ms());
}

/*
 * The epoch's progress moved: redrawn in place on a terminal (fitted to its width); elsewhere a
 * plain line when one is due (--log-every) and this step was not printed yet.
 */
static void draw(view *v)
{
    char m[128], head[64], tail[160];
    int64_t s = epoch_step(v), n = epoch_total(v, s);
    double ms_per = s > 1 ? (double)(v->last_ms - v->t0_ms) / (double)(s - 1) : 0.0;

    if (v->epoch == 0)
        return;
    v->line_open = true;
    if (!v->tty) {
        if (v->drawn != v->step && mt_cli_progress_due(&v->prog, mt_clock_mono_ms()))
            print_plain(v);
        return;
    }
    fmt_metrics(v, m, sizeof(m));
    fmt_head(v, head, sizeof(head));
    snprintf(tail, sizeof(tail), " - ETA: %.0fs%s", ms_per * (double)(n - s) / 1000.0, m);
    mt_cli_progress_draw(&v->prog, head, s, n, tail);
}

/*
 * Before other output (a restart marker, the final state): end the line drawn in place on a
 * terminal; elsewhere print the progress not printed yet, so the log shows where the job was.
 */
static void end_open(view *v)
{
    if (v->line_open && !v->tty && v->drawn != v->step && v->epoch > 0)
        print_plain(v);
    mt_cli_progress_end_line(&v->prog);
    v->line_open = false;
}

/*
 * Close the current epoch's line, with its time and eval results when they came: the in-place
 * line's last draw on a terminal, one plain line elsewhere (the one line per epoch of a log).
 */
static void close_epoch(view *v)
{
    char m[256], head[64], tail[512];
    int64_t s = epoch_step(v), n = epoch_total(v, s);
    double ms_per = s > 1 ? (double)(v->last_ms - v->t0_ms) / (double)(s - 1) : 0.0;
    int k;

    if (v->epoch == 0)
        return;
    fmt_metrics(v, m, sizeof(m));
    fmt_head(v, head, sizeof(head));
    k = snprintf(tail, sizeof(tail), " - %.0fs%s",
                 (double)(v->last_ms - v->t0_ms) / 1000.0 + ms_per / 1000.0, m);
    if (k > 0 && (size_t)k < sizeof(tail))
        metrics_fmt(&v->eval, tail, (size_t)k, sizeof(tail));
    if (v->tty) {
        mt_cli_progress_close(&v->prog, head, s, n, tail, mt_clock_mono_ms());
    } else {
        printf("%s  step %" PRId64 "/%" PRId64 "%s\n", head, s, n, tail);
        mt_cli_progress_mark(&v->prog, mt_clock_mono_ms());
        v->drawn = v->step;
    }
    fflush(stdout);
    v->line_open = false;
    v->have_eval = false;
    v->eval.n = 0;
}

static void json_point(const mt_watch_point *p)
{
    printf("{\"step\": %" PRIu64 ", \"epoch\": %u, \"name\": \"%s\", \"value\": %.9g, "
           "\"time_ms\": %" PRId64 "}\n",
           p->step, p->epoch, p->name, p->value, p->time_ms);
}

/* Queue r when it is newer than every restart queued before (each is printed once). */
static void queue_restart(view *v, const mt_watch_restart *r)
{
    if (r->number <= v->queued || v->n_pend == MAX_PENDING)
        return;
    v->pend[v->n_pend++] = *r;
    v->queued = r->number;
}

static void print_marker(view *v, const mt_watch_restart *r)
{
    char step[48];

    if (v->json) {
        cJSON *o = mt_watch_restart_json(r);
        cJSON_DeleteItemFromObject(o, "lost_step"); /* GetJob's events carry no step */
        char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
        if (txt != NULL)
            printf("%s\n", txt);
        cJSON_free(txt);
        cJSON_Delete(o);
    } else {
        end_open(v);
        if (r->resume_step >= 0)
            snprintf(step, sizeof(step), "step %lld", (long long)r->resume_step);
        else
            snprintf(step, sizeof(step), "its last checkpoint");
        printf("-- restart %u%s%s%s: resuming from %s --\n", r->number, r->cause[0] ? " (" : "",
               r->cause, r->cause[0] ? ")" : "", step);
        v->have_eval = false;
    }
    fflush(stdout);
    v->step = r->resume_step > 0 ? (uint64_t)r->resume_step : 0; /* the bar goes on from there */
    v->drawn = v->step;
}

/*
 * Print the queued markers that go before a point at step `before` (history: resumed below it);
 * every queued marker when all is set (live, the end of the history, a silent stream).
 */
static void flush_markers(view *v, uint64_t before, bool all)
{
    size_t k = 0;

    for (size_t i = 0; i < v->n_pend; i++) {
        const mt_watch_restart *r = &v->pend[i];
        if (all || (r->resume_step >= 0 && (uint64_t)r->resume_step < before))
            print_marker(v, r);
        else
            v->pend[k++] = *r;
    }
    v->n_pend = k;
}

/* A live state change: RESTARTING (its cause) or SCHEDULED again (the restart is complete). */
static void apply_state(view *v, const mt_watch_event *ev)
{
    mt_watch_restart r;

    if (mt_watch_restart_scan_event(&v->scan, ev->state, ev->error, mt_clock_wall_ms(), 0, &r))
        queue_restart(v, &r);
}

static bool job_poll(const mt_cli_global *g, const char *job_id, view *v, mt_watch_event *ev);

static void apply(const mt_cli_global *g, const char *job_id, view *v, const mt_watch_event *ev)
{
    bool stepped = false;

    if (v->quiet)
        return;
    if (ev->live && !ev->final && ev->n_points == 0 && ev->state[0] != '\0')
        apply_state(v, ev);
    if (ev->live)
        flush_markers(v, 0, true);
    for (size_t i = 0; i < ev->n_points; i++) {
        const mt_watch_point *p = &ev->points[i];
        if (ev->live && p->step < v->step && strcmp(p->name, "loss") == 0) {
            mt_watch_event st; /* steps redone: a restart whose state event was missed */
            job_poll(g, job_id, v, &st);
            if (stepped && !v->json)
                draw(v);
            stepped = false;
            flush_markers(v, 0, true);
            v->step = p->step;
        } else if (!ev->live && v->n_pend > 0) {
            size_t before = v->n_pend;
            if (stepped && !v->json && v->pend[0].resume_step >= 0 &&
                (uint64_t)v->pend[0].resume_step < p->step)
                draw(v), stepped = false;
            flush_markers(v, p->step, false);
            if (v->n_pend != before)
                v->step = p->step;
        }
        if (v->json) {
            json_point(p);
            continue;
        }
        if ((int64_t)p->epoch != v->epoch && p->epoch > 0) {
            if (v->line_open || v->have_eval || (v->epoch > 0 && stepped))
                close_epoch(v);
            v->epoch = p->epoch;
            v->t0_ms = p->time_ms;
            v->train.n = 0;
            stepped = false;
        }
        if (p->step > v->step)
            v->step = p->step;
        v->last_ms = p->time_ms;
        if (strcmp(p->name, "epochs") == 0) {
            v->epochs = (int64_t)p->value;
        } else if (strcmp(p->name, "epoch_steps") == 0) {
            v->epoch_steps = (int64_t)p->value;
            if (v->epoch_steps > v->full)
                v->full = v->epoch_steps;
        } else if (strncmp(p->name, "test_", 5) == 0) {
            metrics_set(&v->eval, p->name, p->value); /* the epoch's end */
            v->have_eval = true;
        } else if (strncmp(p->name, "val_", 4) == 0) {
            metrics_set(&v->eval, p->name, p->value); /* shown when the epoch closes */
        } else if (metric_name(p->name)) {
            metrics_set(&v->train, p->name, p->value);
            if (strcmp(p->name, "loss") == 0)
                stepped = true;
        }
    }
    for (size_t i = 0; v->json && i < ev->n_digests; i++) /* `diverge` reads these lines */
        printf("{\"step\": %" PRIu64 ", \"digest\": \"%s\"}\n", ev->digests[i].step,
               ev->digests[i].digest);
    if (!v->json && v->have_eval)
        close_epoch(v);
    else if (!v->json && stepped)
        draw(v);
    if (ev->final) /* the history of an ended job: markers past its last point */
        flush_markers(v, 0, true);
    fflush(stdout);
}

/*
 * The stream's final event can be missed (PUB/SUB drops it while the subscriber is
 * reconnecting, or a restarted coordinator publishes on a new port): after STATE_POLL_MS without
 * an event, ask GetJob. True, with ev filled as a final event, when the job has ended; RPC
 * failures count as "not known to have ended" (the wait goes on; --timeout bounds it).
 * Restarts in the reply's state history not queued yet are queued (unless quiet).
 */
static bool job_poll(const mt_cli_global *g, const char *job_id, view *v, mt_watch_event *ev)
{
    Meshtrain__GetJobRequest req = MESHTRAIN__GET_JOB_REQUEST__INIT;
    Meshtrain__GetJobReply *rep = NULL;
    mt_watch_restart_scan scan;
    mt_watch_restart r;
    bool ended = false;

    req.job_id = (char *)job_id;
    if (mt_cli_call(g, "GetJob", &req.base, (ProtobufCMessage **)&rep, NULL) != MT_OK)
        return false;
    mt_watch_restart_scan_init(&scan);
    for (size_t i = 0; i < rep->n_events && !v->quiet; i++) {
        const Meshtrain__JobEvent *e = rep->events[i];
        if (mt_watch_restart_scan_event(&scan, e->state, e->reason, e->time_ms, 0, &r))
            queue_restart(v, &r);
    }
    if (!v->quiet)
        v->scan = scan; /* the live state events go on from here */
    if (rep->job != NULL &&
        (strcmp(rep->job->state, "SUCCEEDED") == 0 || strcmp(rep->job->state, "FAILED") == 0 ||
         strcmp(rep->job->state, "CANCELLED") == 0)) {
        memset(ev, 0, sizeof(*ev));
        ev->final = true;
        snprintf(ev->state, sizeof(ev->state), "%s", rep->job->state);
        snprintf(ev->error, sizeof(ev->error), "%s", rep->error ? rep->error : "");
        ended = true;
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return ended;
}

static int follow_job(const mt_cli_global *g, const char *job_id, follow_mode mode,
                      int64_t timeout_ms, int64_t log_every_ms)
{
    mt_rpc_client *cli = NULL;
    mt_watch *w = NULL;
    mt_err err = MT_ERR_INIT;
    mt_watch_event ev;
    view v;
    mt_code rc;
    int code = MT_EXIT_FAILED;
    int64_t deadline = timeout_ms > 0 ? mt_clock_mono_ms() + timeout_ms : 0;
    int64_t next_poll = mt_clock_mono_ms() + STATE_POLL_MS;
    bool json = mode == FOLLOW_JSON;

    memset(&v, 0, sizeof(v));
    mt_cli_progress_init(&v.prog, stdout, log_every_ms, mt_clock_mono_ms());
    v.tty = v.prog.tty;
    v.json = json;
    v.quiet = mode == FOLLOW_QUIET;
    if ((rc = mt_cli_connect(g, &cli, &err)) != MT_OK ||
        (rc = mt_watch_open(cli, job_id, 0, g->timeout_ms, &w, &err)) != MT_OK) {
        mt_rpc_client_close(cli);
        return mt_cli_fail(&err);
    }
    if (!v.quiet) /* subscribed: the restarts so far go into the history, later ones come live */
        job_poll(g, job_id, &v, &ev);
    for (;;) {
        int64_t left = deadline > 0 ? deadline - mt_clock_mono_ms() : 1000;
        if (left <= 0) {
            end_open(&v);
            mt_err_set(&err, MT_DEADLINE_EXCEEDED, "job %s did not end within %.1f s", job_id,
                       (double)timeout_ms / 1000.0);
            code = mt_cli_fail(&err);
            break;
        }
        rc = mt_watch_next(w, left < 1000 ? (int)left : 1000, &ev, &err);
        if (rc == MT_DEADLINE_EXCEEDED) {
            mt_err_clear(&err);
            flush_markers(&v, 0, true); /* the history has ended: markers not placed yet */
            if (mt_clock_mono_ms() < next_poll)
                continue;
            next_poll = mt_clock_mono_ms() + STATE_POLL_MS;
            if (!job_poll(g, job_id, &v, &ev)) {
                flush_markers(&v, 0, true);
                continue;
            }
            flush_markers(&v, 0, true);
            rc = MT_OK;
        } else {
            next_poll = mt_clock_mono_ms() + STATE_POLL_MS;
        }
        if (rc != MT_OK) {
            end_open(&v);
            code = mt_cli_fail(&err);
            break;
        }
        apply(g, job_id, &v, &ev);
        if (!ev.final)
            continue;
        end_open(&v);
        if (json)
            printf("{\"final\": true, \"job_id\": \"%s\", \"state\": \"%s\", \"error\": \"%s\"}\n",
                   job_id, ev.state, ev.error[0] ? "see meshtrain status" : "");
        else if (ev.error[0] != '\0')
            printf("job %s %s: %s\n", job_id, ev.state, ev.error);
        else
            printf("job %s %s\n", job_id, ev.state);
        code = strcmp(ev.state, "SUCCEEDED") == 0 ? MT_EXIT_OK : MT_EXIT_FAILED;
        break;
    }
    fflush(stdout);
    mt_watch_close(w);
    mt_rpc_client_close(cli);
    return code;
}

int mt_cli_follow(const mt_cli_global *g, const char *job_id, bool json, int64_t log_every_ms)
{
    return follow_job(g, job_id, json ? FOLLOW_JSON : FOLLOW_BAR, 0, log_every_ms);
}

int mt_cli_wait(const mt_cli_global *g, const char *job_id, int64_t timeout_ms)
{
    return follow_job(g, job_id, FOLLOW_QUIET, timeout_ms, 0);
}
