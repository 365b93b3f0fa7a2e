// Memory pools shared between processes of one GPU: the parent forks two
// children before any of them touches CUDA.  The parent makes a pool with a
// POSIX file descriptor handle, allocates from it, writes, and sends the
// pool's descriptor (SCM_RIGHTS) and its pointers' export data to the
// importer child, which imports the pool and the pointers (runtime, then
// driver API), checks the bytes, writes its own and frees them; the parent
// sees the child's bytes.  The other child exports a pointer and exits: its
// export is stale.  Then the errors: a pool without handle types, a bad
// handle type, a foreign or garbage descriptor, garbage export data, a
// pointer freed since its export.
// Each part prints "ok NAME"; a failure prints "FAILED ...".
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "driver_check.h"

static const size_t N = 1 << 16;
static const cudaMemAllocationHandleType POSIX_FD = cudaMemHandleTypePosixFileDescriptor;

// Export data of the pointers the parent shares: a (runtime), b (freed: stale), c (driver API).
struct Exports {
    cudaMemPoolPtrExportData a, b;
    CUmemPoolPtrExportData c;
};

static void send_with_fd(int sock, const void *data, size_t size, int fd) {
    iovec io = {const_cast<void *>(data), size};
    char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr message = {};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &fd, sizeof fd);
    REQUIRE(sendmsg(sock, &message, 0) == (ssize_t)size);
}

static int receive_with_fd(int sock, void *data, size_t size) {
    iovec io = {data, size};
    char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr message = {};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    REQUIRE(recvmsg(sock, &message, MSG_WAITALL) == (ssize_t)size);
    cmsghdr *header = CMSG_FIRSTHDR(&message);
    REQUIRE(header != nullptr && header->cmsg_type == SCM_RIGHTS);
    int fd;
    memcpy(&fd, CMSG_DATA(header), sizeof fd);
    return fd;
}

static cudaMemPool_t shareable_pool() {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    props.handleTypes = POSIX_FD;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    return pool;
}

static void *as_handle(int fd) { return (void *)(uintptr_t)fd; }

