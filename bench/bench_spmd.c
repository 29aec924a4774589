/* SPDX-License-Identifier: MIT */
/*
 * bench_spmd.c — SPMD step time of the DTensor tutorial's three schemes on the same 8 devices
 * (threads of this process), and the bytes each device holds per tensor.
 *
 * Issue #4 targets: model- and spatial-parallel steps cost at most 1.5x the data-parallel step
 * for the tutorial MLP (Dense 1200->48 relu, BatchNorm, Dense 48->2, Adam) on the same device
 * count; a weight sharded over k devices takes 1/k of its bytes per device. The baseline is the
 * data-parallel step measured in the same run; each scheme is timed as the median of 15 rounds
 * of 10 steps after 5 warm-up steps, the rounds interleaving the schemes (the machine's load
 * then weighs on all alike), on synthetic sparse non-negative data.
 * Run: OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=... build/bench_spmd [global_batch (256)].
 * Prints a table; exit status 1 when a ratio misses 1.5x or a shard misses 1/k.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "spmd/mt_spmd.h"

#define SPEC(extra)                                                                                \
    "{\"seed\":1,\"batch_size\":1024,\"optimizer\":\"adam\",\"learning_rate\":0.01,"               \
    "\"model\":{\"input_shape\":[1200],\"layers\":[{\"type\":\"dense\",\"units\":48,"              \
    "\"activation\":\"relu\"},{\"type\":\"batch_norm\"},{\"type\":\"dense\",\"units\":2,"          \
    "\"activation\":\"softmax\"}]}," extra "}"

static const struct {
    const char *name, *spec;
} schemes[] = {
    {"data parallel", SPEC("\"mesh\":{\"batch\":8},\"input_layout\":[\"batch\",\"unsharded\"]")},
    {"model parallel",
     SPEC("\"mesh\":{\"batch\":4,\"model\":2},\"input_layout\":[\"batch\",\"unsharded\"],"
          "\"layouts\":{\"dense_1\\\\.kernel\":[\"unsharded\",\"model\"],"
          "\"dense_2\\\\.kernel\":[\"model\",\"unsharded\"]}")},
    {"spatial parallel",
     SPEC("\"mesh\":{\"batch\":2,\"feature\":2,\"model\":2},\"input_layout\":[\"batch\","
          "\"feature\"],\"layouts\":{\"dense_1\\\\.kernel\":[\"feature\",\"model\"],"
          "\"dense_2\\\\.kernel\":[\"model\",\"unsharded\"]}")},
};

#define NS     (sizeof(schemes) / sizeof(schemes[0]))
#define ROUNDS 15

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

int main(int argc, char **argv)
{
    size_t gb = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 256, shape[1] = {1200};
    float *x = mt_calloc(gb * 1200, sizeof(float));
    int32_t *y = mt_calloc(gb, sizeof(int32_t));
    double base = 0.0, rounds[NS][ROUNDS];
    mt_job_spec *spec[NS] = {NULL};
    mt_spmd_config cfg[NS];
    mt_spmd *s[NS] = {NULL};
    uint64_t step[NS] = {0};
    int status = 0;
    uint64_t r = 88172645463325252ULL;

    if (x == NULL || y == NULL || gb == 0 || gb > 1024)
        return 2;
    for (size_t i = 0; i < gb * 1200; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (r & 15) == 0 ? (float)((r >> 20) % 1000) / 300.0f : 0.0f;
    }
    for (size_t i = 0; i < gb; i++)
        y[i] = (int32_t)(i % 2);
    printf("SPMD step, tutorial MLP, 8 devices as threads, global batch %zu\n", gb);
    for (size_t k = 0; k < NS; k++) {
        const char *js = schemes[k].spec;
        mt_err err = MT_ERR_INIT;
        if (mt_job_spec_parse(js, strlen(js), &spec[k], &err) != MT_OK ||
            mt_spmd_config_parse(js, strlen(js), &cfg[k], &err) != MT_OK ||
            mt_spmd_new(spec[k], cfg[k].mesh, cfg[k].layouts, 1, shape, gb, NULL, &s[k], &err) !=
                MT_OK) {
            fprintf(stderr, "%s: %s\n", schemes[k].name, err.msg);
            return 2;
        }
        for (int w = 0; w < 5; w++)
            mt_spmd_step(s[k], x, y, gb, step[k]++, 0, NULL, &err);
    }
    /* rounds interleave the schemes, so a change in machine load hits all of them alike */
    for (int rd = 0; rd < ROUNDS; rd++)
        for (size_t k = 0; k < NS; k++) {
            mt_err err = MT_ERR_INIT;
            double t0 = now_s();
            for (int i = 0; i < 10; i++)
                if (mt_spmd_step(s[k], x, y, gb, step[k]++, 0, NULL, &err) != MT_OK) {
                    fprintf(stderr, "%s: %s\n", schemes[k].name, err.msg);
                    return 2;
                }
            rounds[k][rd] = (now_s() - t0) * 1e3 / 10.0;
        }
    printf("%-18s %12s %10s   (median of %d interleaved rounds of 10 steps)\n", "scheme", "ms/step",
           "vs data", ROUNDS);
    for (size_t k = 0; k < NS; k++) {
        double ms;
        qsort(rounds[k], ROUNDS, sizeof(double), cmp_double);
        ms = rounds[k][ROUNDS / 2];
        if (k == 0)
            base = ms;
        printf("%-18s %12.3f %9.2fx%s\n", schemes[k].name, ms, ms / base,
               k > 0 && ms / base > 1.5 ? "  MISSES 1.5x" : "");
        if (k > 0 && ms / base > 1.5)
            status = 1;
    }
    for (size_t k = 0; k < NS; k++) {
        printf("%s: bytes per device (value + grad + Adam m, v) per tensor, device 0:\n",
               schemes[k].name);
        for (size_t i = 0; i < mt_spmd_param_count(s[k]); i++) {
            const mt_model_param *p = mt_spmd_param(s[k], 0, i);
            size_t full = p->size, k_shards;
            char lay[96];
            for (int a = 0; a < p->rank; a++)
                full = full / p->local_shape[a] * p->shape[a];
            k_shards = full / p->size;
            mt_layout_format(mt_spmd_param_layout(s[k], i), lay, sizeof(lay));
            printf("    %-28s %-22s %9zu B  (1/%zu of %zu B)\n", p->name, lay,
                   mt_spmd_param_bytes(s[k], 0, i), k_shards,
                   mt_spmd_param_bytes(s[k], 0, i) * k_shards);
        }
        mt_spmd_free(s[k]);
        mt_spmd_config_fini(&cfg[k]);
        mt_job_spec_free(spec[k]);
    }
    mt_free(x);
    mt_free(y);
    return status;
}
