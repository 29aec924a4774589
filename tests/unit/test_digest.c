/* SPDX-License-Identifier: MIT */
/*
 * test_digest.c — unit tests for core/digest (mt_digest.h): the digest of a tensor sharded 1, 2
 * and 4 ways along each axis (and two axes at once, with replicas, uneven splits) equals the
 * whole tensor's; elements no shard holds come from fill or fail; known answers for the byte
 * format (the same vectors as docs/reproducibility.md's Python, checked there by
 * tests/integration/test_digest.sh); roots by name order; hex; allocation failures; and on the
 * real engine (mt_spmd_digest): the same state on replicated, model-parallel, 2-D and FSDP
 * meshes has one digest, equal to its checkpoint's state root, also after a restore onto
 * another mesh.
 */
#include "mt_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "ckpt/mt_ckpt.h"
#include "digest/digest_int.h"
#include "digest/mt_digest.h"
#include "jobspec/mt_jobspec.h"
#include "spmd/mt_spmd.h"

/* hex of the known-answer vectors (docs/reproducibility.md's Python prints the same) */
#define KA_TENSOR_A   "3e854e0d9d506a4444a6d0b357352e9d3acb8d83c828111c32025f8a6575fc57"
#define KA_ROOT       "728f14f7217fb3f6d9aef62e4499d92392c3aa5bd367b38506226062960b0d4f"
#define KA_EMPTY_ROOT "a665e6b115dd56fd3e0c89be631e6eda8e9666b822e0bd7026bf0822c4bbc68f"

/* A tensor with values that differ everywhere: v[i] = i * 0.5 - 7. */
static float *make_tensor(const int64_t *shape, int rank, uint64_t *count)
{
    uint64_t n = 1;
    for (int a = 0; a < rank; a++)
        n *= (uint64_t)shape[a];
    float *v = malloc((n ? n : 1) * sizeof(float));
    for (uint64_t i = 0; i < n; i++)
        v[i] = (float)i * 0.5f - 7.0f;
    *count = n;
    return v;
}

/* Copy the box at off/loc of a global row-major tensor into a new buffer. */
static float *cut(const float *g, const int64_t *shape, int rank, const int64_t *off,
                  const int64_t *loc)
{
    uint64_t n = 1;
    for (int a = 0; a < rank; a++)
        n *= (uint64_t)loc[a];
    float *out = malloc((n ? n : 1) * sizeof(float));
    for (uint64_t i = 0; i < n; i++) {
        uint64_t rem = i, gi = 0, stride = 1;
        for (int a = rank - 1; a >= 0; a--) {
            uint64_t c = rem % (uint64_t)loc[a] + (uint64_t)off[a];
            rem /= (uint64_t)loc[a];
            gi += c * stride;
            stride *= (uint64_t)shape[a];
        }
        out[i] = g[gi];
    }
    return out;
}

typedef struct fixture_dir {
    char dir[64];
} fixture_dir;

typedef struct split {
    int nshards;
    int64_t off[16][MT_DIGEST_MAX_RANK], loc[16][MT_DIGEST_MAX_RANK];
    float *data[16];
    mt_digest_shard s[16];
} split;

/* Split axis a into ka parts and axis b into kb parts (b = -1: one axis); parts may be uneven. */
static void make_split(split *sp, const float *g, const int64_t *shape, int rank, int a, int ka,
                       int b, int kb)
{
    sp->nshards = 0;
    for (int i = 0; i < ka; i++)
        for (int j = 0; j < (b < 0 ? 1 : kb); j++) {
            int k = sp->nshards++;
            for (int x = 0; x < rank; x++)
                sp->off[k][x] = 0, sp->loc[k][x] = shape[x];
            sp->off[k][a] = shape[a] * i / ka;
            sp->loc[k][a] = shape[a] * (i + 1) / ka - sp->off[k][a];
            if (b >= 0) {
                sp->off[k][b] = shape[b] * j / kb;
                sp->loc[k][b] = shape[b] * (j + 1) / kb - sp->off[k][b];
            }
            sp->data[k] = cut(g, shape, rank, sp->off[k], sp->loc[k]);
            sp->s[k].data = sp->data[k];
            sp->s[k].offsets = sp->off[k];
            sp->s[k].local_shape = sp->loc[k];
        }
}

