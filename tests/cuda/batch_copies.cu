// Batches of copies: cudaMemcpyBatchAsync and the driver's cuMemcpyBatchAsync
// (its CUDA 13 form, and CUDA 12.8's with failIdx).  Every copy's bytes are
// read back: device to device, uploads and downloads from pageable and
// pinned memory, host to host, zero-size entries, managed memory, copies
// involving a second GPU, batches longer than one message; the source
// access orders; and the arguments CUDA refuses, which copy nothing.
// Built with the runtime and linked to libcuda.so.1; run with two GPUs.
// Each section prints "ok NAME"; a failure prints "FAILED ...".
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

#include "driver_check.h"


static const size_t N = 4096;

static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)(i * 131 + seed * 7 + (i >> 8)); }

static void fill(void *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = pattern(i, seed);
}

static bool holds(const void *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != pattern(i, seed)) return false;
    return true;
}

// `n` bytes of device memory at `d` hold pattern `seed`.
static bool device_holds(const void *d, size_t n, unsigned seed) {
    std::vector<unsigned char> back(n);
    CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
    return holds(back.data(), n, seed);
}

static bool all_bytes(const void *d, size_t n, unsigned char value) {
    std::vector<unsigned char> back(n);
    CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        if (back[i] != value) return false;
    return true;
}

static cudaMemcpyAttributes attribute(cudaMemcpySrcAccessOrder order, unsigned flags = 0) {
    cudaMemcpyAttributes a;
    memset(&a, 0, sizeof a);
    a.srcAccessOrder = order;
    a.flags = flags;
    return a;
}

// A batch whose copies all take one attribute.
static cudaError_t batch(std::vector<void *> &dsts, std::vector<const void *> &srcs, std::vector<size_t> &sizes,
                         cudaStream_t stream, cudaMemcpySrcAccessOrder order = cudaMemcpySrcAccessOrderStream) {
    cudaMemcpyAttributes a = attribute(order);
    size_t first = 0;
    return cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &a, &first, 1, stream);
}

static void copies() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    unsigned char *da, *db;
    CHECK(cudaMalloc(&da, 8 * N));
    CHECK(cudaMalloc(&db, 8 * N));
    CHECK(cudaMemset(db, 0, 8 * N));
    std::vector<unsigned char> a(8 * N), page(2 * N), out(N), out2(100), page2(100);
    fill(a.data(), 8 * N, 1);
    CHECK(cudaMemcpy(da, a.data(), 8 * N, cudaMemcpyHostToDevice));
    fill(page.data(), 2 * N, 2);
    fill(page2.data(), 100, 3);
    unsigned char *pin, *pout;
    CHECK(cudaMallocHost(&pin, 2 * N));
    CHECK(cudaMallocHost(&pout, N));
    fill(pin + N, N, 4);
    // Earlier work in the stream the batch must come after: a memset of a
    // source, and a download into a pinned source read in stream order.
    CHECK(cudaMemsetAsync(da + 6 * N, 0x5A, N, s));
    CHECK(cudaMemcpyAsync(pin, da + 7 * N, N, cudaMemcpyDeviceToHost, s));

    std::vector<void *> dsts = {db, db + N, db + 2 * N, out.data(), pout, db + 3 * N, nullptr, out2.data(),
                                db + 4 * N, db + 5 * N, db + 6 * N, db + 7 * N};
    std::vector<const void *> srcs = {da + N, page.data(), pin, da, da + 2 * N, da + 3 * N, nullptr, page2.data(),
                                      da + 4 * N, pin + N, da + 6 * N, page.data() + N};
    std::vector<size_t> sizes = {N, N, N, N, N, 0, 0, 100, 1, N, N, N};
    cudaMemcpyAttributes attrs[3] = {attribute(cudaMemcpySrcAccessOrderStream),
                                     attribute(cudaMemcpySrcAccessOrderDuringApiCall),
                                     attribute(cudaMemcpySrcAccessOrderAny, cudaMemcpyFlagPreferOverlapWithCompute)};
    size_t firsts[3] = {0, 9, 11};
    CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), attrs, firsts, 3, s));
    // DuringApiCall: the source was read before the call returned.
    memset(pin + N, 0xEE, N);
    CHECK(cudaStreamSynchronize(s));

    std::vector<unsigned char> back(8 * N);
    CHECK(cudaMemcpy(back.data(), db, 8 * N, cudaMemcpyDeviceToHost));
    REQUIRE(memcmp(back.data(), a.data() + N, N) == 0);                 // device to device
    REQUIRE(memcmp(back.data() + N, page.data(), N) == 0);              // from pageable memory
    REQUIRE(memcmp(back.data() + 2 * N, a.data() + 7 * N, N) == 0);     // pinned, after the download into it
    REQUIRE(memcmp(out.data(), a.data(), N) == 0);                      // to pageable memory
    REQUIRE(memcmp(pout, a.data() + 2 * N, N) == 0);                    // to pinned memory
    for (size_t i = 3 * N; i < 4 * N; i++) REQUIRE(back[i] == 0);       // a zero-size entry copies nothing
    REQUIRE(memcmp(out2.data(), page2.data(), 100) == 0);               // host to host
    REQUIRE(back[4 * N] == a[4 * N] && back[4 * N + 1] == 0);           // one byte
    REQUIRE(holds(back.data() + 5 * N, N, 4));                          // read during the call
    for (size_t i = 6 * N; i < 7 * N; i++) REQUIRE(back[i] == 0x5A);    // after the memset in the stream
    REQUIRE(memcmp(back.data() + 7 * N, page.data() + N, N) == 0);      // order "any"

    CHECK(cudaFreeHost(pin));
    CHECK(cudaFreeHost(pout));
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaStreamDestroy(s));
    printf("ok copies\n");
}

