/* Synchronous calls C makes itself, on the device's link (native/link.c):
 * cudaDeviceSynchronize, cudaStreamSynchronize, cudaMemGetInfo, and
 * cudaMemcpy between the program's memory and one device (also
 * cudaMemcpyAsync into pageable memory, which CUDA makes synchronous).
 *
 * Through Python such a call costs a thread the GIL and an encoding in
 * Python; here the calling thread encodes the few fields itself, sends the
 * request after the launches it recorded (and a copy's bytes from where the
 * program keeps them), and reads the reply (a copy's bytes straight into
 * the program's buffer) as the link's reader.  Which device a copy's
 * pointer belongs to, C looks up in its copy of the allocation map
 * (native/allocation_table.c).
 *
 * C makes a call only where the device has a link (no --auth) and Python
 * said the device is usable and `clean`: no asynchronous error waits to be
 * reported, no statistics or trace that must see each call.  Anything
 * unusual goes to Python: a reply with an error or device output
 * (rcuda_py_link_reply explains it and records it as the thread's last
 * error) and a failed link (rcuda_py_link_failed).  A call C cannot take
 * is made by Python.
 *
 * Included into the cffi module after link.c and allocation_table.c.
 */

/* The slow paths: client/entrypoints.py. */
static cudaError_t rcuda_py_link_failed(int device, const char *call, int failure, int error_number);
static cudaError_t rcuda_py_link_reply(int device, const char *call, const char *op, uint64_t seq,
                                       const char *header, size_t size);

/* Python's word on whether C may make the device's synchronous calls. */
static void rcuda_fast_device_clean(int device, int clean)
{
    pthread_once(&devices_once, init_devices);
    if (device >= 0 && device < FAST_MAX_DEVICES)
        __atomic_store_n(&devices[device].clean, clean, __ATOMIC_SEQ_CST);
}

/* What C sends and receives for one call. */
struct c_call {
    const char *op;         /* rcuda/protocol.py's name */
    int has_stream, copy;   /* fields beyond op and seq */
    uint64_t stream;
    uint64_t address, size; /* a copy's device address (dst of an htod, src of a dtoh) and bytes */
    const void *outgoing;   /* htod: the program's bytes, sent from where they are */
    void *incoming;         /* dtoh: where the bytes land */
    uint64_t free, total;   /* mem_info's answer */
    uint64_t runs;          /* mirror_dtoh's, when only what changed came */
};

/* Whether a reply is plain success C can finish: only `seq`, `err` 0 and
 * the integer fields it knows.  Device output, an error message or
 * anything unknown goes to Python. */
static int plain_success(const char *header, size_t size, struct c_call *call)
{
    struct mp_reader r = {(const unsigned char *)header, (const unsigned char *)header + size, 1};
    int64_t fields = mp_map_size(&r);
    for (int64_t i = 0; i < fields && r.ok; i++) {
        size_t length = 0;
        const unsigned char *key = mp_key(&r, &length);
        enum mp_kind kind;
        int64_t value = r.ok ? mp_value(&r, &kind, MP_MAX_DEPTH) : 0;
        if (!r.ok || kind != MP_INT)
            return 0;
        if (mp_key_is(key, length, "err")) {
            if (value != 0)
                return 0;
        } else if (mp_key_is(key, length, "free")) {
            call->free = (uint64_t)value;
        } else if (mp_key_is(key, length, "total")) {
            call->total = (uint64_t)value;
        } else if (mp_key_is(key, length, "runs")) {
            call->runs = (uint64_t)value;
        } else if (!mp_key_is(key, length, "seq")) {
            return 0;
        }
    }
    return fields >= 0 && r.ok && r.at == r.end;
}

/* One synchronous call on `device`'s link.  Returns 0 when C cannot take
 * it (Python makes it); else 1 with *status set. */
