/* SPDX-License-Identifier: MIT */
/*
 * mt_layout.c — Layout values, shard arithmetic and the regex LayoutMap
 * (contract in mt_layout.h).
 *
 * DESIGN: a layout stores dimension NAMES, not indices, so one layout map can be
 * checked against any mesh (`--mesh` overrides the spec's mesh); names are
 * resolved against the mesh in each call that takes one. Map entries keep the
 * key text (for JSON paths in messages) beside the compiled regex_t.
 * Threading: see the header. Tests: tests/unit/test_layout.c.
 */
#include "layout/mt_layout.h"

#include <cjson/cJSON.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"

typedef struct map_entry {
    char *key;  /* regex text as given */
    regex_t re; /* compiled ^(key)$ */
    mt_layout lay;
} map_entry;

struct mt_layout_map {
    map_entry *entries;
    int n, cap;
    int has_input;
    mt_layout input;
};

static int is_unsharded(const char *a)
{
    return strcmp(a, MT_LAYOUT_UNSHARDED) == 0;
}

mt_code mt_layout_init(mt_layout *l, const char *const *axes, int rank, mt_err *err)
{
    mt_layout tmp;

    if (rank < 0 || rank > MT_LAYOUT_MAX_RANK)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "layout: rank %d outside 0..%d", rank,
                          MT_LAYOUT_MAX_RANK);
    memset(&tmp, 0, sizeof(tmp));
    tmp.rank = rank;
    for (int i = 0; i < rank; i++) {
        const char *a = axes[i];
        if (a == NULL || (!is_unsharded(a) && !mt_mesh_name_valid(a)))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "layout axis %d: '%.40s' is neither \"unsharded\" nor a mesh "
                              "dimension name",
                              i, a != NULL ? a : "(null)");
        for (int j = 0; j < i && !is_unsharded(a); j++)
            if (strcmp(tmp.axes[j], a) == 0)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "layout axis %d: mesh dimension '%s' is already used by axis %d",
                                  i, a, j);
        snprintf(tmp.axes[i], MT_MESH_NAME_MAX, "%s", a);
    }
    *l = tmp;
    return MT_OK;
}

mt_code mt_layout_init_replicated(mt_layout *l, int rank, mt_err *err)
{
    const char *axes[MT_LAYOUT_MAX_RANK];

    for (int i = 0; i < MT_LAYOUT_MAX_RANK; i++)
        axes[i] = MT_LAYOUT_UNSHARDED;
    return mt_layout_init(l, axes, rank, err);
}

mt_code mt_layout_init_batch_sharded(mt_layout *l, const char *dim, int rank, mt_err *err)
{
    const char *axes[MT_LAYOUT_MAX_RANK];

    if (rank < 1 || rank > MT_LAYOUT_MAX_RANK)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "layout: batch_sharded rank %d outside 1..%d",
                          rank, MT_LAYOUT_MAX_RANK);
    for (int i = 0; i < MT_LAYOUT_MAX_RANK; i++)
        axes[i] = MT_LAYOUT_UNSHARDED;
    axes[0] = dim;
    return mt_layout_init(l, axes, rank, err);
}

mt_code mt_layout_from_json(mt_layout *l, const cJSON *json, const char *path, mt_err *err)
{
    const char *axes[MT_LAYOUT_MAX_RANK];
    const cJSON *e;
    int n = 0;
    mt_layout tmp;

    if (path == NULL)
        path = "layout";
    if (!cJSON_IsArray(json))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: expected an array of mesh dimension names or \"unsharded\"", path);
    cJSON_ArrayForEach(e, json)
    {
        if (n == MT_LAYOUT_MAX_RANK)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: more than %d axes", path,
                              MT_LAYOUT_MAX_RANK);
        if (!cJSON_IsString(e))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s[%d]: expected a string (a mesh dimension name or \"unsharded\")",
                              path, n);
        if (!is_unsharded(e->valuestring) && !mt_mesh_name_valid(e->valuestring))
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "%s[%d]: '%.40s' is neither \"unsharded\" nor a mesh dimension name",
                              path, n, e->valuestring);
        for (int j = 0; j < n && !is_unsharded(e->valuestring); j++)
            if (strcmp(axes[j], e->valuestring) == 0)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "%s[%d]: mesh dimension '%s' is already used by axis %d", path, n,
                                  e->valuestring, j);
        axes[n++] = e->valuestring;
    }
    if (mt_layout_init(&tmp, axes, n, err) != MT_OK)
        return mt_err_prefix(err, "%s", path);
    *l = tmp;
    return MT_OK;
}

