/* A stand-in for the CUDA driver library, with just the entry points the
 * GPU server's batch executor calls (native/batch_executor.c), so that its
 * parsing, ordering and errors are checked on machines without a GPU.
 *
 * Device memory is host memory: a memset or a copy writes the bytes at
 * the addresses given.  A launch writes nothing; it is recorded (the
 * function, the shape, the stream, the context current then, a copy of
 * the parameter buffer as the kernel would see it) for the test to read
 * back.  As the driver, it takes the parameters either as kernelParams,
 * each copied to where the function's image has it (stand_in_layout says
 * where: the device-side layout, which may differ from the client's), or
 * as a packed `extra` buffer, copied as it is.  A tensor map it encodes
 * (cuTensorMapEncodeTiled, cuTensorMapReplaceAddress) is 128 recognisable
 * bytes of its own, the last kept for the test (stand_in_tensor_map).  Every call is logged
 * in order; stand_in_fail makes one function's launches fail.  Events
 * are numbers; each query answers what stand_in_events_answer set last
 * (0, done, at first; 600, not ready; or an error), and a wait for one
 * waits until the answer is no longer 600.
 *
 * Built by the tests (tests/test_batch_executor.py) with the system's cc.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CALLS 4096
#define MAX_PARAMS 4096
#define MAX_KERNELS 64
#define MAX_KERNEL_PARAMS 32
#define TENSOR_MAP_SIZE 128

typedef int CUresult;

enum { CALL_LAUNCH = 1, CALL_MEMSET = 2, CALL_DTOD = 3, CALL_HTOD = 4, CALL_EVENT_RECORD = 5, CALL_WAIT = 6,
       CALL_DTOH = 7 };

struct stand_in_call {
    int kind;
    void *context, *function, *stream;
    uint32_t grid[3], block[3], shared_mem;
    uint64_t dst, src, size, value;
    uint32_t param_bytes;
    uint8_t params[MAX_PARAMS];
};

static struct stand_in_call calls[MAX_CALLS];
static int call_count;
static void *current_context = (void *)0xC0;
static void *failing_function;
static CUresult failing_result;
static volatile CUresult events_answer;
static uintptr_t events_made;

/* Functions' device-side parameter layouts (what the driver reads from the image). */
static struct layout {
    void *function;
    uint32_t count, offsets[MAX_KERNEL_PARAMS], sizes[MAX_KERNEL_PARAMS];
} layouts[MAX_KERNELS];
static int layout_count;
static uint8_t last_tensor_map[TENSOR_MAP_SIZE];

int stand_in_call_count(void) { return call_count; }
const struct stand_in_call *stand_in_call_at(int i) { return &calls[i]; }
void stand_in_reset(void) { call_count = 0; failing_function = NULL; events_answer = 0; layout_count = 0; }
const uint8_t *stand_in_tensor_map(void) { return last_tensor_map; }

/* `function`'s image has its `count` parameters at `offsets`, `sizes` bytes each. */
int stand_in_layout(void *function, uint32_t count, const uint32_t *offsets, const uint32_t *sizes)
{
    if (layout_count == MAX_KERNELS || count > MAX_KERNEL_PARAMS)
        return -1;
    struct layout *l = &layouts[layout_count++];
    l->function = function, l->count = count;
    memcpy(l->offsets, offsets, count * sizeof *offsets);
    memcpy(l->sizes, sizes, count * sizeof *sizes);
    return 0;
}

static const struct layout *layout_of(void *function)
{
    for (int i = layout_count - 1; i >= 0; i--)
        if (layouts[i].function == function)
            return &layouts[i];
    return NULL;
}
void stand_in_fail(void *function, CUresult result) { failing_function = function; failing_result = result; }
void stand_in_set_current(void *context) { current_context = context; }
void stand_in_events_answer(CUresult answer) { events_answer = answer; }

static struct stand_in_call *logged(int kind, void *stream)
{
    struct stand_in_call *call = &calls[call_count < MAX_CALLS ? call_count++ : MAX_CALLS - 1];
    memset(call, 0, sizeof *call - MAX_PARAMS);
    call->kind = kind;
    call->context = current_context;
    call->stream = stream;
    return call;
}

CUresult cuCtxGetCurrent(void **context) { *context = current_context; return 0; }
CUresult cuCtxSetCurrent(void *context) { current_context = context; return 0; }

CUresult cuMemsetD8Async(uint64_t dst, unsigned char value, size_t size, void *stream)
{
    struct stand_in_call *call = logged(CALL_MEMSET, stream);
    call->dst = dst, call->size = size, call->value = value;
    memset((void *)(uintptr_t)dst, value, size);
    return 0;
}

CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t size, void *stream)
{
    struct stand_in_call *call = logged(CALL_DTOD, stream);
    call->dst = dst, call->src = src, call->size = size;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, size);
    return 0;
}

CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t size, void *stream)
{
    struct stand_in_call *call = logged(CALL_HTOD, stream);
    call->dst = dst, call->src = (uint64_t)(uintptr_t)src, call->size = size;
    memcpy((void *)(uintptr_t)dst, src, size);
    return 0;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t size, void *stream)
{
    struct stand_in_call *call = logged(CALL_DTOH, stream);
    call->dst = (uint64_t)(uintptr_t)dst, call->src = src, call->size = size;
    memcpy(dst, (const void *)(uintptr_t)src, size);
    return 0;
}

