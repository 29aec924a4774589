/* SPDX-License-Identifier: MIT */
/*
 * cmd_submit.c — `meshtrain submit JOB.json [--name N] [--priority P] [--mesh M]
 * [--init-from JOB[:STEP]] [--follow [--log-every S] | --wait]`:
 * send the spec to the coordinator (SubmitJob, which validates its structure with
 * mt_jobspec_validate_structure; the workers check its data files) and print the job id;
 * relative dataset paths go out made absolute against the spec file's folder (the one rule of
 * docs/job-spec.md, as `plan` and `train --local` read them); --mesh replaces the spec's "mesh";
 * --follow then behaves as `watch`. An invalid spec prints "meshtrain: INVALID_ARGUMENT: <path>:
 * <why>" and exits 4.
 *
 * Each invocation draws one random request id (idempotency key) and sends it with the request;
 * every resend of that request (the RPC socket resends it after a lost connection, e.g. when the
 * coordinator restarts mid-call) carries the same id, so the coordinator answers the job the
 * first attempt created instead of making a second one. The hidden --request-id ID sets it
 * (tests, and scripts that retry a whole `meshtrain submit`).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "alloc/mt_alloc.h"
#include "client/follow.h"
#include "client/jobs_util.h"
#include "client/progress.h"
#include "jobspec/mt_jobspec.h"
#include "mesh/mt_mesh.h"

/*
 * The one rule for relative dataset paths (docs/job-spec.md): relative to the spec file's folder.
 * The workers do not see that folder, so the spec goes out with those paths made absolute against
 * it (core/jobspec); *spec is replaced.
 */
static mt_code absolute_paths(const char *file, char **spec, size_t *len, mt_err *err)
{
    char dir[4096], real[PATH_MAX], *out = NULL;
    size_t n;
    mt_code rc;

    mt_cli_spec_dir(file, dir, sizeof(dir));
    if (realpath(dir, real) == NULL)
        return mt_err_set(err, MT_NOT_FOUND, "%s: cannot resolve its folder: %s", file,
                          strerror(errno));
    rc = mt_jobspec_absolute_paths(*spec, *len, real, &out, &n, err);
    if (rc != MT_OK)
        return rc;
    mt_free(*spec);
    *spec = out;
    *len = n;
    return MT_OK;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: meshtrain submit JOB.json [--name N] [--priority P] [--mesh M]\n"
            "                        [--init-from JOB[:STEP]] [--follow | --wait [--timeout S]]\n\n"
            "Submit a job spec to the coordinator and print its id. The coordinator checks\n"
            "the spec's structure (errors name the JSON path of the field); the workers\n"
            "check its data files as `meshtrain plan` does. Relative dataset paths are\n"
            "relative to the spec file's folder (sent as absolute paths).\n\n"
            "  --name N       a label (default: the spec's \"name\")\n"
            "  --priority P   higher starts first (default 0)\n"
            "  --mesh M       run on this mesh instead of the spec's (\"batch=4\")\n"
            "  --init-from JOB[:STEP]\n"
            "                 start from that job's checkpoint (STEP, else its latest\n"
            "                 complete one) on this spec's mesh and layouts: sets the\n"
            "                 spec's \"init_from\" (docs/job-spec.md)\n"
            "  --follow       then follow it as `meshtrain watch` does (exit 0 when it\n"
            "                 succeeds, 1 when it fails or is cancelled)\n"
            "  --log-every S  with --follow and stdout not a terminal: a progress line at\n"
            "                 most every S seconds besides the epoch lines (default 30)\n"
            "  --wait         then block until the job ends without drawing progress: print\n"
            "                 the final state line; exit 0 when it succeeds, 1 when it\n"
            "                 fails or is cancelled (for scripts and batch jobs)\n"
            "  --timeout S    with --wait: give up after S seconds (exit 3, the job keeps\n"
            "                 running)\n");
}

/* Replace the spec's top-level `key` by value (taken); *spec is replaced. */
static mt_code with_field(char **spec, const char *key, cJSON *value, mt_err *err)
{
    cJSON *root = cJSON_Parse(*spec);
    char *out;

    if (root == NULL || !cJSON_IsObject(root) || value == NULL) {
        cJSON_Delete(root);
        cJSON_Delete(value);
        return mt_err_set(err, value == NULL ? MT_RESOURCE_EXHAUSTED : MT_INVALID_ARGUMENT,
                          value == NULL ? "job spec: out of memory"
                                        : "job spec: not a JSON object");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    cJSON_AddItemToObject(root, key, value);
    out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (out == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "job spec: out of memory");
    mt_free(*spec);
    *spec = mt_malloc(strlen(out) + 1);
    if (*spec == NULL) {
        cJSON_free(out);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "job spec: out of memory");
    }
    memcpy(*spec, out, strlen(out) + 1);
    cJSON_free(out);
    return MT_OK;
}

/* Replace the spec's "mesh" by the --mesh text ("batch=4,model=2"). */
static mt_code with_mesh(char **spec, const char *text, mt_err *err)
{
    mt_mesh *mesh = NULL;
    cJSON *m;
    mt_code rc = mt_mesh_parse(text, NULL, 0, &mesh, err);

    if (rc != MT_OK)
        return rc;
    if ((m = cJSON_CreateObject()) != NULL)
        for (int d = 0; d < mt_mesh_ndims(mesh); d++)
            cJSON_AddNumberToObject(m, mt_mesh_dim_name(mesh, d), mt_mesh_dim_size(mesh, d));
    mt_mesh_free(mesh);
    return with_field(spec, "mesh", m, err);
}

