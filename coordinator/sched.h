/* SPDX-License-Identifier: MIT */
/*
 * sched.h — the coordinator's scheduling and liveness rules, typed in and typed out: which queued
 * job goes where (gang placement, one job per worker, priority then submission order, elastic
 * batch sizes, a broken link avoided or waited out with a back-off, a frozen worker left out),
 * when a worker is lost and what becomes of its jobs (restart within restart.max_restarts, else
 * FAILED), what a registration means (a new process loses its tasks; another live process under
 * the name is refused), what a restarted coordinator does with the jobs it reloads as placed,
 * when a silent worker is named (once per silence), whether a job's collective deadline suits
 * the heartbeat window, what a worker's report of its task does to the job, what a task that
 * failed on a peer means (a silent worker: "device stuck"; a link between two heartbeating
 * workers: "link A<->B" and a back-off), and what a stopped group's progress records say
 * (coord_stall_diagnose / coord_stall_classify).
 *
 * How it fits: the domain core (state.c: the restart rule, task reports and peer failures;
 * schedpass.c: the scheduler pass and the reload of active jobs) and the adapters (jobs.c:
 * SubmitJob's deadline check; workers.c: registrations; sweep.c: the lost-worker, silent-worker
 * and stall sweep) copy what they know into these plain structs, call the functions below and
 * apply the decisions they return (store writes, RPC replies, the metrics stream). Nothing here
 * reads the store, the clock, the network or a protobuf message, and nothing here keeps state: the
 * same input gives the same decision. Strings in the inputs are borrowed for the call. Threading:
 * pure functions, any thread (the coordinator calls them on its loop thread). Tests:
 * tests/unit/test_coord_sched.c (typed inputs only), test_coord_stall.c (the diagnosis).
 */
#ifndef MT_COORD_SCHED_H
#define MT_COORD_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/stall.h"
#include "sched/mt_sched.h"
#include "status/mt_status.h"
#include "storage/mt_jobstate.h"

/* A worker's liveness, typed: the strings ("alive", "lost") exist only in SQL and on the wire
 * (coord_worker_state_name / _parse, one table in state.c). */
typedef enum coord_worker_state { COORD_WORKER_ALIVE, COORD_WORKER_LOST } coord_worker_state;

/* A task's state as its worker last reported it, typed (names: coord_task_state_name). */
typedef enum coord_task_state {
    COORD_TASK_ASSIGNED, /* "" : assigned, not yet reported */
    COORD_TASK_RUNNING,
    COORD_TASK_SUCCEEDED,
    COORD_TASK_FAILED,
    COORD_TASK_CANCELLED,
} coord_task_state;

/* A registered worker as the rules see it. */
typedef struct coord_sched_worker {
    const char *id;
    const char *host;         /* for messages ("" unknown) */
    const char *data_address; /* its data-plane address, which peers' errors name ("" none) */
    coord_worker_state state;
    const uint32_t *devices; /* local indexes of its healthy devices, ascending */
    size_t n_devices;
    int64_t last_seen_ms; /* monotonic ms of its last registration or heartbeat */
    const char *held_by;  /* the placed job that holds it (a worker's data plane serves one job
                             at a time, so it then has no free device); NULL: free */
    const char *instance; /* its process's instance id (changes when the worker restarts) */
} coord_sched_worker;

/* Whether a job's checkpoint files were read back since its last placement. */
typedef enum coord_sched_ckpt {
    COORD_SCHED_CKPT_READY,     /* checked (or found to have none): it may be placed */
    COORD_SCHED_CKPT_VERIFYING, /* being read back on the pool: it waits and keeps its turn */
    COORD_SCHED_CKPT_UNCHECKED, /* not known yet: the pass asks for it (COORD_SCHED_VERIFY) */
} coord_sched_ckpt;

