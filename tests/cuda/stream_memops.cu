// Stream memory operations: cuStreamWriteValue32/64, cuStreamWaitValue32/64
// and cuStreamBatchMemOp (their _v2 names through cuda.h, their CUDA 8/9
// names through dlsym), every word read back; waits whose condition holds,
// one stream waiting for a value another writes (issued in an order the sim,
// which runs work in arrival order, can serve), the device attributes, and
// the arguments the driver refuses.  The "unsatisfied" section is the sim's
// own: there a wait that can never be satisfied fails instead of hanging.
// Built with the runtime and linked to libcuda.so.1; run with two GPUs.
// Each section prints "ok NAME"; a failure prints "FAILED ...".
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "driver_check.h"

template <typename T>
__global__ void fill(T *out, T value, int n) {  // tests/cuda/sim_kernels.py's "_Z4fillIiEvPT_S0_i"
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}

typedef CUresult (*Value32Fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*Value64Fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
typedef CUresult (*BatchFn)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);

template <typename F>
static F legacy(const char *name) {  // the CUDA 8/9 export cuda.h no longer names
    F fn = (F)dlsym(RTLD_DEFAULT, name);
    if (!fn) {
        printf("FAILED dlsym %s\n", name);
        exit(1);
    }
    return fn;
}

static uint32_t word32(CUdeviceptr p) {
    uint32_t v;
    DRV(cuMemcpyDtoH(&v, p, sizeof v));
    return v;
}

static uint64_t word64(CUdeviceptr p) {
    uint64_t v;
    DRV(cuMemcpyDtoH(&v, p, sizeof v));
    return v;
}

static void attributes() {
    CUdevice dev;
    DRV(cuDeviceGet(&dev, 0));
    CUdevice_attribute supported[] = {
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1,
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR};
    for (CUdevice_attribute a : supported) {
        int v = -1;
        DRV(cuDeviceGetAttribute(&v, a, dev));
        REQUIRE(v == 1);
    }
    int flush = -1;
    DRV(cuDeviceGetAttribute(&flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, dev));
    REQUIRE(flush == 0);  // the sim's A100 on x86 cannot
    printf("ok attributes\n");
}

