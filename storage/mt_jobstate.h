/* SPDX-License-Identifier: MIT */
/*
 * mt_jobstate.h — the job states and which transitions between them are legal.
 *
 * One table decides the job life cycle for everyone: the store refuses an
 * illegal transition (mt_store_job_transition), the coordinator's scheduler
 * asks before it acts, the CLI shows the names. Pure functions over static
 * const tables: thread-safe, no allocation.
 *
 *   QUEUED ──▶ SCHEDULED ──▶ RUNNING ──▶ SUCCEEDED | FAILED | CANCELLED
 *     ▲            │  ▲          │  ▲
 *     └────────────┘  │          ▼  │
 *                     │       STALLED (a collective stopped advancing)
 *                     │          │
 *              RESTARTING ◀──────┴── (a worker lost / stall timeout)
 *
 * Every non-final state may also go to FAILED or CANCELLED. SCHEDULED may go
 * back to QUEUED (placement fell through before the job started). RESTARTING
 * goes to SCHEDULED once devices are placed again. SUCCEEDED, FAILED and
 * CANCELLED are final: nothing leaves them. A state never transitions to itself.
 * Tests: tests/unit/test_jobstate.c.
 */
#ifndef MT_JOBSTATE_H
#define MT_JOBSTATE_H

#include <stdbool.h>

#include "status/mt_status.h"

typedef enum mt_jobstate {
    MT_JOBSTATE_QUEUED = 0,
    MT_JOBSTATE_SCHEDULED = 1,
    MT_JOBSTATE_RUNNING = 2,
    MT_JOBSTATE_SUCCEEDED = 3,
    MT_JOBSTATE_FAILED = 4,
    MT_JOBSTATE_CANCELLED = 5,
    MT_JOBSTATE_RESTARTING = 6,
    MT_JOBSTATE_STALLED = 7,
} mt_jobstate;

#define MT_JOBSTATE_COUNT 8

/* "QUEUED" ... (the names stored in the database and shown to users); "UNKNOWN" out of range. */
const char *mt_jobstate_name(mt_jobstate s);

/* Parse an exact, upper-case state name into *out. MT_OK or MT_INVALID_ARGUMENT (err names
 * the bad value). name may be NULL (INVALID_ARGUMENT). */
mt_code mt_jobstate_parse(const char *name, mt_jobstate *out, mt_err *err);

/* Parse a comma-separated list of state names ("" or NULL = every state) into *mask (bit i =
 * state i). Codes: INVALID_ARGUMENT naming the unknown name. */
mt_code mt_jobstate_parse_list(const char *list, unsigned *mask, mt_err *err);

/* True for SUCCEEDED, FAILED and CANCELLED. */
bool mt_jobstate_is_final(mt_jobstate s);

/* True when the job may move from `from` to `to` (see the diagram). Out-of-range -> false. */
bool mt_jobstate_can_transition(mt_jobstate from, mt_jobstate to);

#endif
