/* The launch fast path: kernel launches recorded in C, without Python.
 *
 * A <<<>>> launch through the embedded Python client costs tens of
 * microseconds; programs that launch many small kernels need far less.
 * Here a launch of a kernel the client has already seen on this device,
 * into a stream it knows, is checked against cached limits, its arguments
 * are packed into the device's batch buffer, and whoever ships the batches
 * is woken (only when the batch was empty): the device's link
 * (native/link.c) sends the batch as one `launches` message before
 * anything else it sends; a device without a link has Python take it
 * (rcuda_fast_take) and seal it into its outbox the same way.  So a
 * thread's launches and its other calls stay in program order.
 *
 * Everything else (the first launch of a kernel on a device, unknown
 * streams, a configuration to refuse, a device with a sticky error) goes
 * the slow way, to Python, which also fills the tables used here.
 *
 * Included into the cffi module after interposer.c.
 */
#include <errno.h>
#include <stdint.h>

#include "batch_records.h" /* a batch's records, as the server reads them */
#include "launch_rules.h"  /* generated from rcuda/launch_rules.py: the limits record_launch checks */

static int needs_pinned_attach(int device, const char *params, size_t size); /* allocation_table.c */

#define FAST_MAX_DEVICES 64
#define FAST_BATCH_INITIAL (64 << 10)

#define RECORD_HEADER WIRE_LAUNCH_RECORD_SIZE

/* ------------------------------------------------------------ kernels */

struct fast_kernel {
    const void *host_fun;                  /* key; NULL: empty slot */
    uint32_t nparams, buffer_size;
    uint32_t *offsets, *sizes;
    uint32_t fn[FAST_MAX_DEVICES];         /* id on each device; 0: not registered there */
    uint32_t max_threads[FAST_MAX_DEVICES], max_dynamic_shared[FAST_MAX_DEVICES];
};

static pthread_rwlock_t kernels_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct fast_kernel *kernels = NULL;
static size_t kernels_capacity = 0, kernels_count = 0;

static size_t slot_of(const void *key, size_t capacity)
{
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (capacity - 1);
}

static struct fast_kernel *find_kernel(const void *host_fun)
{
    if (!kernels_capacity)
        return NULL;
    for (size_t i = slot_of(host_fun, kernels_capacity);; i = (i + 1) & (kernels_capacity - 1)) {
        if (kernels[i].host_fun == host_fun)
            return &kernels[i];
        if (kernels[i].host_fun == NULL)
            return NULL;
    }
}

static void grow_kernels(void)
{
    size_t capacity = kernels_capacity ? kernels_capacity * 2 : 256;
    struct fast_kernel *table = calloc(capacity, sizeof *table);
    for (size_t i = 0; i < kernels_capacity; i++) {
        if (!kernels[i].host_fun)
            continue;
        size_t j = slot_of(kernels[i].host_fun, capacity);
        while (table[j].host_fun)
            j = (j + 1) & (capacity - 1);
        table[j] = kernels[i];
    }
    free(kernels);
    kernels = table;
    kernels_capacity = capacity;
}

/* The layout of a kernel's parameters (once per kernel). */
static void rcuda_fast_register_kernel(const void *host_fun, uint32_t nparams, const uint32_t *offsets,
                                       const uint32_t *sizes, uint32_t buffer_size)
{
    pthread_rwlock_wrlock(&kernels_lock);
    if (!find_kernel(host_fun)) {
        if ((kernels_count + 1) * 2 > kernels_capacity)
            grow_kernels();
        size_t i = slot_of(host_fun, kernels_capacity);
        while (kernels[i].host_fun)
            i = (i + 1) & (kernels_capacity - 1);
        struct fast_kernel *k = &kernels[i];
        k->nparams = nparams;
        k->buffer_size = buffer_size;
        k->offsets = malloc(sizeof(uint32_t) * (nparams ? nparams : 1));
        k->sizes = malloc(sizeof(uint32_t) * (nparams ? nparams : 1));
        memcpy(k->offsets, offsets, sizeof(uint32_t) * nparams);
        memcpy(k->sizes, sizes, sizeof(uint32_t) * nparams);
        k->host_fun = host_fun;
        kernels_count++;
    }
    pthread_rwlock_unlock(&kernels_lock);
}

