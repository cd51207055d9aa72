/*
 * Copyright: (c) 2026, gpufleet.resilience contributors
 * Apache License 2.0 (see LICENSE)
 *
 * A fake libnvidia-ml.so.1 for the lab: the subset of NVML that the health agent reads through
 * pynvml, and the identity calls other consumers (go-nvml) enumerate GPUs with, answered from the
 * state files of one simulated node (GPUFLEET_FAKE_NVML_DIR). The state format belongs to
 * plugins/module_utils/lab/fake_gpu_state.py; README.md describes both. Every other function of
 * nvml.h is a generated NOT_SUPPORTED stub (gen_stubs.py -> fake_nvml_stubs.c, at build time).
 *
 * State is re-read whenever a file's inode or mtime changes (writers rename a new file into
 * place), so faults injected at run time show up on the next call without re-initialising.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* the names we define are exactly the exported symbols */
#include <nvml.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define FAKE_NVML_MAX_GPUS 32 /* MAX_GPUS in fake_gpu_state.py */

/* The layouts pynvml's ctypes structures assume (x86_64 / aarch64 LP64). */
_Static_assert(sizeof(void *) == 8, "LP64 only");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");
_Static_assert(offsetof(nvmlEventData_t, eventType) == 8, "nvmlEventData_t.eventType");
_Static_assert(offsetof(nvmlEventData_t, eventData) == 16, "nvmlEventData_t.eventData");
_Static_assert(offsetof(nvmlEventData_t, gpuInstanceId) == 24, "nvmlEventData_t.gpuInstanceId");
_Static_assert(offsetof(nvmlEventData_t, computeInstanceId) == 28, "nvmlEventData_t.computeInstanceId");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
_Static_assert(offsetof(nvmlPciInfo_t, domain) == 16, "nvmlPciInfo_t.domain");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t.busId");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(offsetof(nvmlMemory_v2_t, total) == 8, "nvmlMemory_v2_t.total");
_Static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t");
_Static_assert(sizeof(nvmlTemperature_v1_t) == 12, "nvmlTemperature_v1_t");
_Static_assert(sizeof(nvmlEnableState_t) == 4, "nvmlEnableState_t");
_Static_assert(nvmlEventTypeXidCriticalError == 0x8, "XID event mask");

struct nvmlDevice_st {
    unsigned int index;
};

struct nvmlEventSet_st {
    unsigned long long types[FAKE_NVML_MAX_GPUS]; /* registered event types per device */
    char events_dir[PATH_MAX + 8];
    int inotify_fd; /* watches events_dir; -1 when inotify is unavailable */
};

struct gpu_state {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    char pci_bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned long long pci_device_id, memory_total, memory_used;
    unsigned long long nvlink_supported, nvlink_links, nvlink_down, nvlink_errors[5];
    unsigned long long retired_pages_supported, retired_pages_pending;
    unsigned long long temperature, power_mw, utilization_gpu, utilization_memory;
    unsigned long long ecc[2][2]; /* [nvmlMemoryErrorType_t][nvmlEccCounterType_t] */
    unsigned long long remapped_rows[4]; /* corrected, uncorrected, pending, failure */
    unsigned long long throttle_reasons, lost;
};

