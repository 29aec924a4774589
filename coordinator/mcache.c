/* SPDX-License-Identifier: MIT */
/*
 * mcache.c — per-job cache of encoded metric series for GET /api/v1/jobs/{id}/metrics
 * (contract in mcache.h; user-facing limits in docs/api.md).
 *
 * DESIGN. A cached job is a list of series in name (strcmp) order. A series keeps its
 * points as columns (step ascending, value) and, beside them, the JSON text of every
 * point as it appears in an answer: st holds ",S" for each point, vt holds ",V", and
 * soff/voff give where each point's piece starts. The text is valid for the points
 * [0, enc_n); appending a point only pushes the columns, replacing or inserting a point
 * at index i cuts enc_n back to i, and the next read encodes the tail [enc_n, n) once.
 * An answer is then a few memcpy calls: the window [a, n) of a series (a found by binary
 * search on since_step) is one copy of st and one of vt (the first piece's comma
 * skipped); max_points copies the kept pieces one by one; limit first counts, by a k-way
 * merge on (step, name), how many points each series gives. The numbers are written by
 * coord_buf_u64 and coord_buf_json_num, the writers of the uncached path, so the bytes
 * are the same.
 *
 * Loading (a miss): the job is registered as loading under the lock, the history is read
 * and encoded outside it, then the points appended meanwhile are replayed on top and the
 * entry becomes ready; see mcache.h for why no commit can be missed. Memory is counted
 * as the bytes allocated for each entry; over the cap, the least recently read ready
 * entries go first.
 *
 * Threading: everything under m->mu (see mcache.h). Tests: tests/unit/test_mcache.c.
 */
#include "coordinator/mcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "clock/mt_clock.h"

#define NAME_CAP 64 /* mt_store_metric.name */

typedef struct mc_series {
    char name[NAME_CAP];
    uint64_t *step; /* [cap], ascending */
    double *value;  /* [cap] */
    size_t n, cap;
    size_t enc_n;        /* points [0, enc_n) are encoded in st and vt */
    size_t *soff, *voff; /* [cap + 1]: where point i's piece starts; [enc_n] = the text's end */
    coord_buf st, vt;    /* ",S" and ",V" per point */
} mc_series;

typedef struct mc_job {
    char id[NAME_CAP];
    int loading;  /* registered by a miss; series not installed yet */
    int stale;    /* loading: the load must be thrown away (invalidated, out of memory) */
    mc_series *s; /* [n_series] by name */
    size_t n_series, cap_series;
    size_t last;           /* series the previous point went to */
    mt_store_metric *pend; /* loading: points appended meanwhile, in order */
    size_t n_pend, cap_pend;
    size_t bytes;         /* counted in m->bytes */
    uint64_t used_tick;   /* LRU order */
    int64_t used_mono_ms; /* last read */
} mc_job;

struct coord_mcache {
    pthread_mutex_t mu;
    mc_job **jobs; /* cached and loading jobs */
    size_t n_jobs, cap_jobs;
    size_t cap_bytes, bytes;
    int64_t idle_ms;
    uint64_t tick;
    coord_mcache_stats st;
};

/* ------------------------------------------------------------ series and jobs */

static void series_fini(mc_series *se)
{
    mt_free(se->step);
    mt_free(se->value);
    mt_free(se->soff);
    mt_free(se->voff);
    coord_buf_fini(&se->st);
    coord_buf_fini(&se->vt);
}

static size_t series_bytes(const mc_series *se)
{
    return se->cap * (sizeof(*se->step) + sizeof(*se->value)) +
           (se->cap ? se->cap + 1 : 0) * 2 * sizeof(size_t) + se->st.cap + se->vt.cap;
}

static size_t job_bytes(const mc_job *j)
{
    size_t b = sizeof(*j) + j->cap_series * sizeof(*j->s) + j->cap_pend * sizeof(*j->pend);

    for (size_t k = 0; k < j->n_series; k++)
        b += series_bytes(&j->s[k]);
    return b;
}

static void job_clear(mc_job *j)
{
    for (size_t k = 0; k < j->n_series; k++)
        series_fini(&j->s[k]);
    mt_free(j->s);
    mt_free(j->pend);
    j->s = NULL;
    j->pend = NULL;
    j->n_series = j->cap_series = j->n_pend = j->cap_pend = j->last = 0;
}

static void job_free(mc_job *j)
{
    if (j == NULL)
        return;
    job_clear(j);
    mt_free(j);
}

