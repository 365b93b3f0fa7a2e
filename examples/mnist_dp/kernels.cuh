// The training kernels.  No cuBLAS: everything the model needs is here.
//
// Every kernel is written as a per-thread body, a __host__ __device__
// function taking the thread's position (ThreadIndex) explicitly, and a thin
// __global__ wrapper that calls it with the real blockIdx/threadIdx.  The
// host can therefore run the very same code serially over the grid
// (emulate.h): that is how `--cpu-check` and `--emulate` verify the kernels
// on machines without a GPU.  Kernels that use shared memory and
// __syncthreads are split into phase functions; the emulator runs each phase
// for every thread of a block before starting the next, which is exactly
// what the barriers guarantee on a GPU.
//
// Memory layout: row-major matrices; images NCHW.  Sizes are int, flat
// indices long long.  The sim backend's numpy versions of these kernels are
// in sim_kernels.py; keep the two in step.
#pragma once

#include <cassert>
#include <cmath>
#include <cstdint>

#define HD __host__ __device__ inline

constexpr int TILE = 16;             // GEMM tile edge: GEMM blocks are TILE x TILE threads
constexpr int REDUCE_THREADS = 256;  // threads per block of sum_columns (a power of two)

// Where a thread is: blockIdx, threadIdx, blockDim, gridDim.
struct ThreadIndex {
    int bx, by, bz;
    int tx, ty, tz;
    int bdx, bdy, bdz;
    int gdx, gdy, gdz;

#ifdef __CUDACC__
    __device__ static ThreadIndex here() {
        return {(int)blockIdx.x,  (int)blockIdx.y,  (int)blockIdx.z,  (int)threadIdx.x, (int)threadIdx.y,
                (int)threadIdx.z, (int)blockDim.x,  (int)blockDim.y,  (int)blockDim.z,  (int)gridDim.x,
                (int)gridDim.y,   (int)gridDim.z};
    }
#endif
    // Grid-stride loops over x: first element and stride.
    HD long long first() const { return (long long)bx * bdx + tx; }
    HD long long stride() const { return (long long)bdx * gdx; }
};

// ---------------------------------------------------------------- data

// x[r][c] = images[src][c] / 255 and y[r] = labels[src] for r < rows, where
// src = order[first + r] (order == nullptr: src = first + r).
HD void gather_batch_thread(ThreadIndex t, const uint8_t* images, const uint8_t* labels, const int* order, int first,
                            int rows, int dim, float* x, int* y) {
    long long total = (long long)rows * dim;
    for (long long i = t.first(); i < total; i += t.stride()) {
        int r = (int)(i / dim), c = (int)(i % dim);
        long long src = order ? order[first + r] : (long long)first + r;
        x[i] = images[src * dim + c] / 255.0f;
        if (c == 0) y[r] = labels[src];
    }
}

// ---------------------------------------------------------------- GEMM
// C (M x N) = op(A) (M x K) * op(B) (K x N), overwriting C.
//   NN: A is M x K, B is K x N      (forward:   Z  = X  * W)
//   NT: A is M x K, B is N x K      (backward:  dX = dZ * W^T)
//   TN: A is K x M, B is K x N      (backward:  dW = X^T * dZ)
// Block (TILE, TILE) computes the C tile at rows by*TILE.., columns bx*TILE..;
// thread (tx, ty) owns C[by*TILE + ty][bx*TILE + tx].  Each step stages a
// TILE-wide slice of op(A) and op(B) in shared memory; transposed operands
// are read so that consecutive threads touch consecutive addresses.

struct GemmTiles {
    float a[TILE][TILE + 1];  // a[m][k] = op(A)[row0 + m][k0 + k]; +1 avoids bank conflicts
    float b[TILE][TILE + 1];  // b[k][n] = op(B)[k0 + k][col0 + n]
};