static void write_value() {
    CUdeviceptr p;
    DRV(cuMemAlloc(&p, 64));
    DRV(cuMemsetD8(p, 0, 64));
    CUstream s;
    DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    DRV(cuStreamWriteValue32(s, p, 0xdeadbeefu, CU_STREAM_WRITE_VALUE_DEFAULT));
    DRV(cuStreamWriteValue32(s, p + 4, 7, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    DRV(cuStreamWriteValue64(s, p + 8, 0x0123456789abcdefull, 0));
    DRV(cuStreamWriteValue32(s, p + 4, 8, 0));  // in stream order: the later write wins
    DRV(cuStreamSynchronize(s));
    REQUIRE(word32(p) == 0xdeadbeefu && word32(p + 4) == 8 && word64(p + 8) == 0x0123456789abcdefull);
    REQUIRE(word32(p + 16) == 0);  // nothing beyond the words
    // The special streams, and the CUDA 8/9 exports.
    DRV(cuStreamWriteValue32(0, p + 16, 1, 0));
    DRV(cuStreamWriteValue32(CU_STREAM_LEGACY, p + 20, 2, 0));
    DRV(cuStreamWriteValue64(CU_STREAM_PER_THREAD, p + 24, 3, 0));
    DRV(legacy<Value32Fn>("cuStreamWriteValue32")(s, p + 32, 4, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    DRV(legacy<Value64Fn>("cuStreamWriteValue64")(s, p + 40, 0xffffffffffffffffull, 0));
    DRV(legacy<Value32Fn>("cuStreamWriteValue32_ptsz")(0, p + 48, 6, 0));
    DRV(cuCtxSynchronize());
    REQUIRE(word32(p + 16) == 1 && word32(p + 20) == 2 && word64(p + 24) == 3 && word32(p + 32) == 4);
    REQUIRE(word64(p + 40) == 0xffffffffffffffffull && word32(p + 48) == 6);
    // Runtime memory and a runtime stream: one allocation map, one stream kind.
    int *q;
    cudaStream_t rs;
    CHECK(cudaMalloc(&q, 16));
    CHECK(cudaStreamCreate(&rs));
    DRV(cuStreamWriteValue32((CUstream)rs, (CUdeviceptr)q + 4, 99, 0));
    int back[4];
    CHECK(cudaMemcpyAsync(back, q, sizeof back, cudaMemcpyDeviceToHost, rs));
    CHECK(cudaStreamSynchronize(rs));
    REQUIRE(back[1] == 99);
    CHECK(cudaFree(q));
    CHECK(cudaStreamDestroy(rs));
    DRV(cuStreamDestroy(s));
    DRV(cuMemFree(p));
    printf("ok write_value\n");
}

static void wait_value() {
    CUdeviceptr p, data;
    DRV(cuMemAlloc(&p, 16));
    DRV(cuMemAlloc(&data, 64 * sizeof(int)));
    CUstream s;
    DRV(cuStreamCreate(&s, 0));
    DRV(cuMemsetD32(p, 5, 1));
    DRV(cuStreamWaitValue32(s, p, 5, CU_STREAM_WAIT_VALUE_GEQ));
    DRV(cuStreamWaitValue32(s, p, 3, CU_STREAM_WAIT_VALUE_GEQ));
    DRV(cuStreamWaitValue32(s, p, 0xfffffff0u, CU_STREAM_WAIT_VALUE_GEQ));  // cyclic: 5 - 0xfffffff0 = 21 >= 0
    DRV(cuStreamWaitValue32(s, p, 5, CU_STREAM_WAIT_VALUE_EQ));
    DRV(cuStreamWaitValue32(s, p, 4, CU_STREAM_WAIT_VALUE_AND));
    DRV(cuStreamWaitValue32(s, p, 0x0000fff0u, CU_STREAM_WAIT_VALUE_NOR));  // ~(5 | 0xfff0) != 0
    DRV(legacy<Value32Fn>("cuStreamWaitValue32")(s, p, 1, CU_STREAM_WAIT_VALUE_AND));
    // 64 bits: the high word counts.
    uint64_t big = 0x100000005ull;
    DRV(cuMemcpyHtoD(p + 8, &big, sizeof big));
    DRV(cuStreamWaitValue64(s, p + 8, 0x100000005ull, CU_STREAM_WAIT_VALUE_EQ));
    DRV(cuStreamWaitValue64(s, p + 8, 0x100000000ull, CU_STREAM_WAIT_VALUE_GEQ));
    DRV(cuStreamWaitValue64(s, p + 8, 0x100000000ull, CU_STREAM_WAIT_VALUE_AND));
    DRV(legacy<Value64Fn>("cuStreamWaitValue64")(s, p + 8, 0xfffffffffffffff0ull, CU_STREAM_WAIT_VALUE_GEQ));
    // The work after the waits runs, in order.
    fill<int><<<1, 64, 0, (cudaStream_t)s>>>((int *)data, 11, 64);
    CHECK(cudaGetLastError());
    DRV(cuStreamWriteValue32(s, p, 6, 0));
    DRV(cuStreamSynchronize(s));
    int out[64];
    DRV(cuMemcpyDtoH(out, data, sizeof out));
    for (int v : out) REQUIRE(v == 11);
    REQUIRE(word32(p) == 6);
    DRV(cuStreamDestroy(s));
    DRV(cuMemFree(p));
    DRV(cuMemFree(data));
    printf("ok wait_value\n");
}

// One stream waits for a value another writes, each write issued before the
// wait that needs it (the sim runs work in arrival order; a GPU would take
// them in any order), in both directions, with work behind every wait.
static void two_streams() {
    CUdeviceptr flags, data, out;
    const int n = 256;
    DRV(cuMemAlloc(&flags, 16));
    DRV(cuMemAlloc(&data, n * sizeof(int)));
    DRV(cuMemAlloc(&out, n * sizeof(int)));
    DRV(cuMemsetD8(flags, 0, 16));
    CUstream producer, consumer;
    DRV(cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING));
    DRV(cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING));
    for (int round = 1; round <= 3; round++) {
        fill<int><<<1, n, 0, (cudaStream_t)producer>>>((int *)data, 100 + round, n);
        DRV(cuStreamWriteValue32(producer, flags, round, 0));
        DRV(cuStreamWaitValue32(consumer, flags, round, CU_STREAM_WAIT_VALUE_GEQ));
        DRV(cuMemcpyDtoDAsync(out, data, n * sizeof(int), consumer));
        DRV(cuStreamWriteValue64(consumer, flags + 8, (uint64_t)round << 32, 0));  // "consumed"
        DRV(cuStreamWaitValue64(producer, flags + 8, (uint64_t)round << 32, CU_STREAM_WAIT_VALUE_EQ));
    }
    DRV(cuStreamSynchronize(producer));
    DRV(cuStreamSynchronize(consumer));
    int host[n];
    DRV(cuMemcpyDtoH(host, out, sizeof host));
    for (int v : host) REQUIRE(v == 103);
    REQUIRE(word32(flags) == 3 && word64(flags + 8) == 3ull << 32);
    DRV(cuStreamDestroy(producer));
    DRV(cuStreamDestroy(consumer));
    DRV(cuMemFree(flags));
    DRV(cuMemFree(data));
    DRV(cuMemFree(out));
    printf("ok two_streams\n");
}

static CUstreamBatchMemOpParams write_op(CUstreamBatchMemOpType type, CUdeviceptr at, uint64_t value) {
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof op);
    op.writeValue.operation = type;
    op.writeValue.address = at;
    if (type == CU_STREAM_MEM_OP_WRITE_VALUE_64)
        op.writeValue.value64 = value;
    else
        op.writeValue.value = (cuuint32_t)value;
    return op;
}

static CUstreamBatchMemOpParams wait_op(CUstreamBatchMemOpType type, CUdeviceptr at, uint64_t value,
                                        unsigned flags) {
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof op);
    op.waitValue.operation = type;
    op.waitValue.address = at;
    if (type == CU_STREAM_MEM_OP_WAIT_VALUE_64)
        op.waitValue.value64 = value;
    else
        op.waitValue.value = (cuuint32_t)value;
    op.waitValue.flags = flags;
    return op;
}