static int series_reserve(mc_series *se, size_t want)
{
    size_t cap;
    void *p;

    if (want <= se->cap)
        return 0;
    cap = se->cap ? se->cap * 2 : 256;
    while (cap < want)
        cap *= 2;
    if ((p = mt_realloc(se->step, cap * sizeof(*se->step))) == NULL)
        return -1;
    se->step = p;
    if ((p = mt_realloc(se->value, cap * sizeof(*se->value))) == NULL)
        return -1;
    se->value = p;
    if ((p = mt_realloc(se->soff, (cap + 1) * sizeof(*se->soff))) == NULL)
        return -1;
    se->soff = p;
    if ((p = mt_realloc(se->voff, (cap + 1) * sizeof(*se->voff))) == NULL)
        return -1;
    se->voff = p;
    se->cap = cap;
    return 0;
}

/* First index in [0, n) whose step is >= step (n if none). */
static size_t lower_bound(const uint64_t *a, size_t n, uint64_t step)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index of series `name` in j (by binary search), or where it would go with *found = 0. */
static size_t series_pos(const mc_job *j, const char *name, int *found)
{
    size_t lo = 0, hi = j->n_series;

    *found = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(j->s[mid].name, name);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The series of `name`, created in order when missing. NULL when out of memory or the name
 * does not fit. */
static mc_series *series_get(mc_job *j, const char *name)
{
    size_t len = strlen(name), k;
    int found;

    if (j->last < j->n_series && strcmp(j->s[j->last].name, name) == 0)
        return &j->s[j->last];
    k = series_pos(j, name, &found);
    if (!found) {
        if (len == 0 || len >= NAME_CAP)
            return NULL;
        if (j->n_series == j->cap_series) {
            size_t cap = j->cap_series ? j->cap_series * 2 : 8;
            mc_series *p = mt_realloc(j->s, cap * sizeof(*p));
            if (p == NULL)
                return NULL;
            j->s = p;
            j->cap_series = cap;
        }
        memmove(&j->s[k + 1], &j->s[k], (j->n_series - k) * sizeof(*j->s));
        memset(&j->s[k], 0, sizeof(j->s[k]));
        memcpy(j->s[k].name, name, len + 1);
        j->n_series++;
    }
    j->last = k;
    return &j->s[k];
}

/* Upsert one point, as the store does: same step replaces, a new step goes in order. */
static int job_put(mc_job *j, const char *name, uint64_t step, double value)
{
    mc_series *se = series_get(j, name);
    size_t i;

    if (se == NULL)
        return -1;
    if (se->n == 0 || step > se->step[se->n - 1]) {
        if (series_reserve(se, se->n + 1) != 0)
            return -1;
        se->step[se->n] = step;
        se->value[se->n++] = value;
        return 0;
    }
    i = lower_bound(se->step, se->n, step);
    if (se->step[i] != step) {
        if (series_reserve(se, se->n + 1) != 0)
            return -1;
        memmove(&se->step[i + 1], &se->step[i], (se->n - i) * sizeof(*se->step));
        memmove(&se->value[i + 1], &se->value[i], (se->n - i) * sizeof(*se->value));
        se->n++;
        se->step[i] = step;
    }
    se->value[i] = value;
    if (se->enc_n > i)
        se->enc_n = i;
    return 0;
}

/* Encode the points [enc_n, n) of se. -1 when out of memory. */
static int series_encode(mc_series *se)
{
    if (se->enc_n == se->n)
        return 0;
    se->st.len = se->enc_n ? se->soff[se->enc_n] : 0;
    se->vt.len = se->enc_n ? se->voff[se->enc_n] : 0;
    for (size_t i = se->enc_n; i < se->n; i++) {
        se->soff[i] = se->st.len;
        se->voff[i] = se->vt.len;
        coord_buf_add(&se->st, ",", 1);
        coord_buf_u64(&se->st, se->step[i]);
        coord_buf_add(&se->vt, ",", 1);
        coord_buf_json_num(&se->vt, se->value[i]);
    }
    if (se->st.oom || se->vt.oom) {
        se->enc_n = 0; /* the text is incomplete; the entry is dropped by the caller */
        return -1;
    }
    se->soff[se->n] = se->st.len;
    se->voff[se->n] = se->vt.len;
    se->enc_n = se->n;
    return 0;
}

/* Give back the growth slack of a loaded series (a loaded job is mostly read, rarely grown much):
 * about a third of its memory. Best effort: a failed realloc keeps the larger block. */
static void series_shrink(mc_series *se)
{
    void *p;

    if (se->n == 0 || se->n == se->cap)
        return;
    if ((p = mt_realloc(se->step, se->n * sizeof(*se->step))) != NULL)
        se->step = p;
    if ((p = mt_realloc(se->value, se->n * sizeof(*se->value))) != NULL)
        se->value = p;
    if ((p = mt_realloc(se->soff, (se->n + 1) * sizeof(*se->soff))) != NULL)
        se->soff = p;
    if ((p = mt_realloc(se->voff, (se->n + 1) * sizeof(*se->voff))) != NULL)
        se->voff = p;
    se->cap = se->n; /* every column holds at least n (+1) entries, whether or not it shrank */
    if ((p = mt_realloc(se->st.data, se->st.len + 1)) != NULL) {
        se->st.data = p;
        se->st.cap = se->st.len + 1;
    }
    if ((p = mt_realloc(se->vt.data, se->vt.len + 1)) != NULL) {
        se->vt.data = p;
        se->vt.cap = se->vt.len + 1;
    }
}

/* mt_store_metric_fn for a load: every point into the private job arg. */
static mt_code load_add(void *arg, const mt_store_metric_ref *p)
{
    return job_put(arg, p->name, p->step, p->value) == 0 ? MT_OK : MT_RESOURCE_EXHAUSTED;
}

/* ------------------------------------------------------------ the table */

static mc_job *job_find(coord_mcache *m, const char *id, size_t *idx)
{
    for (size_t i = 0; i < m->n_jobs; i++) {
        if (strcmp(m->jobs[i]->id, id) == 0) {
            if (idx != NULL)
                *idx = i;
            return m->jobs[i];
        }
    }
    return NULL;
}

static void job_account(coord_mcache *m, mc_job *j)
{
    size_t b = job_bytes(j);

    m->bytes = m->bytes - j->bytes + b;
    j->bytes = b;
}

static void job_remove(coord_mcache *m, mc_job *j)
{
    size_t i = 0;

    if (job_find(m, j->id, &i) != j)
        return;
    m->bytes -= j->bytes;
    m->jobs[i] = m->jobs[--m->n_jobs];
    job_free(j);
}

/* Evict the least recently read ready entries other than keep until the cap holds; then keep
 * itself if it alone is too big. */
static void evict_to_cap(coord_mcache *m, mc_job *keep)
{
    while (m->bytes > m->cap_bytes) {
        mc_job *lru = NULL;
        for (size_t i = 0; i < m->n_jobs; i++) {
            mc_job *j = m->jobs[i];
            if (j != keep && !j->loading && (lru == NULL || j->used_tick < lru->used_tick))
                lru = j;
        }
        if (lru == NULL)
            lru = keep != NULL && !keep->loading ? keep : NULL;
        if (lru == NULL)
            return;
        if (lru == keep)
            keep = NULL;
        job_remove(m, lru);
        m->st.evictions++;
    }
}

static void sweep_locked(coord_mcache *m, int64_t now)
{
    if (m->idle_ms <= 0)
        return;
    for (size_t i = 0; i < m->n_jobs;) {
        mc_job *j = m->jobs[i];
        if (!j->loading && now - j->used_mono_ms > m->idle_ms) {
            job_remove(m, j); /* moves the last entry into slot i */
            m->st.evictions++;
        } else {
            i++;
        }
    }
}

mt_code coord_mcache_new(size_t cap_bytes, int64_t idle_ms, coord_mcache **out, mt_err *err)
{
    coord_mcache *m;

    if (out == NULL || cap_bytes == 0)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "metrics cache: cap must be > 0 bytes");
    *out = NULL;
    if ((m = mt_calloc(1, sizeof(*m))) == NULL)
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metrics cache: out of memory");
    pthread_mutex_init(&m->mu, NULL);
    m->cap_bytes = cap_bytes;
    m->idle_ms = idle_ms;
    *out = m;
    return MT_OK;
}

