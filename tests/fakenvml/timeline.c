/* Fake NVML library: the timeline every GPU follows (the default square wave, or a replayed
 * trace file written by gpumon.sim.trace), and lookups into it at a wall-clock moment.
 * Everything here runs once at nvmlInit except fake_locate/fake_counter (no I/O, O(log n)).
 */
#define _GNU_SOURCE
#include "fakenvml.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Default square wave: 1 s period aligned to whole wall-clock seconds, 0.4 s busy then idle. */
#define SQ_PERIOD_US 1000000
#define SQ_BUSY_US 400000
/* The driver's utilization sample period, about 1/6 s (UNVERIFIED: see README.md). */
#define SQ_SAMPLES_PER_PERIOD 6
/* Square-wave physics, H100-like: power at idle and while a kernel runs (W). */
#define SQ_IDLE_W 75
#define SQ_BUSY_W 600
/* Memory utilization while busy (% of time device memory is read/written). */
#define SQ_MEM_UTIL_BUSY 35
#define SQ_SM_CLOCK_IDLE 345
#define SQ_MEM_USED_MIB 24576
#define SQ_RX_KBPS_BUSY 8000000
#define SQ_TX_KBPS_BUSY 200000
#define CLOCK_EVENT_GPU_IDLE 0x1
/* GPM while a kernel runs, per mille: SM activity, SM occupancy, tensor and DRAM activity. */
#define SQ_SM_ACTIVE_BUSY 800
#define SQ_SM_OCCUPANCY_BUSY 500
#define SQ_TENSOR_BUSY 400
#define SQ_DRAM_BUSY 300

/* A KB in NVML's PCIe rates (UNVERIFIED: 1024 assumed). */
#define PCIE_KB 1024

void fake_gpu_identity(fake_gpu *g, unsigned index) {
    snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3 (fake)");
    snprintf(g->uuid, sizeof g->uuid, "GPU-fake0000-0000-4000-8000-%012u", index);
    g->domain = 0;
    g->bus = index + 1;
    g->device = 0;
    snprintf(g->busid, sizeof g->busid, "%08X:%02X:%02X.0", g->domain, g->bus, g->device);
    snprintf(g->serial, sizeof g->serial, "1650923%06u", index);
    g->mem_total_mib = 81559;
    g->power_limit_mw = 700000;
    g->sm_max_mhz = 1980;
    g->mem_max_mhz = 2619;
}

static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* Derived per-row values: cumulative PCIe bytes, per-period power, the active-row index. */
static int finish_gpu(const fake_timeline *tl, fake_gpu *g) {
    int64_t D = tl->duration_us;
    size_t n = g->nrows, last = n - 1;
    fake_row *r = g->rows;
    int have_energy = 0;
    for (size_t i = 0; i < n; i++)
        if (r[i].energy_mj)
            have_energy = 1;
    uint64_t rx = 0, tx = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t dt = r[i].t_us - (i ? r[i - 1].t_us : 0);
        rx += (uint64_t)((unsigned __int128)r[i].rx_kbps * PCIE_KB * (uint64_t)dt / 1000000);
        tx += (uint64_t)((unsigned __int128)r[i].tx_kbps * PCIE_KB * (uint64_t)dt / 1000000);
        r[i].rx_bytes = rx;
        r[i].tx_bytes = tx;
        if (!have_energy) { /* trace without an energy column: integrate the power column */
            e += (uint64_t)r[i].power_mw * (uint64_t)dt / 1000000;
            r[i].energy_mj = e;
        }
    }
    int64_t wrap = D - r[last].t_us; /* from the last row to the end of the pass: row 0's period */
    g->loop_rx_bytes = rx + (uint64_t)((unsigned __int128)r[0].rx_kbps * PCIE_KB * (uint64_t)wrap / 1000000);
    g->loop_tx_bytes = tx + (uint64_t)((unsigned __int128)r[0].tx_kbps * PCIE_KB * (uint64_t)wrap / 1000000);
    /* Energy over the wrap segment at the last period's rate (or the 1 s average power). */
    uint64_t wrap_mw = r[last].power_mw;
    if (n > 1 && r[last].t_us > r[last - 1].t_us)
        wrap_mw = (r[last].energy_mj - r[last - 1].energy_mj) * 1000000 /
                  (uint64_t)(r[last].t_us - r[last - 1].t_us);
    g->loop_energy_mj = r[last].energy_mj + wrap_mw * (uint64_t)wrap / 1000000;
    for (size_t i = 0; i < n; i++) {
        uint64_t de;
        int64_t dt;
        if (i) {
            de = r[i].energy_mj - r[i - 1].energy_mj;
            dt = r[i].t_us - r[i - 1].t_us;
        } else if (r[0].t_us > 0) {
            de = r[0].energy_mj;
            dt = r[0].t_us;
        } else {
            de = g->loop_energy_mj - r[last].energy_mj;
            dt = wrap;
        }
        r[i].inst_power_mw = dt > 0 ? (uint32_t)((de * 1000000 + (uint64_t)dt / 2) / (uint64_t)dt) : r[i].power_mw;
    }
    g->nactive = 0;
    g->active = malloc(sizeof(size_t) * n);
    if (!g->active)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (r[i].active)
            g->active[g->nactive++] = i;
    return 0;
}

