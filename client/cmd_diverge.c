/* SPDX-License-Identifier: MIT */
/*
 * cmd_diverge.c — `meshtrain diverge A B`: reads the {"step": N, "digest": "..."} lines of two
 * `meshtrain train --local --json` outputs (other lines are skipped), or the digests a job's
 * workers reported to the coordinator (an argument that is no file and looks like a job id:
 * GetJobDigests), and prints the first step present in both whose state digests differ, or that
 * none do.
 * Exit codes: 0 no divergence, 1 a divergence (as cmp/diff) or another failure, 2 usage,
 * 4 unreadable or digest-less input.
 */
#include "client/cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc/mt_alloc.h"
#include "client/jobs_util.h"
#include "digest/mt_digest.h"

typedef struct step_digest {
    int64_t step;
    mt_digest d;
} step_digest;

typedef struct digest_run {
    step_digest *v;
    size_t n, cap;
} digest_run;

/* One line: a step digest into r when it is one; other JSON lines are skipped. */
static mt_code read_line(const char *path, int lineno, const char *line, digest_run *r, mt_err *err)
{
    cJSON *o = cJSON_Parse(line);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
    const cJSON *dg = cJSON_GetObjectItemCaseSensitive(o, "digest");
    mt_code rc = MT_OK;

    if (o == NULL)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%d: not a JSON line", path, lineno);
    else if (cJSON_IsNumber(st) && cJSON_IsString(dg)) {
        step_digest e = {(int64_t)st->valuedouble, {{0}}};
        rc = mt_digest_parse_hex(dg->valuestring, &e.d, err);
        if (rc != MT_OK)
            mt_err_prefix(err, "%s:%d: ", path, lineno);
        else if (r->n > 0 && e.step <= r->v[r->n - 1].step)
            rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s:%d: step %lld after step %lld", path,
                            lineno, (long long)e.step, (long long)r->v[r->n - 1].step);
        if (rc == MT_OK && r->n == r->cap) {
            size_t cap = r->cap ? 2 * r->cap : 64;
            step_digest *nv = mt_realloc(r->v, cap * sizeof(*nv));
            if (nv == NULL)
                rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
            else
                r->v = nv, r->cap = cap;
        }
        if (rc == MT_OK)
            r->v[r->n++] = e;
    }
    cJSON_Delete(o);
    return rc;
}

/* The digests job_id's workers reported (GetJobDigests, page by page), by ascending step. */
static mt_code read_job(const mt_cli_global *g, const char *job_id, digest_run *r, mt_err *err)
{
    Meshtrain__GetJobDigestsRequest req = MESHTRAIN__GET_JOB_DIGESTS_REQUEST__INIT;
    char state[32] = "";
    size_t got;
    mt_code rc;

    req.job_id = (char *)job_id;
    req.limit = 10000;
    do {
        Meshtrain__GetJobDigestsReply *rep = NULL;
        rc = mt_cli_call(g, "GetJobDigests", &req.base, (ProtobufCMessage **)&rep, err);
        if (rc != MT_OK)
            return rc;
        got = rep->n_digests;
        snprintf(state, sizeof(state), "%s", rep->state);
        if (r->n + got > r->cap) {
            step_digest *nv = mt_realloc(r->v, (r->n + got) * sizeof(*nv));
            if (nv == NULL)
                rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", job_id);
            else
                r->v = nv, r->cap = r->n + got;
        }
        for (size_t i = 0; rc == MT_OK && i < got; i++) {
            r->v[r->n].step = (int64_t)rep->digests[i]->step;
            rc = mt_digest_parse_hex(rep->digests[i]->digest, &r->v[r->n].d, err);
            r->n++;
        }
        if (got > 0)
            req.since_step = rep->digests[got - 1]->step + 1;
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    } while (rc == MT_OK && got == req.limit);
    if (rc == MT_OK && r->n == 0)
        rc = mt_err_set(err, MT_FAILED_PRECONDITION,
                        "job %s has no state digests yet (its workers report one at every epoch "
                        "end, checkpoint and digest_every step; state %s)",
                        job_id, state);
    return rc;
}

