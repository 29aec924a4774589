/* SPDX-License-Identifier: MIT */
/*
 * cli.h — the contract between the `meshtrain` CLI's dispatcher (main.c) and its
 * subcommands (client/cmd_<name>.c, one file each, as git's builtins).
 *
 * main.c parses the global options (--coordinator, --token-file, --timeout-ms,
 * --log-level), looks the subcommand up in its table and calls its handler with
 * argv[0] = the subcommand name. A handler parses its own options (getopt_long;
 * `--help` prints its usage to stdout and returns MT_EXIT_OK), does the work and
 * returns an exit code from the enum below. User-facing messages go through
 * client/msgs.h so every failure prints as "meshtrain: NAME: message".
 */
#ifndef MT_CLI_H
#define MT_CLI_H

#include <stddef.h>

#include "status/mt_status.h"

/* Process exit codes of `meshtrain` (documented in README.md). */
typedef enum mt_exit {
    MT_EXIT_OK = 0,          /* the operation succeeded */
    MT_EXIT_FAILED = 1,      /* the operation failed (or the job failed / was cancelled) */
    MT_EXIT_USAGE = 2,       /* bad command line */
    MT_EXIT_UNREACHABLE = 3, /* coordinator unreachable or timed out */
    MT_EXIT_REJECTED = 4,    /* request rejected: invalid, not found, unauthenticated ... */
} mt_exit;

/* Global options, owned by main.c, borrowed by handlers for the call. */
typedef struct mt_cli_global {
    const char *coordinator; /* --coordinator, $MESHTRAIN_COORDINATOR, or tcp://127.0.0.1:7400 */
    const char *token_file;  /* --token-file or $MESHTRAIN_TOKEN_FILE; NULL when none */
    int timeout_ms;          /* per-RPC deadline (--timeout-ms, default 10000) */
    const char *tls_ca;      /* --tls-ca or $MESHTRAIN_TLS_CA; NULL when none */
    const char *tls_server_name; /* --tls-server-name or $MESHTRAIN_TLS_SERVER_NAME; NULL: host */
} mt_cli_global;

typedef int (*mt_cli_handler)(const mt_cli_global *g, int argc, char **argv);

/* Map a status code to the exit code a script sees (UNAVAILABLE -> 3, INVALID_ARGUMENT -> 4 ...).
 */
mt_exit mt_cli_exit_from_code(mt_code code);

/*
 * Print "meshtrain: CODE_NAME: message" to stderr and return the mapped exit code. UNAVAILABLE
 * (the coordinator could not be reached; the message names its address) adds a hint line: start
 * one, or choose the address with --coordinator / MESHTRAIN_COORDINATOR.
 */
mt_exit mt_cli_fail(const mt_err *err);

/*
 * "Did you mean": of names[0..n) (borrowed), the one closest to word when word is likely a typo
 * of it (at most 1 edit for words of up to 4 characters, 2 beyond; an edit inserts, deletes or
 * changes a character or swaps two neighbours; case is ignored), the first on a tie; else NULL.
 */
const char *mt_cli_closest(const char *word, const char *const *names, size_t n);

/* Print "meshtrain CMD: message\n" + a hint to run --help; returns MT_EXIT_USAGE. */
mt_exit mt_cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

struct mt_rpc_client;

/*
 * Connect to g->coordinator with the token from g->token_file (conn.c), over TLS verified with
 * g->tls_ca for a tls+tcp:// address. MT_OK and *out (returns owned: mt_rpc_client_close), else
 * err says why (UNAVAILABLE naming the address, PERMISSION_DENIED for a bad token file,
 * UNAUTHENTICATED when the server's certificate does not verify).
 */
mt_code mt_cli_connect(const mt_cli_global *g, struct mt_rpc_client **out, mt_err *err);

/* Subcommand handlers (client/cmd_<name>.c). */
int cmd_workers(const mt_cli_global *g, int argc, char **argv);
int cmd_train(const mt_cli_global *g, int argc, char **argv);
int cmd_export(const mt_cli_global *g, int argc, char **argv);
int cmd_submit(const mt_cli_global *g, int argc, char **argv);
int cmd_jobs(const mt_cli_global *g, int argc, char **argv);
int cmd_status(const mt_cli_global *g, int argc, char **argv);
int cmd_cancel(const mt_cli_global *g, int argc, char **argv);
int cmd_checkpoints(const mt_cli_global *g, int argc, char **argv);
int cmd_logs(const mt_cli_global *g, int argc, char **argv);
int cmd_plan(const mt_cli_global *g, int argc, char **argv);
int cmd_watch(const mt_cli_global *g, int argc, char **argv);
int cmd_predict(const mt_cli_global *g, int argc, char **argv);
int cmd_generate(const mt_cli_global *g, int argc, char **argv);
int cmd_digest(const mt_cli_global *g, int argc, char **argv);
int cmd_diverge(const mt_cli_global *g, int argc, char **argv);

#endif
