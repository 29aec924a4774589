/* SPDX-License-Identifier: MIT */
/*
 * mt_prom.c — process metrics and histograms in the Prometheus text format (mt_prom.h).
 */
#include "prom/mt_prom.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Append to out[*len..cap) like snprintf; *len grows by what the text needs (it may pass cap). */
__attribute__((format(printf, 4, 5))) static void put(char *out, size_t cap, size_t *len,
                                                      const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(*len < cap ? out + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len += (size_t)n;
}

static void family(char *out, size_t cap, size_t *len, const char *name, const char *type,
                   const char *help)
{
    put(out, cap, len, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

size_t mt_prom_process(char *out, size_t cap, const char *program)
{
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0, btime = 0;
    long long rss = 0;
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    char line[256], *p = NULL;
    struct rlimit rl;
    size_t fds = 0, len = 0;
    bool stat_ok = false;
    FILE *f;
    DIR *d;

    if (cap > 0)
        out[0] = '\0';
    family(out, cap, &len, "meshtrain_build_info", "gauge", "meshtrain's version; the value is 1.");
    put(out, cap, &len, "meshtrain_build_info{version=\"%s\",program=\"%s\"} 1\n", MT_VERSION,
        program);
    if ((f = fopen("/proc/self/stat", "r")) != NULL) {
        char buf[1024];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
        /* after ") ": state(3) ... utime(14) stime(15) ... starttime(22) vsize(23) rss(24) */
        stat_ok = p != NULL && sscanf(p + 2,
                                      "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
                                      "%*d %*d %*d %*d %*d %*d %llu %llu %lld",
                                      &utime, &stime, &start, &vsize, &rss) == 5;
        fclose(f);
    }
    if ((f = fopen("/proc/stat", "r")) != NULL) {
        while (fgets(line, sizeof(line), f) != NULL)
            if (sscanf(line, "btime %llu", &btime) == 1)
                break;
        fclose(f);
    }
    if (stat_ok && tick > 0) {
        family(out, cap, &len, "process_cpu_seconds_total", "counter",
               "Total user and system CPU time spent in seconds.");
        put(out, cap, &len, "process_cpu_seconds_total %.2f\n",
            (double)(utime + stime) / (double)tick);
        family(out, cap, &len, "process_virtual_memory_bytes", "gauge",
               "Virtual memory size in bytes.");
        put(out, cap, &len, "process_virtual_memory_bytes %llu\n", vsize);
        family(out, cap, &len, "process_resident_memory_bytes", "gauge",
               "Resident memory size in bytes.");
        put(out, cap, &len, "process_resident_memory_bytes %lld\n", rss * (long long)page);
        if (btime > 0) {
            family(out, cap, &len, "process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds.");
            put(out, cap, &len, "process_start_time_seconds %.2f\n",
                (double)btime + (double)start / (double)tick);
        }
    }
    if ((d = opendir("/proc/self/fd")) != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            fds += e->d_name[0] != '.';
        closedir(d);
        family(out, cap, &len, "process_open_fds", "gauge", "Number of open file descriptors.");
        put(out, cap, &len, "process_open_fds %zu\n", fds > 0 ? fds - 1 : 0); /* less opendir's */
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        family(out, cap, &len, "process_max_fds", "gauge",
               "Maximum number of open file descriptors.");
        put(out, cap, &len, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }
    return len;
}

void mt_prom_hist_init(mt_prom_hist *h, const double *bounds, size_t n)
{
    h->bounds = bounds;
    h->n = n < MT_PROM_MAX_BUCKETS ? n : MT_PROM_MAX_BUCKETS;
}

void mt_prom_hist_observe(mt_prom_hist *h, double seconds)
{
    size_t i = 0;

    if (!(seconds > 0))
        seconds = 0;
    while (i < h->n && seconds > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)(seconds * 1e9 + 0.5), memory_order_relaxed);
}

uint64_t mt_prom_hist_count(const mt_prom_hist *h)
{
    uint64_t total = 0;

    for (size_t i = 0; i <= h->n; i++)
        total += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    return total;
}

size_t mt_prom_hist_write(const mt_prom_hist *h, const char *name, const char *labels,
                          const char *help, char *out, size_t cap)
{
    const char *sep = labels[0] != '\0' ? "," : "";
    uint64_t cum = 0;
    size_t len = 0;

    if (cap > 0)
        out[0] = '\0';
    if (help != NULL)
        family(out, cap, &len, name, "histogram", help);
    for (size_t i = 0; i <= h->n; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < h->n)
            put(out, cap, &len, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, h->bounds[i],
                (unsigned long long)cum);
        else
            put(out, cap, &len, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                (unsigned long long)cum);
    }
    put(out, cap, &len, "%s_sum%s%s%s %.9f\n", name, labels[0] ? "{" : "", labels,
        labels[0] ? "}" : "", (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9);
    put(out, cap, &len, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels,
        labels[0] ? "}" : "", (unsigned long long)cum);
    return len;
}
