/* The GPU server's batch executor: a `launches` message run by C calling
 * the CUDA driver, with no Python per record.
 *
 * A batch (rcuda/wire.py's LAUNCH_RECORD records, each followed by its
 * parameters or fields, padded to 8 bytes) is what the client's C fast
 * path recorded: kernel launches, memsets, copies within the GPU, small
 * uploads, graph launches.  On a GPU server each launch through Python
 * costs microseconds (ctypes, the interpreter); here it costs the driver's
 * call.  Python (server/backends/cuda_batches.py) stays the reference:
 * it teaches this table the session's kernels, streams and allocations,
 * and any record C does not run the ordinary way (a kind Python owns, a
 * launch that breaks a device limit, an unknown kernel or stream, memory
 * outside the session's allocations, a malformed record) is handed back
 * to Python at its offset, which runs it or explains the refusal with the
 * same message as for a `launch` or `memset` message.  A driver error is
 * handed back too, after the record, and Python decides whether the rest
 * of the batch runs (CUDA's sticky errors stop it).
 *
 * The driver is opened by name (libcuda.so.1 on a GPU server, a stand-in
 * in tests: tests/stand_in_driver.c) and only these entry points are used:
 * cuCtxGetCurrent, cuCtxSetCurrent, cuLaunchKernel, cuMemsetD8Async,
 * cuMemcpyDtoDAsync_v2, cuMemcpyHtoDAsync_v2, cuEventRecord and
 * cuStreamWaitEvent; serving small synchronous requests
 * (native/served_requests.c) adds cuMemcpyDtoHAsync_v2, cuEventCreate,
 * cuEventQuery, cuEventSynchronize, cuStreamCreate, cuMemHostAlloc, their
 * destroyers and cuMemGetInfo_v2.
 * A launch passes its parameters as cuLaunchKernel's kernelParams, one
 * pointer per parameter into the client's buffer, never as a packed
 * `extra` buffer: a packed buffer must already be in the device-side
 * layout of the image the driver loaded, and that layout differs between
 * images of one kernel (a 128-byte-aligned CUtensorMap parameter sits at
 * offset 32 in an sm_80 cubin, 112 in an sm_90 one, where the parameter
 * constant bank starts elsewhere; a JIT-compiled PTX decides its own), so
 * the client's layout (rcuda/fatbin.py, from the first cubin) holds only
 * for the values, and the driver places each where its image wants it.
 * One executor per GPU, used by that GPU's thread only (but a waiter
 * thread's cuEventSynchronize on a pending slot): no locks.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h" /* generated from rcuda/wire.py */
#include "batch_records.h"

typedef struct { uint32_t x, y, z; } dim3;
#include "launch_rules.h" /* generated from rcuda/launch_rules.py: the device limits a launch must keep */

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef void *CUcontext, *CUfunction, *CUstream, *CUevent;
typedef uint64_t CUdeviceptr;

struct driver {
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
    CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*memcpy_dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*memcpy_htod_async)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*stream_wait_event)(CUstream, CUevent, unsigned);
};

/* ------------------------------------------------------------ tables */

/* Open addressing by a 64-bit key (never 0: a function id of 0 and the
 * legacy stream are stored as key + 1). */
struct slot {
    uint64_t key;
    void *handle;
    uint64_t size;
};

struct table {
    struct slot *slots;
    size_t capacity, count;
};

static size_t slot_index(uint64_t key, size_t capacity)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (capacity - 1);
}

static struct slot *table_find(const struct table *t, uint64_t key)
{
    if (!t->capacity)
        return NULL;
    for (size_t i = slot_index(key, t->capacity);; i = (i + 1) & (t->capacity - 1)) {
        if (t->slots[i].key == key)
            return &t->slots[i];
        if (!t->slots[i].key)
            return NULL;
    }
}