int mt_layout_axis_unsharded(const mt_layout *l, int i)
{
    return i < 0 || i >= l->rank || is_unsharded(l->axes[i]);
}

int mt_layout_axis_of(const mt_layout *l, const char *dim)
{
    for (int i = 0; i < l->rank; i++)
        if (!is_unsharded(l->axes[i]) && strcmp(l->axes[i], dim) == 0)
            return i;
    return -1;
}

int mt_layout_is_replicated(const mt_layout *l)
{
    for (int i = 0; i < l->rank; i++)
        if (!is_unsharded(l->axes[i]))
            return 0;
    return 1;
}

size_t mt_layout_format(const mt_layout *l, char *buf, size_t n)
{
    size_t len = 0;

    if (l->rank == 0)
        return (size_t)snprintf(buf, n, "[]");
    for (int i = 0; i <= l->rank; i++) {
        int w;
        if (i == l->rank)
            w = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "]");
        else
            w = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "%s%s",
                         i == 0 ? "[" : ", ", l->axes[i]);
        if (w > 0)
            len += (size_t)w;
    }
    return len;
}

/* "path[axis]" when path is set, else "tensor NAME" (axis-level messages add "axis N"). */
static void where_axis(char *buf, size_t n, const char *path, const char *tensor, int axis)
{
    if (path != NULL)
        snprintf(buf, n, "%s[%d]", path, axis);
    else
        snprintf(buf, n, "tensor %s: axis %d", tensor != NULL ? tensor : "?", axis);
}

mt_code mt_layout_validate(const mt_layout *l, const mt_mesh *mesh, const char *tensor,
                           const int64_t *shape, int rank, const char *path, mt_err *err)
{
    char w[200], ms[128], ls[160];

    if (tensor == NULL)
        tensor = "?";
    mt_mesh_format(mesh, ms, sizeof(ms));
    mt_layout_format(l, ls, sizeof(ls));
    if (l->rank != rank) {
        if (path != NULL)
            snprintf(w, sizeof(w), "%s", path);
        else
            snprintf(w, sizeof(w), "tensor %s", tensor);
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: layout %s has rank %d but tensor %s has rank %d", w, ls, l->rank,
                          tensor, rank);
    }
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "tensor %s: axis %d has negative size %lld",
                              tensor, i, (long long)shape[i]);
    for (int i = 0; i < rank; i++) {
        int d;
        if (is_unsharded(l->axes[i]))
            continue;
        where_axis(w, sizeof(w), path, tensor, i);
        d = mt_mesh_dim_index(mesh, l->axes[i]);
        if (d < 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: mesh has no dimension '%s' (mesh %s)",
                              w, l->axes[i], ms);
        for (int j = 0; j < i; j++)
            if (strcmp(l->axes[j], l->axes[i]) == 0)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "%s: mesh dimension '%s' is already used by axis %d", w,
                                  l->axes[i], j);
    }
    for (int i = 0; i < rank; i++) {
        int k;
        if (is_unsharded(l->axes[i]))
            continue;
        k = mt_mesh_dim_size(mesh, mt_mesh_dim_index(mesh, l->axes[i]));
        if (shape[i] % k != 0) {
            if (path != NULL)
                return mt_err_set(err, MT_INVALID_ARGUMENT,
                                  "%s[%d]: tensor %s: axis %d of size %lld is not divisible by "
                                  "mesh dimension '%s' of size %d",
                                  path, i, tensor, i, (long long)shape[i], l->axes[i], k);
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "tensor %s: axis %d of size %lld is not divisible by mesh "
                              "dimension '%s' of size %d",
                              tensor, i, (long long)shape[i], l->axes[i], k);
        }
    }
    return MT_OK;
}

