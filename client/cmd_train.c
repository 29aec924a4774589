/* SPDX-License-Identifier: MIT */
/*
 * cmd_train.c — `meshtrain train --local JOB.json [--mesh M] [--save DIR] [--resume CKPT]
 * [--epochs N] [--steps N] [--json] [--log-every S] [--data-root DIR]...`: checks that the spec's
 * data files lie under the data roots (core/pathsafe; default: the current directory and
 * /usr/share/datasets), then trains the job spec in this process with the one training entry
 * point (mt_spmd_train; a spec without a mesh is a one-device mesh) and prints a Keras-Progbar
 * line per epoch (updated in place with \r on a terminal), or with --json one JSON object per
 * epoch and a final one, each with the state "digest", and a {"step", "digest"} line for each
 * digest taken within an epoch (digest_every, checkpoints; docs/reproducibility.md).
 * Exit codes (cli.h): 0 ok, 2 usage, 4 invalid spec or data, 1 other failures.
 */
#include "client/cli.h"
#include "client/jobs_util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "client/progress.h"
#include "clock/mt_clock.h"
#include "jobspec/mt_jobspec.h"
#include "model/mt_model.h"
#include "pathsafe/mt_pathsafe.h"
#include "spmd/mt_spmd.h"
#include "train/mt_train.h"

typedef struct train_out {
    bool json;
    bool tty;
    int64_t digest_step;        /* step of the digest not printed yet, or -1 */
    char digest[MT_DIGEST_HEX]; /* that digest; after the run: the last one */
    bool has_digest;            /* some digest was taken */
    double last_draw;           /* epoch_seconds of the last in-place redraw */
    mt_cli_progress prog;       /* the line (client/progress.h) */
} train_out;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: meshtrain train --local JOB.json [--mesh M] [--save DIR] [--resume CKPT]\n"
            "                       [--epochs N] [--steps N] [--json] [--log-every S]\n"
            "                       [--data-root DIR]...\n\n"
            "Train the job spec JOB.json in this process; mesh devices run as threads.\n\n"
            "  --local         run here (required in this build)\n"
            "  --mesh M        override the spec's mesh, e.g. \"batch=4,model=2\"\n"
            "  --save DIR      write checkpoints (ckpt-<step>.mtc) to DIR: every\n"
            "                  checkpoint.every_steps steps and at the end\n"
            "  --resume CKPT   continue from a checkpoint written on any mesh\n"
            "  --epochs N      override the spec's epochs\n"
            "  --steps N       stop after N steps in total\n"
            "  --json          one JSON object per epoch, then a final one (each with the\n"
            "                  state \"digest\"), and {\"step\":N,\"digest\":\"...\"} lines for\n"
            "                  the spec's digest_every and checkpoints within an epoch\n"
            "  --log-every S   stdout not a terminal: a line per epoch and at most one\n"
            "                  progress line every S seconds (default 30; 0: every update)\n"
            "  --data-root DIR the spec's data files must lie under DIR (repeatable;\n"
            "                  default: the current directory and " MT_PATHSAFE_DEFAULT_DATASETS
            ")\n"
            "  -h, --help      this help\n"
            "The job spec format is described in docs/job-spec.md.\n");
}

/* The Progbar line, fitted to the terminal (client/progress.h); off a terminal, a line per epoch
 * and a progress line at most every --log-every seconds (30 s by default). */
static void progbar(train_out *o, const mt_train_progress *p, bool end)
{
    char head[64], tail[512];
    double ms = p->epoch_step > 0 ? p->epoch_seconds * 1e3 / (double)p->epoch_step : 0.0;
    int k;
    size_t at;

    snprintf(head, sizeof(head), "Epoch %lld/%lld", (long long)p->epoch, (long long)p->epochs);
    k = snprintf(tail, sizeof(tail), " - %.0fs %.0fms/step", p->epoch_seconds, ms);
    at = k > 0 ? (size_t)k : 0;
    /* Keras's names: loss, accuracy, ...; val_loss, ...; test_loss, ... (core/loss) */
    at += mt_metrics_format(&p->train, "", tail + at, sizeof(tail) - at);
    if (p->has_val)
        at += mt_metrics_format(&p->val, "val_", tail + at, sizeof(tail) - at);
    if (end && p->has_test)
        mt_metrics_format(&p->test, "test_", tail + at, sizeof(tail) - at);
    if (end || mt_cli_progress_due(&o->prog, mt_clock_mono_ms()))
        mt_cli_progress_close(&o->prog, head, p->epoch_step, p->epoch_steps, tail,
                              mt_clock_mono_ms());
    else
        mt_cli_progress_draw(&o->prog, head, p->epoch_step, p->epoch_steps, tail);
}