/* A job as the rules see it (only QUEUED and RESTARTING ones are placed). */
typedef struct coord_sched_job {
    const char *id;
    mt_jobstate state;
    int32_t priority; /* higher first */
    uint64_t seq;     /* submission order: lower first among equal priorities */
    size_t devices;   /* devices its mesh wants (every one at once: gang) */
    size_t inner;     /* its innermost mesh dimension: such groups stay on one worker if they fit */
    uint32_t elastic_min, elastic_max; /* data-parallel replicas it may restart on (max 0: fixed) */
    uint64_t batch_size;               /* its global batch (elastic sizes must divide it) */
    size_t placed_devices;             /* devices of its last placed attempt (0: never placed) */
    uint32_t restarts, max_restarts;   /* transitions to RESTARTING so far; restart.max_restarts */
    coord_sched_ckpt ckpt;
    const char *init_error;      /* its init_from names no usable checkpoint: why (NULL: fine) */
    const char *link_a, *link_b; /* a collective of its last attempt broke between these two
                                    heartbeating workers ("" or NULL: none) */
    int64_t backoff_ms;          /* the current back-off after that link broke */
    int64_t backoff_until_ms;    /* monotonic ms: not placed over the link again before this */
    const char *frozen;          /* a worker that stopped answering during its last attempt
                                    ("" or NULL: none): not placed on while it stays silent */
} coord_sched_job;

/* One task of a placed job: one per worker of its placement. */
typedef struct coord_sched_task {
    const char *worker_id;
    coord_task_state state; /* as last recorded */
    uint64_t step;          /* the last step its worker reported */
} coord_sched_task;

/* A worker counts as silent when it has not been heard for more than fresh_ms at now. */
bool coord_sched_silent(const coord_sched_worker *w, int64_t now_ms, int64_t fresh_ms);

/* ------------------------------------------------------------------ placement */

typedef enum coord_sched_verdict {
    COORD_SCHED_PLACE,  /* start it now on slots (reason: the note for its placement line) */
    COORD_SCHED_WAIT,   /* it stays queued; reason says why */
    COORD_SCHED_FAIL,   /* it can never start: FAILED with reason */
    COORD_SCHED_VERIFY, /* its checkpoints must be read back first: the pass stops here; the
                           caller finds out (VERIFYING, or READY when it has none) and asks
                           again */
    COORD_SCHED_HOLD,   /* its checkpoints are being read back: it keeps its turn and blocks
                           the jobs behind it; reason unchanged */
} coord_sched_verdict;

/* What becomes of one queued job in this pass. */
typedef struct coord_sched_decision {
    coord_sched_verdict verdict;
    size_t job;           /* index into the jobs given */
    uint32_t batch;       /* elastic: its attempt runs on mesh batch=batch (0: as its spec says) */
    char reason[256];     /* WAIT, FAIL: the reason; PLACE: "" or ", avoiding the link a<->b" ... */
    mt_sched_slot *slots; /* PLACE: slots[rank] (worker: index into the workers given) */
    size_t n_slots;
} coord_sched_decision;

/* A scheduler pass: one decision per QUEUED or RESTARTING job considered, in the order they
 * were taken (priority, then submission). */
typedef struct coord_sched_plan {
    coord_sched_decision *d; /* owned: coord_sched_plan_fini */
    size_t n;
    size_t free_devices; /* healthy devices of alive workers that no job holds, before the pass */
    size_t registered;   /* healthy devices of alive workers */
    bool again; /* a decision waits on time (a back-off, a silent worker): look again later */
} coord_sched_plan;

