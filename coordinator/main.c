/* SPDX-License-Identifier: MIT */
/*
 * main.c — `meshtrain-coordinator`: parse flags, open the coordinator (coord.h),
 * run its loop until SIGINT/SIGTERM, shut down cleanly (exit 0).
 * Exit codes: 0 clean stop, 1 runtime failure, 2 usage error.
 * The shutdown is bounded: nng 1.5.2's nng_close can wait forever for a pipe it never reaps
 * (nanomsg/nng#1543, seen once on the RPC socket after SIGTERM), so a watchdog ends the process
 * SHUTDOWN_LIMIT_S seconds after the loop stopped. That is no worse than a kill -9, which the
 * coordinator survives by design: everything it acknowledged is already committed to SQLite.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/coord.h"
#include "coordinator/sched.h"
#include "coordinator/stall.h"
#include "jobspec/mt_jobspec.h"
#include "log/mt_log.h"
#include "rpc/mt_rpc.h"
#include "tls/mt_tls.h"

#define SHUTDOWN_LIMIT_S 15

static void *shutdown_watchdog(void *arg)
{
    (void)arg;
    sleep(SHUTDOWN_LIMIT_S);
    mt_log_warn("shutdown still blocked after %d s (nng_close); exiting without finishing it "
                "(acknowledged state is in SQLite)",
                SHUTDOWN_LIMIT_S);
    _exit(0);
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: meshtrain-coordinator [OPTIONS]\n\n"
            "The meshtrain coordinator: keeps workers, devices and jobs in SQLite and serves\n"
            "the control plane (RPC over nng) and the HTTP status endpoint.\n\n"
            "  --listen URL              RPC address (default tcp://127.0.0.1:7400; port 0 picks\n"
            "                            a free port, written to STATE_DIR/endpoints.json)\n"
            "  --http HOST:PORT          status endpoint (default 127.0.0.1:7480; 'off' disables)\n"
            "  --metrics-listen URL      live metrics stream (nng PUB) address (default: the\n"
            "                            RPC host, a free port; both are in endpoints.json)\n"
            "  --dashboard-dir DIR       dashboard assets (default: the source tree's\n"
            "                            coordinator/dashboard, else "
            "PREFIX/share/meshtrain/dashboard)\n"
            "  --state-dir DIR           state directory, holds meshtrain.db (default\n"
            "                            ./meshtrain-state)\n"
            "  --token-file F            require the token in F (mode 0600) on every call;\n"
            "                            needed when an address is reachable from other\n"
            "                            machines (not 127.0.0.1/::1/localhost)\n"
            "  --insecure                start without a token on such an address anyway\n"
            "                            (anyone who reaches it can submit, cancel, register)\n"
            "  --tls-cert F, --tls-key F TLS certificate (PEM) and its key (mode 0600): with\n"
            "                            --listen tls+tcp://HOST:PORT the RPC and metrics stream\n"
            "                            use TLS (docs/security.md)\n"
            "  --heartbeat-ms N          heartbeat interval told to workers (default 1000; at\n"
            "                            most 9666, so that 3 x N + 1000 stays shorter than\n"
            "                            the workers' default collective deadline of 30 s)\n"
            "  --heartbeat-timeout-ms N  mark a worker lost after N ms of silence (default 10000)\n"
            "  --stall-timeout-ms N      mark a running job STALLED when none of its devices\n"
            "                            advanced for N ms while its workers heartbeat (default\n"
            "                            10000, raised to 3 x --heartbeat-ms + 2000 when that is\n"
            "                            more; 0 disables)\n"
            "  --stall-restart-ms N      restart a job from its checkpoint when it stayed\n"
            "                            STALLED N ms more with a device waiting inside a\n"
            "                            collective (default 15000; 0 never)\n"
            "  --max-message-bytes N     largest request accepted (default 67108864)\n"
            "  --fsync MODE              'full' (default): an acknowledged write survives a\n"
            "                            power loss (an fsync per commit); 'normal': it survives\n"
            "                            kill -9 of the coordinator, with fewer fsyncs\n"
            "  --metrics-cache-mb N      memory for the status endpoint's cache of metric\n"
            "                            series (default 64; 0 = no cache)\n"
            "  --http-timeout-ms N       an HTTP request must arrive, and its response be\n"
            "                            read, within N ms; idle connections close after it\n"
            "                            (default 10000)\n"
            "  --http-max-conns N        open HTTP connections; more are answered 503\n"
            "                            (default 512)\n"
            "  --log-level L             debug|info|warn|error (default info)\n"
            "  --version, -h/--help\n");
}

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);

    if (end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "meshtrain-coordinator: %s '%s': expected an integer in %ld..%ld\n", flag,
                s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'L'},
        {"http", required_argument, NULL, 'H'},
        {"state-dir", required_argument, NULL, 'S'},
        {"token-file", required_argument, NULL, 't'},
        {"heartbeat-ms", required_argument, NULL, 'i'},
        {"heartbeat-timeout-ms", required_argument, NULL, 'o'},
        {"stall-timeout-ms", required_argument, NULL, 'T'},
        {"stall-restart-ms", required_argument, NULL, 'R'},
        {"max-message-bytes", required_argument, NULL, 'm'},
        {"dashboard-dir", required_argument, NULL, 'D'},
        {"log-level", required_argument, NULL, 'l'},
        {"fsync", required_argument, NULL, 'F'},
        {"metrics-listen", required_argument, NULL, 'P'},
        {"tls-cert", required_argument, NULL, 'C'},
        {"tls-key", required_argument, NULL, 'K'},
        {"metrics-cache-mb", required_argument, NULL, 'c'},
        {"http-timeout-ms", required_argument, NULL, 'W'},
        {"http-max-conns", required_argument, NULL, 'N'},
        {"insecure", no_argument, NULL, 'I'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    mt_coord_opts o = MT_COORD_OPTS_DEFAULTS;
    mt_tls_opts tlso = MT_TLS_OPTS_DEFAULTS;
    mt_tls *tls = NULL;
    char token[MT_RPC_TOKEN_MAX];
    mt_err err = MT_ERR_INIT;
    mt_log_level level = MT_LOG_INFO;
    mt_coord *c = NULL;
    long v;
    int ch, stall_set = 0;
    char dmsg[256];

    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'L':
            o.listen = optarg;
            break;
        case 'H':
            o.http = strcmp(optarg, "off") == 0 ? "" : optarg;
            break;
        case 'D':
            o.dashboard_dir = optarg;
            break;
        case 'S':
            o.state_dir = optarg;
            break;
        case 't':
            if (mt_rpc_token_load(optarg, token, &err) != MT_OK) {
                fprintf(stderr, "meshtrain-coordinator: %s\n", err.msg);
                return 2;
            }
            o.token = token;
            break;
        case 'i':
            if (parse_int("--heartbeat-ms", optarg, 50, 600000, &v) != 0)
                return 2;
            o.heartbeat_interval_ms = (int)v;
            break;
        case 'o':
            if (parse_int("--heartbeat-timeout-ms", optarg, 100, 3600000, &v) != 0)
                return 2;
            o.heartbeat_timeout_ms = (int)v;
            break;
        case 'm':
            if (parse_int("--max-message-bytes", optarg, 1024, 1L << 30, &v) != 0)
                return 2;
            o.max_msg_bytes = (size_t)v;
            break;
        case 'l':
            if (mt_log_level_parse(optarg, &level, &err) != MT_OK) {
                fprintf(stderr, "meshtrain-coordinator: %s\n", err.msg);
                return 2;
            }
            break;
        case 'T':
            if (parse_int("--stall-timeout-ms", optarg, 0, 3600000, &v) != 0)
                return 2;
            o.stall_timeout_ms = (int)v;
            stall_set = 1;
            break;
        case 'R':
            if (parse_int("--stall-restart-ms", optarg, 0, 86400000, &v) != 0)
                return 2;
            o.stall_restart_ms = (int)v;
            break;
        case 'P':
            o.metrics_listen = optarg;
            break;
        case 'c':
            if (parse_int("--metrics-cache-mb", optarg, 0, 65536, &v) != 0)
                return 2;
            o.metrics_cache_mb = (int)v;
            break;
        case 'W':
            if (parse_int("--http-timeout-ms", optarg, 100, 3600000, &v) != 0)
                return 2;
            o.http_timeout_ms = (int)v;
            break;
        case 'N':
            if (parse_int("--http-max-conns", optarg, 1, 65536, &v) != 0)
                return 2;
            o.http_max_conns = (int)v;
            break;
        case 'I':
            o.insecure = 1;
            break;
        case 'C':
            tlso.cert_file = optarg;
            break;
        case 'K':
            tlso.key_file = optarg;
            break;
        case 'F':
            if (strcmp(optarg, "full") != 0 && strcmp(optarg, "normal") != 0) {
                fprintf(stderr, "meshtrain-coordinator: --fsync '%s': expected full or normal\n",
                        optarg);
                return 2;
            }
            o.sync_full = strcmp(optarg, "full") == 0;
            break;
        case 'V':
            printf("meshtrain-coordinator %s\n", MT_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "meshtrain-coordinator: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (o.heartbeat_timeout_ms <= o.heartbeat_interval_ms) {
        fprintf(stderr, "meshtrain-coordinator: --heartbeat-timeout-ms must exceed "
                        "--heartbeat-ms\n");
        return 2;
    }
    /* a spec without restart.collective_deadline_ms gets the workers' default: it must outlast
     * the heartbeat window, or a frozen worker reads as a broken link (coordinator/sched.h) */
    if (coord_sched_deadline_check(0, COORD_STALL_FRESH_MS(o.heartbeat_interval_ms), dmsg,
                                   sizeof(dmsg)) != MT_OK) {
        fprintf(stderr,
                "meshtrain-coordinator: --heartbeat-ms %d: %s; use --heartbeat-ms %d or "
                "less\n",
                o.heartbeat_interval_ms, dmsg, (MT_JOBSPEC_COLL_DEADLINE_DEFAULT_MS - 1001) / 3);
        return 2;
    }
    if (!stall_set && o.stall_timeout_ms <= COORD_STALL_FRESH_MS(o.heartbeat_interval_ms))
        o.stall_timeout_ms = (int)COORD_STALL_FRESH_MS(o.heartbeat_interval_ms) + 1000;
    if (o.stall_timeout_ms > 0 &&
        o.stall_timeout_ms <= COORD_STALL_FRESH_MS(o.heartbeat_interval_ms)) {
        fprintf(stderr,
                "meshtrain-coordinator: --stall-timeout-ms %d must exceed 3 x --heartbeat-ms + "
                "1000 (%lld), so that a stopped worker is seen as silent before its job could be "
                "called STALLED\n",
                o.stall_timeout_ms, (long long)COORD_STALL_FRESH_MS(o.heartbeat_interval_ms));
        return 2;
    }
    if ((tlso.cert_file != NULL || tlso.key_file != NULL) != mt_tls_url_is_tls(o.listen)) {
        fprintf(stderr, "meshtrain-coordinator: %s\n",
                mt_tls_url_is_tls(o.listen)
                    ? "--listen tls+tcp:// needs --tls-cert and --tls-key"
                    : "--tls-cert/--tls-key need --listen tls+tcp://HOST:PORT");
        return 2;
    }
    if (tlso.cert_file != NULL || tlso.key_file != NULL) {
        if (mt_tls_new(&tlso, &tls, &err) != MT_OK) {
            fprintf(stderr, "meshtrain-coordinator: %s\n", err.msg);
            return 2;
        }
        o.tls = tls;
    }
    mt_log_set_level(level);
    if (mt_coord_open(&o, &c, &err) != MT_OK) {
        mt_log_error("%s: %s", mt_code_name(err.code), err.msg);
        mt_tls_free(tls);
        return 1;
    }
    mt_coord_run(c, &err);
    {
        pthread_t wd;
        if (pthread_create(&wd, NULL, shutdown_watchdog, NULL) == 0)
            pthread_detach(wd);
    }
    mt_coord_free(c);
    mt_tls_free(tls);
    mt_log_info("coordinator stopped");
    return 0;
}
