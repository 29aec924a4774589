/* SPDX-License-Identifier: MIT */
/*
 * cmd_export.c — `meshtrain export CKPT|JOB [--step S] --format safetensors -o FILE`:
 * write the weights of a checkpoint (core/ckpt) in a format other tools read.
 *
 * The source is resolved in one place (resolve_source): an argument that names a
 * file, contains '/' or ends in ".mtc" is a checkpoint file; anything else is a
 * job id, whose checkpoint (the latest complete one, or --step S) is downloaded
 * from the coordinator with GetCheckpointChunk into a temporary file first.
 * Exit codes (cli.h): 0 ok, 1 corrupt checkpoint or I/O failure, 2 usage,
 * 4 missing file / rejected. Tests: tests/integration/test_export.sh.
 */
#include "ckpt/mt_ckpt.h"
#include "client/cli.h"
#include "client/jobs_util.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void export_usage(FILE *out)
{
    fprintf(out, "usage: meshtrain export CKPT|JOB [--step S] --format safetensors -o FILE\n\n"
                 "Write the weights of checkpoint CKPT (a .mtc file), or of job JOB's latest\n"
                 "complete checkpoint (downloaded from the coordinator), to FILE.\n"
                 "Optimizer slots (names with '/') are left out.\n\n"
                 "Options:\n"
                 "  --step S         with JOB: the checkpoint of step S (default: the latest)\n"
                 "  --format F       output format; only 'safetensors' (the default)\n"
                 "  -o, --output F   file to write (replaced atomically)\n"
                 "  -h, --help       this help\n");
}

/* Download job_id's checkpoint of step (0 = latest complete) into the open file f. */
static mt_code download(const mt_cli_global *g, const char *job_id, uint64_t step, FILE *f,
                        mt_err *err)
{
    uint64_t off = 0;

    for (;;) {
        Meshtrain__GetCheckpointChunkRequest req = MESHTRAIN__GET_CHECKPOINT_CHUNK_REQUEST__INIT;
        Meshtrain__GetCheckpointChunkReply *rep = NULL;
        mt_code rc;
        bool last;
        req.job_id = (char *)job_id;
        req.step = step;
        req.offset = off;
        req.max_bytes = 4u << 20;
        rc = mt_cli_call(g, "GetCheckpointChunk", &req.base, (ProtobufCMessage **)&rep, err);
        if (rc != MT_OK)
            return rc;
        if (rep->skipped[0] != '\0') /* newer checkpoints whose files did not verify */
            fprintf(stderr, "meshtrain: %s; exporting checkpoint step %llu\n", rep->skipped,
                    (unsigned long long)rep->step);
        step = rep->step; /* pin the step the first chunk came from */
        if (rep->data.len > 0 && fwrite(rep->data.data, 1, rep->data.len, f) != rep->data.len)
            rc = mt_err_set(err, MT_INTERNAL, "job %s checkpoint: write failed", job_id);
        off += rep->data.len;
        last = rep->last || rep->data.len == 0;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        if (rc != MT_OK || last)
            return rc;
    }
}

/* A checkpoint file path for `arg` into path; a job id is downloaded (*tmp set: unlink it). */
static mt_code resolve_source(const mt_cli_global *g, const char *arg, uint64_t step, char *path,
                              size_t n, bool *tmp, mt_err *err)
{
    struct stat st;
    size_t len = strlen(arg);
    const char *dir = getenv("TMPDIR");
    FILE *f;
    int fd;
    mt_code rc;

    *tmp = false;
    if (stat(arg, &st) == 0 || strchr(arg, '/') != NULL ||
        (len > 4 && strcmp(arg + len - 4, ".mtc") == 0)) {
        if ((size_t)snprintf(path, n, "%s", arg) >= n)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: path too long", arg);
        return MT_OK;
    }
    if ((size_t)snprintf(path, n, "%s/meshtrain-export-XXXXXX", dir ? dir : "/tmp") >= n)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "TMPDIR: path too long");
    if ((fd = mkstemp(path)) < 0 || (f = fdopen(fd, "wb")) == NULL) {
        if (fd >= 0)
            close(fd);
        return mt_err_set(err, MT_INTERNAL, "temporary file %s: cannot create it", path);
    }
    *tmp = true;
    rc = download(g, arg, step, f, err);
    if (fclose(f) != 0 && rc == MT_OK)
        rc = mt_err_set(err, MT_INTERNAL, "temporary file %s: write failed", path);
    return rc;
}

int cmd_export(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"format", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, 'o'},
        {"step", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *format = "safetensors", *output = NULL;
    char path[4096];
    mt_err err = MT_ERR_INIT;
    mt_ckpt *ck = NULL;
    int c, weights = 0;
    uint64_t step = 0;
    bool tmp = false;
    char *end;
    mt_code rc;

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
        case 's':
            step = strtoull(optarg, &end, 10);
            if (end == optarg || *end != '\0' || step == 0)
                return mt_cli_usage_error("export", "--step '%s': expected a step >= 1", optarg);
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
    rc = resolve_source(g, argv[optind], step, path, sizeof(path), &tmp, &err);
    if (rc == MT_OK)
        rc = mt_ckpt_open(path, &ck, &err);
    if (rc == MT_OK)
        rc = mt_ckpt_export_safetensors(ck, output, &err);
    if (tmp)
        unlink(path);
    if (rc != MT_OK) {
        mt_ckpt_close(ck);
        return mt_cli_fail(&err);
    }
    for (int i = 0; i < mt_ckpt_count(ck); i++) {
        mt_ckpt_tensor_info info;
        if (mt_ckpt_tensor_at(ck, i, &info, NULL) == MT_OK && strchr(info.name, '/') == NULL)
            weights++;
    }
    printf("exported %d weights of step %llu from %s to %s\n", weights,
           (unsigned long long)mt_ckpt_step(ck), tmp ? argv[optind] : path, output);
    mt_ckpt_close(ck);
    return MT_EXIT_OK;
}
