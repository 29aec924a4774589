/* SPDX-License-Identifier: MIT */
/*
 * test_ckpt.c — unit tests for core/ckpt (mt_ckpt.h): round trips, shard
 * assembly and slice reads across layouts, truncation at every byte, bit flips
 * naming the tensor, durability (no temp files left), retention, the
 * safetensors export as stored and converted by a plan (checked by an independent
 * reader below) and allocation
 * failure injection.
 */
#include "mt_test.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "ckpt/mt_ckpt.h"
#include "layout/mt_layout.h"

typedef struct fixture {
    char dir[64];
    char path[128];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/mt_ckpt_test_XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->path, sizeof(f->path), "%s/ckpt-7.mtc", f->dir);
    *state = f;
    return 0;
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static int teardown(void **state)
{
    fixture *f = *state;
    DIR *d = opendir(f->dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char p[512];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", f->dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(f->dir);
    free(f);
    return 0;
}

static void assert_contains(const char *msg, const char *needle)
{
    if (strstr(msg, needle) == NULL)
        fail_msg("message '%s' lacks '%s'", msg, needle);
}

/* The tutorial MLP shrunk: dense_1.kernel 12x8, bias 8, dense_2.kernel 8x2, adam slots. */
#define K1_R 12
#define K1_C 8
static float k1[K1_R * K1_C], b1[K1_C], k2[K1_C * 2], m1[K1_R * K1_C];
static const int64_t k1_shape[] = {K1_R, K1_C}, b1_shape[] = {K1_C}, k2_shape[] = {K1_C, 2};
static const char *spec_text = "{\"mesh\": {\"batch\": 2, \"model\": 2}}";

static void fill_data(void)
{
    for (int i = 0; i < K1_R * K1_C; i++) {
        k1[i] = (float)i * 0.5f;
        m1[i] = -(float)i;
    }
    for (int i = 0; i < K1_C; i++)
        b1[i] = 100.0f + (float)i;
    for (int i = 0; i < K1_C * 2; i++)
        k2[i] = 1000.0f + (float)i;
}

/* Writes the standard checkpoint; dense_1.kernel is assembled from the shards of a
 * [unsharded, model] layout on batch=2,model=2 (each shard written by both replicas). */
static void write_standard(const char *path)
{
    mt_ckpt_writer *w = NULL;
    mt_err err = MT_ERR_INIT;
    mt_mesh *mesh = NULL;
    mt_layout lay;
    const char *ax[] = {"unsharded", "model"};

    fill_data();
    assert_int_equal(mt_mesh_parse("batch=2,model=2", NULL, 4, &mesh, NULL), MT_OK);
    assert_int_equal(mt_layout_init(&lay, ax, 2, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_open(path, &w, &err), MT_OK);
    mt_ckpt_writer_set_position(w, 7, 2, 12345);
    assert_int_equal(mt_ckpt_writer_set_spec(w, spec_text, &err), MT_OK);
    assert_int_equal(mt_ckpt_writer_begin(w, "dense_1.kernel", MT_CKPT_F32, k1_shape, 2, &err),
                     MT_OK);
    for (int dev = 0; dev < 4; dev++) {
        int64_t ls[2], off[2];
        float shard[K1_R * K1_C];
        assert_int_equal(mt_layout_shard(&lay, mesh, k1_shape, dev, ls, off, NULL), MT_OK);
        for (int r = 0; r < ls[0]; r++)
            for (int c = 0; c < ls[1]; c++)
                shard[r * ls[1] + c] = k1[(r + off[0]) * K1_C + c + off[1]];
        assert_int_equal(mt_ckpt_writer_put_slice(w, off, ls, shard, &err), MT_OK);
    }
    assert_int_equal(mt_ckpt_writer_end(w, &err), MT_OK);
    assert_int_equal(
        mt_ckpt_writer_add(w, "dense_1.kernel/adam_m", MT_CKPT_F32, k1_shape, 2, m1, &err), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "dense_1.bias", MT_CKPT_F32, b1_shape, 1, b1, &err),
                     MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "dense_2.kernel", MT_CKPT_F32, k2_shape, 2, k2, &err),
                     MT_OK);
    assert_int_equal(mt_ckpt_writer_commit(w, &err), MT_OK);
    mt_mesh_free(mesh);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b;
    long n;
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void test_ckpt_round_trip_and_metadata(void **state)
{
    fixture *f = *state;
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;
    mt_ckpt_tensor_info info;
    float got[K1_R * K1_C];

    write_standard(f->path);
    assert_int_equal(count_files(f->dir), 1); /* no temporary file left */
    assert_int_equal(mt_ckpt_open(f->path, &ck, &err), MT_OK);
    assert_int_equal(mt_ckpt_step(ck), 7);
    assert_int_equal(mt_ckpt_epoch(ck), 2);
    assert_int_equal(mt_ckpt_input_position(ck), 12345);
    assert_string_equal(mt_ckpt_spec(ck), spec_text);
    assert_int_equal(mt_ckpt_count(ck), 4);
    assert_int_equal(mt_ckpt_tensor_at(ck, 1, &info, &err), MT_OK);
    assert_string_equal(info.name, "dense_1.kernel/adam_m");
    assert_int_equal(mt_ckpt_tensor_at(ck, 4, &info, &err), MT_OUT_OF_RANGE);
    assert_int_equal(mt_ckpt_find(ck, "dense_1.kernel", &info, &err), MT_OK);
    assert_int_equal(info.dtype, MT_CKPT_F32);
    assert_int_equal(info.rank, 2);
    assert_int_equal(info.shape[0], K1_R);
    assert_int_equal(info.shape[1], K1_C);
    assert_int_equal(info.nbytes, sizeof(k1));
    assert_int_equal(mt_ckpt_find(ck, "nope", &info, &err), MT_NOT_FOUND);
    assert_contains(err.msg, "no tensor 'nope'");
    assert_int_equal(mt_ckpt_read(ck, "dense_1.kernel", got, sizeof(got), &err), MT_OK);
    assert_memory_equal(got, k1, sizeof(k1));
    assert_int_equal(mt_ckpt_read(ck, "dense_1.kernel/adam_m", got, sizeof(got), &err), MT_OK);
    assert_memory_equal(got, m1, sizeof(m1));
    assert_int_equal(mt_ckpt_read(ck, "dense_2.kernel", got, sizeof(k2), &err), MT_OK);
    assert_memory_equal(got, k2, sizeof(k2));
    assert_int_equal(mt_ckpt_read(ck, "dense_1.kernel", got, 8, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_ckpt_read(ck, "x", got, 8, &err), MT_NOT_FOUND);
    mt_ckpt_close(ck);
    mt_ckpt_close(NULL);
}

/* Restore onto another mesh/layout: every device reads exactly its slice. */
static void test_ckpt_read_slice_any_layout(void **state)
{
    fixture *f = *state;
    mt_ckpt *ck = NULL;
    mt_mesh *mesh = NULL;
    mt_layout lay;
    mt_err err = MT_ERR_INIT;
    const char *ax[] = {"feature", "model"};

    write_standard(f->path);
    assert_int_equal(mt_ckpt_open(f->path, &ck, &err), MT_OK);
    assert_int_equal(mt_mesh_parse("batch=2,feature=2,model=2", NULL, 8, &mesh, NULL), MT_OK);
    assert_int_equal(mt_layout_init(&lay, ax, 2, NULL), MT_OK);
    for (int dev = 0; dev < 8; dev++) {
        int64_t ls[2], off[2];
        float shard[K1_R * K1_C];
        assert_int_equal(mt_layout_shard(&lay, mesh, k1_shape, dev, ls, off, NULL), MT_OK);
        assert_int_equal(mt_ckpt_read_slice(ck, "dense_1.kernel", off, ls, shard, &err), MT_OK);
        for (int r = 0; r < ls[0]; r++)
            for (int c = 0; c < ls[1]; c++)
                assert_true(shard[r * ls[1] + c] == k1[(r + off[0]) * K1_C + c + off[1]]);
    }
    /* full-row slices merge into one run; a 1-d slice; an empty slice */
    int64_t off[2] = {3, 0}, ls[2] = {2, K1_C};
    float rows[2 * K1_C];
    assert_int_equal(mt_ckpt_read_slice(ck, "dense_1.kernel", off, ls, rows, &err), MT_OK);
    assert_memory_equal(rows, &k1[3 * K1_C], sizeof(rows));
    int64_t o1[1] = {2}, l1[1] = {3};
    float b[3];
    assert_int_equal(mt_ckpt_read_slice(ck, "dense_1.bias", o1, l1, b, &err), MT_OK);
    assert_true(b[0] == 102.0f && b[2] == 104.0f);
    int64_t l0[1] = {0};
    assert_int_equal(mt_ckpt_read_slice(ck, "dense_1.bias", o1, l0, b, &err), MT_OK);
    /* out of range names tensor, axis and size */
    int64_t bad_off[2] = {0, 6}, bad_ls[2] = {1, 4};
    assert_int_equal(mt_ckpt_read_slice(ck, "dense_1.kernel", bad_off, bad_ls, rows, &err),
                     MT_OUT_OF_RANGE);
    assert_contains(err.msg,
                    "tensor 'dense_1.kernel': slice [6, 10) on axis 1 is outside its size 8");
    int64_t neg[2] = {-1, 0};
    assert_int_equal(mt_ckpt_read_slice(ck, "dense_1.kernel", neg, ls, rows, &err),
                     MT_OUT_OF_RANGE);
    assert_int_equal(mt_ckpt_read_slice(ck, "nope", off, ls, rows, &err), MT_NOT_FOUND);
    mt_ckpt_close(ck);
    mt_mesh_free(mesh);
}

/* The strided-slice paths agree: file (span read + gather), file without memory for the
 * span (one read per run) and memory image (one copy per run). */
static void test_ckpt_read_slice_paths_agree(void **state)
{
    fixture *f = *state;
    mt_ckpt *ck = NULL, *mk = NULL;
    size_t len;
    uint8_t *b;
    int64_t off[2] = {2, 3}, ls[2] = {7, 4};
    float a[28], c[28], d[28];

    write_standard(f->path);
    b = slurp(f->path, &len);
    assert_int_equal(mt_ckpt_open(f->path, &ck, NULL), MT_OK);
    assert_int_equal(mt_ckpt_open_mem(b, len, &mk, NULL), MT_OK);
    assert_int_equal(mt_ckpt_read_slice(ck, "dense_1.kernel", off, ls, a, NULL), MT_OK);
    mt_alloc_fail_after(0);
    mt_code rc = mt_ckpt_read_slice(ck, "dense_1.kernel", off, ls, c, NULL);
    mt_alloc_fail_reset();
    assert_int_equal(rc, MT_OK);
    assert_int_equal(mt_ckpt_read_slice(mk, "dense_1.kernel", off, ls, d, NULL), MT_OK);
    for (int r = 0; r < 7; r++)
        for (int k = 0; k < 4; k++)
            assert_true(a[r * 4 + k] == k1[(r + 2) * K1_C + k + 3]);
    assert_memory_equal(a, c, sizeof(a));
    assert_memory_equal(a, d, sizeof(a));
    mt_ckpt_close(ck);
    mt_ckpt_close(mk);
    free(b);
}

static void test_ckpt_scalar_and_empty_tensors(void **state)
{
    fixture *f = *state;
    mt_ckpt_writer *w = NULL;
    mt_ckpt *ck = NULL;
    int64_t step_val = 42, got = 0;
    int64_t empty_shape[] = {0, 5};
    double d[3] = {1.5, 2.5, 3.5}, dg[3];
    int64_t d_shape[] = {3};
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_ckpt_writer_open(f->path, &w, &err), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "counter", MT_CKPT_I64, NULL, 0, &step_val, &err),
                     MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "empty", MT_CKPT_F32, empty_shape, 2, NULL, &err),
                     MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "d", MT_CKPT_F64, d_shape, 1, d, &err), MT_OK);
    assert_int_equal(mt_ckpt_writer_commit(w, &err), MT_OK);
    assert_int_equal(mt_ckpt_open(f->path, &ck, &err), MT_OK);
    assert_string_equal(mt_ckpt_spec(ck), "");
    assert_int_equal(mt_ckpt_read(ck, "counter", &got, sizeof(got), &err), MT_OK);
    assert_int_equal(got, 42);
    assert_int_equal(mt_ckpt_read_slice(ck, "counter", NULL, NULL, &got, &err), MT_OK);
    assert_int_equal(mt_ckpt_read(ck, "d", dg, sizeof(dg), &err), MT_OK);
    assert_memory_equal(dg, d, sizeof(d));
    mt_ckpt_close(ck);
}