static int c_call(int device, const char *name, struct c_call *call, cudaError_t *status)
{
    if (device < 0 || device >= FAST_MAX_DEVICES)
        return 0;
    struct fast_device *d = &devices[device];
    if (!__atomic_load_n(&d->usable, __ATOMIC_ACQUIRE) || !__atomic_load_n(&d->clean, __ATOMIC_ACQUIRE))
        return 0;
    struct link *l = link_at(__atomic_load_n(&d->link, __ATOMIC_ACQUIRE));
    if (!l)
        return 0;
    uint64_t seq = __atomic_fetch_add(&next_c_seq, 1, __ATOMIC_RELAXED);
    unsigned char head[128];
    struct mp_writer w = {head, head + sizeof head};
    mp_map(&w, 2 + (call->copy ? 2 : 0) + (call->has_stream ? 1 : 0));
    mp_str(&w, "op");
    mp_str(&w, call->op);
    mp_str(&w, "seq");
    mp_uint(&w, seq);
    if (call->copy) {
        mp_str(&w, call->outgoing ? "dst" : "src");
        mp_uint(&w, call->address);
        mp_str(&w, "size");
        mp_uint(&w, call->size);
    }
    if (call->has_stream) {
        mp_str(&w, "stream");
        mp_uint(&w, call->stream);
    }
    struct iovec parts[2] = {{head, (size_t)(w.at - head)}, {(void *)call->outgoing, call->outgoing ? call->size : 0}};
    static const unsigned char kinds[2] = {PART_COPY, PART_BORROWED}; /* the caller waits: its bytes stay */
    struct link_reply reply;
    struct mirror_sync mirrors; /* a synchronisation: the device's mapped memory may need its writes */
    int is_mem_info = strcmp(call->op, "mem_info") == 0;
    if (is_mem_info)
        memset(&mirrors, 0, sizeof mirrors);
    else
        mirror_before_sync(device, call->has_stream ? MIRROR_SYNC_STREAM : MIRROR_SYNC_DEVICE, call->stream,
                           &mirrors);
    __atomic_add_fetch(&l->calls_in_c, 1, __ATOMIC_RELAXED);
    int failure = link_call(l, seq, call->op, parts, kinds, call->outgoing ? 2 : 1, call->incoming, call->size, &reply);
    if (failure) {
        rcuda_link_free(&reply);
        *status = rcuda_py_link_failed(device, name, failure, reply.error_number);
        return 1;
    }
    *status = cudaSuccess;
    if (!plain_success(reply.header, reply.header_size, call))
        *status = rcuda_py_link_reply(device, name, call->op, seq, reply.header, reply.header_size);
    else if (call->incoming && !reply.landed)
        *status = rcuda_py_link_failed(device, name, LINK_BAD_MESSAGE, 0); /* a dtoh's success without its bytes */
    rcuda_link_free(&reply);
    if (*status == cudaSuccess && mirrors.pending) {
        int result = mirror_after_sync(device, l, &mirrors, &reply);
        if (result > 0)
            *status = rcuda_py_link_failed(device, name, result, reply.error_number);
        else if (result < 0)
            *status = rcuda_py_link_reply(device, name, "mirror_dtoh", reply.seq, reply.header, reply.header_size);
        rcuda_link_free(&reply);
    }
    return 1;
}

/* ------------------------------------------------------------ the exports' C side */

/* Each returns 1 with *status set when C made the call; 0 sends it to Python
 * (native/generated/cudart_exports.c). */

static int rcuda_c_cudaDeviceSynchronize(cudaError_t *status)
{
    struct c_call call = {.op = "sync"};
    return c_call(current_device, "cudaDeviceSynchronize", &call, status);
}

static int stream_synchronize(cudaStream_t stream, int per_thread, const char *name, cudaError_t *status)
{
    int device;
    struct c_call call = {.op = "stream_sync", .has_stream = 1};
    if (!resolve_stream(stream, per_thread, &device, &call.stream))
        return 0;
    return c_call(device, name, &call, status);
}

static int rcuda_c_cudaStreamSynchronize(cudaStream_t stream, cudaError_t *status)
{
    return stream_synchronize(stream, 0, "cudaStreamSynchronize", status);
}

