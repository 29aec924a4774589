/* SPDX-License-Identifier: MIT */
/*
 * bench_data.c — input-pipeline throughput (examples/s) for Fashion-MNIST IDX, a generated CSV of
 * 60,000 × 785 and the TF-IDF text pipeline, with and without prefetch, printed beside the
 * training throughput of the matching model measured in the same run.
 *
 * The baseline the ratios are printed against is the training throughput of the matching model
 * measured in the same run: mt_model_train_step on one device (Adam) of the Fashion-MNIST MLP
 * (784-128-10, batch 128; for IDX and the CSV) and the DTensor tutorial's sentiment MLP
 * (1200-48-BatchNorm-2, batch 64; for TF-IDF). A second ratio is against an sgemm proxy
 * of one MLP training step (forward x·W1, h·W2;
 * backward hᵀ·dy, dy·W2ᵀ, xᵀ·dh — the five matrix products of a 2-layer MLP, without activations
 * or the optimizer), so it is an upper bound on the real single-device training throughput and
 * the printed ratios are conservative. Models: 784-128-10 at batch 128 (Fashion-MNIST MLP of the
 * training-engine issue) and 1200-64-2 at batch 64 (the sentiment MLP).
 * "overlap" rows run that proxy step on every delivered batch: with prefetch the input work
 * happens on the pipeline's thread while the step computes.
 * Run through bench/data.sh (sets the OpenBLAS core type, one BLAS thread). Not run by ctest.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "log/mt_log.h"
#include "model/mt_model.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ MLP step proxy */

typedef struct mlp {
    int in, hid, out, batch;
    float *w1, *w2, *h, *dy, *dh, *g1, *g2, *x;
} mlp;

static float *frand(size_t n)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

static void mlp_init(mlp *m, int in, int hid, int out, int batch)
{
    m->in = in, m->hid = hid, m->out = out, m->batch = batch;
    m->w1 = frand((size_t)in * hid);
    m->w2 = frand((size_t)hid * out);
    m->h = frand((size_t)batch * hid);
    m->dy = frand((size_t)batch * out);
    m->dh = frand((size_t)batch * hid);
    m->g1 = frand((size_t)in * hid);
    m->g2 = frand((size_t)hid * out);
    m->x = frand((size_t)batch * in);
}

static void mlp_fini(mlp *m)
{
    free(m->w1), free(m->w2), free(m->h), free(m->dy), free(m->dh), free(m->g1), free(m->g2);
    free(m->x);
}

/* One step on x (n, in); n <= batch. */
static void mlp_step(mlp *m, const float *x, int n)
{
    if (n == 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m->hid, m->in, 1, x, m->in, m->w1,
                m->hid, 0, m->h, m->hid);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m->out, m->hid, 1, m->h, m->hid,
                m->w2, m->out, 0, m->dy, m->out);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m->hid, m->out, n, 1, m->h, m->hid, m->dy,
                m->out, 0, m->g2, m->out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m->hid, m->out, 1, m->dy, m->out, m->w2,
                m->out, 0, m->dh, m->hid);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m->in, m->hid, n, 1, x, m->in, m->dh,
                m->hid, 0, m->g1, m->hid);
}

static double mlp_throughput(mlp *m, double seconds)
{
    double t0 = now(), t;
    long steps = 0;
    do {
        mlp_step(m, m->x, m->batch);
        steps++;
    } while ((t = now() - t0) < seconds);
    return (double)steps * m->batch / t;
}

/* ------------------------------------------------------------------ the real model */

/* The matching models (one device, the training engine's mt_model_train_step). */
static const char *const FMNIST_MLP =
    "{\"seed\":42,\"batch_size\":128,\"optimizer\":\"adam\",\"learning_rate\":0.001,"
    "\"model\":{\"input_shape\":[28,28,1],\"layers\":[{\"type\":\"flatten\"},{\"type\":"
    "\"dense\",\"units\":128,\"activation\":\"relu\"},{\"type\":\"dense\",\"units\":10}]}}";
