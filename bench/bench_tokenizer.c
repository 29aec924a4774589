/* SPDX-License-Identifier: MIT */
/*
 * bench_tokenizer.c — the tokenizers of core/text (docs/transformers.md) on a text file (default
 * examples/data/brown_train.txt, from deploy/fetch-corpus.sh): per tokenizer the fit time, the
 * encode time of the whole file, the tokens and bytes per token, and the encode time as a ratio
 * of the char tokenizer's in the same run (median of 3 encodes each); the 1-minute load average
 * is printed beside each figure. Run from the source directory: build/bench_tokenizer [FILE].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/mt_alloc.h"
#include "text/mt_text.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double loadavg(void)
{
    double l = -1.0;
    return getloadavg(&l, 1) == 1 ? l : -1.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    static const struct {
        mt_text_tokenizer_type type;
        size_t vocab;
    } cases[] = {{MT_TEXT_TOKENIZER_CHAR, 0},
                 {MT_TEXT_TOKENIZER_BPE, 512},
                 {MT_TEXT_TOKENIZER_BPE, 1024},
                 {MT_TEXT_TOKENIZER_BPE, 2048}};
    const char *path = argc > 1 ? argv[1] : "examples/data/brown_train.txt";
    FILE *f = fopen(path, "rb");
    char *text;
    long n;
    double char_encode = 0.0;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "bench_tokenizer: cannot read %s (deploy/fetch-corpus.sh examples/data)\n",
                path);
        return 1;
    }
    text = malloc((size_t)n);
    if (text == NULL || fread(text, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "bench_tokenizer: cannot read %s\n", path);
        return 1;
    }
    fclose(f);
    printf("%s: %ld bytes\n", path, n);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *texts[1] = {text};
        size_t lens[1] = {(size_t)n}, k = 0;
        mt_text_tokenizer *t = NULL;
        mt_err err = MT_ERR_INIT;
        double t0 = now_s(), fit, enc[3];
        if (mt_text_tokenizer_fit(cases[c].type, cases[c].vocab, texts, lens, 1, &t, &err) !=
            MT_OK) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            return 1;
        }
        fit = now_s() - t0;
        for (int r = 0; r < 3; r++) {
            uint32_t *ids = NULL;
            t0 = now_s();
            if (mt_text_tokenizer_encode(t, text, (size_t)n, &ids, &k, &err) != MT_OK) {
                fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
                return 1;
            }
            enc[r] = now_s() - t0;
            mt_free(ids);
        }
        qsort(enc, 3, sizeof(double), cmp_double);
        if (c == 0)
            char_encode = enc[1];
        printf("%-4s %5zu ids: fit %6.2f s, encode %5.2f s (%.2f x char), %8zu tokens, %.2f "
               "bytes/token  (load %.1f)\n",
               mt_text_tokenizer_type_name(cases[c].type), mt_text_tokenizer_vocab_size(t), fit,
               enc[1], enc[1] / char_encode, k, (double)n / (double)k, loadavg());
        mt_text_tokenizer_free(t);
    }
    free(text);
    return 0;
}