static void test_ckpt_writer_errors(void **state)
{
    fixture *f = *state;
    mt_ckpt_writer *w = NULL;
    mt_err err = MT_ERR_INIT;
    int64_t shape[] = {2, 2}, neg[] = {2, -1};
    float data[4] = {1, 2, 3, 4};
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    char long_name[MT_CKPT_MAX_NAME + 2];

    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_int_equal(mt_ckpt_writer_open(f->path, &w, &err), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "a", MT_CKPT_F32, shape, 2, data, &err), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "a", MT_CKPT_F32, shape, 2, data, &err),
                     MT_ALREADY_EXISTS);
    assert_contains(err.msg, "tensor 'a' added twice");
    assert_int_equal(mt_ckpt_writer_add(w, "", MT_CKPT_F32, shape, 2, data, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_ckpt_writer_add(w, long_name, MT_CKPT_F32, shape, 2, data, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_ckpt_writer_add(w, "__metadata__", MT_CKPT_F32, shape, 2, data, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_ckpt_writer_add(w, "b", (mt_ckpt_dtype)99, shape, 2, data, &err),
                     MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "unknown dtype 99");
    assert_int_equal(mt_ckpt_writer_add(w, "b", MT_CKPT_F32, nine, 9, data, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(mt_ckpt_writer_add(w, "b", MT_CKPT_F32, neg, 2, data, &err),
                     MT_INVALID_ARGUMENT);
    /* slice protocol */
    int64_t off[] = {0, 0}, ls[] = {1, 2}, far[] = {2, 0};
    assert_int_equal(mt_ckpt_writer_put_slice(w, off, ls, data, &err), MT_FAILED_PRECONDITION);
    assert_int_equal(mt_ckpt_writer_end(w, &err), MT_FAILED_PRECONDITION);
    assert_int_equal(mt_ckpt_writer_begin(w, "b", MT_CKPT_F32, shape, 2, &err), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "c", MT_CKPT_F32, shape, 2, data, &err),
                     MT_FAILED_PRECONDITION);
    assert_contains(err.msg, "tensor 'b' is begun but not ended");
    assert_int_equal(mt_ckpt_writer_put_slice(w, far, ls, data, &err), MT_OUT_OF_RANGE);
    assert_int_equal(mt_ckpt_writer_put_slice(w, off, ls, data, &err), MT_OK);
    assert_int_equal(mt_ckpt_writer_put_slice(w, off, ls, data, &err), MT_OK); /* a replica */
    assert_int_equal(mt_ckpt_writer_end(w, &err), MT_FAILED_PRECONDITION);
    assert_contains(err.msg, "tensor 'b': shards cover 2 of 4 elements");
    /* the dropped tensor can be begun again */
    assert_int_equal(mt_ckpt_writer_begin(w, "b", MT_CKPT_F32, shape, 2, &err), MT_OK);
    /* commit with a tensor in progress fails, leaves nothing and releases the writer */
    assert_int_equal(mt_ckpt_writer_commit(w, &err), MT_FAILED_PRECONDITION);
    assert_int_equal(count_files(f->dir), 0);
    /* open in a missing directory */
    assert_int_equal(mt_ckpt_writer_open("/nonexistent-dir/x.mtc", &w, &err), MT_NOT_FOUND);
    assert_null(w);
    assert_int_equal(mt_ckpt_writer_open("", &w, &err), MT_INVALID_ARGUMENT);
}

static void test_ckpt_commit_replaces_and_abort_leaves_old(void **state)
{
    fixture *f = *state;
    mt_ckpt_writer *w = NULL;
    mt_ckpt *ck = NULL;
    float one = 1.0f, two = 2.0f, got;
    int64_t s1[] = {1};

    write_standard(f->path);
    assert_int_equal(mt_ckpt_writer_open(f->path, &w, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "x", MT_CKPT_F32, s1, 1, &one, NULL), MT_OK);
    mt_ckpt_writer_abort(w);
    mt_ckpt_writer_abort(NULL);
    assert_int_equal(count_files(f->dir), 1);
    assert_int_equal(mt_ckpt_open(f->path, &ck, NULL), MT_OK);
    assert_int_equal(mt_ckpt_count(ck), 4); /* the old file is intact */
    mt_ckpt_close(ck);
    assert_int_equal(mt_ckpt_writer_open(f->path, &w, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "x", MT_CKPT_F32, s1, 1, &two, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_commit(w, NULL), MT_OK);
    assert_int_equal(count_files(f->dir), 1);
    assert_int_equal(mt_ckpt_open(f->path, &ck, NULL), MT_OK);
    assert_int_equal(mt_ckpt_count(ck), 1);
    assert_int_equal(mt_ckpt_read(ck, "x", &got, sizeof(got), NULL), MT_OK);
    assert_true(got == 2.0f);
    mt_ckpt_close(ck);
}

/* Offsets of the data region and of each tensor, from the header (24-byte preamble). */
static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct layout_info {
    uint64_t header_end, data_start;
    int n;
    char names[8][64];
    uint64_t start[8], end[8];
    uint64_t crc_at[8]; /* file offset of each entry's crc32 */
} layout_info;

/* An independent decoder of the header, as docs/checkpoints.md describes it. */
static void decode(const uint8_t *b, layout_info *li)
{
    uint32_t hlen = le32(b + 12);
    const uint8_t *p = b + 24 + 32;
    uint32_t nt = le32(p), slen = le32(p + 4);
    li->header_end = 24 + (uint64_t)hlen;
    li->data_start = (li->header_end + 63) / 64 * 64;
    p += 8 + slen;
    li->n = (int)nt;
    for (uint32_t i = 0; i < nt; i++) {
        uint16_t nl = (uint16_t)(p[0] | p[1] << 8);
        int rank;
        snprintf(li->names[i], sizeof(li->names[i]), "%.*s", nl, (const char *)p + 2);
        p += 2 + nl;
        rank = p[1];
        p += 2 + 8 * rank;
        li->start[i] = li->data_start + le64(p);
        li->end[i] = li->start[i] + le64(p + 8);
        li->crc_at[i] = (uint64_t)(p + 16 - b);
        p += 20 + 32; /* offset, length, crc32, Merkle digest (version 2) */
    }
}

static void test_ckpt_truncation_at_every_byte(void **state)
{
    fixture *f = *state;
    size_t len;
    uint8_t *b;
    layout_info li;
    int header_class = 0, tensor_class[8] = {0};

    write_standard(f->path);
    b = slurp(f->path, &len);
    decode(b, &li);
    assert_int_equal(li.n, 4);
    assert_int_equal(li.end[3], len);
    for (size_t cut = 0; cut < len; cut++) {
        mt_ckpt *ck = (mt_ckpt *)1;
        mt_err err = MT_ERR_INIT;
        mt_code rc = mt_ckpt_open_mem(b, cut, &ck, &err);
        if (rc != MT_DATA_LOSS)
            fail_msg("cut at %zu: %s %s", cut, mt_code_name(rc), err.msg);
        assert_null(ck);
        if (cut < li.header_end) {
            assert_contains(err.msg, "header: truncated");
            header_class++;
            continue;
        }
        /* the first tensor whose data is not all present is named */
        int t = 0;
        while (li.end[t] <= cut)
            t++;
        char want[96];
        snprintf(want, sizeof(want), "tensor '%s': truncated", li.names[t]);
        assert_contains(err.msg, want);
        tensor_class[t]++;
    }
    assert_true(header_class > 24);
    for (int t = 0; t < 4; t++)
        assert_true(tensor_class[t] > 0);
    /* the same through a real file cut short */
    assert_int_equal(truncate(f->path, (off_t)(li.start[2] + 3)), 0);
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;
    assert_int_equal(mt_ckpt_open(f->path, &ck, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "tensor 'dense_1.bias': truncated");
    assert_contains(err.msg, f->path);
    /* an extra byte at the end is refused too */
    b[len] = 0;
    assert_int_equal(mt_ckpt_open_mem(b, len + 1, &ck, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "unexpected bytes after the last tensor");
    free(b);
}

static void test_ckpt_bit_flip_names_tensor(void **state)
{
    fixture *f = *state;
    size_t len;
    uint8_t *b;
    layout_info li;
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;

    write_standard(f->path);
    b = slurp(f->path, &len);
    decode(b, &li);
    /* a flip inside each tensor names that tensor, from memory and from the file */
    for (int t = 0; t < li.n; t++) {
        uint64_t at = (li.start[t] + li.end[t]) / 2;
        char want[96];
        b[at] ^= 0x10;
        snprintf(want, sizeof(want), "tensor '%s': checksum mismatch", li.names[t]);
        assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_DATA_LOSS);
        assert_contains(err.msg, want);
        spit(f->path, b, len);
        assert_int_equal(mt_ckpt_open(f->path, &ck, &err), MT_DATA_LOSS);
        assert_contains(err.msg, want);
        b[at] ^= 0x10;
    }
    /* a flip in the header or preamble names the header */
    b[30] ^= 1;
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "header: checksum mismatch");
    b[30] ^= 1;
    b[13] ^= 1;
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "header: preamble checksum mismatch");
    b[13] ^= 1;
    /* every single-bit flip anywhere in the file is refused */
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            b[i] ^= (uint8_t)(1u << bit);
            mt_code rc = mt_ckpt_open_mem(b, len, &ck, &err);
            if (rc == MT_OK)
                fail_msg("flip of bit %d at byte %zu went unnoticed", bit, i);
            assert_null(ck);
            b[i] ^= (uint8_t)(1u << bit);
        }
    }
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_OK);
    mt_ckpt_close(ck);
    free(b);
}

