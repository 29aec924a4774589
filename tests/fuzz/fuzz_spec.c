/* SPDX-License-Identifier: MIT */
/*
 * fuzz_spec.c — libFuzzer target for the job-spec parser (mt_job_spec_parse in
 * core/model/mt_model.h); a parsed spec is also built into a model for a small input. Any crash,
 * leak or sanitizer report is a bug. Seeds: tests/fuzz/corpus/fuzz_spec/.
 */
#include <stddef.h>
#include <stdint.h>

#include "model/mt_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_job_spec *s = NULL;
    mt_model *m = NULL;
    mt_err err = MT_ERR_INIT;
    size_t in[3] = {12, 12, 1};

    if (mt_job_spec_parse((const char *)data, size, &s, &err) != MT_OK)
        return 0;
    if (s->input_rank == 0 || (s->input_shape[0] * (s->input_rank > 1 ? s->input_shape[1] : 1) *
                               (s->input_rank > 2 ? s->input_shape[2] : 1)) <= 4096) {
        int rank = s->input_rank ? s->input_rank : 3;
        if (mt_model_new(s, rank, s->input_rank ? s->input_shape : in, 2, &m, &err) == MT_OK)
            mt_model_free(m);
    }
    mt_job_spec_free(s);
    return 0;
}
