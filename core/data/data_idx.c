/* SPDX-License-Identifier: MIT */
/*
 * data_idx.c — IDX source adapter (images + labels files) over core/data/mt_idx.h.
 *
 * Placeholder until the IDX reader lands on main: both entry points return UNIMPLEMENTED.
 * Tests: tests/unit/test_data_pipeline.c.
 */
#include "data/data_int.h"

static mt_code idx_count(const mt_data_spec *spec, const mt_data_file *f, size_t *n, mt_err *err)
{
    (void)spec;
    *n = 0;
    return mt_err_set(err, MT_UNIMPLEMENTED, "%s: IDX reader not available yet", f->path);
}

static mt_code idx_load(const mt_data_spec *spec, const mt_data_file *f, const mt_data_tfidf *vec,
                        mt_data_block *out, mt_err *err)
{
    (void)spec;
    (void)vec;
    (void)out;
    return mt_err_set(err, MT_UNIMPLEMENTED, "%s: IDX reader not available yet", f->path);
}

const mt_data__source mt_data__idx_source = {"idx", idx_count, idx_load};
