/* SPDX-License-Identifier: MIT */
/*
 * main.c — `meshtrain-worker`: parse flags, run the worker (worker.h) until
 * SIGTERM/SIGINT. Exit codes: 0 clean stop, 1 failure, 2 usage error.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "blas/mt_blas.h"
#include "coll/mt_coll_mpi.h"
#include "log/mt_log.h"
#include "rpc/mt_rpc.h"
#include "tls/mt_tls.h"
#include "worker/metrics.h"
#include "worker/worker.h"

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: meshtrain-worker [OPTIONS]\n\n"
        "A meshtrain worker: registers this machine's devices with the coordinator,\n"
        "heartbeats, and runs its shards of training jobs.\n\n"
        "  --coordinator URL    coordinator RPC address (default $MESHTRAIN_COORDINATOR\n"
        "                       or tcp://127.0.0.1:7400)\n"
        "  --devices N          virtual CPU devices to register (default: one per core)\n"
        "  --name NAME          unique worker name (default: host name)\n"
        "  --data-listen URL    data-plane listener, tcp://HOST:PORT (port 0 = ephemeral;\n"
        "                       the bound address is reported to the coordinator).\n"
        "                       Default: this host's address toward the coordinator,\n"
        "                       ephemeral port. HOST 0.0.0.0 listens everywhere and\n"
        "                       reports that address with the port. ipc:///PATH: a\n"
        "                       Unix-domain socket, when every worker is on this machine\n"
        "  --data-plane KIND    tcp (default: the direct transport, --data-listen) or mpi:\n"
        "                       the workers are one MPI world (mpirun -np N / srun\n"
        "                       --mpi=pmix meshtrain-worker --data-plane mpi ...); each\n"
        "                       process is one worker of one device named NAME-mpiRANK,\n"
        "                       and jobs whose every member is of that world run their\n"
        "                       collectives on MPI (docs/collectives.md)\n"
        "  --mpi-collectives M  polled (default: MPI's nonblocking collectives, polled so\n"
        "                       deadlines and cancel work) or blocking (MPI_Allreduce & co:\n"
        "                       MPI's own speed, no deadline: a stuck member stalls the job)\n"
        "  --token-file F       token for the coordinator (mode 0600)\n"
        "  --tls-ca F           CA certificate(s) (PEM) that a tls+tcp:// coordinator's and\n"
        "                       peers' certificates must verify against\n"
        "  --tls-server-name N  name expected in those certificates (default: the host of\n"
        "                       each address; needed when it is an IP address)\n"
        "  --tls-cert F, --tls-key F  this worker's certificate and key (mode 0600), for\n"
        "                       --data-listen tls+tcp://HOST:PORT (peers verify each other)\n"
        "  --data-root DIR      files named by job specs must lie under DIR (repeatable;\n"
        "                       default: the current directory and " MT_PATHSAFE_DEFAULT_DATASETS
        ")\n"
        "  --rpc-timeout-ms N   deadline of each control call (default 3000)\n"
        "  --metrics-listen HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics\n"
        "                       (step and collective times, bytes, stalls, checkpoints;\n"
        "                       with --token-file the token is required; default: off)\n"
        "  --log-level L        debug|info|warn|error (default info)\n"
        "  --version, -h/--help\n");
}

/* Check the TLS flags against the addresses and load the files into *tls (NULL when no TLS flag
 * is given). 0, or -1 after printing why. */
static int worker_tls(mt_worker_opts *o, const mt_tls_opts *tlso, mt_tls **tls)
{
    int coord_tls = mt_tls_url_is_tls(o->coordinator);
    int data_tls = mt_tls_url_is_tls(o->data_listen);
    int any = tlso->ca_file || tlso->cert_file || tlso->key_file || tlso->server_name;
    mt_err err = MT_ERR_INIT;

    *tls = NULL;
    if ((coord_tls || data_tls) && tlso->ca_file == NULL) {
        fprintf(stderr, "meshtrain-worker: %s is tls+tcp://: give --tls-ca\n",
                coord_tls ? "--coordinator" : "--data-listen");
        return -1;
    }
    if (data_tls && (tlso->cert_file == NULL || tlso->key_file == NULL)) {
        fprintf(stderr, "meshtrain-worker: --data-listen tls+tcp:// needs --tls-cert and "
                        "--tls-key (peers verify each other)\n");
        return -1;
    }
    if (any && !coord_tls && !data_tls) {
        fprintf(stderr, "meshtrain-worker: --tls-* given but neither --coordinator nor "
                        "--data-listen is tls+tcp://\n");
        return -1;
    }
    if (any && mt_tls_new(tlso, tls, &err) != MT_OK) {
        fprintf(stderr, "meshtrain-worker: %s\n", err.msg);
        return -1;
    }
    o->tls = *tls;
    return 0;
}

