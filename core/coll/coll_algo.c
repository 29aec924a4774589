/* SPDX-License-Identifier: MIT */
/*
 * coll_algo.c — the built-in backend's collectives: which member sends which region to whom,
 * in which order, and how what arrives is combined.
 *
 * How it fits: coll_backend.c calls these through mt_coll_backend_builtin (the table at the
 * end); each collective runs inside the engine's coll__run and speaks to the engine only
 * through coll_engine.h (post a receive, send, wait, an exchange the engine may drive). It
 * includes no other header of core/coll and sees no transport (tests/tools/coll_graph.py
 * checks both).
 *
 * DESIGN. Allreduce (above opts.direct_bytes) runs tree_run: a recursive-halving
 * reduce-scatter then a recursive-doubling allgather over the group order, in the tree
 * order documented in mt_coll.h (it depends on nothing but group order, p and n). Each
 * exchange is split into segments of opts.segment_bytes by the engine; a receive from another
 * process is posted when the engine can (coll__can_post) or driven by this thread
 * (coll__drive). Allreduces of at most opts.direct_bytes take one hop: every member sends its
 * buffer to every other member and folds locally in the same order (by recursive doubling when
 * every member is alone in its process). When the engine offers a host window (3 or more
 * processes of one host, one rank each: coll__win_open), a large allreduce runs on it instead
 * (window_allreduce: every member reduces its part of every member's slot in the same tree
 * order). Reduce-scatter is the halving plus a scatter of the
 * reduced blocks; allgather is a ring (copies only); broadcast is a pipelined chain from the
 * root along the ring; barrier is an allreduce of p floats (every result depends on every
 * member having entered).
 *
 * Threading: the device thread of the collective's comm. Tests: tests/unit/test_coll.c,
 * test_coll_conformance.c, tests/integration/test_coll_procs.sh.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "alloc/mt_alloc.h"
#include "coll/coll_engine.h"
#include "coll/mt_coll_backend.h"

#define COLL_MAX_XCHG   (2 * 32 + 2) /* exchanges of one plan: log2 p twice, plus the fold */
#define COLL_PAIR_STACK 4096         /* floats of a driven pair's one-hop input kept on the stack */
#define COLL_WIN_BLOCK  2048         /* floats per member a host window's fold takes at a time */

/* ------------------------------------------------------------------ chunks */

void mt_coll_chunk_range(size_t n, int p, int c, size_t *off, size_t *len)
{
    size_t base = n / (size_t)p, rem = n % (size_t)p, uc = (size_t)c;
    *len = base + (uc < rem ? 1 : 0);
    *off = uc * base + (uc < rem ? uc : rem);
}

/* Largest power of two <= p (p >= 1): the members of the halving tree. */
static int tree_q(int p)
{
    int q = 1;
    while (q <= p / 2)
        q *= 2;
    return q;
}

/* Group position of tree member v when r = p - q members are folded in (see REDUCTION ORDER). */
static int tree_pos(int v, int r)
{
    return v < r ? 2 * v : v + r;
}

void mt_coll_reference_allreduce(const float *const *inputs, int p, size_t n, float *out)
{
    int q = tree_q(p), r = p - q;
    for (size_t e = 0; e < n; e++) {
        /* a binary counter of complete subtrees: leaf v joins its left neighbours' sums */
        float st[33];
        int sz[33], top = 0;
        for (int v = 0; v < q; v++) {
            float s = v < r ? inputs[2 * v][e] + inputs[2 * v + 1][e] : inputs[v + r][e];
            int k = 1;
            while (top > 0 && sz[top - 1] == k) {
                s = st[--top] + s;
                k *= 2;
            }
            st[top] = s;
            sz[top++] = k;
        }
        out[e] = st[0];
    }
}

/* The documented order in place over b[0..p-1] (n floats each): the sum ends in b[0]. */
static void tree_fold_inplace(float *const *b, int p, size_t n)
{
    int q = tree_q(p), r = p - q;
    for (int i = 0; i < r; i++)
        coll__add8(b[2 * i], b[2 * i + 1], n, false);
    for (int d = 1; d < q; d *= 2) {
        for (int v = 0; v + d < q; v += 2 * d)
            coll__add8(b[tree_pos(v, r)], b[tree_pos(v + d, r)], n, false);
    }
}

/* The global rank at group position pos (modulo p). */
static int member(const coll_call *x, int pos)
{
    return x->ranks[((pos % x->p) + x->p) % x->p];
}

/* An exchange of phase and rstep with dst and src (regions empty): the reduce phase adds. */
static coll_xchg xchg(uint8_t phase, uint32_t rstep, int dst, int src)
{
    return (coll_xchg){.phase = phase,
                       .rstep = rstep,
                       .rstep_in = rstep,
                       .dst = dst,
                       .src = src,
                       .mix = phase == COLL_PHASE_REDUCE ? COLL_MIX_ADD : COLL_MIX_COPY};
}