static void free_split(split *sp)
{
    for (int k = 0; k < sp->nshards; k++)
        free(sp->data[k]);
}

/*
 * The split form (mt_digest_leaves in 1, 2 and 3 ranges, some empty, then
 * mt_digest_tensor_from_leaves) gives mt_digest_tensor's digest `whole`.
 */
static void check_split_leaves(const mt_digest_tensor_desc *t, const mt_digest_shard *sh, int n,
                               const mt_digest *whole)
{
    uint64_t nl = 0;
    mt_digest d, *leaves;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_digest_leaf_count(t, &nl, &err), MT_OK);
    leaves = calloc(nl, sizeof(*leaves));
    for (uint64_t parts = 1; parts <= 3; parts++) {
        memset(leaves, 0, nl * sizeof(*leaves));
        for (uint64_t p = 0; p < parts; p++) {
            uint64_t lo = nl * p / parts, hi = nl * (p + 1) / parts;
            assert_int_equal(mt_digest_leaves(t, sh, n, NULL, NULL, lo, hi - lo, leaves + lo, &err),
                             MT_OK);
        }
        assert_int_equal(mt_digest_tensor_from_leaves(t, leaves, nl, &d, &err), MT_OK);
        if (!mt_digest_equal(&d, whole))
            fail_msg("tensor of %llu leaves hashed in %llu ranges: another digest",
                     (unsigned long long)nl, (unsigned long long)parts);
    }
    /* a range past the end, a wrong leaf count */
    assert_int_equal(mt_digest_leaves(t, sh, n, NULL, NULL, nl, 1, leaves, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "outside its"));
    assert_int_equal(mt_digest_tensor_from_leaves(t, leaves, nl + 1, &d, &err),
                     MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "leaves given"));
    free(leaves);
}

static void check_shapes(const int64_t *shape, int rank)
{
    uint64_t n;
    float *g = make_tensor(shape, rank, &n);
    mt_digest_tensor_desc t = {"layer.kernel", "F32", 4, rank, shape};
    mt_digest whole, d;
    mt_err err = MT_ERR_INIT;
    static const int ks[] = {1, 2, 4};

    assert_int_equal(mt_digest_tensor_whole(&t, g, &whole, &err), MT_OK);
    for (int a = 0; a < rank; a++)
        for (int ki = 0; ki < 3; ki++) {
            split sp;
            make_split(&sp, g, shape, rank, a, ks[ki], -1, 1);
            assert_int_equal(mt_digest_tensor(&t, sp.s, sp.nshards, NULL, NULL, &d, &err), MT_OK);
            if (!mt_digest_equal(&d, &whole))
                fail_msg("shape rank %d: axis %d split %d ways gives another digest", rank, a,
                         ks[ki]);
            /* shards in reverse order, and every shard twice (replicas) */
            mt_digest_shard rev[32];
            for (int k = 0; k < sp.nshards; k++)
                rev[k] = rev[2 * sp.nshards - 1 - k] = sp.s[sp.nshards - 1 - k];
            assert_int_equal(mt_digest_tensor(&t, rev, 2 * sp.nshards, NULL, NULL, &d, &err),
                             MT_OK);
            assert_true(mt_digest_equal(&d, &whole));
            check_split_leaves(&t, sp.s, sp.nshards, &whole);
            free_split(&sp);
        }
    for (int a = 0; a < rank; a++) /* two axes at once: the 2-D meshes' layouts */
        for (int b = a + 1; b < rank; b++) {
            split sp;
            make_split(&sp, g, shape, rank, a, 2, b, 4);
            assert_int_equal(mt_digest_tensor(&t, sp.s, sp.nshards, NULL, NULL, &d, &err), MT_OK);
            assert_true(mt_digest_equal(&d, &whole));
            free_split(&sp);
        }
    free(g);
}

