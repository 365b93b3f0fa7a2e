/* A stand-in for the CUDA driver library, with just the entry points the
 * GPU server's batch executor calls (native/batch_executor.c), so that its
 * parsing, ordering and errors are checked on machines without a GPU.
 *
 * Device memory is host memory: a memset or a copy writes the bytes at
 * the addresses given.  A launch writes nothing; it is recorded (the
 * function, the shape, the stream, the context current then, a copy of
 * the parameter buffer) for the test to read back.  Every call is logged
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

int stand_in_call_count(void) { return call_count; }
const struct stand_in_call *stand_in_call_at(int i) { return &calls[i]; }
void stand_in_reset(void) { call_count = 0; failing_function = NULL; events_answer = 0; }
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
    if (params)
        return 1; /* CUDA_ERROR_INVALID_VALUE: the executor passes the packed buffer in `extra` */
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
    memcpy(call->params, (const void *)(uintptr_t)call->src, call->param_bytes);
    return 0;
}
