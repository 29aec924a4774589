/* SPDX-License-Identifier: MIT */
/*
 * mt_layout.h — Layouts (per tensor axis: a mesh dimension name or "unsharded")
 * and the LayoutMap (regular expressions over parameter names -> layouts), as in
 * DTensor's Layout and Keras' LayoutMap.
 *
 * Who calls it: the job-spec loader (mt_layout_map_from_json), the engine before
 * it allocates any device (mt_layout_map_check), the SPMD step (shard shapes and
 * offsets, which mesh dimensions a weight is replicated along) and checkpoint
 * restore (which slice of a global tensor a device reads).
 *
 * A layout is a small VALUE type (mt_layout, caller-provided memory, no _fini):
 * it is copied freely and stored inside other structs. Its fields are public for
 * reading; build it with the mt_layout_init* functions so it stays valid.
 * A layout is independent of any mesh; the functions taking a mesh bind its
 * dimension names to that mesh and report names the mesh lacks.
 *
 * Sharding rule: tensor axis a of global size G laid out over mesh dimension d
 * of size k (G % k == 0) gives every device G/k elements on that axis, at offset
 * coord_d * G/k, where coord_d is the device's coordinate along d. "unsharded"
 * axes are whole on every device. A tensor is REPLICATED along every mesh
 * dimension its layout does not name.
 *
 * LayoutMap matching: each key is a POSIX extended regular expression (regcomp
 * REG_EXTENDED) that must match the WHOLE parameter name (it is compiled as
 * ^(key)$), so "dense_1\.kernel" matches "dense_1.kernel" only, and
 * "dense_.*\.kernel" matches every dense kernel. Keys are tried in spec order and
 * the first match wins; a parameter no key matches is replicated.
 *
 * Threading: layouts are values; a layout map is immutable after it is built
 * (mt_layout_map_add is the only mutator) and may then be read from any thread.
 * Tests: tests/unit/test_layout.c; fuzz: tests/fuzz/fuzz_spec_layout.c.
 */
#ifndef MT_LAYOUT_H
#define MT_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mesh/mt_mesh.h"
#include "status/mt_status.h"

struct cJSON;

#define MT_LAYOUT_MAX_RANK  8
#define MT_LAYOUT_UNSHARDED "unsharded"

typedef struct mt_layout {
    int rank;                                        /* number of tensor axes, 0..MAX_RANK */
    char axes[MT_LAYOUT_MAX_RANK][MT_MESH_NAME_MAX]; /* mesh dim name or "unsharded" per axis */
} mt_layout;

/*
 * Set *l to a layout of `rank` axes named axes[0..rank-1] (borrowed; each a mesh
 * dimension name or "unsharded"). Checks only syntax (identifier names, a mesh
 * dimension used at most once); binding to a mesh happens in mt_layout_validate.
 * *l is written only on success.
 * Codes: MT_INVALID_ARGUMENT (rank outside 0..MT_LAYOUT_MAX_RANK, bad name, a
 * dimension used twice).
 */
mt_code mt_layout_init(mt_layout *l, const char *const *axes, int rank, mt_err *err);

/* Every axis "unsharded" (DTensor Layout.replicated). rank outside 0..MAX_RANK: INVALID_ARGUMENT.
 */
mt_code mt_layout_init_replicated(mt_layout *l, int rank, mt_err *err);

/*
 * Axis 0 sharded over mesh dimension `dim`, every other axis unsharded (DTensor
 * Layout.batch_sharded). Codes: MT_INVALID_ARGUMENT (rank < 1 or > MAX_RANK, bad name).
 */
mt_code mt_layout_init_batch_sharded(mt_layout *l, const char *dim, int rank, mt_err *err);

/*
 * Build a layout from a JSON array of strings (borrowed), e.g. ["unsharded", "model"].
 * `path` (borrowed) names the array in messages: `input_layout[1]: expected a string`.
 * Codes: MT_INVALID_ARGUMENT.
 */
mt_code mt_layout_from_json(mt_layout *l, const struct cJSON *json, const char *path, mt_err *err);

