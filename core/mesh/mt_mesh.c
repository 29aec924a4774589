/* SPDX-License-Identifier: MIT */
/*
 * mt_mesh.c — Mesh construction, parsing and device <-> coordinate mapping
 * (contract in mt_mesh.h).
 *
 * DESIGN: a mesh is tiny (<= 8 dims) and immutable, so it stores the names in
 * fixed arrays and the device list in one allocation; the position of a device
 * is found by a linear scan (meshes have at most MT_MESH_MAX_DEVICES devices and
 * lookups happen at setup time, not per step). Coordinates are row-major with
 * the last dimension fastest: position = sum(coord[i] * stride[i]).
 * Threading: immutable after construction. Tests: tests/unit/test_mesh.c.
 */
#include "mesh/mt_mesh.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"

struct mt_mesh {
    int ndims;
    char names[MT_MESH_MAX_DIMS][MT_MESH_NAME_MAX];
    int sizes[MT_MESH_MAX_DIMS];
    int strides[MT_MESH_MAX_DIMS]; /* row-major, last dimension stride 1 */
    int ndevices;                  /* product of sizes */
    int *devices;                  /* [ndevices], device id at each mesh position */
};

int mt_mesh_name_valid(const char *name)
{
    size_t len;

    if (name == NULL || name[0] == '\0')
        return 0;
    len = strlen(name);
    if (len >= MT_MESH_NAME_MAX)
        return 0;
    if (!(isalpha((unsigned char)name[0]) || name[0] == '_'))
        return 0;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)name[i]) || name[i] == '_'))
            return 0;
    return strcmp(name, "unsharded") != 0;
}

static mt_code check_name(const char *where, const char *name, mt_err *err)
{
    if (name == NULL || name[0] == '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: dimension name is empty", where);
    if (strcmp(name, "unsharded") == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: 'unsharded' is reserved and cannot name a mesh dimension", where);
    if (strlen(name) >= MT_MESH_NAME_MAX)
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: dimension name '%.40s...' is longer than %d bytes", where, name,
                          MT_MESH_NAME_MAX - 1);
    if (!mt_mesh_name_valid(name))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: dimension name '%s' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)",
                          where, name);
    return MT_OK;
}

/* Validates everything and builds the mesh; `where` prefixes messages ("mesh"). */
static mt_code mesh_build(const char *where, const char *const *names, const int *sizes, int ndims,
                          const int *devices, int ndevices, mt_mesh **out, mt_err *err)
{
    mt_mesh *m;
    long long product = 1;
    mt_code rc;

    *out = NULL;
    if (ndims < 1)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: a mesh needs at least one dimension",
                          where);
    if (ndims > MT_MESH_MAX_DIMS)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: %d dimensions, at most %d are supported",
                          where, ndims, MT_MESH_MAX_DIMS);
    for (int i = 0; i < ndims; i++) {
        rc = check_name(where, names[i], err);
        if (rc != MT_OK)
            return rc;
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "%s: dimension '%s' appears twice (positions %d and %d)", where,
                                  names[i], j, i);
        if (sizes[i] < 1)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: dimension '%s': size must be >= 1, got %d", where, names[i],
                              sizes[i]);
        product *= sizes[i];
        if (product > MT_MESH_MAX_DEVICES)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: more than %d devices", where,
                              MT_MESH_MAX_DEVICES);
    }
    if (ndevices < 0 || (devices != NULL && ndevices != product) ||
        (devices == NULL && ndevices != 0 && ndevices != product))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: the dimension sizes multiply to %lld devices but %d devices are "
                          "given",
                          where, product, ndevices);
    if (devices != NULL) {
        for (int i = 0; i < ndevices; i++) {
            if (devices[i] < 0)
                return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: device id %d is negative", where,
                                  devices[i]);
            for (int j = 0; j < i; j++)
                if (devices[i] == devices[j])
                    return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: device %d appears twice",
                                      where, devices[i]);
        }
    }
    m = mt_calloc(1, sizeof(*m));
    if (m == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", where);
    m->devices = mt_calloc((size_t)product, sizeof(int));
    if (m->devices == NULL) {
        mt_free(m);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", where);
    }
    m->ndims = ndims;
    m->ndevices = (int)product;
    for (int i = 0; i < ndims; i++) {
        snprintf(m->names[i], MT_MESH_NAME_MAX, "%s", names[i]);
        m->sizes[i] = sizes[i];
    }
    m->strides[ndims - 1] = 1;
    for (int i = ndims - 2; i >= 0; i--)
        m->strides[i] = m->strides[i + 1] * m->sizes[i + 1];
    for (int p = 0; p < m->ndevices; p++)
        m->devices[p] = devices != NULL ? devices[p] : p;
    *out = m;
    return MT_OK;
}

