/* SPDX-License-Identifier: MIT */
/*
 * test_pathsafe.c — unit tests for core/pathsafe (mt_pathsafe.h): a root accepts its files and
 * refuses `..` traversal, absolute paths elsewhere, symlinks pointing out, look-alike prefixes,
 * globs with an outside match, missing files (with and without MAY_BE_MISSING) and the job
 * spec / data spec helpers. Each test works in its own mkdtemp directory.
 */
#include "mt_test.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/mt_model.h"
#include "pathsafe/mt_pathsafe.h"

typedef struct tree {
    char top[64];   /* mkdtemp */
    char root[128]; /* top/root: the data root */
    char out[128];  /* top/root-out: outside, with a look-alike name */
    mt_pathsafe *ps;
} tree;

static void touch(const char *dir, const char *name)
{
    char p[PATH_MAX + 64];
    FILE *f;
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("x\n", f);
    fclose(f);
}

static void tree_make(tree *t)
{
    char p[PATH_MAX + 64];
    snprintf(t->top, sizeof(t->top), "/tmp/mt_pathsafe_XXXXXX");
    assert_non_null(mkdtemp(t->top));
    snprintf(t->root, sizeof(t->root), "%s/root", t->top);
    snprintf(t->out, sizeof(t->out), "%s/root-out", t->top);
    assert_int_equal(mkdir(t->root, 0700), 0);
    assert_int_equal(mkdir(t->out, 0700), 0);
    snprintf(p, sizeof(p), "%s/sub", t->root);
    assert_int_equal(mkdir(p, 0700), 0);
    touch(t->root, "a.csv");
    touch(t->root, "b.csv");
    touch(t->out, "secret");
    snprintf(p, sizeof(p), "%s/escape", t->root); /* symlink inside the root, pointing out */
    assert_int_equal(symlink(t->out, p), 0);
    snprintf(p, sizeof(p), "%s/inner", t->root); /* symlink inside pointing inside */
    assert_int_equal(symlink("sub", p), 0);
    assert_int_equal(mt_pathsafe_new(&t->ps, NULL), MT_OK);
    assert_int_equal(mt_pathsafe_add_root(t->ps, t->root, NULL), MT_OK);
}

static void tree_free(tree *t)
{
    char cmd[PATH_MAX + 16];
    mt_pathsafe_free(t->ps);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", t->top);
    assert_int_equal(system(cmd), 0);
}

/* check the path a + b */
static mt_code check(tree *t, const char *a, const char *b, int flags, mt_err *err)
{
    char p[2 * PATH_MAX];
    snprintf(p, sizeof(p), "%s%s", a, b);
    return mt_pathsafe_check(t->ps, p, flags, NULL, 0, err);
}

static void test_pathsafe_inside(void **state)
{
    tree t;
    char res[PATH_MAX], p[PATH_MAX + 16];
    (void)state;
    tree_make(&t);
    assert_int_equal(mt_pathsafe_root_count(t.ps), 1);
    assert_non_null(mt_pathsafe_root_at(t.ps, 0));
    assert_null(mt_pathsafe_root_at(t.ps, 1));
    snprintf(p, sizeof(p), "%s/a.csv", t.root);
    assert_int_equal(mt_pathsafe_check(t.ps, p, 0, res, sizeof(res), NULL), MT_OK);
    assert_string_equal(res, p);
    assert_int_equal(check(&t, t.root, "/sub/../b.csv", 0, NULL), MT_OK); /* stays inside */
    assert_int_equal(check(&t, t.root, "/inner", 0, NULL), MT_OK);        /* link inside */
    assert_int_equal(check(&t, t.root, "", 0, NULL), MT_OK);              /* the root itself */
    tree_free(&t);
}

static void test_pathsafe_traversal(void **state)
{
    tree t;
    mt_err err = MT_ERR_INIT;
    (void)state;
    tree_make(&t);
    assert_int_equal(check(&t, t.root, "/../root-out/secret", 0, &err), MT_PERMISSION_DENIED);
    assert_non_null(strstr(err.msg, "root-out/secret"));
    assert_non_null(strstr(err.msg, "outside the data roots"));
    assert_non_null(strstr(err.msg, t.root));
    assert_int_equal(check(&t, t.root, "/sub/../../../../../../etc/passwd", 0, &err),
                     MT_PERMISSION_DENIED);
    assert_non_null(strstr(err.msg, "resolves to /etc/passwd"));
    tree_free(&t);
}

static void test_pathsafe_absolute_and_prefix(void **state)
{
    tree t;
    mt_err err = MT_ERR_INIT;
    (void)state;
    tree_make(&t);
    assert_int_equal(check(&t, "/etc/passwd", "", 0, &err), MT_PERMISSION_DENIED);
    /* "<top>/root-out" starts with "<top>/root" but is not under it */
    assert_int_equal(check(&t, t.out, "/secret", 0, &err), MT_PERMISSION_DENIED);
    tree_free(&t);
}

