/* Asynchronous memsets and small copies recorded in C, with the launches.
 *
 * Through the Python client, cudaMemsetAsync costs a program about as much
 * as a synchronous call (tens of microseconds: the GIL, a message built in
 * Python), and cudaMemcpyAsync from host memory more; a launch recorded in C
 * costs a tenth of a microsecond.  Programs interleave them (zero a buffer,
 * upload the next input, launch), so here they go into the device's batch
 * of launches (launch_fast_path.c) as records of their own kind, in one
 * order with the launches, shipped and sealed the same way; the server runs
 * them in that order (server/device_service.py, `launches`).
 *
 * cudaMemset, and cudaMemcpy between two places of one device, are
 * asynchronous with respect to the host in CUDA too: they are recorded the
 * same way, in the legacy stream (the cudaMemcpy in sync_fast_path.c).
 *
 * cudaEventRecord and cudaStreamWaitEvent (and the driver's twins) of an
 * event and a stream C knows on one device are records too, naming the
 * event; the server records or waits in the record's stream.
 *
 * Only the plain cases, the others go to Python, which explains errors:
 *   cudaMemsetAsync   the range inside one allocation C knows (allocation_table.c)
 *   cudaMemcpyAsync   host to device from pageable memory (outside every
 *                     allocation and the pinned ranges, at most
 *                     RECORD_HTOD_MAX bytes), copied into the batch now, as
 *                     CUDA stages pageable memory before the call returns;
 *                     or device to device within one device.  Pinned memory
 *                     is read when the copy runs, in stream order (an
 *                     earlier copy or host function in the stream may fill
 *                     it): Python's, which reads it as the message goes out.
 * in a stream C knows on the memory's device, while the device is usable
 * and Python said records are welcome (not with statistics or a trace,
 * which count each call in Python).  A download into
 * pageable memory returns once it is done, in CUDA too: it is made on the
 * link as cudaMemcpy is (sync_fast_path.c).  One into pinned memory must
 * land there before a later synchronisation returns: Python's, for now.
 *
 * Included into the cffi module after launch_fast_path.c and allocation_table.c.
 */

/* Record kinds: a launch record's `fn` at or above WIRE_RECORD_FIRST_OP is
 * an operation, its parameters the operation's (rcuda/wire.py). */
#define RECORD_MEMSET ((uint32_t)WIRE_RECORD_MEMSET) /* ptr u64, size u64, value u32 */
#define RECORD_HTOD ((uint32_t)WIRE_RECORD_HTOD)     /* dst u64, then the bytes */
#define RECORD_DTOD ((uint32_t)WIRE_RECORD_DTOD)     /* dst u64, src u64, size u64 */
#define RECORD_GRAPH ((uint32_t)WIRE_RECORD_GRAPH)   /* graph id u64 */
#define RECORD_EVENT ((uint32_t)WIRE_RECORD_EVENT)   /* event id u64, recorded in the record's stream */
#define RECORD_WAIT ((uint32_t)WIRE_RECORD_WAIT)     /* event id u64, which the record's stream waits for */

/* Larger uploads take Python's path, which sends them from where they are
 * instead of copying them into the batch first. */
#define RECORD_HTOD_MAX (64u << 10)
/* Bytes of uploads a batch may hold before it is shipped: beyond, a
 * program that uploads faster than the link carries goes to Python, whose
 * sends wait for the link. */
#define RECORD_BATCH_DATA_MAX (8u << 20)

static int record_ops_welcome[FAST_MAX_DEVICES]; /* Python's word (rcuda_fast_record_ops) */
static int events_welcome;                       /* Python's word (rcuda_fast_events) */
static uint64_t records_made[FAST_MAX_DEVICES];  /* for the client's exit report */

static void rcuda_fast_record_ops(int device, int welcome)
{
    if (device >= 0 && device < FAST_MAX_DEVICES)
        __atomic_store_n(&record_ops_welcome[device], welcome, __ATOMIC_SEQ_CST);
}

static uint64_t rcuda_fast_records_made(int device)
{
    if (device < 0 || device >= FAST_MAX_DEVICES)
        return 0;
    return __atomic_load_n(&records_made[device], __ATOMIC_RELAXED);
}

/* Whether event records and waits may be records: not once a memory pool
 * has freed memory in stream order (client/memory/pools.py follows each
 * event's place among the frees). */