static void batch() {
    CUdeviceptr p;
    DRV(cuMemAlloc(&p, 64));
    DRV(cuMemsetD8(p, 0, 64));
    CUstream s;
    DRV(cuStreamCreate(&s, 0));
    CUstreamBatchMemOpParams ops[7];
    ops[0] = write_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, p, 0x11111111u);
    ops[1] = write_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, p + 8, 0x2222222233333333ull);
    ops[2] = wait_op(CU_STREAM_MEM_OP_WAIT_VALUE_32, p, 0x11111111u, CU_STREAM_WAIT_VALUE_EQ);  // the batch's own write
    memset(&ops[3], 0, sizeof ops[3]);
    ops[3].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    ops[3].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    ops[4] = wait_op(CU_STREAM_MEM_OP_WAIT_VALUE_64, p + 8, 0x2222222200000000ull, CU_STREAM_WAIT_VALUE_GEQ);
    ops[5] = write_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, p, 0x44444444u);  // in order: after the wait on p
    ops[6] = write_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, p + 16, 5);
    DRV(cuStreamBatchMemOp(s, 7, ops, 0));
    DRV(cuStreamSynchronize(s));
    REQUIRE(word32(p) == 0x44444444u && word64(p + 8) == 0x2222222233333333ull && word32(p + 16) == 5);
    DRV(cuStreamBatchMemOp(s, 0, NULL, 0));  // nothing to do
    // CUDA 8's export: the same, but for the barrier (the v2 API's).
    BatchFn v1 = legacy<BatchFn>("cuStreamBatchMemOp");
    CUstreamBatchMemOpParams two[2] = {write_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, p + 20, 6),
                                       wait_op(CU_STREAM_MEM_OP_WAIT_VALUE_32, p + 20, 6, CU_STREAM_WAIT_VALUE_EQ)};
    DRV(v1(s, 2, two, 0));
    DRV(legacy<BatchFn>("cuStreamBatchMemOp_v2_ptsz")(0, 2, two, 0));
    DRV(cuStreamSynchronize(s));
    REQUIRE(word32(p + 20) == 6);
    DRV_EXPECT(v1(s, 7, ops, 0), CUDA_ERROR_INVALID_VALUE);
    // What the driver refuses, enqueuing nothing: the first write would have made p 0x77.
    ops[0] = write_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, p, 0x77);
    DRV_EXPECT(cuStreamBatchMemOp(s, 7, ops, 1), CUDA_ERROR_INVALID_VALUE);            // flags must be 0
    DRV_EXPECT(cuStreamBatchMemOp(s, 256, ops, 0), CUDA_ERROR_INVALID_VALUE);          // count < 256
    DRV_EXPECT(cuStreamBatchMemOp(s, 2, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CUstreamBatchMemOpParams bad[2] = {ops[0], ops[0]};
    bad[1].operation = (CUstreamBatchMemOpType)99;
    DRV_EXPECT(cuStreamBatchMemOp(s, 2, bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad[1] = write_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, p + 2, 1);  // misaligned
    DRV_EXPECT(cuStreamBatchMemOp(s, 2, bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad[1] = write_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, p + 64, 1);  // past the allocation's end
    DRV_EXPECT(cuStreamBatchMemOp(s, 2, bad, 0), CUDA_ERROR_INVALID_VALUE);
    memset(&bad[1], 0, sizeof bad[1]);
    bad[1].flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
    DRV_EXPECT(cuStreamBatchMemOp(s, 2, bad, 0), CUDA_ERROR_NOT_SUPPORTED);  // CAN_FLUSH_REMOTE_WRITES is 0
    bad[1].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    bad[1].memoryBarrier.flags = 2;
    DRV_EXPECT(cuStreamBatchMemOp(s, 2, bad, 0), CUDA_ERROR_INVALID_VALUE);
    DRV(cuStreamSynchronize(s));
    REQUIRE(word32(p) == 0x44444444u);
    DRV(cuStreamDestroy(s));
    DRV(cuMemFree(p));
    printf("ok batch\n");
}

static void bad_arguments() {
    CUdeviceptr p, freed;
    DRV(cuMemAlloc(&p, 16));
    DRV(cuMemAlloc(&freed, 16));
    DRV(cuMemFree(freed));
    DRV(cuMemsetD8(p, 0, 16));
    uint64_t on_host = 0;
    CUdeviceptr host = (CUdeviceptr)(uintptr_t)&on_host;
    DRV_EXPECT(cuStreamWriteValue32(0, freed, 1, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamWriteValue32(0, host, 1, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamWriteValue32(0, 0, 1, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamWriteValue32(0, p + 16, 1, 0), CUDA_ERROR_INVALID_VALUE);  // just past the end
    DRV_EXPECT(cuStreamWriteValue64(0, p + 12, 1, 0), CUDA_ERROR_INVALID_VALUE);  // misaligned
    DRV_EXPECT(cuStreamWaitValue32(0, p + 1, 0, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamWaitValue64(0, host, 0, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamWriteValue32(0, p, 1, 2), CUDA_ERROR_INVALID_VALUE);        // no such flag
    DRV_EXPECT(cuStreamWaitValue32(0, p, 0, 4), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuStreamWaitValue32(0, p, 0, CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_FLUSH),
               CUDA_ERROR_NOT_SUPPORTED);
    // Managed memory is refused, as CUDA does; mapped host memory is not rcuda's.
    CUdeviceptr managed;
    DRV(cuMemAllocManaged(&managed, 16, CU_MEM_ATTACH_GLOBAL));
    DRV_EXPECT(cuStreamWriteValue32(0, managed, 1, 0), CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemFree(managed));
    void *mapped;
    CUdeviceptr mapped_device;
    DRV(cuMemHostAlloc(&mapped, 16, CU_MEMHOSTALLOC_DEVICEMAP));
    DRV(cuMemHostGetDevicePointer(&mapped_device, mapped, 0));
    DRV_EXPECT(cuStreamWriteValue32(0, mapped_device, 1, 0), CUDA_ERROR_NOT_SUPPORTED);
    DRV(cuMemFreeHost(mapped));
    DRV(cuCtxSynchronize());  // nothing was enqueued, nothing failed
    REQUIRE(word64(p) == 0);
    DRV(cuMemFree(p));
    printf("ok bad_arguments\n");
}

static void two_gpus() {
    int count = 0;
    DRV(cuDeviceGetCount(&count));
    REQUIRE(count >= 2);
    CUdeviceptr p0, p1;
    DRV(cuMemAlloc(&p0, 16));
    CUcontext ctx1, ctx0;
    CUdevice dev1;
    DRV(cuCtxGetCurrent(&ctx0));
    DRV(cuDeviceGet(&dev1, 1));
    DRV(cuDevicePrimaryCtxRetain(&ctx1, dev1));
    DRV(cuCtxSetCurrent(ctx1));
    DRV(cuMemAlloc(&p1, 16));
    CUstream s1;
    DRV(cuStreamCreate(&s1, 0));
    DRV(cuStreamWriteValue32(s1, p1, 41, 0));
    DRV(cuStreamWaitValue32(s1, p1, 41, CU_STREAM_WAIT_VALUE_EQ));
    DRV(cuStreamSynchronize(s1));
    REQUIRE(word32(p1) == 41);
    DRV_EXPECT(cuStreamWriteValue32(s1, p0, 1, 0), CUDA_ERROR_NOT_SUPPORTED);  // GPU0's memory in GPU1's stream
    DRV(cuStreamDestroy(s1));
    DRV(cuMemFree(p1));
    DRV(cuCtxSetCurrent(ctx0));
    DRV(cuDevicePrimaryCtxRelease(dev1));
    DRV(cuMemFree(p0));
    printf("ok two_gpus\n");
}

// The sim runs work in arrival order: a wait whose condition does not hold
// when it arrives could only be satisfied by work issued after it, which
// cannot run first.  It fails, reported at the next synchronisation, instead
// of hanging; the operations after it in its batch do not run.  (On a GPU
// this section would hang.)
static void unsatisfied() {
    CUdeviceptr p;
    DRV(cuMemAlloc(&p, 16));
    DRV(cuMemsetD32(p, 1, 4));
    CUstream s;
    DRV(cuStreamCreate(&s, 0));
    DRV(cuStreamWaitValue32(s, p, 2, CU_STREAM_WAIT_VALUE_EQ));  // enqueued: fine so far
    DRV_EXPECT(cuStreamSynchronize(s), CUDA_ERROR_NOT_SUPPORTED);
    DRV(cuStreamSynchronize(s));  // not sticky
    CUstreamBatchMemOpParams ops[2] = {wait_op(CU_STREAM_MEM_OP_WAIT_VALUE_64, p, 0, CU_STREAM_WAIT_VALUE_NOR),
                                       write_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, p + 8, 9)};
    DRV(cuMemsetD32(p, 0xffffffffu, 2));
    DRV(cuStreamBatchMemOp(s, 2, ops, 0));  // ~(0xffff...ffff | 0) == 0: never
    DRV_EXPECT(cuStreamSynchronize(s), CUDA_ERROR_NOT_SUPPORTED);
    REQUIRE(word32(p + 8) == 1);  // the write after the wait did not run
    DRV(cuStreamDestroy(s));
    DRV(cuMemFree(p));
    printf("ok unsatisfied\n");
}

int main(int argc, char **argv) {
    DRV(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    DRV(cuDeviceGet(&dev, 0));
    DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    DRV(cuCtxSetCurrent(ctx));
    struct { const char *name; void (*run)(); } sections[] = {
        {"attributes", attributes}, {"write_value", write_value}, {"wait_value", wait_value},
        {"two_streams", two_streams}, {"batch", batch}, {"bad_arguments", bad_arguments},
        {"two_gpus", two_gpus}, {"unsatisfied", unsatisfied},
    };
    for (auto &section : sections) {
        bool chosen = argc == 1;
        for (int i = 1; i < argc; i++) chosen |= strcmp(argv[i], section.name) == 0;
        if (chosen) section.run();
    }
    printf("PASSED stream_memops\n");
    return 0;
}
