// CUDA graphs through rcuda: explicit graphs (kernel, memcpy, memset, host,
// child, empty, event and memory nodes), stream capture with an event fork
// and join, relaunch after updates, and misuse.  One mode per argument
// ("explicit" takes the path of the DOT file it writes); each prints "ok <mode>".
#include <cstring>
#include <vector>
#include "check.h"

__global__ void scale(float *x, float factor, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}

__global__ void axpy(const float *x, float *y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

__global__ void bump(int *counter)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) counter[0] += 1;
}

__global__ void tiny(int *slot, int value)
{
    slot[0] = value;
}

static const int N = 1000;

struct HostLog {
    int calls = 0;
    float seen = 0;   // what the host node read from host memory a copy wrote
    const float *from = nullptr;
};

static void CUDART_CB host_step(void *data)
{
    HostLog *log = static_cast<HostLog *>(data);
    log->calls++;
    if (log->from) log->seen = log->from[N - 1];
}

static int explicit_graph(const char *dot_path)
{
    float *x, *y;
    CHECK(cudaMalloc(&x, N * sizeof(float)));
    CHECK(cudaMalloc(&y, N * sizeof(float)));
    float *host_in, *host_out;
    CHECK(cudaMallocHost(&host_in, N * sizeof(float)));
    CHECK(cudaMallocHost(&host_out, N * sizeof(float)));

    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    HostLog log;
    log.from = host_out;

    // upload -> memset y -> scale x -> axpy -> download -> host
    cudaGraphNode_t upload, zero, scaled, added, download, host, empty;
    CHECK(cudaGraphAddMemcpyNode1D(&upload, graph, nullptr, 0, x, host_in, N * sizeof(float),
                                   cudaMemcpyHostToDevice));
    cudaMemsetParams memset_params = {};
    memset_params.dst = y;
    memset_params.value = 0;
    memset_params.elementSize = 4;
    memset_params.width = N;
    memset_params.height = 1;
    CHECK(cudaGraphAddMemsetNode(&zero, graph, nullptr, 0, &memset_params));

    float factor = 2.0f;
    int n = N;
    void *scale_args[] = {&x, &factor, &n};
    cudaKernelNodeParams kernel = {};
    kernel.func = (void *)scale;
    kernel.gridDim = dim3((N + 255) / 256);
    kernel.blockDim = dim3(256);
    kernel.kernelParams = scale_args;
    CHECK(cudaGraphAddKernelNode(&scaled, graph, &upload, 1, &kernel));

    float a = 3.0f;
    void *axpy_args[] = {&x, &y, &a, &n};
    kernel.func = (void *)axpy;
    kernel.kernelParams = axpy_args;
    cudaGraphNode_t both[] = {scaled, zero};
    CHECK(cudaGraphAddKernelNode(&added, graph, both, 2, &kernel));
    CHECK(cudaGraphAddMemcpyNode1D(&download, graph, &added, 1, host_out, y, N * sizeof(float),
                                   cudaMemcpyDeviceToHost));
    cudaHostNodeParams host_params = {host_step, &log};
    CHECK(cudaGraphAddHostNode(&host, graph, &download, 1, &host_params));
    CHECK(cudaGraphAddEmptyNode(&empty, graph, &host, 1));

    size_t count = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    REQUIRE(count == 7);
    CHECK(cudaGraphGetRootNodes(graph, nullptr, &count));
    REQUIRE(count == 2);
    CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
    REQUIRE(count == 6);
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(host, &type));
    REQUIRE(type == cudaGraphNodeTypeHost);
    cudaKernelNodeParams read_back = {};
    CHECK(cudaGraphKernelNodeGetParams(scaled, &read_back));
    REQUIRE(read_back.func == (void *)scale && read_back.blockDim.x == 256);
    REQUIRE(*(float *)read_back.kernelParams[1] == 2.0f);

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));

    // Host memory is read when the graph runs, not when the node was made.
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < N; i++) host_in[i] = (float)(i + round);
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaStreamSynchronize(stream));
        for (int i = 0; i < N; i++) REQUIRE(host_out[i] == 6.0f * (float)(i + round));
        REQUIRE(log.calls == round);
        REQUIRE(log.seen == 6.0f * (float)(N - 1 + round));  // the download landed before the host node ran
    }

    // A clone is its own graph; its nodes know their originals.
    cudaGraph_t clone;
    CHECK(cudaGraphClone(&clone, graph));
    cudaGraphNode_t cloned_scale;
    CHECK(cudaGraphNodeFindInClone(&cloned_scale, scaled, clone));
    REQUIRE(cloned_scale != scaled);
    CHECK(cudaGraphDebugDotPrint(clone, dot_path, 1));
    FILE *dot = fopen(dot_path, "r");
    REQUIRE(dot != nullptr);
    char text[4096] = {};
    REQUIRE(fread(text, 1, sizeof text - 1, dot) > 0);
    fclose(dot);
    REQUIRE(strstr(text, "digraph") && strstr(text, "Kernel") && strstr(text, "->"));

    // Per-node update of the executable: a new factor, then the whole graph
    // updated from the clone with another.
    factor = 5.0f;
    kernel.func = (void *)scale;
    kernel.kernelParams = scale_args;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, scaled, &kernel));
    for (int i = 0; i < N; i++) host_in[i] = 1.0f;
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    REQUIRE(host_out[7] == 15.0f);  // 1 * 5 * 3

    factor = 7.0f;
    CHECK(cudaGraphKernelNodeSetParams(cloned_scale, &kernel));
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(exec, clone, &info));
    REQUIRE(info.result == cudaGraphExecUpdateSuccess);
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    REQUIRE(host_out[7] == 21.0f);

    // A disabled node does nothing.
    CHECK(cudaGraphNodeSetEnabled(exec, scaled, 0));
    unsigned enabled = 1;
    CHECK(cudaGraphNodeGetEnabled(exec, scaled, &enabled));
    REQUIRE(enabled == 0);
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    REQUIRE(host_out[7] == 3.0f);

    // A topology change cannot update an executable.
    cudaGraphNode_t extra;
    CHECK(cudaGraphAddEmptyNode(&extra, clone, nullptr, 0));
    EXPECT_AND_CLEAR(cudaGraphExecUpdate(exec, clone, &info), cudaErrorGraphExecUpdateFailure);
    REQUIRE(info.result == cudaGraphExecUpdateErrorTopologyChanged);

    // A child graph node runs its graph in place.
    cudaGraph_t parent;
    CHECK(cudaGraphCreate(&parent, 0));
    cudaGraphNode_t child, after;
    CHECK(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, graph));
    CHECK(cudaGraphAddHostNode(&after, parent, &child, 1, &host_params));
    cudaGraphExec_t parent_exec;
    CHECK(cudaGraphInstantiate(&parent_exec, parent, 0));
    for (int i = 0; i < N; i++) host_in[i] = 2.0f;
    int calls = log.calls;
    CHECK(cudaGraphLaunch(parent_exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    REQUIRE(host_out[0] == 12.0f && log.calls == calls + 2);

    CHECK(cudaGraphExecDestroy(parent_exec));
    CHECK(cudaGraphDestroy(parent));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(clone));
    CHECK(cudaGraphDestroy(graph));
    EXPECT_AND_CLEAR(cudaGraphLaunch(exec, stream), cudaErrorInvalidResourceHandle);
    CHECK(cudaStreamDestroy(stream));
    printf("ok explicit\n");
    return 0;
}