/*
 * One scheduler pass over jobs[0..nj) and workers[0..nw) at monotonic time now_ms (fresh_ms:
 * the heartbeat window of coord_sched_silent). Rules, in this order for each job taken by
 * priority (higher first) then seq:
 *  - init_error set: FAIL with it;
 *  - an elastic RESTARTING job takes the largest batch size in its range that divides its
 *    global batch and fits the free devices (0 when a job ahead blocks), else the largest the
 *    registered devices would hold; none: WAIT ("elastic: no batch size ...");
 *  - more devices than registered: WAIT ("needs N devices, R registered"), never blocking;
 *  - a job ahead blocks: WAIT ("waiting behind J (priority, then submission order)");
 *  - checkpoints UNCHECKED: VERIFY and the pass ends; VERIFYING: HOLD (blocks);
 *  - placed by mt_sched_place on the devices of alive workers that no job holds (a worker
 *    serves one job: once placed, the job holds its workers' other devices too), all or none:
 *    not now: WAIT ("waiting for N free devices (F free of R)") and it blocks the jobs behind;
 *  - a frozen worker still silent is left out (again = true); after a broken link a placement
 *    holding at most one end comes first; when none exists and the back-off runs, WAIT
 *    ("backing off S s after the link a<->b broke ...", again = true, not blocking); after it,
 *    anywhere (the link may have healed).
 * Returns MT_OK and *out (fini it, also after a failure), or RESOURCE_EXHAUSTED.
 */
mt_code coord_sched_plan_make(const coord_sched_worker *workers, size_t nw,
                              const coord_sched_job *jobs, size_t nj, int64_t now_ms,
                              int64_t fresh_ms, coord_sched_plan *out);
void coord_sched_plan_fini(coord_sched_plan *p); /* zeroed or NULL: no-op */

/* ------------------------------------------------------------------ liveness and restarts */

/* An alive worker silent for longer than timeout_ms at now_ms is lost. */
bool coord_sched_worker_lost(const coord_sched_worker *w, int64_t now_ms, int64_t timeout_ms);

/*
 * A placed job lost an attempt (cause: "worker w1 lost (no heartbeat)", "stalled for 40 s: ...").
 * Returns MT_JOBSTATE_RESTARTING with reason = cause while restarts < max_restarts, else
 * MT_JOBSTATE_FAILED with reason "<cause>; restart limit of N reached". reason: cap bytes.
 */
mt_jobstate coord_sched_restart(uint32_t restarts, uint32_t max_restarts, const char *cause,
                                char *reason, size_t cap);

/* What a RegisterWorker means for the name it registers. */
typedef enum coord_sched_register_verdict {
    COORD_SCHED_REGISTER_NEW,      /* a name the coordinator does not know: a new worker */
    COORD_SCHED_REGISTER_SAME,     /* the same live process again (it re-registers after a
                                      coordinator restart): its tasks keep running (re-attached) */
    COORD_SCHED_REGISTER_REPLACED, /* a new process under a known name, or a process already
                                      declared lost: what the coordinator ran there is gone, so
                                      its placed jobs restart ("worker W restarted (its tasks are
                                      gone)", coord_sched_restart) */
    COORD_SCHED_REGISTER_REFUSED,  /* another process under a name whose live process was heard
                                      within timeout_ms: ALREADY_EXISTS until that one is lost */
} coord_sched_register_verdict;

/* A worker registers as process instance at now_ms; known: the registered worker of that name
 * (NULL: none). timeout_ms: the heartbeat timeout. */
coord_sched_register_verdict coord_sched_register(const coord_sched_worker *known,
                                                  const char *instance, int64_t now_ms,
                                                  int64_t timeout_ms);

/* What a coordinator that just started does with a job it reloaded as placed. */
typedef struct coord_sched_reload_out {
    bool lost;                   /* a worker of its placement is unknown or already lost: the
                                    job restarts at once with cause (coord_sched_restart) */
    coord_task_state task_state; /* else its tasks are kept: RUNNING (a RUNNING or STALLED job:
                                    re-attached as they run) or ASSIGNED (SCHEDULED: the
                                    assignment is sent again) */
    char cause[256];             /* lost: "worker W was lost while the coordinator was down" */
} coord_sched_reload_out;