struct node_state {
    unsigned long long count, cuda_driver_version;
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    char nvml_version[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
};

/* A parsed file and the identity of the version it was parsed from. */
struct cached_file {
    int valid;
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
    off_t size;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static char state_dir[PATH_MAX];
static struct nvmlDevice_st devices[FAKE_NVML_MAX_GPUS];
static struct node_state node;
static struct cached_file node_file;
static struct gpu_state gpus[FAKE_NVML_MAX_GPUS];
static struct cached_file gpu_files[FAKE_NVML_MAX_GPUS];

/* ------------------------------------------------------------------ state files */

#define NUM(field) {#field, offsetof(struct gpu_state, field), 0}
#define STR(field) {#field, offsetof(struct gpu_state, field), sizeof(((struct gpu_state *)0)->field)}
static const struct key {
    const char *name;
    size_t offset;
    size_t string_size; /* 0: unsigned long long */
} gpu_keys[] = {
    STR(uuid), STR(serial), STR(pci_bus_id), STR(name),
    NUM(pci_device_id), NUM(memory_total), NUM(memory_used),
    NUM(nvlink_supported), NUM(nvlink_links), NUM(nvlink_down),
    {"nvlink_replay_errors", offsetof(struct gpu_state, nvlink_errors[NVML_NVLINK_ERROR_DL_REPLAY]), 0},
    {"nvlink_recovery_errors", offsetof(struct gpu_state, nvlink_errors[NVML_NVLINK_ERROR_DL_RECOVERY]), 0},
    {"nvlink_crc_flit_errors", offsetof(struct gpu_state, nvlink_errors[NVML_NVLINK_ERROR_DL_CRC_FLIT]), 0},
    {"nvlink_crc_data_errors", offsetof(struct gpu_state, nvlink_errors[NVML_NVLINK_ERROR_DL_CRC_DATA]), 0},
    {"nvlink_ecc_data_errors", offsetof(struct gpu_state, nvlink_errors[NVML_NVLINK_ERROR_DL_ECC_DATA]), 0},
    NUM(retired_pages_supported), NUM(retired_pages_pending),
    NUM(temperature), NUM(power_mw), NUM(utilization_gpu), NUM(utilization_memory),
    {"ecc_sbe_volatile", offsetof(struct gpu_state, ecc[NVML_MEMORY_ERROR_TYPE_CORRECTED][NVML_VOLATILE_ECC]), 0},
    {"ecc_dbe_volatile", offsetof(struct gpu_state, ecc[NVML_MEMORY_ERROR_TYPE_UNCORRECTED][NVML_VOLATILE_ECC]), 0},
    {"ecc_sbe_aggregate", offsetof(struct gpu_state, ecc[NVML_MEMORY_ERROR_TYPE_CORRECTED][NVML_AGGREGATE_ECC]), 0},
    {"ecc_dbe_aggregate", offsetof(struct gpu_state, ecc[NVML_MEMORY_ERROR_TYPE_UNCORRECTED][NVML_AGGREGATE_ECC]), 0},
    {"remapped_rows_corrected", offsetof(struct gpu_state, remapped_rows[0]), 0},
    {"remapped_rows_uncorrected", offsetof(struct gpu_state, remapped_rows[1]), 0},
    {"remapped_rows_pending", offsetof(struct gpu_state, remapped_rows[2]), 0},
    {"remapped_rows_failure", offsetof(struct gpu_state, remapped_rows[3]), 0},
    NUM(throttle_reasons), NUM(lost),
};
#undef NUM
#undef STR

#define NODE_NUM(field) {#field, offsetof(struct node_state, field), 0}
#define NODE_STR(field) {#field, offsetof(struct node_state, field), sizeof(((struct node_state *)0)->field)}
static const struct key node_keys[] = {
    NODE_NUM(count), NODE_NUM(cuda_driver_version), NODE_STR(driver_version), NODE_STR(nvml_version),
};
#undef NODE_NUM
#undef NODE_STR

/* Parse "key=value" lines into out; keys we do not know are skipped (newer writers). */
static int parse_file(const char *path, const struct key *keys, size_t nkeys, void *out)
{
    char buf[8192];
    FILE *fp = fopen(path, "re");
    if (!fp)
        return -1;
    while (fgets(buf, sizeof buf, fp)) {
        char *eq = strchr(buf, '=');
        if (!eq)
            continue;
        *eq = '\0';
        char *value = eq + 1;
        value[strcspn(value, "\r\n")] = '\0';
        for (size_t i = 0; i < nkeys; i++) {
            if (strcmp(buf, keys[i].name) != 0)
                continue;
            char *field = (char *)out + keys[i].offset;
            if (keys[i].string_size)
                snprintf(field, keys[i].string_size, "%s", value);
            else
                *(unsigned long long *)field = strtoull(value, NULL, 0);
            break;
        }
    }
    fclose(fp);
    return 0;
}

/*
 * Re-parse path into out when the file was replaced or touched since the last parse. Writers
 * rename complete files into place, so a parse never sees half a file; if a rename lands between
 * stat() and fopen(), we parse the newer file under the older identity and simply parse it again
 * on the next call.
 */
static int refresh(const char *path, struct cached_file *cache, const struct key *keys, size_t nkeys,
                   void *out, size_t out_size)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        cache->valid = 0;
        return -1;
    }
    if (cache->valid && cache->dev == st.st_dev && cache->ino == st.st_ino && cache->size == st.st_size &&
        cache->mtime.tv_sec == st.st_mtim.tv_sec && cache->mtime.tv_nsec == st.st_mtim.tv_nsec)
        return 0;
    memset(out, 0, out_size);
    if (parse_file(path, keys, nkeys, out) != 0) {
        cache->valid = 0;
        return -1;
    }
    *cache = (struct cached_file){1, st.st_dev, st.st_ino, st.st_mtim, st.st_size};
    return 0;
}

