/* SPDX-License-Identifier: MIT */
/*
 * cmd_predict.c — `meshtrain predict MODEL.safetensors --spec JOB.json (--input FILE | --text S)
 * [--labels IDX] [--top-k K] [--limit N] [--json]`: run an exported model on examples.
 *
 * The model is rebuilt from the job spec (core/model, one device), every parameter is read from
 * the safetensors file by name (F32, shapes must match), and the inputs are run through the
 * inference-mode forward pass in batches; softmax gives the probabilities. Inputs, by kind:
 *   * an IDX image file (gzipped or plain, pixels scaled to [0,1] as in training);
 *   * a PNG or JPEG file (by content): decoded as the spec's image-folder dataset decodes (size,
 *     colour mode, scale, mean, std; core/data's mt_data_image_read) or, for other datasets, to
 *     the model's [H, W, 1 or 3] input scaled to [0, 1];
 *   * a CSV file: numbers only (one example per line, exactly the model's input size), or a
 *     header naming the columns: the spec's CSV feature columns are picked by name (any order,
 *     other columns and the label ignored, missing values as the spec says);
 *   * --text SENTENCE (repeatable) for TF-IDF text models: the vocabulary is the export's
 *     "meshtrain.tfidf" metadata when present, else refitted from the spec's training files (the
 *     fit is deterministic, so it is the training vocabulary; a note says so on stderr).
 * Classes print as names when the dataset has them (string labels, image folders): the export's
 * "meshtrain.class_names" metadata (a JSON list) when present, else fitted from the spec.
 * With --labels (IDX) the accuracy over the examples is printed too. Exit codes (cli.h): 0 ok,
 * 2 usage, 4 bad input (missing file, wrong shapes, not a model of that spec).
 * Tests: tests/integration/test_e2e.sh, tests/integration/test_predict_raw.sh.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "alloc/mt_alloc.h"
#include "client/cli.h"
#include "client/jobs_util.h"
#include "client/model_io.h"
#include "data/mt_data.h"
#include "data/mt_idx.h"
#include "model/mt_model.h"

#define PREDICT_BATCH 256

static void usage(FILE *out)
{
    fprintf(out,
            "usage: meshtrain predict MODEL.safetensors --spec JOB.json (--input F | --text S)\n"
            "                         [--labels IDX] [--top-k K] [--limit N] [--json]\n\n"
            "Run an exported model (meshtrain export) on examples and print the top-K classes\n"
            "with their probabilities, one line per example.\n\n"
            "  --spec F      the job spec the model was trained with (builds the model)\n"
            "  --input F     IDX images (.gz or plain), a PNG or JPEG image, or CSV: numbers\n"
            "                only, or a header naming the spec's feature columns\n"
            "  --text S      a sentence for a text (TF-IDF) model; repeat for several\n"
            "  --labels F    IDX labels of the inputs: also print the accuracy\n"
            "  --top-k K     classes per example (default 1)\n"
            "  --limit N     print at most N examples (default all; accuracy uses all)\n"
            "  --json        one JSON object per example\n");
}

/* What the export's "__metadata__" may carry for raw inputs (owned). */
typedef struct predict_meta {
    char *tfidf;             /* "meshtrain.tfidf": the vectorizer (mt_data_tfidf_save text) */
    mt_data_classes classes; /* "meshtrain.class_names": a JSON list of strings */
} predict_meta;

static void meta_fini(predict_meta *m)
{
    mt_free(m->tfidf);
    mt_data_classes_fini(&m->classes);
}

/* Copy the raw-input metadata of a safetensors "__metadata__" object (borrowed) into *m. */
static mt_code read_meta(const cJSON *md, const char *path, predict_meta *m, mt_err *err)
{
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(md, "meshtrain.tfidf");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(md, "meshtrain.class_names");
    cJSON *list = cJSON_IsString(cn) ? cJSON_Parse(cn->valuestring) : NULL;
    const cJSON *e;
    mt_code rc = MT_OK;

    if (cJSON_IsString(tf) && (m->tfidf = mt_strdup(tf->valuestring)) == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    if (cJSON_IsString(cn) && !cJSON_IsArray(list))
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "%s: metadata meshtrain.class_names is not a JSON list", path);
    cJSON_ArrayForEach(e, list)
    {
        char **nn = mt_realloc(m->classes.names, (m->classes.n + 1) * sizeof(char *));
        if (rc != MT_OK || !cJSON_IsString(e))
            break;
        if (nn == NULL || (nn[m->classes.n] = mt_strdup(e->valuestring)) == NULL) {
            if (nn != NULL)
                m->classes.names = nn;
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
            break;
        }
        m->classes.names = nn;
        m->classes.n++;
    }
    cJSON_Delete(list);
    return rc;
}