// Phase 1 of step kt: this thread's element of each tile (zero outside the matrices).
template <bool TransA, bool TransB>
HD void gemm_load_tile(ThreadIndex t, GemmTiles& s, const float* A, const float* B, int M, int N, int K, int kt) {
    int k0 = kt * TILE, row0 = t.by * TILE, col0 = t.bx * TILE;
    if (!TransA) {
        int m = t.ty, k = t.tx;
        s.a[m][k] = (row0 + m < M && k0 + k < K) ? A[(long long)(row0 + m) * K + (k0 + k)] : 0.0f;
    } else {
        int m = t.tx, k = t.ty;
        s.a[m][k] = (row0 + m < M && k0 + k < K) ? A[(long long)(k0 + k) * M + (row0 + m)] : 0.0f;
    }
    if (!TransB) {
        int k = t.ty, n = t.tx;
        s.b[k][n] = (k0 + k < K && col0 + n < N) ? B[(long long)(k0 + k) * N + (col0 + n)] : 0.0f;
    } else {
        int k = t.tx, n = t.ty;
        s.b[k][n] = (k0 + k < K && col0 + n < N) ? B[(long long)(col0 + n) * K + (k0 + k)] : 0.0f;
    }
}

// Phase 2 of a step: this thread's dot product over the staged slice.
HD float gemm_accumulate_tile(ThreadIndex t, const GemmTiles& s, float acc) {
    for (int k = 0; k < TILE; ++k) acc += s.a[t.ty][k] * s.b[k][t.tx];
    return acc;
}

HD int gemm_steps(int K) { return (K + TILE - 1) / TILE; }

HD void gemm_store(ThreadIndex t, float* C, int M, int N, float acc) {
    int row = t.by * TILE + t.ty, col = t.bx * TILE + t.tx;
    if (row < M && col < N) C[(long long)row * N + col] = acc;
}

// ---------------------------------------------------------------- dense layers

// z[r][c] = act(z[r][c] + bias[c]); act is ReLU when relu != 0.
HD void bias_activation_thread(ThreadIndex t, float* z, const float* bias, int rows, int cols, int relu) {
    long long total = (long long)rows * cols;
    for (long long i = t.first(); i < total; i += t.stride()) {
        float v = z[i] + bias[i % cols];
        z[i] = (relu && !(v > 0.0f)) ? 0.0f : v;
    }
}

// grad[i] = 0 where the ReLU output was not positive (the ReLU's backward).
HD void relu_backward_thread(ThreadIndex t, float* grad, const float* activation, long long n) {
    for (long long i = t.first(); i < n; i += t.stride())
        if (!(activation[i] > 0.0f)) grad[i] = 0.0f;
}

// One row per thread: softmax cross-entropy of logits (rows x classes)
// against labels.  row_stats[2r] = the row's loss, row_stats[2r+1] = 1 if
// the arg-max (first maximum) is the label.  Unless dlogits is null,
// dlogits[r][j] = softmax[j] - (j == label): the gradient of the loss's SUM
// over rows; the gradient reduction divides by the global batch size.
HD void softmax_xent_thread(ThreadIndex t, const float* logits, const int* labels, int rows, int classes,
                            float* dlogits, float* row_stats) {
    for (long long r = t.first(); r < rows; r += t.stride()) {
        const float* z = logits + r * classes;
        int label = labels[r];
        assert(label >= 0 && label < classes);
        float zmax = z[0];
        int best = 0;
        for (int j = 1; j < classes; ++j)
            if (z[j] > zmax) zmax = z[j], best = j;
        float total = 0.0f;
        for (int j = 0; j < classes; ++j) total += expf(z[j] - zmax);
        row_stats[2 * r] = logf(total) - (z[label] - zmax);
        row_stats[2 * r + 1] = best == label ? 1.0f : 0.0f;
        if (dlogits)
            for (int j = 0; j < classes; ++j)
                dlogits[r * classes + j] = expf(z[j] - zmax) / total - (j == label ? 1.0f : 0.0f);
    }
}

