/* SPDX-License-Identifier: MIT */
/*
 * cmd_workers.c — `meshtrain workers [--state S] [--json]`: the workers the
 * coordinator knows, their devices, state and last heartbeat (ListWorkers).
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "client/cli.h"
#include "proto/coordinator.pb-c.h"
#include "rpc/mt_rpc.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: meshtrain workers [--state alive|lost] [--json]\n\n"
                 "List the workers registered with the coordinator: state, devices, host,\n"
                 "pid and time since the last heartbeat.\n\n"
                 "  --state S   only workers in state S (alive or lost)\n"
                 "  --json      print one JSON object instead of a table\n");
}

static void fmt_age(char *out, size_t cap, int64_t ms)
{
    if (ms < 0)
        ms = 0;
    if (ms < 60000)
        snprintf(out, cap, "%.1fs ago", (double)ms / 1000.0);
    else if (ms < 3600000)
        snprintf(out, cap, "%lldm ago", (long long)(ms / 60000));
    else
        snprintf(out, cap, "%lldh ago", (long long)(ms / 3600000));
}

static void print_table(const Meshtrain__ListWorkersReply *r)
{
    printf("%-20s %-6s %-8s %-20s %-8s %-12s %s\n", "NAME", "STATE", "DEVICES", "HOST", "PID",
           "HEARTBEAT", "DATA ADDRESS");
    for (size_t i = 0; i < r->n_workers; i++) {
        const Meshtrain__WorkerInfo *w = r->workers[i];
        char age[32], devs[32];
        fmt_age(age, sizeof(age), r->now_ms - w->last_heartbeat_ms);
        snprintf(devs, sizeof(devs), "%zu cpu", w->n_devices);
        printf("%-20s %-6s %-8s %-20s %-8u %-12s %s\n", w->name, w->state, devs, w->host, w->pid,
               age, w->data_address[0] ? w->data_address : "-");
    }
    if (r->n_workers == 0)
        printf("(no workers registered)\n");
}

static int print_json(const Meshtrain__ListWorkersReply *r)
{
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "workers");
    char *text;

    cJSON_AddNumberToObject(root, "now_ms", (double)r->now_ms);
    for (size_t i = 0; i < r->n_workers; i++) {
        const Meshtrain__WorkerInfo *w = r->workers[i];
        cJSON *o = cJSON_CreateObject(), *ds = NULL;
        cJSON_AddStringToObject(o, "worker_id", w->worker_id);
        cJSON_AddStringToObject(o, "name", w->name);
        cJSON_AddStringToObject(o, "state", w->state);
        cJSON_AddStringToObject(o, "host", w->host);
        cJSON_AddNumberToObject(o, "pid", w->pid);
        cJSON_AddStringToObject(o, "data_address", w->data_address);
        cJSON_AddStringToObject(o, "version", w->version);
        cJSON_AddNumberToObject(o, "registered_at_ms", (double)w->registered_at_ms);
        cJSON_AddNumberToObject(o, "last_heartbeat_ms", (double)w->last_heartbeat_ms);
        cJSON_AddNumberToObject(o, "last_heartbeat_age_ms",
                                (double)(r->now_ms - w->last_heartbeat_ms));
        ds = cJSON_AddArrayToObject(o, "devices");
        for (size_t d = 0; d < w->n_devices; d++) {
            cJSON *dv = cJSON_CreateObject();
            cJSON_AddStringToObject(dv, "kind", w->devices[d]->kind);
            cJSON_AddNumberToObject(dv, "index", w->devices[d]->index);
            cJSON_AddNumberToObject(dv, "cores", w->devices[d]->cores);
            cJSON_AddNumberToObject(dv, "memory_bytes", (double)w->devices[d]->memory_bytes);
            cJSON_AddStringToObject(dv, "health", w->devices[d]->health);
            cJSON_AddItemToArray(ds, dv);
        }
        cJSON_AddItemToArray(arr, o);
    }
    text = cJSON_Print(root);
    cJSON_Delete(root);
    if (text == NULL) {
        fprintf(stderr, "meshtrain: INTERNAL: out of memory printing JSON\n");
        return MT_EXIT_FAILED;
    }
    puts(text);
    cJSON_free(text);
    return MT_EXIT_OK;
}

int cmd_workers(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"state", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    Meshtrain__ListWorkersRequest req = MESHTRAIN__LIST_WORKERS_REQUEST__INIT;
    Meshtrain__ListWorkersReply *rep = NULL;
    struct mt_rpc_client *cli = NULL;
    mt_err err = MT_ERR_INIT;
    int json = 0, c, rc;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            req.state = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return MT_EXIT_OK;
        default:
            return mt_cli_usage_error("workers", "unknown option");
        }
    }
    if (optind < argc)
        return mt_cli_usage_error("workers", "unexpected argument '%s'", argv[optind]);
    if (mt_cli_connect(g, &cli, &err) != MT_OK)
        return mt_cli_fail(&err);
    if (mt_rpc_client_call(cli, &meshtrain__coordinator__descriptor, "ListWorkers", &req.base,
                           (ProtobufCMessage **)&rep, g->timeout_ms, &err) != MT_OK) {
        mt_rpc_client_close(cli);
        return mt_cli_fail(&err);
    }
    if (json) {
        rc = print_json(rep);
    } else {
        print_table(rep);
        rc = MT_EXIT_OK;
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    mt_rpc_client_close(cli);
    return rc;
}