static const char *const SENTIMENT_MLP =
    "{\"seed\":1,\"batch_size\":64,\"optimizer\":\"adam\",\"learning_rate\":0.01,"
    "\"model\":{\"input_shape\":[1200],\"layers\":[{\"type\":\"dense\",\"units\":48,"
    "\"activation\":\"relu\"},{\"type\":\"batch_norm\"},{\"type\":\"dense\",\"units\":2,"
    "\"activation\":\"softmax\"}]}}";

/* Training examples/s of the spec's model on one device (batch_size, random inputs). */
static double model_throughput(const char *json, double seconds)
{
    mt_job_spec *spec = NULL;
    mt_model *m = NULL;
    mt_err err = MT_ERR_INIT;
    size_t in = 1, bs;
    float *x;
    int32_t *y;
    double t0, t;
    long steps = 0;

    if (mt_job_spec_parse(json, strlen(json), &spec, &err) != MT_OK ||
        mt_model_new(spec, spec->input_rank, spec->input_shape, spec->batch_size, &m, &err) !=
            MT_OK) {
        fprintf(stderr, "model: %s\n", err.msg);
        exit(1);
    }
    bs = spec->batch_size;
    for (int a = 0; a < spec->input_rank; a++)
        in *= spec->input_shape[a];
    x = frand(bs * in);
    y = calloc(bs, sizeof(int32_t));
    for (size_t i = 0; i < bs; i++) {
        x[i] += 0.5f;
        y[i] = (int32_t)(i % 2);
    }
    t0 = now();
    do {
        if (mt_model_train_step(m, x, y, bs, bs, (uint64_t)steps, 0, NULL, NULL, &err) != MT_OK) {
            fprintf(stderr, "model step: %s\n", err.msg);
            exit(1);
        }
        steps++;
    } while ((t = now() - t0) < seconds);
    free(x);
    free(y);
    mt_model_free(m);
    mt_job_spec_free(spec);
    return (double)steps * (double)bs / t;
}

/* ------------------------------------------------------------------ pipeline runs */

static void add_row(const char *source, const char *config, double eps)
{
    printf("  %-10s %-40s %14.0f examples/s\n", source, config, eps);
    fflush(stdout);
}

static mt_data_pipeline *open_pipeline(mt_data_dataset *ds, size_t batch, size_t shuffle,
                                       size_t prefetch)
{
    mt_data_input_ctx ctx = {1, 0, 1, batch, 0, 0};
    mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
    mt_data_pipeline *p;
    mt_err err = MT_ERR_INIT;

    o.shuffle_buffer = shuffle;
    o.prefetch = prefetch;
    o.seed = 1;
    if (mt_data_pipeline_open(ds, &ctx, &o, &p, &err) != MT_OK) {
        fprintf(stderr, "pipeline: %s\n", err.msg);
        exit(1);
    }
    return p;
}

/* Run epochs of p for `seconds`; returns examples/s. step != NULL runs the proxy on each batch. */
static double run_for(mt_data_pipeline *p, mlp *step, double seconds)
{
    const mt_data_step *st;
    double t0, t, sink = 0;
    size_t examples = 0, epoch = 0;

    t0 = now();
    do {
        mt_data_pipeline_start_epoch(p, epoch++, NULL);
        while (mt_data_pipeline_next(p, &st, NULL) == MT_OK) {
            const mt_data_batch *b = &st->replicas[0];
            if (step != NULL)
                mlp_step(step, b->x, (int)b->n);
            else if (b->n > 0)
                sink += b->x[(b->n - 1) * b->dim] + b->y[0];
            examples += b->n;
            if ((examples & 0xfff) < b->n && now() - t0 > seconds)
                break;
        }
    } while ((t = now() - t0) < seconds);
    if (sink == -1.2345)
        printf("?");
    return (double)examples / t;
}

