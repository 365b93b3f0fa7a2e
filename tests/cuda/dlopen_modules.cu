// CUDA modules that come and go: a library with a kernel is loaded and
// closed again before the program's first CUDA call (its registration never
// reaches the client), then loaded again after it and used, then closed.
//
//   dlopen_modules LIBRARY
#include <cstdio>
#include <dlfcn.h>
#include <cuda_runtime.h>

#include "check.h"

__global__ void vectorAdd(const float *a, const float *b, float *c, int n) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

typedef cudaError_t (*square_fn)(float *, int);

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s LIBRARY\n", argv[0]); return 2; }
    void *library = dlopen(argv[1], RTLD_NOW);
    if (!library) { printf("FAILED dlopen: %s\n", dlerror()); return 1; }
    dlclose(library);  // before any CUDA call: its module was only queued

    const int n = 1000;
    float a[n], b[n], c[n];
    for (int i = 0; i < n; i++) { a[i] = i; b[i] = 2 * i; }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, sizeof(a)));
    CHECK(cudaMalloc(&db, sizeof(b)));
    CHECK(cudaMalloc(&dc, sizeof(c)));
    CHECK(cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice));
    vectorAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CHECK(cudaMemcpy(c, dc, sizeof(c), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) REQUIRE(c[i] == 3 * i);

    library = dlopen(argv[1], RTLD_NOW);  // now the client runs: registered at once
    if (!library) { printf("FAILED dlopen: %s\n", dlerror()); return 1; }
    square_fn square = (square_fn)dlsym(library, "library_square");
    if (!square) { printf("FAILED dlsym: %s\n", dlerror()); return 1; }
    CHECK(square(dc, n));
    CHECK(cudaMemcpy(c, dc, sizeof(c), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) REQUIRE(c[i] == 9.0f * i * i);
    dlclose(library);

    vectorAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);  // the program's own module is still there
    CHECK(cudaMemcpy(c, dc, sizeof(c), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) REQUIRE(c[i] == 3 * i);
    printf("PASSED dlopen_modules\n");
    return 0;
}
