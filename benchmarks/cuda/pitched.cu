// cudaMemcpy2D of a pitched image against a flat cudaMemcpy of the same
// bytes, in interleaved rounds.
//
//   pitched WIDTH HEIGHT REPEATS
//
// A WIDTH x HEIGHT float image: on the device from cudaMallocPitch (rows
// padded to the GPU's pitch), on the host in a buffer whose rows are padded
// too (a pitch of WIDTH + 32 floats), so neither side is contiguous.  Each
// round times one cudaMemcpy2D each way, and one cudaMemcpy each way of the
// WIDTH * HEIGHT * 4 bytes between a flat host buffer and a flat device
// allocation.  Both directions are checked once first.  Prints one RESULT
// line (JSON) with the seconds of each copy.
#include <cstring>
#include <vector>
#include "bench_common.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s WIDTH HEIGHT REPEATS\n", argv[0]);
        return 2;
    }
    size_t width = atol(argv[1]), height = atol(argv[2]);
    int repeats = atoi(argv[3]);
    size_t row = width * sizeof(float), host_pitch = row + 32 * sizeof(float), bytes = row * height;
    std::vector<unsigned char> image(host_pitch * height), back(host_pitch * height, 0);
    std::vector<unsigned char> flat(bytes), flat_back(bytes);
    for (size_t i = 0; i < image.size(); i++) image[i] = (unsigned char)(i * 13 + 1);
    for (size_t i = 0; i < bytes; i++) flat[i] = (unsigned char)(i * 7);
    void *pitched = nullptr, *device = nullptr;
    size_t pitch = 0;
    CHECK(cudaMallocPitch(&pitched, &pitch, row, height));
    CHECK(cudaMalloc(&device, bytes));
    CHECK(cudaMemcpy2D(pitched, pitch, image.data(), host_pitch, row, height, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2D(back.data(), host_pitch, pitched, pitch, row, height, cudaMemcpyDeviceToHost));
    for (size_t y = 0; y < height; y++)
        if (memcmp(&image[y * host_pitch], &back[y * host_pitch], row) != 0) {
            fprintf(stderr, "FAILED: row %zu came back different\n", y);
            return 1;
        }
    std::vector<double> up2d, down2d, up, down;
    for (int r = 0; r < repeats; r++) {
        long long started = now_ns();
        CHECK(cudaMemcpy2D(pitched, pitch, image.data(), host_pitch, row, height, cudaMemcpyHostToDevice));
        up2d.push_back((now_ns() - started) * 1e-9);
        started = now_ns();
        CHECK(cudaMemcpy(device, flat.data(), bytes, cudaMemcpyHostToDevice));
        up.push_back((now_ns() - started) * 1e-9);
        started = now_ns();
        CHECK(cudaMemcpy2D(back.data(), host_pitch, pitched, pitch, row, height, cudaMemcpyDeviceToHost));
        down2d.push_back((now_ns() - started) * 1e-9);
        started = now_ns();
        CHECK(cudaMemcpy(flat_back.data(), device, bytes, cudaMemcpyDeviceToHost));
        down.push_back((now_ns() - started) * 1e-9);
    }
    printf("RESULT {\"width\": %zu, \"height\": %zu, \"bytes\": %zu, \"device_pitch\": %zu, \"host_pitch\": %zu",
           width, height, bytes, pitch, host_pitch);
    const char *names[] = {"htod_2d_s", "htod_flat_s", "dtoh_2d_s", "dtoh_flat_s"};
    std::vector<double> *runs[] = {&up2d, &up, &down2d, &down};
    for (int k = 0; k < 4; k++) {
        printf(", \"%s\": [", names[k]);
        for (size_t r = 0; r < runs[k]->size(); r++) printf("%s%.9f", r ? ", " : "", (*runs[k])[r]);
        printf("]");
    }
    printf("}\n");
    return 0;
}
