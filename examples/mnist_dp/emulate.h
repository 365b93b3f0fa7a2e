// Running the kernels' thread bodies on the CPU, serially over the grid.
//
// For kernels without shared memory the order of threads does not matter:
// each thread body runs once per (block, thread).  Kernels with shared
// memory and __syncthreads (GEMM, sum_columns) are emulated phase by phase:
// every thread of a block finishes a phase before any starts the next, as
// the barrier guarantees on a GPU.  Shared memory starts as NaN, so a thread
// reading an element no thread stored shows up in the results.
#pragma once

#include <cuda_runtime.h>  // dim3

#include <limits>
#include <vector>

#include "kernels.cuh"

template <class F>
void for_each_block(dim3 grid, F&& f) {
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) f(bx, by, bz);
}

template <class F>
void for_each_thread_of_block(dim3 grid, dim3 block, unsigned bx, unsigned by, unsigned bz, F&& f) {
    for (unsigned tz = 0; tz < block.z; ++tz)
        for (unsigned ty = 0; ty < block.y; ++ty)
            for (unsigned tx = 0; tx < block.x; ++tx)
                f(ThreadIndex{(int)bx, (int)by, (int)bz, (int)tx, (int)ty, (int)tz, (int)block.x, (int)block.y,
                              (int)block.z, (int)grid.x, (int)grid.y, (int)grid.z});
}

template <class F>
void for_each_thread(dim3 grid, dim3 block, F&& f) {
    for_each_block(grid, [&](unsigned bx, unsigned by, unsigned bz) { for_each_thread_of_block(grid, block, bx, by, bz, f); });
}

inline int flat_thread(const ThreadIndex& t) { return (t.tz * t.bdy + t.ty) * t.bdx + t.tx; }

// gemm_nn / gemm_nt / gemm_tn (kernels.cuh: gemm_device), phase by phase.
template <bool TransA, bool TransB>
void emulate_gemm(dim3 grid, dim3 block, const float* A, const float* B, float* C, int M, int N, int K) {
    assert(block.x == TILE && block.y == TILE && block.z == 1);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for_each_block(grid, [&](unsigned bx, unsigned by, unsigned bz) {
        GemmTiles tiles;
        std::vector<float> acc(TILE * TILE, 0.0f);
        auto each_thread = [&](auto&& f) { for_each_thread_of_block(grid, block, bx, by, bz, f); };
        for (int kt = 0; kt < gemm_steps(K); ++kt) {
            for (auto& row : tiles.a) for (float& v : row) v = nan;
            for (auto& row : tiles.b) for (float& v : row) v = nan;
            each_thread([&](ThreadIndex t) { gemm_load_tile<TransA, TransB>(t, tiles, A, B, M, N, K, kt); });
            // __syncthreads()
            each_thread([&](ThreadIndex t) { acc[flat_thread(t)] = gemm_accumulate_tile(t, tiles, acc[flat_thread(t)]); });
            // __syncthreads()
        }
        each_thread([&](ThreadIndex t) { gemm_store(t, C, M, N, acc[flat_thread(t)]); });
    });
}

// sum_columns (kernels.cuh), phase by phase.
inline void emulate_sum_columns(dim3 grid, dim3 block, const float* m, int rows, int cols, int inner, float* out) {
    assert(block.x == REDUCE_THREADS && block.y == 1 && block.z == 1);
    for_each_block(grid, [&](unsigned bx, unsigned by, unsigned bz) {
        if ((int)bx >= cols) return;
        std::vector<float> partial(REDUCE_THREADS, std::numeric_limits<float>::quiet_NaN());
        auto each_thread = [&](auto&& f) { for_each_thread_of_block(grid, block, bx, by, bz, f); };
        each_thread([&](ThreadIndex t) { partial[t.tx] = sum_columns_partial(t, m, rows, cols, inner); });
        for (int stride = REDUCE_THREADS / 2; stride > 0; stride /= 2)
            each_thread([&](ThreadIndex t) { sum_columns_fold(t, partial.data(), stride); });
        each_thread([&](ThreadIndex t) {
            if (t.tx == 0) out[t.bx] = partial[0];
        });
    });
}
