/* SPDX-License-Identifier: MIT */
/*
 * main.c — `meshtrain`, the command-line client: global options, the command
 * table and dispatch (git.c's shape). Each subcommand lives in cmd_<name>.c and
 * follows the contract of cli.h. Exit codes: see mt_exit in cli.h and README.md.
 */
#include "blas/mt_blas.h"
#include "client/cli.h"
#include "log/mt_log.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cli_command {
    const char *name;
    mt_cli_handler handler;
    const char *summary;
} cli_command;

static const cli_command commands[] = {
    {"workers", cmd_workers, "list workers, their devices, state and last heartbeat"},
    {"train", cmd_train, "train a job spec in this process (--local)"},
    {"export", cmd_export, "export a checkpoint's weights (safetensors)"},
    {"submit", cmd_submit, "submit a job spec; prints the job id"},
    {"jobs", cmd_jobs, "list jobs (state, step, why they wait)"},
    {"status", cmd_status, "a job's state, placement, history, metrics, checkpoints"},
    {"cancel", cmd_cancel, "cancel a job (idempotent)"},
    {"checkpoints", cmd_checkpoints, "list a job's checkpoints"},
    {"plan", cmd_plan, "validate a job spec as submit does; per-device bytes, devices now"},
    {"watch", cmd_watch, "follow a job: progress bar, eval results, final state"},
    {"logs", cmd_logs, "the lines a job's workers logged (--follow: as they come)"},
    {"predict", cmd_predict, "run an exported model on IDX or CSV examples (top-k classes)"},
    {"generate", cmd_generate, "sample text from an exported language model"},
    {"digest", cmd_digest, "print the Merkle root of a checkpoint's or an export's tensors"},
    {"diverge", cmd_diverge, "first step whose digests differ in two train --json outputs"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: meshtrain [GLOBAL OPTIONS] COMMAND [ARGS]\n\n"
                 "Client of the meshtrain distributed training service.\n\n"
                 "Commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\nGlobal options:\n"
            "  --coordinator URL  coordinator address (default $MESHTRAIN_COORDINATOR or\n"
            "                     tcp://127.0.0.1:7400)\n"
            "  --token-file F     file holding the shared token (default $MESHTRAIN_TOKEN_FILE)\n"
            "  --tls-ca F         CA file to verify a tls+tcp:// coordinator (default\n"
            "                     $MESHTRAIN_TLS_CA); --tls-server-name N: name expected in its\n"
            "                     certificate (default $MESHTRAIN_TLS_SERVER_NAME, else the host)\n"
            "  --timeout-ms N     deadline of each request (default 10000)\n"
            "  --log-level L      debug|info|warn|error|off (default warn)\n"
            "  --version          print the version\n"
            "  -h, --help         this help\n\n"
            "Run 'meshtrain COMMAND --help' for a command's options.\n"
            "Exit codes: 0 ok, 1 failed, 2 usage, 3 coordinator unreachable, 4 rejected.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"coordinator", required_argument, NULL, 'c'},
        {"token-file", required_argument, NULL, 't'},
        {"timeout-ms", required_argument, NULL, 'T'},
        {"tls-ca", required_argument, NULL, 'A'},
        {"tls-server-name", required_argument, NULL, 'N'},
        {"log-level", required_argument, NULL, 'l'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    mt_cli_global g = {0};
    mt_err err = MT_ERR_INIT;
    mt_log_level level = MT_LOG_WARN;
    int c;

    mt_blas_boot(argc, argv); /* first: may re-exec with OPENBLAS_CORETYPE set */
    g.coordinator = getenv("MESHTRAIN_COORDINATOR");
    if (g.coordinator == NULL || g.coordinator[0] == '\0')
        g.coordinator = "tcp://127.0.0.1:7400";
    g.token_file = getenv("MESHTRAIN_TOKEN_FILE");
    if (g.token_file != NULL && g.token_file[0] == '\0')
        g.token_file = NULL;
    g.timeout_ms = 10000;
    g.tls_ca = getenv("MESHTRAIN_TLS_CA");
    g.tls_server_name = getenv("MESHTRAIN_TLS_SERVER_NAME");

    /* "+": stop at the first non-option, the subcommand */
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'c':
            g.coordinator = optarg;
            break;
        case 't':
            g.token_file = optarg;
            break;
        case 'A':
            g.tls_ca = optarg;
            break;
        case 'N':
            g.tls_server_name = optarg;
            break;
        case 'T':
            g.timeout_ms = (int)strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || g.timeout_ms <= 0) {
                fprintf(stderr, "meshtrain: --timeout-ms '%s': expected a positive integer\n",
                        optarg);
                return MT_EXIT_USAGE;
            }
            break;
        case 'l':
            if (mt_log_level_parse(optarg, &level, &err) != MT_OK) {
                fprintf(stderr, "meshtrain: %s\n", err.msg);
                return MT_EXIT_USAGE;
            }
            break;
        case 'V':
            printf("meshtrain %s\n", MT_VERSION);
            return MT_EXIT_OK;
        case 'h':
            usage(stdout);
            return MT_EXIT_OK;
        default:
            usage(stderr);
            return MT_EXIT_USAGE;
        }
    }
    mt_log_set_level(level);
    if (optind >= argc) {
        usage(stderr);
        return MT_EXIT_USAGE;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[optind], commands[i].name) == 0) {
            char **sub = argv + optind;
            int subc = argc - optind;
            optind = 0; /* glibc: full getopt re-init, so handlers may permute their own args */
            return commands[i].handler(&g, subc, sub);
        }
    }
    const char *names[sizeof(commands) / sizeof(commands[0])];
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        names[i] = commands[i].name;
    const char *near = mt_cli_closest(argv[optind], names, sizeof(names) / sizeof(names[0]));
    if (near != NULL)
        fprintf(stderr,
                "meshtrain: '%s' is not a command; did you mean '%s'? See 'meshtrain --help'.\n",
                argv[optind], near);
    else
        fprintf(stderr, "meshtrain: '%s' is not a command. See 'meshtrain --help'.\n",
                argv[optind]);
    return MT_EXIT_USAGE;
}