/* `,"<prefix>loss":x,"<prefix><metric>":y...` of m. */
static void json_metrics(const mt_metrics *m, const char *prefix)
{
    printf(",\"%sloss\":%.6g", prefix, m->loss);
    for (int k = 0; k < MT_METRIC_COUNT; k++)
        if (m->mask & (1u << k))
            printf(",\"%s%s\":%.6g", prefix, mt_metric_name((mt_metric_kind)k), m->value[k]);
}

static mt_code on_progress(void *ctx, const mt_train_progress *p)
{
    train_out *o = ctx;

    if (o->json) {
        bool mine = o->digest_step == p->step; /* the digest of this step is pending */
        if (p->event == MT_TRAIN_STEP && mine && p->epoch_step < p->epoch_steps) {
            printf("{\"step\":%lld,\"digest\":\"%s\"}\n", (long long)p->step, o->digest);
            o->digest_step = -1; /* not an epoch end: a line of its own */
            fflush(stdout);
        }
        if (p->event == MT_TRAIN_STEP && p->has_val && p->epoch_step < p->epoch_steps) {
            printf("{\"step\":%lld", (long long)p->step); /* a validation within an epoch */
            json_metrics(&p->val, "val_");
            printf("}\n");
            fflush(stdout);
        }
        if (p->event == MT_TRAIN_EPOCH_END) {
            printf("{\"epoch\":%lld,\"step\":%lld", (long long)p->epoch, (long long)p->step);
            json_metrics(&p->train, "");
            if (p->has_val)
                json_metrics(&p->val, "val_");
            if (p->has_test)
                json_metrics(&p->test, "test_");
            printf(",\"examples_per_sec\":%.1f%s%s%s}\n", p->examples_per_sec,
                   mine ? ",\"digest\":\"" : "", mine ? o->digest : "", mine ? "\"" : "");
            o->digest_step = -1;
            fflush(stdout);
        }
        return MT_OK;
    }
    if (p->event == MT_TRAIN_EPOCH_END) {
        progbar(o, p, true);
        o->last_draw = 0.0;
    } else if (!o->tty || p->epoch_seconds - o->last_draw >= 0.1 || p->epoch_step == 1) {
        progbar(o, p, false);
        o->last_draw = p->epoch_seconds;
    }
    return MT_OK;
}

/* The last line of --json: steps, the last validation and test results, throughput, early
 * stopping, the best checkpoint's step, the digest. */
static void print_final_json(const mt_train_result *res, const train_out *out)
{
    printf("{\"final\":true,\"steps\":%lld", (long long)res->steps);
    if (res->has_val)
        json_metrics(&res->val, "val_");
    if (res->has_test)
        json_metrics(&res->test, "test_");
    printf(",\"examples_per_sec\":%.1f", res->examples_per_sec);
    if (res->stopped_early)
        printf(",\"stopped_early\":true");
    if (res->best_step > 0)
        printf(",\"best_step\":%lld", (long long)res->best_step);
    if (out->has_digest)
        printf(",\"digest\":\"%s\"", out->digest);
    printf("}\n");
}

/* Text: "Early stopping: ..." when it stopped the run, then the last validation and test results
 * ("Validation loss: 0.41 - val accuracy: 0.88", "Test loss: 0.39 - test accuracy: 0.86 - N
 * examples/s"). */