static int rcuda_c_cudaStreamSynchronize_ptsz(cudaStream_t stream, cudaError_t *status)
{
    return stream_synchronize(stream, 1, "cudaStreamSynchronize", status);
}

static int rcuda_c_cudaMemGetInfo(size_t *free, size_t *total, cudaError_t *status)
{
    if (free == NULL || total == NULL)
        return 0; /* Python names the NULL */
    struct c_call call = {.op = "mem_info"};
    if (!c_call(current_device, "cudaMemGetInfo", &call, status))
        return 0;
    if (*status == cudaSuccess) {
        *free = call.free;
        *total = call.total;
    }
    return 1;
}

/* A download into the program's pageable memory, in `stream`: CUDA returns
 * once it is done (cudaMemcpy, and cudaMemcpyAsync into pageable memory). */
static int download(int device, const char *name, uint64_t stream, void *dst, const void *src, size_t count,
                    cudaError_t *status)
{
    struct c_call call = {.op = "dtoh", .copy = 1, .has_stream = 1, .stream = stream, .address = (uintptr_t)src,
                          .size = count, .incoming = dst};
    return c_call(device, name, &call, status);
}

/* cudaMemcpy between the program's memory and one device's, in the legacy
 * stream as client/runtime/memory.py's memcpy makes it (the _ptds export too).
 * Only the plain cases: both pointers set, the device side inside one
 * allocation C knows, the host side outside all of them; or a copy within
 * one device, recorded as an asynchronous one.  Anything else (host to
 * host, between devices, a pointer Python must explain) is Python's. */
static int memcpy_in_c(const char *name, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                       cudaError_t *status)
{
    if (count == 0 || dst == NULL || src == NULL)
        return 0;
    if (mirror_overlaps((uintptr_t)dst, count) || mirror_overlaps((uintptr_t)src, count))
        return 0; /* mapped memory: Python keeps its two copies in step */
    int dst_device = device_holding((uintptr_t)dst, count), src_device = device_holding((uintptr_t)src, count);
    kind = copy_kind(kind, dst_device, src_device);
    if (kind == cudaMemcpyHostToDevice && dst_device >= 0 && src_device < 0) {
        struct c_call call = {.op = "htod", .copy = 1, .has_stream = 1, .address = (uintptr_t)dst, .size = count,
                              .outgoing = src};
        return c_call(dst_device, name, &call, status);
    }
    if (kind == cudaMemcpyDeviceToHost && src_device >= 0 && dst_device < 0)
        return download(src_device, name, 0, dst, src, count, status);
    if (kind == cudaMemcpyDeviceToDevice && dst_device >= 0 && dst_device == src_device) {
        /* within one device CUDA does not wait either: recorded (async_fast_path.c) */
        *status = cudaSuccess;
        return record_dtod(dst_device, 0, dst, src, count);
    }
    return 0;
}

static int rcuda_c_cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaError_t *status)
{
    return memcpy_in_c("cudaMemcpy", dst, src, count, kind, status);
}

static int rcuda_c_cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                   cudaError_t *status)
{
    return memcpy_in_c("cudaMemcpy_ptds", dst, src, count, kind, status); /* named as Python names it */
}

/* The driver's calls made on the same paths (native/routes.ini), while the
 * thread has a current context (else Python answers
 * CUDA_ERROR_INVALID_CONTEXT); a failure's status is the driver's. */
static CUresult rcuda_driver_result(cudaError_t status); /* generated/cuda_driver_exports.c */

static int rcuda_c_cuCtxSynchronize(CUresult *status)
{
    cudaError_t runtime_status;
    if (!driver_context_current || !rcuda_c_cudaDeviceSynchronize(&runtime_status))
        return 0;
    *status = rcuda_driver_result(runtime_status);
    return 1;
}

static int rcuda_c_cuMemGetInfo_v2(size_t *free, size_t *total, CUresult *status)
{
    cudaError_t runtime_status;
    if (!driver_context_current || !rcuda_c_cudaMemGetInfo(free, total, &runtime_status))
        return 0;
    *status = rcuda_driver_result(runtime_status);
    return 1;
}