// More copies than one message carries, small uploads past one message's
// count, and an upload too large to join the message.
static void large() {
    const size_t count = 5000, piece = 64, big = 3 << 20;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    unsigned char *src, *dst, *up;
    CHECK(cudaMalloc(&src, count * piece));
    CHECK(cudaMalloc(&dst, count * piece));
    CHECK(cudaMalloc(&up, big + count * 16));
    std::vector<unsigned char> host(count * piece), ups(big + count * 16);
    fill(host.data(), host.size(), 5);
    fill(ups.data(), ups.size(), 6);
    CHECK(cudaMemcpy(src, host.data(), host.size(), cudaMemcpyHostToDevice));
    std::vector<void *> dsts;
    std::vector<const void *> srcs;
    std::vector<size_t> sizes;
    for (size_t i = 0; i < count; i++) {  // reversed order of pieces
        dsts.push_back(dst + (count - 1 - i) * piece);
        srcs.push_back(src + i * piece);
        sizes.push_back(piece);
        dsts.push_back(up + big + i * 16);
        srcs.push_back(ups.data() + big + i * 16);
        sizes.push_back(16);
    }
    dsts.push_back(up);
    srcs.push_back(ups.data());
    sizes.push_back(big);
    CHECK(batch(dsts, srcs, sizes, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<unsigned char> back(count * piece), upback(ups.size());
    CHECK(cudaMemcpy(back.data(), dst, back.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++)
        REQUIRE(memcmp(back.data() + (count - 1 - i) * piece, host.data() + i * piece, piece) == 0);
    CHECK(cudaMemcpy(upback.data(), up, upback.size(), cudaMemcpyDeviceToHost));
    REQUIRE(upback == ups);
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
    CHECK(cudaFree(up));
    CHECK(cudaStreamDestroy(s));
    printf("ok large\n");
}

static void managed() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    unsigned char *m, *m2, *d;
    CHECK(cudaMallocManaged(&m, N));
    CHECK(cudaMallocManaged(&m2, N));
    CHECK(cudaMalloc(&d, 2 * N));
    fill(m, N, 7);
    std::vector<unsigned char> a(N);
    fill(a.data(), N, 8);
    CHECK(cudaMemcpy(d + N, a.data(), N, cudaMemcpyHostToDevice));
    std::vector<void *> dsts = {d, m2};
    std::vector<const void *> srcs = {m, d + N};
    std::vector<size_t> sizes = {N, N};
    CHECK(batch(dsts, srcs, sizes, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(device_holds(d, N, 7));
    REQUIRE(holds(m2, N, 8));
    CHECK(cudaFree(m));
    CHECK(cudaFree(m2));
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
    printf("ok managed\n");
}

// The batch's stream is on GPU0; copies reach GPU1's memory too.
static void two_gpus() {
    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices));
    REQUIRE(devices >= 2);
    unsigned char *d1;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&d1, 4 * N));
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    unsigned char *d0;
    CHECK(cudaMalloc(&d0, 2 * N));
    std::vector<unsigned char> a(N), b(N), c(N), out(N);
    fill(a.data(), N, 9);
    fill(b.data(), N, 10);
    fill(c.data(), N, 15);
    CHECK(cudaMemcpy(d0, b.data(), N, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d1 + 2 * N, c.data(), N, cudaMemcpyHostToDevice));
    std::vector<void *> dsts = {d1, d1 + N, d0 + N, out.data()};
    std::vector<const void *> srcs = {a.data(), d0, d1 + 2 * N, d1 + 2 * N};
    std::vector<size_t> sizes = {N, N, N, N};
    CHECK(batch(dsts, srcs, sizes, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(device_holds(d1, N, 9));        // host to GPU1
    REQUIRE(device_holds(d1 + N, N, 10));   // GPU0 to GPU1
    REQUIRE(device_holds(d0 + N, N, 15));   // GPU1 to GPU0
    REQUIRE(holds(out.data(), N, 15));      // GPU1 to the host
    CHECK(cudaFree(d0));
    CHECK(cudaFree(d1));
    CHECK(cudaStreamDestroy(s));
    printf("ok two_gpus\n");
}

// Arguments CUDA refuses with cudaErrorInvalidValue; a refused batch copies nothing.
static void bad_arguments() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    unsigned char *d;
    CHECK(cudaMalloc(&d, 2 * N));
    CHECK(cudaMemset(d, 0, 2 * N));
    std::vector<unsigned char> host(N);
    fill(host.data(), N, 11);
    void *dsts[2] = {d, d + N};
    const void *srcs[2] = {host.data(), host.data()};
    size_t sizes[2] = {N, N};
    cudaMemcpyAttributes good = attribute(cudaMemcpySrcAccessOrderStream);
    cudaMemcpyAttributes two[2] = {good, good};
    size_t zero = 0, one = 1, firsts[2] = {0, 1}, backwards[2] = {0, 0}, past[2] = {0, 2};
    const cudaError_t bad = cudaErrorInvalidValue;

    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 0, &good, &zero, 1, s), bad);        // no copies
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(nullptr, srcs, sizes, 2, &good, &zero, 1, s), bad);
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, nullptr, sizes, 2, &good, &zero, 1, s), bad);
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, nullptr, 2, &good, &zero, 1, s), bad);
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, nullptr, &zero, 1, s), bad);
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &good, nullptr, 1, s), bad);
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &good, &zero, 0, s), bad);       // no attributes
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, two, firsts, 2, s), bad);        // more than copies
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &good, &one, 1, s), bad);        // not from 0
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, two, backwards, 2, s), bad);     // not increasing
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, two, past, 2, s), bad);          // past count
    cudaMemcpyAttributes invalid_order = attribute(cudaMemcpySrcAccessOrderInvalid);
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &invalid_order, &zero, 1, s), bad);
    cudaMemcpyAttributes unknown_order = attribute((cudaMemcpySrcAccessOrder)7);
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &unknown_order, &zero, 1, s), bad);
    cudaMemcpyAttributes unknown_flag = attribute(cudaMemcpySrcAccessOrderStream, 0x2);
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &unknown_flag, &zero, 1, s), bad);
    // A bad second attribute: the first one's copies do not happen either.
    cudaMemcpyAttributes good_then_bad[2] = {good, invalid_order};
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, good_then_bad, firsts, 2, s), bad);
#if !defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &good, &zero, 1, 0), bad);      // the legacy stream
#endif
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &good, &zero, 1, cudaStreamLegacy), bad);

    // A bad copy anywhere: nothing is copied, the good copy before it neither.
    size_t past_end[2] = {N, N + 1};
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, srcs, past_end, 2, &good, &zero, 1, s), bad);
    const void *null_source[2] = {host.data(), nullptr};
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(dsts, null_source, sizes, 2, &good, &zero, 1, s), bad);
    void *device_to_device[2] = {d, d + N};
    const void *overlapping_end[2] = {d + N, d + N + 1};  // the source runs past d's end
    EXPECT_AND_CLEAR(cudaMemcpyBatchAsync(device_to_device, overlapping_end, sizes, 2, &good, &zero, 1, s), bad);
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(all_bytes(d, 2 * N, 0));

    // NULL pointers of a zero-size copy are no error.
    size_t nothing_then_n[2] = {0, N};
    void *null_then_d[2] = {nullptr, d};
    const void *null_then_host[2] = {nullptr, host.data()};
    CHECK(cudaMemcpyBatchAsync(null_then_d, null_then_host, nothing_then_n, 2, &good, &zero, 1, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(device_holds(d, N, 11));
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
    printf("ok bad_arguments\n");
}

// The per-thread default stream may take a batch, by its handle or, built
// with --default-stream per-thread, as stream 0 (the _ptsz export).
static void default_streams() {
    unsigned char *d;
    CHECK(cudaMalloc(&d, N));
    std::vector<unsigned char> host(N);
    fill(host.data(), N, 12);
    std::vector<void *> dsts = {d};
    std::vector<const void *> srcs = {host.data()};
    std::vector<size_t> sizes = {N};
    CHECK(batch(dsts, srcs, sizes, cudaStreamPerThread));
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    REQUIRE(device_holds(d, N, 12));
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
    CHECK(cudaMemset(d, 0, N));
    CHECK(batch(dsts, srcs, sizes, 0));
    CHECK(cudaStreamSynchronize(0));
    REQUIRE(device_holds(d, N, 12));
    printf("ok default_streams per-thread\n");
#else
    printf("ok default_streams legacy\n");
#endif
    CHECK(cudaFree(d));
}

// CUDA 12.8's cuMemcpyBatchAsync, with failIdx (cuda.h names only the _v2 one).
typedef CUresult (*BatchWithFailIdx)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *,
                                     size_t, size_t *, CUstream);

