/* SPDX-License-Identifier: MIT */
/* cmd_checkpoints.c — `meshtrain checkpoints JOB [--json]`: ListCheckpoints. */
#include <getopt.h>
#include <stdio.h>

#include "client/jobs_util.h"

int cmd_checkpoints(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    Meshtrain__ListCheckpointsRequest req = MESHTRAIN__LIST_CHECKPOINTS_REQUEST__INIT;
    Meshtrain__ListCheckpointsReply *rep = NULL;
    mt_err err = MT_ERR_INIT;
    int json = 0, c, rc = MT_EXIT_OK;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j') {
            json = 1;
        } else if (c == 'h') {
            printf("usage: meshtrain checkpoints JOB [--json]\n\nThe checkpoints the "
                   "coordinator keeps for JOB (step, size, checksum, complete).\n");
            return MT_EXIT_OK;
        } else {
            return mt_cli_usage_error("checkpoints", "unknown option");
        }
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("checkpoints", "expected one JOB argument");
    req.job_id = argv[optind];
    if (mt_cli_call(g, "ListCheckpoints", &req.base, (ProtobufCMessage **)&rep, &err) != MT_OK)
        return mt_cli_fail(&err);
    if (json) {
        cJSON *root = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(root, "checkpoints");
        for (size_t i = 0; i < rep->n_checkpoints; i++) {
            const Meshtrain__CheckpointInfo *k = rep->checkpoints[i];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "step", (double)k->step);
            cJSON_AddStringToObject(o, "location", k->location);
            cJSON_AddNumberToObject(o, "size_bytes", (double)k->size_bytes);
            cJSON_AddStringToObject(o, "checksum", k->checksum);
            cJSON_AddBoolToObject(o, "complete", k->complete);
            cJSON_AddNumberToObject(o, "time_ms", (double)k->time_ms);
            cJSON_AddItemToArray(a, o);
        }
        rc = mt_cli_print_json(root);
    } else {
        printf("%-10s %-12s %-16s %-9s %s\n", "STEP", "SIZE", "CHECKSUM", "COMPLETE", "TIME");
        for (size_t i = 0; i < rep->n_checkpoints; i++) {
            const Meshtrain__CheckpointInfo *k = rep->checkpoints[i];
            char b[32], t[64];
            mt_cli_fmt_bytes(b, sizeof(b), k->size_bytes);
            mt_cli_fmt_time(t, sizeof(t), k->time_ms);
            printf("%-10llu %-12s %-16s %-9s %s\n", (unsigned long long)k->step, b, k->checksum,
                   k->complete ? "yes" : "no", t);
        }
        if (rep->n_checkpoints == 0)
            printf("(no checkpoints)\n");
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc;
}