static void rcuda_fast_events(int welcome)
{
    __atomic_store_n(&events_welcome, welcome, __ATOMIC_SEQ_CST);
}

/* In a forked child: the parent's devices are not the child's; Python
 * welcomes records again as the child opens its own. */
static void async_path_after_fork(void)
{
    memset(record_ops_welcome, 0, sizeof record_ops_welcome);
    memset(records_made, 0, sizeof records_made);
}

/* Append an operation (`head` then `data`) to `device`'s batch, in its
 * stream `stream_id`; 1 when recorded. */
static int record_op_in(int device, uint64_t stream_id, uint32_t kind, const void *head, uint32_t head_size,
                        const void *data, uint32_t data_size)
{
    struct fast_device *d = &devices[device];
    if (!__atomic_load_n(&d->usable, __ATOMIC_ACQUIRE) || !__atomic_load_n(&record_ops_welcome[device],
                                                                          __ATOMIC_ACQUIRE))
        return 0;
    struct launch_record r = {kind, 0, {0, 0, 0}, {0, 0, 0}, stream_id, head_size + data_size};
    pthread_mutex_lock(&d->lock);
    if (data_size && d->used + data_size > RECORD_BATCH_DATA_MAX)
        return finish_record(d, &r, 0);
    char *params = start_record(d, &r);
    if (params) {
        memcpy(params, head, head_size);
        if (data_size)
            memcpy(params + head_size, data, data_size);
        __atomic_add_fetch(&records_made[device], 1, __ATOMIC_RELAXED);
    }
    return finish_record(d, &r, params != NULL);
}

/* record_op_in, in the program's `stream` (NULL: the default stream as
 * `per_thread` says) if that is one of `device`'s streams C knows. */
static int record_op(int device, void *stream, int per_thread, uint32_t kind, const void *head, uint32_t head_size,
                     const void *data, uint32_t data_size)
{
    int stream_device;
    uint64_t stream_id;
    if (!resolve_stream(stream, per_thread, &stream_device, &stream_id) || stream_device != device)
        return 0; /* another device's stream: Python orders the two */
    return record_op_in(device, stream_id, kind, head, head_size, data, data_size);
}

/* A memset of [ptr, ptr + count) inside one allocation: its device, or -1. */
static int memset_device(void *ptr, size_t count)
{
    if (!count || mirror_overlaps((uintptr_t)ptr, count))
        return -1; /* mapped memory: Python's, which keeps both copies in step */
    return device_holding((uintptr_t)ptr, count);
}

static int memset_async_in_c(void *ptr, int value, size_t count, void *stream, int per_thread)
{
    int device = memset_device(ptr, count);
    struct memset_fields head = {(uintptr_t)ptr, count, (uint32_t)value};
    return device >= 0 && record_op(device, stream, per_thread, RECORD_MEMSET, &head, sizeof head, NULL, 0);
}

/* cudaMemset: asynchronous with respect to the host for device memory, as
 * CUDA makes it; in the legacy stream of the memory's device, where Python
 * puts it too (client/runtime/memory.py, memset). */
static int memset_in_c(void *ptr, int value, size_t count)
{
    int device = memset_device(ptr, count);
    struct memset_fields head = {(uintptr_t)ptr, count, (uint32_t)value};
    return device >= 0 && record_op_in(device, 0, RECORD_MEMSET, &head, sizeof head, NULL, 0);
}

/* A copy within one device, in its stream `stream_id`. */
static int record_dtod(int device, uint64_t stream_id, void *dst, const void *src, size_t count)
{
    struct dtod_fields head = {(uintptr_t)dst, (uintptr_t)src, count};
    return record_op_in(device, stream_id, RECORD_DTOD, &head, sizeof head, NULL, 0);
}

/* sync_fast_path.c: a synchronous download on the device's link, in `stream`. */
static int download(int device, const char *name, uint64_t stream, void *dst, const void *src, size_t count,
                    cudaError_t *status);

