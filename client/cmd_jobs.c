/* SPDX-License-Identifier: MIT */
/* cmd_jobs.c — `meshtrain jobs [--state S] [--json]`: ListJobs as a table or JSON. */
#include <getopt.h>
#include <stdio.h>

#include "client/jobs_util.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: meshtrain jobs [--state S] [--json]\n\n"
                 "List jobs in scheduling order (priority, then submission).\n\n"
                 "  --state S   only jobs in state S (QUEUED, SCHEDULED, RUNNING, SUCCEEDED,\n"
                 "              FAILED, CANCELLED, RESTARTING, STALLED; a comma list works)\n"
                 "  --json      print JSON\n");
}

int cmd_jobs(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"state", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    Meshtrain__ListJobsRequest req = MESHTRAIN__LIST_JOBS_REQUEST__INIT;
    Meshtrain__ListJobsReply *rep = NULL;
    mt_err err = MT_ERR_INIT;
    int json = 0, c, rc = MT_EXIT_OK;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            req.state = optarg;
            break;
        case 'j':
            json = 1;
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
    if (mt_cli_call(g, "ListJobs", &req.base, (ProtobufCMessage **)&rep, &err) != MT_OK)
        return mt_cli_fail(&err);
    if (json) {
        cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "jobs");
        for (size_t i = 0; i < rep->n_jobs; i++)
            cJSON_AddItemToArray(arr, mt_cli_job_summary_json(rep->jobs[i]));
        rc = mt_cli_print_json(root);
    } else {
        printf("%-12s %-20s %-10s %5s %-13s %s\n", "JOB", "NAME", "STATE", "PRIO", "STEP",
               "REASON");
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
        if (rep->n_jobs == 0)
            printf("(no jobs)\n");
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc;
}
