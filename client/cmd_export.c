/* SPDX-License-Identifier: MIT */
/*
 * cmd_export.c — `meshtrain export CKPT --format safetensors -o FILE`: write the
 * weights of a checkpoint (core/ckpt) in a format other tools read.
 *
 * The source is resolved in one place (resolve_source) so that a job id can be
 * accepted later: today an argument that names a file, contains '/' or ends in
 * ".mtc" is a checkpoint file; anything else is taken as a job id and refused
 * with UNIMPLEMENTED until the coordinator can hand out a job's latest
 * checkpoint (issue #4 follow-up).
 * Exit codes (cli.h): 0 ok, 1 corrupt checkpoint or I/O failure, 2 usage,
 * 4 missing file / rejected. Tests: tests/integration/test_export.sh.
 */
#include "ckpt/mt_ckpt.h"
#include "client/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void export_usage(FILE *out)
{
    fprintf(out, "usage: meshtrain export CKPT --format safetensors -o FILE\n\n"
                 "Write the weights of checkpoint CKPT (a .mtc file) to FILE.\n"
                 "Optimizer slots (names with '/') are left out.\n\n"
                 "Options:\n"
                 "  --format F       output format; only 'safetensors' (the default)\n"
                 "  -o, --output F   file to write (replaced atomically)\n"
                 "  -h, --help       this help\n");
}

/* A checkpoint file path for `arg` into path; later also a job id via the coordinator. */
static mt_code resolve_source(const mt_cli_global *g, const char *arg, char *path, size_t n,
                              mt_err *err)
{
    struct stat st;
    size_t len = strlen(arg);

    (void)g; /* the coordinator address will serve job ids */
    if (stat(arg, &st) == 0 || strchr(arg, '/') != NULL ||
        (len > 4 && strcmp(arg + len - 4, ".mtc") == 0)) {
        if ((size_t)snprintf(path, n, "%s", arg) >= n)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: path too long", arg);
        return MT_OK;
    }
    return mt_err_set(err, MT_UNIMPLEMENTED,
                      "'%s' is not a checkpoint file; exporting by job id is not available yet",
                      arg);
}

int cmd_export(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"format", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *format = "safetensors", *output = NULL;
    char path[4096];
    mt_err err = MT_ERR_INIT;
    mt_ckpt *ck = NULL;
    int c, weights = 0;

    /* optind = 0 makes glibc re-initialise getopt: main.c parsed with "+" (stop at the first
     * non-option), and that mode would otherwise stick, refusing "CKPT -o FILE" orderings */
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            format = optarg;
            break;
        case 'o':
            output = optarg;
            break;
        case 'h':
            export_usage(stdout);
            return MT_EXIT_OK;
        default:
            return mt_cli_usage_error("export", "unknown option");
        }
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("export", "expected exactly one checkpoint");
    if (strcmp(format, "safetensors") != 0)
        return mt_cli_usage_error("export", "format '%s' is not supported (use safetensors)",
                                  format);
    if (output == NULL || output[0] == '\0')
        return mt_cli_usage_error("export", "missing -o FILE");
    if (resolve_source(g, argv[optind], path, sizeof(path), &err) != MT_OK)
        return mt_cli_fail(&err);
    if (mt_ckpt_open(path, &ck, &err) != MT_OK)
        return mt_cli_fail(&err);
    if (mt_ckpt_export_safetensors(ck, output, &err) != MT_OK) {
        mt_ckpt_close(ck);
        return mt_cli_fail(&err);
    }
    for (int i = 0; i < mt_ckpt_count(ck); i++) {
        mt_ckpt_tensor_info info;
        if (mt_ckpt_tensor_at(ck, i, &info, NULL) == MT_OK && strchr(info.name, '/') == NULL)
            weights++;
    }
    printf("exported %d weights of step %llu from %s to %s\n", weights,
           (unsigned long long)mt_ckpt_step(ck), path, output);
    mt_ckpt_close(ck);
    return MT_EXIT_OK;
}