static void test_pathsafe_symlink_out(void **state)
{
    tree t;
    mt_err err = MT_ERR_INIT;
    (void)state;
    tree_make(&t);
    assert_int_equal(check(&t, t.root, "/escape/secret", 0, &err), MT_PERMISSION_DENIED);
    assert_non_null(strstr(err.msg, "root-out/secret"));
    tree_free(&t);
}

static void test_pathsafe_missing(void **state)
{
    tree t;
    mt_err err = MT_ERR_INIT;
    char res[PATH_MAX], want[PATH_MAX + 32];
    (void)state;
    tree_make(&t);
    assert_int_equal(check(&t, t.root, "/nope.csv", 0, &err), MT_NOT_FOUND);
    assert_non_null(strstr(err.msg, "nope.csv"));
    /* a checkpoint directory that does not exist yet */
    snprintf(want, sizeof(want), "%s/ckpt/run1", t.root);
    assert_int_equal(
        mt_pathsafe_check(t.ps, want, MT_PATHSAFE_MAY_BE_MISSING, res, sizeof(res), NULL), MT_OK);
    assert_string_equal(res, want);
    assert_int_equal(check(&t, t.root, "/ckpt/../../root-out", MT_PATHSAFE_MAY_BE_MISSING, &err),
                     MT_INVALID_ARGUMENT);
    assert_int_equal(check(&t, t.root, "/escape/new", MT_PATHSAFE_MAY_BE_MISSING, &err),
                     MT_PERMISSION_DENIED);
    assert_int_equal(check(&t, "/nonexistent-dir/x", "", MT_PATHSAFE_MAY_BE_MISSING, &err),
                     MT_PERMISSION_DENIED);
    assert_int_equal(mt_pathsafe_check(t.ps, "", 0, NULL, 0, &err), MT_INVALID_ARGUMENT);
    tree_free(&t);
}

static void test_pathsafe_glob(void **state)
{
    tree t;
    mt_err err = MT_ERR_INIT;
    char p[2 * PATH_MAX];
    (void)state;
    tree_make(&t);
    snprintf(p, sizeof(p), "%s/*.csv", t.root);
    assert_int_equal(mt_pathsafe_check_glob(t.ps, p, &err), MT_OK);
    snprintf(p, sizeof(p), "%s/*/secret", t.root); /* matches escape/secret */
    assert_int_equal(mt_pathsafe_check_glob(t.ps, p, &err), MT_PERMISSION_DENIED);
    snprintf(p, sizeof(p), "%s/*.parquet", t.root);
    assert_int_equal(mt_pathsafe_check_glob(t.ps, p, &err), MT_NOT_FOUND);
    tree_free(&t);
}

static void test_pathsafe_roots(void **state)
{
    mt_pathsafe *ps;
    mt_err err = MT_ERR_INIT;
    char cwd[PATH_MAX];
    (void)state;
    assert_int_equal(mt_pathsafe_new(&ps, NULL), MT_OK);
    /* no roots: everything refused */
    assert_int_equal(mt_pathsafe_check(ps, "/etc/passwd", 0, NULL, 0, &err), MT_PERMISSION_DENIED);
    assert_non_null(strstr(err.msg, "none configured"));
    assert_int_equal(mt_pathsafe_add_root(ps, "/nonexistent-root", &err), MT_NOT_FOUND);
    assert_int_equal(mt_pathsafe_add_root(ps, "/etc/passwd", &err), MT_INVALID_ARGUMENT);
    assert_int_equal(mt_pathsafe_add_defaults(ps, &err), MT_OK);
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_string_equal(mt_pathsafe_root_at(ps, 0), cwd);
    for (int i = (int)mt_pathsafe_root_count(ps); i < MT_PATHSAFE_MAX_ROOTS; i++)
        assert_int_equal(mt_pathsafe_add_root(ps, "/tmp", NULL), MT_OK);
    assert_int_equal(mt_pathsafe_add_root(ps, "/tmp", &err), MT_RESOURCE_EXHAUSTED);
    mt_pathsafe_free(ps);
    mt_pathsafe_free(NULL);
    /* from a command line: the given roots, or the defaults */
    {
        const char *dirs[2] = {"/tmp", "/nonexistent-root"};
        assert_int_equal(mt_pathsafe_new_roots(dirs, 1, &ps, &err), MT_OK);
        assert_int_equal(mt_pathsafe_root_count(ps), 1);
        mt_pathsafe_free(ps);
        assert_int_equal(mt_pathsafe_new_roots(dirs, 2, &ps, &err), MT_NOT_FOUND);
        assert_null(ps);
        assert_int_equal(mt_pathsafe_new_roots(NULL, 0, &ps, &err), MT_OK);
        assert_string_equal(mt_pathsafe_root_at(ps, 0), cwd);
        mt_pathsafe_free(ps);
    }
}

