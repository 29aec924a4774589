/* SPDX-License-Identifier: MIT */
/*
 * data_image.c — image-folder source (Keras image_dataset_from_directory): a root directory with
 * one sub-folder per class holding PNG and JPEG files; and the decoder `meshtrain predict` uses.
 *
 * Called through mt_data__image_source by the dataset layer, by mt_data_image_read, and by the
 * fuzz target (tests/fuzz/fuzz_image.c). Calls libpng's simplified API and libjpeg(-turbo).
 * Semantics: the classes are the dataset's class names (data_classes.c: "class_names", else the
 * training roots' sub-folder names in byte order); a sub-folder that is not a class is refused;
 * a root's examples are its classes' files in class order, each folder's files in byte order of
 * their names; only *.png, *.jpg and *.jpeg (any case) are read, hidden files are skipped. An
 * image is decoded (by its content, whatever its name) to spec->channels channels (libpng's and
 * libjpeg's colour conversions; PNG transparency is composited onto black), resized to
 * image_size with bilinear interpolation and half-pixel centres (tf.image.resize, no antialias),
 * and normalised: (v · scale − mean[c]) / std[c] with v in 0..255.
 * Threading: stateless (libjpeg's error manager lives on the caller's stack).
 * Tests: tests/unit/test_data_image.c; fuzz: tests/fuzz/fuzz_image.c; speed: bench/images.sh.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <png.h>

#include "alloc/mt_alloc.h"
#include "data/data_int.h"

#define MAX_SIDE   16384
#define MAX_PIXELS ((size_t)1 << 26) /* 64 Mpixel */

/* ------------------------------------------------------------------ decode */

/* Source sample of output index i of n over n0 inputs (half-pixel centres, clamped): the two
 * neighbours *a, *b and the weight *f of *b. */
static void src_coord(size_t i, size_t n, size_t n0, size_t *a, size_t *b, double *f)
{
    double s = ((double)i + 0.5) * (double)n0 / (double)n - 0.5;

    if (s < 0)
        s = 0;
    *a = (size_t)s;
    if (*a > n0 - 1)
        *a = n0 - 1;
    *b = *a + 1 < n0 ? *a + 1 : n0 - 1;
    *f = s - (double)*a;
}

/* Bilinear resize with half-pixel centres of src (h0, w0, c) bytes into dst (h, w, c) floats,
 * normalised. */
static void resize_normalise(const mt_data_spec *s, const unsigned char *src, size_t h0, size_t w0,
                             float *dst)
{
    size_t h = s->image_size[0], w = s->image_size[1], c = s->channels;

    if (h == h0 && w == w0) { /* same size: bilinear sampling is the identity */
        for (size_t i = 0; i < h * w * c; i++)
            dst[i] = (float)(((double)src[i] * s->scale - s->mean[i % c]) / s->std[i % c]);
        return;
    }
    for (size_t y = 0; y < h; y++) {
        size_t y0, y1;
        double fy;
        src_coord(y, h, h0, &y0, &y1, &fy);
        for (size_t x = 0; x < w; x++) {
            size_t x0, x1;
            double fx;
            src_coord(x, w, w0, &x0, &x1, &fx);
            for (size_t k = 0; k < c; k++) {
                double a = src[(y0 * w0 + x0) * c + k], b = src[(y0 * w0 + x1) * c + k];
                double d = src[(y1 * w0 + x0) * c + k], e = src[(y1 * w0 + x1) * c + k];
                double v = (a * (1 - fx) + b * fx) * (1 - fy) + (d * (1 - fx) + e * fx) * fy;
                dst[(y * w + x) * c + k] = (float)((v * s->scale - s->mean[k]) / s->std[k]);
            }
        }
    }
}

static mt_code too_large(const char *name, size_t w, size_t h, mt_err *err)
{
    return mt_err_set(err, MT_INVALID_ARGUMENT,
                      "%s: image %zux%zu is too large (at most %d per "
                      "side and %zu pixels)",
                      name, w, h, MAX_SIDE, MAX_PIXELS);
}

static mt_code decode_png(const mt_data_spec *s, const unsigned char *buf, size_t len,
                          const char *name, unsigned char **px, size_t *h, size_t *w, mt_err *err)
{
    png_image im;

    memset(&im, 0, sizeof(im));
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, buf, len))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: corrupt PNG: %s", name, im.message);
    if (im.width == 0 || im.height == 0 || im.width > MAX_SIDE || im.height > MAX_SIDE ||
        (size_t)im.width * im.height > MAX_PIXELS) {
        png_image_free(&im);
        return too_large(name, im.width, im.height, err);
    }
    im.format = s->channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    *px = mt_calloc((size_t)PNG_IMAGE_SIZE(im) + 1, 1); /* zero: transparency over black */
    if (*px == NULL) {
        png_image_free(&im);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
    }
    if (!png_image_finish_read(&im, NULL, *px, 0, NULL)) {
        mt_free(*px);
        *px = NULL;
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: corrupt PNG: %s", name, im.message);
    }
    *h = im.height;
    *w = im.width;
    return MT_OK;
}

