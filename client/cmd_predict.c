/* SPDX-License-Identifier: MIT */
/*
 * cmd_predict.c — `meshtrain predict MODEL.safetensors --spec JOB.json --input IDX_OR_CSV
 * [--labels IDX] [--top-k K] [--limit N] [--json]`: run an exported model on examples.
 *
 * The model is rebuilt from the job spec (core/model, one device), every parameter is read from
 * the safetensors file by name (F32, shapes must match), and the inputs are run through the
 * inference-mode forward pass in batches; softmax gives the probabilities. Input: an IDX image
 * file (gzipped or plain, pixels scaled to [0,1] as in training) or a CSV file of one example per
 * line with exactly the model's input size of comma-separated numbers. With --labels (IDX) the
 * accuracy over the examples is printed too. Exit codes (cli.h): 0 ok, 2 usage, 4 bad input
 * (missing file, wrong shapes, not a model of that spec).
 * Tests: tests/integration/test_e2e.sh.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "alloc/mt_alloc.h"
#include "client/cli.h"
#include "client/jobs_util.h"
#include "data/mt_idx.h"
#include "model/mt_model.h"

#define PREDICT_BATCH 256

static void usage(FILE *out)
{
    fprintf(out,
            "usage: meshtrain predict MODEL.safetensors --spec JOB.json --input IDX_OR_CSV\n"
            "                         [--labels IDX] [--top-k K] [--limit N] [--json]\n\n"
            "Run an exported model (meshtrain export) on examples and print the top-K classes\n"
            "with their probabilities, one line per example.\n\n"
            "  --spec F      the job spec the model was trained with (builds the model)\n"
            "  --input F     IDX images (.gz or plain) or CSV, one example per line\n"
            "  --labels F    IDX labels of the inputs: also print the accuracy\n"
            "  --top-k K     classes per example (default 1)\n"
            "  --limit N     print at most N examples (default all; accuracy uses all)\n"
            "  --json        one JSON object per example\n");
}

/* Load every parameter of m from the safetensors file at path. */
static mt_code load_safetensors(mt_model *m, const char *path, mt_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    uint64_t hlen = 0;
    cJSON *hdr = NULL;
    mt_code rc = mt_cli_read_file(path, &buf, &len, err);

    if (rc != MT_OK)
        return rc;
    for (int i = 0; i < 8 && len >= 8; i++)
        hlen |= (uint64_t)(unsigned char)buf[i] << (8 * i);
    if (len < 8 || hlen > len - 8 || (hdr = cJSON_ParseWithLength(buf + 8, hlen)) == NULL) {
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a safetensors file", path);
        goto done;
    }
    for (size_t i = 0; i < mt_model_param_count(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(hdr, p->name);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        double a, b;
        bool ok = t != NULL && cJSON_IsString(dt) && strcmp(dt->valuestring, "F32") == 0 &&
                  cJSON_GetArraySize(sh) == p->rank && cJSON_GetArraySize(of) == 2;
        for (int k = 0; ok && k < p->rank; k++)
            ok = cJSON_GetArrayItem(sh, k)->valuedouble == (double)p->shape[k];
        if (!ok) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                            "%s: no F32 tensor '%s' of the spec's shape (another model?)", path,
                            p->name);
            goto done;
        }
        a = cJSON_GetArrayItem(of, 0)->valuedouble;
        b = cJSON_GetArrayItem(of, 1)->valuedouble;
        if (a < 0 || b - a != (double)(p->size * sizeof(float)) || b > (double)(len - 8 - hlen)) {
            rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s: tensor '%s' has bad offsets", path,
                            p->name);
            goto done;
        }
        memcpy(p->value, buf + 8 + hlen + (size_t)a, p->size * sizeof(float));
    }
done:
    cJSON_Delete(hdr);
    mt_free(buf);
    return rc;
}