// The importer: the parent's pool and pointers, then the errors.
static void importer(int sock) {
    Exports exports;
    int fd = receive_with_fd(sock, &exports, sizeof exports);
    cudaMemPool_t pool;
    EXPECT_AND_CLEAR(cudaMemPoolImportFromShareableHandle(&pool, as_handle(fd), cudaMemHandleTypeNone, 0),
                     cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolImportFromShareableHandle(&pool, as_handle(fd), cudaMemHandleTypeFabric, 0),
                     cudaErrorNotSupported);
    EXPECT_AND_CLEAR(cudaMemPoolImportFromShareableHandle(&pool, as_handle(fd), POSIX_FD, 1), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolImportFromShareableHandle(nullptr, as_handle(fd), POSIX_FD, 0), cudaErrorInvalidValue);
    int pipe_ends[2];  // garbage: descriptors that are no pool's
    REQUIRE(pipe(pipe_ends) == 0);
    EXPECT_AND_CLEAR(cudaMemPoolImportFromShareableHandle(&pool, as_handle(pipe_ends[0]), POSIX_FD, 0),
                     cudaErrorInvalidValue);
    FILE *garbage = tmpfile();
    REQUIRE(garbage != nullptr);
    char noise[64];
    memset(noise, 0x5A, sizeof noise);
    REQUIRE(fwrite(noise, 1, sizeof noise, garbage) == sizeof noise && fflush(garbage) == 0);
    EXPECT_AND_CLEAR(cudaMemPoolImportFromShareableHandle(&pool, as_handle(fileno(garbage)), POSIX_FD, 0),
                     cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolImportFromShareableHandle(&pool, as_handle(-1), POSIX_FD, 0), cudaErrorInvalidValue);
    fclose(garbage);
    close(pipe_ends[0]);
    close(pipe_ends[1]);

    CHECK(cudaMemPoolImportFromShareableHandle(&pool, as_handle(fd), POSIX_FD, 0));
    void *nothing;  // an imported pool only maps the exporter's pointers
    EXPECT_AND_CLEAR(cudaMallocFromPoolAsync(&nothing, 64, pool, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaDeviceSetMemPool(0, pool), cudaErrorInvalidValue);
    int again_fd;
    EXPECT_AND_CLEAR(cudaMemPoolExportToShareableHandle(&again_fd, pool, POSIX_FD, 0), cudaErrorInvalidValue);
    cudaMemPool_t own;
    CHECK(cudaDeviceGetDefaultMemPool(&own, 0));
    EXPECT_AND_CLEAR(cudaMemPoolImportPointer(&nothing, own, &exports.a), cudaErrorInvalidValue);  // not imported
    cudaMemPoolPtrExportData forged;
    memset(&forged, 0x5A, sizeof forged);
    EXPECT_AND_CLEAR(cudaMemPoolImportPointer(&nothing, pool, &forged), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolImportPointer(&nothing, pool, &exports.b), cudaErrorInvalidValue);  // freed: stale
    EXPECT_AND_CLEAR(cudaMemPoolImportPointer(&nothing, pool, nullptr), cudaErrorInvalidValue);

    unsigned char *shared = nullptr, *again = nullptr;
    CHECK(cudaMemPoolImportPointer((void **)&shared, pool, &exports.a));
    CHECK(cudaMemPoolImportPointer((void **)&again, pool, &exports.a));  // the same pointer, counted
    REQUIRE(again == shared);
    cudaPointerAttributes attributes;
    CHECK(cudaPointerGetAttributes(&attributes, shared));
    REQUIRE(attributes.type == cudaMemoryTypeDevice && attributes.device == 0);
    std::vector<unsigned char> seen(N);
    CHECK(cudaMemcpy(seen.data(), shared, N, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N; i++) REQUIRE(seen[i] == (unsigned char)(i * 7));
    CHECK(cudaMemset(shared + N / 2, 0xAB, N / 2));  // the parent will see these
    CHECK(cudaDeviceSynchronize());
    EXPECT_AND_CLEAR(cudaIpcCloseMemHandle(shared), cudaErrorInvalidValue);  // not an IPC handle's
    CHECK(cudaFree(again));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaFreeAsync(shared, stream));
    CHECK(cudaStreamSynchronize(stream));
    EXPECT_AND_CLEAR(cudaFree(shared), cudaErrorInvalidValue);  // freed already
    CHECK(cudaMemPoolDestroy(pool));
    printf("ok importer\n");

    // The driver's face of the same descriptor.
    DRV(cuInit(0));
    CUmemoryPool driver_pool;
    DRV_EXPECT(cuMemPoolImportFromShareableHandle(&driver_pool, as_handle(fd), CU_MEM_HANDLE_TYPE_NONE, 0),
               CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemPoolImportFromShareableHandle(&driver_pool, as_handle(fd), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUdeviceptr mapped = 0;
    DRV(cuMemPoolImportPointer(&mapped, driver_pool, &exports.c));
    unsigned char first = 0;
    DRV(cuMemcpyDtoH(&first, mapped, 1));
    REQUIRE(first == 0x5C);
    DRV(cuMemsetD8(mapped, 0x11, 1));
    CHECK(cudaDeviceSynchronize());
    DRV(cuMemFree(mapped));
    DRV_EXPECT(cuMemFree(mapped), CUDA_ERROR_INVALID_VALUE);
    CUmemPoolPtrExportData stale;
    memcpy(&stale, &exports.b, sizeof stale);
    DRV_EXPECT(cuMemPoolImportPointer(&mapped, driver_pool, &stale), CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemPoolDestroy(driver_pool));
    close(fd);
    char done = 1;
    REQUIRE(write(sock, &done, 1) == 1);
    printf("ok driver_importer\n");
}

// The other child: exports a pointer of its pool and exits.
static void short_lived(int sock) {
    cudaMemPool_t pool = shareable_pool();
    void *memory;
    CHECK(cudaMallocFromPoolAsync(&memory, 4096, pool, 0));
    CHECK(cudaStreamSynchronize(0));
    struct {
        cudaMemPoolPtrExportData data;
    } message;
    CHECK(cudaMemPoolExportPointer(&message.data, memory));
    int fd = -1;
    CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, POSIX_FD, 0));
    send_with_fd(sock, &message, sizeof message, fd);
    close(fd);
    printf("ok short_lived\n");
}

static void errors(cudaMemPool_t pool, cudaStream_t stream) {
    int supported = -1;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
    REQUIRE(supported == POSIX_FD);
    cudaDeviceProp properties;
    CHECK(cudaGetDeviceProperties(&properties, 0));
    REQUIRE(properties.memoryPoolSupportedHandleTypes == POSIX_FD);
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.handleTypes = cudaMemHandleTypeFabric;
    cudaMemPool_t refused;
    EXPECT_AND_CLEAR(cudaMemPoolCreate(&refused, &props), cudaErrorNotSupported);

    cudaMemPool_t plain;  // created without handle types: not shareable
    CHECK(cudaDeviceGetDefaultMemPool(&plain, 0));
    int fd = -1;
    EXPECT_AND_CLEAR(cudaMemPoolExportToShareableHandle(&fd, plain, POSIX_FD, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypeWin32, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypeNone, 0), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolExportToShareableHandle(&fd, pool, POSIX_FD, 1), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolExportToShareableHandle(nullptr, pool, POSIX_FD, 0), cudaErrorInvalidValue);
    REQUIRE(fd == -1);
    CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, POSIX_FD, 0));
    cudaMemPool_t own;  // a process imports other processes' pools, not its own
    EXPECT_AND_CLEAR(cudaMemPoolImportFromShareableHandle(&own, as_handle(fd), POSIX_FD, 0), cudaErrorInvalidValue);
    close(fd);

    cudaMemPoolPtrExportData data;
    char *block, *plain_block, *allocated;
    CHECK(cudaMallocFromPoolAsync((void **)&block, 256, pool, stream));
    EXPECT_AND_CLEAR(cudaMemPoolExportPointer(&data, block + 1), cudaErrorInvalidValue);  // not a block's start
    EXPECT_AND_CLEAR(cudaMemPoolExportPointer(nullptr, block), cudaErrorInvalidValue);
    CHECK(cudaMallocAsync((void **)&plain_block, 256, stream));  // the default pool's: no handle types
    EXPECT_AND_CLEAR(cudaMemPoolExportPointer(&data, plain_block), cudaErrorInvalidValue);
    CHECK(cudaMalloc((void **)&allocated, 256));  // not a pool's
    EXPECT_AND_CLEAR(cudaMemPoolExportPointer(&data, allocated), cudaErrorInvalidValue);
    CHECK(cudaFree(allocated));
    CHECK(cudaFreeAsync(plain_block, stream));
    CHECK(cudaFreeAsync(block, stream));
    CHECK(cudaStreamSynchronize(stream));
    printf("ok errors\n");
}

