// Streams, mapped and managed memory, from the program's view.
//
//   streams idle-sync KERNEL_MS N     N cudaStreamSynchronize of an idle stream, alone and
//                                     while another stream runs a KERNEL_MS kernel
//   streams concurrency KERNEL_MS N   one KERNEL_MS kernel on each of N streams (and N
//                                     one after the other on one stream): wall times
//   streams zero-copy BYTES REPEATS   a kernel adding 1 to BYTES of input into output:
//                                     through mapped host memory, and with explicit copies
//   streams managed BYTES REPEATS     a kernel filling BYTES that the host then reads: managed
//                                     memory after cudaDeviceSynchronize, and device memory
//                                     with cudaMemcpy to a host buffer
//   streams managed-delta BYTES REPEATS  cudaDeviceSynchronize after a kernel changed 1 MiB of
//                                     BYTES of managed memory, and after one changed all of it,
//                                     read by the host or not
//
// Prints one RESULT {...} line with the times in microseconds.  On a GPU the
// long kernel spins on the global timer; on a sim server its plugin's COSTS
// models it (benchmarks/cuda/stream_kernels.py).
#include <cstring>
#include <algorithm>
#include <vector>
#include "bench_common.h"

__global__ void busyKernel(long long nanoseconds)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long)nanoseconds);
}

__global__ void addOneBytes(const unsigned char *in, unsigned char *out, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = in[i] + 1;
}

static double median_us(std::vector<long long> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2] / 1000.0;
}

static int idle_sync(long long kernel_ms, int n)
{
    cudaStream_t busy, idle;
    CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking));
    std::vector<long long> alone(n), beside(n);
    // Untimed first: the program's session makes the server start its next
    // spare worker, which shares a small machine's cores for a while.
    for (long long until = now_ns() + 1000000000LL; now_ns() < until;)
        CHECK(cudaStreamSynchronize(idle));
    for (int i = 0; i < n; i++) {
        long long t = now_ns();
        CHECK(cudaStreamSynchronize(idle));
        alone[i] = now_ns() - t;
    }
    busyKernel<<<1, 1, 0, busy>>>(kernel_ms * 1000000LL);
    CHECK(cudaGetLastError());
    long long kernel_started = now_ns();
    int done = 0;
    for (; done < n && now_ns() - kernel_started < kernel_ms * 800000LL; done++) {  // within 80% of the kernel
        long long t = now_ns();
        CHECK(cudaStreamSynchronize(idle));
        beside[done] = now_ns() - t;
    }
    bool still_running = cudaStreamQuery(busy) == cudaErrorNotReady;
    CHECK(cudaStreamSynchronize(busy));
    beside.resize(done ? done : 1);
    printf("RESULT {\"alone_us\": %.2f, \"beside_us\": %.2f, \"beside_calls\": %d, \"kernel_still_running\": %s}\n",
           median_us(alone), median_us(beside), done, still_running ? "true" : "false");
    return 0;
}

static int concurrency(long long kernel_ms, int n)
{
    std::vector<cudaStream_t> streams(n);
    for (auto &s : streams)
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize());
    long long t = now_ns();
    for (auto &s : streams)
        busyKernel<<<1, 1, 0, s>>>(kernel_ms * 1000000LL);
    CHECK(cudaDeviceSynchronize());
    long long parallel = now_ns() - t;
    t = now_ns();
    for (int i = 0; i < n; i++)
        busyKernel<<<1, 1, 0, streams[0]>>>(kernel_ms * 1000000LL);
    CHECK(cudaDeviceSynchronize());
    long long serial = now_ns() - t;
    printf("RESULT {\"streams\": %d, \"parallel_us\": %.1f, \"one_stream_us\": %.1f}\n", n, parallel / 1000.0,
           serial / 1000.0);
    return 0;
}