static int refresh_node(void)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/node.state", state_dir);
    if (refresh(path, &node_file, node_keys, sizeof node_keys / sizeof *node_keys, &node, sizeof node) != 0)
        return -1;
    if (node.count > FAKE_NVML_MAX_GPUS)
        node.count = FAKE_NVML_MAX_GPUS;
    return 0;
}

static int refresh_gpu(unsigned int index)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/gpu%u.state", state_dir, index);
    return refresh(path, &gpu_files[index], gpu_keys, sizeof gpu_keys / sizeof *gpu_keys, &gpus[index],
                   sizeof gpus[index]);
}

/*
 * The common prologue of every per-device call: copy the device's current state into *out.
 * A lost GPU answers NVML_ERROR_GPU_IS_LOST, as the driver does once it has fallen off the bus.
 */
static nvmlReturn_t load_gpu(unsigned int index, struct gpu_state *out)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else if (refresh_node() != 0)
        ret = NVML_ERROR_UNKNOWN;
    else if (index >= node.count)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (refresh_gpu(index) != 0)
        ret = NVML_ERROR_UNKNOWN;
    else if (gpus[index].lost)
        ret = NVML_ERROR_GPU_IS_LOST;
    else
        *out = gpus[index];
    pthread_mutex_unlock(&lock);
    return ret;
}

static nvmlReturn_t load_device(nvmlDevice_t device, struct gpu_state *out)
{
    if (device < devices || device >= devices + FAKE_NVML_MAX_GPUS)
        return NVML_ERROR_INVALID_ARGUMENT;
    return load_gpu(device->index, out);
}

#define LOAD_OR_RETURN(device, g)                    \
    struct gpu_state g;                              \
    do {                                             \
        nvmlReturn_t ret_ = load_device(device, &g); \
        if (ret_ != NVML_SUCCESS)                    \
            return ret_;                             \
    } while (0)

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ init, system */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    const char *dir = getenv("GPUFLEET_FAKE_NVML_DIR");
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (!dir || !*dir || strlen(dir) >= sizeof state_dir) {
        ret = NVML_ERROR_DRIVER_NOT_LOADED; /* no simulated node here: like a host without the driver */
    } else {
        snprintf(state_dir, sizeof state_dir, "%s", dir);
        node_file.valid = 0;
        for (unsigned int i = 0; i < FAKE_NVML_MAX_GPUS; i++) {
            devices[i].index = i;
            gpu_files[i].valid = 0;
        }
        if (refresh_node() != 0)
            ret = NVML_ERROR_DRIVER_NOT_LOADED;
        else
            init_count++;
    }
    pthread_mutex_unlock(&lock);
    return ret;
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else
        init_count--;
    pthread_mutex_unlock(&lock);
    return ret;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* System-level calls: read node.state under the lock and copy one field out. */