/* True (1) when axis i is "unsharded" (or i is out of range). */
int mt_layout_axis_unsharded(const mt_layout *l, int i);

/* The tensor axis sharded over mesh dimension `dim`, or -1 when none is. */
int mt_layout_axis_of(const mt_layout *l, const char *dim);

/* True (1) when every axis is unsharded. */
int mt_layout_is_replicated(const mt_layout *l);

/*
 * Write "[unsharded, model]" into buf (size n, NUL-terminated, truncated if short);
 * returns the length the full text needs.
 */
size_t mt_layout_format(const mt_layout *l, char *buf, size_t n);

/*
 * Check layout l for tensor `tensor` (borrowed, used in messages) of global
 * `shape[rank]` (borrowed) against `mesh`. `path` (borrowed, may be NULL) is the
 * JSON path of the layout; when set, messages about one axis start with
 * "path[axis]: ", otherwise with "tensor NAME: ". Checks, first failure wins:
 * rank equal to the tensor's; every named dimension exists in the mesh
 * ("mesh has no dimension 'model'"); no mesh dimension used twice; every sharded
 * axis divisible by its mesh dimension's size ("tensor dense_1.kernel: axis 1 of
 * size 48 is not divisible by mesh dimension 'model' of size 5"); no negative size.
 * Codes: MT_INVALID_ARGUMENT.
 */
mt_code mt_layout_validate(const mt_layout *l, const mt_mesh *mesh, const char *tensor,
                           const int64_t *shape, int rank, const char *path, mt_err *err);

/*
 * The shard of a tensor of global shape[l->rank] (borrowed) that `device` holds:
 * local_shape[i] and offsets[i] (caller arrays of l->rank) so the shard is the
 * global slice [offsets[i], offsets[i] + local_shape[i]) on every axis.
 * Does not re-check divisibility beyond what it needs: validate first.
 * Codes: MT_NOT_FOUND (device not in the mesh), MT_INVALID_ARGUMENT (a dimension
 * the mesh lacks, or an axis not divisible).
 */
mt_code mt_layout_shard(const mt_layout *l, const mt_mesh *mesh, const int64_t *shape, int device,
                        int64_t *local_shape, int64_t *offsets, mt_err *err);

/*
 * Mesh dimensions (indices, in mesh order) along which a tensor with layout l is
 * replicated, i.e. the mesh dimensions l does not name: written to dims (room for
 * MT_MESH_MAX_DIMS), count returned. Gradients of a weight are allreduced over
 * those of them along which the data is sharded.
 */
int mt_layout_replicated_dims(const mt_layout *l, const mt_mesh *mesh, int *dims);

/* Whether a and b have the same rank and shard the same axes over the same dimensions
 * ("unsharded" in either spelling compares equal). Pure. */
bool mt_layout_equal(const mt_layout *a, const mt_layout *b);

/* ------------------------------------------------------------------ LayoutMap */

typedef struct mt_layout_map mt_layout_map;

/* A parameter to check: name and global shape (all borrowed). */
typedef struct mt_layout_param {
    const char *name;
    const int64_t *shape;
    int rank;
} mt_layout_param;

/* A new, empty map (no entries, no input layout); caller owns it (mt_layout_map_free).
 * Codes: MT_RESOURCE_EXHAUSTED. */
mt_code mt_layout_map_new(mt_layout_map **out, mt_err *err);

/* Release a map. NULL is a no-op. */
void mt_layout_map_free(mt_layout_map *map);

/*
 * Append an entry: `regex` (borrowed, copied; POSIX ERE, full-name match) -> layout
 * (copied). Entries are matched in the order they were added.
 * Codes: MT_INVALID_ARGUMENT (the regex does not compile: "layouts[\"(\"]: invalid
 * regular expression: ..."; the same key added twice), MT_RESOURCE_EXHAUSTED (out of memory;
 * a regex longer than MT_LAYOUT_REGEX_MAX_LEN, nested deeper than MT_LAYOUT_REGEX_MAX_DEPTH
 * groups, with a repetition right after another ("a+?"), repetitions nested deeper than
 * MT_LAYOUT_REGEX_MAX_NESTED, or whose repetitions would make regcomp build more than about
 * MT_LAYOUT_REGEX_MAX_COST states — glibc copies repeated sub-expressions, so "a++++..." or
 * "(a{1,255}){1,255}" grow exponentially).
 * On failure the map is unchanged.
 */
