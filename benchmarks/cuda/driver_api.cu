// The driver API next to the runtime, in one program and one run.
//
//   driver_api LAUNCHES CALLS REPEATS
//
// Per repeat: LAUNCHES empty-kernel launches as <<<>>> (the program's own
// kernel) and as cuLaunchKernel (the same kernel as PTX, loaded with
// cuModuleLoadData), each loop then cudaDeviceSynchronize; CALLS synchronous
// calls of each API: cudaMemGetInfo against cuMemGetInfo (a round trip
// each), cudaDriverGetVersion against cuDriverGetVersion (answered in the
// process).  Prints one RESULT line (JSON): seconds per loop, per repeat.
#include <cuda.h>
#include "bench_common.h"

__global__ void empty_kernel() {}

static const char empty_ptx[] =
    ".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry empty_kernel()\n{\n\tret;\n}\n";

static void print_times(const char *name, const double *seconds, int repeats, int last)
{
    printf("\"%s\": [", name);
    for (int r = 0; r < repeats; r++) printf("%s%.9f", r ? ", " : "", seconds[r]);
    printf("]%s", last ? "" : ", ");
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s LAUNCHES CALLS REPEATS\n", argv[0]);
        return 2;
    }
    long launches = atol(argv[1]), calls = atol(argv[2]);
    int repeats = atoi(argv[3]);
    if (repeats < 1 || repeats > 16) return 2;
    CUmodule module;
    CUfunction function;
    CHECK(cudaSetDevice(0));  // the primary context, current: the driver's calls need one
    if (cuInit(0) != CUDA_SUCCESS || cuModuleLoadData(&module, empty_ptx) != CUDA_SUCCESS
        || cuModuleGetFunction(&function, module, "empty_kernel") != CUDA_SUCCESS) {
        fprintf(stderr, "FAILED loading the PTX module\n");
        return 1;
    }
    // Warm-up: the first launch of a kernel registers it (a round trip in rcuda).
    empty_kernel<<<1, 32>>>();
    if (cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) return 1;
    CHECK(cudaDeviceSynchronize());
    int version = 0;
    size_t free_bytes, total_bytes;
    double runtime_launch[16], driver_launch[16], runtime_sync[16], driver_sync[16], runtime_local[16],
        driver_local[16];
    for (int r = 0; r < repeats; r++) {
        long long t0 = now_ns();
        for (long i = 0; i < launches; i++) empty_kernel<<<1, 32>>>();
        CHECK(cudaDeviceSynchronize());
        long long t1 = now_ns();
        for (long i = 0; i < launches; i++)
            if (cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) return 1;
        CHECK(cudaDeviceSynchronize());
        long long t2 = now_ns();
        for (long i = 0; i < calls; i++) CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        long long t3 = now_ns();
        for (long i = 0; i < calls; i++)
            if (cuMemGetInfo(&free_bytes, &total_bytes) != CUDA_SUCCESS) return 1;
        long long t4 = now_ns();
        for (long i = 0; i < calls; i++) CHECK(cudaDriverGetVersion(&version));
        long long t5 = now_ns();
        for (long i = 0; i < calls; i++)
            if (cuDriverGetVersion(&version) != CUDA_SUCCESS) return 1;
        long long t6 = now_ns();
        runtime_launch[r] = (t1 - t0) * 1e-9, driver_launch[r] = (t2 - t1) * 1e-9;
        runtime_sync[r] = (t3 - t2) * 1e-9, driver_sync[r] = (t4 - t3) * 1e-9;
        runtime_local[r] = (t5 - t4) * 1e-9, driver_local[r] = (t6 - t5) * 1e-9;
    }
    printf("RESULT {\"launches\": %ld, \"calls\": %ld, ", launches, calls);
    print_times("runtime_launch_s", runtime_launch, repeats, 0);
    print_times("driver_launch_s", driver_launch, repeats, 0);
    print_times("runtime_sync_s", runtime_sync, repeats, 0);
    print_times("driver_sync_s", driver_sync, repeats, 0);
    print_times("runtime_local_s", runtime_local, repeats, 0);
    print_times("driver_local_s", driver_local, repeats, 1);
    printf("}\n");
    return 0;
}
