/* SPDX-License-Identifier: MIT */
/*
 * fuzz_spec_layout.c — fuzz target for the mesh and layout parts of the job
 * spec: the input is parsed as JSON, its "mesh" goes to mt_mesh_from_json, the
 * whole object to mt_layout_map_from_json, and when both succeed the tutorial
 * MLP's parameters are checked and sharded on every device; the raw text is
 * also tried as a CLI mesh ("batch=4,model=2"). Nothing may crash or leak.
 * Seeds: tests/fuzz/corpus/fuzz_spec_layout/.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layout/mt_layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int64_t k1[] = {1200, 48}, b1[] = {48}, k2[] = {48, 2}, in[] = {64, 1200};
    const mt_layout_param params[] = {
        {"dense_1.kernel", k1, 2}, {"dense_1.bias", b1, 1}, {"dense_2.kernel", k2, 2}};
    char *text;
    cJSON *spec;
    mt_mesh *mesh = NULL;
    mt_layout_map *map = NULL;

    if (size > 4096) /* keep regexes short: glibc ERE back-references are exponential */
        return 0;
    text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (mt_mesh_parse(text, NULL, 0, &mesh, NULL) == MT_OK)
        mt_mesh_free(mesh);
    mesh = NULL;
    spec = cJSON_Parse(text);
    free(text);
    if (spec == NULL)
        return 0;
    if (mt_mesh_from_json(cJSON_GetObjectItemCaseSensitive(spec, "mesh"), NULL, NULL, 0, &mesh,
                          NULL) == MT_OK &&
        mt_layout_map_from_json(spec, &map, NULL) == MT_OK &&
        mt_layout_map_check(map, mesh, params, 3, in, 2, NULL) == MT_OK) {
        for (int p = 0; p < 3; p++) {
            mt_layout l;
            if (mt_layout_map_resolve(map, params[p].name, params[p].rank, &l, NULL, NULL) != MT_OK)
                abort(); /* check passed: resolve must too */
            for (int d = 0; d < mt_mesh_num_devices(mesh); d++) {
                int64_t ls[MT_LAYOUT_MAX_RANK], off[MT_LAYOUT_MAX_RANK];
                if (mt_layout_shard(&l, mesh, params[p].shape, mt_mesh_device_at(mesh, d), ls, off,
                                    NULL) != MT_OK)
                    abort();
            }
        }
    }
    mt_layout_map_free(map);
    mt_mesh_free(mesh);
    cJSON_Delete(spec);
    return 0;
}