/* zlib crc32 through the test's own table-free bitwise implementation. */
static uint32_t crc32_ref(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void test_ckpt_bad_magic_version_and_missing(void **state)
{
    fixture *f = *state;
    size_t len;
    uint8_t *b;
    mt_ckpt *ck = (mt_ckpt *)1;
    mt_err err = MT_ERR_INIT;

    write_standard(f->path);
    b = slurp(f->path, &len);
    /* checksums as documented: header crc at 16, preamble crc at 20 */
    assert_int_equal(le32(b + 16), crc32_ref(b + 24, le32(b + 12)));
    assert_int_equal(le32(b + 20), crc32_ref(b, 20));
    assert_int_equal(le32(b + 8), 2);
    b[8] = 3; /* version 3, with a valid preamble checksum */
    uint32_t c = crc32_ref(b, 20);
    for (int i = 0; i < 4; i++)
        b[20 + i] = (uint8_t)(c >> (8 * i));
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_FAILED_PRECONDITION);
    assert_contains(err.msg, "version 3");
    b[0] = 'X';
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "not a meshtrain checkpoint");
    assert_int_equal(mt_ckpt_open_mem(b, 3, &ck, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_ckpt_open_mem(NULL, 0, &ck, &err), MT_DATA_LOSS);
    assert_null(ck);
    free(b);
    assert_int_equal(mt_ckpt_open("/nonexistent/ckpt-1.mtc", &ck, &err), MT_NOT_FOUND);
    assert_contains(err.msg, "/nonexistent/ckpt-1.mtc");
    assert_int_equal(mt_ckpt_open(f->dir, &ck, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_ckpt_open(NULL, &ck, &err), MT_INVALID_ARGUMENT);
}

/* Patch header byte `at` to v and recompute both checksums, as a crafted file would. */
static void patch_header(uint8_t *b, size_t at, uint8_t v)
{
    uint32_t c;
    b[at] = v;
    c = crc32_ref(b + 24, le32(b + 12));
    for (int i = 0; i < 4; i++)
        b[16 + i] = (uint8_t)(c >> (8 * i));
    c = crc32_ref(b, 20);
    for (int i = 0; i < 4; i++)
        b[20 + i] = (uint8_t)(c >> (8 * i));
}

static void test_ckpt_crafted_headers_refused(void **state)
{
    fixture *f = *state;
    mt_ckpt_writer *w = NULL;
    mt_ckpt *ck = (mt_ckpt *)1;
    mt_err err = MT_ERR_INIT;
    float x[2] = {1, 2};
    int64_t s2[] = {2};
    size_t len;
    uint8_t *b;

    assert_int_equal(mt_ckpt_writer_open(f->path, &w, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "aa", MT_CKPT_F32, s2, 1, x, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "ab", MT_CKPT_F32, s2, 1, x, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_commit(w, NULL), MT_OK);
    b = slurp(f->path, &len);
    /* entries start at 24 + 40 (no spec); entry 1 is 66 bytes; entry 2's name at 132 */
    assert_int_equal(b[64], 2);
    assert_memory_equal(b + 132, "ab", 2);
    patch_header(b, 133, 'a');
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "header: tensor 'aa' appears twice");
    patch_header(b, 133, 'b');
    patch_header(b, 68, 9); /* dtype of "aa" */
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "tensor 'aa': unknown dtype 9");
    patch_header(b, 68, MT_CKPT_F64); /* byte length no longer matches the shape */
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "tensor 'aa': byte length does not match its shape");
    patch_header(b, 68, MT_CKPT_F32);
    patch_header(b, 69, 9); /* rank */
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "tensor 'aa': bad rank");
    patch_header(b, 69, 1);
    patch_header(b, 78, 8); /* offset of "aa": 8 instead of 0 */
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "tensor 'aa': data offset 8, expected 0");
    patch_header(b, 78, 0);
    assert_int_equal(mt_ckpt_open_mem(b, len, &ck, &err), MT_OK);
    mt_ckpt_close(ck);
    free(b);
}

