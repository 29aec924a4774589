/* SPDX-License-Identifier: MIT */
/*
 * data_classes.c — class names for string labels (CSV "label_type": "string") and image folders,
 * and a whole-file reader shared by the binary sources (contract in mt_data.h and data_int.h).
 *
 * Called by the dataset layer at open (every dataset of a spec fits the same names from the
 * training files, so the train and test splits and every pipeline agree on the ids), by
 * `meshtrain predict` to print names, and by the CSV and image sources to map a name to its id.
 * The ids are the positions in "class_names" when given, else in byte order (strcmp) of the
 * names found: stable whatever the file order, the shard policy or the mesh.
 * Threading: stateless. Tests: tests/unit/test_data_csv.c, test_data_image.c.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

void mt_data_classes_fini(mt_data_classes *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n; i++)
        mt_free(c->names[i]);
    mt_free(c->names);
    memset(c, 0, sizeof(*c));
}

/* strcmp of the NUL-terminated a with name[0..len) (which may hold any byte). */
static int name_cmp(const char *a, const char *name, size_t len)
{
    size_t n = strlen(a);
    int r = memcmp(a, name, n < len ? n : len);
    return r != 0 ? r : (n > len) - (n < len);
}

/* Position where name[0..len) is or would be in the sorted names; *found when present. */
static size_t lower_bound(const mt_data_classes *c, const char *name, size_t len, bool *found)
{
    size_t lo = 0, hi = c->n;

    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = name_cmp(c->names[mid], name, len);
        if (r == 0) {
            *found = true;
            return mid;
        }
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

mt_code mt_data__classes_add(mt_data_classes *c, const char *name, size_t len)
{
    bool found;
    size_t at = lower_bound(c, name, len, &found);
    char **nn, *s;

    if (found)
        return MT_OK;
    s = mt_malloc(len + 1);
    nn = s == NULL ? NULL : mt_realloc(c->names, (c->n + 1) * sizeof(char *));
    if (nn == NULL) {
        mt_free(s);
        return MT_RESOURCE_EXHAUSTED;
    }
    memcpy(s, name, len);
    s[len] = '\0';
    c->names = nn;
    memmove(c->names + at + 1, c->names + at, (c->n - at) * sizeof(char *));
    c->names[at] = s;
    c->n++;
    return MT_OK;
}

int32_t mt_data__class_id(const mt_data_spec *spec, const mt_data_classes *c, const char *name,
                          size_t len)
{
    bool found;
    size_t at;

    if (spec->class_names != NULL) { /* the user's order */
        for (size_t i = 0; i < c->n; i++)
            if (name_cmp(c->names[i], name, len) == 0)
                return (int32_t)i;
        return -1;
    }
    at = lower_bound(c, name, len, &found);
    return found ? (int32_t)at : -1;
}

mt_code mt_data_classes_fit_spec(const mt_data_spec *spec, mt_data_classes *out, mt_err *err)
{
    bool images = spec->format == MT_DATA_FORMAT_IMAGES;
    mt_code rc = MT_OK;

    memset(out, 0, sizeof(*out));
    if (spec->label_type != MT_DATA_LABEL_STRING && !images)
        return MT_OK;
    if (spec->class_names != NULL) {
        out->names = mt_calloc(spec->n_class_names, sizeof(char *));
        if (out->names == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory",
                              mt_data__spec_path(spec));
        for (size_t i = 0; i < spec->n_class_names; i++) {
            out->names[i] = mt_strdup(spec->class_names[i]);
            if (out->names[i] == NULL) {
                mt_data_classes_fini(out);
                return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory",
                                  mt_data__spec_path(spec));
            }
            out->n = i + 1;
        }
        return MT_OK;
    }
    for (size_t f = 0; f < spec->train.n && rc == MT_OK; f++)
        rc = images ? mt_data__image_class_dirs(spec->train.files[f].path, out, err)
                    : mt_data__csv_label_names(spec, spec->train.files[f].path, out, err);
    if (rc == MT_OK && out->n == 0)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "%s.train: no class %s found in %s",
                        mt_data__spec_path(spec), images ? "sub-folders" : "labels",
                        spec->train.n > 0 ? spec->train.files[0].path : "(no files)");
    if (rc == MT_OK && spec->num_classes > 0 && out->n > (size_t)spec->num_classes)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "%s.num_classes: %d, but the training %s hold %zu classes ('%s' .. '%s')",
                        mt_data__spec_path(spec), spec->num_classes, images ? "folders" : "labels",
                        out->n, out->names[0], out->names[out->n - 1]);
    if (rc != MT_OK)
        mt_data_classes_fini(out);
    return rc;
}

mt_code mt_data__read_all(const char *path, unsigned char **buf, size_t *len, mt_err *err)
{
    unsigned char *b = NULL, *nb;
    size_t n = 0, cap = 0, got;
    FILE *fp;
    mt_code rc = mt_data__fopen(path, &fp, err);

    *buf = NULL;
    *len = 0;
    if (rc != MT_OK)
        return rc;
    {
        struct stat st; /* one allocation of the right size for regular files */
        if (fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
            cap = (size_t)st.st_size + 1;
        b = mt_malloc(cap + 1);
        if (b == NULL) {
            fclose(fp);
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "read %s: out of memory", path);
        }
    }
    do {
        if (cap - n < 1) {
            cap = cap * 2 + 65536;
            nb = mt_realloc(b, cap + 1);
            if (nb == NULL) {
                mt_free(b);
                fclose(fp);
                return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "read %s: out of memory", path);
            }
            b = nb;
        }
        got = fread(b + n, 1, cap - n, fp);
        n += got;
    } while (got > 0);
    if (ferror(fp)) {
        mt_free(b);
        fclose(fp);
        return mt_err_set(err, MT_DATA_LOSS, "read %s: I/O error", path);
    }
    fclose(fp);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return MT_OK;
}
