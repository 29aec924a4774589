/* SPDX-License-Identifier: MIT */
/*
 * cmd_submit.c — `meshtrain submit JOB.json [--name N] [--priority P]`: send the spec to the
 * coordinator (SubmitJob, which validates it with mt_jobspec_validate) and print the job id.
 * An invalid spec prints "meshtrain: INVALID_ARGUMENT: <path>: <why>" and exits 4.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc/mt_alloc.h"
#include "client/jobs_util.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: meshtrain submit JOB.json [--name N] [--priority P]\n\n"
                 "Submit a job spec to the coordinator and print its id. The spec is validated\n"
                 "first (as `meshtrain plan` does); errors name the JSON path of the field.\n\n"
                 "  --name N       a label (default: the spec's \"name\")\n"
                 "  --priority P   higher starts first (default 0)\n");
}

int cmd_submit(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"name", required_argument, NULL, 'n'},
        {"priority", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    Meshtrain__SubmitJobRequest req = MESHTRAIN__SUBMIT_JOB_REQUEST__INIT;
    Meshtrain__SubmitJobReply *rep = NULL;
    mt_err err = MT_ERR_INIT;
    size_t len;
    char *spec = NULL, *end;
    long prio;
    int c;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            req.name = optarg;
            break;
        case 'p':
            prio = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || prio < -1000000 || prio > 1000000)
                return mt_cli_usage_error("submit", "--priority '%s': expected an integer", optarg);
            req.priority = (int32_t)prio;
            break;
        case 'h':
            usage(stdout);
            return MT_EXIT_OK;
        default:
            return mt_cli_usage_error("submit", "unknown option");
        }
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("submit", "expected one JOB.json argument");
    if (mt_cli_read_file(argv[optind], &spec, &len, &err) != MT_OK)
        return mt_cli_fail(&err);
    req.spec_json = spec;
    if (mt_cli_call(g, "SubmitJob", &req.base, (ProtobufCMessage **)&rep, &err) != MT_OK) {
        mt_free(spec);
        return mt_cli_fail(&err);
    }
    printf("%s\n", rep->job_id);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    mt_free(spec);
    return MT_EXIT_OK;
}