/* ---------------------------------------------------------------- Merkle digests */

/* Every tensor records its core/digest digest; the weights root is what the safetensors export
 * records and what its data gives; a flipped data bit with a consistent crc32 is caught by the
 * digest check and named. */
static void test_ckpt_records_merkle_digests(void **state)
{
    fixture *f = *state;
    char out[160];
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;
    mt_ckpt_tensor_info info;
    mt_digest d, w1, w2, all, st;
    layout_info li;
    size_t len;
    uint8_t *b;
    bool rec = false;
    int n = 0;

    write_standard(f->path);
    assert_int_equal(mt_ckpt_open(f->path, &ck, &err), MT_OK);
    assert_int_equal(mt_ckpt_find(ck, "dense_1.kernel", &info, &err), MT_OK);
    assert_true(info.has_digest);
    mt_digest_tensor_desc desc = {"dense_1.kernel", "F32", 4, 2, k1_shape};
    assert_int_equal(mt_digest_tensor_whole(&desc, k1, &d, NULL), MT_OK);
    assert_true(mt_digest_equal(&d, &info.digest));
    assert_int_equal(mt_ckpt_compute_digest(ck, "dense_1.kernel", &d, &err), MT_OK);
    assert_true(mt_digest_equal(&d, &info.digest));
    assert_int_equal(mt_ckpt_root(ck, true, false, &w1, &n, &err), MT_OK);
    assert_int_equal(n, 3); /* the adam slot is not a weight */
    assert_int_equal(mt_ckpt_root(ck, true, true, &w2, &n, &err), MT_OK);
    assert_true(mt_digest_equal(&w1, &w2));
    assert_int_equal(mt_ckpt_root(ck, false, false, &all, &n, &err), MT_OK);
    assert_int_equal(n, 4);
    assert_false(mt_digest_equal(&w1, &all));
    snprintf(out, sizeof(out), "%s/w.safetensors", f->dir);
    assert_int_equal(mt_ckpt_export_safetensors(ck, out, &err), MT_OK);
    assert_int_equal(mt_ckpt_safetensors_digest(out, &st, &n, &rec, &err), MT_OK);
    assert_true(rec);
    assert_int_equal(n, 3);
    assert_true(mt_digest_equal(&st, &w1));
    mt_ckpt_close(ck);

    /* a bit flipped inside dense_1.bias's data, its crc32 and the header crcs made consistent */
    b = slurp(f->path, &len);
    decode(b, &li);
    for (int t = 0; t < li.n; t++) {
        if (strcmp(li.names[t], "dense_1.bias") != 0)
            continue;
        b[li.start[t] + 5] ^= 0x01;
        uint32_t c = crc32_ref(b + li.start[t], (size_t)(li.end[t] - li.start[t]));
        for (int i = 0; i < 4; i++)
            b[li.crc_at[t] + i] = (uint8_t)(c >> (8 * i));
        patch_header(b, li.crc_at[t], b[li.crc_at[t]]); /* header and preamble crcs */
    }
    spit(f->path, b, len);
    free(b);
    assert_int_equal(mt_ckpt_open(f->path, &ck, &err), MT_OK); /* every crc32 agrees */
    assert_int_equal(mt_ckpt_root(ck, true, false, &w2, NULL, &err), MT_OK); /* as recorded */
    assert_true(mt_digest_equal(&w1, &w2));
    assert_int_equal(mt_ckpt_root(ck, true, true, &w2, NULL, &err), MT_DATA_LOSS);
    assert_contains(err.msg, "tensor 'dense_1.bias': Merkle digest of the data");
    mt_ckpt_close(ck);
    snprintf(out, sizeof(out), "%s/none.safetensors", f->dir);
    assert_int_equal(mt_ckpt_safetensors_digest(out, &st, &n, &rec, &err), MT_NOT_FOUND);
    assert_int_equal(mt_ckpt_safetensors_digest(f->path, &st, &n, &rec, &err), MT_INVALID_ARGUMENT);
}

