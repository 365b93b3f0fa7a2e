// One device as the trainer uses it: memory, copies and the kernel launches.
//
// A Device is a CUDA GPU, or (with --emulate and in --cpu-check) the CPU
// running the kernels' thread bodies over the same grids (emulate.h).  The
// launch shapes below are the only place grid and block sizes are chosen, so
// the emulation runs exactly the grids the GPU gets.  Every CUDA call is
// checked; a failure names the call and the device, and ends the program.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "emulate.h"
#include "kernels.cuh"

struct LaunchShape {
    dim3 grid, block;
};

// Grid-stride kernels: 256 threads per block, at most 4096 blocks.
inline LaunchShape elementwise_shape(long long n) {
    long long blocks = std::min<long long>(std::max<long long>((n + 255) / 256, 1), 4096);
    return {dim3((unsigned)blocks), dim3(256)};
}

inline LaunchShape gemm_shape(int M, int N) {
    return {dim3((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE)), dim3(TILE, TILE)};
}

inline LaunchShape sum_columns_shape(int cols) { return {dim3((unsigned)cols), dim3(REDUCE_THREADS)}; }

class Device {
public:
    Device(int ordinal, bool emulated) : ordinal_(ordinal), emulated_(emulated) {
        if (emulated_) {
            name_ = "CPU emulation";
        } else {
            cudaDeviceProp prop;
            check(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties");
            name_ = prop.name;
        }
    }
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    int ordinal() const { return ordinal_; }
    bool emulated() const { return emulated_; }
    const std::string& name() const { return name_; }
    std::string label() const { return "GPU" + std::to_string(ordinal_) + " (" + name_ + ")"; }

    // Make this device current in the calling thread (each thread drives one device).
    void bind() const {
        if (!emulated_) check(cudaSetDevice(ordinal_), "cudaSetDevice");
    }

    // ------------------------------------------------------------ memory

    template <class T>
    T* allocate(size_t count) {
        size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
        void* ptr = nullptr;
        if (emulated_) {
            ptr = std::malloc(bytes);
            if (!ptr) fail(label() + ": out of host memory for " + std::to_string(bytes) + " bytes");
        } else {
            check(cudaMalloc(&ptr, bytes), format("cudaMalloc(%zu bytes)", bytes));
        }
        allocations_.push_back(ptr);
        return static_cast<T*>(ptr);
    }

    void release_all() {
        for (void* ptr : allocations_) {
            if (emulated_)
                std::free(ptr);
            else
                check(cudaFree(ptr), "cudaFree");
        }
        allocations_.clear();
    }

    void upload(void* dst, const void* src, size_t bytes) {
        if (emulated_)
            std::memcpy(dst, src, bytes);
        else
            check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), format("cudaMemcpy host to device (%zu bytes)", bytes));
    }

    // Waits for the device's earlier work, as cudaMemcpy does.
    void download(void* dst, const void* src, size_t bytes) {
        if (emulated_)
            std::memcpy(dst, src, bytes);
        else
            check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), format("cudaMemcpy device to host (%zu bytes)", bytes));
    }

    void zero(void* dst, size_t bytes) {
        if (emulated_)
            std::memset(dst, 0, bytes);
        else
            check(cudaMemset(dst, 0, bytes), format("cudaMemset(%zu bytes)", bytes));
    }

    // dst on this device <- src on `source`.
    void copy_from_peer(void* dst, const Device& source, const void* src, size_t bytes) {
        if (emulated_)
            std::memcpy(dst, src, bytes);
        else
            check(cudaMemcpyPeer(dst, ordinal_, src, source.ordinal_, bytes),
                  format("cudaMemcpyPeer(GPU%d <- GPU%d, %zu bytes)", ordinal_, source.ordinal_, bytes));
    }

    void synchronize() {
        if (!emulated_) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }

    // ------------------------------------------------------------ kernels (kernels.cuh)

    void gather_batch(const uint8_t* images, const uint8_t* labels, const int* order, int first, int rows, int dim,
                      float* x, int* y) {
        launch("gather_batch", elementwise_shape((long long)rows * dim), (long long)rows * dim, ::gather_batch,
               gather_batch_thread, images, labels, order, first, rows, dim, x, y);
    }

    // C = op(A) * op(B); op is 'n' or 't' per operand (only nn, nt and tn exist).
    void gemm(const char* ops, const float* A, const float* B, float* C, int M, int N, int K) {
        if (M == 0 || N == 0) return;
        LaunchShape s = gemm_shape(M, N);
        std::string kind(ops);
        if (emulated_) {
            if (kind == "nn") emulate_gemm<false, false>(s.grid, s.block, A, B, C, M, N, K);
            else if (kind == "nt") emulate_gemm<false, true>(s.grid, s.block, A, B, C, M, N, K);
            else if (kind == "tn") emulate_gemm<true, false>(s.grid, s.block, A, B, C, M, N, K);
            else fail("gemm: no kernel for ops " + kind);
            return;
        }
        if (kind == "nn") ::gemm_nn<<<s.grid, s.block>>>(A, B, C, M, N, K);
        else if (kind == "nt") ::gemm_nt<<<s.grid, s.block>>>(A, B, C, M, N, K);
        else if (kind == "tn") ::gemm_tn<<<s.grid, s.block>>>(A, B, C, M, N, K);
        else fail("gemm: no kernel for ops " + kind);
        check(cudaGetLastError(), ("launch of gemm_" + kind).c_str());
    }

    void bias_activation(float* z, const float* bias, int rows, int cols, bool relu) {
        launch("bias_activation", elementwise_shape((long long)rows * cols), (long long)rows * cols, ::bias_activation,
               bias_activation_thread, z, bias, rows, cols, relu ? 1 : 0);
    }

    void relu_backward(float* grad, const float* activation, long long n) {
        launch("relu_backward", elementwise_shape(n), n, ::relu_backward, relu_backward_thread, grad, activation, n);
    }

    void softmax_xent(const float* logits, const int* labels, int rows, int classes, float* dlogits, float* row_stats) {
        launch("softmax_xent", elementwise_shape(rows), rows, ::softmax_xent, softmax_xent_thread, logits, labels, rows,
               classes, dlogits, row_stats);
    }

    void sum_columns(const float* m, int rows, int cols, int inner, float* out) {
        if (cols == 0) return;
        LaunchShape s = sum_columns_shape(cols);
        if (emulated_) {
            emulate_sum_columns(s.grid, s.block, m, rows, cols, inner, out);
            return;
        }
        ::sum_columns<<<s.grid, s.block>>>(m, rows, cols, inner, out);
        check(cudaGetLastError(), "launch of sum_columns");
    }

    void add_into(float* acc, const float* x, long long n) {
        launch("add_into", elementwise_shape(n), n, ::add_into, add_into_thread, acc, x, n);
    }

    void sgd_momentum(float* params, float* velocity, const float* grad_sum, long long n, float grad_scale, float lr,
                      float momentum, float weight_decay) {
        launch("sgd_momentum", elementwise_shape(n), n, ::sgd_momentum, sgd_momentum_thread, params, velocity, grad_sum,
               n, grad_scale, lr, momentum, weight_decay);
    }

    void conv2d_forward(const float* x, const float* w, const float* b, float* y, int N, int C, int H, int W, int K,
                        int R, bool relu) {
        long long n = (long long)N * K * (H - R + 1) * (W - R + 1);
        launch("conv2d_forward", elementwise_shape(n), n, ::conv2d_forward, conv2d_forward_thread, x, w, b, y, N, C, H,
               W, K, R, relu ? 1 : 0);
    }

    void conv2d_backward_input(const float* dy, const float* w, float* dx, int N, int C, int H, int W, int K, int R) {
        long long n = (long long)N * C * H * W;
        launch("conv2d_backward_input", elementwise_shape(n), n, ::conv2d_backward_input, conv2d_backward_input_thread,
               dy, w, dx, N, C, H, W, K, R);
    }

    void conv2d_backward_weight(const float* x, const float* dy, float* dw, int N, int C, int H, int W, int K, int R) {
        long long n = (long long)K * C * R * R;
        launch("conv2d_backward_weight", elementwise_shape(n), n, ::conv2d_backward_weight,
               conv2d_backward_weight_thread, x, dy, dw, N, C, H, W, K, R);
    }

    void maxpool2_forward(const float* x, float* y, int planes, int H, int W) {
        long long n = (long long)planes * (H / 2) * (W / 2);
        launch("maxpool2_forward", elementwise_shape(n), n, ::maxpool2_forward, maxpool2_forward_thread, x, y, planes, H,
               W);
    }

    void maxpool2_backward(const float* x, const float* dy, float* dx, int planes, int H, int W) {
        long long n = (long long)planes * H * W;
        launch("maxpool2_backward", elementwise_shape(n), n, ::maxpool2_backward, maxpool2_backward_thread, x, dy, dx,
               planes, H, W);
    }

private:
    // A grid-stride kernel over `work` elements: nothing to launch when there are none.
    template <class... P, class... A>
    void launch(const char* name, LaunchShape s, long long work, void (*kernel)(P...), void (*body)(ThreadIndex, P...),
                A... args) {
        if (work <= 0) return;
        if (emulated_) {
            for_each_thread(s.grid, s.block, [&](ThreadIndex t) { body(t, args...); });
            return;
        }
        kernel<<<s.grid, s.block>>>(args...);
        check(cudaGetLastError(), (std::string("launch of ") + name).c_str());
    }

    void check(cudaError_t status, const std::string& call) const {
        if (status != cudaSuccess)
            fail(format("GPU%d (%s): %s failed: %s (%s)", ordinal_, name_.c_str(), call.c_str(),
                        cudaGetErrorString(status), cudaGetErrorName(status)));
    }

    int ordinal_;
    bool emulated_;
    std::string name_;
    std::vector<void*> allocations_;
};