static mt_code read_run(const mt_cli_global *g, const char *path, digest_run *r, mt_err *err)
{
    struct stat st;
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    mt_code rc = MT_OK;
    FILE *f;

    if (stat(path, &st) != 0 && errno == ENOENT && strchr(path, '/') == NULL &&
        strchr(path, '.') == NULL)
        return read_job(g, path, r, err); /* a job id */
    f = fopen(path, "r");
    if (f == NULL)
        return mt_err_set(err, errno == ENOENT ? MT_NOT_FOUND : MT_PERMISSION_DENIED, "open %s: %s",
                          path, strerror(errno));
    while (rc == MT_OK && getline(&line, &cap, f) != -1) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] != '\0')
            rc = read_line(path, lineno, line, r, err);
    }
    free(line);
    fclose(f);
    if (rc == MT_OK && r->n == 0)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "%s: no {\"step\", \"digest\"} line (was it written by `meshtrain train "
                        "--local --json`?)",
                        path);
    return rc;
}

/* Walk the steps both runs have, in order; 1 and the step when digests differ, else 0. */
static int compare(const digest_run *a, const digest_run *b, const char *pa, const char *pb,
                   mt_err *err)
{
    size_t i = 0, j = 0, common = 0;
    int64_t first = -1, last = -1;
    char ha[MT_DIGEST_HEX], hb[MT_DIGEST_HEX];

    while (i < a->n && j < b->n) {
        if (a->v[i].step < b->v[j].step) {
            i++;
            continue;
        }
        if (a->v[i].step > b->v[j].step) {
            j++;
            continue;
        }
        if (!mt_digest_equal(&a->v[i].d, &b->v[j].d)) {
            printf("first divergence at step %lld (%zu common steps equal before it)\n"
                   "  %s: %s\n  %s: %s\n",
                   (long long)a->v[i].step, common, pa, mt_digest_hex(&a->v[i].d, ha), pb,
                   mt_digest_hex(&b->v[j].d, hb));
            return 1;
        }
        if (first < 0)
            first = a->v[i].step;
        last = a->v[i].step;
        common++, i++, j++;
    }
    if (common == 0) {
        mt_err_set(err, MT_FAILED_PRECONDITION,
                   "no step has a digest in both (%s: %zu digests, %s: %zu): give both runs the "
                   "same digest_every",
                   pa, a->n, pb, b->n);
        return -1;
    }
    printf("no divergence: the digests of all %zu common steps (%lld..%lld) are equal\n", common,
           (long long)first, (long long)last);
    return 0;
}

int cmd_diverge(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    digest_run a = {NULL, 0, 0}, b = {NULL, 0, 0};
    mt_err err = MT_ERR_INIT;
    mt_code rc;
    int c, res = -1;

    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            printf("usage: meshtrain diverge A B\n\n"
                   "A and B are outputs of `meshtrain train --local --json` or job ids (the\n"
                   "digests the job's workers reported to the coordinator). Set digest_every in\n"
                   "the spec for a digest every N steps; every epoch end and checkpoint has one.\n"
                   "Prints the first step present in both whose state digests differ (exit 1),\n"
                   "or that none do (exit 0). See docs/reproducibility.md.\n");
            return MT_EXIT_OK;
        }
        return mt_cli_usage_error("diverge", "unknown option");
    }
    if (optind + 2 != argc)
        return mt_cli_usage_error("diverge", "expected two arguments A B");
    rc = read_run(g, argv[optind], &a, &err);
    if (rc == MT_OK)
        rc = read_run(g, argv[optind + 1], &b, &err);
    if (rc == MT_OK)
        res = compare(&a, &b, argv[optind], argv[optind + 1], &err);
    mt_free(a.v);
    mt_free(b.v);
    if (rc != MT_OK || res < 0)
        return mt_cli_fail(&err);
    return res == 0 ? MT_EXIT_OK : MT_EXIT_FAILED;
}
