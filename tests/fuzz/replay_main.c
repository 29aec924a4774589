/* SPDX-License-Identifier: MIT */
/*
 * replay_main.c — under gcc, runs a fuzz target's LLVMFuzzerTestOneInput over
 * every file of its corpus directory (argv[1]); a crash or sanitizer report
 * fails the test. With clang and MT_FUZZ=ON libFuzzer provides main instead.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    DIR *d;
    struct dirent *e;
    int n = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    d = opendir(argv[1]);
    if (d == NULL) {
        fprintf(stderr, "%s: no corpus directory\n", argv[1]);
        return 1;
    }
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        FILE *f;
        long len;
        uint8_t *buf;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
        f = fopen(path, "rb");
        if (f == NULL)
            continue;
        fseek(f, 0, SEEK_END);
        len = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = malloc(len > 0 ? (size_t)len : 1);
        if (buf != NULL && fread(buf, 1, (size_t)len, f) == (size_t)len) {
            LLVMFuzzerTestOneInput(buf, (size_t)len);
            n++;
        }
        free(buf);
        fclose(f);
    }
    closedir(d);
    printf("replayed %d inputs from %s\n", n, argv[1]);
    return n > 0 ? 0 : 1;
}