// ---------------------------------------------------------------- reductions
// out[j] = sum over r < rows, s < inner of m[(r * cols + j) * inner + s]:
// column sums of a rows x cols matrix (inner = 1: bias gradients, the
// loss/accuracy sums) or per-channel sums of an N x C x (H*W) tensor
// (inner = H*W: convolution bias gradients).  One block of REDUCE_THREADS
// threads per column: each thread sums a strided part, then a tree in
// shared memory adds the partial sums (a fixed order: deterministic).

// Phase 1: this thread's partial sum.
HD float sum_columns_partial(ThreadIndex t, const float* m, int rows, int cols, int inner) {
    float acc = 0.0f;
    long long count = (long long)rows * inner;
    for (long long e = t.tx; e < count; e += t.bdx) {
        long long r = e / inner, s = e % inner;
        acc += m[(r * cols + t.bx) * inner + s];
    }
    return acc;
}

// Phase 2 (repeated for stride = blockDim/2, ..., 1): fold the upper half in.
HD void sum_columns_fold(ThreadIndex t, float* partial, int stride) {
    if (t.tx < stride) partial[t.tx] += partial[t.tx + stride];
}

// ---------------------------------------------------------------- update

// acc[i] += x[i]: the peer reduction of gradients on GPU0.
HD void add_into_thread(ThreadIndex t, float* acc, const float* x, long long n) {
    for (long long i = t.first(); i < n; i += t.stride()) acc[i] += x[i];
}

// A product rounded on its own, as the host rounds it: on the GPU nvcc would
// fuse `a * b + c` into one fmaf (one rounding), and --sync peer's update
// would then drift from --sync host's.
HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

// SGD with momentum and weight decay, from the SUM of the batch's gradients:
//   g = grad_sum * grad_scale + weight_decay * p;  v = momentum * v + g;  p -= lr * v
// (grad_scale = 1 / global batch size).  The host's update (trainer.h) is the
// same formula, rounded the same way.
HD void sgd_momentum_thread(ThreadIndex t, float* params, float* velocity, const float* grad_sum, long long n,
                            float grad_scale, float lr, float momentum, float weight_decay) {
    for (long long i = t.first(); i < n; i += t.stride()) {
        float g = mul_rn(grad_sum[i], grad_scale) + mul_rn(weight_decay, params[i]);
        float v = mul_rn(momentum, velocity[i]) + g;
        velocity[i] = v;
        params[i] = params[i] - mul_rn(lr, v);
    }
}

// ---------------------------------------------------------------- convolution
// x: N x C x H x W, w: K x C x R x R, b: K, y: N x K x P x Q with
// P = H - R + 1, Q = W - R + 1 (stride 1, no padding).  One output element per thread.

HD void conv2d_forward_thread(ThreadIndex t, const float* x, const float* w, const float* b, float* y, int N, int C,
                              int H, int W, int K, int R, int relu) {
    int P = H - R + 1, Q = W - R + 1;
    long long total = (long long)N * K * P * Q;
    for (long long i = t.first(); i < total; i += t.stride()) {
        int q = (int)(i % Q), p = (int)(i / Q % P), k = (int)(i / ((long long)Q * P) % K);
        long long n = i / ((long long)Q * P * K);
        float acc = b[k];
        for (int c = 0; c < C; ++c)
            for (int ry = 0; ry < R; ++ry)
                for (int rx = 0; rx < R; ++rx)
                    acc += x[((n * C + c) * H + p + ry) * W + q + rx] * w[(((long long)k * C + c) * R + ry) * R + rx];
        y[i] = (relu && !(acc > 0.0f)) ? 0.0f : acc;
    }
}

// dx[n][c][h][v] = sum over k, ry, rx of dy[n][k][h - ry][v - rx] * w[k][c][ry][rx]
// (terms whose output position is outside P x Q are absent).
HD void conv2d_backward_input_thread(ThreadIndex t, const float* dy, const float* w, float* dx, int N, int C, int H,
                                     int W, int K, int R) {
    int P = H - R + 1, Q = W - R + 1;
    long long total = (long long)N * C * H * W;
    for (long long i = t.first(); i < total; i += t.stride()) {
        int v = (int)(i % W), h = (int)(i / W % H), c = (int)(i / ((long long)W * H) % C);
        long long n = i / ((long long)W * H * C);
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            for (int ry = 0; ry < R; ++ry) {
                int p = h - ry;
                if (p < 0 || p >= P) continue;
                for (int rx = 0; rx < R; ++rx) {
                    int q = v - rx;
                    if (q < 0 || q >= Q) continue;
                    acc += dy[((n * K + k) * P + p) * Q + q] * w[(((long long)k * C + c) * R + ry) * R + rx];
                }
            }
        dx[i] = acc;
    }
}

