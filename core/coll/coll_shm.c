/* SPDX-License-Identifier: MIT */
/*
 * coll_shm.c — shared-memory rings: the byte stream of one direct-transport connection between
 * two processes of one host (coll_raw.c), in place of the kernel's socket buffers.
 *
 * How it fits: coll_raw.c dials and authenticates over a socket as always; when both ends have
 * the same host identity (coll__shm_host_id: boot id + host name) and allow it, or when the
 * listener's address is shm://, the dialer creates a ring here (coll__shm_create), sends its name
 * over the authenticated socket, the listener maps it (coll__shm_attach) and from then on the
 * connection's frames (the same 72-byte headers and payloads) go through the ring. The socket
 * stays open only as the liveness signal: the kernel closes it when a process dies (kill -9), and
 * a waiting side looks at it between sleeps. One writer (the dialing process's device threads,
 * serialised by its peer mutex) and one reader (the listener's reader thread, or whoever holds
 * it) per ring.
 *
 * Segment: a 256-byte header (the writer's and the reader's fields on their own cache lines)
 * and cap bytes of data (a power of two). head and tail count bytes written and read since the
 * start; the writer publishes with a release store of head, the reader frees space with a
 * release store of tail. Wake-ups: a side that finds nothing to do spins for spin_ns, then
 * announces that it sleeps (rd_sleep / wr_sleep) and sleeps in futex(2) on a sequence word the
 * other side bumps after each publish (it calls FUTEX_WAKE only when the flag is set: a
 * streaming pair makes no system call). Both sides use sequentially consistent flag / index
 * accesses, so one of them always sees the other (no lost wake-up). Sleeps last at most
 * SHM_SLICE_MS, after which the waiter checks the deadline, cancellation and the socket.
 *
 * Names and cleanup: "/mtcoll-<job>-<pid>-<n>" (pid: the creating process, n: its counter). The
 * dialer unlinks the name as soon as the listener answered, so a running job leaves nothing in
 * /dev/shm; a process killed in between leaves a segment that coll__shm_sweep (called when a
 * data-plane endpoint opens) removes once its pid is gone. Space is reserved at creation
 * (posix_fallocate), so a full /dev/shm fails the upgrade (the connection stays on its socket)
 * rather than raising SIGBUS later.
 *
 * Group windows (the end of this file): the same segments, named and swept the same way, mapped
 * by every member of a group of processes of this host for the engine's host-local allreduce
 * (coll_world.c, "host windows"): per member a slot in each of two buffers and a barrier record.
 *
 * Hostile peers: the peer is authenticated, but the reader still never trusts the indices in
 * shared memory beyond cap (a ring whose head runs more than cap ahead ends the connection).
 * Threading: one reader thread and one writer thread at a time per ring (callers' rule).
 * Tests: tests/unit/test_coll.c (shm tests), tests/unit/test_coll_conformance.c,
 * tests/integration/test_coll_shm.sh.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "alloc/mt_alloc.h"
#include "coll/coll_int.h"
#include "log/mt_log.h"

#define SHM_MAGIC    0x4853544du /* "MTSH" */
#define SHM_VERSION  1u
#define SHM_HDR      256u
#define SHM_SLICE_MS 10 /* a sleeper looks at the deadline, cancellation and socket this often */
#define SHM_PREFIX   "mtcoll-"

typedef struct shm_seg {
    uint32_t magic, version;
    uint64_t cap;
    int32_t creator;
    alignas(64) _Atomic uint64_t head; /* writer: bytes published */
    _Atomic uint32_t data_seq;         /* futex word the reader sleeps on */
    _Atomic uint32_t rd_sleep;         /* readers asleep (or about to be) on data_seq */
    _Atomic uint32_t wr_closed;        /* the writer closed in order: nothing more comes */
    alignas(64) _Atomic uint64_t tail; /* reader: bytes consumed */
    _Atomic uint32_t space_seq;        /* futex word the writer sleeps on */
    _Atomic uint32_t wr_sleep;         /* writers asleep (or about to be) on space_seq */
    _Atomic uint32_t rd_closed;        /* the reader went away */
} shm_seg;