static int captured()
{
    float *x, *y;
    CHECK(cudaMalloc(&x, N * sizeof(float)));
    CHECK(cudaMalloc(&y, N * sizeof(float)));
    float *host;
    CHECK(cudaMallocHost(&host, N * sizeof(float)));
    cudaStream_t main_stream, side;
    CHECK(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    HostLog log;
    log.from = host;

    CHECK(cudaStreamBeginCapture(main_stream, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    CHECK(cudaStreamIsCapturing(main_stream, &status));
    REQUIRE(status == cudaStreamCaptureStatusActive);
    CHECK(cudaMemcpyAsync(x, host, N * sizeof(float), cudaMemcpyHostToDevice, main_stream));
    CHECK(cudaEventRecord(fork, main_stream));
    CHECK(cudaStreamWaitEvent(side, fork, 0));          // side joins the capture
    CHECK(cudaStreamIsCapturing(side, &status));
    REQUIRE(status == cudaStreamCaptureStatusActive);
    CHECK(cudaMemsetAsync(y, 0, N * sizeof(float), side));
    scale<<<(N + 255) / 256, 256, 0, main_stream>>>(x, 2.0f, N);
    CHECK(cudaEventRecord(join, side));
    CHECK(cudaStreamWaitEvent(main_stream, join, 0));   // and is joined back
    axpy<<<(N + 255) / 256, 256, 0, main_stream>>>(x, y, 1.0f, N);
    CHECK(cudaMemcpyAsync(host, y, N * sizeof(float), cudaMemcpyDeviceToHost, main_stream));
    CHECK(cudaLaunchHostFunc(main_stream, host_step, &log));
    unsigned long long id = 0;
    size_t deps = 0;
    CHECK(cudaStreamGetCaptureInfo(main_stream, &status, &id, nullptr, nullptr, nullptr, &deps));
    REQUIRE(status == cudaStreamCaptureStatusActive && id != 0 && deps == 1);
    REQUIRE(log.calls == 0);  // recorded, not run
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(main_stream, &graph));
    CHECK(cudaStreamIsCapturing(side, &status));
    REQUIRE(status == cudaStreamCaptureStatusNone);
    size_t count = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    REQUIRE(count == 6);  // upload, memset, scale, axpy, download, host

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < N; i++) host[i] = (float)round;
        CHECK(cudaGraphLaunch(exec, main_stream));
        CHECK(cudaStreamSynchronize(main_stream));
        REQUIRE(host[5] == 2.0f * round);
        REQUIRE(log.calls == round && log.seen == 2.0f * round);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));

    // Many tiny launches captured and relaunched: one message per launch.
    int *counter;
    CHECK(cudaMalloc(&counter, sizeof(int)));
    CHECK(cudaMemset(counter, 0, sizeof(int)));
    CHECK(cudaStreamBeginCapture(main_stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 100; i++) bump<<<1, 32, 0, main_stream>>>(counter);
    CHECK(cudaStreamEndCapture(main_stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 5; i++) CHECK(cudaGraphLaunch(exec, main_stream));
    int total = 0;
    CHECK(cudaMemcpyAsync(&total, counter, sizeof(int), cudaMemcpyDeviceToHost, main_stream));
    CHECK(cudaStreamSynchronize(main_stream));
    REQUIRE(total == 500);

    // The executable changed after launches C made (a graph that is one run
    // of server work is launched from C after its first launch): the next
    // launch runs the new work, and a destroyed executable is refused.
    int *other;
    CHECK(cudaMalloc(&other, sizeof(int)));
    CHECK(cudaMemset(other, 0, sizeof(int)));
    cudaGraphNode_t first;
    size_t one = 1;
    CHECK(cudaGraphGetRootNodes(graph, &first, &one));
    void *args[] = {&other};
    cudaKernelNodeParams kernel = {};
    kernel.func = (void *)bump;
    kernel.gridDim = dim3(1);
    kernel.blockDim = dim3(32);
    kernel.kernelParams = args;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, first, &kernel));
    CHECK(cudaGraphLaunch(exec, main_stream));
    CHECK(cudaGraphLaunch(exec, main_stream));
    int moved = 0;
    CHECK(cudaMemcpyAsync(&total, counter, sizeof(int), cudaMemcpyDeviceToHost, main_stream));
    CHECK(cudaMemcpyAsync(&moved, other, sizeof(int), cudaMemcpyDeviceToHost, main_stream));
    CHECK(cudaStreamSynchronize(main_stream));
    REQUIRE(moved == 2 && total == 500 + 2 * 99);
    CHECK(cudaGraphExecDestroy(exec));
    EXPECT_AND_CLEAR(cudaGraphLaunch(exec, main_stream), cudaErrorInvalidResourceHandle);
    CHECK(cudaGraphDestroy(graph));
    printf("ok capture\n");
    return 0;
}