/* A version 1 checkpoint (tests/fixtures/ckpt-compat, written before digests) reads: it records
 * no digest, its roots are recomputed on request and refused from the record. */
static void test_ckpt_version1_has_no_digests(void **state)
{
    (void)state;
    const char *src = getenv("MT_SOURCE_DIR");
    char path[1024];
    mt_ckpt *ck = NULL;
    mt_ckpt_tensor_info info;
    mt_digest d;
    mt_err err = MT_ERR_INIT;
    int n = 0;

    if (src == NULL)
        skip();
    snprintf(path, sizeof(path), "%s/tests/fixtures/ckpt-compat/ckpt-6-ac32123.mtc", src);
    assert_int_equal(mt_ckpt_open(path, &ck, &err), MT_OK);
    assert_int_equal(mt_ckpt_tensor_at(ck, 0, &info, &err), MT_OK);
    assert_false(info.has_digest);
    assert_int_equal(mt_ckpt_root(ck, false, false, &d, NULL, &err), MT_FAILED_PRECONDITION);
    assert_contains(err.msg, "format version 1 records no digests");
    assert_int_equal(mt_ckpt_root(ck, false, true, &d, &n, &err), MT_OK);
    assert_int_equal(n, mt_ckpt_count(ck));
    mt_ckpt_close(ck);
}

/* ---------------------------------------------------------------- safetensors */

/* An independent safetensors reader: checks the layout rules and returns the parsed header. */
static cJSON *read_safetensors(const uint8_t *b, size_t len, const uint8_t **data, size_t *dlen)
{
    uint64_t n;
    cJSON *h, *e;
    uint64_t covered = 0;
    char *txt;

    assert_true(len >= 8);
    n = le64(b);
    assert_true(n % 8 == 0);
    assert_true(8 + n <= len);
    txt = malloc(n + 1);
    memcpy(txt, b + 8, n);
    txt[n] = '\0';
    h = cJSON_Parse(txt);
    free(txt);
    assert_non_null(h);
    *data = b + 8 + n;
    *dlen = len - 8 - n;
    cJSON_ArrayForEach(e, h)
    {
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        cJSON *off = cJSON_GetObjectItem(e, "data_offsets");
        cJSON *shape = cJSON_GetObjectItem(e, "shape");
        uint64_t bytes = 4;
        assert_string_equal(cJSON_GetObjectItem(e, "dtype")->valuestring, "F32");
        cJSON *d;
        cJSON_ArrayForEach(d, shape) bytes *= (uint64_t)d->valuedouble;
        uint64_t b0 = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
        uint64_t b1e = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        assert_int_equal(b0, covered); /* no holes, in order */
        assert_int_equal(b1e - b0, bytes);
        covered = b1e;
    }
    assert_int_equal(covered, *dlen);
    return h;
}

/* A checkpoint of one weight, plus a "meta/<key>" tensor of dtype dt holding text when key. */
static void write_with_meta(const char *path, const char *key, mt_ckpt_dtype dt, const char *text)
{
    mt_ckpt_writer *w = NULL;
    /* elements of dt that the text's bytes hold (I32: 4 bytes each), never past its end */
    int64_t one = 3, len = text != NULL ? (int64_t)(strlen(text) / (dt == MT_CKPT_I32 ? 4 : 1)) : 0;
    const float v[3] = {1.0f, 2.0f, 3.0f};
    char name[64];

    assert_int_equal(mt_ckpt_writer_open(path, &w, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "dense_1.bias", MT_CKPT_F32, &one, 1, v, NULL), MT_OK);
    if (key != NULL) {
        snprintf(name, sizeof(name), "%s%s", MT_CKPT_META_PREFIX, key);
        assert_int_equal(mt_ckpt_writer_add(w, name, dt, &len, 1, text, NULL), MT_OK);
    }
    assert_int_equal(mt_ckpt_writer_commit(w, NULL), MT_OK);
}

