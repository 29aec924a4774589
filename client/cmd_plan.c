/* SPDX-License-Identifier: MIT */
/*
 * cmd_plan.c — `meshtrain plan JOB.json`: validate the spec exactly as SubmitJob does
 * (mt_jobspec_validate), print what each device would hold (weights, optimizer state) and,
 * when the coordinator answers, which devices the job would get now (the scheduler's
 * placement function, core/sched, over the free devices of alive workers).
 * Exit 0 when the spec is valid, 4 with "INVALID_ARGUMENT: <path>: <why>" when not.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "client/jobs_util.h"
#include "jobspec/mt_jobspec.h"
#include "sched/mt_sched.h"
#include "spmd/mt_spmd.h"

typedef struct busy {
    char worker_id[64];
    uint32_t local;
} busy;

/* Devices held by placed jobs, from ListJobs + GetJob. *out owned. */
static mt_code busy_devices(const mt_cli_global *g, busy **out, size_t *n, mt_err *err)
{
    Meshtrain__ListJobsRequest lr = MESHTRAIN__LIST_JOBS_REQUEST__INIT;
    Meshtrain__ListJobsReply *jobs = NULL;
    mt_code rc;

    *out = NULL;
    *n = 0;
    lr.state = "SCHEDULED,RUNNING,STALLED";
    if ((rc = mt_cli_call(g, "ListJobs", &lr.base, (ProtobufCMessage **)&jobs, err)) != MT_OK)
        return rc;
    for (size_t i = 0; i < jobs->n_jobs && rc == MT_OK; i++) {
        Meshtrain__GetJobRequest gr = MESHTRAIN__GET_JOB_REQUEST__INIT;
        Meshtrain__GetJobReply *j = NULL;
        gr.job_id = jobs->jobs[i]->job_id;
        if ((rc = mt_cli_call(g, "GetJob", &gr.base, (ProtobufCMessage **)&j, err)) != MT_OK)
            break;
        busy *nb = mt_realloc(*out, (*n + j->n_placement + 1) * sizeof(*nb));
        if (nb == NULL) {
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "out of memory");
        } else {
            *out = nb;
            for (size_t k = 0; k < j->n_placement; k++) {
                snprintf(nb[*n].worker_id, sizeof(nb[*n].worker_id), "%s",
                         j->placement[k]->worker_id);
                nb[(*n)++].local = j->placement[k]->local_index;
            }
        }
        protobuf_c_message_free_unpacked(&j->base, NULL);
    }
    protobuf_c_message_free_unpacked(&jobs->base, NULL);
    return rc;
}

static int is_busy(const busy *b, size_t n, const char *worker, uint32_t local)
{
    for (size_t i = 0; i < n; i++)
        if (b[i].local == local && strcmp(b[i].worker_id, worker) == 0)
            return 1;
    return 0;
}