int fake_timeline_square(fake_timeline *tl, unsigned ngpus) {
    memset(tl, 0, sizeof *tl);
    snprintf(tl->source, sizeof tl->source, "square wave");
    tl->duration_us = SQ_PERIOD_US;
    tl->period_us = SQ_PERIOD_US / SQ_SAMPLES_PER_PERIOD;
    tl->ngpus = ngpus;
    const int n = SQ_SAMPLES_PER_PERIOD;
    int64_t t[SQ_SAMPLES_PER_PERIOD];
    for (int j = 0; j < n; j++)
        t[j] = ((int64_t)j * SQ_PERIOD_US + n / 2) / n;
    /* Mean power over one whole period: what a 1 s average reads, constant for this wave. */
    uint32_t avg_mw = (uint32_t)(SQ_IDLE_W * 1000 +
                                 (int64_t)(SQ_BUSY_W - SQ_IDLE_W) * 1000 * SQ_BUSY_US / SQ_PERIOD_US);
    for (unsigned gi = 0; gi < ngpus; gi++) {
        fake_gpu *g = &tl->gpus[gi];
        fake_gpu_identity(g, gi);
        g->lost_after_us = -1;
        g->gpm_fail_after_us = -1;
        g->gpm = 1;
        g->rows = calloc(n, sizeof(fake_row));
        if (!g->rows)
            return -1;
        g->nrows = n;
        uint64_t e = 0;
        for (int j = 0; j < n; j++) {
            fake_row *r = &g->rows[j];
            /* The row at t[j] is the sample of the period (t[j-1], t[j]]. */
            int64_t start = j ? t[j - 1] : t[n - 1] - SQ_PERIOD_US, end = t[j];
            int64_t lo = start > 0 ? start : 0, hi = end < SQ_BUSY_US ? end : SQ_BUSY_US;
            int64_t busy = hi > lo ? hi - lo : 0;
            int64_t len = end - start;
            uint32_t util = (uint32_t)((busy * 100 + len / 2) / len);
            r->t_us = end;
            r->util_gpu = util;
            r->util_mem = util * SQ_MEM_UTIL_BUSY / 100;
            r->power_mw = avg_mw;
            r->sm_clock = busy ? 1980 : SQ_SM_CLOCK_IDLE;
            r->temp_c = busy ? 58 : 55;
            r->clock_events = busy ? 0 : CLOCK_EVENT_GPU_IDLE;
            r->mem_used_mib = SQ_MEM_USED_MIB;
            r->rx_kbps = (uint32_t)((int64_t)SQ_RX_KBPS_BUSY * util / 100);
            r->tx_kbps = (uint32_t)((int64_t)SQ_TX_KBPS_BUSY * util / 100);
            r->active = busy > 0;
            r->sm_active = (uint16_t)(SQ_SM_ACTIVE_BUSY * util / 100);
            r->sm_occupancy = (uint16_t)(SQ_SM_OCCUPANCY_BUSY * util / 100);
            r->tensor_active = (uint16_t)(SQ_TENSOR_BUSY * util / 100);
            r->dram_active = (uint16_t)(SQ_DRAM_BUSY * util / 100);
            uint64_t p_mw = SQ_IDLE_W * 1000 + (uint64_t)(SQ_BUSY_W - SQ_IDLE_W) * 1000 * (uint64_t)busy / (uint64_t)len;
            if (j)
                e += p_mw * (uint64_t)(end - start) / 1000000;
            r->energy_mj = e; /* row 0 sits at t=0: nothing accumulated yet in this pass */
        }
        if (finish_gpu(tl, g))
            return -1;
    }
    return 0;
}