// Capture patterns NVIDIA's samples use: a forked stream destroyed once
// joined back, nodes added to the capturing graph by hand, capture into a
// graph of the program's, cudaGraphAddNode.
static int capture_patterns()
{
    int *counter;
    CHECK(cudaMalloc(&counter, sizeof(int)));
    CHECK(cudaMemset(counter, 0, sizeof(int)));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CHECK(cudaEventCreate(&fork));
    CHECK(cudaEventCreate(&join));

    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    cudaStream_t side;
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CHECK(cudaEventRecord(fork, stream));
    CHECK(cudaStreamWaitEvent(side, fork, 0));
    bump<<<1, 1, 0, side>>>(counter);
    CHECK(cudaEventRecord(join, side));
    CHECK(cudaStreamWaitEvent(stream, join, 0));
    CHECK(cudaStreamDestroy(side));  // joined back: it just leaves the capture

    // A node added by hand to the capturing graph, after the stream's place.
    cudaStreamCaptureStatus status;
    cudaGraph_t capturing = nullptr;
    const cudaGraphNode_t *deps = nullptr;
    size_t count = 0;
    CHECK(cudaStreamGetCaptureInfo(stream, &status, nullptr, &capturing, &deps, nullptr, &count));
    REQUIRE(status == cudaStreamCaptureStatusActive && capturing != nullptr && count == 1);
    cudaGraphNode_t by_hand;
    void *args[] = {&counter};
    cudaKernelNodeParams kernel = {};
    kernel.func = (void *)bump;
    kernel.gridDim = dim3(1);
    kernel.blockDim = dim3(1);
    kernel.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&by_hand, capturing, deps, count, &kernel));
    CHECK(cudaStreamUpdateCaptureDependencies(stream, &by_hand, nullptr, 1, cudaStreamSetCaptureDependencies));
    bump<<<1, 1, 0, stream>>>(counter);
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(stream, &graph));
    REQUIRE(graph == capturing);
    CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    REQUIRE(count == 3);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, stream));
    int total = 0;
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(&total, counter, sizeof(int), cudaMemcpyDeviceToHost));
    REQUIRE(total == 3);
    CHECK(cudaGraphExecDestroy(exec));

    // Capture into that graph again (no graph handed back), then a node of
    // any type through cudaGraphAddNode.
    cudaGraphNode_t last[1];
    size_t roots = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &roots));
    CHECK(cudaStreamBeginCaptureToGraph(stream, graph, nullptr, nullptr, 0, cudaStreamCaptureModeRelaxed));
    bump<<<1, 1, 0, stream>>>(counter);
    CHECK(cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &count));
    last[0] = deps[0];
    CHECK(cudaStreamEndCapture(stream, nullptr));
    cudaGraphNodeParams any = {};
    any.type = cudaGraphNodeTypeKernel;
    any.kernel.func = (void *)bump;
    any.kernel.gridDim = dim3(1);
    any.kernel.blockDim = dim3(1);
    any.kernel.kernelParams = args;
    cudaGraphNode_t added;
    CHECK(cudaGraphAddNode(&added, graph, last, nullptr, 1, &any));
    CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    REQUIRE(count == roots + 2);
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaMemset(counter, 0, sizeof(int)));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(&total, counter, sizeof(int), cudaMemcpyDeviceToHost));
    REQUIRE(total == 5);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    printf("ok capture_patterns\n");
    return 0;
}

