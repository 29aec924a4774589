/* SPDX-License-Identifier: MIT */
/*
 * bench_ckpt.c — cost of checkpointing the DTensor tutorial MLP with Adam slots
 * (18 tensors, 694 KB): save (assemble from 8 shards + commit with fsync and
 * rename), open (full verification: crc of every tensor), and restore per
 * device with mt_ckpt_read_slice under the three schemes, against the baseline
 * of reading every tensor whole (what each device of data parallel does).
 * Run: build/bench_ckpt [DIR] (default /tmp). Short: about a second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/mt_ckpt.h"
#include "layout/mt_layout.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct param {
    const char *name;
    int rank;
    int64_t shape[2];
} param;

static const param ps[] = {
    {"dense_1.kernel", 2, {1200, 48}}, {"dense_1.bias", 1, {48, 0}},
    {"batch_norm.gamma", 1, {48, 0}},  {"batch_norm.beta", 1, {48, 0}},
    {"dense_2.kernel", 2, {48, 2}},    {"dense_2.bias", 1, {2, 0}},
};
#define NP ((int)(sizeof(ps) / sizeof(ps[0])))
static const char *slots[] = {"", "/adam_m", "/adam_v"};

static int64_t numel(const param *p)
{
    return p->shape[0] * (p->rank == 2 ? p->shape[1] : 1);
}

/* Save with dense_1.kernel assembled from the 8 shards of [feature, model]. */
static int save(const char *path, const float *vals)
{
    mt_ckpt_writer *w = NULL;
    mt_mesh *mesh = NULL;
    mt_layout lay;
    const char *ax[] = {"feature", "model"};
    mt_err err = MT_ERR_INIT;
    float *shard = malloc(1200 * 48 * sizeof(float));

    mt_mesh_parse("batch=2,feature=2,model=2", NULL, 8, &mesh, NULL);
    mt_layout_init(&lay, ax, 2, NULL);
    if (mt_ckpt_writer_open(path, &w, &err) != MT_OK)
        goto fail;
    for (int s = 0; s < 3; s++) {
        for (int p = 0; p < NP; p++) {
            char name[64];
            snprintf(name, sizeof(name), "%s%s", ps[p].name, slots[s]);
            if (p != 0) {
                if (mt_ckpt_writer_add(w, name, MT_CKPT_F32, ps[p].shape, ps[p].rank, vals, &err) !=
                    MT_OK)
                    goto fail;
                continue;
            }
            if (mt_ckpt_writer_begin(w, name, MT_CKPT_F32, ps[p].shape, 2, &err) != MT_OK)
                goto fail;
            for (int d = 0; d < 8; d++) {
                int64_t ls[2], off[2];
                mt_layout_shard(&lay, mesh, ps[p].shape, d, ls, off, NULL);
                for (int r = 0; r < ls[0]; r++)
                    memcpy(shard + r * ls[1], vals + (r + off[0]) * 48 + off[1],
                           (size_t)ls[1] * sizeof(float));
                if (mt_ckpt_writer_put_slice(w, off, ls, shard, &err) != MT_OK)
                    goto fail;
            }
            if (mt_ckpt_writer_end(w, &err) != MT_OK)
                goto fail;
        }
    }
    free(shard);
    mt_mesh_free(mesh);
    if (mt_ckpt_writer_commit(w, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
fail:
    fprintf(stderr, "%s\n", err.msg);
    free(shard);
    mt_mesh_free(mesh);
    mt_ckpt_writer_abort(w);
    return 1;
}

/* Restore every tensor's shard on every device of `mesh_text` under layouts given per param. */
static double restore(const mt_ckpt *ck, const char *mesh_text, const char *const (*axes)[2],
                      float *buf)
{
    mt_mesh *mesh = NULL;
    double t0;

    mt_mesh_parse(mesh_text, NULL, 8, &mesh, NULL);
    t0 = now_s();
    for (int d = 0; d < 8; d++) {
        for (int s = 0; s < 3; s++) {
            for (int p = 0; p < NP; p++) {
                mt_layout l;
                int64_t ls[2], off[2];
                char name[64];
                snprintf(name, sizeof(name), "%s%s", ps[p].name, slots[s]);
                mt_layout_init(&l, axes[p], ps[p].rank, NULL);
                mt_layout_shard(&l, mesh, ps[p].shape, d, ls, off, NULL);
                if (mt_ckpt_read_slice(ck, name, off, ls, buf, NULL) != MT_OK)
                    abort();
            }
        }
    }
    t0 = now_s() - t0;
    mt_mesh_free(mesh);
    return t0;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char path[512];
    float *vals = malloc(1200 * 48 * sizeof(float)), *buf = malloc(1200 * 48 * sizeof(float));
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;
    const int reps = 10;
    double t_save = 1e9, t_open = 1e9, t_full = 1e9, t_dp = 1e9, t_mp = 1e9, t_sp = 1e9;
    static const char *const dp[NP][2] = {
        {"unsharded", "unsharded"}, {"unsharded"}, {"unsharded"}, {"unsharded"},
        {"unsharded", "unsharded"}, {"unsharded"}};
    static const char *const mp[NP][2] = {{"unsharded", "model"}, {"model"},
                                          {"unsharded"},          {"unsharded"},
                                          {"model", "unsharded"}, {"unsharded"}};
    static const char *const sp[NP][2] = {{"feature", "model"},   {"model"},
                                          {"unsharded"},          {"unsharded"},
                                          {"model", "unsharded"}, {"unsharded"}};

    for (int i = 0; i < 1200 * 48; i++)
        vals[i] = (float)(i % 1000) * 0.001f;
    snprintf(path, sizeof(path), "%s/bench-ckpt-%d.mtc", dir, (int)getpid());
    for (int r = 0; r < reps; r++) {
        double t0 = now_s(), t;
        if (save(path, vals) != 0)
            return 1;
        t = now_s() - t0;
        t_save = t < t_save ? t : t_save;
        t0 = now_s();
        if (mt_ckpt_open(path, &ck, &err) != MT_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        t = now_s() - t0;
        t_open = t < t_open ? t : t_open;
        t0 = now_s();
        for (int d = 0; d < 8; d++)
            for (int s = 0; s < 3; s++)
                for (int p = 0; p < NP; p++) {
                    char name[64];
                    snprintf(name, sizeof(name), "%s%s", ps[p].name, slots[s]);
                    mt_ckpt_read(ck, name, buf, (size_t)numel(&ps[p]) * 4, NULL);
                }
        t = now_s() - t0;
        t_full = t < t_full ? t : t_full;
        t = restore(ck, "batch=8", dp, buf);
        t_dp = t < t_dp ? t : t_dp;
        t = restore(ck, "batch=4,model=2", mp, buf);
        t_mp = t < t_mp ? t : t_mp;
        t = restore(ck, "batch=2,feature=2,model=2", sp, buf);
        t_sp = t < t_sp ? t : t_sp;
        mt_ckpt_close(ck);
    }
    unlink(path);
    printf("bench_ckpt: tutorial MLP + Adam slots, 18 tensors, %d bytes; best of %d\n",
           3 * (1200 * 48 + 48 * 3 + 96 + 2) * 4, reps);
    printf("save (8-shard assembly + commit, fsync)  %8.3f ms\n", t_save * 1e3);
    printf("open (verify every crc)                  %8.3f ms\n", t_open * 1e3);
    printf("restore, 8 devices, whole tensors (base) %8.3f ms  1.00x\n", t_full * 1e3);
    printf("restore, data parallel slices            %8.3f ms  %.2fx\n", t_dp * 1e3, t_dp / t_full);
    printf("restore, model parallel slices           %8.3f ms  %.2fx\n", t_mp * 1e3, t_mp / t_full);
    printf("restore, spatial parallel slices         %8.3f ms  %.2fx\n", t_sp * 1e3, t_sp / t_full);
    free(vals);
    free(buf);
    return 0;
}