mt_code mt_layout_shard(const mt_layout *l, const mt_mesh *mesh, const int64_t *shape, int device,
                        int64_t *local_shape, int64_t *offsets, mt_err *err)
{
    int coords[MT_MESH_MAX_DIMS];
    mt_code rc = mt_mesh_coords(mesh, device, coords, err);

    if (rc != MT_OK)
        return rc;
    for (int i = 0; i < l->rank; i++) {
        int d, k;
        if (is_unsharded(l->axes[i])) {
            local_shape[i] = shape[i];
            offsets[i] = 0;
            continue;
        }
        d = mt_mesh_dim_index(mesh, l->axes[i]);
        if (d < 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "layout axis %d: mesh has no dimension '%s'", i, l->axes[i]);
        k = mt_mesh_dim_size(mesh, d);
        if (shape[i] % k != 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT,
                              "layout axis %d: size %lld is not divisible by mesh dimension '%s' "
                              "of size %d",
                              i, (long long)shape[i], l->axes[i], k);
        local_shape[i] = shape[i] / k;
        offsets[i] = coords[d] * local_shape[i];
    }
    return MT_OK;
}

int mt_layout_replicated_dims(const mt_layout *l, const mt_mesh *mesh, int *dims)
{
    int n = 0;

    for (int d = 0; d < mt_mesh_ndims(mesh); d++)
        if (mt_layout_axis_of(l, mt_mesh_dim_name(mesh, d)) < 0)
            dims[n++] = d;
    return n;
}

/* ------------------------------------------------------------------ LayoutMap */

mt_code mt_layout_map_new(mt_layout_map **out, mt_err *err)
{
    *out = mt_calloc(1, sizeof(**out));
    if (*out == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "layout map: out of memory");
    return MT_OK;
}

void mt_layout_map_free(mt_layout_map *map)
{
    if (map == NULL)
        return;
    for (int i = 0; i < map->n; i++) {
        regfree(&map->entries[i].re);
        mt_free(map->entries[i].key);
    }
    mt_free(map->entries);
    mt_free(map);
}

/* JSON string literal of s (escaped, quoted) into buf. */
static void json_quote(const char *s, char *buf, size_t n)
{
    size_t k = 0;

    if (n < 3) {
        if (n > 0)
            buf[0] = '\0';
        return;
    }
    buf[k++] = '"';
    for (; *s != '\0' && k + 8 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[k++] = '\\';
            buf[k++] = (char)c;
        } else if (c < 0x20) {
            k += (size_t)snprintf(buf + k, n - k, "\\u%04x", c);
        } else {
            buf[k++] = (char)c;
        }
    }
    buf[k++] = '"';
    buf[k] = '\0';
}

static void entry_path(const char *key, char *buf, size_t n)
{
    char q[200];

    json_quote(key, q, sizeof(q));
    snprintf(buf, n, "layouts[%s]", q);
}

void mt_layout_map_path(const mt_layout_map *map, int i, char *buf, size_t n)
{
    if (i < 0 || i >= map->n) {
        snprintf(buf, n, "layouts[?]");
        return;
    }
    entry_path(map->entries[i].key, buf, n);
}