/* --data-plane mpi: check the flags, initialise MPI, name this process NAME-mpiRANK (the
 * processes of one mpirun share a host name and flags) and set o->mpi_addr. 0, or -1 after
 * printing why (MPI left initialised: the process exits, and mpirun ends the MPI world). */
static int worker_mpi(mt_worker_opts *o, mt_coll_mpi_info *mpi, char name[96], char addr[64])
{
    char host[64] = "worker";
    mt_err err = MT_ERR_INIT;

    if (o->data_listen != NULL) {
        fprintf(stderr, "meshtrain-worker: --data-listen and --data-plane mpi exclude each "
                        "other (an MPI worker opens no listener)\n");
        return -1;
    }
    if (o->devices > 1) {
        fprintf(stderr, "meshtrain-worker: --data-plane mpi runs one device per process; start "
                        "more processes instead (mpirun -np N)\n");
        return -1;
    }
    if (mt_coll_mpi_init(mpi, &err) != MT_OK) {
        fprintf(stderr, "meshtrain-worker: --data-plane mpi: %s\n", err.msg);
        return -1;
    }
    o->devices = 1;
    gethostname(host, sizeof(host) - 1);
    snprintf(name, 96, "%.60s-mpi%d", o->name != NULL && o->name[0] ? o->name : host, mpi->rank);
    o->name = name;
    mt_coll_mpi_addr(mpi, addr, 64);
    o->mpi_addr = addr;
    mt_log_info("data plane: MPI (%s), rank %d of %d, world %s: registering as %s", mpi->library,
                mpi->rank, mpi->size, mpi->world_id, addr);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"coordinator", required_argument, NULL, 'c'},
        {"devices", required_argument, NULL, 'd'},
        {"name", required_argument, NULL, 'n'},
        {"data-listen", required_argument, NULL, 'D'},
        {"data-plane", required_argument, NULL, 'P'},
        {"mpi-collectives", required_argument, NULL, 'B'},
        {"token-file", required_argument, NULL, 't'},
        {"data-root", required_argument, NULL, 'R'},
        {"rpc-timeout-ms", required_argument, NULL, 'r'},
        {"tls-ca", required_argument, NULL, 'A'},
        {"tls-server-name", required_argument, NULL, 'N'},
        {"tls-cert", required_argument, NULL, 'C'},
        {"tls-key", required_argument, NULL, 'K'},
        {"log-level", required_argument, NULL, 'l'},
        {"metrics-listen", required_argument, NULL, 'M'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    mt_worker_opts o = MT_WORKER_OPTS_DEFAULTS;
    mt_tls_opts tlso = MT_TLS_OPTS_DEFAULTS;
    mt_tls *tls = NULL;
    char token[MT_RPC_TOKEN_MAX];
    mt_err err = MT_ERR_INIT;
    mt_log_level level = MT_LOG_INFO;
    mt_worker *w = NULL;
    worker_metrics *metrics = NULL;
    const char *metrics_listen = NULL;
    char metrics_url[128];
    const char *root_args[MT_PATHSAFE_MAX_ROOTS];
    int n_roots = 0;
    mt_pathsafe *roots = NULL;
    const char *env = getenv("MESHTRAIN_COORDINATOR");
    int use_mpi = 0;
    mt_coll_mpi_info mpi;
    char mpi_name[96], mpi_addr[64];
    char *end;
    int ch;

    mt_blas_boot(argc, argv); /* first: may re-exec with OPENBLAS_CORETYPE set */
    if (env != NULL && env[0] != '\0')
        o.coordinator = env;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            o.coordinator = optarg;
            break;
        case 'd':
            o.devices = (int)strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || o.devices < 1 || o.devices > 1024) {
                fprintf(stderr, "meshtrain-worker: --devices '%s': expected 1..1024\n", optarg);
                return 2;
            }
            break;
        case 'n':
            o.name = optarg;
            break;
        case 'D':
            o.data_listen = optarg;
            break;
        case 'P':
            if (strcmp(optarg, "tcp") != 0 && strcmp(optarg, "mpi") != 0) {
                fprintf(stderr, "meshtrain-worker: --data-plane '%s': expected tcp or mpi\n",
                        optarg);
                return 2;
            }
            use_mpi = strcmp(optarg, "mpi") == 0;
            break;
        case 'B':
            if (strcmp(optarg, "polled") != 0 && strcmp(optarg, "blocking") != 0) {
                fprintf(stderr,
                        "meshtrain-worker: --mpi-collectives '%s': expected polled or blocking\n",
                        optarg);
                return 2;
            }
            o.mpi_blocking = strcmp(optarg, "blocking") == 0;
            break;
        case 't':
            if (mt_rpc_token_load(optarg, token, &err) != MT_OK) {
                fprintf(stderr, "meshtrain-worker: %s\n", err.msg);
                return 2;
            }
            o.token = token;
            break;
        case 'R':
            if (n_roots == MT_PATHSAFE_MAX_ROOTS) {
                fprintf(stderr, "meshtrain-worker: at most %d --data-root options\n",
                        MT_PATHSAFE_MAX_ROOTS);
                return 2;
            }
            root_args[n_roots++] = optarg;
            break;
        case 'r':
            o.rpc_timeout_ms = (int)strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || o.rpc_timeout_ms < 10) {
                fprintf(stderr, "meshtrain-worker: --rpc-timeout-ms '%s': expected >= 10\n",
                        optarg);
                return 2;
            }
            break;
        case 'A':
            tlso.ca_file = optarg;
            break;
        case 'N':
            tlso.server_name = optarg;
            break;
        case 'C':
            tlso.cert_file = optarg;
            break;
        case 'K':
            tlso.key_file = optarg;
            break;
        case 'M':
            metrics_listen = optarg;
            break;
        case 'l':
            if (mt_log_level_parse(optarg, &level, &err) != MT_OK) {
                fprintf(stderr, "meshtrain-worker: %s\n", err.msg);
                return 2;
            }
            break;
        case 'V':
            printf("meshtrain-worker %s\n", MT_VERSION);
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
        fprintf(stderr, "meshtrain-worker: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (worker_tls(&o, &tlso, &tls) != 0)
        return 2;
    if (o.mpi_blocking && !use_mpi) {
        fprintf(stderr, "meshtrain-worker: --mpi-collectives needs --data-plane mpi\n");
        mt_tls_free(tls);
        return 2;
    }
    if (use_mpi && worker_mpi(&o, &mpi, mpi_name, mpi_addr) != 0) {
        mt_tls_free(tls);
        return 2;
    }
    mt_log_set_level(level);
    mt_log_info("OpenBLAS core %s", mt_blas_corename());
    if (mt_pathsafe_new_roots(root_args, n_roots, &roots, &err) != MT_OK) {
        fprintf(stderr, "meshtrain-worker: %s\n", err.msg);
        mt_tls_free(tls);
        return 2;
    }
    for (size_t i = 0; i < mt_pathsafe_root_count(roots); i++)
        mt_log_info("data root %s", mt_pathsafe_root_at(roots, i));
    o.data_roots = roots;
    if (metrics_listen != NULL) {
        if (worker_metrics_open(metrics_listen, o.token, &metrics, metrics_url, sizeof(metrics_url),
                                &err) != MT_OK) {
            mt_log_error("--metrics-listen %s: %s", metrics_listen, err.msg);
            mt_pathsafe_free(roots);
            mt_tls_free(tls);
            return 2;
        }
        mt_log_info("metrics on %s/metrics", metrics_url);
        o.metrics = metrics;
    }
    if (mt_worker_open(&o, &w, &err) != MT_OK) {
        mt_log_error("%s", err.msg);
        worker_metrics_close(metrics);
        mt_pathsafe_free(roots);
        mt_tls_free(tls);
        return 2;
    }
    mt_worker_run(w, &err);
    mt_worker_free(w);
    worker_metrics_close(metrics);
    mt_pathsafe_free(roots);
    mt_tls_free(tls);
    if (use_mpi) /* waits for every process of the MPI world (mpirun stops them together) */
        mt_coll_mpi_finalize();
    mt_log_info("worker stopped");
    return 0;
}
