/* SPDX-License-Identifier: MIT */
/*
 * bench_digest.c — the cost of the per-step state digest (mt_spmd_digest_world, as jobs take it:
 * shared out over the devices on replicated layouts; docs/reproducibility.md)
 * against a training step, on the seed models: the sentiment MLP (examples/
 * dtensor_mlp_data_parallel.json), the Fashion-MNIST MLP and CNN and the residual CNN, each on
 * 1 and 2 devices (threads; batch=1 / batch=2, the spec's global batch) and the MLP also
 * model-parallel (batch=2,model=2). Step and digest are timed in the same run, interleaved
 * (median of 9 rounds of 5 steps and 5 digests after 3 warm-up steps), on random inputs; the
 * 1-minute load average is printed beside each figure. "digest/step" is the cost of
 * digest_every: 1 relative to the step it follows.
 * Run from the source directory: OPENBLAS_NUM_THREADS=1 build/bench_digest [examples dir].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "alloc/mt_alloc.h"
#include "digest/digest_int.h"
#include "jobspec/mt_jobspec.h"
#include "spmd/mt_spmd.h"

#define ROUNDS 9

static const struct {
    const char *file, *mesh, *layouts; /* layouts: a replacement "layouts" object, or NULL */
} cases[] = {
    {"dtensor_mlp_data_parallel.json", "batch=1", NULL},
    {"dtensor_mlp_data_parallel.json", "batch=2", NULL},
    {"dtensor_mlp_model_parallel.json", "batch=2,model=2", NULL},
    {"fashion_mnist_mlp.json", "batch=1", NULL},
    {"fashion_mnist_mlp.json", "batch=2", NULL},
    {"fashion_mnist_cnn.json", "batch=1", NULL},
    {"fashion_mnist_cnn.json", "batch=2", NULL},
    {"fashion_mnist_residual_cnn.json", "batch=1", NULL},
    {"fashion_mnist_residual_cnn.json", "batch=2", NULL},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double loadavg(void)
{
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1.0;
        fclose(f);
    }
    return l;
}

/* Step and digest times (ms, medians) of one case; 0 on success. */
static int run_case(const char *dir, int k, double *step_ms, double *digest_ms, size_t *bytes)
{
    char path[1024];
    mt_jobspec *js = NULL;
    mt_mesh *mesh = NULL;
    mt_spmd *s = NULL;
    mt_err err = MT_ERR_INIT;
    double st[ROUNDS], dg[ROUNDS];
    size_t ex = 1, gb;
    float *x = NULL;
    int32_t *y = NULL;
    uint64_t step = 0, r = 88172645463325252ULL;
    mt_digest d;
    bool have = false;
    int rc = 1;

    snprintf(path, sizeof(path), "%s/%s", dir, cases[k].file);
    if (mt_jobspec_load(path, &js, &err) != MT_OK ||
        mt_mesh_parse(cases[k].mesh, NULL, 0, &mesh, &err) != MT_OK)
        goto out;
    gb = js->model->batch_size;
    for (int a = 0; a < js->model->input_rank; a++)
        ex *= js->model->input_shape[a];
    x = mt_calloc(gb * ex, sizeof(float));
    y = mt_calloc(gb, sizeof(int32_t));
    if (x == NULL || y == NULL)
        goto out;
    for (size_t i = 0; i < gb * ex; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (float)((r >> 20) % 1000) / 1000.0f;
    }
    for (size_t i = 0; i < gb; i++)
        y[i] = (int32_t)(i % 2);
    if (mt_spmd_new(js->model, mesh, js->cfg.layouts, js->model->input_rank, js->model->input_shape,
                    gb, NULL, &s, &err) != MT_OK)
        goto out;
    for (int w = 0; w < 3; w++)
        if (mt_spmd_step(s, x, y, gb, step++, 0, NULL, &err) != MT_OK)
            goto out;
    for (int rd = 0; rd < ROUNDS; rd++) {
        double t0 = now_s();
        for (int i = 0; i < 5; i++)
            if (mt_spmd_step(s, x, y, gb, step++, 0, NULL, &err) != MT_OK)
                goto out;
        st[rd] = (now_s() - t0) * 1e3 / 5.0;
        t0 = now_s();
        for (int i = 0; i < 5; i++)
            if (mt_spmd_digest_world(s, &d, &have, &err) != MT_OK)
                goto out;
        dg[rd] = (now_s() - t0) * 1e3 / 5.0;
    }
    qsort(st, ROUNDS, sizeof(double), cmp_double);
    qsort(dg, ROUNDS, sizeof(double), cmp_double);
    *step_ms = st[ROUNDS / 2];
    *digest_ms = dg[ROUNDS / 2];
    *bytes = 0;
    for (size_t i = 0; i < mt_spmd_param_count(s); i++) {
        const mt_model_param *p = mt_spmd_param(s, 0, i);
        size_t full = 1;
        for (int a = 0; a < p->rank; a++)
            full *= p->shape[a];
        *bytes += full * sizeof(float) * (p->trainable ? 3 : 1); /* value and two Adam slots */
    }
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "%s on %s: %s\n", cases[k].file, cases[k].mesh, err.msg);
    mt_spmd_free(s);
    mt_mesh_free(mesh);
    mt_jobspec_free(js);
    mt_free(x);
    mt_free(y);
    return rc;
}

