/* SPDX-License-Identifier: MIT */
/*
 * cmd_status.c — `meshtrain status JOB [--json]`: GetJob — the summary, mesh and placement per
 * device, the state history, the latest metrics, the checkpoints and the error — and
 * GetJobDigests for the latest state digest (docs/reproducibility.md).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "client/jobs_util.h"
#include "watch/mt_watch.h"

static void print_text(const Meshtrain__GetJobReply *r, const Meshtrain__StepDigest *dg)
{
    const Meshtrain__JobSummary *s = r->job;
    char t[64], b[32];

    printf("job       %s%s%s\n", s->job_id, s->name[0] ? "  " : "", s->name);
    printf("state     %s%s%s\n", s->state, s->reason[0] ? " - " : "", s->reason);
    if (strcmp(s->state, "STALLED") == 0) /* the reason is the hang diagnosis (docs/jobs.md) */
        printf("stalled   alive but not advancing: %s\n", s->reason);
    if (s->diagnosis[0]) /* a silent worker, a stuck device or a broken link (docs/jobs.md) */
        printf("diagnosis %s\n", s->diagnosis);
    if (r->error[0])
        printf("error     %s\n", r->error);
    printf("mesh      %s (%u devices), priority %d, restarts %u\n", s->mesh, s->devices,
           s->priority, s->restarts);
    if (s->total_steps)
        printf("progress  step %llu of %llu\n", (unsigned long long)s->step,
               (unsigned long long)s->total_steps);
    else
        printf("progress  step %llu\n", (unsigned long long)s->step);
    if (r->n_placement > 0) {
        printf("\nplacement (rank  worker  device  coords)\n");
        for (size_t i = 0; i < r->n_placement; i++) {
            const Meshtrain__Placement *p = r->placement[i];
            printf("  %4u  %-20s cpu:%-4u (", p->device, p->worker_id, p->local_index);
            for (size_t k = 0; k < p->n_coords; k++)
                printf("%s%u", k ? ", " : "", p->coords[k]);
            printf(")\n");
        }
    }
    printf("\nhistory\n");
    for (size_t i = 0; i < r->n_events; i++) {
        mt_cli_fmt_time(t, sizeof(t), r->events[i]->time_ms);
        printf("  %s  %-10s %s\n", t, r->events[i]->state, r->events[i]->reason);
    }
    if (dg != NULL)
        printf("digest    %s (step %llu)\n", dg->digest, (unsigned long long)dg->step);
    if (r->n_latest_metrics > 0) {
        printf("\nlatest metrics\n");
        for (size_t i = 0; i < r->n_latest_metrics; i++)
            printf("  %-20s %.6g (step %llu)\n", r->latest_metrics[i]->name,
                   r->latest_metrics[i]->value, (unsigned long long)r->latest_metrics[i]->step);
    }
    if (r->n_checkpoints > 0) {
        printf("\ncheckpoints\n");
        for (size_t i = 0; i < r->n_checkpoints; i++) {
            mt_cli_fmt_bytes(b, sizeof(b), r->checkpoints[i]->size_bytes);
            printf("  step %-8llu %-10s %s%s\n", (unsigned long long)r->checkpoints[i]->step, b,
                   r->checkpoints[i]->checksum, r->checkpoints[i]->complete ? "" : " (incomplete)");
        }
    }
}