// dw[k][c][ry][rx] = sum over n, p, q of dy[n][k][p][q] * x[n][c][p + ry][q + rx].
HD void conv2d_backward_weight_thread(ThreadIndex t, const float* x, const float* dy, float* dw, int N, int C, int H,
                                      int W, int K, int R) {
    int P = H - R + 1, Q = W - R + 1;
    long long total = (long long)K * C * R * R;
    for (long long i = t.first(); i < total; i += t.stride()) {
        int rx = (int)(i % R), ry = (int)(i / R % R), c = (int)(i / ((long long)R * R) % C);
        int k = (int)(i / ((long long)R * R * C));
        float acc = 0.0f;
        for (long long n = 0; n < N; ++n)
            for (int p = 0; p < P; ++p)
                for (int q = 0; q < Q; ++q)
                    acc += dy[((n * K + k) * P + p) * Q + q] * x[((n * C + c) * H + p + ry) * W + q + rx];
        dw[i] = acc;
    }
}

// ---------------------------------------------------------------- 2x2 max pooling
// x: planes x H x W (planes = N * C), y: planes x H/2 x W/2.  Ties go to the
// first maximum in the order (0,0), (0,1), (1,0), (1,1).  An odd last row or
// column is dropped, as by floor division.

HD int maxpool2_argmax(const float* plane, int W, int p, int q) {
    int best = 0;
    float value = plane[(2 * p) * W + 2 * q];
    for (int d = 1; d < 4; ++d) {
        float candidate = plane[(2 * p + d / 2) * W + 2 * q + d % 2];
        if (candidate > value) value = candidate, best = d;
    }
    return best;
}

HD void maxpool2_forward_thread(ThreadIndex t, const float* x, float* y, int planes, int H, int W) {
    int P = H / 2, Q = W / 2;
    long long total = (long long)planes * P * Q;
    for (long long i = t.first(); i < total; i += t.stride()) {
        int q = (int)(i % Q), p = (int)(i / Q % P);
        long long plane = i / ((long long)Q * P);
        const float* in = x + plane * H * W;
        int d = maxpool2_argmax(in, W, p, q);
        y[i] = in[(2 * p + d / 2) * W + 2 * q + d % 2];
    }
}

// dx[h][v] = dy of its window where (h, v) was the window's maximum, else 0.
HD void maxpool2_backward_thread(ThreadIndex t, const float* x, const float* dy, float* dx, int planes, int H, int W) {
    int P = H / 2, Q = W / 2;
    long long total = (long long)planes * H * W;
    for (long long i = t.first(); i < total; i += t.stride()) {
        int v = (int)(i % W), h = (int)(i / W % H);
        long long plane = i / ((long long)W * H);
        int p = h / 2, q = v / 2;
        float g = 0.0f;
        if (p < P && q < Q) {
            int d = maxpool2_argmax(x + plane * H * W, W, p, q);
            if (h == 2 * p + d / 2 && v == 2 * q + d % 2) g = dy[(plane * P + p) * Q + q];
        }
        dx[i] = g;
    }
}

// ---------------------------------------------------------------- the __global__ kernels
#ifdef __CUDACC__

__global__ void gather_batch(const uint8_t* images, const uint8_t* labels, const int* order, int first, int rows,
                             int dim, float* x, int* y) {
    gather_batch_thread(ThreadIndex::here(), images, labels, order, first, rows, dim, x, y);
}

