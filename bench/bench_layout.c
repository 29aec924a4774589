/* SPDX-License-Identifier: MIT */
/*
 * bench_layout.c — memory per device under the three DTensor-tutorial schemes
 * (issue #4 target: a weight sharded over k devices takes 1/k of its bytes per
 * device). For the tutorial MLP (Dense 1200->48, BatchNorm 48, Dense 48->2),
 * each scheme's job-spec fragment goes through the real path (mesh and
 * LayoutMap from JSON, mt_layout_map_check, mt_layout_shard on every device),
 * and the bench prints, per tensor, the bytes each device holds, the ratio to
 * the unsharded size (the baseline, data parallel) and whether it equals 1/k.
 * Optimizer slots (Adam m and v) take the same layout as their weight, so they
 * scale the same way. Also times mt_layout_map_check + shard for all devices.
 * Run: build/bench_layout. Exit status 1 if any tensor misses its 1/k target.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "layout/mt_layout.h"

typedef struct scheme {
    const char *name;
    const char *spec;
} scheme;

static const scheme schemes[] = {
    {"data parallel", "{\"mesh\": {\"batch\": 8}, \"input_layout\": [\"batch\", \"unsharded\"]}"},
    {"model parallel",
     "{\"mesh\": {\"batch\": 4, \"model\": 2}, \"layouts\": {"
     "\"dense_1\\\\.kernel\": [\"unsharded\", \"model\"], \"dense_1\\\\.bias\": [\"model\"],"
     "\"dense_2\\\\.kernel\": [\"model\", \"unsharded\"]},"
     "\"input_layout\": [\"batch\", \"unsharded\"]}"},
    {"spatial parallel",
     "{\"mesh\": {\"batch\": 2, \"feature\": 2, \"model\": 2}, \"layouts\": {"
     "\"dense_1\\\\.kernel\": [\"feature\", \"model\"], \"dense_1\\\\.bias\": [\"model\"],"
     "\"dense_2\\\\.kernel\": [\"model\", \"unsharded\"]},"
     "\"input_layout\": [\"batch\", \"feature\"]}"},
};

static const int64_t k1[] = {1200, 48}, b1[] = {48}, g[] = {48}, k2[] = {48, 2}, b2[] = {2};
static const mt_layout_param params[] = {
    {"dense_1.kernel", k1, 2}, {"dense_1.bias", b1, 1},   {"batch_norm.gamma", g, 1},
    {"batch_norm.beta", g, 1}, {"dense_2.kernel", k2, 2}, {"dense_2.bias", b2, 1},
};
#define NPARAMS ((int)(sizeof(params) / sizeof(params[0])))

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes device `dev` holds of parameter p (float32) under layout l. */
static int64_t shard_bytes(const mt_layout *l, const mt_mesh *mesh, int p, int dev)
{
    int64_t ls[MT_LAYOUT_MAX_RANK], off[MT_LAYOUT_MAX_RANK], n = 4;
    if (mt_layout_shard(l, mesh, params[p].shape, dev, ls, off, NULL) != MT_OK)
        return -1;
    for (int i = 0; i < l->rank; i++)
        n *= ls[i];
    return n;
}

static int run_scheme(const scheme *s)
{
    cJSON *spec = cJSON_Parse(s->spec);
    mt_mesh *mesh = NULL;
    mt_layout_map *map = NULL;
    mt_err err = MT_ERR_INIT;
    int64_t in_shape[] = {64, 1200};
    int64_t total_full = 0, total_dev = 0;
    int misses = 0;
    char ms[64];

    if (spec == NULL ||
        mt_mesh_from_json(cJSON_GetObjectItem(spec, "mesh"), NULL, NULL, 8, &mesh, &err) != MT_OK ||
        mt_layout_map_from_json(spec, &map, &err) != MT_OK ||
        mt_layout_map_check(map, mesh, params, NPARAMS, in_shape, 2, &err) != MT_OK) {
        fprintf(stderr, "%s: %s\n", s->name, err.msg);
        return 1;
    }
    mt_mesh_format(mesh, ms, sizeof(ms));
    printf("\n== %s (mesh %s, %d devices)\n", s->name, ms, mt_mesh_num_devices(mesh));
    printf("%-18s %-22s %10s %12s %8s %6s %s\n", "tensor", "layout", "full B", "B/device", "ratio",
           "1/k", "target");
    for (int p = 0; p < NPARAMS; p++) {
        mt_layout l;
        char ls[64];
        int64_t full = 4, per = -1;
        int k = 1, uniform = 1;
        mt_layout_map_resolve(map, params[p].name, params[p].rank, &l, NULL, NULL);
        mt_layout_format(&l, ls, sizeof(ls));
        for (int i = 0; i < params[p].rank; i++) {
            full *= params[p].shape[i];
            if (!mt_layout_axis_unsharded(&l, i))
                k *= mt_mesh_dim_size(mesh, mt_mesh_dim_index(mesh, l.axes[i]));
        }
        for (int d = 0; d < mt_mesh_num_devices(mesh); d++) {
            int64_t b = shard_bytes(&l, mesh, p, mt_mesh_device_at(mesh, d));
            if (per >= 0 && b != per)
                uniform = 0;
            per = b;
        }
        int ok = uniform && per * k == full;
        misses += !ok;
        total_full += full;
        total_dev += per;
        char kk[16];
        snprintf(kk, sizeof(kk), "1/%d", k);
        printf("%-18s %-22s %10lld %12lld %8.4f %6s %s\n", params[p].name, ls, (long long)full,
               (long long)per, (double)per / (double)full, k == 1 ? "1" : kk, ok ? "ok" : "MISSED");
    }
    printf("%-18s %-22s %10lld %12lld %8.4f   (weights; x3 with Adam m, v)\n", "total", "",
           (long long)total_full, (long long)total_dev, (double)total_dev / (double)total_full);

    /* cost of validating and sharding everything for every device (setup time, not per step) */
    int reps = 2000;
    double t0 = now_s();
    for (int r = 0; r < reps; r++) {
        mt_layout_map_check(map, mesh, params, NPARAMS, in_shape, 2, NULL);
        for (int p = 0; p < NPARAMS; p++) {
            mt_layout l;
            mt_layout_map_resolve(map, params[p].name, params[p].rank, &l, NULL, NULL);
            for (int d = 0; d < mt_mesh_num_devices(mesh); d++)
                shard_bytes(&l, mesh, p, d);
        }
    }
    printf("check + shard of all tensors on all devices: %.2f us\n", (now_s() - t0) / reps * 1e6);
    mt_layout_map_free(map);
    mt_mesh_free(mesh);
    cJSON_Delete(spec);
    return misses;
}

int main(void)
{
    int misses = 0;

    printf("bench_layout: float32 bytes per device of the DTensor tutorial MLP;\n"
           "ratio = bytes per device / unsharded bytes (data parallel holds 1.0 of everything)\n");
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        misses += run_scheme(&schemes[i]);
    printf("\n%s: %d tensor(s) missed the 1/k target\n", misses ? "FAIL" : "PASS", misses);
    return misses ? 1 : 0;
}