void fake_timeline_free(fake_timeline *tl) {
    for (unsigned i = 0; i < FAKE_MAX_GPUS; i++) {
        free(tl->gpus[i].rows);
        free(tl->gpus[i].active);
        free(tl->gpus[i].opids);
    }
    free(tl->pids);
    memset(tl, 0, sizeof *tl);
}

/* ---- trace files ---- */

static int split_tabs(char *line, char **f, int max) {
    int n = 0;
    char *p = line;
    while (n < max) {
        f[n++] = p;
        char *t = strchr(p, '\t');
        if (!t)
            break;
        *t = '\0';
        p = t + 1;
    }
    return n;
}

static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!*s)
        return -1;
    char *end;
    errno = 0;
    long long v = (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? strtoll(s + 2, &end, 16)
                                                                 : strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int fail(char *err, size_t errlen, const char *path, long line, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        snprintf(err, errlen, "fakenvml: bad trace %s line %ld: %s", path, line, msg);
    else
        snprintf(err, errlen, "fakenvml: bad trace %s: %s", path, msg);
    return -1;
}

static int push_row(fake_gpu *g, size_t *cap, const fake_row *row) {
    if (g->nrows == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        fake_row *nr = realloc(g->rows, nc * sizeof(fake_row));
        if (!nr)
            return -1;
        g->rows = nr;
        *cap = nc;
    }
    g->rows[g->nrows++] = *row;
    return 0;
}

static int push_pid(fake_timeline *tl, size_t *cap, uint32_t pid) {
    if (tl->npids == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        uint32_t *np = realloc(tl->pids, nc * sizeof(uint32_t));
        if (!np)
            return -1;
        tl->pids = np;
        *cap = nc;
    }
    tl->pids[tl->npids++] = pid;
    return 0;
}

/* The GPM columns after pids (per mille): all four or none. */
static int parse_gpm(char **f, int nf, fake_row *r) {
    int64_t v[4];
    if (nf != 4)
        return -1;
    for (int k = 0; k < 4; k++)
        if (parse_int(f[k], 0, 1000, &v[k]))
            return -1;
    r->sm_active = (uint16_t)v[0];
    r->sm_occupancy = (uint16_t)v[1];
    r->tensor_active = (uint16_t)v[2];
    r->dram_active = (uint16_t)v[3];
    return 0;
}

#define I32 2147483647LL
#define U32 4294967295LL

int fake_timeline_load(fake_timeline *tl, const char *path, char *err, size_t errlen) {
    memset(tl, 0, sizeof *tl);
    snprintf(tl->source, sizeof tl->source, "%s", path);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "fakenvml: cannot read trace %s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t linecap = 0, pidcap = 0;
    size_t rowcap[FAKE_MAX_GPUS] = {0};
    int have_g[FAKE_MAX_GPUS] = {0};
    int have_h = 0, rc = -1;
    long lineno = 0;
    ssize_t len;
    while ((len = getline(&line, &linecap, fp)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0 || line[0] == '#')
            continue;
        char *f[24];
        int nf = split_tabs(line, f, 24);
        int64_t v[16];
        if (strcmp(f[0], "H") == 0) {
            if (have_h) {
                fail(err, errlen, path, lineno, "second H line");
                goto out;
            }
            if (nf < 6 || strcmp(f[1], "gpumon-trace") != 0 || parse_int(f[2], 1, 1, &v[0]) ||
                parse_int(f[3], 1, FAKE_MAX_GPUS, &v[1]) || parse_int(f[4], 1, I32, &v[2]) ||
                parse_int(f[5], 1, (int64_t)1 << 50, &v[3])) {
                fail(err, errlen, path, lineno,
                     "expected H<TAB>gpumon-trace<TAB>1<TAB>ngpus(1..%d)<TAB>period_us<TAB>duration_us",
                     FAKE_MAX_GPUS);
                goto out;
            }
            tl->ngpus = (unsigned)v[1];
            tl->period_us = v[2];
            tl->duration_us = v[3];
            have_h = 1;
            for (unsigned i = 0; i < tl->ngpus; i++) {
                fake_gpu_identity(&tl->gpus[i], i);
                tl->gpus[i].lost_after_us = -1;
                tl->gpus[i].gpm_fail_after_us = -1;
            }
            continue;
        }
        if (!have_h) {
            fail(err, errlen, path, lineno, "the first record must be the H line");
            goto out;
        }
        if (strcmp(f[0], "G") == 0) {
            if (nf < 9 || parse_int(f[1], 0, tl->ngpus - 1, &v[0]) || parse_int(f[5], 1, I32, &v[1]) ||
                parse_int(f[6], 1, U32, &v[2]) || parse_int(f[7], 1, 100000, &v[3]) ||
                parse_int(f[8], 1, 100000, &v[4])) {
                fail(err, errlen, path, lineno,
                     "expected G<TAB>index<TAB>name<TAB>uuid<TAB>pci_bus_id<TAB>mem_total_mib<TAB>"
                     "power_limit_mw<TAB>sm_clock_max_mhz<TAB>mem_clock_max_mhz[<TAB>gpm 0|1]");
                goto out;
            }
            int64_t gpm = 0;   /* without the column: a GPU without GPM */
            if (nf > 9 && parse_int(f[9], 0, 1, &gpm)) {
                fail(err, errlen, path, lineno, "gpm must be 0 or 1, not '%s'", f[9]);
                goto out;
            }
            fake_gpu *g = &tl->gpus[v[0]];
            unsigned dom, bus, dev, fn;
            if (strlen(f[2]) >= sizeof g->name || strlen(f[3]) >= sizeof g->uuid ||
                strlen(f[4]) >= sizeof g->busid || !f[2][0] || !f[3][0] ||
                sscanf(f[4], "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) {
                fail(err, errlen, path, lineno, "bad name, uuid or pci_bus_id (domain:bus:device.function)");
                goto out;
            }
            snprintf(g->name, sizeof g->name, "%s", f[2]);
            snprintf(g->uuid, sizeof g->uuid, "%s", f[3]);
            snprintf(g->busid, sizeof g->busid, "%08X:%02X:%02X.%X", dom, bus, dev, fn);
            g->domain = dom;
            g->bus = bus;
            g->device = dev;
            g->mem_total_mib = (uint64_t)v[1];
            g->power_limit_mw = (uint32_t)v[2];
            g->sm_max_mhz = (uint32_t)v[3];
            g->mem_max_mhz = (uint32_t)v[4];
            g->gpm = (int)gpm;
            have_g[v[0]] = 1;
            continue;
        }
        if (strcmp(f[0], "S") == 0) {
            static const int64_t lim[13] = {0, 100, 100, U32, 100000, 1000, U32, I32 * 2, U32, U32,
                                            (int64_t)1 << 62, 1, 0};
            if (nf < 15 || parse_int(f[1], 0, tl->duration_us, &v[0]) ||
                parse_int(f[2], 0, tl->ngpus - 1, &v[1])) {
                fail(err, errlen, path, lineno,
                     "expected S<TAB>t_us(0..duration)<TAB>gpu<TAB>util_gpu_pct<TAB>util_mem_pct<TAB>power_mw"
                     "<TAB>sm_clock_mhz<TAB>temp_c<TAB>clock_events<TAB>mem_used_mib<TAB>pcie_rx_kbps"
                     "<TAB>pcie_tx_kbps<TAB>energy_mj<TAB>active<TAB>pids");
                goto out;
            }
            static const char *names[] = {"", "util_gpu_pct", "util_mem_pct", "power_mw", "sm_clock_mhz",
                                          "temp_c", "clock_events", "mem_used_mib", "pcie_rx_kbps",
                                          "pcie_tx_kbps", "energy_mj", "active"};
            for (int k = 1; k <= 11; k++) {
                if (parse_int(f[k + 2], 0, lim[k], &v[k + 1])) {
                    fail(err, errlen, path, lineno, "%s must be an integer in 0..%lld, not '%s'", names[k],
                         (long long)lim[k], f[k + 2]);
                    goto out;
                }
            }
            fake_gpu *g = &tl->gpus[v[1]];
            if (g->nrows && g->rows[g->nrows - 1].t_us >= v[0]) {
                fail(err, errlen, path, lineno, "t_us of gpu %lld does not increase", (long long)v[1]);
                goto out;
            }
            if (g->nrows && g->rows[g->nrows - 1].energy_mj > (uint64_t)v[11]) {
                fail(err, errlen, path, lineno, "energy_mj of gpu %lld decreases", (long long)v[1]);
                goto out;
            }
            fake_row r = {0};
            r.t_us = v[0];
            r.util_gpu = (uint32_t)v[2];
            r.util_mem = (uint32_t)v[3];
            r.power_mw = (uint32_t)v[4];
            r.sm_clock = (uint32_t)v[5];
            r.temp_c = (uint32_t)v[6];
            r.clock_events = (uint32_t)v[7];
            r.mem_used_mib = (uint32_t)v[8];
            r.rx_kbps = (uint32_t)v[9];
            r.tx_kbps = (uint32_t)v[10];
            r.energy_mj = (uint64_t)v[11];
            r.active = (uint8_t)v[12];
            r.pid_off = (uint32_t)tl->npids;
            if (strcmp(f[14], "-") != 0) {
                char *p = f[14];
                while (*p) {
                    char *end;
                    errno = 0;
                    unsigned long pid = strtoul(p, &end, 10);
                    if (end == p || errno || pid == 0 || pid > U32 || (*end && *end != ',')) {
                        fail(err, errlen, path, lineno, "pids must be '-' or comma-separated PIDs, not '%s'",
                             f[14]);
                        goto out;
                    }
                    if (push_pid(tl, &pidcap, (uint32_t)pid))
                        goto oom;
                    r.pid_n++;
                    p = *end ? end + 1 : end;
                }
            }
            if (nf > 15 && parse_gpm(f + 15, nf - 15, &r)) {
                fail(err, errlen, path, lineno, "after pids: sm_active, sm_occupancy, tensor_active, "
                     "dram_active, each per mille in 0..1000");
                goto out;
            }
            if (push_row(g, &rowcap[v[1]], &r))
                goto oom;
            continue;
        }
        /* Other record types are for other readers: skipped. */
    }
    if (!have_h) {
        fail(err, errlen, path, 0, "empty (no H line)");
        goto out;
    }
    for (unsigned i = 0; i < tl->ngpus; i++) {
        if (!have_g[i] || tl->gpus[i].nrows == 0) {
            fail(err, errlen, path, 0, "gpu %u has no %s", i, have_g[i] ? "S rows" : "G line");
            goto out;
        }
        if (finish_gpu(tl, &tl->gpus[i]))
            goto oom;
    }
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "fakenvml: out of memory reading trace %s", path);
out:
    free(line);
    fclose(fp);
    return rc;
}

/* ---- lookups ---- */

fake_pos fake_locate(const fake_timeline *tl, const fake_gpu *g, int64_t wall_us) {
    fake_pos p;
    p.loop = floordiv(wall_us, tl->duration_us);
    p.pos_us = wall_us - p.loop * tl->duration_us;
    /* Latest row with t_us <= pos. */
    size_t lo = 0, hi = g->nrows; /* answer in [lo, hi): first row with t > pos */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g->rows[mid].t_us <= p.pos_us)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0) {
        p.row = g->nrows - 1;
        p.row_loop = p.loop - 1;
    } else {
        p.row = lo - 1;
        p.row_loop = p.loop;
    }
    return p;
}