static int memcpy_async_in_c(const char *name, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                             void *stream, int per_thread, cudaError_t *status)
{
    *status = cudaSuccess;
    if (count == 0 || dst == NULL || src == NULL)
        return 0;
    if (mirror_overlaps((uintptr_t)dst, count) || mirror_overlaps((uintptr_t)src, count))
        return 0; /* mapped memory: Python's */
    int dst_device = device_holding((uintptr_t)dst, count), src_device = device_holding((uintptr_t)src, count);
    kind = copy_kind(kind, dst_device, src_device);
    if (kind == cudaMemcpyHostToDevice && dst_device >= 0 && src_device < 0 && count <= RECORD_HTOD_MAX &&
        !pinned((uintptr_t)src, count)) {
        uint64_t head = (uintptr_t)dst;
        return record_op(dst_device, stream, per_thread, RECORD_HTOD, &head, sizeof head, src, (uint32_t)count);
    }
    int device = kind == cudaMemcpyHostToDevice ? dst_device : src_device, stream_device;
    uint64_t stream_id;
    if (device < 0 || !resolve_stream(stream, per_thread, &stream_device, &stream_id) || stream_device != device)
        return 0;
    if (kind == cudaMemcpyDeviceToDevice && dst_device == src_device)
        return record_dtod(device, stream_id, dst, src, count);
    /* Into pageable memory CUDA returns once the copy is done: a synchronous
     * download (pinned memory is written when the bytes arrive: Python's). */
    if (kind == cudaMemcpyDeviceToHost && dst_device < 0 && !pinned((uintptr_t)dst, count))
        return download(device, name, stream_id, dst, src, count, status);
    return 0;
}

/* A record of `kind` naming the id of `handle` (a graph or an event C was
 * taught, of `handle_kind`), in the program's `stream` if that is a stream C
 * knows on the handle's device: that device, and the stream's id in
 * *stream_id; -1 when C did not record it. */
static int record_naming(uint32_t kind, uintptr_t handle, int handle_kind, void *stream, int per_thread,
                         uint64_t *stream_id)
{
    int device, stream_device;
    uint64_t id;
    if (!find_handle(handle, handle_kind, &device, &id) ||
        !resolve_stream(stream, per_thread, &stream_device, stream_id) || stream_device != device)
        return -1; /* unknown, or another device's stream: Python orders the two */
    return record_op_in(device, *stream_id, kind, &id, sizeof id, NULL, 0) ? device : -1;
}

/* cudaGraphLaunch of an executable graph the client taught C
 * (rcuda_fast_graph): one record naming the graph, in the program's stream,
 * like a launch; the server runs all of the graph's work there
 * (server/graphs.py).  Any other graph (host nodes, copies of host memory,
 * work not yet on the server), or a stream C does not know: Python's. */
static int graph_launch_in_c(cudaGraphExec_t exec, void *stream, int per_thread)
{
    uint64_t stream_id;
    int device = record_naming(RECORD_GRAPH, (uintptr_t)exec, HANDLE_GRAPH, stream, per_thread, &stream_id);
    if (device < 0)
        return 0;
    mirror_note_write(device, stream_id); /* its kernels may write mapped memory (native/mapped_memory.c) */
    return 1;
}

/* cudaEventRecord and cudaStreamWaitEvent (the default flags), and the
 * driver's twins: one record naming the event, in the program's stream, for
 * an event and a stream C knows on one device.  Across devices, or an event
 * Python has not taught C (destroyed, another process's...): Python's. */
static int event_op_in_c(uint32_t kind, void *event, void *stream, int per_thread)
{
    uint64_t stream_id;
    return __atomic_load_n(&events_welcome, __ATOMIC_ACQUIRE) &&
           record_naming(kind, (uintptr_t)event, HANDLE_EVENT, stream, per_thread, &stream_id) >= 0;
}

/* ------------------------------------------------------------ the exports' C side */

/* Each returns 1 with *status set when C recorded the call; 0 sends it to
 * Python (native/generated/cudart_exports.c). */

static int rcuda_c_cudaMemset(void *ptr, int value, size_t count, cudaError_t *status)
{
    *status = cudaSuccess;
    return memset_in_c(ptr, value, count);
}

static int rcuda_c_cudaMemset_ptds(void *ptr, int value, size_t count, cudaError_t *status)
{
    *status = cudaSuccess;
    return memset_in_c(ptr, value, count);
}

static int rcuda_c_cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream, cudaError_t *status)
{
    *status = cudaSuccess;
    return memset_async_in_c(ptr, value, count, stream, 0);
}

static int rcuda_c_cudaMemsetAsync_ptsz(void *ptr, int value, size_t count, cudaStream_t stream,
                                        cudaError_t *status)
{
    *status = cudaSuccess;
    return memset_async_in_c(ptr, value, count, stream, 1);
}

