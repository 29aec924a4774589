/* SPDX-License-Identifier: MIT */
/* mt_sched.c — gang placement keeping innermost mesh groups on one worker (contract in mt_sched.h).
 */
#include "sched/mt_sched.h"

#include "alloc/mt_alloc.h"

mt_code mt_sched_place(const mt_sched_worker *workers, size_t nw, size_t n_devices, size_t inner,
                       mt_sched_slot *out)
{
    size_t *used, total = 0, prev = (size_t)-1;

    if (inner < 1 || n_devices % inner != 0 || (nw > 0 && workers == NULL) ||
        (n_devices > 0 && out == NULL))
        return MT_INVALID_ARGUMENT;
    for (size_t i = 0; i < nw; i++)
        total += workers[i].n_free;
    if (total < n_devices)
        return MT_RESOURCE_EXHAUSTED;
    used = mt_calloc(nw ? nw : 1, sizeof(*used));
    if (used == NULL)
        return MT_RESOURCE_EXHAUSTED;
    for (size_t g = 0; g < n_devices; g += inner) {
        size_t best = (size_t)-1;
        if (prev != (size_t)-1 && workers[prev].n_free - used[prev] >= inner) {
            best = prev;
        } else {
            for (size_t i = 0; i < nw; i++) {
                size_t room = workers[i].n_free - used[i];
                if (room >= inner &&
                    (best == (size_t)-1 || room < workers[best].n_free - used[best]))
                    best = i;
            }
        }
        if (best != (size_t)-1) {
            for (size_t k = 0; k < inner; k++) {
                out[g + k].worker = best;
                out[g + k].local_index = workers[best].free[used[best]++];
            }
            prev = best;
            continue;
        }
        /* no worker takes the whole group: split it, roomiest workers first */
        for (size_t k = 0; k < inner;) {
            size_t most = (size_t)-1;
            for (size_t i = 0; i < nw; i++) {
                size_t room = workers[i].n_free - used[i];
                if (room > 0 && (most == (size_t)-1 || room > workers[most].n_free - used[most]))
                    most = i;
            }
            /* total >= n_devices, so some worker has room */
            while (k < inner && used[most] < workers[most].n_free) {
                out[g + k].worker = most;
                out[g + k].local_index = workers[most].free[used[most]++];
                k++;
            }
            prev = most;
        }
    }
    mt_free(used);
    return MT_OK;
}

uint32_t mt_sched_elastic_batch(uint32_t min_batch, uint32_t max_batch, uint64_t global_batch,
                                size_t devices)
{
    uint64_t hi = max_batch < devices ? max_batch : devices;

    if (min_batch < 1)
        min_batch = 1;
    for (uint64_t b = hi; b >= min_batch && b > 0; b--)
        if (global_batch % b == 0)
            return (uint32_t)b;
    return 0;
}
