/* SPDX-License-Identifier: MIT */
/*
 * pathsafe.c — data-root confinement (mt_pathsafe.h): realpath(3) then a prefix check on whole
 * path components ("/data" does not contain "/database"). Roots are resolved once when added.
 * Thread-safe after setup (no mutable state during checks). Tests: tests/unit/test_pathsafe.c.
 */
#include "pathsafe/mt_pathsafe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "data/mt_data.h"
#include "model/mt_model.h"

struct mt_pathsafe {
    size_t n;
    char roots[MT_PATHSAFE_MAX_ROOTS][PATH_MAX];
};

mt_code mt_pathsafe_new(mt_pathsafe **out, mt_err *err)
{
    *out = mt_calloc(1, sizeof(**out)); /* NULL on failure, as promised */
    if (*out == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "data roots: out of memory");
    return MT_OK;
}

void mt_pathsafe_free(mt_pathsafe *ps)
{
    mt_free(ps);
}

mt_code mt_pathsafe_add_root(mt_pathsafe *ps, const char *dir, mt_err *err)
{
    char real[PATH_MAX];
    struct stat st;

    if (ps->n >= MT_PATHSAFE_MAX_ROOTS)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "--data-root %s: at most %d data roots", dir,
                          MT_PATHSAFE_MAX_ROOTS);
    if (realpath(dir, real) == NULL)
        return mt_err_set(err, errno == ENOENT ? MT_NOT_FOUND : MT_INVALID_ARGUMENT,
                          "--data-root %s: %s", dir, strerror(errno));
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "--data-root %s: not a directory", dir);
    snprintf(ps->roots[ps->n++], PATH_MAX, "%s", real);
    return MT_OK;
}

mt_code mt_pathsafe_add_defaults(mt_pathsafe *ps, mt_err *err)
{
    struct stat st;
    char cwd[4096];
    mt_code rc = MT_OK;

    /* an implicit root of "/" would confine nothing (a daemon started from /): only an
     * explicit --data-root / may allow the whole file system */
    if (getcwd(cwd, sizeof(cwd)) == NULL || strcmp(cwd, "/") != 0)
        rc = mt_pathsafe_add_root(ps, ".", err);

    if (rc == MT_OK && stat(MT_PATHSAFE_DEFAULT_DATASETS, &st) == 0 && S_ISDIR(st.st_mode))
        rc = mt_pathsafe_add_root(ps, MT_PATHSAFE_DEFAULT_DATASETS, err);
    return rc;
}

mt_code mt_pathsafe_new_roots(const char *const *dirs, int n, mt_pathsafe **out, mt_err *err)
{
    mt_pathsafe *ps;
    mt_code rc = mt_pathsafe_new(&ps, err);

    *out = NULL;
    for (int i = 0; rc == MT_OK && i < n; i++)
        rc = mt_pathsafe_add_root(ps, dirs[i], err);
    if (rc == MT_OK && n == 0)
        rc = mt_pathsafe_add_defaults(ps, err);
    if (rc != MT_OK) {
        mt_pathsafe_free(ps);
        return rc;
    }
    *out = ps;
    return MT_OK;
}

size_t mt_pathsafe_root_count(const mt_pathsafe *ps)
{
    return ps->n;
}

const char *mt_pathsafe_root_at(const mt_pathsafe *ps, size_t i)
{
    return i < ps->n ? ps->roots[i] : NULL;
}

static int under(const char *root, const char *p)
{
    size_t n = strlen(root);

    if (strcmp(root, "/") == 0)
        return 1;
    return strncmp(p, root, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

/* "a, b, c" into buf */
static void roots_str(const mt_pathsafe *ps, char *buf, size_t cap)
{
    size_t o = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < ps->n && o < cap; i++) {
        int k = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", ps->roots[i]);
        if (k < 0)
            break;
        o += (size_t)k;
    }
    if (ps->n == 0)
        snprintf(buf, cap, "(none configured)");
}

/* Resolve a path that may not exist: realpath of the deepest existing ancestor + the rest. */
static mt_code resolve_missing(const char *path, char *out, mt_err *err)
{
    char head[PATH_MAX], real[PATH_MAX];
    const char *tail;
    char *slash;

    if (strlen(path) >= sizeof(head))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "path %.64s...: too long", path);
    snprintf(head, sizeof(head), "%s", path);
    for (;;) {
        slash = strrchr(head, '/');
        if (slash == NULL) {
            snprintf(head, sizeof(head), ".");
            tail = path;
            break;
        }
        if (slash == head) { /* "/x": the root exists */
            head[1] = '\0';
            tail = path + 1;
            break;
        }
        *slash = '\0';
        if (realpath(head, real) != NULL) {
            tail = path + (slash - head) + 1;
            break;
        }
    }
    if (realpath(head, real) == NULL)
        return mt_err_set(err, MT_NOT_FOUND, "path %s: %s", path, strerror(errno));
    for (const char *c = tail; *c;) { /* no ".." in the part that does not exist */
        size_t len = strcspn(c, "/");
        if (len == 2 && c[0] == '.' && c[1] == '.')
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "path %s: '..' after a directory that does not exist", path);
        c += len;
        while (*c == '/')
            c++;
    }
    if (snprintf(out, PATH_MAX, "%s%s%s", real, strcmp(real, "/") == 0 ? "" : "/", tail) >=
        PATH_MAX)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "path %.64s...: too long", path);
    return MT_OK;
}