static nvmlReturn_t load_node(struct node_state *out)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else if (refresh_node() != 0)
        ret = NVML_ERROR_UNKNOWN;
    else
        *out = node;
    pthread_mutex_unlock(&lock);
    return ret;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    struct node_state n;
    nvmlReturn_t ret = load_node(&n);
    return ret != NVML_SUCCESS ? ret : copy_string(version, length, n.driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    struct node_state n;
    nvmlReturn_t ret = load_node(&n);
    return ret != NVML_SUCCESS ? ret : copy_string(version, length, n.nvml_version);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    struct node_state n;
    nvmlReturn_t ret = load_node(&n);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = (int)n.cuda_driver_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ------------------------------------------------------------------ device handles */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    struct node_state n;
    nvmlReturn_t ret = load_node(&n);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned int)n.count;
    return NVML_SUCCESS;
}

/* Like the driver, a lost GPU yields no handle (nvidia-smi: "Unable to determine the device handle"). */
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    struct gpu_state g;
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t ret = load_gpu(index, &g);
    if (ret == NVML_SUCCESS)
        *device = &devices[index];
    return ret;
}

/* Look a GPU up by a field of its state; lost GPUs still match so the caller learns they are lost. */
static nvmlReturn_t find_device(int (*matches)(const struct gpu_state *, const void *), const void *key,
                                nvmlDevice_t *device)
{
    struct node_state n;
    nvmlReturn_t ret = load_node(&n);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!key || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < n.count; i++) {
        int found = 0;
        pthread_mutex_lock(&lock);
        if (refresh_gpu(i) == 0)
            found = matches(&gpus[i], key);
        pthread_mutex_unlock(&lock);
        if (found) {
            struct gpu_state g;
            ret = load_gpu(i, &g);
            if (ret == NVML_SUCCESS)
                *device = &devices[i];
            return ret;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static int uuid_matches(const struct gpu_state *g, const void *uuid)
{
    return strcmp(g->uuid, (const char *)uuid) == 0;
}

/* Bus ids compare by value: "0000:18:00.0", "00000000:18:00.0" and "18:00.0" name the same GPU. */
static int parse_bus_id(const char *text, unsigned int out[4])
{
    if (sscanf(text, "%x:%x:%x.%x", &out[0], &out[1], &out[2], &out[3]) == 4)
        return 0;
    out[0] = 0;
    return sscanf(text, "%x:%x.%x", &out[1], &out[2], &out[3]) == 3 ? 0 : -1;
}

static int bus_id_matches(const struct gpu_state *g, const void *wanted)
{
    unsigned int have[4];
    return parse_bus_id(g->pci_bus_id, have) == 0 && memcmp(have, wanted, sizeof have) == 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    return find_device(uuid_matches, uuid, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    unsigned int wanted[4];
    if (!pciBusId || parse_bus_id(pciBusId, wanted) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return find_device(bus_id_matches, wanted, device);
}

/*
 * The unversioned v1 entry points that NVML_NO_UNVERSIONED_FUNC_DEFS declares with the same
 * signature as their successors: older consumers call these, and they behave the same here.
 */
EXPORT nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ------------------------------------------------------------------ identity */

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    LOAD_OR_RETURN(device, g);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    LOAD_OR_RETURN(device, g);
    return copy_string(uuid, length, g.uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    LOAD_OR_RETURN(device, g);
    return copy_string(name, length, g.name);
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    LOAD_OR_RETURN(device, g);
    return copy_string(serial, length, g.serial);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    LOAD_OR_RETURN(device, g);
    unsigned int bus[4];
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (parse_bus_id(g.pci_bus_id, bus) != 0)
        return NVML_ERROR_UNKNOWN;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, bus[0], bus[1], bus[2]);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, bus[0], bus[1], bus[2]);
    pci->domain = bus[0];
    pci->bus = bus[1];
    pci->device = bus[2];
    pci->pciDeviceId = (unsigned int)g.pci_device_id;
    return NVML_SUCCESS;
}

/*
 * What a consumer asks first when it enumerates GPUs (go-nvml, go-nvlib, the device plugin): these
 * follow from the GPU's NVML name. The part numbers have the form of real ones but are made up.
 */
static const struct model {
    const char *match; /* substring of the NVML name; the first match wins */
    unsigned int arch, cc_major, cc_minor;
    const char *part_number;
} models[] = {
    {"GB200", NVML_DEVICE_ARCH_BLACKWELL, 10, 0, "699-2G548-0200-000"},
    {"B200", NVML_DEVICE_ARCH_BLACKWELL, 10, 0, "699-2G525-0200-000"},
    {"H200", NVML_DEVICE_ARCH_HOPPER, 9, 0, "699-2G530-0200-000"},
    {"H100", NVML_DEVICE_ARCH_HOPPER, 9, 0, "699-2G520-0200-000"},
    {"H800", NVML_DEVICE_ARCH_HOPPER, 9, 0, "699-2G520-0280-000"},
    {"L40", NVML_DEVICE_ARCH_ADA, 8, 9, "699-2G133-0200-000"},
    {"L4", NVML_DEVICE_ARCH_ADA, 8, 9, "699-2G193-0200-000"},
    {"A100", NVML_DEVICE_ARCH_AMPERE, 8, 0, "699-2G506-0200-000"},
    {"A30", NVML_DEVICE_ARCH_AMPERE, 8, 0, "699-2G188-0200-000"},
    {"A10", NVML_DEVICE_ARCH_AMPERE, 8, 6, "699-2G133-0220-000"},
    {"A40", NVML_DEVICE_ARCH_AMPERE, 8, 6, "699-2G133-0210-000"},
    {"V100", NVML_DEVICE_ARCH_VOLTA, 7, 0, "699-2G503-0200-000"},
    {"T4", NVML_DEVICE_ARCH_TURING, 7, 5, "699-2G183-0200-000"},
};
/* Any other name: the lab's default product is an H100, so an unknown one reads as Hopper. */
static const struct model default_model = {"", NVML_DEVICE_ARCH_HOPPER, 9, 0, "699-2G520-0200-000"};

static const struct model *model_of(const struct gpu_state *g)
{
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        if (strstr(g->name, models[i].match))
            return &models[i];
    return &default_model;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    LOAD_OR_RETURN(device, g);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)model_of(&g)->cc_major;
    *minor = (int)model_of(&g)->cc_minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    LOAD_OR_RETURN(device, g);
    if (!arch)
        return NVML_ERROR_INVALID_ARGUMENT;
    *arch = model_of(&g)->arch;
    return NVML_SUCCESS;
}

/* Data-centre GPUs since Ampere say "NVIDIA" (nvidia-smi: Product Brand). */
EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    LOAD_OR_RETURN(device, g);
    if (!type)
        return NVML_ERROR_INVALID_ARGUMENT;
    *type = NVML_BRAND_NVIDIA;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    LOAD_OR_RETURN(device, g);
    return copy_string(partNumber, length, model_of(&g)->part_number);
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    LOAD_OR_RETURN(device, g);
    return copy_string(version, length, "96.00.99.00.01");
}

