/* SPDX-License-Identifier: MIT */
/*
 * jobs_util.h — helpers shared by the job commands of the CLI (cmd_submit.c, cmd_jobs.c,
 * cmd_status.c, cmd_cancel.c, cmd_checkpoints.c, cmd_plan.c): one RPC with connect and close,
 * reading a spec file, printing JSON, formatting times and byte counts.
 * Threading: the CLI is single-threaded.
 */
#ifndef MT_CLIENT_JOBS_UTIL_H
#define MT_CLIENT_JOBS_UTIL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "client/cli.h"
#include "proto/coordinator.pb-c.h"

/* Connect, call Coordinator.<method> with req (borrowed), close. On MT_OK *rep is owned
 * (protobuf_c_message_free_unpacked). Codes: the connection's and the server's. */
mt_code mt_cli_call(const mt_cli_global *g, const char *method, const ProtobufCMessage *req,
                    ProtobufCMessage **rep, mt_err *err);

/* Read a whole file (at most 16 MiB) into *out (returns owned, NUL-terminated; mt_free).
 * NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT (too big) naming the path. */
mt_code mt_cli_read_file(const char *path, char **out, size_t *len, mt_err *err);

/* The folder of the spec file at path ("." for a bare name), against which `train --local` and
 * `plan` resolve its input pipeline's relative data paths. */
void mt_cli_spec_dir(const char *path, char *base, size_t cap);

/* Print root as indented JSON to stdout and delete it (takes root). Returns an exit code. */
int mt_cli_print_json(cJSON *root);

/* "12.3 MiB" style. */
void mt_cli_fmt_bytes(char *out, size_t cap, uint64_t bytes);

/* Local time "2026-11-21 20:50:39" of a unix-ms time. */
void mt_cli_fmt_time(char *out, size_t cap, int64_t ms);

/* A job summary as a JSON object (returns owned). */
cJSON *mt_cli_job_summary_json(const Meshtrain__JobSummary *s);

#endif