/* Load every parameter of m from the safetensors file at path, and its raw-input metadata. */
static mt_code load_safetensors(mt_model *m, const char *path, predict_meta *meta, mt_err *err)
{
    cJSON *md = NULL;
    mt_code rc = mt_cli_model_load(m, path, &md, err);

    if (rc == MT_OK)
        rc = read_meta(md, path, meta, err);
    cJSON_Delete(md);
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

typedef struct predict_args {
    const char *model, *spec, *input, *labels;
    const char *texts[64];
    size_t n_texts;
    long top_k, limit;
    bool json;
} predict_args;

/* Everything the input readers need: the model's input, the spec's dataset section. */
typedef struct predict_ctx {
    const predict_args *a;
    size_t dim;         /* the model's input size */
    int in_rank;        /* */
    size_t in_shape[3]; /* */
    mt_data_spec *ds;   /* owned; the spec's dataset section once parsed, or NULL */
    mt_code ds_rc;      /* its parse result (MT_OK, or why it is NULL) */
    mt_err ds_err;      /* */
    predict_meta meta;  /* owned */
} predict_ctx;

/* Parse the spec file's dataset section once (relative paths against the spec's folder). */
static const mt_data_spec *dataset_spec(predict_ctx *c)
{
    char *text = NULL, base[4096];
    size_t len = 0;
    cJSON *root;

    if (c->ds != NULL || c->ds_rc != MT_OK)
        return c->ds;
    c->ds_rc = mt_job_spec_read(c->a->spec, 1 << 24, &text, &len, &c->ds_err);
    if (c->ds_rc != MT_OK)
        return NULL;
    root = cJSON_ParseWithLength(text, len);
    mt_free(text);
    mt_cli_spec_dir(c->a->spec, base, sizeof(base));
    c->ds_rc = root == NULL
                   ? mt_err_set(&c->ds_err, MT_INVALID_ARGUMENT, "%s: not JSON", c->a->spec)
                   : mt_data_spec_parse(cJSON_GetObjectItemCaseSensitive(root, "dataset"),
                                        "dataset", base, &c->ds, &c->ds_err);
    cJSON_Delete(root);
    return c->ds;
}

/* A PNG or JPEG file: decoded as the spec's image folders are, else to the model's input. */
static mt_code load_image(predict_ctx *c, const char *path, float **x, size_t *n, mt_err *err)
{
    const mt_data_spec *ds = dataset_spec(c);
    mt_data_spec own;
    mt_code rc;

    if (ds == NULL || ds->format != MT_DATA_FORMAT_IMAGES) {
        if (c->in_rank != 3 || (c->in_shape[2] != 1 && c->in_shape[2] != 3))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: an image input needs a model whose input_shape is [height, "
                              "width, 1 or 3]",
                              path);
        memset(&own, 0, sizeof(own));
        own.format = MT_DATA_FORMAT_IMAGES;
        own.image_size[0] = c->in_shape[0];
        own.image_size[1] = c->in_shape[1];
        own.channels = c->in_shape[2];
        own.scale = 1.0f / 255.0f;
        own.std[0] = own.std[1] = own.std[2] = 1.0f;
        ds = &own;
    }
    if (ds->image_size[0] * ds->image_size[1] * ds->channels != c->dim)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: the dataset's images have %zu values, the model takes %zu", path,
                          ds->image_size[0] * ds->image_size[1] * ds->channels, c->dim);
    *x = mt_malloc(c->dim * sizeof(float));
    if (*x == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    rc = mt_data_image_read(ds, path, *x, err);
    if (rc != MT_OK) {
        mt_free(*x);
        *x = NULL;
        return rc;
    }
    *n = 1;
    return MT_OK;
}

/* Whether the first non-empty line of a CSV file names its columns (a field is not a number). */
static bool csv_has_header(const char *path)
{
    char line[4096], *p, *end;
    FILE *fp = fopen(path, "rb");
    bool named = false;

    while (fp != NULL && fgets(line, sizeof(line), fp) != NULL) {
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        for (p = line; !named;) {
            strtof(p, &end);
            end += strspn(end, " \t\r\n");
            named = end == p || (*end != ',' && *end != '\0');
            if (*end != ',')
                break;
            p = end + 1;
        }
        break;
    }
    if (fp != NULL)
        fclose(fp);
    return named;
}

/* A CSV file with a header: the spec's feature columns by name (or every column). */
static mt_code load_named_csv(predict_ctx *c, const char *path, float **x, size_t *n, mt_err *err)
{
    const mt_data_spec *ds = dataset_spec(c);
    mt_data_spec own;
    size_t d = 0;
    mt_code rc;

    if (ds == NULL || ds->format != MT_DATA_FORMAT_CSV) {
        memset(&own, 0, sizeof(own));
        own.header = true;
        own.delimiter = ',';
        own.scale = 1.0f;
        ds = &own;
    }
    rc = mt_data_csv_read_features(ds, path, x, n, &d, err);
    if (rc == MT_OK && d != c->dim) {
        mt_free(*x);
        *x = NULL;
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: %zu feature columns, the model takes %zu (give the spec's "
                          "dataset.feature_columns names)",
                          path, d, c->dim);
    }
    return rc;
}

/* --text: vectorize each sentence with the export's vocabulary or the refitted one. */
static mt_code load_texts(predict_ctx *c, float **x, size_t *n, mt_err *err)
{
    mt_data_tfidf *v = NULL;
    const mt_data_spec *ds;
    mt_code rc;

    if (c->meta.tfidf != NULL) {
        rc = mt_data_tfidf_load(c->meta.tfidf, strlen(c->meta.tfidf), &v, err);
    } else if ((ds = dataset_spec(c)) != NULL && ds->format == MT_DATA_FORMAT_TEXT) {
        fprintf(stderr, "meshtrain predict: the export carries no vocabulary; refitting it on "
                        "the spec's training files (deterministic: the training vocabulary)\n");
        rc = mt_data_tfidf_fit_spec(ds, &v, err);
    } else {
        return ds == NULL && c->ds_rc != MT_OK
                   ? mt_err_set(err, c->ds_rc, "%s", c->ds_err.msg)
                   : mt_err_set(err, MT_INVALID_ARGUMENT,
                                "--text needs a text model (dataset.format \"text\" in %s)",
                                c->a->spec);
    }
    if (rc == MT_OK && mt_data_tfidf_dim(v) != c->dim)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "the vocabulary has %zu features, the model takes %zu",
                        mt_data_tfidf_dim(v), c->dim);
    if (rc == MT_OK && (*x = mt_malloc(c->a->n_texts * c->dim * sizeof(float))) == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "predict: out of memory");
    for (size_t i = 0; rc == MT_OK && i < c->a->n_texts; i++)
        rc = mt_data_tfidf_transform(v, c->a->texts[i], strlen(c->a->texts[i]), *x + i * c->dim,
                                     err);
    if (rc == MT_OK)
        *n = c->a->n_texts;
    mt_data_tfidf_free(v);
    return rc;
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcasecmp(s + n - k, suf) == 0;
}

