/* cudaGetLastError and cudaPeekAtLastError without Python while nothing
 * has failed; cudaGetErrorName and cudaGetErrorString (at the end).
 *
 * Programs check every launch (`kernel<<<...>>>(...); cudaGetLastError();`).
 * Launches are recorded in C (launch_fast_path.c), so a trip into the
 * embedded interpreter for the check would cost more than the launch, and
 * with several host threads it also waits for the GIL.
 *
 * Python keeps the error state (client/state.py: each thread's last
 * error, each device's sticky error).  C only remembers, per thread, that
 * Python found that thread's state clean, on which device and when: Python
 * bumps `error_epoch` whenever it records an error anywhere (any thread's
 * last error, any device's sticky error), so "clean" holds while the epoch
 * is unchanged and the thread is still on the same device.
 *
 * Included into the cffi module after launch_fast_path.c.
 */

static uint64_t error_epoch = 1;           /* 0 never occurs: it means "not known clean" */
static __thread uint64_t clean_at_epoch = 0;
static __thread int clean_on_device = -1;

/* Python: an error was recorded somewhere. */
static void rcuda_errors_changed(void)
{
    __atomic_add_fetch(&error_epoch, 1, __ATOMIC_SEQ_CST);
}

/* The slow path: client/entrypoints.py (take: 1 for cudaGetLastError, which resets it). */
static cudaError_t rcuda_py_last_error(int take);

static cudaError_t last_error(int take)
{
    if (!rcuda_enter())
        return cudaSuccess; /* after the client closed at exit: nothing is pending (native/after_exit.c) */
    uint64_t epoch = __atomic_load_n(&error_epoch, __ATOMIC_ACQUIRE);
    int device = current_device;
    if (clean_at_epoch == epoch && clean_on_device == device)
        return cudaSuccess;
    cudaError_t status = rcuda_py_last_error(take);
    if (status == cudaSuccess) {  /* clean as of `epoch`: a later error bumps it */
        clean_at_epoch = epoch;
        clean_on_device = device;
    }
    return status;
}

RCUDA_EXPORT cudaError_t cudaGetLastError(void)
{
    return last_error(1);
}

RCUDA_EXPORT cudaError_t cudaPeekAtLastError(void)
{
    return last_error(0);
}

/* In a forked child the client starts over: nothing is known clean. */
static void last_error_after_fork(void)
{
    rcuda_errors_changed();
}

/* ------------------------------------------------------------ error names and strings */

#include "error_strings.h"

RCUDA_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    return cuda_error_name(error);
}

RCUDA_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    return cuda_error_string(error);
}