static void test_digest_shard_independent(void **state)
{
    (void)state;
    int64_t s1[] = {20000};         /* 5 blocks, the last short */
    int64_t s2[] = {67, 129};       /* 3 blocks, rows cut by blocks */
    int64_t s3[] = {5, 33, 97};     /* 4 blocks */
    int64_t s4[] = {3, 3, 16, 200}; /* a conv kernel of 7 blocks (odd: a node goes up unchanged) */
    int64_t s5[] = {4097, 1};       /* rows of one element */
    check_shapes(s1, 1);
    check_shapes(s2, 2);
    check_shapes(s3, 3);
    check_shapes(s4, 4);
    check_shapes(s5, 2);
    { /* a tensor of 0 elements has one (empty) leaf */
        int64_t s0[] = {0, 3};
        mt_digest_tensor_desc t = {"empty", "F32", 4, 2, s0};
        mt_digest whole;
        mt_err err = MT_ERR_INIT;
        assert_int_equal(mt_digest_tensor(&t, NULL, 0, NULL, NULL, &whole, &err), MT_OK);
        check_split_leaves(&t, NULL, 0, &whole);
    }
}

static void test_digest_values_names_shapes_matter(void **state)
{
    (void)state;
    int64_t shape[] = {64, 100}, other[] = {100, 64};
    uint64_t n;
    float *g = make_tensor(shape, 2, &n);
    mt_digest_tensor_desc t = {"w", "F32", 4, 2, shape};
    mt_digest a, b;

    assert_int_equal(mt_digest_tensor_whole(&t, g, &a, NULL), MT_OK);
    g[5000] = -g[5000]; /* one sign bit in the second block */
    assert_int_equal(mt_digest_tensor_whole(&t, g, &b, NULL), MT_OK);
    assert_false(mt_digest_equal(&a, &b));
    g[5000] = -g[5000];
    t.name = "v";
    assert_int_equal(mt_digest_tensor_whole(&t, g, &b, NULL), MT_OK);
    assert_false(mt_digest_equal(&a, &b));
    t.name = "w", t.shape = other;
    assert_int_equal(mt_digest_tensor_whole(&t, g, &b, NULL), MT_OK);
    assert_false(mt_digest_equal(&a, &b));
    t.shape = shape, t.dtype = "I32";
    assert_int_equal(mt_digest_tensor_whole(&t, g, &b, NULL), MT_OK);
    assert_false(mt_digest_equal(&a, &b));
    free(g);
}

typedef struct from_buf {
    const float *g;
    int calls;
} from_buf;

static mt_code fill_from(void *ctx, uint64_t first, uint64_t count, void *out, mt_err *err)
{
    from_buf *f = ctx;
    (void)err;
    f->calls++;
    memcpy(out, f->g + first, count * sizeof(float));
    return MT_OK;
}

static mt_code fill_fails(void *ctx, uint64_t first, uint64_t count, void *out, mt_err *err)
{
    (void)ctx, (void)count, (void)out;
    return mt_err_set(err, MT_DATA_LOSS, "fill at %llu", (unsigned long long)first);
}