static int table_put(struct table *t, uint64_t key, void *handle, uint64_t size)
{
    if ((t->count + 1) * 2 > t->capacity) {
        size_t capacity = t->capacity ? t->capacity * 2 : 64;
        struct slot *slots = calloc(capacity, sizeof *slots);
        if (!slots)
            return -1;
        for (size_t i = 0; i < t->capacity; i++) {
            if (!t->slots[i].key)
                continue;
            size_t j = slot_index(t->slots[i].key, capacity);
            while (slots[j].key)
                j = (j + 1) & (capacity - 1);
            slots[j] = t->slots[i];
        }
        free(t->slots);
        t->slots = slots;
        t->capacity = capacity;
    }
    struct slot *found = table_find(t, key);
    if (!found) {
        size_t i = slot_index(key, t->capacity);
        while (t->slots[i].key)
            i = (i + 1) & (t->capacity - 1);
        found = &t->slots[i];
        found->key = key;
        t->count++;
    }
    found->handle = handle;
    found->size = size;
    return 0;
}

static void table_remove(struct table *t, uint64_t key)
{
    struct slot *found = table_find(t, key);
    if (!found)
        return;
    /* Backward-shift deletion keeps every probe chain unbroken. */
    size_t i = (size_t)(found - t->slots), mask = t->capacity - 1;
    for (size_t j = (i + 1) & mask; t->slots[j].key; j = (j + 1) & mask) {
        size_t home = slot_index(t->slots[j].key, t->capacity);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    memset(&t->slots[i], 0, sizeof t->slots[i]);
    t->count--;
}

/* The session's allocations on the GPU, sorted by start: a memset or a
 * copy runs in C only inside one of them. */
struct range {
    uint64_t start, end;
};

struct ranges {
    struct range *items;
    size_t count, capacity;
};

static size_t ranges_upper(const struct ranges *r, uint64_t ptr) /* first with start > ptr */
{
    size_t low = 0, high = r->count;
    while (low < high) {
        size_t mid = (low + high) / 2;
        if (r->items[mid].start <= ptr)
            low = mid + 1;
        else
            high = mid;
    }
    return low;
}

static int ranges_hold(const struct ranges *r, uint64_t ptr, uint64_t size)
{
    size_t i = ranges_upper(r, ptr);
    return i > 0 && ptr + size >= ptr && ptr + size <= r->items[i - 1].end;
}

/* ------------------------------------------------------------ the executor */

/* The entry points native/served_requests.c calls beyond these. */
struct served_driver {
    CUresult (*memcpy_dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*event_create)(CUevent *, unsigned);
    CUresult (*event_query)(CUevent);
    CUresult (*event_synchronize)(CUevent);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*mem_host_alloc)(void **, size_t, unsigned);
    CUresult (*event_destroy)(CUevent);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*mem_free_host)(void *);
    CUresult (*mem_get_info)(size_t *, size_t *);
};

struct served_requests;

struct rcuda_executor {
    struct driver cu;
    struct served_driver served_cu;  /* native/served_requests.c */
    struct served_requests *served;  /* made by rcuda_executor_serve_start */
    void *library;
    CUcontext context;
    struct table functions; /* id + 1 -> struct kernel, parameter buffer size */
    struct table streams;   /* id + 1 -> CUstream */
    struct table events;    /* id + 1 -> CUevent */
    struct ranges ranges;
    uint32_t max_threads_dim[3], max_grid_size[3];
    struct launch_device_limits limits;
    /* A launch's parameters, copied here from the batch: a record's start in
     * the batch is aligned to 8 bytes only, its parameters to 4.  The
     * driver copies each parameter out of here (kernelParams, by the size
     * its image gives), and cuda.h asks no alignment of those pointers: a
     * CUtensorMap's copy here may be 16-byte aligned only. */
    _Alignas(16) uint8_t params[32768];
};

/* A kernel of the session: its function and, per parameter, where the
 * parameter's value lies in `params` (the client's layout): the
 * kernelParams of its launches. */
struct kernel {
    CUfunction handle;
    uint32_t count;
    void *params[];
};

typedef struct rcuda_executor rcuda_executor;

static int resolve(void *library, const char *name, void **slot, char *error, size_t error_size)
{
    *slot = dlsym(library, name);
    if (!*slot)
        snprintf(error, error_size, "the driver library has no %s", name);
    return *slot ? 0 : -1;
}

/* An executor for the GPU whose context is current on the calling thread,
 * or NULL with `error` saying why. */