static void driver() {
    DRV(cuInit(0));
    CUstream s;
    DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr da, db;
    DRV(cuMemAlloc(&da, 2 * N));
    DRV(cuMemAlloc(&db, 2 * N));
    std::vector<unsigned char> a(N), b(N), out(N);
    fill(a.data(), N, 13);
    fill(b.data(), N, 14);
    DRV(cuMemcpyHtoD(da, a.data(), N));
    CUmemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t zero = 0;
    CUdeviceptr dsts[3] = {db, db + N, (CUdeviceptr)(uintptr_t)out.data()};
    CUdeviceptr srcs[3] = {da, (CUdeviceptr)(uintptr_t)b.data(), da};
    size_t sizes[3] = {N, N, N};
    DRV(cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &zero, 1, s));
    DRV(cuStreamSynchronize(s));
    REQUIRE(device_holds((void *)db, N, 13));
    REQUIRE(device_holds((void *)(db + N), N, 14));
    REQUIRE(holds(out.data(), N, 13));

    BatchWithFailIdx legacy = (BatchWithFailIdx)dlsym(RTLD_DEFAULT, "cuMemcpyBatchAsync");
    REQUIRE(legacy != nullptr);
    DRV(cuMemsetD8(db, 0, 2 * N));
    size_t fail = 12345;
    DRV(legacy(dsts, srcs, sizes, 3, &attr, &zero, 1, &fail, s));
    DRV(cuStreamSynchronize(s));
    REQUIRE(device_holds((void *)(db + N), N, 14));
    CUdeviceptr bad_srcs[3] = {da, (CUdeviceptr)(uintptr_t)b.data(), da + N + 1};  // runs past da's end
    DRV_EXPECT(legacy(dsts, bad_srcs, sizes, 3, &attr, &zero, 1, &fail, s), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(fail == 2);
    size_t one = 1;
    DRV_EXPECT(legacy(dsts, srcs, sizes, 3, &attr, &one, 1, &fail, s), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(fail == SIZE_MAX);  // no copy in particular
    DRV_EXPECT(cuMemcpyBatchAsync(dsts, bad_srcs, sizes, 3, &attr, &zero, 1, s), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &zero, 1, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE);
    cudaGetLastError();
    DRV(cuMemFree(da));
    DRV(cuMemFree(db));
    DRV(cuStreamDestroy(s));
    printf("ok driver\n");
}

// 3-D batches: cudaMemcpy3DBatchAsync between a pitched box, a CUDA array
// and packed host memory, and the driver's cuMemcpy3DBatchAsync (both
// forms); a refused batch names its copy (failIdx) and copies nothing.
typedef CUresult (*Batch3DWithFailIdx)(size_t, CUDA_MEMCPY3D_BATCH_OP *, size_t *, unsigned long long, CUstream);

static cudaMemcpy3DOperand pointer_operand(void *p, size_t row_length, size_t layer_height) {
    cudaMemcpy3DOperand o;
    memset(&o, 0, sizeof o);
    o.type = cudaMemcpyOperandTypePointer;
    o.op.ptr.ptr = p;
    o.op.ptr.rowLength = row_length;
    o.op.ptr.layerHeight = layer_height;
    return o;
}

static void three_d() {
    const size_t W = 24, H = 5, D = 3;  // floats, rows, slices
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<float> host(W * H * D), back(W * H * D, -1.0f), from_array(W * H * D, -1.0f);
    for (size_t i = 0; i < host.size(); i++) host[i] = (float)i * 0.5f;
    cudaPitchedPtr box;
    CHECK(cudaMalloc3D(&box, make_cudaExtent(W * sizeof(float), H, D)));
    cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
    cudaArray_t array;
    CHECK(cudaMalloc3DArray(&array, &desc, make_cudaExtent(W, H, D)));
    cudaMemcpy3DBatchOp ops[2];
    memset(ops, 0, sizeof ops);
    // host (packed: rowLength 0) -> pitched box; host -> array
    ops[0].src = pointer_operand(host.data(), 0, 0);
    ops[0].dst = pointer_operand(box.ptr, box.pitch, H);  // rows in elements: bytes for pointer to pointer
    ops[0].extent = make_cudaExtent(W * sizeof(float), H, D);
    ops[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    ops[1].src = pointer_operand(host.data(), 0, 0);
    ops[1].dst.type = cudaMemcpyOperandTypeArray;
    ops[1].dst.op.array.array = array;
    ops[1].extent = make_cudaExtent(W, H, D);  // elements of the array
    ops[1].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    CHECK(cudaMemcpy3DBatchAsync(2, ops, 0, s));
    // pitched box -> host, array -> host
    cudaMemcpy3DBatchOp down[2];
    memset(down, 0, sizeof down);
    down[0].src = pointer_operand(box.ptr, box.pitch, H);
    down[0].dst = pointer_operand(back.data(), 0, 0);
    down[0].extent = ops[0].extent;
    down[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    down[1].src = ops[1].dst;
    down[1].dst = pointer_operand(from_array.data(), 0, 0);
    down[1].extent = ops[1].extent;
    down[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    CHECK(cudaMemcpy3DBatchAsync(2, down, 0, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(back == host && from_array == host);

    // The driver's forms, and a batch refused whole.
    DRV(cuInit(0));
    CUDA_MEMCPY3D_BATCH_OP dops[2];
    memcpy(dops, down, sizeof dops);  // the same fields, the same layout
    std::fill(back.begin(), back.end(), -1.0f);
    std::fill(from_array.begin(), from_array.end(), -1.0f);
    DRV(cuMemcpy3DBatchAsync(2, dops, 0, (CUstream)s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(back == host && from_array == host);
    Batch3DWithFailIdx legacy = (Batch3DWithFailIdx)dlsym(RTLD_DEFAULT, "cuMemcpy3DBatchAsync");
    REQUIRE(legacy != nullptr);
    std::fill(back.begin(), back.end(), -1.0f);
    dops[1].extent.width = W + 1;  // one element past the array's rows
    size_t fail = 12345;
    DRV_EXPECT(legacy(2, dops, &fail, 0, (CUstream)s), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(fail == 1);
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(back[0] == -1.0f);  // the first copy was not made either
    EXPECT_AND_CLEAR(cudaMemcpy3DBatchAsync(2, down, 1, s), cudaErrorInvalidValue);  // flags must be 0
    EXPECT_AND_CLEAR(cudaMemcpy3DBatchAsync(2, down, 0, 0), cudaErrorInvalidValue);  // not the legacy stream
    CHECK(cudaFreeArray(array));
    CHECK(cudaFree(box.ptr));
    CHECK(cudaStreamDestroy(s));
    printf("ok three_d\n");
}

int main(int argc, char **argv) {
    struct { const char *name; void (*run)(); } sections[] = {
        {"copies", copies}, {"large", large}, {"managed", managed}, {"two_gpus", two_gpus},
        {"bad_arguments", bad_arguments}, {"default_streams", default_streams}, {"driver", driver},
        {"three_d", three_d},
    };
    for (auto &section : sections) {
        bool wanted = argc < 2;
        for (int i = 1; i < argc; i++) wanted |= strcmp(argv[i], section.name) == 0;
        if (wanted) section.run();
    }
    printf("PASSED batch_copies\n");
    return 0;
}