static mt_code load_input(predict_ctx *c, float **x, size_t *n, mt_err *err)
{
    const char *path = c->a->input;
    size_t h, w, ch;
    mt_idx idx;
    mt_code rc;

    *x = NULL;
    *n = 0;
    if (c->a->n_texts > 0)
        return load_texts(c, x, n, err);
    if (has_suffix(path, ".csv"))
        return csv_has_header(path) ? load_named_csv(c, path, x, n, err)
                                    : load_csv(path, c->dim, x, n, err);
    if (has_suffix(path, ".png") || has_suffix(path, ".jpg") || has_suffix(path, ".jpeg"))
        return load_image(c, path, x, n, err);
    if ((rc = mt_idx_read_file(path, &idx, err)) != MT_OK)
        return rc;
    rc = mt_idx_to_images(&idx, path, x, n, &h, &w, &ch, err);
    mt_idx_fini(&idx);
    if (rc == MT_OK && h * w * ch != c->dim) {
        mt_free(*x);
        *x = NULL;
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: examples of %zu values, the model takes %zu", path, h * w * ch,
                          c->dim);
    }
    return rc;
}

/* Class names for printing: the export's, else the dataset's (when it has them and its files
 * are here), else none (ids). */
static const mt_data_classes *class_names(predict_ctx *c, mt_data_classes *fitted)
{
    const mt_data_spec *ds;
    mt_err err = MT_ERR_INIT;

    memset(fitted, 0, sizeof(*fitted));
    if (c->meta.classes.n > 0)
        return &c->meta.classes;
    ds = dataset_spec(c);
    if (ds == NULL ||
        (ds->label_type != MT_DATA_LABEL_STRING && ds->format != MT_DATA_FORMAT_IMAGES))
        return NULL;
    if (mt_data_classes_fit_spec(ds, fitted, &err) != MT_OK) {
        fprintf(stderr, "meshtrain predict: classes print as ids: %s\n", err.msg);
        return NULL;
    }
    return fitted;
}