void coord_mcache_free(coord_mcache *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_jobs; i++)
        job_free(m->jobs[i]);
    mt_free(m->jobs);
    pthread_mutex_destroy(&m->mu);
    mt_free(m);
}

void coord_mcache_sweep(coord_mcache *m, int64_t now_mono_ms)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    sweep_locked(m, now_mono_ms);
    pthread_mutex_unlock(&m->mu);
}

void coord_mcache_get_stats(coord_mcache *m, coord_mcache_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    *out = m->st;
    out->bytes = m->bytes;
    out->jobs = m->n_jobs;
    pthread_mutex_unlock(&m->mu);
}

void coord_mcache_invalidate(coord_mcache *m, const char *job_id)
{
    mc_job *j;

    if (m == NULL || job_id == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    j = job_find(m, job_id, NULL);
    if (j != NULL && j->loading) {
        j->stale = 1; /* its loader throws the load away */
    } else if (j != NULL) {
        job_remove(m, j);
        m->st.invalidations++;
    }
    pthread_mutex_unlock(&m->mu);
}

/* Queue pts for a loading job. -1 when out of memory or over the cap. */
static int pend_add(coord_mcache *m, mc_job *j, const mt_store_metric_ref *pts, size_t n)
{
    if (j->n_pend + n > j->cap_pend) {
        size_t cap = j->cap_pend ? j->cap_pend : 64;
        while (cap < j->n_pend + n)
            cap *= 2;
        if (cap * sizeof(*j->pend) > m->cap_bytes)
            return -1;
        mt_store_metric *p = mt_realloc(j->pend, cap * sizeof(*p));
        if (p == NULL)
            return -1;
        j->pend = p;
        j->cap_pend = cap;
    }
    for (size_t i = 0; i < n; i++) {
        mt_store_metric *q = &j->pend[j->n_pend];
        size_t len = strlen(pts[i].name);
        if (len >= sizeof(q->name))
            return -1;
        memset(q, 0, sizeof(*q));
        q->step = pts[i].step;
        memcpy(q->name, pts[i].name, len + 1);
        q->value = pts[i].value;
        j->n_pend++;
    }
    return 0;
}

void coord_mcache_append(coord_mcache *m, const char *job_id, const mt_store_metric_ref *pts,
                         size_t n)
{
    mc_job *j;

    if (m == NULL || job_id == NULL || n == 0)
        return;
    pthread_mutex_lock(&m->mu);
    sweep_locked(m, mt_clock_mono_ms());
    j = job_find(m, job_id, NULL);
    if (j != NULL && j->loading) {
        if (!j->stale && pend_add(m, j, pts, n) != 0) {
            j->stale = 1;
            mt_free(j->pend);
            j->pend = NULL;
            j->n_pend = j->cap_pend = 0;
        }
        job_account(m, j);
    } else if (j != NULL) {
        size_t i = 0;
        while (i < n && job_put(j, pts[i].name, pts[i].step, pts[i].value) == 0)
            i++;
        if (i < n) {
            job_remove(m, j); /* out of memory: the next read loads it again */
            m->st.invalidations++;
        } else {
            job_account(m, j);
            evict_to_cap(m, j);
        }
    }
    pthread_mutex_unlock(&m->mu);
}

/* ------------------------------------------------------------ answers */

void coord_mcache_write_head(coord_buf *b, const char *job_id, uint64_t since_step, uint64_t count,
                             uint64_t last_step)
{
    coord_buf_puts(b, "{\"job_id\":");
    coord_buf_json_str(b, job_id);
    coord_buf_puts(b, ",\"since_step\":");
    coord_buf_u64(b, since_step);
    coord_buf_puts(b, ",\"count\":");
    coord_buf_u64(b, count);
    coord_buf_puts(b, ",\"last_step\":");
    if (count > 0)
        coord_buf_u64(b, last_step);
    else
        coord_buf_puts(b, "null");
    coord_buf_puts(b, ",\"series\":{");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Same stride rule as the uncached path (http_api.c series_stride/kept). */
static size_t stride_of(size_t n, size_t max_points)
{
    if (max_points == 0 || n <= max_points)
        return 1;
    return (n + max_points - 2) / (max_points - 1);
}

/* Pieces [a, a + w) of text t (offsets off), every stride-th plus the last, comma-joined. */
static void put_pieces(coord_buf *b, const coord_buf *t, const size_t *off, size_t a, size_t w,
                       size_t stride)
{
    if (stride == 1) {
        coord_buf_add(b, t->data + off[a] + 1, off[a + w] - off[a] - 1);
        return;
    }
    for (size_t j = 0; j < w; j++) {
        if (j % stride != 0 && j != w - 1)
            continue;
        size_t s = off[a + j] + (j == 0 ? 1 : 0);
        coord_buf_add(b, t->data + s, off[a + j + 1] - s);
    }
}

typedef struct mc_pick {
    mc_series *se;
    size_t a, w; /* window [a, a + w) */
} mc_pick;

/* Render j's answer for q into out. Codes: OK, UNAVAILABLE (limit over too many series),
 * RESOURCE_EXHAUSTED (out is untouched then). */
static mt_code render(mc_job *j, const char *job_id, const coord_mcache_query *q, coord_buf *out,
                      mt_err *err)
{
    mc_pick pick[COORD_MCACHE_MAX_SERIES + 1];
    const char *names[COORD_MCACHE_MAX_NAMES];
    size_t n_pick = 0, n_sel = q->n_names ? 0 : j->n_series, count = 0;
    uint64_t last_step = 0;

    if (q->n_names > COORD_MCACHE_MAX_NAMES)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "metrics cache: too many names");
    for (size_t i = 0; i < q->n_names; i++)
        names[i] = q->names[i];
    qsort(names, q->n_names, sizeof(names[0]), cmp_str);
    for (size_t i = 0; i < (q->n_names ? q->n_names : n_sel); i++) {
        mc_series *se;
        if (q->n_names) {
            int found;
            if (i > 0 && strcmp(names[i], names[i - 1]) == 0)
                continue;
            size_t k = series_pos(j, names[i], &found);
            if (!found)
                continue;
            se = &j->s[k];
        } else {
            se = &j->s[i];
        }
        size_t a = lower_bound(se->step, se->n, q->since_step);
        if (a == se->n)
            continue;
        if (n_pick == COORD_MCACHE_MAX_SERIES) {
            if (q->limit > 0) /* the uncached path caps in merge order: let it answer */
                return mt_err_set(err, MT_UNAVAILABLE, "metrics cache: limit over many series");
            break; /* the uncached scan stops at the 201st series too */
        }
        pick[n_pick].se = se;
        pick[n_pick].a = a;
        pick[n_pick++].w = se->n - a;
    }
    if (q->limit > 0) { /* the first `limit` points by step, ties to the lower name */
        size_t pos[COORD_MCACHE_MAX_SERIES];
        for (size_t k = 0; k < n_pick; k++)
            pos[k] = pick[k].a;
        for (size_t taken = 0; taken < q->limit; taken++) {
            size_t best = n_pick;
            for (size_t k = 0; k < n_pick; k++)
                if (pos[k] < pick[k].se->n &&
                    (best == n_pick || pick[k].se->step[pos[k]] < pick[best].se->step[pos[best]]))
                    best = k;
            if (best == n_pick)
                break;
            pos[best]++;
        }
        size_t o = 0;
        for (size_t k = 0; k < n_pick; k++) {
            pick[k].w = pos[k] - pick[k].a;
            if (pick[k].w > 0)
                pick[o++] = pick[k];
        }
        n_pick = o;
    }
    for (size_t k = 0; k < n_pick; k++) {
        mc_pick *p = &pick[k];
        size_t stride = stride_of(p->w, q->max_points);
        if (series_encode(p->se) != 0)
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metrics cache: out of memory");
        count += stride == 1 ? p->w : (p->w - 1) / stride + 1 + ((p->w - 1) % stride != 0);
        if (p->se->step[p->a + p->w - 1] > last_step)
            last_step = p->se->step[p->a + p->w - 1];
    }
    coord_mcache_write_head(out, job_id, q->since_step, count, last_step);
    for (size_t k = 0; k < n_pick; k++) {
        const mc_pick *p = &pick[k];
        size_t stride = stride_of(p->w, q->max_points);
        coord_buf_puts(out, k ? "," : "");
        coord_buf_json_str(out, p->se->name);
        coord_buf_puts(out, ":{\"step\":[");
        put_pieces(out, &p->se->st, p->se->soff, p->a, p->w, stride);
        coord_buf_puts(out, "],\"value\":[");
        put_pieces(out, &p->se->vt, p->se->voff, p->a, p->w, stride);
        coord_buf_puts(out, "]}");
    }
    coord_buf_puts(out, "}}\n");
    return MT_OK;
}

/* 1 when j lacks a point the store has: a series behind the store's newest step for its name. */
static int behind_store(const mc_job *j, const coord_mcache_query *q)
{
    for (size_t i = 0; q->latest != NULL && i < q->n_latest; i++) {
        int found;
        size_t k = series_pos(j, q->latest[i].name, &found);
        if (!found || j->s[k].n == 0 || j->s[k].step[j->s[k].n - 1] < q->latest[i].step)
            return 1;
    }
    return 0;
}

/* Render from a ready entry under the lock; drops the entry when out of memory. */
static mt_code answer_ready(coord_mcache *m, mc_job *j, const char *job_id,
                            const coord_mcache_query *q, coord_buf *out, mt_err *err)
{
    mt_code rc;

    j->used_tick = ++m->tick;
    j->used_mono_ms = mt_clock_mono_ms();
    rc = render(j, job_id, q, out, err);
    if (rc == MT_RESOURCE_EXHAUSTED) {
        job_remove(m, j);
        m->st.invalidations++;
        return rc;
    }
    job_account(m, j); /* the text may have grown */
    evict_to_cap(m, j);
    return rc;
}

mt_code coord_mcache_answer(coord_mcache *m, const char *job_id, const coord_mcache_query *q,
                            coord_mcache_load_fn load, void *load_arg, coord_buf *out, int *hit,
                            mt_err *err)
{
    mc_job *j, *b = NULL;
    mt_code rc;

    if (hit != NULL)
        *hit = 0;
    if (m == NULL || job_id == NULL || q == NULL || load == NULL || out == NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "metrics cache: NULL argument");
    if (strlen(job_id) >= NAME_CAP)
        return mt_err_set(err, MT_UNAVAILABLE, "metrics cache: job id too long");
    pthread_mutex_lock(&m->mu);
    sweep_locked(m, mt_clock_mono_ms());
    j = job_find(m, job_id, NULL);
    if (j != NULL && !j->loading && behind_store(j, q)) {
        job_remove(m, j); /* grown behind our back: load it again */
        m->st.invalidations++;
        j = NULL;
    }
    if (j != NULL && !j->loading) {
        m->st.hits++;
        if (hit != NULL)
            *hit = 1;
        rc = answer_ready(m, j, job_id, q, out, err);
        pthread_mutex_unlock(&m->mu);
        return rc;
    }
    if (j != NULL) { /* another thread is loading it */
        pthread_mutex_unlock(&m->mu);
        return mt_err_set(err, MT_UNAVAILABLE, "metrics cache: job %s is being loaded", job_id);
    }
    m->st.misses++;
    if (m->n_jobs == m->cap_jobs) {
        size_t cap = m->cap_jobs ? m->cap_jobs * 2 : 16;
        mc_job **p = mt_realloc(m->jobs, cap * sizeof(*p));
        if (p == NULL) {
            pthread_mutex_unlock(&m->mu);
            return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metrics cache: out of memory");
        }
        m->jobs = p;
        m->cap_jobs = cap;
    }
    if ((j = mt_calloc(1, sizeof(*j))) == NULL || (b = mt_calloc(1, sizeof(*b))) == NULL) {
        mt_free(j);
        pthread_mutex_unlock(&m->mu);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metrics cache: out of memory");
    }
    memcpy(j->id, job_id, strlen(job_id) + 1);
    j->loading = 1;
    m->jobs[m->n_jobs++] = j;
    job_account(m, j);
    pthread_mutex_unlock(&m->mu);

    /* outside the lock: read the snapshot (it starts after j was registered) and encode it */
    rc = load(load_arg, load_add, b, err);
    if (rc == MT_RESOURCE_EXHAUSTED)
        mt_err_set(err, rc, "metrics cache: out of memory loading job %s", job_id);
    for (size_t k = 0; rc == MT_OK && k < b->n_series; k++) {
        if (series_encode(&b->s[k]) != 0)
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metrics cache: out of memory");
        else
            series_shrink(&b->s[k]);
    }

    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; rc == MT_OK && i < j->n_pend; i++)
        if (job_put(b, j->pend[i].name, j->pend[i].step, j->pend[i].value) != 0)
            rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "metrics cache: out of memory");
    if (rc == MT_OK && j->stale)
        rc = mt_err_set(err, MT_UNAVAILABLE, "metrics cache: job %s changed while loading", job_id);
    if (rc != MT_OK) {
        job_remove(m, j);
        pthread_mutex_unlock(&m->mu);
        job_free(b);
        return rc;
    }
    mt_free(j->pend); /* install b's series into the registered entry */
    j->pend = NULL;
    j->n_pend = j->cap_pend = 0;
    j->s = b->s;
    j->n_series = b->n_series;
    j->cap_series = b->cap_series;
    b->s = NULL;
    b->n_series = b->cap_series = 0;
    job_free(b);
    j->loading = 0;
    rc = answer_ready(m, j, job_id, q, out, err);
    pthread_mutex_unlock(&m->mu);
    return rc;
}