typedef struct jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_fail(j_common_ptr cinfo)
{
    jpeg_err *e = (jpeg_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jb, 1);
}

static void jpeg_quiet(j_common_ptr cinfo, int level)
{
    (void)cinfo;
    (void)level; /* warnings (e.g. "premature end of data") are not printed */
}

static mt_code decode_jpeg(const mt_data_spec *s, const unsigned char *buf, size_t len,
                           const char *name, unsigned char **px, size_t *h, size_t *w, mt_err *err)
{
    struct jpeg_decompress_struct ci;
    jpeg_err je;
    unsigned char *volatile out = NULL;
    volatile size_t stride = 0;

    memset(&ci, 0, sizeof(ci));
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_fail;
    je.pub.emit_message = jpeg_quiet;
    je.msg[0] = '\0';
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&ci);
        mt_free(out);
        *px = NULL;
        if (je.msg[0] == '\0')
            return too_large(name, *w, *h, err);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: corrupt JPEG: %s", name, je.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    ci.out_color_space = s->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    *w = ci.image_width;
    *h = ci.image_height;
    if (ci.image_width == 0 || ci.image_height == 0 || ci.image_width > MAX_SIDE ||
        ci.image_height > MAX_SIDE || (size_t)ci.image_width * ci.image_height > MAX_PIXELS)
        longjmp(je.jb, 1); /* msg empty: too large */
    jpeg_start_decompress(&ci);
    stride = (size_t)ci.output_width * (size_t)ci.output_components;
    out = mt_calloc(stride * ci.output_height + 1, 1);
    if (out == NULL) {
        snprintf(je.msg, sizeof(je.msg), "out of memory");
        longjmp(je.jb, 1);
    }
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = out + (size_t)ci.output_scanline * stride;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    *px = out;
    *h = ci.output_height;
    *w = ci.output_width;
    return MT_OK;
}

mt_code mt_data__image_decode(const mt_data_spec *s, const unsigned char *buf, size_t len,
                              const char *name, float *out, mt_err *err)
{
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char *px = NULL;
    size_t h = 0, w = 0;
    mt_code rc;

    if (len >= 8 && memcmp(buf, png_sig, 8) == 0)
        rc = decode_png(s, buf, len, name, &px, &h, &w, err);
    else if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff)
        rc = decode_jpeg(s, buf, len, name, &px, &h, &w, err);
    else
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: not a PNG or JPEG file", name);
    if (rc != MT_OK)
        return rc;
    resize_normalise(s, px, h, w, out);
    mt_free(px);
    return MT_OK;
}

mt_code mt_data_image_read(const mt_data_spec *spec, const char *path, float *out, mt_err *err)
{
    unsigned char *buf;
    size_t len;
    mt_code rc = mt_data__read_all(path, &buf, &len, err);

    if (rc != MT_OK)
        return rc;
    rc = mt_data__image_decode(spec, buf, len, path, out, err);
    mt_free(buf);
    return rc;
}

/* ------------------------------------------------------------------ folders */

