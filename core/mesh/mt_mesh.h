/* SPDX-License-Identifier: MIT */
/*
 * mt_mesh.h — a Mesh: an ordered list of named dimensions with sizes over a list
 * of device ids (DTensor's Mesh). `batch=4,model=2` over devices 0..7.
 *
 * Who calls it: the job-spec loader (mt_mesh_from_json), `meshtrain train --mesh`
 * (mt_mesh_parse), the layout module (shard shapes), the collectives (groups of
 * devices along mesh dimensions) and the worker's SPMD step.
 *
 * Invariants of a mesh handle (checked by every constructor, never changed after):
 *   * 1..MT_MESH_MAX_DIMS dimensions; names are C identifiers ([A-Za-z_][A-Za-z0-9_]*,
 *     at most MT_MESH_NAME_MAX - 1 bytes), unique; "unsharded" is reserved (layouts
 *     use it to mean "not sharded");
 *   * every size >= 1 (a dimension of size 1 is valid);
 *   * the product of the sizes equals the number of devices; device ids are
 *     distinct and >= 0.
 * Device order is row-major over the coordinates: the LAST dimension varies
 * fastest, as in DTensor. With batch=4,model=2 over devices 0..7, device 5 is at
 * (batch=2, model=1). The device at mesh position p (0-based) is devices[p].
 *
 * Threading: a mesh is immutable after construction; every read-only function may
 * be called from any thread concurrently. Nothing blocks.
 * Tests: tests/unit/test_mesh.c; fuzz: tests/fuzz/fuzz_spec_layout.c.
 */
#ifndef MT_MESH_H
#define MT_MESH_H

#include <stddef.h>
#include <stdint.h>

#include "status/mt_status.h"

struct cJSON;

#define MT_MESH_MAX_DIMS    8
#define MT_MESH_NAME_MAX    32 /* buffer size for a dimension name, NUL included */
#define MT_MESH_MAX_DEVICES 65536

typedef struct mt_mesh mt_mesh;

/*
 * Build a mesh from parallel arrays of `ndims` names and sizes (borrowed, copied).
 * devices: `ndevices` distinct device ids >= 0 (borrowed, copied), or NULL for the
 * ids 0..product-1 (then ndevices must be 0 or equal to the product).
 * On success *out is a new mesh the caller owns (mt_mesh_free); on failure *out = NULL.
 * Codes: MT_INVALID_ARGUMENT (bad name, duplicate name, size < 1, no dimension,
 * too many dimensions, product != ndevices, duplicate or negative device id),
 * MT_RESOURCE_EXHAUSTED (allocation).
 */
mt_code mt_mesh_new(const char *const *names, const int *sizes, int ndims, const int *devices,
                    int ndevices, mt_mesh **out, mt_err *err);

/*
 * Parse the CLI form "batch=4,model=2" (spaces around tokens allowed). devices and
 * ndevices as in mt_mesh_new (ndevices 0 with devices NULL: no device count given,
 * the mesh covers 0..product-1). Same ownership and codes as mt_mesh_new; the
 * message quotes the offending token ("mesh 'batch=x': dimension 'batch': size 'x'
 * is not an integer").
 */
mt_code mt_mesh_parse(const char *text, const int *devices, int ndevices, mt_mesh **out,
                      mt_err *err);

/*
 * Build a mesh from a job-spec JSON value (borrowed): an object in order
 * {"batch": 4, "model": 2} (cJSON keeps object order) or an array of pairs
 * [["batch", 4], ["model", 2]]. `path` (borrowed, may be NULL = "mesh") names the
 * value in error messages: `mesh.model: size must be an integer >= 1, got 0`.
 * devices/ndevices, ownership and codes as mt_mesh_new.
 */
mt_code mt_mesh_from_json(const struct cJSON *json, const char *path, const int *devices,
                          int ndevices, mt_mesh **out, mt_err *err);

/* Release a mesh. NULL is a no-op. */
void mt_mesh_free(mt_mesh *mesh);

/* Number of dimensions (>= 1). */
int mt_mesh_ndims(const mt_mesh *mesh);
/* Name of dimension i (0 <= i < ndims), borrowed from the mesh; NULL when i is out of range. */
const char *mt_mesh_dim_name(const mt_mesh *mesh, int i);
/* Size of dimension i; 0 when i is out of range. */
int mt_mesh_dim_size(const mt_mesh *mesh, int i);
/* Index of the dimension called `name`, or -1 when the mesh has none. */
int mt_mesh_dim_index(const mt_mesh *mesh, const char *name);
/* Number of devices (product of the sizes). */
int mt_mesh_num_devices(const mt_mesh *mesh);
/* Device id at mesh position p (0 <= p < num_devices), or -1 when out of range. */
int mt_mesh_device_at(const mt_mesh *mesh, int p);
/* Mesh position of a device id, or -1 when the device is not in the mesh. */
int mt_mesh_position(const mt_mesh *mesh, int device);

/*
 * Coordinates of `device`: coords[i] for dimension i (caller array of ndims ints).
 * Codes: MT_NOT_FOUND (device not in the mesh).
 */
mt_code mt_mesh_coords(const mt_mesh *mesh, int device, int *coords, mt_err *err);

/*
 * The device at the given coordinates (ndims ints, borrowed) into *device.
 * Codes: MT_OUT_OF_RANGE (a coordinate outside 0..size-1).
 */
mt_code mt_mesh_device(const mt_mesh *mesh, const int *coords, int *device, mt_err *err);

/*
 * The group of devices that differ from `device` only along the dimensions named
 * in dims[0..ndims-1] (borrowed): the devices a collective along those dimensions
 * involves, `device` included. Written to out_devices (caller array with room for
 * mt_mesh_num_devices() ids), count in *n. Order: row-major over the selected
 * dimensions taken in MESH order (the last mesh dimension varies fastest),
 * whatever order dims lists them in, so a reduction over the group has a fixed
 * order set by mesh coordinates. ndims == 0 gives the group {device}.
 * my_index (may be NULL) receives the position of `device` in the group.
 * Codes: MT_NOT_FOUND (device not in the mesh), MT_INVALID_ARGUMENT (unknown or
 * repeated dimension name).
 */
mt_code mt_mesh_group(const mt_mesh *mesh, int device, const char *const *dims, int ndims,
                      int *out_devices, int *n, int *my_index, mt_err *err);

/* The same as mt_mesh_group with dimension indices instead of names. */
mt_code mt_mesh_group_idx(const mt_mesh *mesh, int device, const int *dims, int ndims,
                          int *out_devices, int *n, int *my_index, mt_err *err);

/*
 * Write "batch=4,model=2" into buf (size n, NUL-terminated, truncated if short).
 * Returns the length the full text needs (snprintf's convention).
 */
size_t mt_mesh_format(const mt_mesh *mesh, char *buf, size_t n);

/* True (1) when `name` is a valid mesh dimension name (see the invariants above). */
int mt_mesh_name_valid(const char *name);

#endif
