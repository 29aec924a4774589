/* SPDX-License-Identifier: MIT */
/*
 * progress.c — the CLI's progress line fitted to the terminal (contract in progress.h).
 *
 * Why: a line wider than the terminal wraps, and "\r\033[K" then clears only its last physical
 * row, so every redraw left a row behind (522 rows for a 2-epoch job at 80 columns). The line is
 * therefore fitted at each draw to the width the terminal reports then, which also follows a
 * resize without a SIGWINCH handler (draws come several times a second).
 */
#include "client/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

void mt_cli_progress_init(mt_cli_progress *p, FILE *out, int64_t every_ms, int64_t now_ms)
{
    memset(p, 0, sizeof(*p));
    p->out = out;
    p->tty = isatty(fileno(out)) == 1;
    p->every_ms = every_ms < 0 ? MT_CLI_LOG_EVERY_DEFAULT_MS : every_ms;
    p->last_ms = now_ms;
}

int mt_cli_term_columns(int fd)
{
    struct winsize ws;
    const char *env;
    char *end = NULL;
    long v;

    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    env = getenv("COLUMNS");
    if (env != NULL && env[0] != '\0') {
        v = strtol(env, &end, 10);
        if (*end == '\0' && v > 0 && v < 100000)
            return (int)v;
    }
    return 80;
}

static int fit_columns(const mt_cli_progress *p)
{
    return p->columns > 0 ? p->columns : mt_cli_term_columns(fileno(p->out));
}

size_t mt_cli_progress_format(char *out, size_t cap, int columns, const char *head, int64_t done,
                              int64_t total, const char *tail, bool cut)
{
    char pos[64];
    char bar[MT_CLI_BAR_WIDTH + 3]; /* "[" width "]" NUL */
    int width = MT_CLI_BAR_WIDTH, n;
    size_t len;

    if (cap == 0)
        return 0;
    snprintf(pos, sizeof(pos), "%lld/%lld", (long long)done, (long long)(total > 0 ? total : done));
    if (columns > 0) {
        /* "HEAD  POS [" + bar + "]" + TAIL must fit columns - 1 */
        long room =
            (long)columns - 1 - (long)strlen(head) - 2 - (long)strlen(pos) - 3 - (long)strlen(tail);
        if (room < width)
            width = room < MT_CLI_BAR_MIN ? 0 : (int)room;
    }
    if (width > 0) {
        int fill = total > 0 ? (int)((double)width * (double)done / (double)total) : 0;
        if (fill > width)
            fill = width;
        if (fill < 0)
            fill = 0;
        bar[0] = '[';
        for (int i = 0; i < width; i++)
            bar[1 + i] = i < fill ? '=' : '.';
        if (fill > 0 && fill < width)
            bar[fill] = '>'; /* the last '=' becomes the arrow head */
        else if (fill == 0 && done > 0)
            bar[1] = '>';
        bar[1 + width] = ']';
        bar[2 + width] = '\0';
        n = snprintf(out, cap, "%s  %s %s%s", head, pos, bar, tail);
    } else {
        n = snprintf(out, cap, "%s  %s%s", head, pos, tail);
    }
    len = n < 0 ? 0 : (size_t)n >= cap ? cap - 1 : (size_t)n;
    if (cut && columns > 0 && len > (size_t)(columns - 1)) {
        len = (size_t)(columns - 1);
        out[len] = '\0';
    }
    return len;
}

void mt_cli_progress_draw(mt_cli_progress *p, const char *head, int64_t done, int64_t total,
                          const char *tail)
{
    char line[512];

    if (!p->tty)
        return;
    mt_cli_progress_format(line, sizeof(line), fit_columns(p), head, done, total, tail, true);
    fprintf(p->out, "\r%s\033[K", line);
    fflush(p->out);
    p->open = true;
}

void mt_cli_progress_close(mt_cli_progress *p, const char *head, int64_t done, int64_t total,
                           const char *tail, int64_t now_ms)
{
    char line[512];

    if (p->tty) {
        mt_cli_progress_format(line, sizeof(line), fit_columns(p), head, done, total, tail, false);
        fprintf(p->out, "\r%s\033[K\n", line);
    } else {
        mt_cli_progress_format(line, sizeof(line), 0, head, done, total, tail, false);
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
    p->open = false;
    p->last_ms = now_ms;
}

bool mt_cli_progress_due(mt_cli_progress *p, int64_t now_ms)
{
    if (p->tty || now_ms - p->last_ms < p->every_ms)
        return false;
    p->last_ms = now_ms;
    return true;
}

void mt_cli_progress_mark(mt_cli_progress *p, int64_t now_ms)
{
    p->last_ms = now_ms;
}

void mt_cli_progress_end_line(mt_cli_progress *p)
{
    if (p->tty && p->open)
        fputc('\n', p->out);
    p->open = false;
}

bool mt_cli_parse_log_every(const char *s, int64_t *ms)
{
    char *end = NULL;
    double v = strtod(s, &end);

    if (end == s || *end != '\0' || !isfinite(v) || v < 0.0 || v > 1e9)
        return false;
    *ms = (int64_t)llround(v * 1000.0);
    return true;
}