_Static_assert(sizeof(shm_seg) <= SHM_HDR, "shm header fits its 256 bytes");

struct coll_shm {
    shm_seg *seg;
    unsigned char *data;
    uint64_t cap, mask;
    size_t map_len;
    int64_t spin_ns;
};

static _Atomic uint32_t shm_counter;

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

void coll__shm_host_id(char out[COLL_SHM_HOST_ID])
{
    char boot[64] = "", host[HOST_NAME_MAX + 1] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL)
            boot[0] = '\0';
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    if (gethostname(host, sizeof(host)) != 0)
        host[0] = '\0';
    host[sizeof(host) - 1] = '\0';
    memset(out, 0, COLL_SHM_HOST_ID);
    if (boot[0] != '\0') /* without a boot id, never claim to share a host */
        snprintf(out, COLL_SHM_HOST_ID, "%.63s/%.63s", boot, host); /* fits: 63 + 1 + 63 */
}

/* Map an open segment descriptor of total length len. Populated at once: the pages exist
 * (posix_fallocate), and a ring touched page by page would take a minor fault on each side for
 * every 4 KiB of the first pass round it (a few microseconds each, per small frame, measured
 * with perf on a 4 KiB allreduce). */
static mt_code seg_map(int fd, size_t len, void **map, mt_err *err)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED)
        return mt_err_set(err, MT_UNAVAILABLE, "shm: mmap of %zu bytes: %s", len, strerror(errno));
    *map = p;
    return MT_OK;
}

/* A new segment of len bytes for job ("/mtcoll-<job>-<pid>-<n>", mode 0600, space reserved),
 * mapped at *map; its name in name ("" on failure: nothing is left behind). */
static mt_code seg_new(uint64_t job, size_t len, char name[COLL_SHM_NAME], void **map, mt_err *err)
{
    snprintf(name, COLL_SHM_NAME, "/" SHM_PREFIX "%016" PRIx64 "-%ld-%u", job, (long)getpid(),
             atomic_fetch_add(&shm_counter, 1));
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        mt_err_set(err, MT_UNAVAILABLE, "shm: create %s: %s", name, strerror(errno));
        name[0] = '\0';
        return MT_UNAVAILABLE;
    }
    int e = posix_fallocate(fd, 0, (off_t)len); /* tmpfs: reserve now, no SIGBUS later */
    mt_code rc = MT_OK;
    if (e != 0)
        rc = mt_err_set(err, MT_RESOURCE_EXHAUSTED, "shm: reserve %zu bytes for %s: %s", len, name,
                        strerror(e));
    if (rc == MT_OK)
        rc = seg_map(fd, len, map, err);
    close(fd);
    if (rc != MT_OK) {
        shm_unlink(name);
        name[0] = '\0';
    }
    return rc;
}

/* Map the segment name a peer created: a data-plane name, owned by this user, at least min
 * bytes; *len its length. */
static mt_code seg_open(const char *name, size_t min, void **map, size_t *len, mt_err *err)
{
    struct stat st;
    if (name[0] != '/' || strncmp(name + 1, SHM_PREFIX, strlen(SHM_PREFIX)) != 0 ||
        strchr(name + 1, '/') != NULL)
        return mt_err_set(err, MT_INVALID_ARGUMENT, "shm: %s is not a data-plane segment name",
                          name);
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return mt_err_set(err, MT_UNAVAILABLE, "shm: open %s: %s", name, strerror(errno));
    mt_code rc = MT_OK;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)min || st.st_uid != geteuid())
        rc = mt_err_set(err, MT_INVALID_ARGUMENT, "shm: %s is not a segment of this user", name);
    if (rc == MT_OK && (rc = seg_map(fd, (size_t)st.st_size, map, err)) == MT_OK)
        *len = (size_t)st.st_size;
    close(fd);
    return rc;
}