/*
 * The hop between a folded position 2i+1 and its partner 2i (i < r = p - q) of n elements:
 * in (before the tree) 2i+1 (extra) sends its elements to 2i; out (after it) 2i sends the
 * result back.
 */
static coll_xchg fold_hop(const coll_call *x, uint8_t phase, bool extra, bool in, size_t n)
{
    int next = member(x, x->pos + 1), prev = member(x, x->pos - 1);
    coll_xchg t = in ? xchg(phase, 0, extra ? prev : -1, extra ? -1 : next)
                     : xchg(phase, 0, extra ? -1 : next, extra ? prev : -1);
    t.sl = in == extra ? n : 0;
    t.rl = in == extra ? 0 : n;
    return t;
}

/* ------------------------------------------------------------------ ring allgather */

/*
 * Step s of the ring allgather over count-element chunks: position pos starts with chunk pos,
 * sends chunk pos-s to its successor and receives chunk pos-s-1 from its predecessor (copied).
 */
static void ring_plan(const coll_call *x, size_t count, int s, coll_xchg *d)
{
    int p = x->p;
    size_t sc = (size_t)(((x->pos - s) % p + p) % p), rc = (size_t)(((x->pos - s - 1) % p + p) % p);
    *d = xchg(COLL_PHASE_GATHER, (uint32_t)s, member(x, x->pos + 1), member(x, x->pos - 1));
    d->so = sc * count;
    d->sl = count;
    d->ro = rc * count;
    d->rl = count;
}

/*
 * Ring allgather (p-1 steps, copies only) of count-element chunks over buf. When the engine
 * can post receives from the predecessor, a step's receive is posted before its sends (so
 * each segment lands in buf as it arrives while this thread still sends), and the next step's
 * receive too (a fast predecessor's frames then also go straight into buf): with p >= 3
 * before this step's sends (the next step receives chunk pos-s-2 and this one sends pos-s,
 * different unless p = 2), with p = 2 once this step's sends are done. Otherwise each step is
 * one blocking exchange (segment k sent, then segment k received).
 */
static mt_code ring_allgather(coll_call *x, float *buf, size_t count)
{
    int steps = x->p - 1;
    uint64_t id = 0;
    mt_code rc = MT_OK;
    coll_xchg d, next;
    ring_plan(x, count, 0, &d);
    bool posted = coll__can_post(x, d.src);
    next = d;
    if (posted)
        id = coll__post(x, &d, buf);
    for (int i = 0; i < steps && rc == MT_OK; i++) {
        if (i + 1 < steps)
            ring_plan(x, count, i + 1, &next);
        if (!posted) {
            rc = coll__xchg(x, &d, buf, buf);
        } else {
            /* with p >= 3 the next step's region is never the one this step sends */
            bool early = x->p >= 3 && i + 1 < steps;
            if (early)
                coll__post(x, &next, buf);
            rc = coll__send(x, &d, buf);
            if (rc == MT_OK && !early && i + 1 < steps)
                coll__post(x, &next, buf);
            if (rc == MT_OK)
                rc = coll__wait(x, d.src, id + (uint64_t)i);
            if (rc == MT_OK)
                coll__progress(x, (size_t)i, (size_t)steps);
        }
        d = next;
    }
    if (posted)
        coll__withdraw(x);
    return rc;
}

/* ------------------------------------------------------------------ the tree */

/* Elements [off, off + len) of a buffer. */
typedef struct span {
    size_t off, len;
} span;

/* Element range of tree chunks [a, b) of n over q (mt_coll_chunk_range's layout). */
static span tree_range(size_t n, int q, int a, int b)
{
    span s;
    size_t o1, l1;
    mt_coll_chunk_range(n, q, a, &s.off, &l1);
    mt_coll_chunk_range(n, q, b - 1, &o1, &l1);
    s.len = o1 + l1 - s.off;
    return s;
}

/* Exchange t sends region sent and receives region recv. */
static void set_regions(coll_xchg *t, span sent, span recv)
{
    t->so = sent.off;
    t->sl = sent.len;
    t->ro = recv.off;
    t->rl = recv.len;
}

/*
 * This member's exchanges of the documented tree order (see REDUCTION ORDER in mt_coll.h)
 * into st[] (at most COLL_MAX_XCHG); returns their number. Phase 0 (reduce-scatter): with
 * r = p - q > 0, position 2i+1 (i < r) sends its buffer to position 2i, which adds it
 * (rstep 0); then recursive halving over the q tree members: at rstep 1+k member v exchanges
 * half of its current range of chunks with member v ^ 2^k (the member whose bit k is 0 keeps
 * the lower half) and adds what it receives. Phase 1 (allgather) undoes the steps in
 * reverse, copying, and the folded positions get the result from their partner last
 * (gather false: phase 0 only; tree member v then holds the sums of tree_owned(v)).
 */