/*
 * Whether glibc's regcomp could take too long or too much memory on this ERE. regcomp copies a
 * repeated sub-expression once per repetition ("x{3,5}": 5 copies, "x+": 2), so stacked or nested
 * repetitions multiply its size ("a" followed by 29 '+' needed > 2 GB: fuzz_spec_layout seed
 * crash-f02848b769fb399f), and its epsilon closures grow with interleaved optional repetitions
 * ("a+++++??????+++++++" runs for minutes: seed crash-0a4cf8237f146fef). Refused: a repetition
 * right after another ("a+?" means nothing in an ERE), repetitions nested more than
 * MT_LAYOUT_REGEX_MAX_NESTED deep, more than MT_LAYOUT_REGEX_MAX_DEPTH groups deep, and an
 * estimated tree of more than MT_LAYOUT_REGEX_MAX_COST nodes (counted in doubles: no overflow).
 */
static bool regex_too_complex(const char *p)
{
    double sum[MT_LAYOUT_REGEX_MAX_DEPTH + 1], last = 0;
    int nest[MT_LAYOUT_REGEX_MAX_DEPTH + 1], last_nest = 0, depth = 0;
    bool after_rep = false;

    sum[0] = 0;
    nest[0] = 0;
    while (*p != '\0') {
        double k = 0;
        if (*p == '(') {
            if (depth == MT_LAYOUT_REGEX_MAX_DEPTH)
                return true;
            depth++;
            sum[depth] = 0;
            nest[depth] = 0;
            last = 0;
            last_nest = 0;
            after_rep = false;
            p++;
            continue;
        }
        if (*p == ')' && depth > 0) {
            last = sum[depth] + 1;
            last_nest = nest[depth];
            depth--;
            sum[depth] += last;
            after_rep = false;
            p++;
            continue;
        }
        if (*p == '*' || *p == '?')
            k = 1;
        else if (*p == '+')
            k = 2;
        else if (*p == '{' && p[1] >= '0' && p[1] <= '9') { /* {m} {m,} {m,n} */
            char *end;
            double m = (double)strtoul(p + 1, &end, 10), n = m;
            if (*end == ',' && end[1] >= '0' && end[1] <= '9')
                n = (double)strtoul(end + 1, &end, 10);
            else if (*end == ',')
                n = m + 1, end++;
            k = (m > n ? m : n) + 1;
            p = *end != '\0' ? end : end - 1; /* at the '}': skipped below */
        }
        if (k > 0) { /* a repetition of the last item */
            if (after_rep || ++last_nest > MT_LAYOUT_REGEX_MAX_NESTED)
                return true;
            nest[depth] = last_nest > nest[depth] ? last_nest : nest[depth];
            sum[depth] += last * (k - 1) + 1;
            last = last * k + 1;
            after_rep = true;
            p++;
            continue;
        }
        if (*p == '[') { /* a bracket expression is one item; "[]...]" and "[^]...]" */
            p++;
            if (*p == '^')
                p++;
            if (*p == ']')
                p++;
            while (*p != '\0' && *p != ']')
                p++;
        } else if (*p == '\\' && p[1] != '\0') {
            p++;
        }
        last = *p == '|' ? 0 : 1;
        last_nest = 0;
        after_rep = false;
        sum[depth] += 1;
        if (*p != '\0')
            p++;
    }
    while (depth > 0) {
        double g = sum[depth--];
        sum[depth] += g;
    }
    return sum[0] > MT_LAYOUT_REGEX_MAX_COST;
}