/* /dev/nvidia<minor>: the lab numbers device nodes like the GPUs. */
EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    LOAD_OR_RETURN(device, g);
    if (!minorNumber)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = device->index;
    return NVML_SUCCESS;
}

/* Every handle we give out is a whole GPU; MIG itself (nvmlDeviceGetMigMode...) is NOT_SUPPORTED. */
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    LOAD_OR_RETURN(device, g);
    if (!isMigDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ health */

/* nvml.h marks nvmlDeviceGetTemperature deprecated; both entry points share this body. */
static nvmlReturn_t get_temperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
    LOAD_OR_RETURN(device, g);
    if (!temp || (sensorType != NVML_TEMPERATURE_GPU && sensorType != NVML_TEMPERATURE_GPU_MAX))
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned int)g.temperature;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                             unsigned int *temp)
{
    return get_temperature(device, sensorType, temp);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    if (!temperature)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned int value;
    nvmlReturn_t ret = get_temperature(device, temperature->sensorType, &value);
    if (ret == NVML_SUCCESS)
        temperature->temperature = (int)value;
    return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    LOAD_OR_RETURN(device, g);
    if (!power)
        return NVML_ERROR_INVALID_ARGUMENT;
    *power = (unsigned int)g.power_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    LOAD_OR_RETURN(device, g);
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = (unsigned int)g.utilization_gpu;
    utilization->memory = (unsigned int)g.utilization_memory;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    LOAD_OR_RETURN(device, g);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = g.memory_total;
    memory->used = g.memory_used < g.memory_total ? g.memory_used : g.memory_total;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlMemory_t v1;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t ret = nvmlDeviceGetMemoryInfo(device, &v1);
    if (ret == NVML_SUCCESS) {
        memory->total = v1.total;
        memory->reserved = 0;
        memory->free = v1.free;
        memory->used = v1.used;
    }
    return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    LOAD_OR_RETURN(device, g);
    if (!eccCounts || (unsigned int)errorType > NVML_MEMORY_ERROR_TYPE_UNCORRECTED ||
        (unsigned int)counterType > NVML_AGGREGATE_ECC)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eccCounts = g.ecc[errorType][counterType];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    LOAD_OR_RETURN(device, g);
    if (!isPending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g.retired_pages_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *isPending = g.retired_pages_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                              unsigned int *isPending, unsigned int *failureOccurred)
{
    LOAD_OR_RETURN(device, g);
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    *corrRows = (unsigned int)g.remapped_rows[0];
    *uncRows = (unsigned int)g.remapped_rows[1];
    *isPending = g.remapped_rows[2] ? 1 : 0;
    *failureOccurred = g.remapped_rows[3] ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    LOAD_OR_RETURN(device, g);
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = g.throttle_reasons;
    return NVML_SUCCESS;
}

/* The pre-12.2 name of the same bitmask; pynvml still offers both. */
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

static nvmlReturn_t check_link(const struct gpu_state *g, unsigned int link)
{
    if (!g->nvlink_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    return link < g->nvlink_links ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    LOAD_OR_RETURN(device, g);
    nvmlReturn_t ret = check_link(&g, link);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!isActive)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = (g.nvlink_down >> link) & 1 ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                    nvmlNvLinkErrorCounter_t counter, unsigned long long *counterValue)
{
    LOAD_OR_RETURN(device, g);
    nvmlReturn_t ret = check_link(&g, link);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!counterValue || (unsigned int)counter > NVML_NVLINK_ERROR_DL_ECC_DATA)
        return NVML_ERROR_INVALID_ARGUMENT;
    *counterValue = link == 0 ? g.nvlink_errors[counter] : 0; /* the state keeps one set, on link 0 */
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ events */

#define SUPPORTED_EVENT_TYPES nvmlEventTypeXidCriticalError /* the only type we can deliver */

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    LOAD_OR_RETURN(device, g);
    if (!eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = SUPPORTED_EVENT_TYPES;
    return NVML_SUCCESS;
}

/*
 * The inotify watch lives as long as the set: closing an inotify fd waits for an SRCU grace period,
 * which cost 4-20 ms per call on the lab VM when it was closed after every wait.
 */
EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlEventSet_t created = calloc(1, sizeof *created);
    if (!created)
        return NVML_ERROR_MEMORY;
    pthread_mutex_lock(&lock);
    int initialized = init_count > 0;
    snprintf(created->events_dir, sizeof created->events_dir, "%s/events", state_dir);
    pthread_mutex_unlock(&lock);
    if (!initialized) {
        free(created);
        return NVML_ERROR_UNINITIALIZED;
    }
    created->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (created->inotify_fd >= 0 &&
        inotify_add_watch(created->inotify_fd, created->events_dir, IN_CREATE | IN_MOVED_TO) < 0) {
        close(created->inotify_fd);
        created->inotify_fd = -1;
    }
    *set = created;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    LOAD_OR_RETURN(device, g);
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(unsigned long long)SUPPORTED_EVENT_TYPES)
        return NVML_ERROR_NOT_SUPPORTED;
    set->types[device->index] |= eventTypes;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (set->inotify_fd >= 0)
        close(set->inotify_fd);
    free(set);
    return NVML_SUCCESS;
}

