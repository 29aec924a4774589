/* SPDX-License-Identifier: MIT */
/*
 * cmd_digest.c — `meshtrain digest FILE [--json]`: the Merkle root (core/digest,
 * docs/reproducibility.md) of a checkpoint's or a safetensors file's tensors, recomputed from
 * the data and checked against what the file records. For a checkpoint it prints the weights
 * root (the tensors without '/', what an export of it holds: the same line for both) and the
 * state root (every tensor, optimizer slots included: what `train --json` prints for that step).
 * Exit codes (cli.h): 0 ok, 2 usage, 4 not a checkpoint or safetensors file, 1 other failures
 * (DATA_LOSS: the data does not match the recorded digest, naming the tensor when it can).
 */
#include "client/cli.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/mt_ckpt.h"
#include "digest/mt_digest.h"

/* Whether path starts with the checkpoint magic. */
static bool is_checkpoint(const char *path)
{
    char magic[8];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    bool yes = fd >= 0 && read(fd, magic, 8) == 8 && memcmp(magic, "MTCKPT1\n", 8) == 0;
    if (fd >= 0)
        close(fd);
    return yes;
}

static mt_code checkpoint_roots(const char *path, bool json, mt_err *err)
{
    mt_ckpt *ck = NULL;
    mt_digest w, s;
    char hw[MT_DIGEST_HEX], hs[MT_DIGEST_HEX];
    int nw = 0, ns = 0;
    mt_code rc = mt_ckpt_open(path, &ck, err);

    if (rc == MT_OK)
        rc = mt_ckpt_root(ck, false, true, &s, &ns, err); /* checks every recorded digest */
    if (rc == MT_OK)
        rc = mt_ckpt_root(ck, true, false, &w, &nw, NULL) == MT_OK
                 ? MT_OK
                 : mt_ckpt_root(ck, true, true, &w, &nw, err); /* version 1: recompute */
    if (rc == MT_OK && json)
        printf("{\"file\":\"%s\",\"kind\":\"checkpoint\",\"step\":%llu,\"weights\":\"%s\","
               "\"weights_tensors\":%d,\"state\":\"%s\",\"state_tensors\":%d}\n",
               path, (unsigned long long)mt_ckpt_step(ck), mt_digest_hex(&w, hw), nw,
               mt_digest_hex(&s, hs), ns);
    else if (rc == MT_OK)
        printf("weights %s (%d tensors)\nstate   %s (%d tensors, step %llu)\n",
               mt_digest_hex(&w, hw), nw, mt_digest_hex(&s, hs), ns,
               (unsigned long long)mt_ckpt_step(ck));
    mt_ckpt_close(ck);
    return rc;
}

static mt_code safetensors_root(const char *path, bool json, mt_err *err)
{
    mt_digest w;
    char hw[MT_DIGEST_HEX];
    int n = 0;
    bool recorded = false;
    mt_code rc = mt_ckpt_safetensors_digest(path, &w, &n, &recorded, err);

    if (rc != MT_OK)
        return rc;
    if (json)
        printf(
            "{\"file\":\"%s\",\"kind\":\"safetensors\",\"weights\":\"%s\",\"weights_tensors\":%d,"
            "\"recorded\":%s}\n",
            path, mt_digest_hex(&w, hw), n, recorded ? "true" : "false");
    else
        printf("weights %s (%d tensors%s)\n", mt_digest_hex(&w, hw), n,
               recorded ? ", matches the recorded root" : "");
    return MT_OK;
}

int cmd_digest(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    mt_err err = MT_ERR_INIT;
    bool json = false;
    mt_code rc;
    int c;

    (void)g;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j') {
            json = true;
            continue;
        }
        if (c == 'h') {
            printf("usage: meshtrain digest FILE [--json]\n\n"
                   "Print the Merkle root of the tensors of a checkpoint (.mtc) or a safetensors\n"
                   "file, recomputed from the data and checked against the digests the file\n"
                   "records. A checkpoint prints its weights root (equal to the root of its\n"
                   "export) and its state root (weights and optimizer state: the digest that\n"
                   "`train --local --json` prints for that step). Format: "
                   "docs/reproducibility.md.\n");
            return MT_EXIT_OK;
        }
        return mt_cli_usage_error("digest", "unknown option");
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("digest", "expected one FILE argument");
    if (is_checkpoint(argv[optind]))
        rc = checkpoint_roots(argv[optind], json, &err);
    else
        rc = safetensors_root(argv[optind], json, &err);
    return rc == MT_OK ? MT_EXIT_OK : mt_cli_fail(&err);
}