mt_code mt_layout_map_add(mt_layout_map *map, const char *regex, const mt_layout *layout,
                          mt_err *err)
{
    char path[240];
    char *anchored;
    size_t len;
    map_entry e;
    int rc;

    if (regex == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "layouts: missing key");
    entry_path(regex, path, sizeof(path));
    for (int i = 0; i < map->n; i++)
        if (strcmp(map->entries[i].key, regex) == 0)
            return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: key appears twice", path);
    if (map->n == map->cap) {
        int cap = map->cap ? map->cap * 2 : 8;
        map_entry *ne = mt_realloc(map->entries, (size_t)cap * sizeof(*ne));
        if (ne == NULL)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
        map->entries = ne;
        map->cap = cap;
    }
    len = strlen(regex);
    if (len > MT_LAYOUT_REGEX_MAX_LEN || regex_too_complex(regex))
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED,
                          "%s: regular expression too large or with too many nested or stacked "
                          "repetitions (limits: %d bytes, %d groups deep, repetitions nested %d "
                          "deep, none right after another, about %d compiled states)",
                          path, MT_LAYOUT_REGEX_MAX_LEN, MT_LAYOUT_REGEX_MAX_DEPTH,
                          MT_LAYOUT_REGEX_MAX_NESTED, MT_LAYOUT_REGEX_MAX_COST);
    anchored = mt_malloc(len + 5);
    if (anchored == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    snprintf(anchored, len + 5, "^(%s)$", regex);
    rc = regcomp(&e.re, anchored, REG_EXTENDED | REG_NOSUB);
    mt_free(anchored);
    if (rc != 0) {
        char msg[128];
        regerror(rc, NULL, msg, sizeof(msg));
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s: invalid regular expression: %s", path,
                          msg);
    }
    e.key = mt_strdup(regex);
    if (e.key == NULL) {
        regfree(&e.re);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    }
    e.lay = *layout;
    map->entries[map->n++] = e;
    return MT_OK;
}

void mt_layout_map_set_input(mt_layout_map *map, const mt_layout *layout)
{
    map->input = *layout;
    map->has_input = 1;
}

mt_code mt_layout_map_from_json(const cJSON *spec, mt_layout_map **out, mt_err *err)
{
    mt_layout_map *map = NULL;
    const cJSON *layouts, *input, *e;
    mt_code rc;

    *out = NULL;
    if (!cJSON_IsObject(spec))
        return mt_err_set(err, MT_INVALID_ARGUMENT, "spec: expected a JSON object");
    layouts = cJSON_GetObjectItemCaseSensitive(spec, "layouts");
    input = cJSON_GetObjectItemCaseSensitive(spec, "input_layout");
    if (layouts != NULL && !cJSON_IsObject(layouts) && !cJSON_IsNull(layouts))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "layouts: expected an object {\"regex\": [axis names]}");
    rc = mt_layout_map_new(&map, err);
    if (rc != MT_OK)
        return rc;
    if (cJSON_IsObject(layouts)) {
        cJSON_ArrayForEach(e, layouts)
        {
            char path[240];
            mt_layout l;
            entry_path(e->string, path, sizeof(path));
            rc = mt_layout_from_json(&l, e, path, err);
            if (rc != MT_OK)
                goto fail;
            rc = mt_layout_map_add(map, e->string, &l, err);
            if (rc != MT_OK)
                goto fail;
        }
    }
    if (input != NULL && !cJSON_IsNull(input)) {
        mt_layout l;
        rc = mt_layout_from_json(&l, input, "input_layout", err);
        if (rc != MT_OK)
            goto fail;
        mt_layout_map_set_input(map, &l);
    }
    *out = map;
    return MT_OK;
fail:
    mt_layout_map_free(map);
    return rc;
}

int mt_layout_map_count(const mt_layout_map *map)
{
    return map->n;
}

const char *mt_layout_map_key(const mt_layout_map *map, int i)
{
    return i >= 0 && i < map->n ? map->entries[i].key : NULL;
}

const mt_layout *mt_layout_map_layout(const mt_layout_map *map, int i)
{
    return i >= 0 && i < map->n ? &map->entries[i].lay : NULL;
}

const mt_layout *mt_layout_map_input(const mt_layout_map *map)
{
    return map->has_input ? &map->input : NULL;
}

int mt_layout_map_match(const mt_layout_map *map, const char *name)
{
    for (int i = 0; i < map->n; i++) /* Keras: an exact key wins over any regex */
        if (strcmp(map->entries[i].key, name) == 0)
            return i;
    for (int i = 0; i < map->n; i++)
        if (regexec(&map->entries[i].re, name, 0, NULL, 0) == 0)
            return i;
    return -1;
}