/* The kernel's id and limits on one device (once per kernel and device). */
static void rcuda_fast_kernel_on_device(const void *host_fun, int device, uint32_t fn, uint32_t max_threads,
                                        uint32_t max_dynamic_shared)
{
    if (device < 0 || device >= FAST_MAX_DEVICES)
        return;
    pthread_rwlock_wrlock(&kernels_lock);
    struct fast_kernel *k = find_kernel(host_fun);
    if (k) {
        k->max_threads[device] = max_threads;
        k->max_dynamic_shared[device] = max_dynamic_shared;
        k->fn[device] = fn;
    }
    pthread_rwlock_unlock(&kernels_lock);
}

/* ------------------------------------------------------------ devices */

struct fast_device {
    pthread_mutex_t lock;
    int usable;                 /* 0: everything goes through Python (sticky error, lost server, reset) */
    int clean;                  /* 1: C may make synchronous calls (sync_fast_path.c) */
    int link;                   /* the device's link (native/link.c); -1: none, Python ships the batches */
    int wake_fd;                /* wakes whoever ships the batches: the link's service thread, or Python's */
    uint32_t max_block[3], max_grid[3], max_threads, max_shared;
    uint64_t generation;        /* bumped by cudaDeviceReset: per-thread streams of older ones are gone */
    char *batch;
    size_t used, capacity;
    uint32_t count;             /* records in the batch */
};

static struct fast_device devices[FAST_MAX_DEVICES];
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;

static void init_devices(void)
{
    for (int i = 0; i < FAST_MAX_DEVICES; i++) {
        pthread_mutex_init(&devices[i].lock, NULL);
        devices[i].wake_fd = -1;
        devices[i].link = -1;
    }
}

static void rcuda_fast_device(int device, int wake_fd, int link, const uint32_t *max_block, const uint32_t *max_grid,
                              uint32_t max_threads, uint32_t max_shared, uint64_t generation)
{
    pthread_once(&devices_once, init_devices);
    if (device < 0 || device >= FAST_MAX_DEVICES)
        return;
    struct fast_device *d = &devices[device];
    pthread_mutex_lock(&d->lock);
    d->wake_fd = wake_fd;
    __atomic_store_n(&d->link, link, __ATOMIC_RELEASE);
    memcpy(d->max_block, max_block, sizeof d->max_block);
    memcpy(d->max_grid, max_grid, sizeof d->max_grid);
    d->max_threads = max_threads;
    d->max_shared = max_shared;
    d->generation = generation;
    d->usable = 1;
    pthread_mutex_unlock(&d->lock);
}

static void rcuda_fast_set_usable(int device, int usable)
{
    pthread_once(&devices_once, init_devices);
    if (device >= 0 && device < FAST_MAX_DEVICES)
        __atomic_store_n(&devices[device].usable, usable, __ATOMIC_SEQ_CST);
}

/* Take a device's recorded launches out, under d->lock: the batch (malloc'ed,
 * NULL if empty), its launch count in *count; returns its size in bytes. */
static size_t detach_batch(struct fast_device *d, char **data, uint32_t *count)
{
    size_t used = d->used;
    *data = used ? d->batch : NULL;
    *count = d->count;
    if (used) {
        d->batch = NULL;
        d->used = d->capacity = 0;
        d->count = 0;
    }
    return used;
}

/* The recorded launches of a device without a link, taken out for Python
 * to ship (malloc'ed; free with rcuda_fast_free).  Returns the byte count;
 * *count gets the launches.  (A link ships its device's batches itself.) */
static size_t rcuda_fast_take(int device, char **data, uint32_t *count)
{
    *data = NULL;
    *count = 0;
    if (device < 0 || device >= FAST_MAX_DEVICES)
        return 0;
    pthread_once(&devices_once, init_devices);
    struct fast_device *d = &devices[device];
    pthread_mutex_lock(&d->lock);
    size_t used = detach_batch(d, data, count);
    pthread_mutex_unlock(&d->lock);
    return used;
}

static void rcuda_fast_free(char *data)
{
    free(data);
}

/* ------------------------------------------------------------ streams */

/* Streams and executable graphs the program created: handle -> (device,
 * id on the device's server), a small open table.  Their handles come from
 * ranges that never meet (client/streams.py, client/graphs.py); the kind
 * keeps a graph's handle passed as a stream from being taken for one. */
enum handle_kind { HANDLE_STREAM = 1, HANDLE_GRAPH = 2, HANDLE_EVENT = 3 };
struct fast_stream {
    uintptr_t handle;
    int kind;
    int device;
    uint64_t id;
};
#define FAST_STREAMS 4096
static struct fast_stream streams[FAST_STREAMS];
static pthread_rwlock_t streams_lock = PTHREAD_RWLOCK_INITIALIZER;
static const uintptr_t STREAM_TOMBSTONE = 1;  /* a removed entry (handles are never 1 here) */