/*
 * A job reloaded in state (SCHEDULED, RUNNING or STALLED) with one task per worker of its
 * placement, tasks[0..n) (states ignored), against the registry as loaded, workers[0..nw).
 * A worker the store knew as alive is kept alive with a fresh grace period (last seen = the
 * load): if it does not re-register as the same process within the heartbeat timeout,
 * coord_sched_worker_lost declares it lost, and if it re-registers as a new process
 * coord_sched_register says REPLACED; either way its jobs restart then. A worker the store
 * does not know, or knew as lost, makes the job restart now.
 */
void coord_sched_reload(mt_jobstate state, const coord_sched_task *tasks, size_t n,
                        const coord_sched_worker *workers, size_t nw, coord_sched_reload_out *out);

/* What a sweep does about the silent workers of a RUNNING or STALLED job. */
typedef enum coord_sched_silence_verdict {
    COORD_SCHED_SILENCE_NONE,  /* every worker heartbeats and none was named: the stall rule
                                  applies */
    COORD_SCHED_SILENCE_NOTE,  /* a worker went silent: name it in the reason and diagnosis now,
                                  once per silence (store them; noted from now on) */
    COORD_SCHED_SILENCE_NOTED, /* still silent, already named: nothing to store; the stall rule
                                  does not apply (the lost-worker path decides) */
    COORD_SCHED_SILENCE_BACK,  /* every worker heartbeats again after a note: store reason and
                                  diagnosis (not noted any more); the stall rule applies */
} coord_sched_silence_verdict;

typedef struct coord_sched_silence_out {
    coord_sched_silence_verdict verdict;
    size_t worker;       /* NOTE: the silent worker (index into the workers given) */
    char reason[512];    /* NOTE, BACK: the job's status reason */
    char diagnosis[400]; /* NOTE, BACK: its diagnosis ("" clears it) */
} coord_sched_silence_out;

/*
 * The once-per-silence note for a job in state with the workers of its tasks, workers[0..nw),
 * at now_ms: noted_ms is when a silent worker was last named (0: not named), diagnosis its
 * current diagnosis (borrowed). The first worker silent for more than fresh_ms
 * (coord_sched_silent) is named at once — "worker W (host) silent for S s: no heartbeat; it is
 * declared lost and the job restarts T s after its last one" (T: timeout_ms), diagnosis "device
 * stuck: ..." — long before the heartbeat timeout or the collective deadline; once named, later
 * sweeps store nothing until every worker heartbeats again ("every worker heartbeats again";
 * the diagnosis is cleared for a RUNNING job and kept for a STALLED one). Issue 19, fault 8.
 */
void coord_sched_silence(const coord_sched_worker *workers, size_t nw, mt_jobstate state,
                         const char *diagnosis, int64_t noted_ms, int64_t now_ms, int64_t fresh_ms,
                         int64_t timeout_ms, coord_sched_silence_out *out);

/*
 * A job's effective collective deadline (restart.collective_deadline_ms, or when 0 the workers'
 * default MT_JOBSPEC_COLL_DEADLINE_DEFAULT_MS) against the coordinator's heartbeat window
 * (fresh_ms, 3 heartbeat intervals + 1 s): a deadline that is not longer makes the collective
 * give up before the coordinator could see its peer go silent, so a frozen worker would be read
 * as a broken link. SubmitJob checks each spec; the coordinator's startup checks the default
 * (deadline_ms 0) and refuses a --heartbeat-ms that fails it, so a spec without a deadline
 * always passes. Returns MT_OK, or MT_FAILED_PRECONDITION with the message naming both figures
 * in msg (cap bytes).
 */
mt_code coord_sched_deadline_check(uint32_t deadline_ms, int64_t fresh_ms, char *msg, size_t cap);

/* A task that failed on a peer, read. */
typedef enum coord_sched_fault {
    COORD_SCHED_FAULT_NONE,   /* not a peer failure (the job's own error): fail the job */
    COORD_SCHED_FAULT_FROZEN, /* a worker of the job stopped heartbeating: worker names it */
    COORD_SCHED_FAULT_LINK,   /* the link reporter<->worker broke while both heartbeat */
    COORD_SCHED_FAULT_PEER,   /* a peer failed, which one is not known */
} coord_sched_fault;