mt_code mt_pathsafe_check(const mt_pathsafe *ps, const char *path, int flags, char *resolved,
                          size_t cap, mt_err *err)
{
    char real[PATH_MAX], list[512];
    mt_code rc;

    if (path == NULL || path[0] == '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "empty path");
    if (realpath(path, real) == NULL) {
        if (errno != ENOENT || !(flags & MT_PATHSAFE_MAY_BE_MISSING))
            return mt_err_set(err, errno == ENOENT ? MT_NOT_FOUND : MT_PERMISSION_DENIED,
                              "path %s: %s", path, strerror(errno));
        rc = resolve_missing(path, real, err);
        if (rc != MT_OK)
            return rc;
    }
    for (size_t i = 0; i < ps->n; i++) {
        if (under(ps->roots[i], real)) {
            if (resolved != NULL && cap > 0)
                snprintf(resolved, cap, "%s", real);
            return MT_OK;
        }
    }
    roots_str(ps, list, sizeof(list));
    return mt_err_set(err, MT_PERMISSION_DENIED,
                      "path %s resolves to %s, outside the data roots %s (add --data-root)", path,
                      real, list);
}

mt_code mt_pathsafe_check_glob(const mt_pathsafe *ps, const char *pattern, mt_err *err)
{
    glob_t g;
    mt_code rc = MT_OK;
    int r = glob(pattern, GLOB_NOSORT, NULL, &g);

    if (r == GLOB_NOMATCH)
        return mt_err_set(err, MT_NOT_FOUND, "glob %s: matches no file", pattern);
    if (r != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "glob %s: cannot expand", pattern);
    for (size_t i = 0; i < g.gl_pathc && rc == MT_OK; i++)
        rc = mt_pathsafe_check(ps, g.gl_pathv[i], 0, NULL, 0, err);
    globfree(&g);
    return rc;
}

mt_code mt_pathsafe_check_job_spec(const mt_pathsafe *ps, const struct mt_job_spec *spec,
                                   mt_err *err)
{
    const char *files[4] = {spec->dataset.train_images, spec->dataset.train_labels,
                            spec->dataset.test_images, spec->dataset.test_labels};

    if (strcmp(spec->dataset.format, "idx") != 0)
        return MT_OK; /* the IDX fields hold unused defaults; see check_dataset_json */
    for (int i = 0; i < 4; i++) {
        mt_code rc = files[i][0]
                         ? mt_pathsafe_check(ps, files[i], MT_PATHSAFE_MAY_BE_MISSING, NULL, 0, err)
                         : MT_OK;
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

static mt_code check_list(const mt_pathsafe *ps, const mt_data_file_list *l, mt_err *err)
{
    for (size_t i = 0; i < l->n; i++) {
        mt_code rc =
            mt_pathsafe_check(ps, l->files[i].path, MT_PATHSAFE_MAY_BE_MISSING, NULL, 0, err);
        if (rc == MT_OK && l->files[i].labels_path != NULL)
            rc = mt_pathsafe_check(ps, l->files[i].labels_path, MT_PATHSAFE_MAY_BE_MISSING, NULL, 0,
                                   err);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}

mt_code mt_pathsafe_check_data_spec(const mt_pathsafe *ps, const struct mt_data_spec *spec,
                                    mt_err *err)
{
    mt_code rc = check_list(ps, &spec->train, err);
    return rc == MT_OK ? check_list(ps, &spec->test, err) : rc;
}

mt_code mt_pathsafe_check_dataset(const mt_pathsafe *ps, const cJSON *node, const char *base_dir,
                                  mt_err *err)
{
    const cJSON *fmt = node != NULL ? cJSON_GetObjectItemCaseSensitive(node, "format") : NULL;
    mt_data_spec *ds = NULL;
    mt_code rc = MT_OK;

    if (node != NULL && cJSON_GetObjectItemCaseSensitive(node, "train") != NULL &&
        !(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "synthetic") == 0)) {
        rc = mt_data_spec_parse(node, "dataset", base_dir, &ds, err);
        if (rc == MT_OK)
            rc = mt_pathsafe_check_data_spec(ps, ds, err);
        mt_data_spec_free(ds);
    }
    return rc;
}

mt_code mt_pathsafe_check_dataset_json(const mt_pathsafe *ps, const char *spec_json, size_t len,
                                       const char *base_dir, mt_err *err)
{
    cJSON *root = cJSON_ParseWithLength(spec_json, len);
    mt_code rc;

    if (root == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "job spec: not valid JSON");
    rc = mt_pathsafe_check_dataset(ps, cJSON_GetObjectItemCaseSensitive(root, "dataset"), base_dir,
                                   err);
    cJSON_Delete(root);
    return rc;
}