static void set_handle(uintptr_t handle, int kind, int device, uint64_t id, int add)
{
    pthread_rwlock_wrlock(&streams_lock);
    size_t i = slot_of((const void *)handle, FAST_STREAMS);
    for (size_t probes = 0; probes < FAST_STREAMS; probes++, i = (i + 1) & (FAST_STREAMS - 1)) {
        if (add && (streams[i].handle == 0 || streams[i].handle == STREAM_TOMBSTONE)) {
            streams[i] = (struct fast_stream){handle, kind, device, id};
            break;
        }
        if (!add && streams[i].handle == handle) {
            streams[i].handle = STREAM_TOMBSTONE;
            break;
        }
        if (!add && streams[i].handle == 0)
            break;
    }
    pthread_rwlock_unlock(&streams_lock);  /* a full table just means slow launches */
}

static int find_handle(uintptr_t handle, int kind, int *device, uint64_t *id)
{
    int found = 0;
    pthread_rwlock_rdlock(&streams_lock);
    size_t i = slot_of((const void *)handle, FAST_STREAMS);
    for (size_t probes = 0; probes < FAST_STREAMS && streams[i].handle; probes++, i = (i + 1) & (FAST_STREAMS - 1)) {
        if (streams[i].handle == handle) {
            found = streams[i].kind == kind;
            *device = streams[i].device;
            *id = streams[i].id;
            break;
        }
    }
    pthread_rwlock_unlock(&streams_lock);
    return found;
}

static void rcuda_fast_stream(uintptr_t handle, int device, uint64_t id, int add)
{
    set_handle(handle, HANDLE_STREAM, device, id, add);
}

/* An executable graph whose whole work is one run of server requests under
 * id `id` on `device`'s server, already there (client/runtime/graphs.py):
 * its launches are records (async_fast_path.c). */
static void rcuda_fast_graph(uintptr_t handle, int device, uint64_t id, int add)
{
    set_handle(handle, HANDLE_GRAPH, device, id, add);
}

/* An event (cudaEvent_t, CUevent) with id `id` on `device`: its records
 * and the waits for it are records (async_fast_path.c). */
static void rcuda_fast_event(uintptr_t handle, int device, uint64_t id, int add)
{
    set_handle(handle, HANDLE_EVENT, device, id, add);
}

static int find_stream(uintptr_t handle, int *device, uint64_t *id)
{
    return find_handle(handle, HANDLE_STREAM, device, id);
}

/* This thread's default stream on each device (--default-stream per-thread). */
static __thread uint64_t per_thread_stream[FAST_MAX_DEVICES];
static __thread uint64_t per_thread_generation[FAST_MAX_DEVICES];

static void rcuda_fast_per_thread_stream(int device, uint64_t id, uint64_t generation)
{
    if (device >= 0 && device < FAST_MAX_DEVICES) {
        per_thread_stream[device] = id;
        per_thread_generation[device] = generation;
    }
}

/* In a forked child: the parent's devices, kernels' ids, streams and queued
 * launches are not the child's (it starts its own sessions).  Locks another
 * thread held at the fork are re-made. */
static void fast_path_after_fork(void)
{
    pthread_rwlock_init(&kernels_lock, NULL);
    pthread_rwlock_init(&streams_lock, NULL);
    for (size_t i = 0; i < kernels_capacity; i++)
        memset(kernels[i].fn, 0, sizeof kernels[i].fn);
    memset(streams, 0, sizeof streams);
    for (int i = 0; i < FAST_MAX_DEVICES; i++) {
        pthread_mutex_init(&devices[i].lock, NULL);
        free(devices[i].batch);
        devices[i].batch = NULL;
        devices[i].used = devices[i].capacity = 0;
        devices[i].count = 0;
        devices[i].usable = 0;
        devices[i].clean = 0;
        devices[i].link = -1;
        devices[i].wake_fd = -1;
    }
    memset(per_thread_stream, 0, sizeof per_thread_stream);
}

/* ------------------------------------------------------------ current device */

static __thread int current_device = 0;

static int rcuda_get_current_device(void) { return current_device; }
static void rcuda_set_current_device(int device) { current_device = device; }