static int zero_copy(long long bytes, int repeats)
{
    unsigned char *in_mapped, *out_mapped, *in_host, *out_host, *in_dev, *out_dev, *in_ptr, *out_ptr;
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    CHECK(cudaHostAlloc(&in_mapped, bytes, cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&out_mapped, bytes, cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer(&in_ptr, in_mapped, 0));
    CHECK(cudaHostGetDevicePointer(&out_ptr, out_mapped, 0));
    in_host = (unsigned char *)malloc(bytes);
    out_host = (unsigned char *)malloc(bytes);
    CHECK(cudaMalloc(&in_dev, bytes));
    CHECK(cudaMalloc(&out_dev, bytes));
    std::vector<long long> mapped(repeats), copies(repeats);
    for (int r = 0; r < repeats; r++) {
        long long t = now_ns();
        memset(in_mapped, r, bytes);  // the host writes the input...
        addOneBytes<<<256, 256>>>(in_ptr, out_ptr, bytes);
        CHECK(cudaDeviceSynchronize());
        long long sum = 0;  // ...and reads the output
        for (long long i = 0; i < bytes; i += 4096)
            sum += out_mapped[i];
        mapped[r] = now_ns() - t;
        if (sum != (long long)((r + 1) & 0xff) * ((bytes + 4095) / 4096)) {
            fprintf(stderr, "FAILED: mapped output wrong in round %d\n", r);
            return 1;
        }
        t = now_ns();
        memset(in_host, r, bytes);
        CHECK(cudaMemcpy(in_dev, in_host, bytes, cudaMemcpyHostToDevice));
        addOneBytes<<<256, 256>>>(in_dev, out_dev, bytes);
        CHECK(cudaMemcpy(out_host, out_dev, bytes, cudaMemcpyDeviceToHost));
        sum = 0;
        for (long long i = 0; i < bytes; i += 4096)
            sum += out_host[i];
        copies[r] = now_ns() - t;
    }
    printf("RESULT {\"bytes\": %lld, \"mapped_us\": %.1f, \"copies_us\": %.1f}\n", bytes, median_us(mapped),
           median_us(copies));
    return 0;
}

__global__ void fillBytes(unsigned char *out, long long n, int value)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = (unsigned char)value;
}

// What a host touch of managed memory costs after a kernel wrote it, with
// and without a prefetch to the host first, against the explicit copy of
// the same bytes; the host reads a byte of every page.
static int managed(long long bytes, int repeats)
{
    unsigned char *managed_mem, *dev, *host = (unsigned char *)malloc(bytes);
    CHECK(cudaMallocManaged(&managed_mem, bytes));
    CHECK(cudaMalloc(&dev, bytes));
    memset(host, 0, bytes);
    std::vector<long long> touch(repeats), prefetched(repeats), copy(repeats);
    long long pages = (bytes + 4095) / 4096;
    cudaMemLocation host_location = {cudaMemLocationTypeHost, 0};
    for (int r = 0; r < repeats; r++) {
        long long t = now_ns();
        fillBytes<<<256, 256>>>(managed_mem, bytes, r + 101);
        CHECK(cudaMemPrefetchAsync(managed_mem, bytes, host_location, 0, 0));
        CHECK(cudaDeviceSynchronize());
        long long check = 0;
        for (long long i = 0; i < bytes; i += 4096)
            check += managed_mem[i] != (unsigned char)(r + 101);
        prefetched[r] = now_ns() - t;
        if (check) {
            fprintf(stderr, "FAILED: prefetched managed memory is not what the kernel wrote in round %d\n", r);
            return 1;
        }
        t = now_ns();
        fillBytes<<<256, 256>>>(managed_mem, bytes, r + 1);
        CHECK(cudaDeviceSynchronize());
        long long sum = 0;
        for (long long i = 0; i < bytes; i += 4096)
            sum += managed_mem[i];
        touch[r] = now_ns() - t;
        t = now_ns();
        fillBytes<<<256, 256>>>(dev, bytes, r + 1);
        CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
        for (long long i = 0; i < bytes; i += 4096)
            sum -= host[i];
        copy[r] = now_ns() - t;
        if (sum != 0 || managed_mem[bytes - 1] != (unsigned char)(r + 1)) {
            fprintf(stderr, "FAILED: managed memory differs from the copy in round %d\n", r);
            return 1;
        }
    }
    printf("RESULT {\"bytes\": %lld, \"pages\": %lld, \"managed_us\": %.1f, \"prefetched_us\": %.1f, "
           "\"memcpy_us\": %.1f}\n", bytes, pages, median_us(touch), median_us(prefetched), median_us(copy));
    return 0;
}