/* Parse --init-from JOB[:STEP] into job (cap bytes) and *step (0 = latest). 0 when malformed. */
static int parse_init(const char *text, char *job, size_t cap, unsigned long long *step)
{
    const char *colon = strchr(text, ':');
    size_t n = colon != NULL ? (size_t)(colon - text) : strlen(text);
    char *end = NULL;

    if (n == 0 || n >= cap)
        return 0;
    memcpy(job, text, n);
    job[n] = '\0';
    *step = 0;
    if (colon != NULL) {
        *step = strtoull(colon + 1, &end, 10);
        if (end == colon + 1 || *end != '\0' || *step == 0 || *step > 1000000000ull)
            return 0;
    }
    return 1;
}

/* Replace the spec's "init_from" by {"job": job, "step": step (when > 0)}. */
static mt_code with_init(char **spec, const char *job, unsigned long long step, mt_err *err)
{
    cJSON *o = cJSON_CreateObject();

    if (o != NULL) {
        cJSON_AddStringToObject(o, "job", job);
        if (step > 0)
            cJSON_AddNumberToObject(o, "step", (double)step);
    }
    return with_field(spec, "init_from", o, err);
}

/* A fresh request id: 32 hex digits from getrandom (cap >= 33). */
static mt_code new_request_id(char *out, size_t cap, mt_err *err)
{
    unsigned char b[16];

    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        return mt_err_set(err, MT_INTERNAL, "submit: no random bytes for the request id");
    for (size_t i = 0; i < sizeof(b) && 2 * i + 2 < cap; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return MT_OK;
}

int cmd_submit(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"name", required_argument, NULL, 'n'},
        {"priority", required_argument, NULL, 'p'},
        {"mesh", required_argument, NULL, 'm'},
        {"follow", no_argument, NULL, 'f'},
        {"wait", no_argument, NULL, 'w'},
        {"timeout", required_argument, NULL, 't'},
        {"log-every", required_argument, NULL, 'l'},
        {"init-from", required_argument, NULL, 'i'},
        {"request-id", required_argument, NULL, 'r'}, /* hidden: tests, retrying scripts */
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *mesh = NULL, *init = NULL;
    char init_job[32];
    unsigned long long init_step = 0;
    bool follow = false, wait_end = false;
    double timeout_s = 0.0;
    int64_t log_every_ms = -1; /* the default */
    char job_id[64], request_id[72] = "";
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
        case 'm':
            mesh = optarg;
            break;
        case 'i':
            init = optarg;
            if (!parse_init(optarg, init_job, sizeof(init_job), &init_step))
                return mt_cli_usage_error("submit", "--init-from '%s': expected JOB[:STEP]",
                                          optarg);
            break;
        case 'r':
            if (optarg[0] == '\0' || strlen(optarg) > 64)
                return mt_cli_usage_error("submit", "--request-id: 1 to 64 bytes");
            snprintf(request_id, sizeof(request_id), "%s", optarg);
            break;
        case 'f':
            follow = true;
            break;
        case 'w':
            wait_end = true;
            break;
        case 't':
            timeout_s = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(timeout_s > 0.0) || timeout_s > 1e7)
                return mt_cli_usage_error("submit", "--timeout '%s': expected seconds > 0", optarg);
            break;
        case 'l':
            if (!mt_cli_parse_log_every(optarg, &log_every_ms))
                return mt_cli_usage_error("submit", "--log-every '%s': expected seconds >= 0",
                                          optarg);
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
    if (follow && wait_end)
        return mt_cli_usage_error("submit", "--follow and --wait exclude each other");
    if (timeout_s > 0.0 && !wait_end)
        return mt_cli_usage_error("submit", "--timeout needs --wait");
    if (log_every_ms >= 0 && !follow)
        return mt_cli_usage_error("submit", "--log-every needs --follow");
    if (mt_cli_read_file(argv[optind], &spec, &len, &err) != MT_OK ||
        absolute_paths(argv[optind], &spec, &len, &err) != MT_OK) {
        mt_free(spec);
        return mt_cli_fail(&err);
    }
    if ((mesh != NULL && with_mesh(&spec, mesh, &err) != MT_OK) ||
        (init != NULL && with_init(&spec, init_job, init_step, &err) != MT_OK)) {
        mt_free(spec);
        return mt_cli_fail(&err);
    }
    if (request_id[0] == '\0' && new_request_id(request_id, sizeof(request_id), &err) != MT_OK) {
        mt_free(spec);
        return mt_cli_fail(&err);
    }
    req.spec_json = spec;
    req.request_id = request_id;
    if (mt_cli_call(g, "SubmitJob", &req.base, (ProtobufCMessage **)&rep, &err) != MT_OK) {
        mt_free(spec);
        return mt_cli_fail(&err);
    }
    printf("%s\n", rep->job_id);
    fflush(stdout);
    snprintf(job_id, sizeof(job_id), "%s", rep->job_id);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    mt_free(spec);
    if (wait_end)
        return mt_cli_wait(g, job_id, (int64_t)(timeout_s * 1000.0));
    return follow ? mt_cli_follow(g, job_id, false, log_every_ms) : MT_EXIT_OK;
}