typedef struct coord_sched_peer_verdict {
    coord_sched_fault fault;
    size_t worker;       /* FROZEN, LINK: index into the job's workers */
    char cause[300];     /* the restart's cause */
    char diagnosis[400]; /* "device stuck: ..." / "link a<->b: ..." ("" for PEER) */
    int64_t backoff_ms;  /* LINK: the job's new back-off (2 s, doubling, at most 60 s) */
    int64_t backoff_until_ms;
} coord_sched_peer_verdict;

/*
 * The task of reporter (one of the job's workers[0..nw)) failed with error (its "CODE: text").
 * UNAVAILABLE and DEADLINE_EXCEEDED are faults of the cluster, not of the job: FROZEN when some
 * other worker of the job is silent (coord_sched_silent), else LINK when the error names another
 * worker's data-plane address (the back-off grows from backoff_ms: 2 s, then doubling up to
 * 60 s), else PEER. Any other error: NONE.
 */
void coord_sched_peer_failure(const coord_sched_worker *workers, size_t nw, const char *reporter,
                              const char *error, int64_t backoff_ms, int64_t now_ms,
                              int64_t fresh_ms, coord_sched_peer_verdict *out);

/* ------------------------------------------------------------------ task reports */

typedef enum coord_sched_report_verdict {
    COORD_SCHED_REPORT_IGNORE, /* nothing to do (beyond recording the step when accepted) */
    COORD_SCHED_REPORT_CANCEL, /* the coordinator does not run this task: the worker stops it */
    COORD_SCHED_REPORT_FAIL,   /* the job FAILED with reason (for a FAILED task, unless
                                  coord_sched_peer_failure reads it as a fault of the cluster) */
    COORD_SCHED_REPORT_RECORD, /* record the task's new state, then the moves flagged below */
} coord_sched_report_verdict;

typedef struct coord_sched_report {
    coord_sched_report_verdict verdict;
    bool accepted;          /* a task of this attempt with something new: record its step */
    size_t task;            /* accepted: the reporter's task (index into the tasks given) */
    bool failed;            /* FAIL: the task FAILED (not CANCELLED): ask the peer rule first */
    coord_task_state state; /* RECORD: the task's new state */
    bool resume;            /* RECORD: first STALLED -> RUNNING ("progress resumed: ...") */
    bool started;           /* RECORD: then SCHEDULED -> RUNNING (reason: "all N tasks ...") */
    bool succeeded;         /* RECORD: then -> SUCCEEDED ("all tasks succeeded") */
    char reason[300];       /* FAIL, started: the reason of the move */
} coord_sched_report;

/*
 * A worker reported its task of job (state job_state, current attempt, tasks[0..n)): attempt,
 * state (COORD_TASK_ASSIGNED when the word is empty or not one the coordinator knows), step and
 * error ("" none). Pass a final job_state for a job the coordinator does not have. A report for
 * a job that is not placed, another attempt or a worker without a task in it is CANCELled when
 * it says running (else IGNOREd); one with no new state and no new step is IGNOREd; otherwise it
 * is accepted: FAILED or CANCELLED fail the job ("worker W: <error>"); RUNNING or SUCCEEDED are
 * RECORDed, a STALLED job resumes, a SCHEDULED one whose every task has reported starts
 * (RUNNING), and a RUNNING one whose every task succeeded SUCCEEDs.
 */
void coord_sched_task_report(mt_jobstate job_state, uint32_t job_attempt,
                             const coord_sched_task *tasks, size_t n, const char *worker_id,
                             uint32_t attempt, coord_task_state state, uint64_t step,
                             const char *error, coord_sched_report *out);

/* ------------------------------------------------------------------ stall diagnosis */

