// A module whose fatbinary (3 MiB of initialised __device__ data) is larger
// than the frames bulk bytes travel in on a ZeroMQ link: it loads and its
// kernel reads the initial values.  Prints "ok big_module".
#include <cstdio>
#include "check.h"
__device__ char table[3 << 20] = {7};
__global__ void readTable(int *out) { out[0] = table[0] + table[(3 << 20) - 1]; }
int main() {
    int *d, h = -1;
    CHECK(cudaMalloc(&d, sizeof(int)));
    readTable<<<1, 1>>>(d);
    CHECK(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
    REQUIRE(h == 7);
    printf("ok big_module\n");
    return 0;
}