/* Started from "/", the implicit default must not make "/" a root (it would confine nothing). */
static void test_pathsafe_default_not_slash(void **state)
{
    mt_pathsafe *ps = NULL;
    mt_err err = MT_ERR_INIT;
    char cwd[PATH_MAX];
    (void)state;
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir("/"), 0);
    mt_code rc = mt_pathsafe_new_roots(NULL, 0, &ps, &err);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(rc, MT_OK);
    for (size_t i = 0; i < mt_pathsafe_root_count(ps); i++)
        assert_string_not_equal(mt_pathsafe_root_at(ps, i), "/");
    assert_int_equal(mt_pathsafe_check(ps, "/etc/passwd", 0, NULL, 0, &err), MT_PERMISSION_DENIED);
    mt_pathsafe_free(ps);
    /* an explicit --data-root / is the operator's choice */
    const char *slash[1] = {"/"};
    assert_int_equal(mt_pathsafe_new_roots(slash, 1, &ps, &err), MT_OK);
    assert_int_equal(mt_pathsafe_check(ps, "/etc/passwd", 0, NULL, 0, &err), MT_OK);
    mt_pathsafe_free(ps);
}

static void test_pathsafe_job_spec(void **state)
{
    tree t;
    mt_err err = MT_ERR_INIT;
    mt_job_spec *spec = NULL;
    char json[2048];
    (void)state;
    tree_make(&t);
    snprintf(json, sizeof(json),
             "{\"model\":{\"layers\":[{\"type\":\"dense\",\"units\":2}]},"
             "\"dataset\":{\"format\":\"idx\",\"train_images\":\"%s/a.csv\","
             "\"train_labels\":\"%s/b.csv\",\"test_images\":\"%s/a.csv\","
             "\"test_labels\":\"%s/../root-out/secret\"}}",
             t.root, t.root, t.root, t.root);
    assert_int_equal(mt_job_spec_parse(json, strlen(json), &spec, &err), MT_OK);
    assert_int_equal(mt_pathsafe_check_job_spec(t.ps, spec, &err), MT_PERMISSION_DENIED);
    assert_non_null(strstr(err.msg, "root-out/secret"));
    snprintf(spec->dataset.test_labels, sizeof(spec->dataset.test_labels), "%s/b.csv", t.root);
    assert_int_equal(mt_pathsafe_check_job_spec(t.ps, spec, &err), MT_OK);
    mt_job_spec_free(spec);
    tree_free(&t);
}

static void test_pathsafe_dataset_json(void **state)
{
    tree t;
    mt_err err = MT_ERR_INIT;
    char json[1024], p[PATH_MAX];
    FILE *f;
    (void)state;
    tree_make(&t);
    snprintf(p, sizeof(p), "%s/a.tsv", t.root);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("1\tgood\n", f);
    fclose(f);
    snprintf(p, sizeof(p), "%s/b.tsv", t.out);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("0\tbad\n", f);
    fclose(f);
    /* relative paths resolve against base_dir */
    snprintf(json, sizeof(json), "{\"dataset\":{\"format\":\"text\",\"train\":\"a.tsv\"}}");
    assert_int_equal(mt_pathsafe_check_dataset_json(t.ps, json, strlen(json), t.root, &err), MT_OK);
    snprintf(
        json, sizeof(json),
        "{\"dataset\":{\"format\":\"text\",\"train\":\"a.tsv\",\"test\":\"../root-out/b.tsv\"}}");
    assert_int_equal(mt_pathsafe_check_dataset_json(t.ps, json, strlen(json), t.root, &err),
                     MT_PERMISSION_DENIED);
    assert_non_null(strstr(err.msg, "root-out/b.tsv"));
    /* no input-pipeline section, synthetic data: nothing to check */
    snprintf(json, sizeof(json), "{\"dataset\":{\"format\":\"synthetic\",\"train\":\"x\"}}");
    assert_int_equal(mt_pathsafe_check_dataset_json(t.ps, json, strlen(json), t.root, &err), MT_OK);
    snprintf(json, sizeof(json), "{\"model\":{}}");
    assert_int_equal(mt_pathsafe_check_dataset_json(t.ps, json, strlen(json), t.root, &err), MT_OK);
    assert_int_equal(mt_pathsafe_check_dataset_json(t.ps, "{", 1, t.root, &err),
                     MT_INVALID_ARGUMENT);
    tree_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pathsafe_inside),
        cmocka_unit_test(test_pathsafe_traversal),
        cmocka_unit_test(test_pathsafe_absolute_and_prefix),
        cmocka_unit_test(test_pathsafe_symlink_out),
        cmocka_unit_test(test_pathsafe_missing),
        cmocka_unit_test(test_pathsafe_glob),
        cmocka_unit_test(test_pathsafe_roots),
        cmocka_unit_test(test_pathsafe_default_not_slash),
        cmocka_unit_test(test_pathsafe_job_spec),
        cmocka_unit_test(test_pathsafe_dataset_json),
    };
    return MT_RUN_TESTS(tests);
}
