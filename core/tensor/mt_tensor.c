/* SPDX-License-Identifier: MIT */
/*
 * mt_tensor.c — tensor objects: owned buffers, views, slices, reshape and copy (mt_tensor.h).
 * Threading: reentrant. Tests: tests/unit/test_tensor.c.
 */
#include "tensor/mt_tensor.h"

#include <assert.h>
#include <string.h>

#include "alloc/mt_alloc.h"

static void tensor_set_contiguous(mt_tensor *t)
{
    size_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
    }
}

mt_code mt_tensor_init(mt_tensor *t, int rank, const size_t *shape, mt_err *err)
{
    size_t n = 1;

    memset(t, 0, sizeof(*t));
    if (rank < 0 || rank > MT_TENSOR_MAX_RANK)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "tensor rank %d not in 0..%d", rank,
                          MT_TENSOR_MAX_RANK);
    for (int i = 0; i < rank; i++) {
        if (shape[i] != 0 && n > SIZE_MAX / sizeof(float) / shape[i])
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tensor shape overflows size_t");
        n *= shape[i];
    }
    t->data = mt_calloc(n ? n : 1, sizeof(float));
    if (t->data == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "tensor of %zu floats: out of memory", n);
    t->rank = rank;
    memcpy(t->shape, shape, (size_t)rank * sizeof(size_t));
    tensor_set_contiguous(t);
    t->owned = true;
    return MT_OK;
}

void mt_tensor_fini(mt_tensor *t)
{
    if (t == NULL)
        return;
    if (t->owned)
        mt_free(t->data);
    memset(t, 0, sizeof(*t));
}

mt_tensor mt_tensor_view(float *data, int rank, const size_t *shape)
{
    mt_tensor t;
    memset(&t, 0, sizeof(t));
    assert(rank >= 0 && rank <= MT_TENSOR_MAX_RANK);
    t.data = data;
    t.rank = rank;
    memcpy(t.shape, shape, (size_t)rank * sizeof(size_t));
    tensor_set_contiguous(&t);
    return t;
}

size_t mt_tensor_numel(const mt_tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->shape[i];
    return n;
}

bool mt_tensor_is_contiguous(const mt_tensor *t)
{
    size_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return false;
        s *= t->shape[i];
    }
    return true;
}

float *mt_tensor_at(const mt_tensor *t, const size_t *idx)
{
    size_t off = 0;
    for (int i = 0; i < t->rank; i++) {
        assert(idx[i] < t->shape[i]);
        off += idx[i] * t->stride[i];
    }
    return t->data + off;
}

mt_code mt_tensor_slice(const mt_tensor *t, int axis, size_t start, size_t len, mt_tensor *out,
                        mt_err *err)
{
    if (axis < 0 || axis >= t->rank)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "slice axis %d of a rank-%d tensor", axis,
                          t->rank);
    if (start > t->shape[axis] || len > t->shape[axis] - start)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "slice [%zu, %zu) of axis %d of size %zu",
                          start, start + len, axis, t->shape[axis]);
    *out = *t;
    out->owned = false;
    out->data = t->data + start * t->stride[axis];
    out->shape[axis] = len;
    return MT_OK;
}

mt_code mt_tensor_reshape(const mt_tensor *t, int rank, const size_t *shape, mt_tensor *out,
                          mt_err *err)
{
    size_t n = 1;
    if (rank < 0 || rank > MT_TENSOR_MAX_RANK)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "reshape to rank %d", rank);
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    if (!mt_tensor_is_contiguous(t))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "reshape of a non-contiguous view");
    if (n != mt_tensor_numel(t))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "reshape of %zu elements into %zu",
                          mt_tensor_numel(t), n);
    *out = mt_tensor_view(t->data, rank, shape);
    return MT_OK;
}

mt_code mt_tensor_copy(mt_tensor *dst, const mt_tensor *src, mt_err *err)
{
    size_t idx[MT_TENSOR_MAX_RANK] = {0};
    size_t n;

    if (dst->rank != src->rank ||
        memcmp(dst->shape, src->shape, (size_t)src->rank * sizeof(size_t)) != 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "copy between tensors of different shapes");
    n = mt_tensor_numel(src);
    for (size_t i = 0; i < n; i++) {
        *mt_tensor_at(dst, idx) = *mt_tensor_at(src, idx);
        for (int a = src->rank - 1; a >= 0; a--) {
            if (++idx[a] < src->shape[a])
                break;
            idx[a] = 0;
        }
    }
    return MT_OK;
}

mt_code mt_flatten(const mt_tensor *t, mt_tensor *out, mt_err *err)
{
    size_t shape[2];
    if (t->rank < 1)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "flatten of a rank-0 tensor");
    shape[0] = t->shape[0];
    shape[1] = 1;
    for (int i = 1; i < t->rank; i++)
        shape[1] *= t->shape[i];
    return mt_tensor_reshape(t, 2, shape, out, err);
}
