// Physical memory shared between two processes through the driver's POSIX
// file descriptor handles: the parent forks a child before either touches
// CUDA, makes shareable physical memory (cuMemCreate with
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), maps and fills it, and passes the
// descriptor cuMemExportToShareableHandle gives over a Unix socket; the child
// imports it, maps it, checks the bytes and writes its own, which the parent
// then sees.  Then the errors.  Each part prints "ok NAME"; a failure prints
// "FAILED ...".
#include <cuda.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <vector>

#include "driver_check.h"

static void send_fd(int sock, int fd) {
    char byte = 0;
    struct iovec iov = {&byte, 1};
    char control[CMSG_SPACE(sizeof(int))];
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    REQUIRE(sendmsg(sock, &msg, 0) == 1);
}

static int receive_fd(int sock) {
    char byte;
    struct iovec iov = {&byte, 1};
    char control[CMSG_SPACE(sizeof(int))];
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    REQUIRE(recvmsg(sock, &msg, 0) == 1);
    int fd = -1;
    memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof fd);
    return fd;
}

static CUmemAllocationProp shareable_prop() {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
}

// Reserve, map and open `size` bytes of `handle` for GPU0.
static CUdeviceptr map(CUmemGenericAllocationHandle handle, size_t size) {
    CUdeviceptr ptr;
    DRV(cuMemAddressReserve(&ptr, size, 0, 0, 0));
    DRV(cuMemMap(ptr, size, 0, handle, 0));
    CUmemAccessDesc access;
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(cuMemSetAccess(ptr, size, &access, 1));
    return ptr;
}

static void child(int sock) {
    int fd = receive_fd(sock);
    size_t size = 0;
    REQUIRE(read(sock, &size, sizeof size) == (ssize_t)sizeof size);
    DRV(cuInit(0));
    CUcontext ctx;
    DRV(cuDevicePrimaryCtxRetain(&ctx, 0));
    DRV(cuCtxSetCurrent(ctx));
    CUmemGenericAllocationHandle handle;
    DRV(cuMemImportFromShareableHandle(&handle, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);  // the handle holds the memory now
    CUmemAllocationProp prop;
    DRV(cuMemGetAllocationPropertiesFromHandle(&prop, handle));
    REQUIRE(prop.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && prop.location.id == 0);
    CUdeviceptr ptr = map(handle, size);
    std::vector<unsigned char> bytes(size);
    DRV(cuMemcpyDtoH(bytes.data(), ptr, size));
    for (size_t i = 0; i < size; i++) REQUIRE(bytes[i] == (unsigned char)(i * 13));
    DRV(cuMemsetD8(ptr + size / 2, 0x5C, size / 2));  // the parent will see these
    DRV(cuCtxSynchronize());
    DRV(cuMemUnmap(ptr, size));
    DRV(cuMemAddressFree(ptr, size));
    DRV(cuMemRelease(handle));
    char done = 1;
    REQUIRE(write(sock, &done, 1) == 1);
    printf("ok child\n");
}

int main() {
    int socks[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, socks) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(socks[0]);
        child(socks[1]);
        fflush(stdout);
        _exit(0);
    }
    close(socks[1]);
    DRV(cuInit(0));
    CUcontext ctx;
    DRV(cuDevicePrimaryCtxRetain(&ctx, 0));
    DRV(cuCtxSetCurrent(ctx));
    int supported = 0;
    DRV(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
    REQUIRE(supported == 1);
    CUmemAllocationProp prop = shareable_prop();
    size_t size = 0;
    DRV(cuMemGetAllocationGranularity(&size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle handle;
    DRV(cuMemCreate(&handle, size, &prop, 0));
    CUdeviceptr ptr = map(handle, size);
    std::vector<unsigned char> bytes(size);
    for (size_t i = 0; i < size; i++) bytes[i] = (unsigned char)(i * 13);
    DRV(cuMemcpyHtoD(ptr, bytes.data(), size));
    int fd = -1;
    DRV(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    REQUIRE(fd >= 0);
    send_fd(socks[0], fd);
    close(fd);
    REQUIRE(write(socks[0], &size, sizeof size) == (ssize_t)sizeof size);
    char done = 0;
    REQUIRE(read(socks[0], &done, 1) == 1 && done == 1);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    DRV(cuMemcpyDtoH(bytes.data(), ptr, size));
    for (size_t i = 0; i < size; i++) REQUIRE(bytes[i] == (i < size / 2 ? (unsigned char)(i * 13) : 0x5C));
    printf("ok shared\n");

    int other = -1;  // the errors
    DRV_EXPECT(cuMemExportToShareableHandle(&other, handle, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_INVALID_VALUE);
    CUmemAllocationProp plain = shareable_prop();
    plain.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CUmemGenericAllocationHandle unshared;
    DRV(cuMemCreate(&unshared, size, &plain, 0));
    DRV_EXPECT(cuMemExportToShareableHandle(&other, unshared, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               CUDA_ERROR_INVALID_VALUE);
    int pipe_ends[2];
    REQUIRE(pipe(pipe_ends) == 0);
    CUmemGenericAllocationHandle imported;
    DRV_EXPECT(cuMemImportFromShareableHandle(&imported, (void *)(uintptr_t)pipe_ends[0],
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               CUDA_ERROR_INVALID_VALUE);
    DRV(cuMemRelease(unshared));
    DRV(cuMemUnmap(ptr, size));
    DRV(cuMemAddressFree(ptr, size));
    DRV(cuMemRelease(handle));
    printf("ok errors\n");
    printf("PASSED vmm_ipc\n");
    return 0;
}