static void print_final_text(const mt_validation_spec *v, const mt_train_result *res)
{
    static const char *const what[2] = {"Validation", "Test"};
    const mt_metrics *m[2] = {res->has_val ? &res->val : NULL, res->has_test ? &res->test : NULL};

    if (res->stopped_early)
        printf("Early stopping: %s did not improve by more than %g for %lld evaluation%s "
               "(stopped at step %lld)\n",
               v->stop.name, v->stop.min_delta, (long long)(v->patience ? v->patience : 1),
               v->patience == 1 ? "" : "s", (long long)res->steps);
    if (res->best_step > 0)
        printf("Best checkpoint: step %lld, %s %.4f\n", (long long)res->best_step, v->best.name,
               res->best_value);
    for (int s = 0; s < 2; s++) {
        if (m[s] == NULL)
            continue;
        printf("%s loss: %.4f", what[s], m[s]->loss);
        for (int k = 0; k < MT_METRIC_COUNT; k++)
            if (m[s]->mask & (1u << k))
                printf(" - %s %s: %.4f", s == 0 ? "val" : "test", mt_metric_name((mt_metric_kind)k),
                       m[s]->value[k]);
        if (s == 1)
            printf(" - %.0f examples/s", res->examples_per_sec);
        printf("\n");
    }
    if (m[1] == NULL)
        printf("%.0f examples/s\n", res->examples_per_sec);
}

/* --json: the state digest of a step (docs/reproducibility.md), held until that step's progress
 * event says whether it ends an epoch (then it goes into the epoch line). */
static mt_code on_digest(void *ctx, int64_t step, const mt_digest *root, mt_err *err)
{
    train_out *o = ctx;
    (void)err;
    o->digest_step = step;
    o->has_digest = true;
    mt_digest_hex(root, o->digest);
    return MT_OK;
}

static bool parse_count(const char *s, int64_t *out)
{
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || v <= 0)
        return false;
    *out = v;
    return true;
}

typedef struct train_args {
    const char *mesh, *save, *resume;
    const char *roots[MT_PATHSAFE_MAX_ROOTS]; /* --data-root values */
    int n_roots;
} train_args;

/* Every data file the spec names must lie under a data root (core/pathsafe). */
static mt_code check_data_roots(const mt_jobspec *js, const char *base, const train_args *a,
                                mt_err *err)
{
    mt_pathsafe *roots = NULL;
    mt_code rc = mt_pathsafe_new_roots(a->roots, a->n_roots, &roots, err);

    if (rc == MT_OK)
        rc = mt_pathsafe_check_job_spec(roots, js->model, err);
    if (rc == MT_OK && strcmp(js->model->dataset.format, "idx") != 0)
        rc = mt_pathsafe_check_dataset(roots, js->dataset, base, err);
    mt_pathsafe_free(roots);
    return rc;
}

/* Train on the mesh of --mesh or the spec (batch=1 without either): mt_spmd_train. */
static mt_code run(const mt_jobspec *js, const char *base, const train_args *a,
                   const mt_train_options *topt, train_out *out, mt_train_result *res, mt_err *err)
{
    mt_spmd_run_opts ro = MT_SPMD_RUN_OPTS_DEFAULTS;
    mt_spmd_job job = {js->model, js->dataset, base, js->cfg.mesh, js->cfg.layouts, NULL};
    mt_mesh *override = NULL;
    mt_code rc = MT_OK;

    if (a->mesh != NULL || js->cfg.mesh == NULL)
        rc = mt_mesh_parse(a->mesh != NULL ? a->mesh : "batch=1", NULL, 0, &override, err);
    if (rc != MT_OK)
        return rc;
    if (override != NULL)
        job.mesh = override;
    ro.epochs = topt->epochs;
    ro.steps = topt->steps;
    ro.save_dir = a->save;
    ro.ckpt_every = js->cfg.ckpt_every;
    ro.ckpt_keep = js->cfg.ckpt_keep;
    ro.resume = a->resume;
    ro.spec_json = js->json;
    if (out->json)
        ro.on_digest = on_digest;
    rc = mt_spmd_train(&job, &ro, on_progress, out, res, err);
    mt_mesh_free(override);
    return rc;
}

/* The spec as `plan` and SubmitJob validate it (core/jobspec), from the spec's folder and with
 * --mesh: whatever they refuse, training refuses first with the same message. */