bool mt_layout_equal(const mt_layout *a, const mt_layout *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++) {
        bool ua = is_unsharded(a->axes[i]), ub = is_unsharded(b->axes[i]);
        if (ua != ub || (!ua && strcmp(a->axes[i], b->axes[i]) != 0))
            return false;
    }
    return true;
}

mt_code mt_layout_map_resolve(const mt_layout_map *map, const char *name, int rank, mt_layout *out,
                              int *entry, mt_err *err)
{
    int i = mt_layout_map_match(map, name);

    if (entry != NULL)
        *entry = i;
    if (i < 0)
        return mt_layout_init_replicated(out, rank, err);
    if (map->entries[i].lay.rank != rank) {
        char path[240], ls[160];
        entry_path(map->entries[i].key, path, sizeof(path));
        mt_layout_format(&map->entries[i].lay, ls, sizeof(ls));
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: layout %s has rank %d but parameter %s has rank %d", path, ls,
                          map->entries[i].lay.rank, name, rank);
    }
    *out = map->entries[i].lay;
    return MT_OK;
}

/* Only the dimension names of l against mesh (no shape known). */
static mt_code check_names(const mt_layout *l, const mt_mesh *mesh, const char *path, mt_err *err)
{
    char ms[128];

    for (int i = 0; i < l->rank; i++) {
        if (is_unsharded(l->axes[i]) || mt_mesh_dim_index(mesh, l->axes[i]) >= 0)
            continue;
        mt_mesh_format(mesh, ms, sizeof(ms));
        return mt_err_set(err, MT_INVALID_ARGUMENT, "%s[%d]: mesh has no dimension '%s' (mesh %s)",
                          path, i, l->axes[i], ms);
    }
    return MT_OK;
}

mt_code mt_layout_map_check(const mt_layout_map *map, const mt_mesh *mesh,
                            const mt_layout_param *params, int nparams, const int64_t *input_shape,
                            int input_rank, mt_err *err)
{
    char path[240];
    mt_code rc;

    for (int i = 0; i < map->n; i++) {
        entry_path(map->entries[i].key, path, sizeof(path));
        rc = check_names(&map->entries[i].lay, mesh, path, err);
        if (rc != MT_OK)
            return rc;
    }
    if (map->has_input) {
        rc = check_names(&map->input, mesh, "input_layout", err);
        if (rc == MT_OK && input_shape != NULL)
            rc = mt_layout_validate(&map->input, mesh, "input", input_shape, input_rank,
                                    "input_layout", err);
        if (rc != MT_OK)
            return rc;
    }
    for (int i = 0; params != NULL && i < map->n; i++) { /* a key naming no weight: a typo */
        int p = 0;
        while (p < nparams && strcmp(map->entries[i].key, params[p].name) != 0 &&
               regexec(&map->entries[i].re, params[p].name, 0, NULL, 0) != 0)
            p++;
        if (p < nparams)
            continue;
        entry_path(map->entries[i].key, path, sizeof(path));
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "%s: matches no weight of the model (weights are named "
                          "<layer>.kernel, <layer>.bias, ...; e.g. %s)",
                          path, nparams > 0 ? params[0].name : "none");
    }
    for (int p = 0; p < nparams; p++) {
        mt_layout l;
        int entry;
        rc = mt_layout_map_resolve(map, params[p].name, params[p].rank, &l, &entry, err);
        if (rc != MT_OK)
            return rc;
        if (entry >= 0)
            entry_path(map->entries[entry].key, path, sizeof(path));
        else
            snprintf(path, sizeof(path), "param %s", params[p].name);
        rc = mt_layout_validate(&l, mesh, params[p].name, params[p].shape, params[p].rank, path,
                                err);
        if (rc != MT_OK)
            return rc;
    }
    return MT_OK;
}
