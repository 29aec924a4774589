/* SPDX-License-Identifier: MIT */
/*
 * restart.c — restarts read from a job's state history (mt_watch.h, mt_watch_restart_scan): the
 * restart markers of `meshtrain watch`, `meshtrain status`, the HTTP API and the dashboard.
 *
 * The coordinator (coordinator/jobs.c) writes a RESTARTING event whose reason is the cause, then
 * a SCHEDULED event "placed on N workers (attempt K, resuming from a checkpoint at step S...)".
 * Histories written before the step was part of that text say only "resuming from a checkpoint"
 * (resume step unknown: -1). Pure functions over caller-owned data; any thread.
 * Tests: tests/unit/test_watch.c.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "watch/mt_watch.h"

void mt_watch_restart_scan_init(mt_watch_restart_scan *s)
{
    memset(s, 0, sizeof(*s));
}

/* The decimal number after the first `key` in text; false when absent or not a number. */
static bool number_after(const char *text, const char *key, unsigned long long *out)
{
    const char *at = strstr(text, key);
    char *end;

    if (at == NULL)
        return false;
    at += strlen(key);
    if (*at < '0' || *at > '9')
        return false;
    *out = strtoull(at, &end, 10);
    return end != at;
}

static int64_t resume_step_of(const char *reason)
{
    unsigned long long v;

    if (number_after(reason, "at step ", &v) || number_after(reason, "from step ", &v))
        return (int64_t)v;
    if (strstr(reason, "resuming from a checkpoint") != NULL ||
        strstr(reason, "starting from the checkpoint of") != NULL)
        return -1;
    return 0;
}

bool mt_watch_restart_scan_event(mt_watch_restart_scan *s, const char *state, const char *reason,
                                 int64_t time_ms, uint64_t step, mt_watch_restart *out)
{
    unsigned long long attempt = 0;
    bool has_attempt;

    if (reason == NULL)
        reason = "";
    if (state == NULL)
        return false;
    if (strcmp(state, "RESTARTING") == 0) {
        s->pending = true;
        s->lost_step = step;
        snprintf(s->cause, sizeof(s->cause), "%s", reason);
        return false;
    }
    if (strcmp(state, "SCHEDULED") != 0)
        return false;
    has_attempt = number_after(reason, "(attempt ", &attempt) && attempt > 0;
    if (has_attempt ? attempt < 2 : !s->pending)
        return false;
    memset(out, 0, sizeof(*out));
    s->restarts = has_attempt ? (uint32_t)(attempt - 1) : s->restarts + 1;
    out->number = s->restarts;
    out->attempt = s->restarts + 1;
    out->time_ms = time_ms;
    out->resume_step = resume_step_of(reason);
    if (s->pending) {
        out->lost_step = s->lost_step;
        snprintf(out->cause, sizeof(out->cause), "%s", s->cause);
    }
    s->pending = false;
    return true;
}

cJSON *mt_watch_restart_json(const mt_watch_restart *r)
{
    cJSON *o = cJSON_CreateObject();

    if (o == NULL)
        return NULL;
    cJSON_AddNumberToObject(o, "restart", r->number);
    cJSON_AddNumberToObject(o, "attempt", r->attempt);
    cJSON_AddNumberToObject(o, "time_ms", (double)r->time_ms);
    if (r->resume_step < 0)
        cJSON_AddNullToObject(o, "resume_step");
    else
        cJSON_AddNumberToObject(o, "resume_step", (double)r->resume_step);
    cJSON_AddNumberToObject(o, "lost_step", (double)r->lost_step);
    cJSON_AddStringToObject(o, "cause", r->cause);
    return o;
}
