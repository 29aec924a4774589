/* SPDX-License-Identifier: MIT */
/*
 * follow.h — follow a job's metrics on the terminal (`meshtrain watch`, `submit --follow`).
 *
 * How it fits: built on core/watch (history first, then live, then the final state). On a
 * terminal it draws a Keras-Progbar-style line per epoch that it redraws in place, fitted to the
 * terminal's width (client/progress.h)
 * (`Epoch 2/5  312/469 [===========>....] - ETA: 3s - loss: 0.4123 - accuracy: 0.8512`), ends it
 * with the epoch's time and the eval results, and prints the final state; elsewhere it prints
 * one plain line per epoch (with its eval results) and at most one progress line every
 * log_every_ms (`Epoch 2/5  step 312/469 - loss: ...`). The progress bar needs the metrics the
 * worker's task runner reports (epochs, epoch_steps, loss and the spec's metrics, val_* after a
 * validation, test_* at an epoch end: Keras's names, core/loss; worker/task.c). A restart prints a
 * marker line (`-- restart 1 (worker w2 lost ...): resuming from step 40 --`), live or at its place
 * in the history (follow.c says how). `submit --wait` uses the same stream without drawing anything
 * (mt_cli_wait). Threading: the CLI's main thread. Tests: tests/integration/test_e2e.sh,
 * tests/integration/test_submit_wait.sh, tests/integration/test_progress_term.sh.
 */
#ifndef MT_CLIENT_FOLLOW_H
#define MT_CLIENT_FOLLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "client/cli.h"

/*
 * Follow job_id (borrowed) until it ends. json: one JSON object per point, one per restart
 * ({"restart": N, "attempt", "time_ms", "resume_step", "cause"}) and a final
 * {"final": true, "state": ...} line. log_every_ms: when stdout is not a terminal, at most one
 * progress line this often besides the epoch lines (0: every update; < 0: the default, 30 s).
 * Returns MT_EXIT_OK when the job SUCCEEDED, MT_EXIT_FAILED when it FAILED or was CANCELLED, or
 * the exit code of a connection/lookup failure (printed).
 */
int mt_cli_follow(const mt_cli_global *g, const char *job_id, bool json, int64_t log_every_ms);

/*
 * Block until job_id (borrowed) ends, printing nothing but the final state line
 * ("job ID SUCCEEDED", or "job ID FAILED: error"). timeout_ms > 0 bounds the wait: when the
 * job has not ended by then it prints "meshtrain: DEADLINE_EXCEEDED: ..." and returns
 * MT_EXIT_UNREACHABLE (3); 0 waits as long as the job runs. Returns MT_EXIT_OK when the job
 * SUCCEEDED, MT_EXIT_FAILED when it FAILED or was CANCELLED, or the exit code of a
 * connection/lookup failure (printed).
 */
int mt_cli_wait(const mt_cli_global *g, const char *job_id, int64_t timeout_ms);

#endif
