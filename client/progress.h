/* SPDX-License-Identifier: MIT */
/*
 * progress.h — the progress line of the CLI: `meshtrain watch` / `submit --follow` (follow.c)
 * and `train --local` (cmd_train.c) draw through it.
 *
 * How it fits: the callers compose a head ("Epoch 2/3"), a position (done of total) and a tail
 * (" - ETA: 19s - loss: 0.3311"); this module fits "HEAD  DONE/TOTAL [=====>....]TAIL" to the
 * terminal's width, and decides when a line is due where stdout is not a terminal.
 * Invariants:
 *  - a line redrawn in place (mt_cli_progress_draw) is at most columns - 1 wide, so it never
 *    wraps ("\r\033[K" clears only the cursor's physical line): the bar shrinks first (down to
 *    MT_CLI_BAR_MIN, below that it is left out), then the line is cut;
 *  - a closing line (mt_cli_progress_close) keeps every number: the bar shrinks or goes, and
 *    only a tail wider than the terminal by itself wraps;
 *  - the width is asked of the terminal (TIOCGWINSZ) at every draw, so a resize (SIGWINCH)
 *    takes effect at the next draw; $COLUMNS, then 80, when the terminal does not say.
 *  - not a terminal: at most one progress line every `every_ms` (mt_cli_progress_due); the
 *    callers print one line per epoch besides.
 * Threading: the CLI's main thread. Tests: tests/unit/test_progress.c,
 * tests/integration/test_progress_term.sh (tmux at 80 columns, and a pipe).
 */
#ifndef MT_CLIENT_PROGRESS_H
#define MT_CLIENT_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MT_CLI_BAR_WIDTH            30    /* the bar's width when there is room (Keras's) */
#define MT_CLI_BAR_MIN              8     /* a narrower bar is left out */
#define MT_CLI_LOG_EVERY_DEFAULT_MS 30000 /* not a terminal: a progress line every 30 s */

typedef struct mt_cli_progress {
    FILE *out;        /* borrowed */
    bool tty;         /* out is a terminal: lines are redrawn in place */
    int columns;      /* > 0: this width (tests); 0: ask the terminal at every draw */
    int64_t every_ms; /* not a terminal: at most one progress line this often; 0: every update */
    int64_t last_ms;  /* when the last line was printed (not a terminal) */
    bool open;        /* a line drawn in place and not ended yet (terminal) */
} mt_cli_progress;

/*
 * Set p up for out (borrowed; a terminal when isatty says so), with every_ms between progress
 * lines off a terminal (MT_CLI_LOG_EVERY_DEFAULT_MS when < 0) counted from now_ms (a monotonic
 * time), so a job shorter than every_ms prints only its epoch lines.
 */
void mt_cli_progress_init(mt_cli_progress *p, FILE *out, int64_t every_ms, int64_t now_ms);

/* The width of the terminal on fd: TIOCGWINSZ, else $COLUMNS, else 80. */
int mt_cli_term_columns(int fd);

/*
 * Write "HEAD  DONE/TOTAL [bar]TAIL" into out (cap bytes, NUL-terminated) and return its length.
 * columns <= 0: no width limit, a MT_CLI_BAR_WIDTH bar. Otherwise the bar shrinks so that the
 * line fits columns - 1 (left out when it would be narrower than MT_CLI_BAR_MIN: "HEAD
 * DONE/TOTALTAIL"), and with cut the line is cut at columns - 1. total <= 0 draws an empty bar.
 */
size_t mt_cli_progress_format(char *out, size_t cap, int columns, const char *head, int64_t done,
                              int64_t total, const char *tail, bool cut);

/* Terminal only (no-op otherwise): redraw the line in place, fitted and cut to the width. */
void mt_cli_progress_draw(mt_cli_progress *p, const char *head, int64_t done, int64_t total,
                          const char *tail);

/*
 * Terminal: redraw the line in place for the last time, with every number, and end it.
 * Elsewhere: print it as a line with a full bar. Either way it counts as a line printed at now_ms.
 */
void mt_cli_progress_close(mt_cli_progress *p, const char *head, int64_t done, int64_t total,
                           const char *tail, int64_t now_ms);

/*
 * Not a terminal: true when a progress line is due at now_ms (every_ms since the last line),
 * and then counts one as printed at now_ms. Always false on a terminal.
 */
bool mt_cli_progress_due(mt_cli_progress *p, int64_t now_ms);

/* Count a line the caller printed itself (not a terminal) as printed at now_ms. */
void mt_cli_progress_mark(mt_cli_progress *p, int64_t now_ms);

/* Terminal: end a line drawn in place ("\n") before other output; no-op otherwise. */
void mt_cli_progress_end_line(mt_cli_progress *p);

/*
 * Parse a --log-every value: seconds (fractions allowed), >= 0. True and *ms on success.
 */
bool mt_cli_parse_log_every(const char *s, int64_t *ms);

#endif