/* A fresh pipeline run for `seconds`. */
static double run_pipeline(mt_data_dataset *ds, size_t batch, size_t shuffle, size_t prefetch,
                           mlp *step, double seconds)
{
    mt_data_pipeline *p = open_pipeline(ds, batch, shuffle, prefetch);
    double eps = run_for(p, step, seconds);
    mt_data_pipeline_free(p);
    return eps;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * The rows of one source. The machine may be shared: the baselines (the model and the proxy) are
 * measured again right before the source's rows, and the ratios use those figures.
 */
static void bench_source(const char *name, mt_data_dataset *ds, size_t batch, mlp *m,
                         const char *model_json, double seconds)
{
    char cfg[128];
    static const size_t shuffles[2] = {0, 10000};
    double train_eps = mlp_throughput(m, seconds),
           model_eps = model_throughput(model_json, seconds);

    printf("  %-10s %-40s %14.0f examples/s\n", name, "baseline: the matching model (now)",
           model_eps);
    printf("  %-10s %-40s %14.0f examples/s\n", name, "baseline: the sgemm proxy (now)", train_eps);
    for (int s = 0; s < 2; s++)
        for (size_t pf = 0; pf <= 2; pf += 2) {
            snprintf(cfg, sizeof(cfg), "batch %zu%s prefetch %zu", batch,
                     shuffles[s] ? " shuffle 10000" : " in order", pf);
            double eps = run_pipeline(ds, batch, shuffles[s], pf, NULL, seconds);
            add_row(name, cfg, eps);
            printf("  %-10s %-40s %8.1fx the model, %.1fx the sgemm proxy\n", "", "",
                   eps / model_eps, eps / train_eps);
        }
    {
        /* the machine is shared: short alternating runs, the ratio of each adjacent pair */
        enum { PAIRS = 9 };
        double r[PAIRS], p0[PAIRS], p2[PAIRS];
        mt_data_pipeline *a = open_pipeline(ds, batch, 10000, 0),
                         *b = open_pipeline(ds, batch, 10000, 2);
        for (int i = 0; i < PAIRS; i++) {
            p0[i] = run_for(a, NULL, seconds / 5);
            p2[i] = run_for(b, NULL, seconds / 5);
            r[i] = p2[i] / p0[i];
        }
        mt_data_pipeline_free(a);
        mt_data_pipeline_free(b);
        qsort(r, PAIRS, sizeof(double), cmp_double);
        qsort(p0, PAIRS, sizeof(double), cmp_double);
        qsort(p2, PAIRS, sizeof(double), cmp_double);
        printf("  %-10s %-40s %8.2f (min %.2f, max %.2f); medians %.0f / %.0f examples/s\n", name,
               "paired: shuffled prefetch 2 / prefetch 0", r[PAIRS / 2], r[0], r[PAIRS - 1],
               p2[PAIRS / 2], p0[PAIRS / 2]);
        printf("  %-10s %-40s %8.1fx / %.1fx the model\n", "", "", p2[PAIRS / 2] / model_eps,
               p0[PAIRS / 2] / model_eps);
    }
    for (size_t pf = 0; pf <= 2; pf += 2) {
        double eps = run_pipeline(ds, batch, 10000, pf, m, seconds);
        snprintf(cfg, sizeof(cfg), "overlap: shuffle + train proxy, prefetch %zu", pf);
        add_row(name, cfg, eps);
        printf("  %-10s %-40s %8.0f%% of the proxy step alone (input stall: %s)\n", "", "",
               100.0 * eps / train_eps, eps >= 0.9 * train_eps ? "none visible" : "yes");
    }
}

static mt_data_dataset *open_spec(const char *json, mt_data_spec **sp, mt_data_tfidf **vec,
                                  double *open_s)
{
    cJSON *j = cJSON_Parse(json);
    mt_data_spec *s;
    mt_data_dataset *ds;
    mt_err err = MT_ERR_INIT;
    double t0 = now();

    if (mt_data_spec_parse(j, NULL, NULL, &s, &err) != MT_OK) {
        fprintf(stderr, "spec: %s\n", err.msg);
        exit(1);
    }
    cJSON_Delete(j);
    if (vec != NULL && mt_data_tfidf_fit_spec(s, vec, &err) != MT_OK) {
        fprintf(stderr, "tf-idf: %s\n", err.msg);
        exit(1);
    }
    if (mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, vec ? *vec : NULL, &ds, &err) != MT_OK) {
        fprintf(stderr, "dataset: %s\n", err.msg);
        exit(1);
    }
    /* decode once through a pipeline open to time the decoder */
    {
        mt_data_input_ctx ctx = {1, 0, 1, 128, 0, 0};
        mt_data_pipeline_opts o = MT_DATA_PIPELINE_OPTS_DEFAULTS;
        mt_data_pipeline *p;
        if (mt_data_pipeline_open(ds, &ctx, &o, &p, &err) != MT_OK) {
            fprintf(stderr, "decode: %s\n", err.msg);
            exit(1);
        }
        mt_data_pipeline_free(p);
    }
    *open_s = now() - t0;
    *sp = s; /* the spec must outlive the dataset */
    return ds;
}