/* Text metadata tensors travel into the export's "__metadata__" and stay out of the roots. */
static void test_ckpt_meta_tensors_travel_to_exports(void **state)
{
    fixture *f = *state;
    char plain[192], with[192], out[192];
    mt_ckpt *a = NULL, *b = NULL;
    mt_digest ra, rb;
    mt_err err = MT_ERR_INIT;
    size_t len, dlen;
    const uint8_t *data;
    uint8_t *buf;
    cJSON *h;
    int na = 0, nb = 0;

    snprintf(plain, sizeof(plain), "%s/plain.mtc", f->dir);
    snprintf(with, sizeof(with), "%s/with.mtc", f->dir);
    snprintf(out, sizeof(out), "%s/m.safetensors", f->dir);
    write_with_meta(plain, NULL, MT_CKPT_U8, NULL);
    write_with_meta(with, "meshtrain.tokenizer", MT_CKPT_U8, "meshtrain-vocab 1\nvocab \"x\"\n");
    assert_int_equal(mt_ckpt_open(plain, &a, &err), MT_OK);
    assert_int_equal(mt_ckpt_open(with, &b, &err), MT_OK);
    for (int weights_only = 0; weights_only < 2; weights_only++) {
        assert_int_equal(mt_ckpt_root(a, weights_only, false, &ra, &na, &err), MT_OK);
        assert_int_equal(mt_ckpt_root(b, weights_only, true, &rb, &nb, &err), MT_OK);
        assert_true(mt_digest_equal(&ra, &rb));
        assert_int_equal(na, nb);
    }
    assert_int_equal(mt_ckpt_export_safetensors(b, out, &err), MT_OK);
    buf = slurp(out, &len);
    h = read_safetensors(buf, len, &data, &dlen);
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(h, "__metadata__"), "meshtrain.tokenizer")
            ->valuestring,
        "meshtrain-vocab 1\nvocab \"x\"\n");
    assert_null(cJSON_GetObjectItem(h, "meta/meshtrain.tokenizer"));
    cJSON_Delete(h);
    free(buf);
    mt_ckpt_close(a);
    mt_ckpt_close(b);
    /* metadata that is not U8 text refuses the export, naming it */
    write_with_meta(with, "k", MT_CKPT_I32, "abcd");
    assert_int_equal(mt_ckpt_open(with, &b, &err), MT_OK);
    assert_int_equal(mt_ckpt_export_safetensors(b, out, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "metadata 'meta/k' is not text"));
    mt_ckpt_close(b);
}

static void test_ckpt_export_safetensors_weights_only(void **state)
{
    fixture *f = *state;
    char out[192];
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;
    size_t len, dlen;
    const uint8_t *data;
    uint8_t *b;
    cJSON *h, *e;

    write_standard(f->path);
    snprintf(out, sizeof(out), "%s/model.safetensors", f->dir);
    assert_int_equal(mt_ckpt_open(f->path, &ck, &err), MT_OK);
    assert_int_equal(mt_ckpt_export_safetensors(ck, out, &err), MT_OK);
    mt_ckpt_close(ck);
    assert_int_equal(count_files(f->dir), 2);
    b = slurp(out, &len);
    h = read_safetensors(b, len, &data, &dlen);
    assert_null(cJSON_GetObjectItem(h, "dense_1.kernel/adam_m"));
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(h, "__metadata__"), "step")->valuestring, "7");
    e = cJSON_GetObjectItem(h, "dense_1.kernel");
    assert_non_null(e);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "shape"), 0)->valuedouble, K1_R);
    assert_memory_equal(
        data + (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(e, "data_offsets"), 0)->valuedouble,
        k1, sizeof(k1));
    e = cJSON_GetObjectItem(h, "dense_2.kernel");
    assert_memory_equal(
        data + (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(e, "data_offsets"), 0)->valuedouble,
        k2, sizeof(k2));
    assert_int_equal(cJSON_GetArraySize(h), 4); /* metadata + 3 weights */
    cJSON_Delete(h);
    free(b);
}