/* Whether the thread has a current driver context (client/driver/context_stacks.py says
 * so): the driver calls C makes need one, else Python answers
 * CUDA_ERROR_INVALID_CONTEXT. */
static __thread int driver_context_current = 0;
static void rcuda_set_driver_context(int current) { driver_context_current = current; }

/* ------------------------------------------------------------ the launch */

#define LEGACY_HANDLE ((uintptr_t)1)
#define PER_THREAD_HANDLE ((uintptr_t)2)

/* The device and id of a stream C knows (for a launch, or a synchronisation
 * in sync_fast_path.c); 0 when Python must resolve it. */
static int resolve_stream(void *stream, int per_thread, int *device, uint64_t *id)
{
    uintptr_t handle = (uintptr_t)stream;
    if (handle == 0)
        handle = per_thread ? PER_THREAD_HANDLE : LEGACY_HANDLE;
    if (handle != LEGACY_HANDLE && handle != PER_THREAD_HANDLE)
        return find_stream(handle, device, id);
    *device = current_device;
    if (*device < 0 || *device >= FAST_MAX_DEVICES)
        return 0;
    if (handle == LEGACY_HANDLE) {
        *id = 0;
        return 1;
    }
    if (!per_thread_stream[*device] || per_thread_generation[*device] != devices[*device].generation)
        return 0;  /* not created yet in this thread, or the device was reset */
    *id = per_thread_stream[*device];
    return 1;
}

/* A record's size in a batch: header, parameters, padding to 8 bytes. */
static size_t record_size(const struct launch_record *r)
{
    return (RECORD_HEADER + r->param_bytes + 7) & ~(size_t)7;
}

/* Room for record `r` and its r->param_bytes at the end of device d's
 * batch, with d->lock held: the header is written and the padding after the
 * parameters zeroed; returns where the parameters go, or NULL (out of
 * memory: d->lock is still held, and finish_record gives it back either way). */
static char *start_record(struct fast_device *d, const struct launch_record *r)
{
    size_t need = record_size(r);
    if (d->used + need > d->capacity) {
        size_t capacity = d->capacity ? d->capacity * 2 : FAST_BATCH_INITIAL;
        while (capacity < d->used + need)
            capacity *= 2;
        char *grown = realloc(d->batch, capacity);
        if (!grown)
            return NULL;
        d->batch = grown;
        d->capacity = capacity;
    }
    char *at = d->batch + d->used;
    memcpy(at, r, RECORD_HEADER);
    memset(at + RECORD_HEADER + r->param_bytes, 0, need - RECORD_HEADER - r->param_bytes);
    return at + RECORD_HEADER;
}

/* Record `r`, which start_record made room for, is complete (`recorded`),
 * or not to be kept: d->lock is released, and the device's forwarding
 * thread woken when the batch was empty (it ships the batch).  Returns
 * `recorded`. */
static int finish_record(struct fast_device *d, const struct launch_record *r, int recorded)
{
    int wake = 0, wake_fd = d->wake_fd;
    if (recorded) {
        wake = d->used == 0;
        d->used += record_size(r);
        d->count++;
    }
    pthread_mutex_unlock(&d->lock);
    if (wake && wake_fd >= 0) {
        uint64_t one = 1;
        ssize_t ignored = write(wake_fd, &one, sizeof one);
        (void)ignored;
    }
    return recorded;
}

