// The capture queries and the driver's error log, through both APIs: no
// stream is ever capturing (rcuda has no CUDA graphs yet, and says so at
// cudaStreamBeginCapture), a thread's capture mode is kept, and the log a
// program reads is empty.  Prints "PASSED capture_queries".
#include <cstring>
#include <cuda.h>
#include "driver_check.h"

static void CUDA_CB never_called(void *, CUlogLevel, char *, size_t) {}

int main()
{
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    CHECK(cudaStreamIsCapturing(stream, &status));
    REQUIRE(status == cudaStreamCaptureStatusNone);
    status = cudaStreamCaptureStatusActive;
    CHECK(cudaStreamIsCapturing(0, &status));  // the legacy default stream
    REQUIRE(status == cudaStreamCaptureStatusNone);
    status = cudaStreamCaptureStatusActive;
    CHECK(cudaStreamGetCaptureInfo(cudaStreamPerThread, &status));
    REQUIRE(status == cudaStreamCaptureStatusNone);
    EXPECT_AND_CLEAR(cudaStreamIsCapturing(stream, nullptr), cudaErrorInvalidValue);

    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    REQUIRE(mode == cudaStreamCaptureModeGlobal);  // every thread starts in global mode
    mode = cudaStreamCaptureModeThreadLocal;
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    REQUIRE(mode == cudaStreamCaptureModeRelaxed);
    mode = (cudaStreamCaptureMode)7;
    EXPECT_AND_CLEAR(cudaThreadExchangeStreamCaptureMode(&mode), cudaErrorInvalidValue);

    // The driver's faces of the same answers.
    CUstreamCaptureStatus driver_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    DRV(cuStreamIsCapturing((CUstream)stream, &driver_status));
    REQUIRE(driver_status == CU_STREAM_CAPTURE_STATUS_NONE);
    driver_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    cuuint64_t id = 0;
    DRV(cuStreamGetCaptureInfo((CUstream)stream, &driver_status, &id, nullptr, nullptr, nullptr, nullptr));
    REQUIRE(driver_status == CU_STREAM_CAPTURE_STATUS_NONE);
    CUstreamCaptureMode driver_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    DRV(cuThreadExchangeStreamCaptureMode(&driver_mode));
    REQUIRE(driver_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);  // the runtime's setting above

    CHECK(cudaStreamDestroy(stream));
    EXPECT_AND_CLEAR(cudaStreamIsCapturing(stream, &status), cudaErrorInvalidResourceHandle);

    // The error log: callbacks are kept (and never called), the log is empty.
    CUlogsCallbackHandle handle = nullptr;
    DRV(cuLogsRegisterCallback(never_called, nullptr, &handle));
    REQUIRE(handle != nullptr);
    REQUIRE(cuLogsRegisterCallback(nullptr, nullptr, &handle) == CUDA_ERROR_INVALID_VALUE);
    CUlogIterator iterator = 99;
    DRV(cuLogsCurrent(&iterator, 0));
    char buffer[64];
    memset(buffer, 'x', sizeof buffer);
    size_t size = sizeof buffer;
    DRV(cuLogsDumpToMemory(&iterator, buffer, &size, 0));
    REQUIRE(size == 0 && buffer[0] == '\0');
    REQUIRE(cuLogsCurrent(&iterator, 1) == CUDA_ERROR_INVALID_VALUE);
    DRV(cuLogsUnregisterCallback(handle));
    REQUIRE(cuLogsUnregisterCallback(handle) == CUDA_ERROR_INVALID_VALUE);
    cudaLogsCallbackHandle runtime_handle = nullptr;
    CHECK(cudaLogsRegisterCallback((cudaLogsCallback_t)never_called, nullptr, &runtime_handle));
    CHECK(cudaLogsUnregisterCallback(runtime_handle));

    REQUIRE(cudaGetLastError() == cudaSuccess);
    printf("PASSED capture_queries\n");
    return 0;
}