#define MT_LAYOUT_REGEX_MAX_LEN    1024
#define MT_LAYOUT_REGEX_MAX_DEPTH  32
#define MT_LAYOUT_REGEX_MAX_COST   20000
#define MT_LAYOUT_REGEX_MAX_NESTED 6

mt_code mt_layout_map_add(mt_layout_map *map, const char *regex, const mt_layout *layout,
                          mt_err *err);

/* Set the input layout (copied). */
void mt_layout_map_set_input(mt_layout_map *map, const mt_layout *layout);

/*
 * Build a map from a job spec object (borrowed): its optional "layouts" object
 * (key = regex, value = array of axis names, in spec order) and its optional
 * "input_layout" array. Both absent gives an empty map. Errors carry the JSON
 * path: `layouts["dense_1\\.kernel"][1]: expected a string`.
 * On success *out is a new map the caller owns; on failure *out = NULL.
 * Codes: MT_INVALID_ARGUMENT, MT_RESOURCE_EXHAUSTED.
 */
mt_code mt_layout_map_from_json(const struct cJSON *spec, mt_layout_map **out, mt_err *err);

/* Number of entries. */
int mt_layout_map_count(const mt_layout_map *map);
/* Key (regex text) of entry i, borrowed; NULL when out of range. */
const char *mt_layout_map_key(const mt_layout_map *map, int i);
/* Layout of entry i, borrowed; NULL when out of range. */
const mt_layout *mt_layout_map_layout(const mt_layout_map *map, int i);
/* The input layout, borrowed, or NULL when none was set. */
const mt_layout *mt_layout_map_input(const mt_layout_map *map);

/*
 * Keras LayoutMap lookup: the entry whose key equals `name` exactly, else the first entry (in
 * the order added) whose key as a regex matches the whole of `name`; -1 when none matches (the
 * parameter is then replicated).
 */
int mt_layout_map_match(const mt_layout_map *map, const char *name);

/*
 * The layout of parameter `name` of rank `rank`: the first matching entry's layout,
 * or replicated(rank) when none matches. *entry (may be NULL) receives the entry
 * index or -1. Codes: MT_INVALID_ARGUMENT (the matching layout's rank differs:
 * `layouts["dense_.*"]: layout [unsharded, model] has rank 2 but parameter
 * dense_1.bias has rank 1`; rank out of range).
 */
mt_code mt_layout_map_resolve(const mt_layout_map *map, const char *name, int rank, mt_layout *out,
                              int *entry, mt_err *err);

/*
 * Validate everything before any device is allocated, reporting the first problem
 * with its JSON path: (1) every entry's dimension names exist in `mesh`
 * (`layouts["dense_1\\.kernel"][1]: mesh has no dimension 'model' (mesh batch=8)`);
 * (2) the input layout's names exist and, when input_shape is not NULL, it fits
 * input_shape[input_rank] (`input_layout[...]`); (3) when params is not NULL, every key matches at
 * least one parameter name (a typo guard: `layouts["featur.*kernel"]: matches no weight of the
 * model`); (4) for each parameter in order, its resolved layout has its rank and divides its shape
 * (path of the matching entry, or "param NAME" when it is replicated). Codes: MT_INVALID_ARGUMENT.
 */
mt_code mt_layout_map_check(const mt_layout_map *map, const mt_mesh *mesh,
                            const mt_layout_param *params, int nparams, const int64_t *input_shape,
                            int input_rank, mt_err *err);

/*
 * Write the JSON path of entry i (`layouts["dense_1\\.kernel"]`, the key escaped
 * as in JSON) into buf (size n, NUL-terminated, truncated if short).
 */
void mt_layout_map_path(const mt_layout_map *map, int i, char *buf, size_t n);

#endif
