/* SPDX-License-Identifier: MIT */
/*
 * registry.c — the layer kinds: one line per module (docs/layers.md). The order is the one
 * messages list them in.
 */
#include <string.h>

#include "layers/layers_int.h"

/* one line per kind */
/* clang-format off */
static const mt_layer_ops *const kinds[] = {
    &mt_layer_dense_ops,
    &mt_layer_conv2d_ops,
    &mt_layer_max_pool2d_ops,
    &mt_layer_flatten_ops,
    &mt_layer_batch_norm_ops,
    &mt_layer_dropout_ops,
    &mt_layer_add_ops,
    &mt_layer_concatenate_ops,
    &mt_layer_activation_ops,
    &mt_layer_global_average_pooling2d_ops,
    &mt_layer_layer_norm_ops,
    &mt_layer_average_pooling2d_ops,
    &mt_layer_embedding_ops,
    &mt_layer_position_embedding_ops,
    &mt_layer_attention_ops,
};
/* clang-format on */
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

const mt_layer_ops *mt_layer_ops_of(mt_layer_kind kind)
{
    for (size_t i = 0; i < N_KINDS; i++)
        if (kinds[i]->kind == kind)
            return kinds[i];
    return NULL;
}

const mt_layer_ops *mt_layer_ops_find(const char *type)
{
    for (size_t i = 0; i < N_KINDS; i++)
        if (strcmp(kinds[i]->type, type) == 0)
            return kinds[i];
    return NULL;
}

void mt_layer_type_names(char *buf, size_t cap)
{
    size_t o = 0;
    if (cap > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < N_KINDS && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ", %s" : "%s", kinds[i]->type);
}
