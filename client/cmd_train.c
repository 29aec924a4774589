/* SPDX-License-Identifier: MIT */
/*
 * cmd_train.c — `meshtrain train --local JOB.json [--epochs N] [--steps N] [--json]
 * [--data-root DIR]...`: checks that the spec's files lie under the data roots (core/pathsafe;
 * default: the current directory and /usr/share/datasets), then trains the job spec in this
 * process (core/train) and prints a Keras-Progbar line per epoch (updated in
 * place with \r on a terminal), or with --json one JSON object per epoch and a final one.
 * Exit codes (cli.h): 0 ok, 2 usage, 4 invalid spec or data, 1 other failures.
 */
#include "client/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/mt_model.h"
#include "pathsafe/mt_pathsafe.h"
#include "train/mt_train.h"

typedef struct train_out {
    bool json;
    bool tty;
    double last_draw; /* epoch_seconds of the last in-place redraw */
} train_out;

static void usage(FILE *f)
{
    fprintf(f, "usage: meshtrain train --local JOB.json [--epochs N] [--steps N] [--json]\n"
               "                       [--data-root DIR]...\n\n"
               "Train the job spec JOB.json in this process on one device.\n\n"
               "  --local      run here (required in this build)\n"
               "  --epochs N   override the spec's epochs\n"
               "  --steps N    stop after N steps in total\n"
               "  --json       one JSON object per epoch, then a final one\n"
               "  --data-root DIR  the spec's files must lie under DIR (repeatable; default: the\n"
               "               current directory and " MT_PATHSAFE_DEFAULT_DATASETS ")\n"
               "  -h, --help   this help\n"
               "The job spec format is described in docs/job-spec.md.\n");
}

static void progbar(const mt_train_progress *p, bool end)
{
    char bar[31];
    int64_t total = p->epoch_steps > 0 ? p->epoch_steps : 1;
    int done = (int)(30 * p->epoch_step / total);
    double ms = p->epoch_step > 0 ? p->epoch_seconds * 1e3 / (double)p->epoch_step : 0.0;

    for (int i = 0; i < 30; i++)
        bar[i] = i < done ? '=' : '.';
    if (done < 30)
        bar[done] = '>';
    bar[30] = '\0';
    printf("Epoch %lld/%lld  %lld/%lld [%s] - %.0fs %.0fms/step - loss: %.4f - accuracy: %.4f",
           (long long)p->epoch, (long long)p->epochs, (long long)p->epoch_step,
           (long long)p->epoch_steps, bar, p->epoch_seconds, ms, p->loss, p->accuracy);
    if (end)
        printf(" - test_loss: %.4f - test_accuracy: %.4f\n", p->test_loss, p->test_accuracy);
}

static mt_code on_progress(void *ctx, const mt_train_progress *p)
{
    train_out *o = ctx;

    if (o->json) {
        if (p->event == MT_TRAIN_EPOCH_END) {
            printf("{\"epoch\":%lld,\"step\":%lld,\"loss\":%.6g,\"accuracy\":%.6g,"
                   "\"test_loss\":%.6g,\"test_accuracy\":%.6g,\"examples_per_sec\":%.1f}\n",
                   (long long)p->epoch, (long long)p->step, p->loss, p->accuracy, p->test_loss,
                   p->test_accuracy, p->examples_per_sec);
            fflush(stdout);
        }
        return MT_OK;
    }
    if (p->event == MT_TRAIN_EPOCH_END) {
        if (o->tty)
            printf("\r");
        progbar(p, true);
        fflush(stdout);
        o->last_draw = 0.0;
    } else if (o->tty && (p->epoch_seconds - o->last_draw >= 0.1 || p->epoch_step == 1)) {
        printf("\r");
        progbar(p, false);
        fflush(stdout);
        o->last_draw = p->epoch_seconds;
    }
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

int cmd_train(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"local", no_argument, NULL, 'L'},
        {"epochs", required_argument, NULL, 'e'},
        {"steps", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"data-root", required_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *root_args[MT_PATHSAFE_MAX_ROOTS];
    int n_roots = 0;
    mt_pathsafe *roots = NULL;
    mt_train_options topt = MT_TRAIN_OPTIONS_DEFAULTS;
    train_out out = {false, false, 0.0};
    mt_err err = MT_ERR_INIT;
    mt_train_result res;
    mt_job_spec *spec = NULL;
    bool local = false;
    mt_code rc;
    int c;

    (void)g;
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
        case 'R':
            if (n_roots == MT_PATHSAFE_MAX_ROOTS)
                return mt_cli_usage_error("train", "at most %d --data-root options",
                                          MT_PATHSAFE_MAX_ROOTS);
            root_args[n_roots++] = optarg;
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
    rc = mt_pathsafe_new_roots(root_args, n_roots, &roots, &err);
    if (rc == MT_OK)
        rc = mt_job_spec_load(argv[optind], &spec, &err);
    if (rc == MT_OK) /* the spec's files must lie under a data root */
        rc = mt_pathsafe_check_job_spec(roots, spec, &err);
    mt_pathsafe_free(roots);
    if (rc == MT_OK)
        rc = mt_train_run(spec, &topt, on_progress, &out, &res, &err);
    mt_job_spec_free(spec);
    if (rc != MT_OK)
        return mt_cli_fail(&err);
    if (out.json)
        printf("{\"final\":true,\"steps\":%lld,\"test_loss\":%.6g,\"test_accuracy\":%.6g,"
               "\"examples_per_sec\":%.1f}\n",
               (long long)res.steps, res.test_loss, res.test_accuracy, res.examples_per_sec);
    else
        printf("Test loss: %.4f - test accuracy: %.4f - %.0f examples/s\n", res.test_loss,
               res.test_accuracy, res.examples_per_sec);
    return MT_EXIT_OK;
}