template <bool TransA, bool TransB>
__device__ void gemm_device(const float* A, const float* B, float* C, int M, int N, int K) {
    assert(blockDim.x == TILE && blockDim.y == TILE && blockDim.z == 1);
    __shared__ GemmTiles tiles;
    ThreadIndex t = ThreadIndex::here();
    float acc = 0.0f;
    for (int kt = 0; kt < gemm_steps(K); ++kt) {
        gemm_load_tile<TransA, TransB>(t, tiles, A, B, M, N, K, kt);
        __syncthreads();
        acc = gemm_accumulate_tile(t, tiles, acc);
        __syncthreads();
    }
    gemm_store(t, C, M, N, acc);
}

__global__ void gemm_nn(const float* A, const float* B, float* C, int M, int N, int K) {
    gemm_device<false, false>(A, B, C, M, N, K);
}
__global__ void gemm_nt(const float* A, const float* B, float* C, int M, int N, int K) {
    gemm_device<false, true>(A, B, C, M, N, K);
}
__global__ void gemm_tn(const float* A, const float* B, float* C, int M, int N, int K) {
    gemm_device<true, false>(A, B, C, M, N, K);
}

__global__ void bias_activation(float* z, const float* bias, int rows, int cols, int relu) {
    bias_activation_thread(ThreadIndex::here(), z, bias, rows, cols, relu);
}

__global__ void relu_backward(float* grad, const float* activation, long long n) {
    relu_backward_thread(ThreadIndex::here(), grad, activation, n);
}

__global__ void softmax_xent(const float* logits, const int* labels, int rows, int classes, float* dlogits,
                             float* row_stats) {
    softmax_xent_thread(ThreadIndex::here(), logits, labels, rows, classes, dlogits, row_stats);
}

__global__ void sum_columns(const float* m, int rows, int cols, int inner, float* out) {
    assert(blockDim.x == REDUCE_THREADS && blockDim.y == 1 && blockDim.z == 1);
    __shared__ float partial[REDUCE_THREADS];
    ThreadIndex t = ThreadIndex::here();
    if (t.bx >= cols) return;  // the whole block: no barrier is left waiting
    partial[t.tx] = sum_columns_partial(t, m, rows, cols, inner);
    __syncthreads();
    for (int stride = REDUCE_THREADS / 2; stride > 0; stride /= 2) {
        sum_columns_fold(t, partial, stride);
        __syncthreads();
    }
    if (t.tx == 0) out[t.bx] = partial[0];
}

__global__ void add_into(float* acc, const float* x, long long n) { add_into_thread(ThreadIndex::here(), acc, x, n); }

__global__ void sgd_momentum(float* params, float* velocity, const float* grad_sum, long long n, float grad_scale,
                             float lr, float momentum, float weight_decay) {
    sgd_momentum_thread(ThreadIndex::here(), params, velocity, grad_sum, n, grad_scale, lr, momentum, weight_decay);
}

__global__ void conv2d_forward(const float* x, const float* w, const float* b, float* y, int N, int C, int H, int W,
                               int K, int R, int relu) {
    conv2d_forward_thread(ThreadIndex::here(), x, w, b, y, N, C, H, W, K, R, relu);
}

__global__ void conv2d_backward_input(const float* dy, const float* w, float* dx, int N, int C, int H, int W, int K,
                                      int R) {
    conv2d_backward_input_thread(ThreadIndex::here(), dy, w, dx, N, C, H, W, K, R);
}

__global__ void conv2d_backward_weight(const float* x, const float* dy, float* dw, int N, int C, int H, int W, int K,
                                       int R) {
    conv2d_backward_weight_thread(ThreadIndex::here(), x, dy, dw, N, C, H, W, K, R);
}

__global__ void maxpool2_forward(const float* x, float* y, int planes, int H, int W) {
    maxpool2_forward_thread(ThreadIndex::here(), x, y, planes, H, W);
}

__global__ void maxpool2_backward(const float* x, const float* dy, float* dx, int planes, int H, int W) {
    maxpool2_backward_thread(ThreadIndex::here(), x, dy, dx, planes, H, W);
}

#endif  // __CUDACC__