static int rcuda_c_cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                   cudaStream_t stream, cudaError_t *status)
{
    return memcpy_async_in_c("cudaMemcpyAsync", dst, src, count, kind, stream, 0, status);
}

static int rcuda_c_cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                        cudaStream_t stream, cudaError_t *status)
{
    return memcpy_async_in_c("cudaMemcpyAsync", dst, src, count, kind, stream, 1, status);
}

static int rcuda_c_cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream, cudaError_t *status)
{
    *status = cudaSuccess;
    return graph_launch_in_c(exec, stream, 0);
}

static int rcuda_c_cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream, cudaError_t *status)
{
    *status = cudaSuccess;
    return graph_launch_in_c(exec, stream, 1);
}

/* The driver's cuGraphLaunch: the same record, with a context current (its
 * device is the current device C resolves the stream on). */
static int rcuda_c_cuGraphLaunch(CUgraphExec exec, CUstream stream, CUresult *status)
{
    *status = CUDA_SUCCESS;
    return driver_context_current && graph_launch_in_c((cudaGraphExec_t)exec, stream, 0);
}

static int rcuda_c_cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream, CUresult *status)
{
    *status = CUDA_SUCCESS;
    return driver_context_current && graph_launch_in_c((cudaGraphExec_t)exec, stream, 1);
}

static int rcuda_c_cudaEventRecord(cudaEvent_t event, cudaStream_t stream, cudaError_t *status)
{
    *status = cudaSuccess;
    return event_op_in_c(RECORD_EVENT, event, stream, 0);
}

static int rcuda_c_cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream, cudaError_t *status)
{
    *status = cudaSuccess;
    return event_op_in_c(RECORD_EVENT, event, stream, 1);
}

/* With flags 0 (cudaEventRecordExternal only matters in a capture, Python's). */
static int rcuda_c_cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags,
                                            cudaError_t *status)
{
    *status = cudaSuccess;
    return flags == 0 && event_op_in_c(RECORD_EVENT, event, stream, 0);
}

static int rcuda_c_cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags,
                                                 cudaError_t *status)
{
    *status = cudaSuccess;
    return flags == 0 && event_op_in_c(RECORD_EVENT, event, stream, 1);
}

static int rcuda_c_cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags, cudaError_t *status)
{
    *status = cudaSuccess;
    return flags == 0 && event_op_in_c(RECORD_WAIT, event, stream, 0);
}

static int rcuda_c_cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags,
                                            cudaError_t *status)
{
    *status = cudaSuccess;
    return flags == 0 && event_op_in_c(RECORD_WAIT, event, stream, 1);
}

/* The driver's: rcuda's CUevent and cudaEvent_t are the same handles. */
static int rcuda_c_cuEventRecord(CUevent event, CUstream stream, CUresult *status)
{
    *status = CUDA_SUCCESS;
    return driver_context_current && event_op_in_c(RECORD_EVENT, event, stream, 0);
}

static int rcuda_c_cuEventRecord_ptsz(CUevent event, CUstream stream, CUresult *status)
{
    *status = CUDA_SUCCESS;
    return driver_context_current && event_op_in_c(RECORD_EVENT, event, stream, 1);
}

static int rcuda_c_cuEventRecordWithFlags(CUevent event, CUstream stream, unsigned int flags, CUresult *status)
{
    *status = CUDA_SUCCESS;
    return driver_context_current && flags == 0 && event_op_in_c(RECORD_EVENT, event, stream, 0);
}

static int rcuda_c_cuEventRecordWithFlags_ptsz(CUevent event, CUstream stream, unsigned int flags, CUresult *status)
{
    *status = CUDA_SUCCESS;
    return driver_context_current && flags == 0 && event_op_in_c(RECORD_EVENT, event, stream, 1);
}

static int rcuda_c_cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags, CUresult *status)
{
    *status = CUDA_SUCCESS;
    return driver_context_current && flags == 0 && event_op_in_c(RECORD_WAIT, event, stream, 0);
}

static int rcuda_c_cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned int flags, CUresult *status)
{
    *status = CUDA_SUCCESS;
    return driver_context_current && flags == 0 && event_op_in_c(RECORD_WAIT, event, stream, 1);
}