/* Print the placement the job would get now, or why it would wait. */
static void print_devices_now(const mt_cli_global *g, const mt_jobspec_summary *s)
{
    Meshtrain__ListWorkersRequest wr = MESHTRAIN__LIST_WORKERS_REQUEST__INIT;
    Meshtrain__ListWorkersReply *ws = NULL;
    mt_sched_worker *pw = NULL;
    mt_sched_slot *slot = NULL;
    uint32_t **fr = NULL;
    busy *b = NULL;
    size_t nb = 0, registered = 0, nfree = 0;
    mt_err err = MT_ERR_INIT;

    wr.state = "alive";
    if (mt_cli_call(g, "ListWorkers", &wr.base, (ProtobufCMessage **)&ws, &err) != MT_OK ||
        busy_devices(g, &b, &nb, &err) != MT_OK) {
        printf("\ndevices now: unknown (coordinator %s: %s: %s)\n", g->coordinator,
               mt_code_name(err.code), err.msg);
        goto out;
    }
    pw = mt_calloc(ws->n_workers + 1, sizeof(*pw));
    fr = mt_calloc(ws->n_workers + 1, sizeof(*fr));
    slot = mt_calloc((size_t)s->n_devices, sizeof(*slot));
    if (pw == NULL || fr == NULL || slot == NULL)
        goto out;
    for (size_t i = 0; i < ws->n_workers; i++) {
        const Meshtrain__WorkerInfo *w = ws->workers[i];
        fr[i] = mt_calloc(w->n_devices + 1, sizeof(**fr));
        if (fr[i] == NULL)
            goto out;
        for (size_t d = 0; d < w->n_devices; d++) {
            if (strcmp(w->devices[d]->health, "ok") != 0)
                continue;
            registered++;
            if (!is_busy(b, nb, w->worker_id, w->devices[d]->index))
                fr[i][pw[i].n_free++] = w->devices[d]->index;
        }
        pw[i].free = fr[i];
        nfree += pw[i].n_free;
    }
    if ((size_t)s->n_devices > registered) {
        printf("\ndevices now: none; the job needs %d devices, %zu registered (it would wait "
               "in QUEUED)\n",
               s->n_devices, registered);
        goto out;
    }
    if (mt_sched_place(pw, ws->n_workers, (size_t)s->n_devices,
                       (size_t)s->mesh_sizes[s->mesh_ndims - 1], slot) != MT_OK) {
        printf("\ndevices now: none free enough; the job needs %d devices, %zu of %zu are free "
               "(it would wait for running jobs)\n",
               s->n_devices, nfree, registered);
        goto out;
    }
    printf("\ndevices it would use now (rank  worker  device)\n");
    for (int r = 0; r < s->n_devices; r++)
        printf("  %4d  %-20s cpu:%u\n", r, ws->workers[slot[r].worker]->worker_id,
               slot[r].local_index);
out:
    for (size_t i = 0; fr != NULL && ws != NULL && i < ws->n_workers; i++)
        mt_free(fr[i]);
    mt_free(fr);
    mt_free(pw);
    mt_free(slot);
    mt_free(b);
    if (ws != NULL)
        protobuf_c_message_free_unpacked(&ws->base, NULL);
}

/* --layers: one line per layer: output shape, buffers on one device, collective bytes per dim. */
static void print_layers(const mt_jobspec_summary *s, const mt_spmd_layer_plan *lp, int n)
{
    char w[32];
    printf("\n%-20s %-20s %-16s %12s", "layer", "type", "output", "activations");
    for (int k = 0; k < s->mesh_ndims; k++)
        printf(" %12s", s->mesh_names[k]);
    printf("\n");
    for (int i = 0; i < n; i++) {
        mt_cli_fmt_bytes(w, sizeof(w), lp[i].activation_bytes);
        printf("%-20s %-20s %-16s %12s", lp[i].name, lp[i].type, lp[i].shape, w);
        for (int k = 0; k < s->mesh_ndims; k++) {
            mt_cli_fmt_bytes(w, sizeof(w), lp[i].comm_bytes[k]);
            printf(" %12s", lp[i].comm_bytes[k] ? w : "-");
        }
        printf("\n");
    }
    printf("(activations: a layer's outputs, input gradients and scratch it keeps on one device "
           "for its\n local batch; the work area the layers share is in the total above; per "
           "mesh dim: what its\n own collectives move per step; the gradient allreduce and FSDP "
           "gathers are in the totals above)\n");
}

