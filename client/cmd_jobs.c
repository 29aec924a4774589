/* SPDX-License-Identifier: MIT */
/* cmd_jobs.c — `meshtrain jobs [--state S] [--limit N] [--cursor C | --all] [--json]`: ListJobs
 * as a table or JSON, one page (100 jobs by default) or every page with --all. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/jobs_util.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: meshtrain jobs [--state S] [--limit N] [--cursor C | --all] [--json]\n\n"
                 "List jobs in scheduling order (priority, then submission), a page at a time.\n\n"
                 "  --state S   only jobs in state S (QUEUED, SCHEDULED, RUNNING, SUCCEEDED,\n"
                 "              FAILED, CANCELLED, RESTARTING, STALLED; a comma list works)\n"
                 "  --limit N   jobs per page (default 100, at most 1000)\n"
                 "  --cursor C  the page after the one that printed C as its next cursor\n"
                 "  --all       every page\n"
                 "  --json      print JSON ({\"jobs\": [...], \"next_cursor\": C or null,\n"
                 "              \"total\": N})\n");
}

/* Print one page's rows as the table. */
static void print_rows(const Meshtrain__ListJobsReply *rep)
{
    for (size_t i = 0; i < rep->n_jobs; i++) {
        const Meshtrain__JobSummary *s = rep->jobs[i];
        char step[32];
        if (s->total_steps)
            snprintf(step, sizeof(step), "%llu/%llu", (unsigned long long)s->step,
                     (unsigned long long)s->total_steps);
        else
            snprintf(step, sizeof(step), "%llu", (unsigned long long)s->step);
        printf("%-12s %-20.20s %-10s %5d %-13s %s\n", s->job_id, s->name[0] ? s->name : "-",
               s->state, s->priority, step, s->reason);
    }
}

int cmd_jobs(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"state", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"limit", required_argument, NULL, 'l'},
        {"cursor", required_argument, NULL, 'c'},
        {"all", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    Meshtrain__ListJobsRequest req = MESHTRAIN__LIST_JOBS_REQUEST__INIT;
    Meshtrain__ListJobsReply *rep = NULL;
    mt_err err = MT_ERR_INIT;
    cJSON *root = NULL, *arr = NULL;
    char cursor[64] = "";
    int json = 0, all = 0, c, rc = MT_EXIT_OK;
    size_t shown = 0;
    long lim;
    char *end;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            req.state = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'l':
            lim = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || lim < 1 || lim > 1000)
                return mt_cli_usage_error("jobs", "--limit '%s': expected 1..1000", optarg);
            req.limit = (uint32_t)lim;
            break;
        case 'c':
            snprintf(cursor, sizeof(cursor), "%s", optarg);
            break;
        case 'a':
            all = 1;
            break;
        case 'h':
            usage(stdout);
            return MT_EXIT_OK;
        default:
            return mt_cli_usage_error("jobs", "unknown option");
        }
    }
    if (optind < argc)
        return mt_cli_usage_error("jobs", "unexpected argument '%s'", argv[optind]);
    if (all && cursor[0] != '\0')
        return mt_cli_usage_error("jobs", "--all and --cursor exclude each other");
    if (all && req.limit == 0)
        req.limit = 1000;
    if (json) {
        root = cJSON_CreateObject();
        arr = cJSON_AddArrayToObject(root, "jobs");
    } else {
        printf("%-12s %-20s %-10s %5s %-13s %s\n", "JOB", "NAME", "STATE", "PRIO", "STEP",
               "REASON");
    }
    for (;;) {
        req.cursor = cursor;
        if (mt_cli_call(g, "ListJobs", &req.base, (ProtobufCMessage **)&rep, &err) != MT_OK) {
            cJSON_Delete(root);
            return mt_cli_fail(&err);
        }
        shown += rep->n_jobs;
        if (json)
            for (size_t i = 0; i < rep->n_jobs; i++)
                cJSON_AddItemToArray(arr, mt_cli_job_summary_json(rep->jobs[i]));
        else
            print_rows(rep);
        snprintf(cursor, sizeof(cursor), "%s", rep->next_cursor);
        if (!all || cursor[0] == '\0')
            break;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        rep = NULL;
    }
    if (json) {
        if (cursor[0] != '\0')
            cJSON_AddStringToObject(root, "next_cursor", cursor);
        else
            cJSON_AddNullToObject(root, "next_cursor");
        cJSON_AddNumberToObject(root, "total", (double)rep->total);
        rc = mt_cli_print_json(root);
    } else if (shown == 0) {
        printf("(no jobs)\n");
    } else if (cursor[0] != '\0') {
        printf("(%zu of %llu jobs; the next page: --cursor %s, or --all)\n", shown,
               (unsigned long long)rep->total, cursor);
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc;
}