static int tree_plan(const coll_call *x, size_t n, bool gather, coll_xchg *st)
{
    int p = x->p, q = tree_q(p), r = p - q, pos = x->pos, levels = 0, ns = 0;
    int extra = pos < 2 * r && (pos & 1), v = pos < 2 * r ? pos / 2 : pos - r;
    int lo[32], hi[32]; /* chunk range held after halving step k */
    while ((1 << levels) < q)
        levels++;
    if (r > 0 && (extra || v < r))
        st[ns++] = fold_hop(x, COLL_PHASE_REDUCE, extra, true, n);
    int a = 0, b = q;
    for (int k = 0; k < levels && !extra; k++) {
        int bit = 1 << k, mid = a + (b - a) / 2, peer = member(x, tree_pos(v ^ bit, r));
        int ka = (v & bit) ? mid : a, kb = (v & bit) ? b : mid; /* kept */
        int sa = (v & bit) ? a : mid, sb = (v & bit) ? mid : b; /* sent */
        coll_xchg *t = &st[ns++];
        *t = xchg(COLL_PHASE_REDUCE, (uint32_t)(1 + k), peer, peer);
        set_regions(t, tree_range(n, q, sa, sb), tree_range(n, q, ka, kb));
        lo[k] = a = ka;
        hi[k] = b = kb;
    }
    for (int k = levels - 1; k >= 0 && !extra && gather; k--) {
        int bit = 1 << k, peer = member(x, tree_pos(v ^ bit, r));
        int pa = k > 0 ? lo[k - 1] : 0, pb = k > 0 ? hi[k - 1] : q; /* the range before step k */
        int ra = lo[k] == pa ? hi[k] : pa, rb = lo[k] == pa ? pb : lo[k];
        coll_xchg *t = &st[ns++];
        *t = xchg(COLL_PHASE_GATHER, (uint32_t)(1 + k), peer, peer);
        set_regions(t, tree_range(n, q, lo[k], hi[k]), tree_range(n, q, ra, rb));
    }
    if (r > 0 && (extra || v < r))
        st[ns++] = fold_hop(x, COLL_PHASE_GATHER, extra, false, n);
    return ns;
}

/*
 * Run the exchanges st[0, ns) over buf in order (tree_plan's, or gather_plan's over the
 * members' inputs). Tree neighbours at distance 1 go first, so when a worker's devices hold
 * consecutive positions the first exchanges stay in the process and only the later (smaller)
 * ones cross processes. An exchange whose receive can be posted is driven by this thread when
 * the engine can (coll__drive); else its receive is posted before its sends, and an allgather
 * step's receive is posted as soon as the previous step's sends are done (it lands in a region
 * nobody reads or writes until then), a reduce step's only once the previous receive is
 * complete (it adds into part of that region). Otherwise coll__xchg interleaves segment k's
 * send and receive. keep: the driven connections stay for the next allreduce.
 */
static mt_code steps_run(coll_call *x, float *buf, const coll_xchg *st, int ns, bool keep)
{
    uint64_t id[COLL_MAX_XCHG];
    bool any = false, next_posted = false;
    mt_code rc = MT_OK;
    for (int i = 0; i < ns && rc == MT_OK; i++) {
        const coll_xchg *t = &st[i];
        bool posted = t->src >= 0 && coll__can_post(x, t->src), driven = false;
        if (posted && !next_posted) {
            rc = coll__drive(x, t, buf, buf, &driven);
            if (driven) {
                any = true;
                if (rc == MT_OK)
                    coll__progress(x, (size_t)i, (size_t)ns);
                continue;
            }
        }
        coll__drive_end(x, false); /* never hold a connection while blocking below */
        if (!posted) {
            rc = coll__xchg(x, t, buf, buf);
            next_posted = false;
            continue;
        }
        if (!next_posted) {
            id[i] = coll__post(x, t, buf);
            any = true;
        }
        rc = t->dst >= 0 ? coll__send(x, t, buf) : MT_OK;
        const coll_xchg *u = i + 1 < ns ? &st[i + 1] : NULL;
        next_posted = rc == MT_OK && u != NULL && u->phase == COLL_PHASE_GATHER && u->src >= 0 &&
                      coll__can_post(x, u->src);
        if (next_posted)
            id[i + 1] = coll__post(x, u, buf);
        if (rc == MT_OK)
            rc = coll__wait(x, t->src, id[i]); /* withdraws every post when it fails */
        if (rc == MT_OK)
            coll__progress(x, (size_t)i, (size_t)ns); /* coll__xchg: per segment */
    }
    coll__drive_end(x, keep && rc == MT_OK); /* kept for the next allreduce */
    if (any)
        coll__withdraw(x);
    return rc;
}

