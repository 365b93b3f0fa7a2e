// Stream attributes as simpleAttributes uses them: the persisting L2 limit,
// an access policy window on a stream, cudaCtxResetPersistingL2Cache,
// kernels in the stream; then every stream attribute read back, copied to
// another stream, priorities as cudaStreamGetPriority sees them, launch
// attributes of cudaLaunchKernelEx, and the errors CUDA gives.  Each
// section prints "ok SECTION"; values read back are printed for the test.
#include <cstdio>
#include <cstring>
#include <vector>
#include "check.h"

__global__ void touch(int *data, int n, int *big, int bigN) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1;
    if (i < bigN) big[i] += 1;
}

static cudaDeviceProp prop;

static cudaStreamAttrValue get(cudaStream_t stream, cudaStreamAttrID id) {
    cudaStreamAttrValue value;
    memset(&value, 0x5a, sizeof value);
    CHECK(cudaStreamGetAttribute(stream, id, &value));
    return value;
}

static void print_window(const char *what, cudaStream_t stream, const void *base) {
    cudaAccessPolicyWindow w = get(stream, cudaStreamAttributeAccessPolicyWindow).accessPolicyWindow;
    const char *where = !w.base_ptr ? "null" : w.base_ptr == base ? "same" : "other";
    printf("%s window: base %s num_bytes %zu hitRatio %.3f hitProp %d missProp %d\n", what, where, w.num_bytes,
           w.hitRatio, (int)w.hitProp, (int)w.missProp);
}

static void print_others(const char *what, cudaStream_t stream) {
    int priority = 99;
    CHECK(cudaStreamGetPriority(stream, &priority));
    cudaLaunchMemSyncDomainMap map = get(stream, cudaStreamAttributeMemSyncDomainMap).memSyncDomainMap;
    printf("%s others: syncPolicy %d priority %d getPriority %d domain %d map %d %d\n", what,
           (int)get(stream, cudaStreamAttributeSynchronizationPolicy).syncPolicy,
           get(stream, cudaStreamAttributePriority).priority, priority,
           (int)get(stream, cudaStreamAttributeMemSyncDomain).memSyncDomain, map.default_, map.remote);
}

// The buffer holds `value` everywhere.
static bool holds(const int *d, int n, int value) {
    std::vector<int> h(n);
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != value) return false;
    return true;
}

