/* SPDX-License-Identifier: MIT */
/*
 * data_idx.c — IDX source adapter: one "file" is an (images, labels) pair of IDX files, gzipped
 * or plain, decoded by core/data/mt_idx.h into float32 NHWC pixels in [0,1] and int32 labels.
 *
 * Called by the dataset layer through mt_data__idx_source. `count` decodes only the (small)
 * labels file; `load` reads both and lets mt_idx_set_load check that the counts match, naming
 * both files otherwise. Threading: stateless. Tests: tests/unit/test_data_idx.c.
 */
#include <string.h>

#include "data/data_int.h"
#include "data/mt_idx.h"

static mt_code idx_count(const mt_data_spec *spec, const mt_data_file *f, const mt_data__fit *fit,
                         size_t *n, mt_err *err)
{
    mt_idx lab;
    mt_code rc;

    (void)spec;
    (void)fit;
    *n = 0;
    if (f->labels_path == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: IDX images without a labels file",
                          f->path);
    rc = mt_idx_read_file(f->labels_path, &lab, err);
    if (rc != MT_OK)
        return rc;
    if (lab.rank != 1) {
        mt_idx_fini(&lab);
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: labels must be a rank-1 IDX array",
                          f->labels_path);
    }
    *n = lab.dims[0];
    mt_idx_fini(&lab);
    return MT_OK;
}

static mt_code idx_load(const mt_data_spec *spec, const mt_data_file *f, const mt_data__fit *fit,
                        mt_data_block *out, mt_err *err)
{
    mt_idx_set set;
    mt_code rc;

    (void)fit;
    memset(out, 0, sizeof(*out));
    if (f->labels_path == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: IDX images without a labels file",
                          f->path);
    rc = mt_idx_set_load(f->path, f->labels_path, spec->num_classes, &set, err);
    if (rc != MT_OK)
        return rc;
    /* both buffers come from mt_malloc: the block adopts them */
    out->n = set.n;
    out->dim = set.h * set.w * set.c;
    out->y_dim = 1;
    out->shape[0] = set.h;
    out->shape[1] = set.w;
    out->shape[2] = set.c;
    out->x = set.images;
    out->y = set.labels;
    return MT_OK;
}

const mt_data__source mt_data__idx_source = {"idx", idx_count, idx_load, NULL};
