/* SPDX-License-Identifier: MIT */
/*
 * mt_jobstate.c — job state names and the transition table (mt_jobstate.h).
 * Static const tables only. Tests: tests/unit/test_jobstate.c.
 */
#include "storage/mt_jobstate.h"

#include <string.h>

static const char *const names[MT_JOBSTATE_COUNT] = {
    [MT_JOBSTATE_QUEUED] = "QUEUED",         [MT_JOBSTATE_SCHEDULED] = "SCHEDULED",
    [MT_JOBSTATE_RUNNING] = "RUNNING",       [MT_JOBSTATE_SUCCEEDED] = "SUCCEEDED",
    [MT_JOBSTATE_FAILED] = "FAILED",         [MT_JOBSTATE_CANCELLED] = "CANCELLED",
    [MT_JOBSTATE_RESTARTING] = "RESTARTING", [MT_JOBSTATE_STALLED] = "STALLED",
};

#define B(s) (1u << (s))
#define ENDS (B(MT_JOBSTATE_FAILED) | B(MT_JOBSTATE_CANCELLED))

/* allowed[from] = set of states `from` may move to */
static const unsigned allowed[MT_JOBSTATE_COUNT] = {
    [MT_JOBSTATE_QUEUED] = B(MT_JOBSTATE_SCHEDULED) | ENDS,
    [MT_JOBSTATE_SCHEDULED] =
        B(MT_JOBSTATE_RUNNING) | B(MT_JOBSTATE_QUEUED) | B(MT_JOBSTATE_RESTARTING) | ENDS,
    [MT_JOBSTATE_RUNNING] =
        B(MT_JOBSTATE_SUCCEEDED) | B(MT_JOBSTATE_RESTARTING) | B(MT_JOBSTATE_STALLED) | ENDS,
    [MT_JOBSTATE_STALLED] = B(MT_JOBSTATE_RUNNING) | B(MT_JOBSTATE_RESTARTING) | ENDS,
    [MT_JOBSTATE_RESTARTING] = B(MT_JOBSTATE_SCHEDULED) | ENDS,
    [MT_JOBSTATE_SUCCEEDED] = 0,
    [MT_JOBSTATE_FAILED] = 0,
    [MT_JOBSTATE_CANCELLED] = 0,
};

static bool in_range(mt_jobstate s)
{
    return (unsigned)s < MT_JOBSTATE_COUNT;
}

const char *mt_jobstate_name(mt_jobstate s)
{
    return in_range(s) ? names[s] : "UNKNOWN";
}

mt_code mt_jobstate_parse(const char *name, mt_jobstate *out, mt_err *err)
{
    if (name != NULL)
        for (int i = 0; i < MT_JOBSTATE_COUNT; i++)
            if (strcmp(name, names[i]) == 0) {
                *out = (mt_jobstate)i;
                return MT_OK;
            }
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "job state \"%.64s\" is not one of QUEUED, SCHEDULED, RUNNING, SUCCEEDED, "
                      "FAILED, CANCELLED, RESTARTING, STALLED",
                      name != NULL ? name : "(null)");
}

mt_code mt_jobstate_parse_list(const char *list, unsigned *mask, mt_err *err)
{
    const char *p = list;

    *mask = 0;
    if (list == NULL || list[0] == '\0') {
        *mask = (1u << MT_JOBSTATE_COUNT) - 1;
        return MT_OK;
    }
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        char name[32];
        mt_jobstate js = MT_JOBSTATE_QUEUED;
        mt_code rc;

        if (len >= sizeof(name))
            len = sizeof(name) - 1;
        memcpy(name, p, len);
        name[len] = '\0';
        if ((rc = mt_jobstate_parse(name, &js, err)) != MT_OK)
            return rc;
        *mask |= 1u << js;
        if (comma == NULL)
            return MT_OK;
        p = comma + 1;
    }
}

bool mt_jobstate_is_final(mt_jobstate s)
{
    return s == MT_JOBSTATE_SUCCEEDED || s == MT_JOBSTATE_FAILED || s == MT_JOBSTATE_CANCELLED;
}

bool mt_jobstate_can_transition(mt_jobstate from, mt_jobstate to)
{
    if (!in_range(from) || !in_range(to))
        return false;
    return (allowed[from] & B(to)) != 0;
}
