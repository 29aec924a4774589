/* SPDX-License-Identifier: MIT */
/*
 * bench_images.c — image-folder reader throughput (core/data, data_image.c): writes the first N
 * Fashion-MNIST test images (Debian's dataset-fashion-mnist) as class folders of PNG files and of
 * JPEG files (quality 90), then decodes each folder through the dataset layer (listing, decode,
 * resize to image_size, normalise) and prints images/s, best of R rounds, with the load average.
 * Run by bench/images.sh (which adds the model's consumption for the ratio); never by ctest.
 *
 * usage: bench_images DIR [--n N] [--rounds R] [--size S]   (S: image_size S×S; 28 = no resize)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jpeglib.h>
#include <png.h>

#include "data/mt_data.h"
#include "data/mt_idx.h"
#include "log/mt_log.h"

#define FM "/usr/share/datasets/fashion-mnist/"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int write_png(const char *path, const unsigned char *px, int w, int h)
{
    png_image im;
    memset(&im, 0, sizeof(im));
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = PNG_FORMAT_GRAY;
    return png_image_write_to_file(&im, path, 0, px, 0, NULL) ? 0 : -1;
}

static int write_jpeg(const char *path, const unsigned char *px, int w, int h)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        return -1;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, fp);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = 1;
    ci.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 90, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * (size_t)w);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return fclose(fp);
}

/* The 1-minute load average (0 when unreadable). */
static double load1(void)
{
    double v = 0;
    FILE *fp = fopen("/proc/loadavg", "r");
    if (fp != NULL) {
        if (fscanf(fp, "%lf", &v) != 1)
            v = 0;
        fclose(fp);
    }
    return v;
}

/* DIR/png/<label>/<i>.png and DIR/jpeg/<label>/<i>.jpg for the first n test images. */
static int write_folders(const char *dir, size_t n)
{
    mt_idx_set set;
    mt_err err = MT_ERR_INIT;
    char p[4096];
    unsigned char px[28 * 28];

    if (mt_idx_set_load(FM "t10k-images-idx3-ubyte.gz", FM "t10k-labels-idx1-ubyte.gz", 10, &set,
                        &err) != MT_OK) {
        fprintf(stderr, "bench_images: %s\n", err.msg);
        return -1;
    }
    n = n < set.n ? n : set.n;
    mkdir(dir, 0755);
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof(p), "%s/%s", dir, k ? "jpeg" : "png");
        mkdir(p, 0755);
        for (int c = 0; c < 10; c++) {
            snprintf(p, sizeof(p), "%s/%s/%d", dir, k ? "jpeg" : "png", c);
            mkdir(p, 0755);
        }
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < 28 * 28; j++)
            px[j] = (unsigned char)(set.images[i * 28 * 28 + j] * 255.0f + 0.5f);
        snprintf(p, sizeof(p), "%s/png/%d/%05zu.png", dir, set.labels[i], i);
        if (write_png(p, px, 28, 28) != 0)
            return -1;
        snprintf(p, sizeof(p), "%s/jpeg/%d/%05zu.jpg", dir, set.labels[i], i);
        if (write_jpeg(p, px, 28, 28) != 0)
            return -1;
    }
    mt_idx_set_fini(&set);
    return 0;
}

/* Decode the folder once through the dataset layer; images/s. */
static double decode_rate(const char *root, size_t size, size_t *n)
{
    char json[4600];
    cJSON *node;
    mt_data_spec *s = NULL;
    mt_data_dataset *ds = NULL;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    double t0, dt;

    snprintf(json, sizeof(json),
             "{\"format\":\"images\",\"train\":\"%s\",\"image_size\":[%zu,%zu],"
             "\"color_mode\":\"grayscale\"}",
             root, size, size);
    node = cJSON_Parse(json);
    t0 = now_s();
    if (mt_data_spec_parse(node, "dataset", NULL, &s, &err) != MT_OK ||
        mt_data_dataset_open(s, MT_DATA_SPLIT_TRAIN, NULL, &ds, &err) != MT_OK ||
        mt_data_dataset_load(ds, 0, &b, &err) != MT_OK) {
        fprintf(stderr, "bench_images: %s\n", err.msg);
        exit(1);
    }
    dt = now_s() - t0;
    *n = b.n;
    mt_data_block_fini(&b);
    mt_data_dataset_free(ds);
    mt_data_spec_free(s);
    cJSON_Delete(node);
    return (double)*n / dt;
}

int main(int argc, char **argv)
{
    size_t n = 10000, rounds = 3, size = 28;
    const char *dir;

    if (argc < 2) {
        fprintf(stderr, "usage: bench_images DIR [--n N] [--rounds R] [--size S]\n");
        return 2;
    }
    dir = argv[1];
    for (int i = 2; i + 1 < argc; i += 2) {
        size_t v = strtoul(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--n") == 0)
            n = v;
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = v;
        else if (strcmp(argv[i], "--size") == 0)
            size = v;
    }
    mt_log_set_level(MT_LOG_WARN);
    if (write_folders(dir, n) != 0) {
        fprintf(stderr, "bench_images: cannot write the image folders under %s\n", dir);
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        char root[4096];
        double best = 0;
        size_t got = 0;
        snprintf(root, sizeof(root), "%s/%s", dir, k ? "jpeg" : "png");
        for (size_t r = 0; r < rounds; r++) {
            double v = decode_rate(root, size, &got);
            best = v > best ? v : best;
        }
        printf("%-4s %zu images 28x28 -> %zux%zu: %.0f images/s decoded (best of %zu, one "
               "thread), load %.2f\n",
               k ? "jpeg" : "png", got, size, size, best, rounds, load1());
        fflush(stdout);
    }
    return 0;
}