/*
 * Write the diagnosis of the group devs[0..n) (indexed by rank; borrowed) at coordinator time
 * now_ms into out (cap bytes, always NUL-terminated, truncated if needed):
 *  - some devices inside a collective: the latest (step, seq) any device is in is "the
 *    collective"; every other known device "never entered" it (with its last activity and its
 *    age) or "is still in" an earlier one; if none is missing, "all N devices entered" and how
 *    long no data moved;
 *  - no device inside a collective: each device's last activity and its age.
 * Unknown ranks (known == 0) are listed as "no progress reported".
 */
void coord_stall_diagnose(const coord_stall_dev *devs, size_t n, int64_t now_ms, char *out,
                          size_t cap);

/*
 * The job's diagnosis for a stalled group (docs/jobs.md#diagnosis): the text of
 * coord_stall_diagnose prefixed with what kind of fault it is:
 *  - "link A<->B: " when every device is inside a collective, waiting for data that does not
 *    come (all in the same one, or some still in an earlier one whose data never arrived: the
 *    side that finished it went on to the next), over devices of exactly two workers ("a link
 *    among A, B, C: " over more), since their workers all heartbeat;
 *  - "device stuck: " otherwise: a device outside every collective (computing, reading input,
 *    never reported) while the others wait for it, or a group on one worker.
 * Same contract as coord_stall_diagnose.
 */
void coord_stall_classify(const coord_stall_dev *devs, size_t n, int64_t now_ms, char *out,
                          size_t cap);

/* A running job's progress as the stall sweep sees it. */
typedef struct coord_sched_stall_in {
    mt_jobstate state;           /* only RUNNING and STALLED jobs are judged */
    const coord_stall_dev *devs; /* [n]: one record per rank from heartbeats; NULL none yet */
    size_t n;
    uint64_t step;            /* the job's last stored step */
    uint64_t prog_sig;        /* the progress signature when it last changed (0: none yet) */
    int64_t prog_ms;          /* ... and when (monotonic ms) */
    int64_t stall_note_ms;    /* STALLED: when its reason was last stored */
    bool workers_fresh;       /* every worker of the job is alive and heard within the window */
    int64_t stall_timeout_ms; /* no progress this long: STALLED (<= 0: off) */
    int64_t stall_restart_ms; /* STALLED this long more with a rank inside a collective:
                                 restart (<= 0: never) */
} coord_sched_stall_in;

typedef enum coord_sched_stall_verdict {
    COORD_SCHED_STALL_NONE,
    COORD_SCHED_STALL_RESUMED, /* STALLED -> RUNNING: progress again (reason) */
    COORD_SCHED_STALL_STALLED, /* RUNNING -> STALLED (reason: the diagnosis; diagnosis: its
                                  kind, coord_stall_classify) */
    COORD_SCHED_STALL_RESTART, /* restart it (reason: the cause, "stalled for S s: ...") */
    COORD_SCHED_STALL_REFRESH, /* STALLED: store reason and diagnosis again (the ages grew) */
} coord_sched_stall_verdict;

typedef struct coord_sched_stall_out {
    coord_sched_stall_verdict verdict;
    uint64_t prog_sig; /* the job's signature and its time from now on (store them) */
    int64_t prog_ms;
    char reason[300];
    char diagnosis[400];
} coord_sched_stall_out;

/*
 * The stall rule for one job at now_ms: a signature over every rank's (known, ticks, step, seq)
 * and the job's step tells progress. When it moved, a STALLED job is RESUMED (unless this is the
 * first signature of the attempt). When it did not, and every rank reported, some rank entered a
 * collective and workers_fresh: a RUNNING job quiet for stall_timeout_ms is STALLED; a STALLED
 * one quiet for stall_timeout_ms + stall_restart_ms with a rank inside a collective is
 * RESTARTed; else a STALLED one gets its reason REFRESHed every refresh_ms.
 */
void coord_sched_stall(const coord_sched_stall_in *in, int64_t now_ms, int64_t refresh_ms,
                       coord_sched_stall_out *out);

#endif