/* Throughput (MB/s, best of 5, interleaved) of the digest of one 16 MB F32 tensor, of plain
 * SHA-256 over the same bytes by the SHA-extensions path and by mbed TLS, and of zlib's crc32
 * (what a checkpoint computed per tensor before the digest). */
static void throughput(void)
{
    size_t n = 16u << 20;
    int64_t shape[1] = {(int64_t)(n / 4)};
    mt_digest_tensor_desc t = {"t", "F32", 4, 1, shape};
    uint8_t *b = mt_calloc(n, 1);
    double best_d = 1e9, best_c = 1e9, best_a = 1e9, best_p = 1e9;
    const void *parts[1];
    uint8_t h[32];
    mt_digest d;
    uLong c = 0;

    if (b == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 131);
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        mt_digest_tensor_whole(&t, b, &d, NULL);
        double t1 = now_s();
        c = crc32(0L, b, (uInt)n);
        double t2 = now_s();
        parts[0] = b;
        mt_digest__sha256(mt_digest__has_sha_ni(), parts, &n, 1, h);
        double t3 = now_s();
        mt_digest__sha256(false, parts, &n, 1, h);
        double t4 = now_s();
        best_d = t1 - t0 < best_d ? t1 - t0 : best_d;
        best_c = t2 - t1 < best_c ? t2 - t1 : best_c;
        best_a = t3 - t2 < best_a ? t3 - t2 : best_a;
        best_p = t4 - t3 < best_p ? t4 - t3 : best_p;
    }
    printf("SHA-256 over 16 MB: %s %.0f MB/s, mbed TLS %.0f MB/s (%.1fx), load %.2f\n",
           mt_digest__has_sha_ni() ? "SHA extensions" : "(no SHA extensions) mbed TLS",
           (double)n / 1e6 / best_a, (double)n / 1e6 / best_p, best_p / best_a, loadavg());
    printf("throughput over 16 MB: digest (SHA-256 tree) %.0f MB/s, crc32 %.0f MB/s "
           "(%.1fx), load %.2f [crc %08lx]\n",
           (double)n / 1e6 / best_d, (double)n / 1e6 / best_c, best_d / best_c, loadavg(),
           (unsigned long)c);
    mt_free(b);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "examples";
    int status = 0;

    throughput();
    printf("state digest (mt_spmd_digest_world) against a training step, same run, medians of %d "
           "interleaved rounds\n",
           ROUNDS);
    printf("%-34s %-16s %9s %10s %10s %11s %6s\n", "spec", "mesh", "state MB", "step ms",
           "digest ms", "digest/step", "load");
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        double st = 0, dg = 0;
        size_t bytes = 0;
        if (run_case(dir, (int)k, &st, &dg, &bytes) != 0) {
            status = 1;
            continue;
        }
        printf("%-34s %-16s %9.2f %10.3f %10.3f %10.3fx %6.2f\n", cases[k].file, cases[k].mesh,
               (double)bytes / 1e6, st, dg, dg / st, loadavg());
        fflush(stdout);
    }
    return status;
}