static mt_code tree_run(coll_call *x, float *buf, size_t n, bool gather, bool keep)
{
    coll_xchg st[COLL_MAX_XCHG];
    int ns = tree_plan(x, n, gather, st);
    mt_code rc = coll__prepare(x, st, ns);
    return rc == MT_OK ? steps_run(x, buf, st, ns, keep) : rc;
}

/* ------------------------------------------------------------------ the small path */

/*
 * The one-hop allreduce between 2 members, driven by this thread when the engine can (the
 * frame fits one segment): it writes its frame and reads the partner's into other itself, then
 * adds the two into buf in position order (x0 + x1: the tree of 2). true and *rc when it ran,
 * false when it does not apply (the caller runs the inbox path).
 */
static bool direct_driven(coll_call *x, float *buf, size_t n, float *other, mt_code *rc)
{
    int peer = member(x, x->pos + 1), from = (x->pos + 1) % 2;
    bool driven = false;
    if (n > x->seg)
        return false;
    coll_xchg t = xchg(COLL_PHASE_DIRECT, (uint32_t)x->pos, peer, peer);
    t.rstep_in = (uint32_t)from;
    t.sl = n;
    t.rl = n;
    *rc = coll__drive(x, &t, buf, other, &driven);
    if (!driven)
        return false;
    coll__withdraw(x);
    coll__drive_end(x, *rc == MT_OK && x->op == COLL_OP_ALLREDUCE); /* one allreduce to the next */
    if (*rc == MT_OK && n > 0)
        coll__add8(buf, other, n, from == 0); /* position 0's input first */
    return true;
}

/* Group positions of tree members [a, b): [*lo, *hi) (member v < r holds 2v and 2v+1). */
static void tree_positions(int a, int b, int r, int *lo, int *hi)
{
    *lo = tree_pos(a, r);
    *hi = tree_pos(b - 1, r) + (b - 1 < r ? 2 : 1);
}

/*
 * The small path by recursive doubling, over all[] (member i's input at all + i*n): with
 * r = p - q > 0 position 2i+1 (i < r) first sends its input to 2i (COLL_PHASE_INPUTS, rstep 0);
 * then at rstep 1+k tree member v sends the inputs of its block of 2^k tree members (contiguous
 * positions) to v ^ 2^k and receives that member's block, so after log2 q exchanges every tree
 * member holds every input. st[0, *ng) are those exchanges; st[*ng] (when *ng < return value)
 * is the result's hop to or from a folded position (COLL_PHASE_RESULT: all[0, n) is sent by 2i
 * after its fold and received by 2i+1).
 */
static int gather_plan(const coll_call *x, size_t n, coll_xchg *st, int *ng)
{
    int p = x->p, q = tree_q(p), r = p - q, pos = x->pos, ns = 0;
    int extra = pos < 2 * r && (pos & 1), v = pos < 2 * r ? pos / 2 : pos - r;
    if (r > 0 && (extra || v < r)) {
        st[ns] = fold_hop(x, COLL_PHASE_INPUTS, extra, true, n);
        st[ns].so = (size_t)pos * n;
        st[ns++].ro = (size_t)(pos + 1) * n;
    }
    for (int k = 0, bit = 1; bit < q && !extra; k++, bit *= 2) {
        int mine = v & ~(bit - 1), theirs = mine ^ bit, slo, shi, rlo, rhi;
        tree_positions(mine, mine + bit, r, &slo, &shi);
        tree_positions(theirs, theirs + bit, r, &rlo, &rhi);
        int peer = member(x, tree_pos(v ^ bit, r));
        coll_xchg *t = &st[ns++];
        *t = xchg(COLL_PHASE_INPUTS, (uint32_t)(1 + k), peer, peer);
        t->so = (size_t)slo * n;
        t->sl = (size_t)(shi - slo) * n;
        t->ro = (size_t)rlo * n;
        t->rl = (size_t)(rhi - rlo) * n;
    }
    *ng = ns;
    if (r > 0 && (extra || v < r))
        st[ns++] = fold_hop(x, COLL_PHASE_RESULT, extra, false, n);
    return ns;
}

/*
 * The small allreduce by gather_plan (p > 2, every member alone in its process: every
 * exchange is between two processes and its device thread drives it, in log2 p hops, where the
 * one hop to every member would wait for p - 1 reader threads; the same choice on every member,
 * as it depends on the group and the rank table only): every member's input into all, then
 * in[] folded.
 */