/* CSV: one example per line, exactly dim numbers. */
static mt_code load_csv(const char *path, size_t dim, float **x, size_t *n, mt_err *err)
{
    char *buf = NULL, *line, *next;
    size_t len = 0, cap = 0, rows = 0;
    float *out = NULL;
    mt_code rc = mt_cli_read_file(path, &buf, &len, err);

    if (rc != MT_OK)
        return rc;
    for (line = buf; rc == MT_OK && line != NULL && *line != '\0'; line = next) {
        char *p = line, *end;
        size_t k = 0;
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        if (line[strspn(line, " \t\r")] == '\0')
            continue;
        if (rows == cap) {
            float *grown = mt_realloc(out, (cap = cap * 2 + 64) * dim * sizeof(float));
            if (grown == NULL) {
                rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
                break;
            }
            out = grown;
        }
        for (; k < dim; k++) {
            float v = strtof(p, &end);
            if (end == p)
                break;
            out[rows * dim + k] = v;
            p = end + strspn(end, " \t\r");
            if (*p == ',')
                p++;
        }
        if (k != dim || p[strspn(p, " \t\r")] != '\0')
            rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                            "%s: line %zu: expected %zu comma-separated numbers", path, rows + 1,
                            dim);
        rows++;
    }
    mt_free(buf);
    if (rc != MT_OK) {
        mt_free(out);
        return rc;
    }
    *x = out;
    *n = rows;
    return MT_OK;
}

static mt_code load_input(const char *path, size_t dim, float **x, size_t *n, mt_err *err)
{
    size_t len = strlen(path), h, w, c;
    mt_idx idx;
    mt_code rc;

    if (len > 4 && strcmp(path + len - 4, ".csv") == 0)
        return load_csv(path, dim, x, n, err);
    if ((rc = mt_idx_read_file(path, &idx, err)) != MT_OK)
        return rc;
    rc = mt_idx_to_images(&idx, path, x, n, &h, &w, &c, err);
    mt_idx_fini(&idx);
    if (rc == MT_OK && h * w * c != dim) {
        mt_free(*x);
        *x = NULL;
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: examples of %zu values, the model takes %zu", path, h * w * c, dim);
    }
    return rc;
}

typedef struct predict_args {
    const char *model, *spec, *input, *labels;
    long top_k, limit;
    bool json;
} predict_args;

static void print_example(const predict_args *a, size_t i, const float *logits, size_t k,
                          const int32_t *label)
{
    double mx = -INFINITY, sum = 0.0;
    bool used[4096] = {false};
    long top = a->top_k < (long)k ? a->top_k : (long)k;

    for (size_t j = 0; j < k; j++)
        mx = logits[j] > mx ? logits[j] : mx;
    for (size_t j = 0; j < k; j++)
        sum += exp(logits[j] - mx);
    printf(a->json ? "{\"example\": %zu, \"top\": [" : "%zu:", i);
    for (long t = 0; t < top; t++) {
        size_t best = 0;
        bool found = false;
        for (size_t j = 0; j < k && j < 4096; j++)
            if (!used[j] && (!found || logits[j] > logits[best]))
                best = j, found = true;
        used[best] = true;
        if (a->json)
            printf("%s{\"class\": %zu, \"probability\": %.6f}", t ? ", " : "", best,
                   exp(logits[best] - mx) / sum);
        else
            printf(" %zu (%.4f)", best, exp(logits[best] - mx) / sum);
    }
    if (a->json)
        printf(label ? "], \"label\": %d}\n" : "]}\n", label ? *label : 0);
    else if (label != NULL)
        printf("  label %d\n", *label);
    else
        printf("\n");
}