int main() {
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("persistingL2CacheMaxSize %d accessPolicyMaxWindowSize %d\n", prop.persistingL2CacheMaxSize,
           prop.accessPolicyMaxWindowSize);
    REQUIRE(prop.persistingL2CacheMaxSize > 0);

    // The persisting L2 limit, clamped to what the device has.
    size_t limit = 1;
    CHECK(cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize));
    REQUIRE(limit == 0);
    CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)prop.persistingL2CacheMaxSize * 2));
    CHECK(cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize));
    printf("limit after asking for twice the maximum: %zu\n", limit);
    CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20));
    CHECK(cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize));
    REQUIRE(limit == 1 << 20);
    CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, prop.persistingL2CacheMaxSize));
    printf("ok limit\n");

    // simpleAttributes: a window over the small buffer, kernels in the stream.
    cudaStream_t stream, other;
    CHECK(cudaStreamCreate(&stream));
    print_window("new", stream, nullptr);
    print_others("new", stream);
    const int n = 1 << 16, bigN = 1 << 18;
    int *data, *big;
    CHECK(cudaMalloc(&data, n * sizeof(int)));
    CHECK(cudaMalloc(&big, bigN * sizeof(int)));
    CHECK(cudaMemsetAsync(data, 0, n * sizeof(int), stream));
    CHECK(cudaMemsetAsync(big, 0, bigN * sizeof(int), stream));
    cudaStreamAttrValue value;
    memset(&value, 0, sizeof value);
    value.accessPolicyWindow.base_ptr = data;
    value.accessPolicyWindow.num_bytes = n * sizeof(int);
    value.accessPolicyWindow.hitRatio = 0.6f;
    value.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    value.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &value));
    CHECK(cudaCtxResetPersistingL2Cache());
    for (int i = 0; i < 3; i++) touch<<<bigN / 256, 256, 0, stream>>>(data, n, big, bigN);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(stream));
    REQUIRE(holds(data, n, 3) && holds(big, bigN, 3));
    print_window("set", stream, data);
    printf("ok window\n");

    // The other attributes; priority as cudaStreamGetPriority sees it, clamped.
    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    printf("priority range: least %d greatest %d\n", least, greatest);
    memset(&value, 0, sizeof value);
    value.priority = greatest - 100;
    CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributePriority, &value));
    value.syncPolicy = cudaSyncPolicyYield;
    CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeSynchronizationPolicy, &value));
    value.memSyncDomain = cudaLaunchMemSyncDomainRemote;
    CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeMemSyncDomain, &value));
    memset(&value, 0, sizeof value);
    value.memSyncDomainMap.default_ = 1;
    value.memSyncDomainMap.remote = 0;
    CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeMemSyncDomainMap, &value));
    print_others("set", stream);
    value.priority = least + 100;
    CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributePriority, &value));
    int priority = 99;
    CHECK(cudaStreamGetPriority(stream, &priority));
    REQUIRE(priority == least);
    value.priority = greatest;
    CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributePriority, &value));
    printf("ok attributes\n");

    // Copied to another stream, which then runs kernels as well.
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    CHECK(cudaStreamCopyAttributes(other, stream));
    print_window("copied", other, data);
    print_others("copied", other);
    touch<<<bigN / 256, 256, 0, other>>>(data, n, big, bigN);
    CHECK(cudaStreamSynchronize(other));
    REQUIRE(holds(data, n, 4));
    // Setting the source later leaves the copy alone.
    memset(&value, 0, sizeof value);
    CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &value));
    print_window("reset", stream, nullptr);
    print_window("still copied", other, data);
    printf("ok copy\n");

    // The default stream has attributes too.
    value.syncPolicy = cudaSyncPolicyBlockingSync;
    CHECK(cudaStreamSetAttribute(0, cudaStreamAttributeSynchronizationPolicy, &value));
    REQUIRE(get(0, cudaStreamAttributeSynchronizationPolicy).syncPolicy == cudaSyncPolicyBlockingSync);
    printf("ok default stream\n");

    // Launch attributes: a window and a priority for one launch.
    cudaLaunchAttribute attrs[2];
    attrs[0].id = cudaLaunchAttributeAccessPolicyWindow;
    attrs[0].val.accessPolicyWindow = get(other, cudaStreamAttributeAccessPolicyWindow).accessPolicyWindow;
    attrs[1].id = cudaLaunchAttributePriority;
    attrs[1].val.priority = greatest;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(bigN / 256);
    config.blockDim = dim3(256);
    config.stream = stream;
    config.attrs = attrs;
    config.numAttrs = 2;
    CHECK(cudaLaunchKernelEx(&config, touch, data, n, big, bigN));
    CHECK(cudaStreamSynchronize(stream));
    REQUIRE(holds(data, n, 5) && holds(big, bigN, 5));
    printf("ok launch attributes\n");

    // Errors: not a stream attribute, no value, a window CUDA refuses, a
    // stream that is gone.  A refused setting changes nothing.
    memset(&value, 0, sizeof value);
    EXPECT_AND_CLEAR(cudaStreamSetAttribute(stream, cudaLaunchAttributeCooperative, &value), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaStreamGetAttribute(stream, cudaLaunchAttributeClusterDimension, &value),
                     cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaStreamSetAttribute(stream, (cudaStreamAttrID)99, &value), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaStreamSetAttribute(stream, cudaStreamAttributePriority, nullptr), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaStreamGetAttribute(stream, cudaStreamAttributePriority, nullptr), cudaErrorInvalidValue);
    value.accessPolicyWindow = get(other, cudaStreamAttributeAccessPolicyWindow).accessPolicyWindow;
    value.accessPolicyWindow.num_bytes = (size_t)prop.accessPolicyMaxWindowSize + 1;
    EXPECT_AND_CLEAR(cudaStreamSetAttribute(other, cudaStreamAttributeAccessPolicyWindow, &value),
                     cudaErrorInvalidValue);
    value.accessPolicyWindow.num_bytes = 4096;
    value.accessPolicyWindow.hitRatio = 1.5f;
    EXPECT_AND_CLEAR(cudaStreamSetAttribute(other, cudaStreamAttributeAccessPolicyWindow, &value),
                     cudaErrorInvalidValue);
    value.accessPolicyWindow.hitRatio = 0.5f;
    value.accessPolicyWindow.missProp = cudaAccessPropertyPersisting;
    EXPECT_AND_CLEAR(cudaStreamSetAttribute(other, cudaStreamAttributeAccessPolicyWindow, &value),
                     cudaErrorInvalidValue);
    memset(&value, 0, sizeof value);
    value.syncPolicy = (cudaSynchronizationPolicy)9;
    EXPECT_AND_CLEAR(cudaStreamSetAttribute(other, cudaStreamAttributeSynchronizationPolicy, &value),
                     cudaErrorInvalidValue);
    value.memSyncDomain = (cudaLaunchMemSyncDomain)7;
    EXPECT_AND_CLEAR(cudaStreamSetAttribute(other, cudaStreamAttributeMemSyncDomain, &value), cudaErrorInvalidValue);
    print_window("after refusals", other, data);
    print_others("after refusals", other);
    CHECK(cudaStreamDestroy(other));
    EXPECT_AND_CLEAR(cudaStreamGetAttribute(other, cudaStreamAttributePriority, &value),
                     cudaErrorInvalidResourceHandle);
    EXPECT_AND_CLEAR(cudaStreamCopyAttributes(stream, other), cudaErrorInvalidResourceHandle);
    CHECK(cudaStreamSynchronize(stream));  // the stream still works
    printf("ok errors\n");

    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(data));
    CHECK(cudaFree(big));
    printf("PASSED stream_attributes\n");
    return 0;
}