static int print_json(const Meshtrain__GetJobReply *r, const Meshtrain__StepDigest *dg)
{
    cJSON *root = mt_cli_job_summary_json(r->job), *a;

    cJSON_AddStringToObject(root, "error", r->error);
    if (r->job->diagnosis[0]) /* docs/jobs.md#diagnosis */
        cJSON_AddStringToObject(root, "diagnosis", r->job->diagnosis);
    else if (strcmp(r->job->state, "STALLED") == 0) /* a coordinator before schema 8 */
        cJSON_AddStringToObject(root, "diagnosis", r->job->reason);
    else
        cJSON_AddNullToObject(root, "diagnosis");
    cJSON_AddStringToObject(root, "metrics_address", r->metrics_address);
    cJSON_AddItemToObject(root, "spec", cJSON_Parse(r->spec_json));
    a = cJSON_AddArrayToObject(root, "events");
    cJSON *ra = cJSON_AddArrayToObject(root, "restart_markers");
    mt_watch_restart_scan scan;
    mt_watch_restart rs;
    mt_watch_restart_scan_init(&scan);
    for (size_t i = 0; i < r->n_events; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "time_ms", (double)r->events[i]->time_ms);
        cJSON_AddStringToObject(o, "state", r->events[i]->state);
        cJSON_AddStringToObject(o, "reason", r->events[i]->reason);
        cJSON_AddItemToArray(a, o);
        /* the restarts and the steps they resumed from (docs/cli.md; no lost_step here) */
        if (mt_watch_restart_scan_event(&scan, r->events[i]->state, r->events[i]->reason,
                                        r->events[i]->time_ms, 0, &rs)) {
            cJSON *m = mt_watch_restart_json(&rs);
            cJSON_DeleteItemFromObject(m, "lost_step");
            cJSON_AddItemToArray(ra, m);
        }
    }
    a = cJSON_AddArrayToObject(root, "placement");
    for (size_t i = 0; i < r->n_placement; i++) {
        cJSON *o = cJSON_CreateObject(), *co = cJSON_AddArrayToObject(o, "coords");
        cJSON_AddNumberToObject(o, "rank", r->placement[i]->device);
        cJSON_AddStringToObject(o, "worker_id", r->placement[i]->worker_id);
        cJSON_AddNumberToObject(o, "local_index", r->placement[i]->local_index);
        for (size_t k = 0; k < r->placement[i]->n_coords; k++)
            cJSON_AddItemToArray(co, cJSON_CreateNumber(r->placement[i]->coords[k]));
        cJSON_AddItemToArray(a, o);
    }
    a = cJSON_AddArrayToObject(root, "latest_metrics");
    for (size_t i = 0; i < r->n_latest_metrics; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", r->latest_metrics[i]->name);
        cJSON_AddNumberToObject(o, "value", r->latest_metrics[i]->value);
        cJSON_AddNumberToObject(o, "step", (double)r->latest_metrics[i]->step);
        cJSON_AddNumberToObject(o, "epoch", r->latest_metrics[i]->epoch);
        cJSON_AddItemToArray(a, o);
    }
    a = cJSON_AddArrayToObject(root, "checkpoints");
    for (size_t i = 0; i < r->n_checkpoints; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", (double)r->checkpoints[i]->step);
        cJSON_AddNumberToObject(o, "size_bytes", (double)r->checkpoints[i]->size_bytes);
        cJSON_AddStringToObject(o, "checksum", r->checkpoints[i]->checksum);
        cJSON_AddBoolToObject(o, "complete", r->checkpoints[i]->complete);
        cJSON_AddItemToArray(a, o);
    }
    if (dg != NULL) {
        cJSON *o = cJSON_AddObjectToObject(root, "digest");
        cJSON_AddNumberToObject(o, "step", (double)dg->step);
        cJSON_AddStringToObject(o, "digest", dg->digest);
    } else {
        cJSON_AddNullToObject(root, "digest");
    }
    return mt_cli_print_json(root);
}

int cmd_status(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    Meshtrain__GetJobRequest req = MESHTRAIN__GET_JOB_REQUEST__INIT;
    Meshtrain__GetJobReply *rep = NULL;
    Meshtrain__GetJobDigestsRequest dreq = MESHTRAIN__GET_JOB_DIGESTS_REQUEST__INIT;
    Meshtrain__GetJobDigestsReply *drep = NULL;
    const Meshtrain__StepDigest *dg;
    mt_err err = MT_ERR_INIT;
    int json = 0, c, rc = MT_EXIT_OK;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j') {
            json = 1;
        } else if (c == 'h') {
            printf("usage: meshtrain status JOB [--json]\n\nA job's state and why, mesh and "
                   "placement per device, state history,\nlatest metrics, checkpoints and "
                   "error.\n");
            return MT_EXIT_OK;
        } else {
            return mt_cli_usage_error("status", "unknown option");
        }
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("status", "expected one JOB argument");
    req.job_id = argv[optind];
    if (mt_cli_call(g, "GetJob", &req.base, (ProtobufCMessage **)&rep, &err) != MT_OK)
        return mt_cli_fail(&err);
    if (rep->job == NULL) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        fprintf(stderr, "meshtrain: INTERNAL: the reply has no job\n");
        return MT_EXIT_FAILED;
    }
    /* the latest state digest; a coordinator without GetJobDigests (older) leaves it out */
    dreq.job_id = argv[optind];
    dreq.latest = 1;
    if (mt_cli_call(g, "GetJobDigests", &dreq.base, (ProtobufCMessage **)&drep, &err) != MT_OK)
        drep = NULL;
    dg = drep != NULL && drep->n_digests > 0 ? drep->digests[drep->n_digests - 1] : NULL;
    if (json)
        rc = print_json(rep, dg);
    else
        print_text(rep, dg);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    if (drep != NULL)
        protobuf_c_message_free_unpacked(&drep->base, NULL);
    return rc;
}