/* The ring over mapping p of len bytes (unmapped on failure). */
static mt_code ring_wrap(void *p, size_t len, int64_t spin_ns, coll_shm **out, mt_err *err)
{
    coll_shm *s = mt_calloc(1, sizeof(*s));
    if (s == NULL) {
        munmap(p, len);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "shm: out of memory");
    }
    s->seg = p;
    s->data = (unsigned char *)p + SHM_HDR;
    s->map_len = len;
    s->spin_ns = spin_ns;
    *out = s;
    return MT_OK;
}

mt_code coll__shm_create(const coll_shm_spec *q, coll_shm **out, char name[COLL_SHM_NAME],
                         mt_err *err)
{
    size_t cap = q->cap, len = SHM_HDR + q->cap;
    void *p = NULL;
    *out = NULL;
    name[0] = '\0';
    if (cap < 4096 || (cap & (cap - 1)) != 0 || cap > ((size_t)1 << 30))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "shm: ring size %zu: want a power of two "
                          "between 4 KiB and 1 GiB",
                          cap);
    mt_code rc = seg_new(q->job, len, name, &p, err);
    if (rc == MT_OK && (rc = ring_wrap(p, len, q->spin_ns, out, err)) != MT_OK) {
        shm_unlink(name);
        name[0] = '\0';
    }
    if (rc != MT_OK)
        return rc;
    coll_shm *s = *out;
    memset(s->seg, 0, sizeof(*s->seg));
    s->seg->cap = cap;
    s->seg->creator = (int32_t)getpid();
    s->seg->version = SHM_VERSION;
    s->cap = cap;
    s->mask = cap - 1;
    atomic_thread_fence(memory_order_seq_cst);
    s->seg->magic = SHM_MAGIC;
    return MT_OK;
}

mt_code coll__shm_attach(const char *name, int64_t spin_ns, coll_shm **out, mt_err *err)
{
    void *p = NULL;
    size_t len = 0;
    *out = NULL;
    mt_code rc = seg_open(name, SHM_HDR + 4096, &p, &len, err);
    if (rc == MT_OK)
        rc = ring_wrap(p, len, spin_ns, out, err);
    if (rc != MT_OK)
        return rc;
    coll_shm *s = *out;
    uint64_t cap = s->seg->cap;
    if (s->seg->magic != SHM_MAGIC || s->seg->version != SHM_VERSION || cap < 4096 ||
        (cap & (cap - 1)) != 0 || cap > (uint64_t)len - SHM_HDR) {
        coll__shm_free(s);
        *out = NULL;
        return mt_err_set(err, MT_INVALID_ARGUMENT, "shm: %s has a bad header", name);
    }
    s->cap = cap;
    s->mask = cap - 1;
    return MT_OK;
}

void coll__shm_unlink(const char *name)
{
    if (name != NULL && name[0] != '\0')
        shm_unlink(name);
}

void coll__shm_free(coll_shm *s)
{
    if (s == NULL)
        return;
    munmap(s->seg, s->map_len);
    mt_free(s);
}

void coll__shm_close(coll_shm *s, int writer)
{
    if (s == NULL)
        return;
    _Atomic uint32_t *flag = writer ? &s->seg->wr_closed : &s->seg->rd_closed;
    _Atomic uint32_t *seq = writer ? &s->seg->data_seq : &s->seg->space_seq;
    atomic_store(flag, 1);
    atomic_fetch_add(seq, 1);
    futex(seq, FUTEX_WAKE, INT_MAX, NULL);
}

/* 1 when the socket fd (which carries nothing after the handshake) ended or failed. */
static int sock_ended(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (fd < 0)
        return 0;
    if (poll(&p, 1, 0) <= 0)
        return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))
        return 1;
    char c;
    ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* What a side waits on: the other side's index, the futex word the other side bumps after
 * moving it, and the count of this side's sleepers the other side looks at. */
typedef struct shm_watch {
    _Atomic uint64_t *idx;
    _Atomic uint32_t *seq;
    _Atomic uint32_t *sleepers;
} shm_watch;

/*
 * Wait until *wt->idx differs from seen or until_ns: spin for spin_ns, then sleep on wt->seq with
 * *wt->sleepers raised (a count: the reader thread and a driving device thread may both wait on
 * one ring while it changes hands). Returns 1 when it moved, 0 at until_ns.
 */
