/* What C answers once the client has closed at the program's exit, for the
 * exports native/routes.ini's [after_exit] gives to C: by then everything
 * the program sent has completed and all it held was released with its
 * sessions, while libraries' destructors still switch devices, make events
 * and free what they held.
 *
 * The thread's current device stays C's to tell and change (native/
 * launch_fast_path.c keeps it); a new event is a handle of no stream's, which
 * every later call takes as complete. */

static cudaError_t rcuda_after_exit_cudaGetDevice(int *device)
{
    if (device == NULL)
        return cudaErrorInvalidValue;
    *device = current_device;
    return cudaSuccess;
}

static cudaError_t rcuda_after_exit_cudaSetDevice(int device)
{
    if (device < 0 || device >= FAST_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    current_device = device;
    return cudaSuccess;
}

/* Handles from a range no allocator and no client object uses. */
static uintptr_t after_exit_events = 0x5F0000000000;

static cudaError_t rcuda_after_exit_cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    (void)flags;
    if (event == NULL)
        return cudaErrorInvalidValue;
    *event = (cudaEvent_t)__atomic_add_fetch(&after_exit_events, 0x10, __ATOMIC_RELAXED);
    return cudaSuccess;
}

static cudaError_t rcuda_after_exit_cudaEventCreate(cudaEvent_t *event)
{
    return rcuda_after_exit_cudaEventCreateWithFlags(event, 0);
}

/* No stream captures (client/runtime/capture.py). */
static cudaError_t rcuda_after_exit_cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    (void)stream;
    if (status == NULL)
        return cudaErrorInvalidValue;
    *status = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

static cudaError_t rcuda_after_exit_cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                              enum cudaStreamCaptureStatus *status)
{
    return rcuda_after_exit_cudaStreamIsCapturing(stream, status);
}

/* The driver's error names and strings are lookups (rcuda/driver_errors.py,
 * as C by native/gen_rules.py); the runtime's are always answered in C
 * (native/last_error.c). */
#include "error_strings.h"

static CUresult error_text(const char *text, const char **pStr)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = text;
    return text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult rcuda_after_exit_cuGetErrorName(CUresult error, const char **pStr)
{
    return error_text(cu_error_name(error), pStr);
}

static CUresult rcuda_after_exit_cuGetErrorString(CUresult error, const char **pStr)
{
    return error_text(cu_error_string(error), pStr);
}

/* A device's primary context: inactive, its work done and released. */
static CUresult rcuda_after_exit_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (flags == NULL || active == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= FAST_MAX_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = 0;
    return CUDA_SUCCESS;
}