static void write_csv(const char *path, size_t n)
{
    FILE *fp = fopen(path, "w");
    uint64_t r = 88172645463325252ull;
    if (fp == NULL) {
        perror(path);
        exit(1);
    }
    fprintf(fp, "label");
    for (int j = 0; j < 784; j++)
        fprintf(fp, ",pixel%d", j + 1);
    fputc('\n', fp);
    for (size_t i = 0; i < n; i++) {
        fprintf(fp, "%zu", i % 10);
        for (int j = 0; j < 784; j++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            fprintf(fp, ",%u", (unsigned)(r % 4 == 0 ? r % 256 : 0)); /* sparse, like images */
        }
        fputc('\n', fp);
    }
    fclose(fp);
}

static void write_text(const char *path, size_t n)
{
    FILE *fp = fopen(path, "w");
    uint64_t r = 1234567;
    if (fp == NULL) {
        perror(path);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        fprintf(fp, "%zu\t", i % 2);
        for (int w = 0; w < 12; w++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            fprintf(fp, "%sw%u", w ? " " : "", (unsigned)(r % 3000));
        }
        fputc('\n', fp);
    }
    fclose(fp);
}

int main(int argc, char **argv)
{
    const char *idx_dir = "/usr/share/datasets/fashion-mnist";
    const char *text = NULL;
    const char *tmp = "/tmp";
    double seconds = 1.0, open_s;
    char json[1024], csv[512], txt[512];
    mlp m784, m1200;
    double train784, train1200, model784, model1200;
    size_t csv_rows = 60000;
    const char *only = NULL; /* "idx" | "csv" | "text": run that source only */

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--idx") == 0 && i + 1 < argc)
            idx_dir = argv[++i];
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc)
            text = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--csv-rows") == 0 && i + 1 < argc)
            csv_rows = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--tmp") == 0 && i + 1 < argc)
            tmp = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr,
                    "usage: %s [--idx DIR] [--text TSV] [--seconds S] [--csv-rows N] [--tmp D]\n"
                    "       [--only idx|csv|text]\n",
                    argv[0]);
            return 2;
        }
    }
    mt_log_set_level(MT_LOG_WARN);
    mlp_init(&m784, 784, 128, 10, 128);
    mlp_init(&m1200, 1200, 64, 2, 64);
    train784 = mlp_throughput(&m784, seconds);
    train1200 = mlp_throughput(&m1200, seconds);
    printf("training baseline (sgemm proxy of one MLP step, 1 thread):\n");
    printf("  784-128-10  batch 128: %12.0f examples/s\n", train784);
    printf("  1200-64-2   batch  64: %12.0f examples/s\n", train1200);
    model784 = model_throughput(FMNIST_MLP, seconds);
    model1200 = model_throughput(SENTIMENT_MLP, seconds);
    printf("training throughput of the matching model (mt_model_train_step, 1 device, Adam):\n");
    printf("  Fashion-MNIST MLP 784-128-10        batch 128: %10.0f examples/s\n", model784);
    printf("  sentiment MLP 1200-48-BN-2 (tutorial) batch 64: %10.0f examples/s\n\n", model1200);

    /* Fashion-MNIST IDX */
    snprintf(json, sizeof(json),
             "{\"format\":\"idx\",\"train\":{\"images\":\"%s/train-images-idx3-ubyte.gz\","
             "\"labels\":\"%s/train-labels-idx1-ubyte.gz\"}}",
             idx_dir, idx_dir);
    if (only != NULL && strcmp(only, "idx") != 0) {
        /* skipped by --only */
    } else if (access(idx_dir, R_OK) == 0) {
        mt_data_spec *sp;
        mt_data_dataset *ds = open_spec(json, &sp, NULL, &open_s);
        printf("Fashion-MNIST IDX (60000 x 784, gzip): decode %.2f s = %.0f examples/s\n", open_s,
               60000 / open_s);
        bench_source("idx", ds, 128, &m784, FMNIST_MLP, seconds);
        mt_data_dataset_free(ds);
        mt_data_spec_free(sp);
    } else {
        printf("Fashion-MNIST IDX: skipped (%s missing)\n", idx_dir);
    }

    /* CSV 60000 x 785 */
    snprintf(csv, sizeof(csv), "%s/bench_data_%zux785.csv", tmp, csv_rows);
    if (only == NULL || strcmp(only, "csv") == 0) {
        double t0 = now();
        write_csv(csv, csv_rows);
        printf("\nCSV %zu x 785: generated in %.1f s\n", csv_rows, now() - t0);
        snprintf(json, sizeof(json),
                 "{\"format\":\"csv\",\"train\":\"%s\",\"label_column\":\"label\","
                 "\"scale\":0.00392156862745098}",
                 csv);
        mt_data_spec *sp;
        mt_data_dataset *ds = open_spec(json, &sp, NULL, &open_s);
        printf("CSV decode (count + parse): %.2f s = %.0f examples/s\n", open_s,
               (double)csv_rows / open_s);
        bench_source("csv", ds, 128, &m784, FMNIST_MLP, seconds);
        mt_data_dataset_free(ds);
        mt_data_spec_free(sp);
        unlink(csv);
    }

    /* TF-IDF text */
    if (only != NULL && strcmp(only, "text") != 0) {
        /* skipped by --only */
    } else {
        if (text == NULL) {
            snprintf(txt, sizeof(txt), "%s/bench_data_text.tsv", tmp);
            write_text(txt, 2400);
        }
        mt_data_tfidf *vec = NULL;
        snprintf(json, sizeof(json), "{\"format\":\"text\",\"train\":\"%s\",\"max_tokens\":1200}",
                 text != NULL ? text : txt);
        mt_data_spec *sp;
        mt_data_dataset *ds = open_spec(json, &sp, &vec, &open_s);
        size_t n = mt_data_dataset_size(ds);
        printf("\nTF-IDF text (%s, %zu sentences, max_tokens 1200): fit + vectorize %.3f s = "
               "%.0f examples/s\n",
               text != NULL ? "sentiment" : "synthetic", n, open_s, (double)n / open_s);
        bench_source("text", ds, 64, &m1200, SENTIMENT_MLP, seconds);
        mt_data_dataset_free(ds);
        mt_data_spec_free(sp);
        mt_data_tfidf_free(vec);
        if (text == NULL)
            unlink(txt);
    }
    mlp_fini(&m784);
    mlp_fini(&m1200);
    return 0;
}
