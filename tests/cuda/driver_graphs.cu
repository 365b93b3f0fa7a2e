// CUDA graphs through the driver API, in a program linked to libcuda.so.1
// only (nvcc -cudart none -x c++): a graph built with cuGraph* (kernel nodes
// from a module's CUfunction and a library's CUkernel, parameters as
// kernelParams and as `extra`; memcpy, memset, host, child, empty and batch
// memory operation nodes), stream capture with an event fork and join,
// relaunches after per-node and whole-graph updates, and misuse.
// argv: the fatbinary of driver_module_kernels.cu, the path of a DOT file.
// Prints "ok <section>" per section, then "PASSED driver_graphs".
#include <cstring>
#include <cudaTypedefs.h>
#include "driver_check.h"

static const int N = 1024;
static const size_t BYTES = N * sizeof(float);
static CUcontext context;
static CUfunction scale_fn, bias_fn;  // scale(float *x, float factor, int n), add_bias(float *x, double bias, int n)
static CUkernel bias_kernel;          // add_bias, from a library
static CUdeviceptr x, y, words;       // words: two 64-bit words for the memory operations
static float *host_in, *host_out, *host_out2;

struct HostLog {
    int calls = 0;
    float seen = 0;  // host_out[N - 1] when the host node ran
};

static void CUDA_CB host_step(void *data)
{
    HostLog *log = static_cast<HostLog *>(data);
    log->calls++;
    log->seen = host_out[N - 1];
}

static unsigned int bits_of(float value)
{
    unsigned int bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static CUDA_MEMCPY3D linear_copy(CUmemorytype dst_type, void *dst, CUmemorytype src_type, const void *src,
                                 size_t bytes)
{
    CUDA_MEMCPY3D copy = {};
    copy.srcMemoryType = src_type;
    if (src_type == CU_MEMORYTYPE_HOST) copy.srcHost = src;
    else copy.srcDevice = (CUdeviceptr)src;
    copy.dstMemoryType = dst_type;
    if (dst_type == CU_MEMORYTYPE_HOST) copy.dstHost = dst;
    else copy.dstDevice = (CUdeviceptr)dst;
    copy.srcPitch = copy.dstPitch = copy.WidthInBytes = bytes;
    copy.srcHeight = copy.dstHeight = copy.Height = copy.Depth = 1;
    return copy;
}

static CUDA_MEMSET_NODE_PARAMS fill(CUdeviceptr dst, float value, size_t count)
{
    CUDA_MEMSET_NODE_PARAMS memset_params = {};
    memset_params.dst = dst;
    memset_params.value = bits_of(value);
    memset_params.elementSize = 4;
    memset_params.width = count;
    memset_params.height = 1;
    return memset_params;
}

// CUDA 11's cuGraphInstantiate, with a log (cudaTypedefs.h has it only for the driver's own build).
typedef CUresult(CUDAAPI *InstantiateWithLog)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);

