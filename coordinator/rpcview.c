/* SPDX-License-Identifier: MIT */
/*
 * rpcview.c — protobuf views of stored rows that more than one RPC adapter replies with: the
 * metric points of GetJob (jobs.c, its latest points) and GetMetrics (metrics.c). It belongs
 * to the RPC base layer beside bulk.c (tests/tools/coord_graph.py: "rpcbase"), so the RPC
 * adapters share it without calling each other; it calls no coordinator file. The views borrow
 * the rows' strings, so they live no longer than the rows.
 * Threading: any thread (GetJob and GetMetrics build them on the pool, bulk.c).
 * Tests: through the RPCs (tests/unit/test_coord_jobs.c, test_watch.c).
 */
#include "coordinator/coord_rpc.h"

#include "alloc/mt_alloc.h"

mt_code coord_metric_points(const mt_store_metric *pts, size_t n, Meshtrain__MetricPoint **p,
                            Meshtrain__MetricPoint ***pp)
{
    *p = mt_calloc(n + 1, sizeof(**p));
    *pp = mt_calloc(n + 1, sizeof(**pp));
    if (*p == NULL || *pp == NULL)
        return MT_RESOURCE_EXHAUSTED;
    for (size_t i = 0; i < n; i++) {
        Meshtrain__MetricPoint *m = &(*p)[i];
        meshtrain__metric_point__init(m);
        m->step = pts[i].step;
        m->epoch = pts[i].epoch;
        m->name = (char *)pts[i].name;
        m->value = pts[i].value;
        m->time_ms = pts[i].time_ms;
        (*pp)[i] = m;
    }
    return MT_OK;
}