static void test_digest_missing_elements(void **state)
{
    (void)state;
    int64_t shape[] = {40, 300};
    uint64_t n;
    float *g = make_tensor(shape, 2, &n);
    mt_digest_tensor_desc t = {"dense.kernel", "F32", 4, 2, shape};
    mt_digest whole, d;
    mt_err err = MT_ERR_INIT;
    split sp;
    from_buf fb = {g, 0};

    assert_int_equal(mt_digest_tensor_whole(&t, g, &whole, NULL), MT_OK);
    make_split(&sp, g, shape, 2, 1, 4, -1, 1);
    /* shard 1 (columns 75..149) lives elsewhere */
    sp.s[1] = sp.s[3];
    assert_int_equal(mt_digest_tensor(&t, sp.s, 3, NULL, NULL, &d, &err), MT_FAILED_PRECONDITION);
    assert_non_null(strstr(err.msg, "tensor 'dense.kernel': no shard holds element 75"));
    assert_int_equal(mt_digest_tensor(&t, sp.s, 3, fill_from, &fb, &d, &err), MT_OK);
    assert_true(mt_digest_equal(&d, &whole));
    assert_true(fb.calls >= 40); /* one run per row */
    assert_int_equal(mt_digest_tensor(&t, sp.s, 3, fill_fails, NULL, &d, &err), MT_DATA_LOSS);
    assert_non_null(strstr(err.msg, "fill at 75"));
    /* no shard at all: everything from fill */
    fb.calls = 0;
    assert_int_equal(mt_digest_tensor(&t, NULL, 0, fill_from, &fb, &d, &err), MT_OK);
    assert_true(mt_digest_equal(&d, &whole));
    free_split(&sp);
    free(g);
}

static void test_digest_bad_arguments(void **state)
{
    (void)state;
    int64_t shape[] = {4, 4}, neg[] = {4, -1}, off[] = {2, 0}, loc[] = {3, 4};
    float v[16] = {0};
    mt_digest_tensor_desc t = {"", "F32", 4, 2, shape};
    mt_digest_shard s = {v, off, loc};
    mt_digest d;
    mt_err err = MT_ERR_INIT;

    assert_int_equal(mt_digest_tensor_whole(&t, v, &d, &err), MT_INVALID_ARGUMENT);
    t.name = "x", t.dtype = "";
    assert_int_equal(mt_digest_tensor_whole(&t, v, &d, &err), MT_INVALID_ARGUMENT);
    t.dtype = "F32", t.elem_size = 0;
    assert_int_equal(mt_digest_tensor_whole(&t, v, &d, &err), MT_INVALID_ARGUMENT);
    t.elem_size = 4, t.rank = MT_DIGEST_MAX_RANK + 1;
    assert_int_equal(mt_digest_tensor_whole(&t, v, &d, &err), MT_INVALID_ARGUMENT);
    t.rank = 2, t.shape = neg;
    assert_int_equal(mt_digest_tensor_whole(&t, v, &d, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "axis 1 is negative"));
    t.shape = shape;
    assert_int_equal(mt_digest_tensor(&t, &s, 1, NULL, NULL, &d, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "shard 0 axis 0 [2, 5) outside 0..4"));
}

/*
 * Known answers: the same tensors as the example of docs/reproducibility.md, whose Python gives
 * these hex strings (tests/integration/test_digest.sh runs that Python on a file of them).
 */
static void test_digest_known_answers(void **state)
{
    (void)state;
    int64_t shape[] = {2, 3};
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t none[1] = {0};
    int64_t it = 7;
    mt_digest_tensor_desc t = {"a", "F32", 4, 2, shape};
    mt_digest_tensor_desc e = {"b", "F32", 4, 1, none};
    mt_digest_tensor_desc s = {"c", "I64", 8, 0, NULL};
    mt_digest d[3], root;
    const char *names[3] = {"c", "a", "b"};
    char hex[MT_DIGEST_HEX];

    assert_int_equal(mt_digest_tensor_whole(&t, v, &d[1], NULL), MT_OK);
    assert_int_equal(mt_digest_tensor_whole(&e, v, &d[2], NULL), MT_OK);
    assert_int_equal(mt_digest_tensor_whole(&s, &it, &d[0], NULL), MT_OK);
    assert_int_equal(mt_digest_root(names, d, 3, &root, NULL), MT_OK);
    assert_string_equal(mt_digest_hex(&d[1], hex), KA_TENSOR_A);
    assert_string_equal(mt_digest_hex(&root, hex), KA_ROOT);
    assert_int_equal(mt_digest_root(names, d, 0, &root, NULL), MT_OK);
    assert_string_equal(mt_digest_hex(&root, hex), KA_EMPTY_ROOT);
}