mt_code mt_mesh_new(const char *const *names, const int *sizes, int ndims, const int *devices,
                    int ndevices, mt_mesh **out, mt_err *err)
{
    if (out == NULL || (ndims > 0 && (names == NULL || sizes == NULL))) {
        if (out != NULL)
            *out = NULL;
        return mt_err_set(err, MT_INVALID_ARGUMENT, "mesh: missing argument");
    }
    return mesh_build("mesh", names, sizes, ndims, devices, ndevices, out, err);
}

static const char *skip_space(const char *s, const char *end)
{
    while (s < end && isspace((unsigned char)*s))
        s++;
    return s;
}

static const char *trim_end(const char *s, const char *end)
{
    while (end > s && isspace((unsigned char)end[-1]))
        end--;
    return end;
}

mt_code mt_mesh_parse(const char *text, const int *devices, int ndevices, mt_mesh **out,
                      mt_err *err)
{
    char names[MT_MESH_MAX_DIMS][MT_MESH_NAME_MAX];
    const char *name_ptrs[MT_MESH_MAX_DIMS];
    int sizes[MT_MESH_MAX_DIMS];
    char where[96];
    int nd = 0;
    const char *p;

    if (out == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "mesh: missing argument");
    *out = NULL;
    if (text == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "mesh: missing text");
    snprintf(where, sizeof(where), "mesh '%.60s'", text);
    p = text;
    if (*skip_space(p, p + strlen(p)) == '\0')
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: empty, expected NAME=SIZE[,NAME=SIZE...]",
                          where);
    for (;;) {
        const char *tok_end = strchr(p, ',');
        const char *eq, *ns, *ne, *vs, *ve;
        char num[32];
        char *endp;
        long v;

        if (tok_end == NULL)
            tok_end = p + strlen(p);
        if (nd == MT_MESH_MAX_DIMS)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: more than %d dimensions", where,
                              MT_MESH_MAX_DIMS);
        eq = memchr(p, '=', (size_t)(tok_end - p));
        if (eq == NULL)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: token '%.*s' is not NAME=SIZE", where,
                              (int)(tok_end - p), p);
        ns = skip_space(p, eq);
        ne = trim_end(ns, eq);
        vs = skip_space(eq + 1, tok_end);
        ve = trim_end(vs, tok_end);
        if ((size_t)(ne - ns) >= MT_MESH_NAME_MAX)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: dimension name '%.*s' is longer than %d bytes", where,
                              (int)(ne - ns), ns, MT_MESH_NAME_MAX - 1);
        memcpy(names[nd], ns, (size_t)(ne - ns));
        names[nd][ne - ns] = '\0';
        if (ve - vs <= 0 || (size_t)(ve - vs) >= sizeof(num))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: dimension '%s': size '%.*s' is not an integer", where, names[nd],
                              (int)(ve - vs), vs);
        memcpy(num, vs, (size_t)(ve - vs));
        num[ve - vs] = '\0';
        errno = 0;
        v = strtol(num, &endp, 10);
        if (*endp != '\0' || errno != 0 || !(isdigit((unsigned char)num[0]) || num[0] == '-'))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: dimension '%s': size '%s' is not an integer", where, names[nd],
                              num);
        if (v < 1 || v > MT_MESH_MAX_DEVICES)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s: dimension '%s': size must be >= 1, got %s", where, names[nd],
                              num);
        sizes[nd] = (int)v;
        name_ptrs[nd] = names[nd];
        nd++;
        if (*tok_end == '\0')
            break;
        p = tok_end + 1;
    }
    return mesh_build(where, name_ptrs, sizes, nd, devices, ndevices, out, err);
}