/* 1 when the launch was recorded; 0 when Python must take it. */
static int record_launch(const void *host_fun, dim3 grid, dim3 block, void **args, size_t shared_mem,
                         void *stream, int per_thread)
{
    int device = current_device;
    if (device < 0 || device >= FAST_MAX_DEVICES)
        return 0;
    struct fast_device *d = &devices[device];
    if (!__atomic_load_n(&d->usable, __ATOMIC_ACQUIRE))
        return 0;

    int stream_device;
    uint64_t stream_id;
    if (!resolve_stream(stream, per_thread, &stream_device, &stream_id) || stream_device != device)
        return 0;

    struct launch_device_limits device_limits = {.maxThreadsDim = d->max_block, .maxGridSize = d->max_grid,
                                                 .maxThreadsPerBlock = d->max_threads,
                                                 .sharedMemPerBlockOptin = d->max_shared};
    if (launch_device_rule_broken(grid, block, shared_mem, &device_limits))
        return 0;  /* Python explains what is wrong */

    pthread_rwlock_rdlock(&kernels_lock);
    struct fast_kernel *k = find_kernel(host_fun);
    if (!k || !k->fn[device] || (k->nparams && !args) ||
        launch_kernel_rule_broken(grid, block, shared_mem,
                                  &(struct launch_kernel_limits){.maxThreadsPerBlock = k->max_threads[device],
                                                                 .maxDynamicSharedSizeBytes =
                                                                     k->max_dynamic_shared[device]})) {
        pthread_rwlock_unlock(&kernels_lock);
        return 0;
    }
    struct launch_record r = {k->fn[device], (uint32_t)shared_mem, {grid.x, grid.y, grid.z},
                              {block.x, block.y, block.z}, stream_id, k->buffer_size};
    /* The arguments are read before the batch lock is taken: one the program
     * keeps in managed memory may fault, and the handler may have to send
     * the batch (native/mapped_memory.c). */
    char small[1024], *staged = k->buffer_size <= sizeof small ? small : malloc(k->buffer_size);
    if (!staged) {
        pthread_rwlock_unlock(&kernels_lock);
        return 0;
    }
    memset(staged, 0, k->buffer_size); /* the gaps between parameters */
    for (uint32_t i = 0; i < k->nparams; i++)
        memcpy(staged + k->offsets[i], args[i], k->sizes[i]);
    pthread_mutex_lock(&d->lock);
    char *params = start_record(d, &r);
    if (params)
        memcpy(params, staged, k->buffer_size);
    pthread_rwlock_unlock(&kernels_lock);
    if (staged != small)
        free(staged);
    /* Page-locked memory the kernel is passed must be attached to this device first: Python's. */
    int recorded = params != NULL && !needs_pinned_attach(device, params, r.param_bytes);
    if (!finish_record(d, &r, recorded))
        return 0;
    mirror_note_write(device, stream_id); /* the kernel may write mapped memory (native/mapped_memory.c) */
    return 1;
}

/* cuLaunchKernel (native/routes.ini, [c_first]): a driver launch is the
 * same record, keyed by its CUfunction handle, which the client registers
 * as it registers a kernel's host stub once the function launched through
 * Python (client/driver/modules.py).  A parameter buffer passed in
 * `extra` goes to Python, which checks its size. */
static int driver_launch(CUfunction f, dim3 grid, dim3 block, unsigned int shared_mem, CUstream stream,
                         void **params, void **extra, int per_thread, CUresult *status)
{
    if (!driver_context_current || extra != NULL ||
        !record_launch((const void *)f, grid, block, params, shared_mem, stream, per_thread))
        return 0;
    *status = CUDA_SUCCESS;
    return 1;
}

static int rcuda_c_cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra,
                                  CUresult *status)
{
    return driver_launch(f, (dim3){gridDimX, gridDimY, gridDimZ}, (dim3){blockDimX, blockDimY, blockDimZ},
                         sharedMemBytes, hStream, kernelParams, extra, 0, status);
}

static int rcuda_c_cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                       void **kernelParams, void **extra, CUresult *status)
{
    return driver_launch(f, (dim3){gridDimX, gridDimY, gridDimZ}, (dim3){blockDimX, blockDimY, blockDimZ},
                         sharedMemBytes, hStream, kernelParams, extra, 1, status);
}

/* The slow path: the Python client (client/runtime/core.py, `launch`). */
static cudaError_t rcuda_py_launch(const void *host_fun, dim3 grid, dim3 block, void **args, size_t shared_mem,
                                   void *stream, int per_thread);

static cudaError_t launch(const void *host_fun, dim3 grid, dim3 block, void **args, size_t shared_mem,
                          void *stream, int per_thread)
{
    if (!rcuda_enter())
        return cudaErrorCudartUnloading;
    if (record_launch(host_fun, grid, block, args, shared_mem, stream, per_thread))
        return cudaSuccess;
    return rcuda_py_launch(host_fun, grid, block, args, shared_mem, stream, per_thread);
}

RCUDA_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                            size_t sharedMem, cudaStream_t stream)
{
    return launch((const void *)kernel, gridDim, blockDim, args, sharedMem, stream, 0);
}

RCUDA_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                                 size_t sharedMem, cudaStream_t stream)
{
    return launch((const void *)kernel, gridDim, blockDim, args, sharedMem, stream, 1);
}

RCUDA_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                          size_t sharedMem, cudaStream_t stream)
{
    return launch(func, gridDim, blockDim, args, sharedMem, stream, 0);
}

RCUDA_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                               size_t sharedMem, cudaStream_t stream)
{
    return launch(func, gridDim, blockDim, args, sharedMem, stream, 1);
}