/* The SHA extensions path and mbed TLS give the same bytes: every length 0..300 (all paddings
 * and block boundaries), inputs split in odd parts, and 1 MB. */
static void test_digest_sha_paths_agree(void **state)
{
    (void)state;
    size_t big = 1u << 20;
    uint8_t *b = malloc(big), x[32], y[32];

    for (size_t i = 0; i < big; i++)
        b[i] = (uint8_t)(i * 167 + (i >> 9));
    if (!mt_digest__has_sha_ni()) {
        print_message("no SHA extensions on this CPU: only the portable path runs\n");
        free(b);
        return;
    }
    for (size_t n = 0; n <= 300; n++) {
        const void *one[1] = {b};
        const void *three[3] = {b, b + n / 3, b + n / 3 + n / 5};
        size_t l1[1] = {n}, l3[3] = {n / 3, n / 5, n - n / 3 - n / 5};
        mt_digest__sha256(false, one, l1, 1, x);
        mt_digest__sha256(true, one, l1, 1, y);
        if (memcmp(x, y, 32) != 0)
            fail_msg("SHA paths differ at length %zu", n);
        mt_digest__sha256(true, three, l3, 3, y);
        if (memcmp(x, y, 32) != 0)
            fail_msg("SHA paths differ at length %zu in three parts", n);
    }
    const void *one[1] = {b};
    mt_digest__sha256(false, one, &big, 1, x);
    mt_digest__sha256(true, one, &big, 1, y);
    assert_memory_equal(x, y, 32);
    free(b);
}

static void test_digest_root_order_and_duplicates(void **state)
{
    (void)state;
    mt_digest d[3], r1, r2, sw[3];
    const char *n1[3] = {"b", "a", "c"}, *n2[3] = {"c", "b", "a"}, *dup[3] = {"a", "b", "a"};
    mt_err err = MT_ERR_INIT;

    for (int i = 0; i < 3; i++)
        memset(d[i].b, 'x' + i, MT_DIGEST_SIZE);
    sw[0] = d[2], sw[1] = d[0], sw[2] = d[1];
    assert_int_equal(mt_digest_root(n1, d, 3, &r1, NULL), MT_OK);
    assert_int_equal(mt_digest_root(n2, sw, 3, &r2, NULL), MT_OK);
    assert_true(mt_digest_equal(&r1, &r2));
    assert_int_equal(mt_digest_root(dup, d, 3, &r2, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "tensor 'a' appears twice"));
    assert_int_equal(mt_digest_root(n1, d, -1, &r2, &err), MT_INVALID_ARGUMENT);
}

static void test_digest_hex_round_trip(void **state)
{
    (void)state;
    mt_digest d, e;
    char hex[MT_DIGEST_HEX];
    mt_err err = MT_ERR_INIT;

    for (int i = 0; i < MT_DIGEST_SIZE; i++)
        d.b[i] = (uint8_t)(i * 37 + 1);
    mt_digest_hex(&d, hex);
    assert_int_equal(strlen(hex), 64);
    assert_int_equal(mt_digest_parse_hex(hex, &e, &err), MT_OK);
    assert_true(mt_digest_equal(&d, &e));
    hex[0] = hex[0] == 'a' ? 'A' : hex[0]; /* either case */
    assert_int_equal(mt_digest_parse_hex(hex, &e, &err), MT_OK);
    hex[10] = 'g';
    assert_int_equal(mt_digest_parse_hex(hex, &e, &err), MT_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "not a hex digit at 10"));
    assert_int_equal(mt_digest_parse_hex("abc", &e, &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_digest_parse_hex(NULL, &e, &err), MT_INVALID_ARGUMENT);
}