static int run(const predict_args *a)
{
    mt_err err = MT_ERR_INIT;
    mt_job_spec *spec = NULL;
    mt_model *m = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    size_t n = 0, ny = 0, dim = 1, correct = 0, in_shape[3] = {0, 0, 0};
    int in_rank, code = MT_EXIT_OK;
    mt_code rc = mt_job_spec_load(a->spec, &spec, &err);

    if (rc != MT_OK)
        goto done;
    in_rank = spec->input_rank;
    memcpy(in_shape, spec->input_shape, sizeof(in_shape));
    if (in_rank == 0) {
        rc = mt_err_set(&err, MT_INVALID_ARGUMENT, "%s: model.input_shape is required to predict",
                        a->spec);
        goto done;
    }
    for (int d = 0; d < in_rank; d++)
        dim *= in_shape[d];
    if ((rc = mt_model_new(spec, in_rank, in_shape, PREDICT_BATCH, &m, &err)) != MT_OK ||
        (rc = load_safetensors(m, a->model, &err)) != MT_OK ||
        (rc = load_input(a->input, dim, &x, &n, &err)) != MT_OK)
        goto done;
    if (a->labels != NULL) {
        mt_idx idx;
        if ((rc = mt_idx_read_file(a->labels, &idx, &err)) != MT_OK)
            goto done;
        rc = mt_idx_to_labels(&idx, a->labels, 0, &y, &ny, &err);
        mt_idx_fini(&idx);
        if (rc == MT_OK && ny != n)
            rc = mt_err_set(&err, MT_INVALID_ARGUMENT, "%s: %zu labels for %zu examples", a->labels,
                            ny, n);
        if (rc != MT_OK)
            goto done;
    }
    for (size_t i = 0; i < n; i += PREDICT_BATCH) {
        size_t b = n - i < PREDICT_BATCH ? n - i : PREDICT_BATCH, k = mt_model_num_classes(m);
        const float *logits;
        rc = mt_model_forward(m, x + i * dim, b, b, false, 0, i, NULL, &logits, &err);
        if (rc != MT_OK)
            goto done;
        for (size_t e = 0; e < b; e++) {
            const float *l = logits + e * k;
            size_t best = 0;
            for (size_t j = 1; j < k; j++)
                best = l[j] > l[best] ? j : best;
            if (y != NULL && (int32_t)best == y[i + e])
                correct++;
            if (a->limit < 0 || (long)(i + e) < a->limit)
                print_example(a, i + e, l, k, y != NULL ? &y[i + e] : NULL);
        }
    }
    if (y != NULL && !a->json)
        printf("accuracy %.4f (%zu of %zu)\n", n ? (double)correct / (double)n : 0.0, correct, n);
done:
    if (rc != MT_OK)
        code = mt_cli_fail(&err);
    mt_free(x);
    mt_free(y);
    mt_model_free(m);
    mt_job_spec_free(spec);
    return code;
}

int cmd_predict(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"spec", required_argument, NULL, 's'},   {"input", required_argument, NULL, 'i'},
        {"labels", required_argument, NULL, 'l'}, {"top-k", required_argument, NULL, 'k'},
        {"limit", required_argument, NULL, 'n'},  {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    predict_args a = {NULL, NULL, NULL, NULL, 1, -1, false};
    char *end;
    int c;

    (void)g;
    optind = 0; /* glibc: full re-initialisation, so options after MODEL are permuted too */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            a.spec = optarg;
            break;
        case 'i':
            a.input = optarg;
            break;
        case 'l':
            a.labels = optarg;
            break;
        case 'k':
        case 'n': {
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || v < (c == 'k' ? 1 : 0) || v > 1000000000)
                return mt_cli_usage_error("predict", "--%s '%s': expected a count",
                                          c == 'k' ? "top-k" : "limit", optarg);
            *(c == 'k' ? &a.top_k : &a.limit) = v;
            break;
        }
        case 'j':
            a.json = true;
            break;
        case 'h':
            usage(stdout);
            return MT_EXIT_OK;
        default:
            return mt_cli_usage_error("predict", "unknown option");
        }
    }
    if (optind + 1 != argc)
        return mt_cli_usage_error("predict", "expected one MODEL.safetensors argument");
    if (a.spec == NULL || a.input == NULL)
        return mt_cli_usage_error("predict", "--spec and --input are required");
    a.model = argv[optind];
    return run(&a);
}