/* One (name, size) entry of the JSON form; `path` of the entry for messages. */
static mt_code json_size(const cJSON *v, const char *path, int *size, mt_err *err)
{
    /* floor, not a cast to long long: a cast of 1e34 is undefined (fuzz_spec_layout seed
     * crash-4666f7cfb529bc29) */
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: size must be an integer >= 1", path);
    if (v->valuedouble < 1 || v->valuedouble > MT_MESH_MAX_DEVICES)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: size must be an integer >= 1, got %.0f",
                          path, v->valuedouble);
    *size = (int)v->valuedouble;
    return MT_OK;
}

mt_code mt_mesh_from_json(const cJSON *json, const char *path, const int *devices, int ndevices,
                          mt_mesh **out, mt_err *err)
{
    const char *name_ptrs[MT_MESH_MAX_DIMS];
    int sizes[MT_MESH_MAX_DIMS];
    char ep[160];
    int nd = 0;
    const cJSON *e;
    mt_code rc;

    if (out == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "mesh: missing argument");
    *out = NULL;
    if (path == NULL)
        path = "mesh";
    if (json == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: missing", path);
    if (!cJSON_IsObject(json) && !cJSON_IsArray(json))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: expected an object {\"batch\": 4} or an array [[\"batch\", 4]]",
                          path);
    cJSON_ArrayForEach(e, json)
    {
        const char *name;
        const cJSON *sz;

        if (nd == MT_MESH_MAX_DIMS)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: more than %d dimensions", path,
                              MT_MESH_MAX_DIMS);
        if (cJSON_IsObject(json)) {
            name = e->string;
            sz = e;
            snprintf(ep, sizeof(ep), "%s.%.60s", path, name);
        } else {
            snprintf(ep, sizeof(ep), "%s[%d]", path, nd);
            if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 ||
                !cJSON_IsString(cJSON_GetArrayItem(e, 0)))
                return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: expected [\"name\", size]", ep);
            name = cJSON_GetArrayItem(e, 0)->valuestring;
            sz = cJSON_GetArrayItem(e, 1);
        }
        rc = check_name(ep, name, err);
        if (rc != MT_OK)
            return rc;
        rc = json_size(sz, ep, &sizes[nd], err);
        if (rc != MT_OK)
            return rc;
        name_ptrs[nd++] = name;
    }
    return mesh_build(path, name_ptrs, sizes, nd, devices, ndevices, out, err);
}

void mt_mesh_free(mt_mesh *mesh)
{
    if (mesh == NULL)
        return;
    mt_free(mesh->devices);
    mt_free(mesh);
}

int mt_mesh_ndims(const mt_mesh *mesh)
{
    return mesh->ndims;
}

const char *mt_mesh_dim_name(const mt_mesh *mesh, int i)
{
    return i >= 0 && i < mesh->ndims ? mesh->names[i] : NULL;
}

int mt_mesh_dim_size(const mt_mesh *mesh, int i)
{
    return i >= 0 && i < mesh->ndims ? mesh->sizes[i] : 0;
}

int mt_mesh_dim_index(const mt_mesh *mesh, const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < mesh->ndims; i++)
        if (strcmp(mesh->names[i], name) == 0)
            return i;
    return -1;
}

int mt_mesh_num_devices(const mt_mesh *mesh)
{
    return mesh->ndevices;
}

int mt_mesh_device_at(const mt_mesh *mesh, int p)
{
    return p >= 0 && p < mesh->ndevices ? mesh->devices[p] : -1;
}

int mt_mesh_position(const mt_mesh *mesh, int device)
{
    /* O(1) for the default order (device i at position i): sharding every device of a large
     * mesh was quadratic (a 16767-device mesh timed out in fuzz_spec_layout, seed
     * crash-e994f13ec59d1cc1) */
    if (device >= 0 && device < mesh->ndevices && mesh->devices[device] == device)
        return device;
    for (int p = 0; p < mesh->ndevices; p++)
        if (mesh->devices[p] == device)
            return p;
    return -1;
}

mt_code mt_mesh_coords(const mt_mesh *mesh, int device, int *coords, mt_err *err)
{
    int p = mt_mesh_position(mesh, device);

    if (p < 0)
        return mt_err_set(err, MT_NOT_FOUND, "mesh: device %d is not in the mesh", device);
    for (int i = 0; i < mesh->ndims; i++)
        coords[i] = (p / mesh->strides[i]) % mesh->sizes[i];
    return MT_OK;
}