int cmd_plan(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"offline", no_argument, NULL, 'o'},
        {"layers", no_argument, NULL, 'l'},
        {"mesh", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    mt_jobspec_opts jo = MT_JOBSPEC_OPTS_DEFAULTS;
    mt_jobspec_summary s;
    mt_err err = MT_ERR_INIT;
    char *spec = NULL, w[32], o[32], base[4096];
    size_t len;
    int offline = 0, c, n_layers = 0;
    mt_spmd_layer_plan *lp = NULL;

    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'o') {
            offline = 1;
        } else if (c == 'l') {
            if (lp == NULL && (lp = mt_calloc(256, sizeof(*lp))) == NULL) {
                mt_err_set(&err, MT_RESOURCE_EXHAUSTED, "plan: out of memory");
                return mt_cli_fail(&err);
            }
            jo.layers = lp;
            jo.n_layers = &n_layers;
        } else if (c == 'm') {
            jo.mesh = optarg;
        } else if (c == 'h') {
            mt_free(lp);
            printf("usage: meshtrain plan JOB.json [--offline] [--mesh SPEC] "
                   "[--layers]\n\nValidate a job "
                   "spec exactly as submit and train --local do, without running it;\nprint what "
                   "each device holds and communicates per step and which devices the\njob would "
                   "use now.\n\n  --offline   do not ask the coordinator which devices are "
                   "free\n  --mesh SPEC plan for this mesh instead of the spec's "
                   "(\"batch=4,model=2\")\n  --layers    also one line per layer: its output "
                   "shape, buffers and\n              collective bytes per mesh dim\n");
            return MT_EXIT_OK;
        } else {
            mt_free(lp);
            return mt_cli_usage_error("plan", "unknown option");
        }
    }
    if (optind + 1 != argc) {
        mt_free(lp);
        return mt_cli_usage_error("plan", "expected one JOB.json argument");
    }
    if (mt_cli_read_file(argv[optind], &spec, &len, &err) != MT_OK) {
        mt_free(lp);
        return mt_cli_fail(&err);
    }
    mt_cli_spec_dir(argv[optind], base, sizeof(base));
    jo.base_dir = base;
    if (mt_jobspec_validate_opts(spec, len, &jo, &s, &err) != MT_OK) {
        mt_free(spec);
        mt_free(lp);
        return mt_cli_fail(&err);
    }
    mt_free(spec);
    printf("spec      %s%s%s: valid\n", argv[optind], s.name[0] ? " - " : "", s.name);
    printf("mesh      %s (%d devices)\n", s.mesh_text, s.n_devices);
    printf("batch     %llu global", (unsigned long long)s.batch_size);
    if (s.total_steps)
        printf(", %llu steps", (unsigned long long)s.total_steps);
    if (s.steps_per_epoch)
        printf(" (%llu per epoch over %llu examples)", (unsigned long long)s.steps_per_epoch,
               (unsigned long long)s.train_examples);
    if (s.repro_leaves > 0) {
        printf("\nrepro     mesh_invariant: %u leaves of %llu examples; batch dimension sizes that "
               "keep the bits:",
               s.repro_leaves, (unsigned long long)(s.batch_size / s.repro_leaves));
        for (uint32_t k = 1; k <= s.repro_leaves; k *= 2)
            printf("%s %u", k > 1 ? "," : "", k);
        printf("; other dims: a dense or conv2d kernel axis (conv2d: filters or input channels) "
               "split over a power of two dividing its leaves (a width's largest power-of-two "
               "divisor, at most 8)");
    }
    printf("\nmodel     %zu parameters, %llu elements\n", s.n_params,
           (unsigned long long)s.param_elements);
    mt_cli_fmt_bytes(w, sizeof(w), s.weight_bytes_per_device);
    mt_cli_fmt_bytes(o, sizeof(o), s.optimizer_bytes_per_device);
    printf("per device  weights %s, optimizer state %s", w, o);
    if (s.gathered_bytes_per_device > 0) {
        mt_cli_fmt_bytes(w, sizeof(w), s.gathered_bytes_per_device);
        printf(", FSDP working copies %s", w);
    }
    mt_cli_fmt_bytes(w, sizeof(w), s.activation_bytes_per_device);
    printf(", activations %s (the largest device", w);
    if (s.work_bytes_per_device > 0) {
        mt_cli_fmt_bytes(w, sizeof(w), s.work_bytes_per_device);
        printf("; %s of it a work area the layers share", w);
    }
    printf(")\n");
    printf("per step    to collectives, per device:");
    for (int k = 0; k < s.mesh_ndims; k++) {
        mt_cli_fmt_bytes(w, sizeof(w), s.comm_bytes_per_step[k]);
        printf("%s %s %s", k ? "," : "", s.mesh_names[k], w);
    }
    printf("\n");
    if (s.halo_bytes_per_step > 0 && s.halo_dim >= 0 && s.halo_dim < s.mesh_ndims) {
        mt_cli_fmt_bytes(w, sizeof(w), s.halo_bytes_per_step);
        printf("halo        height sharded over %s: %s sent per device per step in halo rows "
               "(forward and\n            backward; part of the %s figure)\n",
               s.mesh_names[s.halo_dim], w, s.mesh_names[s.halo_dim]);
    }
    if (s.ckpt_every_steps)
        printf("checkpoints every %u steps, keep %u\n", s.ckpt_every_steps, s.ckpt_keep);
    printf("restarts  at most %u\n", s.max_restarts);
    if (lp != NULL)
        print_layers(&s, lp, n_layers);
    mt_free(lp);
    if (!offline)
        print_devices_now(g, &s);
    return MT_EXIT_OK;
}