static int memory_nodes()
{
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int *result;
    CHECK(cudaMalloc(&result, sizeof(int)));

    // Explicit: alloc -> kernel -> copy out -> free.
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaMemAllocNodeParams alloc = {};
    alloc.poolProps.allocType = cudaMemAllocationTypePinned;
    alloc.poolProps.location.type = cudaMemLocationTypeDevice;
    alloc.poolProps.location.id = 0;
    alloc.bytesize = 64 * sizeof(int);
    cudaGraphNode_t alloc_node, write, copy, free_node;
    CHECK(cudaGraphAddMemAllocNode(&alloc_node, graph, nullptr, 0, &alloc));
    REQUIRE(alloc.dptr != nullptr);
    int *scratch = (int *)alloc.dptr;
    int value = 41;
    void *args[] = {&scratch, &value};
    cudaKernelNodeParams kernel = {};
    kernel.func = (void *)tiny;
    kernel.gridDim = dim3(1);
    kernel.blockDim = dim3(1);
    kernel.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&write, graph, &alloc_node, 1, &kernel));
    CHECK(cudaGraphAddMemcpyNode1D(&copy, graph, &write, 1, result, scratch, sizeof(int), cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &copy, 1, scratch));
    cudaMemAllocNodeParams read_back = {};
    CHECK(cudaGraphMemAllocNodeGetParams(alloc_node, &read_back));
    REQUIRE(read_back.dptr == scratch && read_back.bytesize == 64 * sizeof(int));
    void *freed = nullptr;
    CHECK(cudaGraphMemFreeNodeGetParams(free_node, &freed));
    REQUIRE(freed == scratch);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    int host = 0;
    CHECK(cudaMemcpy(&host, result, sizeof(int), cudaMemcpyDeviceToHost));
    REQUIRE(host == 41);
    unsigned long long used = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
    REQUIRE(used >= 64 * sizeof(int));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));

    // Captured: cudaMallocAsync / cudaFreeAsync become memory nodes.
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    int *temp = nullptr;
    CHECK(cudaMallocAsync((void **)&temp, sizeof(int), stream));
    REQUIRE(temp != nullptr);
    tiny<<<1, 1, 0, stream>>>(temp, 99);
    CHECK(cudaMemcpyAsync(result, temp, sizeof(int), cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaFreeAsync(temp, stream));
    CHECK(cudaStreamEndCapture(stream, &graph));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    REQUIRE(count == 4);
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(&host, result, sizeof(int), cudaMemcpyDeviceToHost));
    REQUIRE(host == 99);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    printf("ok memory\n");
    return 0;
}