static bool is_image_name(const char *n)
{
    size_t k = strlen(n);
    return n[0] != '.' &&
           ((k > 4 && (strcasecmp(n + k - 4, ".png") == 0 || strcasecmp(n + k - 4, ".jpg") == 0)) ||
            (k > 5 && strcasecmp(n + k - 5, ".jpeg") == 0));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static mt_code open_dir(const char *path, DIR **d, mt_err *err)
{
    *d = opendir(path);
    if (*d != NULL)
        return MT_OK;
    return mt_err_set(err,
                      errno == ENOENT || errno == ENOTDIR ? MT_NOT_FOUND
                      : errno == EACCES                   ? MT_PERMISSION_DENIED
                                                          : MT_INTERNAL,
                      "open %s: %s", path, strerror(errno));
}

/* Whether entry e of directory root is a directory (d_type, else stat: symlinks followed). */
static bool is_dir_at(const char *root, const struct dirent *e)
{
    char p[4096];
    struct stat st;
    if (e->d_type == DT_DIR || e->d_type == DT_REG)
        return e->d_type == DT_DIR;
    if (snprintf(p, sizeof(p), "%s/%s", root, e->d_name) >= (int)sizeof(p))
        return false;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

mt_code mt_data__image_class_dirs(const char *root, mt_data_classes *c, mt_err *err)
{
    struct dirent *e;
    DIR *d;
    mt_code rc = open_dir(root, &d, err);

    while (rc == MT_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !is_dir_at(root, e))
            continue;
        if (mt_data__classes_add(c, e->d_name, strlen(e->d_name)) != MT_OK)
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", root);
    }
    if (d != NULL)
        closedir(d);
    return rc;
}

/* The image files of one root: paths (owned) and labels, in class then name order. */
typedef struct listing {
    size_t n, cap;
    char **paths;
    int32_t *labels;
} listing;

static void listing_fini(listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        mt_free(l->paths[i]);
    mt_free(l->paths);
    mt_free(l->labels);
    memset(l, 0, sizeof(*l));
}

static mt_code listing_push(listing *l, const char *dir, const char *name, int32_t label,
                            mt_err *err)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p;

    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        char **np = mt_realloc(l->paths, nc * sizeof(char *));
        int32_t *nl;
        if (np == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", dir);
        l->paths = np;
        nl = mt_realloc(l->labels, nc * sizeof(int32_t));
        if (nl == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", dir);
        l->labels = nl;
        l->cap = nc;
    }
    p = mt_malloc(n);
    if (p == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", dir);
    snprintf(p, n, "%s/%s", dir, name);
    l->paths[l->n] = p;
    l->labels[l->n++] = label;
    return MT_OK;
}

/* Append the image files of dir (one class) in name order. */
static mt_code list_class(const char *dir, int32_t label, listing *l, mt_err *err)
{
    size_t first = l->n;
    struct dirent *e;
    DIR *d;
    mt_code rc = open_dir(dir, &d, err);

    if (rc == MT_NOT_FOUND) /* a split may lack a class */
        return MT_OK;
    while (rc == MT_OK && (e = readdir(d)) != NULL) {
        if (is_image_name(e->d_name) && !is_dir_at(dir, e))
            rc = listing_push(l, dir, e->d_name, label, err);
    }
    if (d != NULL)
        closedir(d);
    if (rc == MT_OK)
        qsort(l->paths + first, l->n - first, sizeof(char *), cmp_str);
    return rc;
}

static mt_code list_root(const mt_data_spec *s, const char *root, const mt_data_classes *cls,
                         listing *l, mt_err *err)
{
    mt_data_classes here;
    mt_code rc;

    memset(l, 0, sizeof(*l));
    memset(&here, 0, sizeof(here));
    if (cls == NULL || cls->n == 0)
        return mt_err_set(err, MT_FAILED_PRECONDITION, "%s: no class names", root);
    rc = mt_data__image_class_dirs(root, &here, err);
    for (size_t i = 0; rc == MT_OK && i < here.n; i++)
        if (mt_data__class_id(s, cls, here.names[i], strlen(here.names[i])) < 0)
            rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                            "%s/%s: not one of the %zu classes (class_names or the training "
                            "folders)",
                            root, here.names[i], cls->n);
    mt_data_classes_fini(&here);
    for (size_t k = 0; rc == MT_OK && k < cls->n; k++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/%s", root, cls->names[k]);
        rc = list_class(dir, (int32_t)k, l, err);
    }
    if (rc == MT_OK && l->n == 0)
        rc = mt_err_set(err, MT_INVALID_ARGUMENT,
                        "%s: no .png, .jpg or .jpeg files in its class "
                        "folders",
                        root);
    if (rc != MT_OK)
        listing_fini(l);
    return rc;
}

static mt_code image_count(const mt_data_spec *s, const mt_data_file *f, const mt_data__fit *fit,
                           size_t *n, mt_err *err)
{
    listing l;
    mt_code rc = list_root(s, f->path, fit->classes, &l, err);

    *n = rc == MT_OK ? l.n : 0;
    listing_fini(&l);
    return rc;
}

static mt_code image_load(const mt_data_spec *s, const mt_data_file *f, const mt_data__fit *fit,
                          mt_data_block *out, mt_err *err)
{
    size_t dim = s->image_size[0] * s->image_size[1] * s->channels;
    listing l;
    mt_code rc = list_root(s, f->path, fit->classes, &l, err);

    memset(out, 0, sizeof(*out));
    if (rc != MT_OK)
        return rc;
    out->x = mt_malloc(l.n * dim * sizeof(float) + 1);
    out->y = mt_malloc(l.n * sizeof(int32_t) + 1);
    if (out->x == NULL || out->y == NULL)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", f->path);
    for (size_t i = 0; rc == MT_OK && i < l.n; i++) {
        rc = mt_data_image_read(s, l.paths[i], out->x + i * dim, err);
        out->y[i] = l.labels[i];
    }
    if (rc == MT_OK) {
        out->n = l.n;
        out->dim = dim;
        out->y_dim = 1;
        out->shape[0] = s->image_size[0];
        out->shape[1] = s->image_size[1];
        out->shape[2] = s->channels;
    } else {
        mt_data_block_fini(out);
    }
    listing_fini(&l);
    return rc;
}

const mt_data__source mt_data__image_source = {"images", image_count, image_load, NULL};