mt_code mt_mesh_device(const mt_mesh *mesh, const int *coords, int *device, mt_err *err)
{
    int p = 0;

    for (int i = 0; i < mesh->ndims; i++) {
        if (coords[i] < 0 || coords[i] >= mesh->sizes[i])
            return mt_err_set(err, MT_OUT_OF_RANGE,
                              "mesh: coordinate %d of dimension '%s' is outside 0..%d", coords[i],
                              mesh->names[i], mesh->sizes[i] - 1);
        p += coords[i] * mesh->strides[i];
    }
    *device = mesh->devices[p];
    return MT_OK;
}

mt_code mt_mesh_group_idx(const mt_mesh *mesh, int device, const int *dims, int ndims,
                          int *out_devices, int *n, int *my_index, mt_err *err)
{
    int sel[MT_MESH_MAX_DIMS] = {0};
    int coords[MT_MESH_MAX_DIMS];
    int p = mt_mesh_position(mesh, device);
    int base = 0, count = 1, k = 0;
    int sdims[MT_MESH_MAX_DIMS], ns = 0;

    if (p < 0)
        return mt_err_set(err, MT_NOT_FOUND, "mesh: device %d is not in the mesh", device);
    if (ndims < 0 || ndims > mesh->ndims)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "mesh: %d group dimensions for a %d-d mesh",
                          ndims, mesh->ndims);
    for (int i = 0; i < ndims; i++) {
        if (dims[i] < 0 || dims[i] >= mesh->ndims)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "mesh: no dimension with index %d",
                              dims[i]);
        if (sel[dims[i]])
            return mt_err_set(err, MT_INVALID_ARGUMENT, "mesh: dimension '%s' listed twice",
                              mesh->names[dims[i]]);
        sel[dims[i]] = 1;
    }
    for (int i = 0; i < mesh->ndims; i++) {
        coords[i] = (p / mesh->strides[i]) % mesh->sizes[i];
        if (sel[i]) {
            sdims[ns++] = i;
            count *= mesh->sizes[i];
        } else {
            base += coords[i] * mesh->strides[i];
        }
    }
    /* enumerate the selected coordinates row-major, last selected dimension fastest */
    for (int g = 0; g < count; g++) {
        int rest = g, pos = base, me = 1;
        for (int s = ns - 1; s >= 0; s--) {
            int d = sdims[s];
            int c = rest % mesh->sizes[d];
            rest /= mesh->sizes[d];
            pos += c * mesh->strides[d];
            if (c != coords[d])
                me = 0;
        }
        out_devices[k] = mesh->devices[pos];
        if (me && my_index != NULL)
            *my_index = k;
        k++;
    }
    *n = k;
    return MT_OK;
}

mt_code mt_mesh_group(const mt_mesh *mesh, int device, const char *const *dims, int ndims,
                      int *out_devices, int *n, int *my_index, mt_err *err)
{
    int idx[MT_MESH_MAX_DIMS];

    if (ndims < 0 || ndims > mesh->ndims)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "mesh: %d group dimensions for a %d-d mesh",
                          ndims, mesh->ndims);
    for (int i = 0; i < ndims; i++) {
        idx[i] = mt_mesh_dim_index(mesh, dims[i]);
        if (idx[i] < 0) {
            char m[128];
            mt_mesh_format(mesh, m, sizeof(m));
            return mt_err_set(err, MT_INVALID_ARGUMENT, "mesh %s has no dimension '%.40s'", m,
                              dims[i] != NULL ? dims[i] : "(null)");
        }
    }
    return mt_mesh_group_idx(mesh, device, idx, ndims, out_devices, n, my_index, err);
}

size_t mt_mesh_format(const mt_mesh *mesh, char *buf, size_t n)
{
    size_t len = 0;

    if (n > 0)
        buf[0] = '\0';
    for (int i = 0; i < mesh->ndims; i++) {
        int w = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "%s%s=%d",
                         i > 0 ? "," : "", mesh->names[i], mesh->sizes[i]);
        if (w > 0)
            len += (size_t)w;
    }
    return len;
}
