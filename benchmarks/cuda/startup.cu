// What starting a CUDA program costs.
//
//   startup [none|count]
//
// `none` makes no CUDA call; `count` makes one (cudaGetDeviceCount), which
// with rcuda connects to the servers.  Built with -DWITH_KERNEL the program
// also holds a kernel, so the runtime registers it while the program starts,
// as in any real CUDA program.  Prints the wall-clock time (CLOCK_REALTIME,
// ns) at the start of main and after the call, so the caller can split the
// program's life into before main, the call, and exit.
#include <cstring>
#include <cstdio>
#include <ctime>
#include <cuda_runtime.h>

#ifdef WITH_KERNEL
__global__ void unused_kernel(int *x) { *x = 1; }
#endif

static long long wall_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long long main_ns = wall_ns();
    int count = -1, status = 0;
    if (argc > 1 && strcmp(argv[1], "count") == 0)
        status = (int)cudaGetDeviceCount(&count);
    long long called_ns = wall_ns();
    printf("RESULT {\"status\": %d, \"count\": %d, \"main_ns\": %lld, \"called_ns\": %lld}\n", status, count,
           main_ns, called_ns);
    fflush(stdout);
    return 0;
}