int main() {
    int to_importer[2], from_short_lived[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, to_importer) == 0);
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, from_short_lived) == 0);
    fflush(stdout);
    pid_t importer_pid = fork();
    REQUIRE(importer_pid >= 0);
    if (importer_pid == 0) {
        close(to_importer[0]);
        close(from_short_lived[0]);
        close(from_short_lived[1]);
        importer(to_importer[1]);
        exit(0);  // not _exit: the session ends as a program's does
    }
    pid_t short_lived_pid = fork();
    REQUIRE(short_lived_pid >= 0);
    if (short_lived_pid == 0) {
        close(to_importer[0]);
        close(to_importer[1]);
        close(from_short_lived[0]);
        short_lived(from_short_lived[1]);
        exit(0);
    }
    close(to_importer[1]);
    close(from_short_lived[1]);

    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cudaMemPool_t pool = shareable_pool();
    errors(pool, stream);

    Exports exports;
    unsigned char *a, *b;
    CHECK(cudaMallocFromPoolAsync((void **)&a, N, pool, stream));
    std::vector<unsigned char> bytes(N);
    for (size_t i = 0; i < N; i++) bytes[i] = (unsigned char)(i * 7);
    CHECK(cudaMemcpyAsync(a, bytes.data(), N, cudaMemcpyHostToDevice, stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemPoolExportPointer(&exports.a, a));
    CHECK(cudaMallocFromPoolAsync((void **)&b, 4096, pool, stream));
    CHECK(cudaMemPoolExportPointer(&exports.b, b));
    CHECK(cudaFreeAsync(b, stream));  // its export is stale from now on
    CHECK(cudaStreamSynchronize(stream));
    DRV(cuInit(0));
    CUdeviceptr c;
    DRV(cuMemAllocFromPoolAsync(&c, 4096, (CUmemoryPool)pool, (CUstream)stream));
    DRV(cuMemsetD8Async(c, 0x5C, 4096, (CUstream)stream));
    DRV(cuStreamSynchronize((CUstream)stream));
    DRV(cuMemPoolExportPointer(&exports.c, c));
    int fd = -1;
    DRV_EXPECT(cuMemPoolExportToShareableHandle(&fd, (CUmemoryPool)pool, CU_MEM_HANDLE_TYPE_FABRIC, 0),
               CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemPoolExportToShareableHandle(&fd, (CUmemoryPool)pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    send_with_fd(to_importer[0], &exports, sizeof exports, fd);
    close(fd);
    char done = 0;
    REQUIRE(read(to_importer[0], &done, 1) == 1 && done == 1);
    int status = 0;
    REQUIRE(waitpid(importer_pid, &status, 0) == importer_pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(cudaMemcpy(bytes.data(), a, N, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N; i++) REQUIRE(bytes[i] == (i < N / 2 ? (unsigned char)(i * 7) : 0xAB));
    unsigned char first = 0;
    DRV(cuMemcpyDtoH(&first, c, 1));
    REQUIRE(first == 0x11);
    CHECK(cudaFreeAsync(a, stream));
    DRV(cuMemFreeAsync(c, (CUstream)stream));
    CHECK(cudaStreamSynchronize(stream));
    uint64_t reserved = 1;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    REQUIRE(reserved == 0);  // exported blocks are not kept for reuse
    CHECK(cudaMemPoolDestroy(pool));
    printf("ok shared\n");

    // The short-lived child's export, after it exited: stale.
    struct {
        cudaMemPoolPtrExportData data;
    } message;
    int orphan_fd = receive_with_fd(from_short_lived[0], &message, sizeof message);
    REQUIRE(waitpid(short_lived_pid, &status, 0) == short_lived_pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0);
    cudaMemPool_t orphan;
    CHECK(cudaMemPoolImportFromShareableHandle(&orphan, as_handle(orphan_fd), POSIX_FD, 0));
    void *gone;
    EXPECT_AND_CLEAR(cudaMemPoolImportPointer(&gone, orphan, &message.data), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemPoolImportPointer(&gone, orphan, &exports.a), cudaErrorInvalidValue);  // another pool's
    CHECK(cudaMemPoolDestroy(orphan));
    close(orphan_fd);
    CHECK(cudaGetLastError());
    printf("ok exporter_gone\n");
    printf("PASSED pool_ipc\n");
    return 0;
}
