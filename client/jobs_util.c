/* SPDX-License-Identifier: MIT */
/* jobs_util.c — helpers of the CLI's job commands (contract in jobs_util.h). */
#include "client/jobs_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "rpc/mt_rpc.h"

#define MAX_FILE (16u << 20)

mt_code mt_cli_call(const mt_cli_global *g, const char *method, const ProtobufCMessage *req,
                    ProtobufCMessage **rep, mt_err *err)
{
    struct mt_rpc_client *cli = NULL;
    mt_code rc;

    *rep = NULL;
    if ((rc = mt_cli_connect(g, &cli, err)) != MT_OK)
        return rc;
    rc = mt_rpc_client_call(cli, &meshtrain__coordinator__descriptor, method, req, rep,
                            g->timeout_ms, err);
    mt_rpc_client_close(cli);
    return rc;
}

void mt_cli_spec_dir(const char *path, char *base, size_t cap)
{
    const char *slash = strrchr(path, '/');
    snprintf(base, cap, "%.*s", slash != NULL ? (int)(slash - path) : 1,
             slash != NULL ? path : ".");
}

mt_code mt_cli_read_file(const char *path, char **out, size_t *len, mt_err *err)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    *out = NULL;
    *len = 0;
    if (f == NULL)
        return mt_err_set(err, errno == ENOENT ? MT_NOT_FOUND : MT_PERMISSION_DENIED, "%s: %s",
                          path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a regular file", path);
    }
    if ((unsigned long)n > MAX_FILE) {
        fclose(f);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: %ld bytes; a job spec has at most %u",
                          path, n, MAX_FILE);
    }
    buf = mt_malloc((size_t)n + 1);
    if (buf == NULL) {
        fclose(f);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        mt_free(buf);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: read failed", path);
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    *len = (size_t)n;
    return MT_OK;
}

int mt_cli_print_json(cJSON *root)
{
    char *text = root ? cJSON_Print(root) : NULL;

    cJSON_Delete(root);
    if (text == NULL) {
        fprintf(stderr, "meshtrain: INTERNAL: out of memory printing JSON\n");
        return MT_EXIT_FAILED;
    }
    puts(text);
    cJSON_free(text);
    return MT_EXIT_OK;
}

void mt_cli_fmt_bytes(char *out, size_t cap, uint64_t b)
{
    if (b < 1024)
        snprintf(out, cap, "%llu B", (unsigned long long)b);
    else if (b < (1u << 20))
        snprintf(out, cap, "%.1f KiB", (double)b / 1024.0);
    else if (b < (1ull << 30))
        snprintf(out, cap, "%.1f MiB", (double)b / 1048576.0);
    else
        snprintf(out, cap, "%.2f GiB", (double)b / 1073741824.0);
}

void mt_cli_fmt_time(char *out, size_t cap, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    if (localtime_r(&t, &tm) == NULL || strftime(out, cap, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(out, cap, "%lld", (long long)ms);
}

cJSON *mt_cli_job_summary_json(const Meshtrain__JobSummary *s)
{
    cJSON *o = cJSON_CreateObject();

    cJSON_AddStringToObject(o, "job_id", s->job_id);
    cJSON_AddStringToObject(o, "name", s->name);
    cJSON_AddStringToObject(o, "state", s->state);
    cJSON_AddNumberToObject(o, "priority", s->priority);
    cJSON_AddNumberToObject(o, "submitted_at_ms", (double)s->submitted_at_ms);
    cJSON_AddNumberToObject(o, "step", (double)s->step);
    cJSON_AddNumberToObject(o, "total_steps", (double)s->total_steps);
    cJSON_AddNumberToObject(o, "devices", s->devices);
    cJSON_AddStringToObject(o, "mesh", s->mesh);
    cJSON_AddNumberToObject(o, "restarts", s->restarts);
    cJSON_AddStringToObject(o, "reason", s->reason);
    return o;
}