static mt_code direct_gathered(coll_call *x, float *all, size_t n, float **in)
{
    coll_xchg st[COLL_MAX_XCHG];
    int ng, ns = gather_plan(x, n, st, &ng), folded = x->pos < 2 * (x->p - tree_q(x->p));
    bool keep = x->op == COLL_OP_ALLREDUCE; /* as tree_run: connections kept to the next one */
    mt_code rc = coll__prepare(x, st, ns);
    if (rc == MT_OK)
        rc = steps_run(x, all, st, ng, keep);
    if (rc == MT_OK && !(folded && (x->pos & 1)) && n > 0)
        tree_fold_inplace(in, x->p, n); /* the result in all[0, n) */
    if (rc == MT_OK && ns > ng)
        rc = steps_run(x, all, st + ng, ns - ng, keep);
    return rc;
}

/*
 * Small allreduce in one hop: send the whole buffer to every other member,
 * receive theirs, and fold them in the documented order locally
 * (the same additions as tree_run, so the same bits).
 */
static mt_code direct_allreduce(coll_call *x, float *buf, size_t n)
{
    int p = x->p;
    mt_code rc = MT_OK;
    if (p == 2 && n <= COLL_PAIR_STACK) { /* the latency case: no allocation, no copy of buf */
        float other[COLL_PAIR_STACK];
        if (direct_driven(x, buf, n, other, &rc))
            return rc;
    }
    float *all = mt_malloc(((size_t)p * n + 1) * sizeof(float)); /* member i's input at i*n */
    float **in = mt_malloc((size_t)p * sizeof(*in));
    if (all == NULL || in == NULL) {
        rc = coll__fail(x, MT_RESOURCE_EXHAUSTED, "out of memory for %d x %zu floats", p, n);
        goto out;
    }
    for (int i = 0; i < p; i++)
        in[i] = all + (size_t)i * n;
    if (p == 2 && n > COLL_PAIR_STACK && direct_driven(x, buf, n, all, &rc))
        goto out; /* the result is in buf */
    if (n > 0)
        memcpy(all + (size_t)x->pos * n, buf, n * sizeof(float));
    if (p > 2 && coll__sole_ranks(x)) {
        rc = direct_gathered(x, all, n, in);
        if (rc == MT_OK && n > 0)
            memcpy(buf, all, n * sizeof(float));
        goto out;
    }
    coll__drive_end(x, false); /* the writes below block: hold no connection meanwhile */
    for (int k = 1; k < p && rc == MT_OK; k++) {
        coll_xchg t = xchg(COLL_PHASE_DIRECT, (uint32_t)x->pos, member(x, x->pos + k), -1);
        t.sl = n;
        rc = coll__send_frame(x, &t, buf);
    }
    for (int k = 1; k < p && rc == MT_OK; k++) {
        int from = (x->pos - k + p) % p;
        coll_xchg t = xchg(COLL_PHASE_DIRECT, (uint32_t)from, -1, member(x, from));
        t.rl = n;
        rc = coll__recv_frame(x, &t, all + (size_t)from * n);
    }
    if (rc == MT_OK && n > 0) {
        tree_fold_inplace(in, p, n);
        memcpy(buf, in[0], n * sizeof(float));
    }
out:
    mt_free(in);
    mt_free(all);
    return rc;
}

/* ------------------------------------------------------------------ reduce-scatter */

/* The elements tree member v holds fully reduced after the halving (phase 0) of tree_run. */
static span tree_owned(size_t n, int q, int v)
{
    int a = 0, b = q;
    for (int bit = 1; bit < q; bit *= 2) {
        int mid = a + (b - a) / 2;
        if (v & bit)
            a = mid;
        else
            b = mid;
    }
    return tree_range(n, q, a, b);
}

/* Chunk c of n over p (mt_coll_chunk_range). */
static span chunk(size_t n, int p, int c)
{
    span s;
    mt_coll_chunk_range(n, p, c, &s.off, &s.len);
    return s;
}

/* The overlap of a and b (len 0 when none). */
static span overlap(span a, span b)
{
    size_t lo = a.off > b.off ? a.off : b.off;
    size_t hi = a.off + a.len < b.off + b.len ? a.off + a.len : b.off + b.len;
    return (span){lo, hi > lo ? hi - lo : 0};
}

/*
 * Reduce-scatter above direct_bytes: the halving of tree_run (phase 0), after which tree
 * member v holds tree_owned(v) reduced; then every tree member sends each position the part
 * of its block that falls in that position's chunk (mt_coll_chunk_range(n, p, position)),
 * phase 2 with rstep v, and each position receives its chunk's parts in v order into buf.
 * Only copies follow the halving, so the bits are the allreduce's. buf: n floats, scratch.
 */