static void test_ckpt_export_without_weights_fails(void **state)
{
    fixture *f = *state;
    mt_ckpt_writer *w = NULL;
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;
    float x = 1;
    int64_t s[] = {1};
    char out[192];

    assert_int_equal(mt_ckpt_writer_open(f->path, &w, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "w/adam_m", MT_CKPT_F32, s, 1, &x, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_commit(w, NULL), MT_OK);
    assert_int_equal(mt_ckpt_open(f->path, &ck, NULL), MT_OK);
    snprintf(out, sizeof(out), "%s/m.safetensors", f->dir);
    assert_int_equal(mt_ckpt_export_safetensors(ck, out, &err), MT_FAILED_PRECONDITION);
    assert_contains(err.msg, "holds no weights");
    assert_int_equal(mt_ckpt_export_safetensors(ck, "/nonexistent/m.safetensors", &err),
                     MT_FAILED_PRECONDITION);
    mt_ckpt_close(ck);
    write_standard(f->path);
    assert_int_equal(mt_ckpt_open(f->path, &ck, NULL), MT_OK);
    assert_int_equal(mt_ckpt_export_safetensors(ck, "/nonexistent/m.safetensors", &err),
                     MT_NOT_FOUND);
    mt_ckpt_close(ck);
    assert_int_equal(count_files(f->dir), 1);
}

/* A plan over the standard checkpoint: a transpose, a 4-axis permutation of a reshaped view
 * (the torch layout's flatten conversion), a copy and a constant. */
static int map_plan(mt_ckpt_export_tensor *p)
{
    memset(p, 0, 4 * sizeof(*p));
    snprintf(p[0].name, sizeof(p[0].name), "dense_1.weight");
    p[0].source = "dense_1.kernel";
    p[0].rank = 2, p[0].shape[0] = K1_C, p[0].shape[1] = K1_R;
    p[0].view_rank = 2, p[0].view_shape[0] = K1_R, p[0].view_shape[1] = K1_C;
    p[0].perm[0] = 1, p[0].perm[1] = 0;
    snprintf(p[1].name, sizeof(p[1].name), "nchw.weight");
    p[1].source = "dense_1.kernel"; /* (h=2, w=3, c=2, out=8) -> (out, c, h, w) */
    p[1].rank = 2, p[1].shape[0] = K1_C, p[1].shape[1] = K1_R;
    p[1].view_rank = 4;
    p[1].view_shape[0] = 2, p[1].view_shape[1] = 3, p[1].view_shape[2] = 2;
    p[1].view_shape[3] = K1_C;
    p[1].perm[0] = 3, p[1].perm[1] = 2, p[1].perm[2] = 0, p[1].perm[3] = 1;
    snprintf(p[2].name, sizeof(p[2].name), "dense_1.bias");
    p[2].source = "dense_1.bias";
    p[2].rank = 1, p[2].shape[0] = K1_C;
    snprintf(p[3].name, sizeof(p[3].name), "bn.weight");
    p[3].fill = 1.0f;
    p[3].rank = 1, p[3].shape[0] = 3;
    return 4;
}

static const float *st_data(cJSON *h, const uint8_t *data, const char *name)
{
    cJSON *e = cJSON_GetObjectItem(h, name);
    assert_non_null(e);
    return (const float *)(data +
                           (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(e, "data_offsets"), 0)
                               ->valuedouble);
}

static void test_ckpt_export_map_renames_and_permutes(void **state)
{
    fixture *f = *state;
    mt_ckpt_export_tensor plan[4];
    const char *meta[] = {"layout", "torch", NULL};
    char out[192];
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;
    size_t len, dlen;
    const uint8_t *data;
    const float *x;
    uint8_t *b;
    cJSON *h, *m;
    int n = map_plan(plan);

    write_standard(f->path);
    snprintf(out, sizeof(out), "%s/t.safetensors", f->dir);
    assert_int_equal(mt_ckpt_open(f->path, &ck, &err), MT_OK);
    assert_int_equal(mt_ckpt_export_safetensors_map(ck, plan, n, meta, out, &err), MT_OK);
    mt_ckpt_close(ck);
    assert_int_equal(count_files(f->dir), 2);
    b = slurp(out, &len);
    h = read_safetensors(b, len, &data, &dlen);
    assert_int_equal(cJSON_GetArraySize(h), 5); /* metadata + 4 */
    m = cJSON_GetObjectItem(h, "__metadata__");
    assert_string_equal(cJSON_GetObjectItem(m, "layout")->valuestring, "torch");
    assert_string_equal(cJSON_GetObjectItem(m, "step")->valuestring, "7");
    x = st_data(h, data, "dense_1.weight");
    for (int o = 0; o < K1_C; o++)
        for (int i = 0; i < K1_R; i++)
            assert_true(x[o * K1_R + i] == k1[i * K1_C + o]);
    x = st_data(h, data, "nchw.weight");
    for (int o = 0; o < K1_C; o++)
        for (int hh = 0; hh < 2; hh++)
            for (int w = 0; w < 3; w++)
                for (int c = 0; c < 2; c++)
                    assert_true(x[o * 12 + c * 6 + hh * 3 + w] ==
                                k1[((hh * 3 + w) * 2 + c) * K1_C + o]);
    assert_memory_equal(st_data(h, data, "dense_1.bias"), b1, sizeof(b1));
    x = st_data(h, data, "bn.weight");
    assert_true(x[0] == 1.0f && x[1] == 1.0f && x[2] == 1.0f);
    cJSON_Delete(h);
    free(b);
}

static void test_ckpt_export_map_errors(void **state)
{
    fixture *f = *state;
    mt_ckpt_export_tensor plan[4], bad[4];
    mt_ckpt_writer *w = NULL;
    mt_ckpt *ck = NULL;
    mt_err err = MT_ERR_INIT;
    char out[192];
    int32_t iv[2] = {1, 2};
    int64_t s2[] = {2};
    int n = map_plan(plan);

    write_standard(f->path);
    snprintf(out, sizeof(out), "%s/t.safetensors", f->dir);
    assert_int_equal(mt_ckpt_open(f->path, &ck, NULL), MT_OK);
    assert_int_equal(mt_ckpt_export_safetensors_map(ck, plan, 0, NULL, out, &err),
                     MT_FAILED_PRECONDITION);
    memcpy(bad, plan, sizeof(plan));
    bad[2].source = "dense_9.bias";
    assert_int_equal(mt_ckpt_export_safetensors_map(ck, bad, n, NULL, out, &err), MT_NOT_FOUND);
    memcpy(bad, plan, sizeof(plan));
    bad[2].shape[0] = K1_C + 1; /* 9 elements from 8 */
    assert_int_equal(mt_ckpt_export_safetensors_map(ck, bad, n, NULL, out, &err),
                     MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "dense_1.bias");
    memcpy(bad, plan, sizeof(plan));
    bad[1].perm[1] = 3; /* axis 3 twice */
    assert_int_equal(mt_ckpt_export_safetensors_map(ck, bad, n, NULL, out, &err),
                     MT_INVALID_ARGUMENT);
    memcpy(bad, plan, sizeof(plan));
    bad[1].view_shape[0] = 3; /* 144 elements viewed for 96 */
    assert_int_equal(mt_ckpt_export_safetensors_map(ck, bad, n, NULL, out, &err),
                     MT_INVALID_ARGUMENT);
    memcpy(bad, plan, sizeof(plan));
    snprintf(bad[3].name, sizeof(bad[3].name), "dense_1.bias");
    assert_int_equal(mt_ckpt_export_safetensors_map(ck, bad, n, NULL, out, &err),
                     MT_INVALID_ARGUMENT);
    assert_contains(err.msg, "duplicate");
    assert_int_equal(mt_ckpt_export_safetensors_map(ck, plan, n, NULL, "/nonexistent/t", &err),
                     MT_NOT_FOUND);
    mt_ckpt_close(ck);
    assert_int_equal(count_files(f->dir), 1); /* nothing written, no temporary file */

    assert_int_equal(mt_ckpt_writer_open(f->path, &w, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_add(w, "ids", MT_CKPT_I32, s2, 1, iv, NULL), MT_OK);
    assert_int_equal(mt_ckpt_writer_commit(w, NULL), MT_OK);
    assert_int_equal(mt_ckpt_open(f->path, &ck, NULL), MT_OK);
    memset(bad, 0, sizeof(bad[0]));
    snprintf(bad[0].name, sizeof(bad[0].name), "ids");
    bad[0].source = "ids";
    bad[0].rank = 1, bad[0].shape[0] = 2;
    assert_int_equal(mt_ckpt_export_safetensors_map(ck, bad, 1, NULL, out, &err),
                     MT_FAILED_PRECONDITION);
    assert_contains(err.msg, "not F32");
    mt_ckpt_close(ck);
    assert_int_equal(count_files(f->dir), 1);
}

static void test_ckpt_export_map_alloc_failure(void **state)
{
    fixture *f = *state;
    mt_ckpt_export_tensor plan[4];
    const char *meta[] = {"layout", "torch", NULL};
    char out[192];
    mt_ckpt *ck = NULL;
    int n = map_plan(plan);
    long k;

    write_standard(f->path);
    snprintf(out, sizeof(out), "%s/t.safetensors", f->dir);
    assert_int_equal(mt_ckpt_open(f->path, &ck, NULL), MT_OK);
    for (k = 0;; k++) {
        mt_alloc_fail_after(k);
        mt_code rc = mt_ckpt_export_safetensors_map(ck, plan, n, meta, out, NULL);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_int_equal(count_files(f->dir), 1);
    }
    assert_true(k >= 3);
    mt_ckpt_close(ck);
}

/* ---------------------------------------------------------------- retention */

static void touch(const char *dir, const char *name)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    spit(p, (const uint8_t *)"x", 1);
}

static void test_ckpt_retention_keeps_last_n(void **state)
{
    fixture *f = *state;
    uint64_t *steps, step;
    int n, removed;
    mt_err err = MT_ERR_INIT;
    char p[64];

    touch(f->dir, "ckpt-1.mtc");
    touch(f->dir, "ckpt-2.mtc");
    touch(f->dir, "ckpt-10.mtc");
    touch(f->dir, "ckpt-3.mtc");
    touch(f->dir, "ckpt-4.mtc.tmp.abcdef"); /* a writer in progress */
    touch(f->dir, "ckpt-x.mtc");
    touch(f->dir, "notes.txt");
    assert_int_equal(mt_ckpt_list(f->dir, &steps, &n, &err), MT_OK);
    assert_int_equal(n, 4);
    assert_int_equal(steps[0], 1);
    assert_int_equal(steps[3], 10);
    mt_free(steps);
    assert_int_equal(mt_ckpt_latest(f->dir, &step, &err), MT_OK);
    assert_int_equal(step, 10);
    assert_int_equal(mt_ckpt_retain(f->dir, 2, &removed, &err), MT_OK);
    assert_int_equal(removed, 2);
    assert_int_equal(count_files(f->dir), 5);
    assert_int_equal(mt_ckpt_list(f->dir, &steps, &n, &err), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(steps[0], 3);
    assert_int_equal(steps[1], 10);
    mt_free(steps);
    assert_int_equal(mt_ckpt_retain(f->dir, 5, &removed, &err), MT_OK);
    assert_int_equal(removed, 0);
    assert_int_equal(mt_ckpt_retain(f->dir, 0, &removed, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_ckpt_retain("/nonexistent-dir", 1, NULL, &err), MT_NOT_FOUND);
    assert_int_equal(mt_ckpt_latest("/nonexistent-dir", &step, &err), MT_NOT_FOUND);
    assert_int_equal(mt_ckpt_path(p, sizeof(p), "/d", 42, &err), MT_OK);
    assert_string_equal(p, "/d/ckpt-42.mtc");
    assert_int_equal(mt_ckpt_path(p, 8, "/d", 42, &err), MT_INVALID_ARGUMENT);
}

static void test_ckpt_latest_empty_dir_not_found(void **state)
{
    fixture *f = *state;
    uint64_t step;
    mt_err err = MT_ERR_INIT;
    assert_int_equal(mt_ckpt_latest(f->dir, &step, &err), MT_NOT_FOUND);
    assert_contains(err.msg, "no ckpt-<step>.mtc");
}

static void test_ckpt_dtype_tables(void **state)
{
    (void)state;
    assert_int_equal(mt_ckpt_dtype_size(MT_CKPT_F32), 4);
    assert_int_equal(mt_ckpt_dtype_size(MT_CKPT_I64), 8);
    assert_int_equal(mt_ckpt_dtype_size(MT_CKPT_U8), 1);
    assert_int_equal(mt_ckpt_dtype_size((mt_ckpt_dtype)0), 0);
    assert_string_equal(mt_ckpt_dtype_name(MT_CKPT_F64), "F64");
    assert_string_equal(mt_ckpt_dtype_name((mt_ckpt_dtype)77), "?");
}

/* ---------------------------------------------------------------- allocation failure */

static mt_code write_all_steps(const char *path)
{
    mt_ckpt_writer *w = NULL;
    int64_t off[2] = {0, 0};
    mt_code rc = mt_ckpt_writer_open(path, &w, NULL);
    if (rc != MT_OK)
        return rc;
    rc = mt_ckpt_writer_set_spec(w, spec_text, NULL);
    if (rc == MT_OK)
        rc = mt_ckpt_writer_add(w, "dense_1.bias", MT_CKPT_F32, b1_shape, 1, b1, NULL);
    if (rc == MT_OK)
        rc = mt_ckpt_writer_begin(w, "dense_1.kernel", MT_CKPT_F32, k1_shape, 2, NULL);
    if (rc == MT_OK)
        rc = mt_ckpt_writer_put_slice(w, off, k1_shape, k1, NULL);
    if (rc == MT_OK)
        rc = mt_ckpt_writer_end(w, NULL);
    if (rc != MT_OK) {
        mt_ckpt_writer_abort(w);
        return rc;
    }
    return mt_ckpt_writer_commit(w, NULL);
}

static void test_ckpt_alloc_failure_no_leak(void **state)
{
    fixture *f = *state;
    size_t len;
    uint8_t *b;
    long n;

    fill_data();
    for (n = 0;; n++) {
        mt_alloc_fail_after(n);
        mt_code rc = write_all_steps(f->path);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_int_equal(count_files(f->dir), 0);
    }
    assert_true(n > 5);
    b = slurp(f->path, &len);
    for (n = 0;; n++) {
        mt_ckpt *ck = (mt_ckpt *)1, *ck2 = (mt_ckpt *)1;
        mt_alloc_fail_after(n);
        mt_code rc = mt_ckpt_open_mem(b, len, &ck, NULL);
        mt_alloc_fail_reset();
        mt_alloc_fail_after(n);
        mt_code rc2 = mt_ckpt_open(f->path, &ck2, NULL);
        mt_alloc_fail_reset();
        if (rc == MT_OK && rc2 == MT_OK) {
            mt_ckpt_close(ck);
            mt_ckpt_close(ck2);
            break;
        }
        if (rc == MT_OK)
            mt_ckpt_close(ck);
        else
            assert_null(ck);
        if (rc2 == MT_OK)
            mt_ckpt_close(ck2);
        else
            assert_int_equal(rc2, MT_RESOURCE_EXHAUSTED);
    }
    assert_true(n > 3);
    free(b);
}

static void test_ckpt_export_and_list_alloc_failure(void **state)
{
    fixture *f = *state;
    char out[192];
    mt_ckpt *ck = NULL;
    long n;

    write_standard(f->path);
    snprintf(out, sizeof(out), "%s/m.safetensors", f->dir);
    assert_int_equal(mt_ckpt_open(f->path, &ck, NULL), MT_OK);
    for (n = 0;; n++) {
        mt_alloc_fail_after(n);
        mt_code rc = mt_ckpt_export_safetensors(ck, out, NULL);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_int_equal(count_files(f->dir), 1); /* no output, no temporary file */
    }
    assert_true(n >= 2);
    mt_ckpt_close(ck);
    for (n = 0;; n++) {
        uint64_t *steps = NULL;
        int cnt = -1;
        mt_alloc_fail_after(n);
        mt_code rc = mt_ckpt_list(f->dir, &steps, &cnt, NULL);
        mt_alloc_fail_reset();
        if (rc == MT_OK) {
            assert_int_equal(cnt, 1);
            assert_int_equal(steps[0], 7);
            mt_free(steps);
            break;
        }
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
        assert_null(steps);
    }
    assert_true(n >= 1);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_ckpt_round_trip_and_metadata),
        T(test_ckpt_read_slice_any_layout),
        T(test_ckpt_read_slice_paths_agree),
        T(test_ckpt_scalar_and_empty_tensors),
        T(test_ckpt_writer_errors),
        T(test_ckpt_commit_replaces_and_abort_leaves_old),
        T(test_ckpt_truncation_at_every_byte),
        T(test_ckpt_bit_flip_names_tensor),
        T(test_ckpt_bad_magic_version_and_missing),
        T(test_ckpt_crafted_headers_refused),
        T(test_ckpt_records_merkle_digests),
        T(test_ckpt_version1_has_no_digests),
        T(test_ckpt_meta_tensors_travel_to_exports),
        T(test_ckpt_export_safetensors_weights_only),
        T(test_ckpt_export_without_weights_fails),
        T(test_ckpt_export_map_renames_and_permutes),
        T(test_ckpt_export_map_errors),
        T(test_ckpt_export_map_alloc_failure),
        T(test_ckpt_retention_keeps_last_n),
        T(test_ckpt_latest_empty_dir_not_found),
        T(test_ckpt_dtype_tables),
        T(test_ckpt_alloc_failure_no_leak),
        T(test_ckpt_export_and_list_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