EXPORT rcuda_executor *rcuda_executor_open(const char *driver_library, char *error, size_t error_size)
{
    void *library = dlopen(driver_library, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        snprintf(error, error_size, "cannot open %s: %s", driver_library, dlerror());
        return NULL;
    }
    rcuda_executor *ex = calloc(1, sizeof *ex);
    if (!ex) {
        snprintf(error, error_size, "out of memory");
        dlclose(library);
        return NULL;
    }
    ex->library = library;
    if (resolve(library, "cuCtxGetCurrent", (void **)&ex->cu.ctx_get_current, error, error_size) ||
        resolve(library, "cuCtxSetCurrent", (void **)&ex->cu.ctx_set_current, error, error_size) ||
        resolve(library, "cuLaunchKernel", (void **)&ex->cu.launch_kernel, error, error_size) ||
        resolve(library, "cuMemsetD8Async", (void **)&ex->cu.memset_d8_async, error, error_size) ||
        resolve(library, "cuMemcpyDtoDAsync_v2", (void **)&ex->cu.memcpy_dtod_async, error, error_size) ||
        resolve(library, "cuMemcpyHtoDAsync_v2", (void **)&ex->cu.memcpy_htod_async, error, error_size) ||
        resolve(library, "cuEventRecord", (void **)&ex->cu.event_record, error, error_size) ||
        resolve(library, "cuStreamWaitEvent", (void **)&ex->cu.stream_wait_event, error, error_size) ||
        resolve(library, "cuMemcpyDtoHAsync_v2", (void **)&ex->served_cu.memcpy_dtoh_async, error, error_size) ||
        resolve(library, "cuEventCreate", (void **)&ex->served_cu.event_create, error, error_size) ||
        resolve(library, "cuEventQuery", (void **)&ex->served_cu.event_query, error, error_size) ||
        resolve(library, "cuEventSynchronize", (void **)&ex->served_cu.event_synchronize, error, error_size) ||
        resolve(library, "cuStreamCreate", (void **)&ex->served_cu.stream_create, error, error_size) ||
        resolve(library, "cuMemHostAlloc", (void **)&ex->served_cu.mem_host_alloc, error, error_size) ||
        resolve(library, "cuEventDestroy_v2", (void **)&ex->served_cu.event_destroy, error, error_size) ||
        resolve(library, "cuStreamDestroy_v2", (void **)&ex->served_cu.stream_destroy, error, error_size) ||
        resolve(library, "cuMemFreeHost", (void **)&ex->served_cu.mem_free_host, error, error_size) ||
        resolve(library, "cuMemGetInfo_v2", (void **)&ex->served_cu.mem_get_info, error, error_size)) {
        dlclose(library);
        free(ex);
        return NULL;
    }
    CUresult status = ex->cu.ctx_get_current(&ex->context);
    if (status || !ex->context) {
        snprintf(error, error_size, "cuCtxGetCurrent returned %d and %s context", status,
                 ex->context ? "a" : "no");
        dlclose(library);
        free(ex);
        return NULL;
    }
    ex->limits.maxThreadsDim = ex->max_threads_dim;
    ex->limits.maxGridSize = ex->max_grid_size;
    return ex; /* the limits are all 0 until set: every launch goes to Python */
}

EXPORT void rcuda_executor_close(rcuda_executor *ex)
{
    if (!ex)
        return;
    for (size_t i = 0; i < ex->functions.capacity; i++)
        free(ex->functions.slots[i].handle);
    free(ex->functions.slots);
    free(ex->streams.slots);
    free(ex->events.slots);
    free(ex->ranges.items);
    free(ex->served); /* still here only if a slot was Python's at rcuda_executor_serve_stop */
    dlclose(ex->library);
    free(ex);
}

EXPORT void rcuda_executor_set_limits(rcuda_executor *ex, const uint32_t *max_threads_dim,
                                      const uint32_t *max_grid_size, uint64_t max_threads_per_block,
                                      uint64_t shared_mem_per_block_optin)
{
    memcpy(ex->max_threads_dim, max_threads_dim, sizeof ex->max_threads_dim);
    memcpy(ex->max_grid_size, max_grid_size, sizeof ex->max_grid_size);
    ex->limits.maxThreadsPerBlock = max_threads_per_block;
    ex->limits.sharedMemPerBlockOptin = shared_mem_per_block_optin;
}

/* Kernel `id` is `function`, its `count` parameters at `offsets` of a
 * buffer of `buffer_size` bytes (each inside it: Python checked). */