CUresult cuEventCreate(void **event, unsigned flags)
{
    (void)flags;
    *event = (void *)(0xE000 + ++events_made);
    return 0;
}

CUresult cuEventQuery(void *event)
{
    (void)event;
    return events_answer;
}

CUresult cuEventSynchronize(void *event)
{
    (void)event;
    for (int i = 0; i < 10000 && events_answer == 600; i++) /* at most 10 s */
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    return events_answer;
}

CUresult cuStreamCreate(void **stream, unsigned flags)
{
    *stream = (void *)(uintptr_t)(0x5000 + flags);
    return 0;
}

CUresult cuMemHostAlloc(void **host, size_t size, unsigned flags)
{
    (void)flags;
    *host = calloc(1, size);
    return *host ? 0 : 2;
}

CUresult cuMemFreeHost(void *host)
{
    free(host);
    return 0;
}

static size_t memory_free = 3ull << 30, memory_total = 4ull << 30;
void stand_in_memory(size_t free_bytes, size_t total_bytes) { memory_free = free_bytes, memory_total = total_bytes; }

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = memory_free, *total_bytes = memory_total;
    return 0;
}

CUresult cuEventDestroy_v2(void *event) { (void)event; return 0; }
CUresult cuStreamDestroy_v2(void *stream) { (void)stream; return 0; }

CUresult cuEventRecord(void *event, void *stream)
{
    logged(CALL_EVENT_RECORD, stream)->function = event;
    return 0;
}

CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags)
{
    struct stand_in_call *call = logged(CALL_WAIT, stream);
    call->function = event, call->value = flags;
    return 0;
}

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared_mem, void *stream, void **params, void **extra)
{
    if (function == failing_function)
        return failing_result;
    const struct layout *layout = layout_of(function);
    if ((params && extra) || (params && !layout))
        return 1; /* CUDA_ERROR_INVALID_VALUE: both forms, or a function with no layout given */
    struct stand_in_call *call = logged(CALL_LAUNCH, stream);
    call->function = function;
    call->grid[0] = gx, call->grid[1] = gy, call->grid[2] = gz;
    call->block[0] = bx, call->block[1] = by, call->block[2] = bz;
    call->shared_mem = shared_mem;
    for (; extra && extra[0]; extra += 2) { /* CU_LAUNCH_PARAM_BUFFER_POINTER 1, _SIZE 2, _END 0 */
        if (extra[0] == (void *)1)
            call->src = (uint64_t)(uintptr_t)extra[1];
        else if (extra[0] == (void *)2)
            call->param_bytes = (uint32_t)*(size_t *)extra[1];
        else
            return 1;
    }
    if (call->param_bytes > MAX_PARAMS)
        return 1;
    if (extra)
        memcpy(call->params, (const void *)(uintptr_t)call->src, call->param_bytes);
    for (uint32_t i = 0; params && i < layout->count; i++) {
        uint32_t end = layout->offsets[i] + layout->sizes[i];
        if (end > MAX_PARAMS)
            return 1;
        memcpy(call->params + layout->offsets[i], params[i], layout->sizes[i]);
        call->param_bytes = end > call->param_bytes ? end : call->param_bytes;
    }
    return 0;
}

/* 128 bytes no real driver writes: "STAND-IN", the address, the rank and
 * data type, the dimensions, strides and box, then a counting pattern. */
CUresult cuTensorMapEncodeTiled(void *map, int type, uint32_t rank, void *address, const uint64_t *dims,
                                const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides,
                                int interleave, int swizzle, int l2_promotion, int oob_fill)
{
    (void)element_strides, (void)interleave, (void)swizzle, (void)l2_promotion, (void)oob_fill;
    if ((uintptr_t)map % 64 || rank < 1 || rank > 5)
        return 1; /* CUDA_ERROR_INVALID_VALUE, as the driver's for a map not 64-byte aligned */
    uint8_t bytes[TENSOR_MAP_SIZE];
    for (int i = 0; i < TENSOR_MAP_SIZE; i++)
        bytes[i] = (uint8_t)(0x80 + i);
    uint64_t at = (uint64_t)(uintptr_t)address;
    uint32_t kind[2] = {rank, (uint32_t)type};
    memcpy(bytes, "STAND-IN", 8);
    memcpy(bytes + 8, &at, 8);
    memcpy(bytes + 16, kind, 8);
    memcpy(bytes + 24, dims, rank * 8);                /* up to 64 */
    memcpy(bytes + 64, strides, (rank - 1) * 8);       /* up to 96 */
    memcpy(bytes + 96, box, rank * 4);                 /* up to 116 */
    memcpy(map, bytes, TENSOR_MAP_SIZE);
    memcpy(last_tensor_map, bytes, TENSOR_MAP_SIZE);
    return 0;
}

CUresult cuTensorMapReplaceAddress(void *map, void *address)
{
    if ((uintptr_t)map % 64 || (uintptr_t)address % 16 || memcmp(map, "STAND-IN", 8))
        return 1;
    uint64_t at = (uint64_t)(uintptr_t)address;
    memcpy((uint8_t *)map + 8, &at, 8);
    memcpy(last_tensor_map, map, TENSOR_MAP_SIZE);
    return 0;
}