static mt_code validate(const mt_jobspec *js, const char *base, const char *mesh, mt_err *err)
{
    mt_jobspec_opts jo = MT_JOBSPEC_OPTS_DEFAULTS;
    mt_jobspec_summary sum;

    jo.base_dir = base;
    jo.mesh = mesh;
    return mt_jobspec_check(js, &jo, &sum, err);
}

int cmd_train(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"local", no_argument, NULL, 'L'},
        {"epochs", required_argument, NULL, 'e'},
        {"steps", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"mesh", required_argument, NULL, 'm'},
        {"save", required_argument, NULL, 'S'},
        {"resume", required_argument, NULL, 'r'},
        {"data-root", required_argument, NULL, 'R'},
        {"log-every", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int64_t log_every_ms = -1; /* the default */
    mt_train_options topt = MT_TRAIN_OPTIONS_DEFAULTS;
    train_out out = {0};
    train_args ta = {NULL, NULL, NULL, {NULL}, 0};
    mt_err err = MT_ERR_INIT;
    mt_train_result res;
    mt_validation_spec vspec; /* the spec's "validation", for the final lines */
    mt_jobspec *js = NULL;
    char base[4096];
    bool local = false;
    mt_code rc;
    int c;

    (void)g;
    memset(&vspec, 0, sizeof(vspec));
    optind = 0; /* glibc: full re-initialisation, so options after JOB.json are permuted too */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'L':
            local = true;
            break;
        case 'e':
            if (!parse_count(optarg, &topt.epochs))
                return mt_cli_usage_error("train", "--epochs '%s': expected a positive integer",
                                          optarg);
            break;
        case 's':
            if (!parse_count(optarg, &topt.steps))
                return mt_cli_usage_error("train", "--steps '%s': expected a positive integer",
                                          optarg);
            break;
        case 'j':
            out.json = true;
            break;
        case 'l':
            if (!mt_cli_parse_log_every(optarg, &log_every_ms))
                return mt_cli_usage_error("train", "--log-every '%s': expected seconds >= 0",
                                          optarg);
            break;
        case 'm': {
            mt_mesh *m = NULL;
            if (mt_mesh_parse(optarg, NULL, 0, &m, &err) != MT_OK)
                return mt_cli_usage_error("train", "--mesh: %s", err.msg);
            mt_mesh_free(m);
            ta.mesh = optarg;
            break;
        }
        case 'S':
            ta.save = optarg;
            break;
        case 'R':
            if (ta.n_roots == MT_PATHSAFE_MAX_ROOTS)
                return mt_cli_usage_error("train", "at most %d --data-root options",
                                          MT_PATHSAFE_MAX_ROOTS);
            ta.roots[ta.n_roots++] = optarg;
            break;
        case 'r':
            ta.resume = optarg;
            break;
        case 'h':
            usage(stdout);
            return MT_EXIT_OK;
        default:
            return mt_cli_usage_error("train", "unknown option");
        }
    }
    if (optind != argc - 1)
        return mt_cli_usage_error("train", "expected exactly one JOB.json argument");
    if (!local)
        return mt_cli_usage_error("train", "only --local training is available in this build");
    out.tty = isatty(STDOUT_FILENO) != 0;
    out.digest_step = -1;
    mt_cli_progress_init(&out.prog, stdout, log_every_ms, mt_clock_mono_ms());
    rc = mt_jobspec_load(argv[optind], &js, &err); /* the one parse of the spec */
    mt_cli_spec_dir(argv[optind], base, sizeof(base));
    if (rc == MT_OK) /* before anything opens a data file */
        rc = check_data_roots(js, base, &ta, &err);
    if (rc == MT_OK)
        rc = validate(js, base, ta.mesh, &err);
    if (rc == MT_OK)
        rc = run(js, base, &ta, &topt, &out, &res, &err);
    if (js != NULL)
        vspec = js->model->validation;
    mt_jobspec_free(js);
    if (rc != MT_OK)
        return mt_cli_fail(&err);
    if (out.json)
        print_final_json(&res, &out);
    else
        print_final_text(&vspec, &res);
    return MT_EXIT_OK;
}