EXPORT int rcuda_executor_set_function(rcuda_executor *ex, uint32_t id, void *function, uint32_t buffer_size,
                                       uint32_t count, const uint32_t *offsets)
{
    if (buffer_size > sizeof ex->params)
        return -1;
    struct kernel *k = malloc(sizeof *k + sizeof(void *) * count);
    if (!k)
        return -1;
    k->handle = function;
    k->count = count;
    for (uint32_t i = 0; i < count; i++)
        k->params[i] = ex->params + offsets[i];
    struct slot *old = table_find(&ex->functions, (uint64_t)id + 1);
    void *replaced = old ? old->handle : NULL;
    if (table_put(&ex->functions, (uint64_t)id + 1, k, buffer_size)) {
        free(k);
        return -1;
    }
    free(replaced);
    return 0;
}

EXPORT int rcuda_executor_set_stream(rcuda_executor *ex, uint64_t id, void *stream)
{
    return table_put(&ex->streams, id + 1, stream, 0);
}

EXPORT void rcuda_executor_forget_stream(rcuda_executor *ex, uint64_t id)
{
    table_remove(&ex->streams, id + 1);
}

EXPORT int rcuda_executor_set_event(rcuda_executor *ex, uint64_t id, void *event)
{
    return table_put(&ex->events, id + 1, event, 0);
}

EXPORT void rcuda_executor_forget_event(rcuda_executor *ex, uint64_t id)
{
    table_remove(&ex->events, id + 1);
}

EXPORT int rcuda_executor_add_range(rcuda_executor *ex, uint64_t start, uint64_t size)
{
    struct ranges *r = &ex->ranges;
    if (r->count == r->capacity) {
        size_t capacity = r->capacity ? r->capacity * 2 : 64;
        struct range *items = realloc(r->items, capacity * sizeof *items);
        if (!items)
            return -1;
        r->items = items;
        r->capacity = capacity;
    }
    size_t i = ranges_upper(r, start);
    memmove(&r->items[i + 1], &r->items[i], (r->count - i) * sizeof *r->items);
    r->items[i] = (struct range){start, start + size};
    r->count++;
    return 0;
}

EXPORT void rcuda_executor_remove_range(rcuda_executor *ex, uint64_t start)
{
    struct ranges *r = &ex->ranges;
    size_t i = ranges_upper(r, start);
    if (i == 0 || r->items[i - 1].start != start)
        return;
    memmove(&r->items[i - 1], &r->items[i], (r->count - i) * sizeof *r->items);
    r->count--;
}

EXPORT void rcuda_executor_clear_ranges(rcuda_executor *ex)
{
    ex->ranges.count = 0;
}

/* How a run ended (rcuda_executor_run's return value). */
enum {
    EXECUTOR_DONE = 0,         /* every record ran */
    EXECUTOR_PYTHON = 1,       /* the record at `offset` is Python's to run or refuse */
    EXECUTOR_DRIVER_ERROR = 2, /* the record before `offset` failed in the driver: `status`, `fn` */
};

struct rcuda_executor_progress {
    uint64_t offset;   /* in: where to start; out: where to go on */
    uint32_t count;    /* in: records left; out: records left from `offset` */
    uint32_t fn;       /* out (driver error): the failed record's function id or kind */
    int32_t status;    /* out (driver error): the CUresult */
    uint64_t uploaded; /* out: bytes the run's uploads sent to the device */
};

#define FOR_PYTHON (-1) /* run_record: the record is Python's to run or refuse */