static void test_digest_alloc_failure(void **state)
{
    (void)state;
    int64_t shape[] = {30, 300};
    uint64_t n;
    float *g = make_tensor(shape, 2, &n);
    mt_digest_tensor_desc t = {"k", "F32", 4, 2, shape};
    mt_digest whole, d;
    const char *names[1] = {"k"};
    split sp;
    mt_code rc;

    assert_int_equal(mt_digest_tensor_whole(&t, g, &whole, NULL), MT_OK);
    make_split(&sp, g, shape, 2, 1, 2, -1, 1);
    for (long k = 0;; k++) {
        mt_alloc_fail_after(k);
        rc = mt_digest_tensor(&t, sp.s, sp.nshards, NULL, NULL, &d, NULL);
        mt_alloc_fail_reset();
        if (rc == MT_OK)
            break;
        assert_int_equal(rc, MT_RESOURCE_EXHAUSTED);
    }
    assert_true(mt_digest_equal(&d, &whole));
    mt_alloc_fail_after(0);
    assert_int_equal(mt_digest_root(names, &d, 1, &d, NULL), MT_RESOURCE_EXHAUSTED);
    mt_alloc_fail_reset();
    free_split(&sp);
    free(g);
}

/* ---------------------------------------------------------------- the engine's state digest */

/* An MLP with batch norm on mesh `mesh` with layouts `layouts` (JSON texts). */
static mt_spmd *engine(const char *mesh, const char *layouts, mt_jobspec **js)
{
    char json[1024];
    size_t in_shape[1] = {40};
    mt_spmd *s = NULL;
    mt_err err = MT_ERR_INIT;

    snprintf(json, sizeof(json),
             "{\"seed\": 3, \"batch_size\": 8, \"optimizer\": \"adam\", \"steps\": 4,"
             " \"dataset\": {\"format\": \"synthetic\", \"features\": 40, \"classes\": 3},"
             " \"mesh\": %s, \"layouts\": %s, \"model\": {\"input_shape\": [40], \"layers\": ["
             "{\"type\": \"dense\", \"units\": 24, \"activation\": \"relu\"},"
             "{\"type\": \"batch_norm\"}, {\"type\": \"dense\", \"units\": 3}]}}",
             mesh, layouts);
    if (mt_jobspec_parse(json, strlen(json), js, &err) != MT_OK)
        fail_msg("spec: %s", err.msg);
    if (mt_spmd_new((*js)->model, (*js)->cfg.mesh, (*js)->cfg.layouts, 1, in_shape, 8, NULL, &s,
                    &err) != MT_OK)
        fail_msg("mt_spmd_new on %s: %s", mesh, err.msg);
    return s;
}

static const char *const meshes[][2] = {
    {"{\"batch\": 1}", "{}"},
    {"{\"batch\": 2}", "{}"},
    {"{\"batch\": 2, \"model\": 2}",
     "{\"dense_1\\\\.kernel\": [\"unsharded\", \"model\"], \"dense_2\\\\.kernel\": [\"model\", "
     "\"unsharded\"]}"},
    {"{\"batch\": 4}", "{\"dense_1\\\\.kernel\": [\"batch\", \"unsharded\"]}"}, /* FSDP */
    {"{\"model\": 4}", "{\"dense_1\\\\.kernel\": [\"model\", \"unsharded\"]}"},
};

