/* Fake NVML library (a test fixture): shared types and the timeline interface.
 *
 * The layouts below match NVIDIA's nvml.h as mirrored by nvidia-ml-py 13.615.71 (pynvml.py);
 * fakenvml.c checks each size with _Static_assert.
 */
#ifndef FAKENVML_H
#define FAKENVML_H

#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define FAKE_MAX_GPUS 64
#define FAKE_MAX_FILE_PIDS 64 /* PIDs per GPU in FAKE_NVML_PIDS_FILE */

/* What a metric-group name in FAKE_NVML_UNSUPPORTED switches off (bit per group). */
enum {
    U_POWER = 1u << 0,        /* GetPowerUsage, power fields */
    U_TEMP = 1u << 1,         /* GetTemperature(V) */
    U_SAMPLES = 1u << 2,      /* GetSamples */
    U_UTIL = 1u << 3,         /* GetUtilizationRates (and GetSamples) */
    U_PCIE = 1u << 4,         /* GetPcieThroughput, PCIe byte counters */
    U_ENERGY = 1u << 5,       /* GetTotalEnergyConsumption, energy field */
    U_CLOCKS_EVENT = 1u << 6, /* Current/Supported ClocksEvent/Throttle reasons */
    U_PROCESSES = 1u << 7,    /* running-process lists */
    U_CLOCKS = 1u << 8,       /* GetClockInfo, GetClock, GetMaxClockInfo */
    U_MEMORY = 1u << 9,       /* GetMemoryInfo(_v2) */
    U_FAN = 1u << 10,         /* GetFanSpeed(_v2), GetNumFans */
    U_POWER_LIMIT = 1u << 11, /* power limits and constraints */
    U_PROC_UTIL = 1u << 12,   /* GetProcessUtilization, GetProcessesUtilizationInfo */
    U_FIELDS = 1u << 13,      /* GetFieldValues as a whole */
    U_PSTATE = 1u << 14,      /* GetPerformanceState, GetPowerState */
    U_ENCDEC = 1u << 15,      /* GetEncoderUtilization, GetDecoderUtilization */
    U_GPM = 1u << 16,         /* GPM: support query says no, SampleGet NOT_SUPPORTED */
};
#define FAKE_GROUPS 17        /* metric groups (bits) above */

/* One driver sample period of one GPU (a trace `S` row). */
typedef struct {
    int64_t t_us;             /* end of the period, from trace start */
    uint32_t util_gpu, util_mem, power_mw, sm_clock, temp_c, clock_events, mem_used_mib;
    uint32_t rx_kbps, tx_kbps;
    uint32_t inst_power_mw;   /* mean power over this period (from the energy column) */
    uint64_t energy_mj;       /* cumulative from trace start, at t_us */
    uint64_t rx_bytes, tx_bytes; /* cumulative from trace start, at t_us */
    uint32_t pid_off, pid_n;  /* into timeline.pids */
    /* GPM over the period, per mille: SM activity, SM occupancy, tensor activity, DRAM. */
    uint16_t sm_active, sm_occupancy, tensor_active, dram_active;
    uint8_t active;
} fake_row;

typedef struct {
    char name[96], uuid[96], busid[32], serial[32];
    unsigned domain, bus, device;
    uint64_t mem_total_mib;
    uint32_t power_limit_mw, sm_max_mhz, mem_max_mhz;
    fake_row *rows;
    size_t nrows;
    size_t *active;           /* indices of rows with active=1, in time order */
    size_t nactive;
    uint64_t loop_energy_mj, loop_rx_bytes, loop_tx_bytes; /* per pass through the trace */
    /* Overrides from the environment. */
    unsigned unsupported;
    int64_t lost_after_us;    /* <0: never; else microseconds after nvmlInit */
    int pids_override;
    uint32_t *opids;
    uint32_t nopids;
    /* FAKE_NVML_PIDS_FILE: this GPU's list from the file (fpids_set: the file names it). */
    int fpids_set;
    uint32_t nfpids;
    uint32_t fpids[FAKE_MAX_FILE_PIDS];
    int mig;
    int gpm;                  /* GPM supported (Hopper and newer, not in MIG) */
    int64_t gpm_fail_after_us; /* FAKE_NVML_GPM_FAIL: <0 never; else µs after nvmlInit */
} fake_gpu;

typedef struct {
    int64_t period_us, duration_us;
    unsigned ngpus;
    fake_gpu gpus[FAKE_MAX_GPUS];
    uint32_t *pids;           /* pool for the rows' PID lists */
    size_t npids;
    char source[512];         /* trace path, or "square wave" */
    int64_t counter_epoch_us; /* counters (energy, PCIe bytes) count passes since then (boot) */
} fake_timeline;

/* Where a GPU's timeline stands at a moment. */
typedef struct {
    int64_t loop;             /* pass through the trace (wall time / duration) */
    int64_t pos_us;           /* position within the pass */
    size_t row;               /* latest row with t_us <= pos (may be in the previous pass) */
    int64_t row_loop;         /* the pass that row belongs to */
} fake_pos;

/* timeline.c */
int fake_timeline_square(fake_timeline *tl, unsigned ngpus);
int fake_timeline_load(fake_timeline *tl, const char *path, char *err, size_t errlen);
void fake_timeline_free(fake_timeline *tl);
void fake_gpu_identity(fake_gpu *g, unsigned index);
fake_pos fake_locate(const fake_timeline *tl, const fake_gpu *g, int64_t wall_us);
uint64_t fake_counter(const fake_timeline *tl, const fake_gpu *g, int64_t wall_us, int which);
enum { CTR_ENERGY_MJ = 0, CTR_RX_BYTES = 1, CTR_TX_BYTES = 2 };

/* calllog.c: per-function call counts (FAKE_NVML_CALL_LOG) */
void fake_call_log_open(const char *path);
void fake_call_count(const char *name);
void fake_call_count_null(const char *name);
void fake_call_log_write(void);

#endif