// An older ABI of `name` (cuda.h names only the newest): the export CUDA `version` resolves it to.
template <typename F>
static F legacy(const char *name, int version)
{
    void *fn = nullptr;
    CUdriverProcAddressQueryResult found;
    DRV(cuGetProcAddress(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    REQUIRE(found == CU_GET_PROC_ADDRESS_SUCCESS && fn != nullptr);
    return (F)fn;
}

static uint64_t word(int index)
{
    uint64_t value = 0;
    DRV(cuMemcpyDtoH(&value, words + 8 * index, sizeof value));
    return value;
}

// ------------------------------------------------------------------ an explicit graph

static void explicit_graph(const char *dot_path)
{
    CUgraph graph;
    DRV(cuGraphCreate(&graph, 0));
    HostLog log;

    // upload -> scale -> bias -+-> download x -------------+-> host
    // memset y ---------------+-> copy x's first half to y -> download y
    CUgraphNode upload, scaled, biased, zero, download_x, half, download_y, host;
    CUDA_MEMCPY3D copy = linear_copy(CU_MEMORYTYPE_DEVICE, (void *)x, CU_MEMORYTYPE_HOST, host_in, BYTES);
    DRV(cuGraphAddMemcpyNode(&upload, graph, nullptr, 0, &copy, context));

    float factor = 2.0f;
    int n = N;
    void *scale_args[] = {&x, &factor, &n};
    CUDA_KERNEL_NODE_PARAMS kernel = {};
    kernel.func = scale_fn;
    kernel.gridDimX = N / 256;
    kernel.gridDimY = kernel.gridDimZ = 1;
    kernel.blockDimX = 256;
    kernel.blockDimY = kernel.blockDimZ = 1;
    kernel.kernelParams = scale_args;
    DRV(cuGraphAddKernelNode(&scaled, graph, &upload, 1, &kernel));

    // add_bias(x, 0.5, N) from the library's CUkernel, its parameters packed in `extra`.
    struct {
        CUdeviceptr x;
        double bias;
        int n;
    } packed = {x, 0.5, N};
    size_t packed_size = 20;  // 8 + 8 + 4: the kernel's parameter block
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                     CU_LAUNCH_PARAM_END};
    CUDA_KERNEL_NODE_PARAMS bias = kernel;
    bias.func = nullptr;
    bias.kern = bias_kernel;
    bias.ctx = context;
    bias.kernelParams = nullptr;
    bias.extra = extra;
    DRV(cuGraphAddKernelNode(&biased, graph, &scaled, 1, &bias));

    CUDA_MEMSET_NODE_PARAMS ones = fill(y, 1.0f, N);
    DRV(cuGraphAddMemsetNode(&zero, graph, nullptr, 0, &ones, context));
    copy = linear_copy(CU_MEMORYTYPE_HOST, host_out, CU_MEMORYTYPE_DEVICE, (void *)x, BYTES);
    DRV(cuGraphAddMemcpyNode(&download_x, graph, &biased, 1, &copy, context));
    copy = linear_copy(CU_MEMORYTYPE_DEVICE, (void *)y, CU_MEMORYTYPE_DEVICE, (void *)x, BYTES / 2);
    CUgraphNode before_half[] = {biased, zero};
    DRV(cuGraphAddMemcpyNode(&half, graph, before_half, 2, &copy, context));
    copy = linear_copy(CU_MEMORYTYPE_HOST, host_out2, CU_MEMORYTYPE_DEVICE, (void *)y, BYTES);
    DRV(cuGraphAddMemcpyNode(&download_y, graph, &half, 1, &copy, context));
    CUDA_HOST_NODE_PARAMS host_params = {host_step, &log};
    CUgraphNode before_host[] = {download_x, download_y};
    DRV(cuGraphAddHostNode(&host, graph, before_host, 2, &host_params));

    // Queries, through both ABIs where there are two.
    size_t count = 0;
    DRV(cuGraphGetNodes(graph, nullptr, &count));
    REQUIRE(count == 8);
    DRV(cuGraphGetRootNodes(graph, nullptr, &count));
    REQUIRE(count == 2);
    DRV(cuGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
    REQUIRE(count == 8);
    CUgraphNode from[8], to[8];
    CUgraphEdgeData edge_data[8];
    DRV(cuGraphGetEdges(graph, from, to, edge_data, &count));
    REQUIRE(count == 8 && from[0] == upload && to[0] == scaled && edge_data[0].type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT);
    count = 0;
    DRV(legacy<PFN_cuGraphGetEdges_v10000>("cuGraphGetEdges", 12000)(graph, nullptr, nullptr, &count));
    REQUIRE(count == 8);
    CUgraphNode listed[4];
    count = 4;
    DRV(cuGraphNodeGetDependentNodes_v2(biased, listed, nullptr, &count));
    REQUIRE(count == 2 && listed[0] == download_x && listed[1] == half);
    count = 4;
    DRV(legacy<PFN_cuGraphNodeGetDependencies_v10000>("cuGraphNodeGetDependencies", 12000)(half, listed, &count));
    REQUIRE(count == 2 && listed[0] == biased && listed[1] == zero);
    CUgraphNodeType type;
    DRV(cuGraphNodeGetType(host, &type));
    REQUIRE(type == CU_GRAPH_NODE_TYPE_HOST);
    DRV(cuGraphNodeGetType(zero, &type));
    REQUIRE(type == CU_GRAPH_NODE_TYPE_MEMSET);

    CUDA_KERNEL_NODE_PARAMS read_back = {};
    DRV(cuGraphKernelNodeGetParams(scaled, &read_back));
    REQUIRE(read_back.func == scale_fn && read_back.blockDimX == 256 && read_back.gridDimX == N / 256);
    REQUIRE(*(float *)read_back.kernelParams[1] == 2.0f && *(int *)read_back.kernelParams[2] == N);
    DRV(cuGraphKernelNodeGetParams(biased, &read_back));
    REQUIRE(read_back.kern == bias_kernel && *(double *)read_back.kernelParams[1] == 0.5);
    CUDA_MEMSET_NODE_PARAMS memset_back = {};
    DRV(cuGraphMemsetNodeGetParams(zero, &memset_back));
    REQUIRE(memset_back.dst == y && memset_back.value == bits_of(1.0f) && memset_back.width == N);
    CUDA_MEMCPY3D copy_back = {};
    DRV(cuGraphMemcpyNodeGetParams(upload, &copy_back));
    REQUIRE(copy_back.srcMemoryType == CU_MEMORYTYPE_HOST && copy_back.srcHost == host_in &&
            copy_back.dstDevice == x && copy_back.WidthInBytes == BYTES);
    CUDA_HOST_NODE_PARAMS host_back = {};
    DRV(cuGraphHostNodeGetParams(host, &host_back));
    REQUIRE(host_back.fn == host_step && host_back.userData == &log);

    CUgraphExec exec;
    DRV(cuGraphInstantiate(&exec, graph, 0));
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    // Host memory is read when the graph runs; the downloads land before the host node.
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < N; i++) host_in[i] = (float)(i + round);
        DRV(cuGraphLaunch(exec, stream));
        DRV(cuStreamSynchronize(stream));
        for (int i = 0; i < N; i++) {
            float expected = 2.0f * (float)(i + round) + 0.5f;
            REQUIRE(host_out[i] == expected);
            REQUIRE(host_out2[i] == (i < N / 2 ? expected : 1.0f));
        }
        REQUIRE(log.calls == round && log.seen == host_out[N - 1]);
    }

    // Per-node updates of the executable: a new factor, a new fill value,
    // the bias disabled, then enabled again.
    factor = 3.0f;
    DRV(cuGraphExecKernelNodeSetParams(exec, scaled, &kernel));
    CUDA_MEMSET_NODE_PARAMS twos = fill(y, 2.0f, N);
    DRV(cuGraphExecMemsetNodeSetParams(exec, zero, &twos, context));
    DRV(cuGraphNodeSetEnabled(exec, biased, 0));
    unsigned int enabled = 1;
    DRV(cuGraphNodeGetEnabled(exec, biased, &enabled));
    REQUIRE(enabled == 0);
    for (int i = 0; i < N; i++) host_in[i] = 1.0f;
    DRV(cuGraphLaunch(exec, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(host_out[5] == 3.0f && host_out2[5] == 3.0f && host_out2[N - 1] == 2.0f);
    DRV(cuGraphNodeSetEnabled(exec, biased, 1));

    // The graph itself was not changed by those: a clone of it, with a new
    // factor, updates the whole executable.
    CUgraph clone;
    DRV(cuGraphClone(&clone, graph));
    CUgraphNode cloned_scale;
    DRV(cuGraphNodeFindInClone(&cloned_scale, scaled, clone));
    REQUIRE(cloned_scale != scaled);
    factor = 5.0f;
    DRV(cuGraphKernelNodeSetParams(cloned_scale, &kernel));
    CUgraphExecUpdateResultInfo info = {};
    DRV(cuGraphExecUpdate(exec, clone, &info));
    REQUIRE(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
    DRV(cuGraphLaunch(exec, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(host_out[5] == 5.5f && host_out2[5] == 5.5f && host_out2[N - 1] == 1.0f);

    // A graph of another shape cannot update it.
    CUgraph other;
    CUgraphNode empty;
    DRV(cuGraphCreate(&other, 0));
    DRV(cuGraphAddEmptyNode(&empty, other, nullptr, 0));
    CUgraphNode error_node = nullptr;
    CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    DRV_EXPECT(legacy<PFN_cuGraphExecUpdate_v10020>("cuGraphExecUpdate", 11040)(exec, other, &error_node, &result),
               CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    REQUIRE(result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);

    // The graph as a child of another, after an empty node.
    CUgraph parent;
    CUgraphNode child, first;
    DRV(cuGraphCreate(&parent, 0));
    DRV(cuGraphAddEmptyNode(&first, parent, nullptr, 0));
    DRV(cuGraphAddChildGraphNode(&child, parent, &first, 1, graph));
    CUgraph inner;
    DRV(cuGraphChildGraphNodeGetGraph(child, &inner));
    DRV(cuGraphGetNodes(inner, nullptr, &count));
    REQUIRE(count == 8);
    CUgraphExec parent_exec;
    DRV(cuGraphInstantiateWithFlags(&parent_exec, parent, 0));
    for (int i = 0; i < N; i++) host_in[i] = 4.0f;
    DRV(cuGraphLaunch(parent_exec, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(host_out[0] == 8.5f && log.calls == 6);

    DRV(cuGraphDebugDotPrint(graph, dot_path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE));
    FILE *dot = fopen(dot_path, "r");
    REQUIRE(dot != nullptr);
    char text[8192] = {};
    REQUIRE(fread(text, 1, sizeof text - 1, dot) > 0);
    fclose(dot);
    REQUIRE(strstr(text, "digraph") && strstr(text, "Kernel") && strstr(text, "->"));

    DRV(cuGraphExecDestroy(parent_exec));
    DRV(cuGraphExecDestroy(exec));
    DRV_EXPECT(cuGraphExecDestroy(exec), CUDA_ERROR_INVALID_HANDLE);
    DRV(cuGraphDestroy(parent));
    DRV(cuGraphDestroy(other));
    DRV(cuGraphDestroy(clone));
    DRV(cuGraphDestroy(graph));
    DRV(cuStreamDestroy(stream));
    printf("ok explicit\n");
}

// ------------------------------------------------------------------ batch memory operation nodes

static void batch_nodes()
{
    CUgraph graph;
    DRV(cuGraphCreate(&graph, 0));
    CUstreamBatchMemOpParams ops[2] = {};
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = words;
    ops[0].writeValue.value = 5;
    ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[1].writeValue.address = words + 8;
    ops[1].writeValue.value64 = 0x100000000ull;
    CUDA_BATCH_MEM_OP_NODE_PARAMS params = {};
    params.ctx = context;
    params.count = 2;
    params.paramArray = ops;
    CUgraphNode batch, read_node;
    DRV(cuGraphAddBatchMemOpNode(&batch, graph, nullptr, 0, &params));
    CUgraphNodeType type;
    DRV(cuGraphNodeGetType(batch, &type));
    REQUIRE(type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    CUDA_BATCH_MEM_OP_NODE_PARAMS back = {};
    DRV(cuGraphBatchMemOpNodeGetParams(batch, &back));
    REQUIRE(back.count == 2 && back.paramArray[0].writeValue.value == 5 && back.ctx == context);

    // A wait the write before it satisfies, then a download of the words.
    uint64_t seen[2] = {};
    CUstreamBatchMemOpParams wait = {};
    wait.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    wait.waitValue.address = words;
    wait.waitValue.value = 5;
    wait.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    CUDA_BATCH_MEM_OP_NODE_PARAMS wait_params = params;
    wait_params.count = 1;
    wait_params.paramArray = &wait;
    CUgraphNode waited;
    DRV(cuGraphAddBatchMemOpNode(&waited, graph, &batch, 1, &wait_params));
    CUDA_MEMCPY3D copy = linear_copy(CU_MEMORYTYPE_HOST, seen, CU_MEMORYTYPE_DEVICE, (void *)words, sizeof seen);
    DRV(cuGraphAddMemcpyNode(&read_node, graph, &waited, 1, &copy, context));

    CUgraphExec exec;
    DRV(cuGraphInstantiate(&exec, graph, 0));
    DRV(cuMemsetD32(words, 0, 4));
    DRV(cuGraphLaunch(exec, nullptr));
    DRV(cuCtxSynchronize());
    REQUIRE(seen[0] == 5 && seen[1] == 0x100000000ull);

    ops[0].writeValue.value = 9;
    wait.waitValue.value = 9;
    DRV(cuGraphExecBatchMemOpNodeSetParams(exec, batch, &params));
    DRV(cuGraphExecBatchMemOpNodeSetParams(exec, waited, &wait_params));
    DRV(cuGraphLaunch(exec, nullptr));
    DRV(cuCtxSynchronize());
    REQUIRE(seen[0] == 9 && word(0) == 9);

    // Refused as cuStreamBatchMemOp refuses it: a word outside device memory.
    ops[0].writeValue.address = 0x10;
    DRV_EXPECT(cuGraphBatchMemOpNodeSetParams(batch, &params), CUDA_ERROR_INVALID_VALUE);
    DRV(cuGraphExecDestroy(exec));
    DRV(cuGraphDestroy(graph));
    printf("ok batch\n");
}

// ------------------------------------------------------------------ memory, event and host nodes; uploads

static void memory_nodes()
{
    CUgraph graph;
    DRV(cuGraphCreate(&graph, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS alloc = {};
    alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    alloc.poolProps.location.id = 0;
    alloc.bytesize = BYTES;
    CUgraphNode allocated, filled, copied, recorded, host, freed;
    DRV(cuGraphAddMemAllocNode(&allocated, graph, nullptr, 0, &alloc));
    REQUIRE(alloc.dptr != 0);
    CUDA_MEM_ALLOC_NODE_PARAMS alloc_back = {};
    DRV(cuGraphMemAllocNodeGetParams(allocated, &alloc_back));
    REQUIRE(alloc_back.dptr == alloc.dptr && alloc_back.bytesize == BYTES &&
            alloc_back.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE);
    cuuint64_t used = 0;
    DRV(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
    REQUIRE(used >= BYTES);

    CUDA_MEMSET_NODE_PARAMS sevens = fill(alloc.dptr, 7.0f, N);
    DRV(cuGraphAddMemsetNode(&filled, graph, &allocated, 1, &sevens, context));
    CUDA_MEMCPY3D copy = linear_copy(CU_MEMORYTYPE_HOST, host_out, CU_MEMORYTYPE_DEVICE, (void *)alloc.dptr, BYTES);
    DRV(cuGraphAddMemcpyNode(&copied, graph, &filled, 1, &copy, context));
    CUevent event;
    DRV(cuEventCreate(&event, 0));
    DRV(cuGraphAddEventRecordNode(&recorded, graph, &copied, 1, event));
    CUevent event_back = nullptr;
    DRV(cuGraphEventRecordNodeGetEvent(recorded, &event_back));
    REQUIRE(event_back == event);
    HostLog log, other_log;
    CUDA_HOST_NODE_PARAMS host_params = {host_step, &log};
    DRV(cuGraphAddHostNode(&host, graph, &recorded, 1, &host_params));
    DRV(cuGraphAddMemFreeNode(&freed, graph, &host, 1, alloc.dptr));
    CUdeviceptr freed_back = 0;
    DRV(cuGraphMemFreeNodeGetParams(freed, &freed_back));
    REQUIRE(freed_back == alloc.dptr);

    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUDA_GRAPH_INSTANTIATE_PARAMS instantiate = {};
    instantiate.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    instantiate.hUploadStream = stream;
    CUgraphExec exec;
    DRV(cuGraphInstantiateWithParams(&exec, graph, &instantiate));
    REQUIRE(instantiate.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS);
    cuuint64_t flags = 0;
    DRV(cuGraphExecGetFlags(exec, &flags));
    REQUIRE(flags == CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
    DRV(cuGraphUpload(exec, stream));
    DRV(cuGraphLaunch(exec, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(host_out[N - 1] == 7.0f && log.calls == 1 && log.seen == 7.0f);
    DRV(cuEventQuery(event));

    // Per-node updates: the copy lands in host_out2, another host function runs.
    copy = linear_copy(CU_MEMORYTYPE_HOST, host_out2, CU_MEMORYTYPE_DEVICE, (void *)alloc.dptr, BYTES);
    DRV(cuGraphExecMemcpyNodeSetParams(exec, copied, &copy, context));
    CUDA_HOST_NODE_PARAMS other_params = {host_step, &other_log};
    DRV(cuGraphExecHostNodeSetParams(exec, host, &other_params));
    host_out2[0] = 0;
    DRV(cuGraphLaunch(exec, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(host_out2[0] == 7.0f && log.calls == 1 && other_log.calls == 1);

    // The graph's own node, changed: what a new instantiation takes.
    sevens = fill(alloc.dptr, 8.0f, N);
    DRV(cuGraphMemsetNodeSetParams(filled, &sevens));
    copy = linear_copy(CU_MEMORYTYPE_HOST, host_out2, CU_MEMORYTYPE_DEVICE, (void *)alloc.dptr, BYTES);
    DRV(cuGraphMemcpyNodeSetParams(copied, &copy));
    CUgraphExec second;
    DRV(cuGraphInstantiate(&second, graph, 0));
    DRV(cuGraphLaunch(second, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(host_out2[N - 1] == 8.0f && log.calls == 2);

    DRV(cuGraphExecDestroy(second));
    DRV(cuGraphExecDestroy(exec));
    DRV(cuGraphDestroy(graph));
    DRV(cuDeviceGraphMemTrim(0));
    DRV(cuEventDestroy(event));
    DRV(cuStreamDestroy(stream));
    printf("ok memory\n");
}

// ------------------------------------------------------------------ stream capture

static void capture()
{
    CUstream origin, side;
    DRV(cuStreamCreate(&origin, CU_STREAM_NON_BLOCKING));
    DRV(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
    CUevent fork, join;
    DRV(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    DRV(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    HostLog log;

    DRV(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    DRV(cuStreamIsCapturing(origin, &status));
    REQUIRE(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    cuuint64_t id = 0;
    CUgraph capturing = nullptr;
    const CUgraphNode *deps = nullptr;
    const CUgraphEdgeData *edges = nullptr;
    size_t num_deps = 99;
    DRV(cuStreamGetCaptureInfo(origin, &status, &id, &capturing, &deps, &edges, &num_deps));
    REQUIRE(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0 && capturing != nullptr && num_deps == 0);

    DRV(cuMemcpyHtoDAsync(x, host_in, BYTES, origin));
    DRV(cuEventRecord(fork, origin));
    DRV(cuStreamWaitEvent(side, fork, 0));  // the side stream joins the capture
    DRV(cuStreamIsCapturing(side, &status));
    REQUIRE(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);

    float factor = 2.0f;
    int n = N;
    void *scale_args[] = {&x, &factor, &n};
    DRV(cuLaunchKernel(scale_fn, N / 256, 1, 1, 256, 1, 1, 0, origin, scale_args, nullptr));
    DRV(cuMemsetD32Async(y, bits_of(1.0f), N, side));
    DRV(cuStreamWriteValue32(side, words, 7, 0));
    DRV(cuEventRecord(join, side));
    DRV(cuStreamWaitEvent(origin, join, 0));  // joined back
    double bias = 0.5;
    void *bias_args[] = {&y, &bias, &n};
    DRV(cuLaunchKernel(bias_fn, N / 256, 1, 1, 256, 1, 1, 0, origin, bias_args, nullptr));
    DRV(cuMemcpyDtoHAsync(host_out, x, BYTES, origin));
    DRV(cuMemcpyDtoHAsync(host_out2, y, BYTES, origin));
    DRV(cuLaunchHostFunc(origin, host_step, &log));
    DRV(cuStreamGetCaptureInfo(origin, &status, nullptr, nullptr, &deps, nullptr, &num_deps));
    REQUIRE(num_deps == 1 && deps[0] != nullptr);
    CUgraphNodeType type;
    DRV(cuGraphNodeGetType(deps[0], &type));
    REQUIRE(type == CU_GRAPH_NODE_TYPE_HOST);

    CUgraph graph = nullptr;
    DRV(cuStreamEndCapture(origin, &graph));
    REQUIRE(graph == capturing);
    DRV(cuStreamIsCapturing(side, &status));
    REQUIRE(status == CU_STREAM_CAPTURE_STATUS_NONE);
    REQUIRE(log.calls == 0);  // recorded, not run

    size_t count = 0;
    DRV(cuGraphGetNodes(graph, nullptr, &count));
    CUgraphNode nodes[32];
    REQUIRE(count >= 8 && count <= 32);
    DRV(cuGraphGetNodes(graph, nodes, &count));
    int kernels = 0, batches = 0;
    for (size_t i = 0; i < count; i++) {
        DRV(cuGraphNodeGetType(nodes[i], &type));
        kernels += type == CU_GRAPH_NODE_TYPE_KERNEL;
        if (type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP) {
            batches++;
            CUDA_BATCH_MEM_OP_NODE_PARAMS back = {};
            DRV(cuGraphBatchMemOpNodeGetParams(nodes[i], &back));
            REQUIRE(back.count == 1 && back.paramArray[0].operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 &&
                    back.paramArray[0].writeValue.value == 7);
        }
    }
    REQUIRE(kernels == 2 && batches == 1);

    CUgraphExec exec;
    DRV(cuGraphInstantiate(&exec, graph, 0));
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < N; i++) host_in[i] = (float)(i * round);
        DRV(cuMemsetD32(words, 0, 1));
        DRV(cuGraphLaunch(exec, origin));
        DRV(cuStreamSynchronize(origin));
        for (int i = 0; i < N; i++) REQUIRE(host_out[i] == 2.0f * (float)(i * round) && host_out2[i] == 1.5f);
        REQUIRE(log.calls == round && log.seen == host_out[N - 1] && word(0) == 7);
    }
    DRV(cuGraphExecDestroy(exec));
    DRV(cuGraphDestroy(graph));

    // Capture into an existing graph, after one of its nodes.
    CUgraph target;
    CUgraphNode start;
    DRV(cuGraphCreate(&target, 0));
    DRV(cuGraphAddEmptyNode(&start, target, nullptr, 0));
    DRV(cuStreamBeginCaptureToGraph(origin, target, &start, nullptr, 1, CU_STREAM_CAPTURE_MODE_RELAXED));
    DRV(cuMemsetD32Async(y, bits_of(3.0f), N, origin));
    // The next node depends on the start only, not on the memset.
    DRV(cuStreamUpdateCaptureDependencies(origin, &start, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    DRV(cuMemsetD32Async(x, bits_of(3.0f), N, origin));
    DRV(cuStreamEndCapture(origin, &graph));
    REQUIRE(graph == target);
    DRV(cuGraphGetNodes(target, nullptr, &count));
    REQUIRE(count == 3);
    DRV(cuGraphGetRootNodes(target, nullptr, &count));
    REQUIRE(count == 1);
    size_t dependents = 0;
    DRV(cuGraphNodeGetDependentNodes(start, nullptr, nullptr, &dependents));
    REQUIRE(dependents == 2);
    DRV(cuGraphDestroy(target));

    DRV(cuEventDestroy(fork));
    DRV(cuEventDestroy(join));
    DRV(cuStreamDestroy(side));
    DRV(cuStreamDestroy(origin));
    printf("ok capture\n");
}

// ------------------------------------------------------------------ misuse

static int destroyed = 0;

static void CUDA_CB destroy_object(void *data)
{
    (*static_cast<int *>(data))++;
}

static void misuse()
{
    CUgraph a, b;
    DRV(cuGraphCreate(&a, 0));
    DRV(cuGraphCreate(&b, 0));
    CUgraphNode in_a, in_b, node;
    DRV(cuGraphAddEmptyNode(&in_a, a, nullptr, 0));
    DRV(cuGraphAddEmptyNode(&in_b, b, nullptr, 0));
    DRV_EXPECT(cuGraphAddEmptyNode(&node, a, &in_b, 1), CUDA_ERROR_INVALID_VALUE);  // a node of another graph
    DRV_EXPECT(cuGraphAddDependencies(a, &in_a, &in_b, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuGraphAddDependencies(a, &in_a, &in_a, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuGraphCreate(&a, 1), CUDA_ERROR_INVALID_VALUE);

    // A cycle: instantiation fails, CUDA 11's cuGraphInstantiate says why in its log.
    CUgraph cycle;
    CUgraphNode first, second;
    DRV(cuGraphCreate(&cycle, 0));
    DRV(cuGraphAddEmptyNode(&first, cycle, nullptr, 0));
    DRV(cuGraphAddEmptyNode(&second, cycle, &first, 1));
    DRV(cuGraphAddDependencies(cycle, &second, &first, nullptr, 1));
    CUgraphExec never;
    char log[256] = "untouched";
    CUgraphNode error_node = first;
    DRV_EXPECT(legacy<InstantiateWithLog>("cuGraphInstantiate", 11040)(&never, cycle, &error_node, log,
                                                                                    sizeof log),
               CUDA_ERROR_INVALID_VALUE);
    REQUIRE(strstr(log, "cycle") != nullptr && error_node == nullptr);
    DRV(cuGraphRemoveDependencies(cycle, &second, &first, nullptr, 1));
    DRV(cuGraphInstantiate(&never, cycle, 0));
    DRV(cuGraphExecDestroy(never));
    DRV(cuGraphDestroy(cycle));
    CUDA_KERNEL_NODE_PARAMS kernel = {};
    DRV_EXPECT(cuGraphKernelNodeGetParams(in_a, &kernel), CUDA_ERROR_INVALID_VALUE);  // not a kernel node

    // Kernel parameters as cuLaunchKernel takes them, and nothing else.
    float factor = 2.0f;
    int n = N;
    void *args[] = {&x, &factor, &n};
    kernel.func = scale_fn;
    kernel.gridDimX = kernel.gridDimY = kernel.gridDimZ = 1;
    kernel.blockDimX = kernel.blockDimY = kernel.blockDimZ = 1;
    kernel.kernelParams = args;
    char block[16] = {};
    size_t size = sizeof block;  // scale takes 16 bytes: 8 + 4 + 4
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, block, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    kernel.extra = extra;
    DRV_EXPECT(cuGraphAddKernelNode(&node, a, nullptr, 0, &kernel), CUDA_ERROR_INVALID_VALUE);  // both styles
    kernel.kernelParams = nullptr;
    size = 12;
    DRV_EXPECT(cuGraphAddKernelNode(&node, a, nullptr, 0, &kernel), CUDA_ERROR_INVALID_VALUE);  // a wrong size
    size = 16;
    DRV(cuGraphAddKernelNode(&node, a, nullptr, 0, &kernel));
    kernel.func = nullptr;
    kernel.extra = nullptr;
    DRV_EXPECT(cuGraphAddKernelNode(&node, a, nullptr, 0, &kernel), CUDA_ERROR_INVALID_VALUE);  // no kernel

    // Capture: what cannot be captured invalidates it.
    CUstream stream, other;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    DRV(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CUgraph graph = a;
    DRV_EXPECT(cuStreamEndCapture(stream, &graph), CUDA_ERROR_ILLEGAL_STATE);  // not capturing
    DRV_EXPECT(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
               CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    DRV(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    DRV_EXPECT(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    DRV(cuMemsetD32Async(y, 0, N, stream));
    DRV_EXPECT(cuStreamSynchronize(stream), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUstreamCaptureStatus status;
    DRV(cuStreamIsCapturing(stream, &status));
    REQUIRE(status == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    DRV_EXPECT(cuMemsetD32Async(y, 0, N, stream), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    DRV_EXPECT(cuStreamEndCapture(stream, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    REQUIRE(graph == nullptr);

    // A global capture forbids cuMemAlloc in any thread whose mode is not relaxed.
    CUdeviceptr scratch;
    DRV(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    DRV(cuThreadExchangeStreamCaptureMode(&mode));
    REQUIRE(mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
    DRV(cuMemAlloc(&scratch, 256));  // relaxed: allowed
    DRV(cuMemFree(scratch));
    DRV(cuThreadExchangeStreamCaptureMode(&mode));
    REQUIRE(mode == CU_STREAM_CAPTURE_MODE_RELAXED);
    DRV_EXPECT(cuMemAlloc(&scratch, 256), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    DRV_EXPECT(cuStreamEndCapture(stream, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // A forked stream must be joined back before the capture ends.
    CUevent fork;
    DRV(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    DRV(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    DRV(cuEventRecord(fork, stream));
    DRV(cuStreamWaitEvent(other, fork, 0));
    DRV(cuMemsetD32Async(y, 0, N, other));
    DRV_EXPECT(cuStreamEndCapture(stream, &graph), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    DRV(cuStreamIsCapturing(other, &status));
    REQUIRE(status == CU_STREAM_CAPTURE_STATUS_NONE);

    // User objects: the destructor runs when the last reference goes.
    CUuserObject object;
    DRV_EXPECT(cuUserObjectCreate(&object, &destroyed, destroy_object, 1, 0), CUDA_ERROR_INVALID_VALUE);
    DRV(cuUserObjectCreate(&object, &destroyed, destroy_object, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    DRV(cuGraphRetainUserObject(b, object, 1, CU_GRAPH_USER_OBJECT_MOVE));
    DRV(cuUserObjectRetain(object, 1));
    DRV(cuUserObjectRelease(object, 1));
    REQUIRE(destroyed == 0);
    DRV(cuGraphDestroy(b));
    REQUIRE(destroyed == 1);

    DRV(cuEventDestroy(fork));
    DRV(cuStreamDestroy(stream));
    DRV(cuStreamDestroy(other));
    DRV(cuGraphDestroy(a));
    DRV_EXPECT(cuGraphDestroy(a), CUDA_ERROR_INVALID_VALUE);
    printf("ok misuse\n");
}

// ------------------------------------------------------------------ any node type (cuGraphAddNode)

static void any_nodes()
{
    CUgraph graph;
    DRV(cuGraphCreate(&graph, 0));
    CUgraphNodeParams params = {};
    params.type = CU_GRAPH_NODE_TYPE_MEMSET;
    params.memset.dst = x;
    params.memset.value = bits_of(2.0f);
    params.memset.elementSize = 4;
    params.memset.width = N;
    params.memset.height = 1;
    params.memset.ctx = context;
    CUgraphNode set, scaled, copied;
    DRV(cuGraphAddNode(&set, graph, nullptr, nullptr, 0, &params));
    float factor = 3.0f;
    int n = N;
    void *args[] = {&x, &factor, &n};
    CUgraphNodeParams kernel = {};
    kernel.type = CU_GRAPH_NODE_TYPE_KERNEL;
    kernel.kernel.func = scale_fn;
    kernel.kernel.gridDimX = (N + 255) / 256;
    kernel.kernel.gridDimY = kernel.kernel.gridDimZ = 1;
    kernel.kernel.blockDimX = 256;
    kernel.kernel.blockDimY = kernel.kernel.blockDimZ = 1;
    kernel.kernel.kernelParams = args;
    DRV(cuGraphAddNode(&scaled, graph, &set, nullptr, 1, &kernel));
    CUgraphNodeParams copy = {};
    copy.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    copy.memcpy.copyCtx = context;
    copy.memcpy.copyParams = linear_copy(CU_MEMORYTYPE_HOST, host_out, CU_MEMORYTYPE_DEVICE, (void *)x, BYTES);
    // CUDA 12.2's cuGraphAddNode, without edge data.
    typedef CUresult(CUDAAPI * AddNodeV1)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);
    DRV(legacy<AddNodeV1>("cuGraphAddNode", 12020)(&copied, graph, &scaled, 1, &copy));
    CUgraphExec exec;
    DRV(cuGraphInstantiate(&exec, graph, 0));
    DRV(cuGraphLaunch(exec, 0));
    DRV(cuCtxSynchronize());
    REQUIRE(host_out[0] == 6.0f && host_out[N - 1] == 6.0f);

    // Set through the generic calls: in the graph, then in the executable.
    factor = 5.0f;
    DRV(cuGraphNodeSetParams(scaled, &kernel));
    DRV(cuGraphExecNodeSetParams(exec, scaled, &kernel));
    DRV(cuGraphLaunch(exec, 0));
    DRV(cuCtxSynchronize());
    REQUIRE(host_out[7] == 10.0f);
    DRV_EXPECT(cuGraphNodeSetParams(set, &kernel), CUDA_ERROR_INVALID_VALUE);  // a memset node given a kernel
    DRV(cuGraphExecDestroy(exec));
    DRV(cuGraphDestroy(graph));
    printf("ok any\n");
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 3);
    DRV(cuInit(0));
    CUdevice device;
    DRV(cuDeviceGet(&device, 0));
    DRV(cuDevicePrimaryCtxRetain(&context, device));
    DRV(cuCtxSetCurrent(context));
    CUmodule module;
    DRV(cuModuleLoad(&module, argv[1]));
    DRV(cuModuleGetFunction(&scale_fn, module, "scale"));
    DRV(cuModuleGetFunction(&bias_fn, module, "add_bias"));
    CUlibrary library;
    DRV(cuLibraryLoadFromFile(&library, argv[1], nullptr, nullptr, 0, nullptr, nullptr, 0));
    DRV(cuLibraryGetKernel(&bias_kernel, library, "add_bias"));

    DRV(cuMemAlloc(&x, BYTES));
    DRV(cuMemAlloc(&y, BYTES));
    DRV(cuMemAlloc(&words, 16));
    DRV(cuMemAllocHost((void **)&host_in, BYTES));
    DRV(cuMemAllocHost((void **)&host_out, BYTES));
    DRV(cuMemAllocHost((void **)&host_out2, BYTES));

    explicit_graph(argv[2]);
    batch_nodes();
    memory_nodes();
    capture();
    any_nodes();
    misuse();

    DRV(cuLibraryUnload(library));
    DRV(cuModuleUnload(module));
    printf("PASSED driver_graphs\n");
    return 0;
}
