/* SPDX-License-Identifier: MIT */
/*
 * cmd_watch.c — `meshtrain watch JOB [--json] [--log-every SECONDS]`: follow a job's metrics
 * (history first, then live) with a progress bar per epoch, the eval results at each epoch end, a
 * marker line per restart and the final state. Exit 0 when the job SUCCEEDED, 1 when it FAILED or
 * was CANCELLED (client/follow.c).
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "client/follow.h"
#include "client/progress.h"

int cmd_watch(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {"log-every", required_argument, NULL, 'l'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    bool json = false;
    int64_t log_every_ms = -1; /* the default */
    int c;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j') {
            json = true;
            continue;
        }
        if (c == 'l') {
            if (!mt_cli_parse_log_every(optarg, &log_every_ms))
                return mt_cli_usage_error("watch", "--log-every '%s': expected seconds >= 0",
                                          optarg);
            continue;
        }
        if (c == 'h') {
            printf("usage: meshtrain watch JOB [--json] [--log-every SECONDS]\n\n"
                   "Follow a job until it ends: its stored metrics first, then live ones. On a\n"
                   "terminal, a progress bar per epoch (loss, accuracy, ETA) fitted to the\n"
                   "terminal's width, and the eval results at each epoch end; otherwise one\n"
                   "line per epoch and at most one progress line every --log-every seconds\n"
                   "(default 30; 0: every update). A restart of the job\n"
                   "prints '-- restart N (cause): resuming from step S --' and the progress\n"
                   "goes on from step S. --json prints one object per metric point, one per\n"
                   "restart ({\"restart\": N, ..., \"resume_step\": S}) and a final\n"
                   "{\"final\": true, \"state\": ...} line.\n"
                   "Exit 0 when the job succeeded, 1 when it failed or was cancelled.\n");
            return MT_EXIT_OK;
        }
        return mt_cli_usage_error("watch", "unknown option");
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("watch", "expected one JOB argument");
    return mt_cli_follow(g, argv[optind], json, log_every_ms);
}