static mt_code tree_reduce_scatter(coll_call *x, float *buf, size_t n, float *out)
{
    int p = x->p, q = tree_q(p), r = p - q, pos = x->pos;
    int v = pos < 2 * r ? ((pos & 1) ? -1 : pos / 2) : pos - r; /* -1: folded into pos-1 */
    /* p = 2: each chunk is its member's tree block (more halvings own them in bit-reversed
     * order), nothing follows the halving, so the connections are kept */
    mt_code rc = tree_run(x, buf, n, false, p == 2);
    span mine = chunk(n, p, pos);
    if (rc == MT_OK && v >= 0) {
        span block = tree_owned(n, q, v);
        for (int j = 0; j < p && rc == MT_OK; j++) {
            span part = overlap(block, chunk(n, p, j));
            if (part.len == 0 || j == pos)
                continue;
            coll_xchg t = xchg(COLL_PHASE_DIRECT, (uint32_t)v, member(x, j), -1);
            t.so = part.off;
            t.sl = part.len;
            rc = coll__xchg(x, &t, buf, NULL);
        }
    }
    for (int u = 0; u < q && rc == MT_OK; u++) {
        span part = overlap(tree_owned(n, q, u), mine);
        if (part.len == 0 || tree_pos(u, r) == pos)
            continue;
        coll_xchg t = xchg(COLL_PHASE_DIRECT, (uint32_t)u, -1, member(x, tree_pos(u, r)));
        t.ro = part.off;
        t.rl = part.len;
        rc = coll__xchg(x, &t, NULL, buf);
    }
    if (rc == MT_OK && mine.len > 0 && out != buf + mine.off) /* else in place already */
        memcpy(out, buf + mine.off, mine.len * sizeof(float));
    return rc;
}

/*
 * Allreduce through the engine's host window (coll__win_open: members of one host that all map
 * one segment), chunk by chunk of at most a slot: each member copies its input into its slot;
 * once every member has (a barrier that also compares their tags), member pos folds its range
 * of the chunk (mt_coll_chunk_range over p) across every member's slot in the documented tree
 * order, in place, so the result's range ends in slot 0; once every member has, each copies slot
 * 0 out. Each element is the tree of tree_run, one float32 addition at a time: the same bits.
 * Per member: one copy in, its share of the additions, one copy out, two waits per chunk (the
 * tree over the rings copies through a ring on each of its 2 log2 p steps and waits for a
 * partner on each). *used false: no window (run the tree).
 */
static mt_code window_allreduce(coll_call *x, float *buf, size_t n, bool *used)
{
    float *in[COLL_WIN_MAX];
    size_t cap = 0;
    mt_code rc = coll__win_open(x, used, &cap);
    if (rc != MT_OK || !*used)
        return rc;
    size_t nk = (n + cap - 1) / cap;
    for (size_t k = 0; k < nk && rc == MT_OK; k++) {
        size_t off = k * cap, m = n - off < cap ? n - off : cap, lo, len;
        memcpy(coll__win_slot(x, x->pos), buf + off, m * sizeof(float));
        if ((rc = coll__win_sync(x, true, off, m)) != MT_OK)
            break;
        mt_coll_chunk_range(m, x->p, x->pos, &lo, &len);
        for (size_t b = 0; b < len; b += COLL_WIN_BLOCK) { /* a block stays in the L1 cache */
            for (int i = 0; i < x->p; i++)
                in[i] = coll__win_slot(x, i) + lo + b;
            tree_fold_inplace(in, x->p, len - b < COLL_WIN_BLOCK ? len - b : COLL_WIN_BLOCK);
        }
        float *sum = coll__win_slot(x, 0); /* this chunk's buffer: the sync moves to the other */
        if ((rc = coll__win_sync(x, false, off, m)) == MT_OK)
            memcpy(buf + off, sum, m * sizeof(float));
        coll__progress(x, k, nk);
    }
    return rc;
}

static mt_code allreduce_run(coll_call *x, float *buf, size_t n)
{
    bool windowed = false;
    if (x->p > 1 && n * sizeof(float) <= x->direct_bytes)
        return direct_allreduce(x, buf, n);
    if (x->p <= 1)
        return MT_OK;
    mt_code rc = window_allreduce(x, buf, n, &windowed);
    return rc != MT_OK || windowed ? rc : tree_run(x, buf, n, true, true);
}

/* ------------------------------------------------------------------ the backend's operations */

/* The caller's arguments of one collective (coll_run.arg). */
typedef struct coll_args {
    float *buf;      /* allreduce, broadcast: in place */
    const float *in; /* reduce-scatter, allgather */
    float *out;
    size_t n; /* elements (allgather: per member) */
    int root; /* broadcast: global rank */
} coll_args;