/* Run one record: the driver's CUresult, or FOR_PYTHON. */
static CUresult run_record(rcuda_executor *ex, const struct launch_record *record, const uint8_t *fields,
                           uint64_t *uploaded)
{
    struct slot *stream = table_find(&ex->streams, record->stream + 1);
    if (!stream)
        return FOR_PYTHON;
    if (record->fn == WIRE_RECORD_MEMSET) {
        struct memset_fields f;
        if (record->param_bytes != sizeof f)
            return FOR_PYTHON;
        memcpy(&f, fields, sizeof f);
        if (!f.size)
            return 0;
        if (!ranges_hold(&ex->ranges, f.ptr, f.size))
            return FOR_PYTHON;
        return ex->cu.memset_d8_async(f.ptr, (unsigned char)f.value, f.size, stream->handle);
    }
    if (record->fn == WIRE_RECORD_DTOD) {
        struct dtod_fields f;
        if (record->param_bytes != sizeof f)
            return FOR_PYTHON;
        memcpy(&f, fields, sizeof f);
        if (!f.size)
            return 0;
        if (!ranges_hold(&ex->ranges, f.src, f.size) || !ranges_hold(&ex->ranges, f.dst, f.size))
            return FOR_PYTHON;
        return ex->cu.memcpy_dtod_async(f.dst, f.src, f.size, stream->handle);
    }
    if (record->fn == WIRE_RECORD_HTOD) {
        /* At most 64 KiB (native/async_fast_path.c): from pageable memory the
         * driver stages it at once and returns, waiting for no stream. */
        uint64_t dst;
        if (record->param_bytes < sizeof dst)
            return FOR_PYTHON;
        memcpy(&dst, fields, sizeof dst);
        size_t size = record->param_bytes - sizeof dst;
        if (!size)
            return 0;
        if (!ranges_hold(&ex->ranges, dst, size))
            return FOR_PYTHON;
        CUresult status = ex->cu.memcpy_htod_async(dst, fields + sizeof dst, size, stream->handle);
        if (!status)
            *uploaded += size;
        return status;
    }
    if (record->fn == WIRE_RECORD_EVENT || record->fn == WIRE_RECORD_WAIT) {
        uint64_t id;
        if (record->param_bytes != sizeof id)
            return FOR_PYTHON;
        memcpy(&id, fields, sizeof id);
        struct slot *event = table_find(&ex->events, id + 1);
        if (!event)
            return FOR_PYTHON;
        if (record->fn == WIRE_RECORD_EVENT)
            return ex->cu.event_record(event->handle, stream->handle);
        return ex->cu.stream_wait_event(stream->handle, event->handle, 0);
    }
    if (record->fn >= WIRE_RECORD_FIRST_OP)
        return FOR_PYTHON; /* graph launches */
    struct slot *function = table_find(&ex->functions, (uint64_t)record->fn + 1);
    if (!function || function->size != record->param_bytes)
        return FOR_PYTHON;
    struct kernel *kernel = function->handle;
    dim3 grid = {record->grid[0], record->grid[1], record->grid[2]};
    dim3 block = {record->block[0], record->block[1], record->block[2]};
    if (launch_device_rule_broken(grid, block, record->shared_mem, &ex->limits))
        return FOR_PYTHON;
    memcpy(ex->params, fields, record->param_bytes); /* set_function kept it within params */
    return ex->cu.launch_kernel(kernel->handle, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                record->shared_mem, stream->handle, kernel->count ? kernel->params : NULL, NULL);
}

/* Run `progress->count` records of `data` from `progress->offset` on, until
 * the end, a record for Python or a driver error. */
EXPORT int rcuda_executor_run(rcuda_executor *ex, const uint8_t *data, size_t size,
                              struct rcuda_executor_progress *progress)
{
    progress->uploaded = 0;
    CUresult status = ex->cu.ctx_set_current(ex->context);
    if (status) {
        progress->fn = 0;
        progress->status = status;
        progress->offset = size; /* no record can run: the batch fails with this error */
        progress->count = 0;
        return EXECUTOR_DRIVER_ERROR;
    }
    while (progress->count) {
        uint64_t offset = progress->offset;
        struct launch_record record;
        if (offset > size || size - offset < sizeof record)
            return EXECUTOR_PYTHON; /* truncated: Python says so */
        memcpy(&record, data + offset, sizeof record);
        uint64_t next = (offset + sizeof record + (uint64_t)record.param_bytes + 7) & ~(uint64_t)7;
        if (next > size)
            return EXECUTOR_PYTHON; /* truncated, padding included */
        status = run_record(ex, &record, data + offset + sizeof record, &progress->uploaded);
        if (status == FOR_PYTHON)
            return EXECUTOR_PYTHON;
        progress->offset = next;
        progress->count--;
        if (status) {
            progress->fn = record.fn;
            progress->status = status;
            return EXECUTOR_DRIVER_ERROR;
        }
    }
    return EXECUTOR_DONE;
}

#include "served_requests.c"