static void print_example(const predict_args *a, size_t i, const float *logits, size_t k,
                          const int32_t *label, const mt_data_classes *names)
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
        const char *nm;
        for (size_t j = 0; j < k && j < 4096; j++)
            if (!used[j] && (!found || logits[j] > logits[best]))
                best = j, found = true;
        used[best] = true;
        nm = names != NULL && best < names->n ? names->names[best] : NULL;
        if (a->json && nm != NULL) {
            cJSON *js = cJSON_CreateStringReference(nm);
            char *q = js != NULL ? cJSON_PrintUnformatted(js) : NULL;
            printf("%s{\"class\": %zu, \"name\": %s, \"probability\": %.6f}", t ? ", " : "", best,
                   q != NULL ? q : "null", exp(logits[best] - mx) / sum);
            cJSON_free(q);
            cJSON_Delete(js);
        } else if (a->json) {
            printf("%s{\"class\": %zu, \"probability\": %.6f}", t ? ", " : "", best,
                   exp(logits[best] - mx) / sum);
        } else if (nm != NULL) {
            printf(" %s (%.4f)", nm, exp(logits[best] - mx) / sum);
        } else {
            printf(" %zu (%.4f)", best, exp(logits[best] - mx) / sum);
        }
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
    size_t n = 0, ny = 0, correct = 0;
    predict_ctx c;
    mt_data_classes fitted;
    const mt_data_classes *names = NULL;
    int code = MT_EXIT_OK;
    mt_code rc = mt_job_spec_load(a->spec, &spec, &err);

    memset(&c, 0, sizeof(c));
    memset(&fitted, 0, sizeof(fitted));
    c.a = a;
    c.dim = 1;
    if (rc != MT_OK)
        goto done;
    c.in_rank = spec->input_rank;
    memcpy(c.in_shape, spec->input_shape, sizeof(c.in_shape));
    if (c.in_rank == 0) {
        rc = mt_err_set(&err, MT_INVALID_ARGUMENT, "%s: model.input_shape is required to predict",
                        a->spec);
        goto done;
    }
    for (int d = 0; d < c.in_rank; d++)
        c.dim *= c.in_shape[d];
    if ((rc = mt_model_new(spec, c.in_rank, c.in_shape, PREDICT_BATCH, &m, &err)) != MT_OK ||
        (rc = load_safetensors(m, a->model, &c.meta, &err)) != MT_OK ||
        (rc = load_input(&c, &x, &n, &err)) != MT_OK)
        goto done;
    names = class_names(&c, &fitted);
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
        rc = mt_model_forward(m, x + i * c.dim, b, b, false, 0, i, NULL, &logits, &err);
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
                print_example(a, i + e, l, k, y != NULL ? &y[i + e] : NULL, names);
        }
    }
    if (y != NULL && !a->json)
        printf("accuracy %.4f (%zu of %zu)\n", n ? (double)correct / (double)n : 0.0, correct, n);
done:
    if (rc != MT_OK)
        code = mt_cli_fail(&err);
    mt_free(x);
    mt_free(y);
    mt_data_classes_fini(&fitted);
    meta_fini(&c.meta);
    mt_data_spec_free(c.ds);
    mt_model_free(m);
    mt_job_spec_free(spec);
    return code;
}

int cmd_predict(const mt_cli_global *g, int argc, char **argv)
{
    static const struct option opts[] = {
        {"spec", required_argument, NULL, 's'},
        {"input", required_argument, NULL, 'i'},
        {"labels", required_argument, NULL, 'l'},
        {"top-k", required_argument, NULL, 'k'},
        {"limit", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        {"text", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    predict_args a;
    char *end;
    int c;

    (void)g;
    memset(&a, 0, sizeof(a));
    a.top_k = 1;
    a.limit = -1;
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
        case 't':
            if (a.n_texts == sizeof(a.texts) / sizeof(a.texts[0]))
                return mt_cli_usage_error("predict", "at most %zu --text sentences",
                                          sizeof(a.texts) / sizeof(a.texts[0]));
            a.texts[a.n_texts++] = optarg;
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
    if (a.spec == NULL || (a.input == NULL) == (a.n_texts == 0))
        return mt_cli_usage_error("predict", "--spec and one of --input or --text are required");
    a.model = argv[optind];
    return run(&a);
}
