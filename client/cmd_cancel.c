/* SPDX-License-Identifier: MIT */
/*
 * cmd_cancel.c — `meshtrain cancel JOB`: CancelJob; prints the job's state afterwards.
 * Idempotent: cancelling a finished job succeeds and prints its final state.
 */
#include <getopt.h>
#include <stdio.h>

#include "client/jobs_util.h"

int cmd_cancel(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    Meshtrain__CancelJobRequest req = MESHTRAIN__CANCEL_JOB_REQUEST__INIT;
    Meshtrain__CancelJobReply *rep = NULL;
    mt_err err = MT_ERR_INIT;
    int c;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            printf("usage: meshtrain cancel JOB\n\nCancel a job in any state (a finished job is "
                   "left as it is). Prints the state after the call.\n");
            return MT_EXIT_OK;
        }
        return mt_cli_usage_error("cancel", "unknown option");
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("cancel", "expected one JOB argument");
    req.job_id = argv[optind];
    if (mt_cli_call(g, "CancelJob", &req.base, (ProtobufCMessage **)&rep, &err) != MT_OK)
        return mt_cli_fail(&err);
    printf("%s %s\n", req.job_id, rep->state);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return MT_EXIT_OK;
}