static int wait_move(const coll_shm *s, const shm_watch *wt, uint64_t seen, int64_t until_ns)
{
    _Atomic uint64_t *idx = wt->idx;
    _Atomic uint32_t *seq = wt->seq, *sleepers = wt->sleepers;
    int64_t spin_until = coll__now_ns() + s->spin_ns;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(idx, memory_order_acquire) != seen)
            return 1;
        if ((i & 63) == 0) {
            int64_t now = coll__now_ns();
            if (now >= until_ns)
                return 0;
            if (now >= spin_until)
                break;
        }
        coll__cpu_relax();
    }
    uint32_t v = atomic_load(seq);
    atomic_fetch_add(sleepers, 1);
    if (atomic_load(idx) == seen) {
        int64_t left = until_ns - coll__now_ns();
        if (left > 0) {
            struct timespec ts = {.tv_sec = left / 1000000000LL, .tv_nsec = left % 1000000000LL};
            futex(seq, FUTEX_WAIT, v, &ts);
        }
    }
    atomic_fetch_sub(sleepers, 1);
    return atomic_load_explicit(idx, memory_order_acquire) != seen;
}

/* After moving an index: wake the other side if one of it announced that it sleeps. */
static void wake_other(_Atomic uint32_t *seq, _Atomic uint32_t *sleepers)
{
    atomic_fetch_add(seq, 1);
    if (atomic_load(sleepers) != 0)
        futex(seq, FUTEX_WAKE, INT_MAX, NULL);
}

/* Copy n bytes into the ring at position pos (wrapping). */
static void ring_put(coll_shm *s, uint64_t pos, const void *src, size_t n)
{
    size_t at = (size_t)(pos & s->mask), first = s->cap - at < n ? s->cap - at : n;
    memcpy(s->data + at, src, first);
    if (first < n)
        memcpy(s->data, (const char *)src + first, n - first);
}

static void ring_get(const coll_shm *s, uint64_t pos, void *dst, size_t n)
{
    size_t at = (size_t)(pos & s->mask), first = s->cap - at < n ? s->cap - at : n;
    memcpy(dst, s->data + at, first);
    if (first < n)
        memcpy((char *)dst + first, s->data, n - first);
}

coll_io coll__shm_put_some(coll_shm *s, coll_out *f)
{
    shm_seg *g = s->seg;
    uint64_t head = atomic_load_explicit(&g->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&g->tail, memory_order_acquire);
    size_t room = (size_t)(s->cap - (head - tail)), put = 0;
    if (atomic_load_explicit(&g->rd_closed, memory_order_relaxed))
        return COLL_IO_ENDED;
    while (f->sent < f->hlen + f->dlen && put < room) {
        const char *src = f->sent < f->hlen ? (const char *)f->hdr + f->sent
                                            : (const char *)f->data + f->sent - f->hlen;
        size_t left = f->sent < f->hlen ? f->hlen - f->sent : f->hlen + f->dlen - f->sent;
        size_t k = left < room - put ? left : room - put;
        ring_put(s, head + put, src, k);
        put += k;
        f->sent += k;
    }
    if (put > 0) {
        atomic_store_explicit(&g->head, head + put, memory_order_release);
        atomic_thread_fence(memory_order_seq_cst);
        wake_other(&g->data_seq, &g->rd_sleep);
    }
    return f->sent == f->hlen + f->dlen ? COLL_IO_DONE : COLL_IO_AGAIN;
}

/* Add n bytes (whole floats) of the ring from pos into d, in coll__add_into's order; a float
 * that straddles the ring's end is put together first. */
static void ring_add(const coll_shm *s, uint64_t pos, float *d, size_t n)
{
    size_t at = (size_t)(pos & s->mask), first = s->cap - at < n ? s->cap - at : n;
    size_t whole = first / sizeof(float), split = first % sizeof(float);
    coll__add8(d, s->data + at, whole, true);
    if (first == n)
        return;
    size_t from = 0;
    if (split != 0) {
        unsigned char v[sizeof(float)];
        memcpy(v, s->data + at + whole * sizeof(float), split);
        memcpy(v + split, s->data, sizeof(float) - split);
        coll__add8(d + whole, v, 1, true);
        whole++;
        from = sizeof(float) - split;
    }
    coll__add8(d + whole, s->data + from, (n - whole * sizeof(float)) / sizeof(float), true);
}

