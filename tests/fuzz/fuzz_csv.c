/* SPDX-License-Identifier: MIT */
/*
 * fuzz_csv.c — libFuzzer target for the CSV decoder of core/data (data_csv.c). The first input
 * byte picks the options (header on/off, delimiter, label column by index or last, a feature
 * subset, num_classes, shape; bit 7: string labels from a fixed class list when num_classes is
 * on, else float targets with missing values filled); the rest is the file, decoded from memory
 * through fmemopen. Any crash,
 * leak or sanitizer report is a bug; a decoded block must be consistent. Seeds:
 * tests/fuzz/corpus/fuzz_csv/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char delims[4] = {',', ';', '\t', ' '};
    mt_data_column feats[2] = {{NULL, 0}, {NULL, 2}};
    static char c0[] = "0", c1[] = "1", c2[] = "cat", c3[] = "dog";
    static char *names[4] = {c0, c1, c2, c3};
    mt_data_classes classes = {4, names};
    mt_data_spec s;
    mt_data_block b;
    mt_err err = MT_ERR_INIT;
    FILE *fp;
    uint8_t opt;

    if (size < 2)
        return 0;
    opt = data[0];
    memset(&s, 0, sizeof(s));
    s.header = opt & 1;
    s.delimiter = delims[(opt >> 1) & 3];
    s.scale = 1.0f;
    s.label_column_set = (opt >> 3) & 1;
    s.label_column.index = 1;
    if ((opt >> 4) & 1) {
        s.feature_cols = feats;
        s.n_feature_cols = 2;
    }
    s.num_classes = (opt >> 5) & 1 ? 10 : 0;
    if ((opt >> 6) & 1) {
        s.shape[0] = 1;
        s.shape[1] = 2;
        s.shape[2] = 1;
    }
    if ((opt >> 7) & 1) {
        if (s.num_classes > 0) {
            s.label_type = MT_DATA_LABEL_STRING;
            s.num_classes = 4;
        } else {
            s.label_type = MT_DATA_LABEL_FLOAT;
            s.missing = MT_DATA_MISSING_FILL;
            s.fill_value = -1.0f;
        }
    }
    fp = fmemopen((void *)(data + 1), size - 1, "rb");
    if (fp == NULL)
        return 0;
    if (mt_data__csv_read(&s, fp, "fuzz.csv", &classes, &b, &err) == MT_OK) {
        if (b.n == 0 || b.dim == 0 || b.x == NULL || b.y == NULL)
            abort();
        if ((s.label_type == MT_DATA_LABEL_FLOAT) != (b.t != NULL && b.t_dim == 1))
            abort();
        for (size_t i = 0; i < b.n; i++)
            if (b.y[i] < 0 || (s.num_classes > 0 && b.y[i] >= s.num_classes))
                abort();
        mt_data_block_fini(&b);
    } else if (err.msg[0] == '\0') {
        abort(); /* every failure explains itself */
    }
    fclose(fp);
    return 0;
}
