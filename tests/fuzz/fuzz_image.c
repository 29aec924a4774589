/* SPDX-License-Identifier: MIT */
/*
 * fuzz_image.c — libFuzzer target for the image decoder of core/data (data_image.c: libpng and
 * libjpeg behind mt_data__image_decode). The first input byte picks the output (grayscale or
 * RGB, and one of four sizes, so both up- and down-sampling run); the rest is the file. Any
 * crash, leak or sanitizer report is a bug; a failure must explain itself and a decoded image
 * must be finite. Seeds: tests/fuzz/corpus/fuzz_image/.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t sides[4] = {1, 3, 8, 32};
    static float out[32 * 32 * 3];
    mt_data_spec s;
    mt_err err = MT_ERR_INIT;

    if (size < 1)
        return 0;
    memset(&s, 0, sizeof(s));
    s.format = MT_DATA_FORMAT_IMAGES;
    s.channels = data[0] & 1 ? 3 : 1;
    s.image_size[0] = sides[(data[0] >> 1) & 3];
    s.image_size[1] = sides[(data[0] >> 3) & 3];
    s.scale = 1.0f / 255.0f;
    s.std[0] = s.std[1] = s.std[2] = 1.0f;
    if (mt_data__image_decode(&s, data + 1, size - 1, "fuzz.img", out, &err) == MT_OK) {
        for (size_t i = 0; i < s.image_size[0] * s.image_size[1] * s.channels; i++)
            if (!isfinite(out[i]) || out[i] < 0.0f || out[i] > 1.0f)
                abort();
    } else if (err.msg[0] == '\0') {
        abort();
    }
    return 0;
}