/* Reader with fewer than need bytes after tail: AGAIN while the writer is there (or it put
 * them just before it closed), ENDED once it closed without them. */
static coll_io short_read(shm_seg *g, uint64_t tail, size_t need)
{
    if (!atomic_load(&g->wr_closed))
        return COLL_IO_AGAIN;
    return atomic_load_explicit(&g->head, memory_order_acquire) - tail >= need ? COLL_IO_AGAIN
                                                                               : COLL_IO_ENDED;
}

/*
 * Reader, never waits: up to n bytes of the ring into dst — copied, or (add) added as floats,
 * whole floats only; the bytes taken are freed for the writer. DONE *got (> 0), AGAIN none now
 * (or only part of a float when adding), ENDED the writer closed with nothing (or part of a
 * float) left, or the ring is corrupt.
 */
static coll_io take_some(coll_shm *s, void *dst, size_t n, bool add, size_t *got)
{
    shm_seg *g = s->seg;
    uint64_t tail = atomic_load_explicit(&g->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&g->head, memory_order_acquire);
    *got = 0;
    if (head - tail > s->cap) {
        mt_log_warn("coll: a shared-memory ring is corrupt (head %" PRIu64 ", tail %" PRIu64
                    "); dropping the connection",
                    head, tail);
        return COLL_IO_ENDED;
    }
    if (head == tail)
        return short_read(g, tail, 1);
    size_t k = head - tail < n ? (size_t)(head - tail) : n;
    if (add) {
        k -= k % sizeof(float);
        if (k == 0) /* part of a float: the writer is still putting it (or ran out of room) */
            return short_read(g, tail, sizeof(float));
        ring_add(s, tail, dst, k);
    } else {
        ring_get(s, tail, dst, k);
    }
    atomic_store_explicit(&g->tail, tail + k, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    wake_other(&g->space_seq, &g->wr_sleep);
    *got = k;
    return COLL_IO_DONE;
}

coll_io coll__shm_add_some(coll_shm *s, float *d, size_t n, size_t *got)
{
    return take_some(s, d, n, true, got);
}

coll_io coll__shm_get_some(coll_shm *s, void *buf, size_t n, size_t *got)
{
    return take_some(s, buf, n, false, got);
}

coll_io coll__shm_wait_data(coll_shm *s, int fd, int timeout_ms)
{
    shm_seg *g = s->seg;
    uint64_t tail = atomic_load_explicit(&g->tail, memory_order_relaxed);
    int64_t until = coll__now_ns() + (int64_t)timeout_ms * 1000000LL;
    for (;;) {
        if (atomic_load_explicit(&g->head, memory_order_acquire) != tail ||
            atomic_load(&g->wr_closed))
            return COLL_IO_DONE;
        if (sock_ended(fd)) /* its process died (or closed without a word): what is left */
            return atomic_load_explicit(&g->head, memory_order_acquire) != tail ? COLL_IO_DONE
                                                                                : COLL_IO_ENDED;
        int64_t now = coll__now_ns();
        if (now >= until)
            return COLL_IO_AGAIN;
        int64_t slice = now + SHM_SLICE_MS * 1000000LL;
        shm_watch wt = {&g->head, &g->data_seq, &g->rd_sleep};
        wait_move(s, &wt, tail, slice < until ? slice : until);
    }
}

/* Writer: whether need bytes fit in the ring after what the reader took up to tail. */
static bool room_for(const coll_shm *s, uint64_t tail, size_t need)
{
    return s->cap - (atomic_load_explicit(&s->seg->head, memory_order_relaxed) - tail) >= need;
}

coll_io coll__shm_wait_room(coll_shm *s, int fd, size_t need, int timeout_ms)
{
    shm_seg *g = s->seg;
    uint64_t tail = atomic_load_explicit(&g->tail, memory_order_acquire);
    int64_t until = coll__now_ns() + (int64_t)timeout_ms * 1000000LL;
    if (need > s->cap)
        need = s->cap;
    for (;;) {
        if (atomic_load(&g->rd_closed) || sock_ended(fd))
            return COLL_IO_ENDED;
        if (room_for(s, tail, need))
            return COLL_IO_DONE;
        int64_t now = coll__now_ns();
        if (now >= until)
            return COLL_IO_AGAIN;
        int64_t slice = now + SHM_SLICE_MS * 1000000LL;
        shm_watch wt = {&g->tail, &g->space_seq, &g->wr_sleep};
        if (wait_move(s, &wt, tail, slice < until ? slice : until)) {
            tail = atomic_load_explicit(&g->tail, memory_order_acquire);
            if (room_for(s, tail, need))
                return COLL_IO_DONE; /* no system call on the streaming path */
        }
    }
}

int coll__shm_write_now(coll_shm *s, const void *b, size_t n)
{
    shm_seg *g = s->seg;
    coll_out f = {.hdr = b, .hlen = n};
    if (!room_for(s, atomic_load(&g->tail), n))
        return 0;
    return coll__shm_put_some(s, &f) == COLL_IO_DONE;
}

coll_io coll__shm_read(coll_shm *s, const coll_shm_wait *wt, void *buf, size_t n, size_t *got)
{
    int64_t until = coll__now_ns() + (int64_t)wt->timeout_ms * 1000000LL;
    *got = 0;
    while (*got < n) {
        size_t k;
        coll_io r = coll__shm_get_some(s, (char *)buf + *got, n - *got, &k);
        if (r == COLL_IO_ENDED)
            return *got > 0 ? COLL_IO_DONE : COLL_IO_ENDED;
        if (r == COLL_IO_DONE) {
            *got += k;
            continue;
        }
        if (wt->closing != NULL && atomic_load(wt->closing))
            return COLL_IO_ENDED;
        int64_t left = (until - coll__now_ns()) / 1000000LL;
        if (left <= 0)
            break;
        coll_io w = coll__shm_wait_data(s, wt->fd, left > SHM_SLICE_MS ? SHM_SLICE_MS : (int)left);
        if (w == COLL_IO_ENDED)
            return *got > 0 ? COLL_IO_DONE : COLL_IO_ENDED;
    }
    return *got > 0 ? COLL_IO_DONE : COLL_IO_AGAIN;
}

void coll__shm_wake_reader(coll_shm *s)
{
    if (s == NULL)
        return;
    atomic_fetch_add(&s->seg->data_seq, 1);
    futex(&s->seg->data_seq, FUTEX_WAKE, INT_MAX, NULL);
}

void coll__shm_sweep(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        char name[COLL_SHM_NAME];
        unsigned long long job;
        long pid;
        unsigned n;
        if (strncmp(e->d_name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0 ||
            sscanf(e->d_name + strlen(SHM_PREFIX), "%16llx-%ld-%u", &job, &pid, &n) != 3 ||
            pid <= 0 || pid > INT_MAX)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its creator still runs (or is another user's) */
        if (strlen(e->d_name) + 2 > sizeof(name))
            continue;
        name[0] = '/';
        memcpy(name + 1, e->d_name, strlen(e->d_name) + 1);
        if (shm_unlink(name) == 0)
            mt_log_info("coll: removed %s, a data-plane ring left by process %ld", name, pid);
    }
    closedir(d);
}

/* ------------------------------------------------------------------ group windows */

/*
 * A window: one segment that every member of a group of processes of this host maps (the
 * engine's host-local fast path, coll_world.c "host windows"). Layout: a 128-byte header
 * (magic, p, slot size, where the data starts; then the bell and its sleepers on their own
 * cache line), one 128-byte record per member (its barrier epoch and the tag it stamped on
 * the last first barrier), and from data_off two buffers of p slots of slot_bytes each (slot
 * (b, i) at data_off + (b p + i) slot_bytes). A barrier: member i stores epoch e in its
 * record; the member that finds every record at e or later (the last to arrive) bumps the
 * bell and wakes the sleepers if any announced themselves; a waiter spins for spin_ns, then
 * sleeps in futex(2) on the bell with its count of sleepers raised (sequentially consistent
 * accesses on both sides: one of them always sees the other). The window knows no deadline
 * and no peer: the engine waits in slices and checks those between them.
 */
#define WIN_MAGIC   0x4e57544du /* "MTWN" */
#define WIN_VERSION 1u
#define WIN_HDR     128u
#define WIN_REC     128u

typedef struct win_hdr {
    uint32_t magic, version;
    uint32_t p;
    int32_t creator;
    uint64_t slot_bytes;
    uint64_t data_off;
    alignas(64) _Atomic uint32_t bell; /* bumped when a barrier completes: sleepers wait on it */
    _Atomic uint32_t sleepers;         /* members asleep (or about to be) on bell */
} win_hdr;

typedef struct win_rec {
    _Atomic uint32_t epoch; /* the last barrier this member arrived at */
    uint32_t pad;
    unsigned char stamp[COLL_HDR_SIZE]; /* its tag at its last first barrier of a chunk */
} win_rec;

_Static_assert(sizeof(win_hdr) <= WIN_HDR, "window header fits its 128 bytes");
_Static_assert(sizeof(win_rec) <= WIN_REC, "member record fits its 128 bytes");

struct coll_win {
    win_hdr *h;
    unsigned char *base;
    size_t map_len, slot_bytes, data_off; /* the header's, checked when mapped */
    int p;
    int64_t spin_ns;
};

static win_rec *win_rec_of(const coll_win *g, int i)
{
    return (win_rec *)(g->base + WIN_HDR + (size_t)i * WIN_REC);
}

/* Bytes of the header and records, rounded up to a page (where the slots start). */
static size_t win_data_off(int p)
{
    return (WIN_HDR + (size_t)p * WIN_REC + 4095) & ~(size_t)4095;
}

static mt_code win_wrap(void *map, size_t len, const coll_win_spec *q, coll_win **out, mt_err *err)
{
    coll_win *g = mt_calloc(1, sizeof(*g));
    if (g == NULL) {
        munmap(map, len);
        return mt_err_set(err, MT_RESOURCE_EXHAUSTED, "shm: out of memory");
    }
    g->h = map;
    g->base = map;
    g->map_len = len;
    g->p = q->p;
    g->spin_ns = q->spin_ns;
    *out = g;
    return MT_OK;
}

static void win_free(coll_win *g)
{
    if (g == NULL)
        return;
    munmap(g->base, g->map_len);
    mt_free(g);
}

static mt_code win_create(const coll_win_spec *q, coll_win **out, char name[COLL_SHM_NAME],
                          mt_err *err)
{
    void *map = NULL;
    *out = NULL;
    name[0] = '\0';
    if (q->p < 2 || q->slot_bytes < 4096 || q->slot_bytes % 4096 != 0 ||
        q->slot_bytes > ((size_t)1 << 28))
        return mt_err_set(err, MT_INVALID_ARGUMENT,
                          "shm: window of %d members x %zu bytes: want >= 2 members and slots of "
                          "a multiple of 4 KiB up to 256 MiB",
                          q->p, q->slot_bytes);
    size_t off = win_data_off(q->p), len = off + 2 * (size_t)q->p * q->slot_bytes;
    mt_code rc = seg_new(q->job, len, name, &map, err);
    if (rc == MT_OK && (rc = win_wrap(map, len, q, out, err)) != MT_OK) {
        shm_unlink(name);
        name[0] = '\0';
    }
    if (rc != MT_OK)
        return rc;
    coll_win *g = *out;
    memset(g->base, 0, off);
    g->h->p = (uint32_t)q->p;
    g->h->creator = (int32_t)getpid();
    g->h->slot_bytes = q->slot_bytes;
    g->h->data_off = off;
    g->h->version = WIN_VERSION;
    g->slot_bytes = q->slot_bytes;
    g->data_off = off;
    atomic_thread_fence(memory_order_seq_cst);
    g->h->magic = WIN_MAGIC;
    return MT_OK;
}

static mt_code win_attach(const char *name, const coll_win_spec *q, coll_win **out, mt_err *err)
{
    void *map = NULL;
    size_t len = 0;
    *out = NULL;
    mt_code rc = seg_open(name, win_data_off(q->p), &map, &len, err);
    if (rc == MT_OK)
        rc = win_wrap(map, len, q, out, err);
    if (rc != MT_OK)
        return rc;
    coll_win *g = *out;
    const win_hdr *h = g->h;
    if (h->magic != WIN_MAGIC || h->version != WIN_VERSION || h->p != (uint32_t)q->p ||
        h->data_off != win_data_off(q->p) || h->slot_bytes < 4096 ||
        h->slot_bytes > ((size_t)1 << 28) ||
        h->data_off + 2 * (uint64_t)q->p * h->slot_bytes > (uint64_t)len) {
        win_free(g);
        *out = NULL;
        return mt_err_set(err, MT_INVALID_ARGUMENT, "shm: %s is not a window of %d members", name,
                          q->p);
    }
    g->slot_bytes = (size_t)h->slot_bytes;
    g->data_off = (size_t)h->data_off;
    return MT_OK;
}

static float *win_slot(const coll_win *g, int buf, int i)
{
    return (float *)(g->base + g->data_off +
                     ((size_t)buf * (size_t)g->p + (size_t)i) * g->slot_bytes);
}

static size_t win_slot_floats(const coll_win *g)
{
    return g->slot_bytes / sizeof(float);
}

/* The first member that has not arrived at epoch (or later), or -1: all have. */
static int win_missing(const coll_win *g, uint32_t epoch)
{
    for (int j = 0; j < g->p; j++) {
        if ((int32_t)(atomic_load(&win_rec_of(g, j)->epoch) - epoch) < 0)
            return j;
    }
    return -1;
}

static void win_arrive(coll_win *g, int i, uint32_t epoch, const coll_hdr *stamp)
{
    win_rec *r = win_rec_of(g, i);
    if (stamp != NULL)
        coll__hdr_encode(stamp, r->stamp);
    atomic_store(&r->epoch, epoch);
    if (win_missing(g, epoch) >= 0)
        return; /* the last one to arrive rings */
    atomic_fetch_add(&g->h->bell, 1);
    if (atomic_load(&g->h->sleepers) != 0)
        futex(&g->h->bell, FUTEX_WAKE, INT_MAX, NULL);
}

static int win_wait(coll_win *g, uint32_t epoch, int64_t until_ns)
{
    int64_t spin_until = coll__now_ns() + g->spin_ns;
    int m;
    for (unsigned i = 1; (m = win_missing(g, epoch)) >= 0; i++) {
        if ((i & 63) == 0) {
            int64_t now = coll__now_ns();
            if (now >= until_ns)
                return m;
            if (now >= spin_until)
                break;
        }
        coll__cpu_relax();
    }
    while (m >= 0) {
        uint32_t v = atomic_load(&g->h->bell);
        atomic_fetch_add(&g->h->sleepers, 1);
        int64_t left = until_ns - coll__now_ns();
        if (win_missing(g, epoch) >= 0 && left > 0) {
            struct timespec ts = {.tv_sec = left / 1000000000LL, .tv_nsec = left % 1000000000LL};
            futex(&g->h->bell, FUTEX_WAIT, v, &ts);
        }
        atomic_fetch_sub(&g->h->sleepers, 1);
        m = win_missing(g, epoch);
        if (coll__now_ns() >= until_ns)
            break;
    }
    return m;
}

static void win_stamp(const coll_win *g, int i, coll_hdr *out)
{
    coll__hdr_parse(win_rec_of(g, i)->stamp, out);
}

const coll_win_ops coll__shm_win_ops = {
    .create = win_create,
    .attach = win_attach,
    .unlink = coll__shm_unlink,
    .free = win_free,
    .slot = win_slot,
    .slot_floats = win_slot_floats,
    .arrive = win_arrive,
    .wait = win_wait,
    .stamp = win_stamp,
};