/* INVALID_ARGUMENT for a NULL buffer of n > 0 floats or n * per floats that overflow. */
static mt_code check_buffers(coll_call *x, bool null_buffer, size_t n, size_t per)
{
    if (null_buffer && n > 0)
        return coll__fail(x, MT_INVALID_ARGUMENT, "NULL buffer for %zu floats", n);
    if (n > SIZE_MAX / sizeof(float) / per)
        return per > 1
                   ? coll__fail(x, MT_INVALID_ARGUMENT, "size %zu x %zu floats overflows", n, per)
                   : coll__fail(x, MT_INVALID_ARGUMENT, "size %zu floats overflows", n);
    return MT_OK;
}

static mt_code allreduce_algo(coll_call *x, void *arg)
{
    coll_args *a = arg;
    mt_code rc = check_buffers(x, a->buf == NULL, a->n, 1);
    return rc != MT_OK ? rc : allreduce_run(x, a->buf, a->n);
}

static mt_code reduce_scatter_algo(coll_call *x, void *arg)
{
    coll_args *a = arg;
    size_t n = a->n, off, len;
    float *tmp = NULL;
    mt_code rc = check_buffers(x, a->in == NULL || a->out == NULL, n, 1);
    if (rc != MT_OK)
        return rc;
    mt_coll_chunk_range(n, x->p, x->pos, &off, &len);
    if (n > 0) {
        tmp = mt_malloc(n * sizeof(float));
        if (tmp == NULL)
            return coll__fail(x, MT_RESOURCE_EXHAUSTED, "out of memory for %zu floats", n);
        memcpy(tmp, a->in, n * sizeof(float));
    }
    if (x->p > 1 && n * sizeof(float) > x->direct_bytes) {
        rc = tree_reduce_scatter(x, tmp, n, a->out);
    } else {
        rc = allreduce_run(x, tmp, n); /* small: one hop, the same tree order */
        if (rc == MT_OK && len > 0)
            memcpy(a->out, tmp + off, len * sizeof(float));
    }
    mt_free(tmp);
    return rc;
}

/*
 * Allgather of two count-element chunks over buf (p = 2): the tree's block of member v is chunk
 * v, so tree_run's doubling step alone (after its halving's) swaps them, driven as an allreduce's
 * is and the connection kept for the next collective. (With more members the halving leaves
 * member v the bit-reversed block: the ring serves them.)
 */
static mt_code pair_allgather(coll_call *x, float *buf, size_t count)
{
    coll_xchg st[COLL_MAX_XCHG];
    int ns = tree_plan(x, 2 * count, true, st); /* one halving step, one doubling step */
    mt_code rc = coll__prepare(x, st + 1, ns - 1);
    return rc == MT_OK ? steps_run(x, buf, st + 1, ns - 1, true) : rc;
}

/* reduce_scatter_algo on the caller's buffer: no copy of the input, the chunk left in place. */
static mt_code reduce_scatter_inplace_algo(coll_call *x, void *arg)
{
    coll_args *a = arg;
    size_t off, len;
    mt_code rc = check_buffers(x, a->buf == NULL, a->n, 1);
    if (rc != MT_OK)
        return rc;
    mt_coll_chunk_range(a->n, x->p, x->pos, &off, &len);
    if (x->p > 1 && a->n * sizeof(float) > x->direct_bytes)
        return tree_reduce_scatter(x, a->buf, a->n, a->buf + off);
    return allreduce_run(x, a->buf, a->n); /* small: one hop, the same tree order */
}

static mt_code allgather_algo(coll_call *x, void *arg)
{
    coll_args *a = arg;
    mt_code rc = check_buffers(x, a->in == NULL || a->out == NULL, a->n, (size_t)x->p);
    if (rc != MT_OK)
        return rc;
    if (a->n > 0)
        memcpy(a->out + (size_t)x->pos * a->n, a->in, a->n * sizeof(float));
    if (x->p <= 1)
        return MT_OK;
    if (x->p == 2 && a->n > 0)
        return pair_allgather(x, a->out, a->n);
    coll__drive_end(x, false); /* the ring waits for the reader threads */
    return ring_allgather(x, a->out, a->n);
}