static int misuse()
{
    cudaStream_t stream, blocking;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK(cudaStreamCreate(&blocking));
    int *counter;
    CHECK(cudaMalloc(&counter, sizeof(int)));
    cudaGraph_t graph = nullptr;

    // The legacy stream cannot capture.
    EXPECT_AND_CLEAR(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);

    // A synchronous call on a capturing stream invalidates the capture.
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    bump<<<1, 1, 0, stream>>>(counter);
    EXPECT_AND_CLEAR(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported);
    cudaStreamCaptureStatus status;
    CHECK(cudaStreamIsCapturing(stream, &status));
    REQUIRE(status == cudaStreamCaptureStatusInvalidated);
    EXPECT_AND_CLEAR(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
    REQUIRE(graph == nullptr);
    CHECK(cudaStreamIsCapturing(stream, &status));
    REQUIRE(status == cudaStreamCaptureStatusNone);

    // cudaMalloc under a global capture is refused; relaxed, it is allowed.
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    void *p;
    EXPECT_AND_CLEAR(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported);
    EXPECT_AND_CLEAR(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK(cudaMalloc(&p, 16));
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaFree(p));

    // Work on the legacy stream while a blocking stream captures.
    CHECK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed));
    EXPECT_AND_CLEAR(cudaMemsetAsync(counter, 0, sizeof(int), 0), cudaErrorStreamCaptureImplicit);
    EXPECT_AND_CLEAR(cudaStreamEndCapture(blocking, &graph), cudaErrorStreamCaptureInvalidated);

    // A forked stream that is never joined back.
    cudaStream_t side;
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t fork;
    CHECK(cudaEventCreate(&fork));
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CHECK(cudaEventRecord(fork, stream));
    CHECK(cudaStreamWaitEvent(side, fork, 0));
    bump<<<1, 1, 0, side>>>(counter);
    EXPECT_AND_CLEAR(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureUnjoined);
    CHECK(cudaStreamIsCapturing(side, &status));
    REQUIRE(status == cudaStreamCaptureStatusNone);

    // Ending in another stream than the origin; beginning twice.
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    EXPECT_AND_CLEAR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
    CHECK(cudaEventRecord(fork, stream));
    CHECK(cudaStreamWaitEvent(side, fork, 0));
    EXPECT_AND_CLEAR(cudaStreamEndCapture(side, &graph), cudaErrorStreamCaptureUnmatched);
    EXPECT_AND_CLEAR(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);

    // Graphs: a node of another graph, a cycle, destroyed objects.
    cudaGraph_t a, b;
    CHECK(cudaGraphCreate(&a, 0));
    CHECK(cudaGraphCreate(&b, 0));
    cudaGraphNode_t n1, n2, other;
    CHECK(cudaGraphAddEmptyNode(&n1, a, nullptr, 0));
    CHECK(cudaGraphAddEmptyNode(&n2, a, &n1, 1));
    CHECK(cudaGraphAddEmptyNode(&other, b, nullptr, 0));
    EXPECT_AND_CLEAR(cudaGraphAddEmptyNode(&other, b, &n1, 1), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaGraphAddDependencies(a, &n1, &other, nullptr, 1), cudaErrorInvalidValue);
    CHECK(cudaGraphAddDependencies(a, &n2, &n1, nullptr, 1));  // n1 -> n2 -> n1
    cudaGraphExec_t exec;
    EXPECT_AND_CLEAR(cudaGraphInstantiate(&exec, a, 0), cudaErrorInvalidValue);
    CHECK(cudaGraphRemoveDependencies(a, &n2, &n1, nullptr, 1));
    CHECK(cudaGraphInstantiate(&exec, a, 0));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaGraphExecDestroy(exec));
    EXPECT_AND_CLEAR(cudaGraphExecDestroy(exec), cudaErrorInvalidResourceHandle);
    CHECK(cudaGraphDestroy(b));
    EXPECT_AND_CLEAR(cudaGraphDestroy(b), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaGraphAddEmptyNode(&other, b, nullptr, 0), cudaErrorInvalidValue);
    CHECK(cudaGraphDestroy(a));

    // A kernel node checked as a launch is: a block too large.
    CHECK(cudaGraphCreate(&a, 0));
    cudaKernelNodeParams kernel = {};
    void *args[] = {&counter};
    kernel.func = (void *)bump;
    kernel.gridDim = dim3(1);
    kernel.blockDim = dim3(4096);
    kernel.kernelParams = args;
    EXPECT_AND_CLEAR(cudaGraphAddKernelNode(&n1, a, nullptr, 0, &kernel), cudaErrorInvalidConfiguration);
    CHECK(cudaGraphDestroy(a));
    CHECK(cudaDeviceSynchronize());
    printf("ok misuse\n");
    return 0;
}

static int user_objects_destroyed = 0;
static void CUDART_CB destroy_object(void *data) { user_objects_destroyed += *(int *)data; }

static int user_objects()
{
    static int weight = 1;
    cudaUserObject_t object;
    CHECK(cudaUserObjectCreate(&object, &weight, destroy_object, 1, cudaUserObjectNoDestructorSync));
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    CHECK(cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove));  // the graph holds our reference
    cudaGraph_t clone;
    CHECK(cudaGraphClone(&clone, graph));
    CHECK(cudaGraphDestroy(graph));
    REQUIRE(user_objects_destroyed == 0);  // the clone still holds it
    CHECK(cudaGraphDestroy(clone));
    REQUIRE(user_objects_destroyed == 1);
    printf("ok user_objects\n");
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "explicit")) explicit_graph(argv[++i]);
        else if (!strcmp(argv[i], "capture")) captured();
        else if (!strcmp(argv[i], "capture_patterns")) capture_patterns();
        else if (!strcmp(argv[i], "memory")) memory_nodes();
        else if (!strcmp(argv[i], "misuse")) misuse();
        else if (!strcmp(argv[i], "user_objects")) user_objects();
    }
    return 0;
}