static uint64_t cum_at(const fake_row *r, int which) {
    return which == CTR_ENERGY_MJ ? r->energy_mj : which == CTR_RX_BYTES ? r->rx_bytes : r->tx_bytes;
}

uint64_t fake_counter(const fake_timeline *tl, const fake_gpu *g, int64_t wall_us, int which) {
    fake_pos p = fake_locate(tl, g, wall_us);
    uint64_t total = which == CTR_ENERGY_MJ ? g->loop_energy_mj
                     : which == CTR_RX_BYTES ? g->loop_rx_bytes : g->loop_tx_bytes;
    int64_t ref = floordiv(tl->counter_epoch_us, tl->duration_us);
    uint64_t passes = p.loop > ref ? (uint64_t)(p.loop - ref) : 0;
    uint64_t a, b;          /* counter values at the ends of the current segment */
    int64_t ta, tb;         /* the segment's ends */
    size_t last = g->nrows - 1;
    if (p.row_loop != p.loop) { /* before the first row of this pass */
        a = 0, b = cum_at(&g->rows[0], which);
        ta = 0, tb = g->rows[0].t_us;
    } else if (p.row < last) {
        a = cum_at(&g->rows[p.row], which), b = cum_at(&g->rows[p.row + 1], which);
        ta = g->rows[p.row].t_us, tb = g->rows[p.row + 1].t_us;
    } else {
        a = cum_at(&g->rows[last], which), b = total;
        ta = g->rows[last].t_us, tb = tl->duration_us;
    }
    uint64_t within = a;
    if (tb > ta && b > a)
        within += (uint64_t)((unsigned __int128)(b - a) * (uint64_t)(p.pos_us - ta) / (uint64_t)(tb - ta));
    return passes * total + within;
}
