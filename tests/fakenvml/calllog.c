/* Per-function call counts of the fake NVML library (FAKE_NVML_CALL_LOG=path), so tests and the
 * overhead benchmark can prove how many NVML calls a monitor makes, by function.
 *
 * Every exported function, implemented or stub, counts itself under its own name. The counts run
 * from the library's load and are written to the file (replaced whole, through a rename) at every
 * nvmlShutdown, at exit, and at most once a second while calls are made (a process killed by a
 * signal still leaves counts at most a second old). Format: a comment line with the writer's pid
 * and the CLOCK_MONOTONIC time of the counts, then "name count" lines, most called first. A list
 * query called with a NULL array (a size query) counts again as "name(NULL)".
 */
#define _GNU_SOURCE
#include "fakenvml.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_NAMES 512

typedef struct { const char *name; int null; unsigned long long n; } counted_t;

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_log_path[1024];
static counted_t g_counted[MAX_NAMES];
static unsigned g_ncounted;
static int64_t g_written_ns;
static volatile int g_logging; /* read without the lock: the common case (no log) stays free */

static int64_t mono_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int by_count(const void *a, const void *b) {
    const counted_t *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? 1 : -1;
    int c = strcmp(x->name, y->name);
    return c ? c : x->null - y->null;
}

/* Caller holds g_log_lock. */
static void write_locked(void) {
    if (!g_log_path[0])
        return;
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", g_log_path, (int)getpid());
    FILE *fp = fopen(tmp, "w");
    if (!fp)
        return;
    counted_t sorted[MAX_NAMES];
    memcpy(sorted, g_counted, g_ncounted * sizeof sorted[0]);
    qsort(sorted, g_ncounted, sizeof sorted[0], by_count);
    int64_t now = mono_ns(CLOCK_MONOTONIC);
    fprintf(fp, "# fakenvml call counts: pid %d at CLOCK_MONOTONIC %lld.%09lld s\n", (int)getpid(),
            (long long)(now / 1000000000), (long long)(now % 1000000000));
    for (unsigned i = 0; i < g_ncounted; i++)
        fprintf(fp, "%s%s %llu\n", sorted[i].name, sorted[i].null ? "(NULL)" : "", sorted[i].n);
    if (fclose(fp) == 0)
        rename(tmp, g_log_path);
    else
        unlink(tmp);
    g_written_ns = mono_ns(CLOCK_MONOTONIC_COARSE);
}

void fake_call_log_open(const char *path) {
    pthread_mutex_lock(&g_log_lock);
    snprintf(g_log_path, sizeof g_log_path, "%s", path ? path : "");
    g_logging = g_log_path[0] != '\0';
    pthread_mutex_unlock(&g_log_lock);
}

static void count(const char *name, int null) {
    if (!g_logging)
        return;
    pthread_mutex_lock(&g_log_lock);
    unsigned i = 0;
    while (i < g_ncounted && (g_counted[i].null != null ||
                              (g_counted[i].name != name && strcmp(g_counted[i].name, name) != 0)))
        i++;
    if (i == g_ncounted && g_ncounted < MAX_NAMES)
        g_counted[g_ncounted++] = (counted_t){name, null, 0};
    if (i < g_ncounted)
        g_counted[i].n++;
    if (mono_ns(CLOCK_MONOTONIC_COARSE) - g_written_ns >= 1000000000)
        write_locked();
    pthread_mutex_unlock(&g_log_lock);
}

void fake_call_count(const char *name) { count(name, 0); }

/* A call with a NULL array (a size query), counted again under "name(NULL)". */
void fake_call_count_null(const char *name) { count(name, 1); }

void fake_call_log_write(void) {
    if (!g_logging)
        return;
    pthread_mutex_lock(&g_log_lock);
    write_locked();
    pthread_mutex_unlock(&g_log_lock);
}

__attribute__((destructor)) static void write_at_exit(void) { fake_call_log_write(); }