/*
 * Claim the oldest pending event for a device registered in set. An event is a file
 * events/<20-digit time_ns>-<8 hex>-gpu<N>-xid<X>.event; rename() to a private name is the claim,
 * so when several waiters (threads or processes) race for one event exactly one of them wins.
 * Returns 1 and fills *data when it claimed one, 0 when none is pending for this set.
 */
static int claim_event(const char *events_dir, nvmlEventSet_t set, nvmlEventData_t *data)
{
    for (;;) {
        char best[NAME_MAX + 1] = "";
        unsigned int best_gpu = 0;
        unsigned long long best_xid = 0;
        unsigned int count = FAKE_NVML_MAX_GPUS;
        struct node_state n;
        if (load_node(&n) == NVML_SUCCESS)
            count = (unsigned int)n.count;
        DIR *dir = opendir(events_dir);
        if (!dir)
            return 0;
        struct dirent *entry;
        while ((entry = readdir(dir)) != NULL) {
            unsigned int gpu;
            unsigned long long xid;
            int end = 0;
            if (sscanf(entry->d_name, "%*20[0-9]-%*8[0-9a-f]-gpu%u-xid%llu.event%n", &gpu, &xid, &end) != 2 ||
                entry->d_name[end] != '\0' || end == 0)
                continue;
            if (gpu >= count || !(set->types[gpu] & nvmlEventTypeXidCriticalError))
                continue;
            if (best[0] == '\0' || strcmp(entry->d_name, best) < 0) {
                snprintf(best, sizeof best, "%s", entry->d_name);
                best_gpu = gpu;
                best_xid = xid;
            }
        }
        closedir(dir);
        if (best[0] == '\0')
            return 0;
        char from[PATH_MAX + NAME_MAX + 2], to[PATH_MAX + NAME_MAX + 64];
        snprintf(from, sizeof from, "%s/%s", events_dir, best);
        snprintf(to, sizeof to, "%s/.claimed-%ld-%ld-%s", events_dir, (long)getpid(), (long)gettid(), best);
        if (rename(from, to) != 0)
            continue; /* another waiter got it first: look again */
        unlink(to);
        memset(data, 0, sizeof *data);
        data->device = &devices[best_gpu];
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = best_xid;
        data->gpuInstanceId = 0xFFFFFFFFu; /* no MIG */
        data->computeInstanceId = 0xFFFFFFFFu;
        return 1;
    }
}

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * Wait for a pending event: inotify on events/ says when to rescan the directory, so an idle
 * waiter costs nothing. The directory is also rescanned every second in case the inotify queue
 * overflowed or events/ was replaced (rare: a tighter rescan only burns the agent's CPU, which is
 * what bench/agent.py p5 measures), and every 2 ms when inotify is unavailable (fd limits).
 */
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    int initialized = init_count > 0;
    pthread_mutex_unlock(&lock);
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;

    long long deadline = now_us() + 1000LL * timeoutms;
    for (;;) {
        /* The watch predates this scan, so an event created after it wakes the poll below. */
        if (claim_event(set->events_dir, set, data))
            return NVML_SUCCESS;
        long long left_us = deadline - now_us();
        if (left_us <= 0)
            return NVML_ERROR_TIMEOUT;
        if (set->inotify_fd >= 0) {
            long long nap_ms = (left_us < 1000000 ? left_us + 999 : 1000000) / 1000;
            struct pollfd pfd = {set->inotify_fd, POLLIN, 0};
            char buf[4096];
            if (poll(&pfd, 1, (int)nap_ms) > 0)
                while (read(set->inotify_fd, buf, sizeof buf) > 0)
                    ; /* drain: the scan looks at the whole directory anyway */
        } else {
            struct timespec pause = {0, (left_us < 2000 ? left_us : 2000) * 1000};
            nanosleep(&pause, NULL);
        }
    }
}

EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}