static void test_digest_engine_state_mesh_independent(void **state)
{
    fixture_dir d;
    (void)state;
    mt_digest first, dg, wd, ck_root;
    bool have = false;
    mt_err err = MT_ERR_INIT;
    float x[8 * 40];
    int32_t y[8];
    mt_step_metrics m;
    char path[160];
    mt_ckpt *ck = NULL;

    snprintf(d.dir, sizeof(d.dir), "/tmp/mt_digest_test_XXXXXX");
    assert_non_null(mkdtemp(d.dir));
    /* the initial state (shard-exact initialisation, zero slots) on every mesh: one digest */
    for (size_t k = 0; k < sizeof(meshes) / sizeof(meshes[0]); k++) {
        mt_jobspec *js = NULL;
        mt_spmd *s = engine(meshes[k][0], meshes[k][1], &js);
        if (mt_spmd_digest(s, &dg, &err) != MT_OK)
            fail_msg("digest on %s: %s", meshes[k][0], err.msg);
        assert_int_equal(mt_spmd_digest_world(s, &wd, &have, &err), MT_OK);
        assert_true(have);
        if (!mt_digest_equal(&wd, &dg)) /* on replicas the devices share the leaves out */
            fail_msg("mt_spmd_digest_world on %s: another digest than mt_spmd_digest",
                     meshes[k][0]);
        if (k == 0)
            first = dg;
        else if (!mt_digest_equal(&dg, &first))
            fail_msg("initial state on %s %s has another digest", meshes[k][0], meshes[k][1]);
        mt_spmd_free(s);
        mt_jobspec_free(js);
    }
    /* trained on the 2-D mesh, saved, restored on each mesh: the same digest, the checkpoint's */
    for (int i = 0; i < 8 * 40; i++)
        x[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < 8; i++)
        y[i] = i % 3;
    mt_jobspec *js = NULL;
    mt_spmd *s = engine(meshes[2][0], meshes[2][1], &js);
    for (uint64_t step = 0; step < 3; step++)
        assert_int_equal(mt_spmd_step(s, x, y, 8, step, step * 8, &m, &err), MT_OK);
    assert_int_equal(mt_spmd_digest(s, &first, &err), MT_OK);
    snprintf(path, sizeof(path), "%s/ckpt-3.mtc", d.dir);
    assert_int_equal(mt_spmd_save(s, path, NULL, NULL, &err), MT_OK);
    mt_spmd_free(s);
    mt_jobspec_free(js);
    assert_int_equal(mt_ckpt_open(path, &ck, &err), MT_OK);
    assert_int_equal(mt_ckpt_root(ck, false, false, &ck_root, NULL, &err), MT_OK);
    mt_ckpt_close(ck);
    assert_true(mt_digest_equal(&first, &ck_root));
    for (size_t k = 0; k < sizeof(meshes) / sizeof(meshes[0]); k++) {
        s = engine(meshes[k][0], meshes[k][1], &js);
        if (mt_spmd_restore(s, path, NULL, &err) != MT_OK)
            fail_msg("restore on %s: %s", meshes[k][0], err.msg);
        assert_int_equal(mt_spmd_digest(s, &dg, &err), MT_OK);
        if (!mt_digest_equal(&dg, &first))
            fail_msg("restored on %s %s: another digest", meshes[k][0], meshes[k][1]);
        assert_int_equal(mt_spmd_digest_world(s, &wd, &have, &err), MT_OK);
        if (!have || !mt_digest_equal(&wd, &first))
            fail_msg("restored on %s %s: another world digest", meshes[k][0], meshes[k][1]);
        mt_spmd_free(s);
        mt_jobspec_free(js);
    }
    unlink(path);
    rmdir(d.dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digest_shard_independent),
        cmocka_unit_test(test_digest_values_names_shapes_matter),
        cmocka_unit_test(test_digest_missing_elements),
        cmocka_unit_test(test_digest_bad_arguments),
        cmocka_unit_test(test_digest_known_answers),
        cmocka_unit_test(test_digest_sha_paths_agree),
        cmocka_unit_test(test_digest_root_order_and_duplicates),
        cmocka_unit_test(test_digest_hex_round_trip),
        cmocka_unit_test(test_digest_alloc_failure),
        cmocka_unit_test(test_digest_engine_state_mesh_independent),
    };
    return MT_RUN_TESTS(tests);
}