static mt_code broadcast_algo(coll_call *x, void *arg)
{
    coll_args *a = arg;
    size_t n = a->n;
    int rpos = -1, root = a->root;
    mt_code rc = check_buffers(x, a->buf == NULL, n, 1);
    if (rc != MT_OK)
        return rc;
    for (int i = 0; i < x->p; i++) {
        if (x->ranks[i] == root)
            rpos = i;
    }
    if (rpos < 0)
        return coll__fail(x, MT_INVALID_ARGUMENT, "root rank %d is not a member of the group",
                          root);
    if (x->p == 1)
        return MT_OK;
    int d = (x->pos - rpos + x->p) % x->p; /* distance from the root along the ring */
    /* the root's id rides in rstep so that members disagreeing on the root fail */
    coll_xchg t = xchg(COLL_PHASE_REDUCE, (uint32_t)root, d < x->p - 1 ? member(x, x->pos + 1) : -1,
                       d > 0 ? member(x, x->pos - 1) : -1);
    t.sl = n;
    t.rl = n;
    t.mix = COLL_MIX_COPY;
    t.chain = true;
    rc = coll__xchg(x, &t, a->buf, a->buf);
    /* the chain's tail acknowledges to the root, so the root also learns of failures */
    if (rc == MT_OK && (d == x->p - 1 || d == 0)) {
        coll_xchg ack =
            xchg(COLL_PHASE_GATHER, (uint32_t)root, d == x->p - 1 ? member(x, x->pos + 1) : -1,
                 d == 0 ? member(x, x->pos - 1) : -1);
        ack.chain = true;
        rc = coll__xchg(x, &ack, a->buf, a->buf);
    }
    return rc;
}

static mt_code barrier_algo(coll_call *x, void *arg)
{
    float tok[64];
    (void)arg;
    size_t n = (size_t)x->p;
    float *buf = n <= 64 ? tok : mt_calloc(n, sizeof(float));
    if (buf == NULL)
        return coll__fail(x, MT_RESOURCE_EXHAUSTED, "out of memory");
    memset(buf, 0, n * sizeof(float));
    x->total = n;
    mt_code rc = allreduce_run(x, buf, n);
    if (buf != tok)
        mt_free(buf);
    return rc;
}

static mt_code builtin_allreduce_sum(mt_coll_comm *comm, const mt_coll_group *group, float *buf,
                                     size_t n, const mt_coll_call *call, mt_err *err)
{
    coll_args a = {.buf = buf, .n = n};
    coll_run r = {.op = COLL_OP_ALLREDUCE, .total = n, .fn = allreduce_algo, .arg = &a};
    return coll__run(comm, group, call, &r, err);
}

static mt_code builtin_reduce_scatter(mt_coll_comm *comm, const mt_coll_group *group,
                                      const float *in, float *out, size_t n,
                                      const mt_coll_call *call, mt_err *err)
{
    coll_args a = {.in = in, .out = out, .n = n};
    coll_run r = {.op = COLL_OP_REDUCE_SCATTER, .total = n, .fn = reduce_scatter_algo, .arg = &a};
    return coll__run(comm, group, call, &r, err);
}

static mt_code builtin_reduce_scatter_inplace(mt_coll_comm *comm, const mt_coll_group *group,
                                              float *buf, size_t n, const mt_coll_call *call,
                                              mt_err *err)
{
    coll_args a = {.buf = buf, .n = n};
    coll_run r = {
        .op = COLL_OP_REDUCE_SCATTER, .total = n, .fn = reduce_scatter_inplace_algo, .arg = &a};
    return coll__run(comm, group, call, &r, err);
}

static mt_code builtin_allgather(mt_coll_comm *comm, const mt_coll_group *group, const float *in,
                                 float *out, size_t count, const mt_coll_call *call, mt_err *err)
{
    coll_args a = {.in = in, .out = out, .n = count};
    coll_run r = {.op = COLL_OP_ALLGATHER, .total = count, .fn = allgather_algo, .arg = &a};
    return coll__run(comm, group, call, &r, err);
}

static mt_code builtin_broadcast(mt_coll_comm *comm, const mt_coll_group *group, float *buf,
                                 size_t n, int root, const mt_coll_call *call, mt_err *err)
{
    coll_args a = {.buf = buf, .n = n, .root = root};
    coll_run r = {.op = COLL_OP_BROADCAST, .total = n, .fn = broadcast_algo, .arg = &a};
    return coll__run(comm, group, call, &r, err);
}

static mt_code builtin_barrier(mt_coll_comm *comm, const mt_coll_group *group,
                               const mt_coll_call *call, mt_err *err)
{
    coll_run r = {.op = COLL_OP_BARRIER, .total = 0, .fn = barrier_algo, .arg = NULL};
    return coll__run(comm, group, call, &r, err);
}

const mt_coll_backend mt_coll_backend_builtin = {
    .name = "builtin",
    .allreduce_sum = builtin_allreduce_sum,
    .reduce_scatter = builtin_reduce_scatter,
    .reduce_scatter_inplace = builtin_reduce_scatter_inplace,
    .allgather = builtin_allgather,
    .broadcast = builtin_broadcast,
    .barrier = builtin_barrier,
    .cancel = coll__world_cancel,
    .state_free = NULL,
};