// What a synchronisation costs after a kernel changed 1 MiB of a large
// managed allocation (only that comes back), and after one changed all of
// it; the host reads a byte of each changed page.  Then after one changed
// all of it that the host does not read (nothing comes back), against the
// same kernel on device memory.
static int managed_delta(long long bytes, int repeats)
{
    const long long changed = 1 << 20;
    unsigned char *m;
    CHECK(cudaMallocManaged(&m, bytes));
    std::vector<long long> part(repeats), whole(repeats);
    long long sum = 0;
    for (int r = -2; r < repeats; r++) {  // two untimed rounds: the first downloads learn the allocation
        fillBytes<<<256, 256>>>(m + bytes / 2, changed, r + 3);
        long long t = now_ns();
        CHECK(cudaDeviceSynchronize());
        for (long long i = 0; i < changed; i += 4096)
            sum += m[bytes / 2 + i];
        if (r >= 0)
            part[r] = now_ns() - t;
    }
    for (int r = 0; r < repeats; r++) {
        fillBytes<<<256, 256>>>(m, bytes, r + 100);
        long long t = now_ns();
        CHECK(cudaDeviceSynchronize());
        for (long long i = 0; i < bytes; i += 4096)
            sum += m[i];
        whole[r] = now_ns() - t;
    }
    if (m[bytes / 2] != (unsigned char)(repeats + 99) || m[bytes - 1] != (unsigned char)(repeats + 99) || sum == 0) {
        fprintf(stderr, "FAILED: managed memory is not what the kernels wrote\n");
        return 1;
    }
    std::vector<long long> untouched(repeats), device(repeats);
    unsigned char *d;
    CHECK(cudaMalloc(&d, bytes));
    for (int r = 0; r < repeats; r++) {  // all of it changed, and the host does not look; device memory beside it
        fillBytes<<<256, 256>>>(m, bytes, r + 200);
        long long t = now_ns();
        CHECK(cudaDeviceSynchronize());
        untouched[r] = now_ns() - t;
        fillBytes<<<256, 256>>>(d, bytes, r + 200);
        t = now_ns();
        CHECK(cudaDeviceSynchronize());
        device[r] = now_ns() - t;
    }
    CHECK(cudaFree(d));
    if (m[bytes - 1] != (unsigned char)(repeats + 199)) {
        fprintf(stderr, "FAILED: managed memory is not what the last kernel wrote\n");
        return 1;
    }
    printf("RESULT {\"bytes\": %lld, \"changed\": %lld, \"part_us\": %.1f, \"whole_us\": %.1f, "
           "\"untouched_us\": %.1f, \"device_us\": %.1f}\n", bytes, changed, median_us(part), median_us(whole),
           median_us(untouched), median_us(device));
    CHECK(cudaFree(m));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s idle-sync|concurrency|zero-copy|managed|managed-delta A B\n", argv[0]);
        return 2;
    }
    long long a = atoll(argv[2]);
    int b = atoi(argv[3]);
    if (!strcmp(argv[1], "idle-sync"))
        return idle_sync(a, b);
    if (!strcmp(argv[1], "concurrency"))
        return concurrency(a, b);
    if (!strcmp(argv[1], "managed"))
        return managed(a, b);
    if (!strcmp(argv[1], "managed-delta"))
        return managed_delta(a, b);
    return zero_copy(a, b);
}
