// --cpu-check: verify the kernels without a GPU.
//
// The kernels' own thread bodies (kernels.cuh) run on the CPU through an
// emulated Device, over exactly the grids the GPU gets (device.h), and are
// compared with plain double-precision loops:
//   * every kernel on its own, with awkward sizes (not multiples of the
//     tile), grids larger than needed, ties, empty inputs; buffers carry
//     guard zones so a write out of bounds is caught;
//   * whole networks (a small MLP and a small CNN): the forward pass against
//     Layer::forward_reference, and every gradient against central finite
//     differences of the double-precision loss;
//   * data parallelism: gradient sums over shards add up to the whole batch's.
#pragma once

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "device.h"
#include "network.h"
#include "rng.h"
#include "trainer.h"

namespace cpu_check {

// A host buffer with guard zones before and after it: a kernel writing out
// of bounds changes a guard, which check() reports.
template <class T>
class Guarded {
public:
    static constexpr size_t PAD = 256;
    explicit Guarded(size_t n, T value = T()) : n_(n), storage_(n + 2 * PAD, guard_value()) {
        for (size_t i = 0; i < n; ++i) storage_[PAD + i] = value;
    }
    T* data() { return storage_.data() + PAD; }
    const T* data() const { return storage_.data() + PAD; }
    T& operator[](size_t i) { return storage_[PAD + i]; }
    const T& operator[](size_t i) const { return storage_[PAD + i]; }
    size_t size() const { return n_; }
    bool guards_intact() const {
        for (size_t i = 0; i < PAD; ++i)
            if (!same(storage_[i]) || !same(storage_[PAD + n_ + i])) return false;
        return true;
    }

private:
    static T guard_value() { return (T)0x5A; }
    static bool same(T v) { return v == guard_value(); }
    size_t n_;
    std::vector<T> storage_;
};

class Report {
public:
    // got[i] against want[i]: |got - want| <= atol + rtol * |want|.
    template <class G, class W>
    void close(const std::string& what, const G& got, const W& want, size_t n, double rtol, double atol) {
        double worst = 0;
        size_t bad = n, where = 0;
        for (size_t i = 0; i < n; ++i) {
            double g = (double)got[i], w = (double)want[i];
            double err = std::fabs(g - w);
            if (!(err <= atol + rtol * std::fabs(w))) {  // NaN fails too
                if (bad == n) bad = i;
            }
            if (err > worst || std::isnan(err)) worst = std::isnan(err) ? INFINITY : err, where = i;
        }
        if (bad == n)
            pass(format("%s (max error %.2g)", what.c_str(), worst));
        else
            failure(format("%s: element %zu is %.9g, expected %.9g (max error %.3g at %zu)", what.c_str(), bad,
                           (double)got[bad], (double)want[bad], worst, where));
    }
    void expect(bool ok, const std::string& what) { ok ? pass(what) : failure(what); }
    template <class T>
    void guards(const Guarded<T>& buffer, const std::string& what) {
        if (!buffer.guards_intact()) failure(what + ": wrote outside its buffer");
    }
    int failed() const { return failed_; }
    int passed() const { return passed_; }

private:
    void pass(const std::string& what) {
        ++passed_;
        std::printf("  ok    %s\n", what.c_str());
    }
    void failure(const std::string& what) {
        ++failed_;
        std::printf("  FAIL  %s\n", what.c_str());
    }
    int passed_ = 0, failed_ = 0;
};

inline void fill_uniform(float* x, size_t n, SplitMix64& rng, double low, double high) {
    for (size_t i = 0; i < n; ++i) x[i] = (float)(low + (high - low) * rng.uniform());
}

// ------------------------------------------------------------------ kernels

inline void check_gather(Device& dev, Report& report, SplitMix64& rng) {
    const int count = 20, dim = 7, rows = 5, first = 3;
    Guarded<uint8_t> images(count * dim), labels(count);
    for (size_t i = 0; i < images.size(); ++i) images[i] = (uint8_t)(rng.next() & 0xFF);
    for (int i = 0; i < count; ++i) labels[i] = (uint8_t)(rng.next() % 10);
    Guarded<int> order(count);
    std::vector<int> perm(count);
    for (int i = 0; i < count; ++i) perm[i] = i;
    rng.shuffle(perm);
    for (int i = 0; i < count; ++i) order[i] = perm[i];
    for (bool shuffled : {true, false}) {
        Guarded<float> x(rows * dim, NAN);
        Guarded<int> y(rows, -1);
        dev.gather_batch(images.data(), labels.data(), shuffled ? order.data() : nullptr, first, rows, dim, x.data(),
                         y.data());
        std::vector<float> want_x(rows * dim);
        std::vector<int> want_y(rows);
        for (int r = 0; r < rows; ++r) {
            int src = shuffled ? perm[first + r] : first + r;
            for (int c = 0; c < dim; ++c) want_x[r * dim + c] = images[src * dim + c] / 255.0f;
            want_y[r] = labels[src];
        }
        std::string name = shuffled ? "gather_batch (shuffled order)" : "gather_batch (in order)";
        report.close(name + " images", x, want_x, want_x.size(), 0, 0);
        report.close(name + " labels", y, want_y, want_y.size(), 0, 0);
        report.guards(x, name);
        report.guards(y, name);
    }
}

// op(A) (M x K) * op(B) (K x N) in double; A and B stored as the kernel expects.
inline std::vector<double> gemm_reference(const std::string& ops, const float* A, const float* B, int M, int N, int K) {
    std::vector<double> C((size_t)M * N, 0.0);
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            double acc = 0;
            for (int k = 0; k < K; ++k) {
                double a = ops[0] == 'n' ? A[(size_t)m * K + k] : A[(size_t)k * M + m];
                double b = ops[1] == 'n' ? B[(size_t)k * N + n] : B[(size_t)n * K + k];
                acc += a * b;
            }
            C[(size_t)m * N + n] = acc;
        }
    return C;
}

inline void check_gemm(Device& dev, Report& report, SplitMix64& rng) {
    const int sizes[][3] = {{1, 1, 1}, {5, 7, 3}, {16, 16, 16}, {37, 29, 45}, {64, 10, 128}, {3, 40, 17}, {20, 9, 0}};
    for (const char* ops : {"nn", "nt", "tn"})
        for (const auto& size : sizes) {
            int M = size[0], N = size[1], K = size[2];
            Guarded<float> A((size_t)M * K), B((size_t)K * N), C((size_t)M * N, NAN);
            fill_uniform(A.data(), A.size(), rng, -1, 1);
            fill_uniform(B.data(), B.size(), rng, -1, 1);
            dev.gemm(ops, A.data(), B.data(), C.data(), M, N, K);
            std::vector<double> want = gemm_reference(ops, A.data(), B.data(), M, N, K);
            std::string name = format("gemm_%s M=%d N=%d K=%d", ops, M, N, K);
            report.close(name, C, want, want.size(), 1e-5, 1e-6 * (K + 1));
            report.guards(C, name);
        }
    // More blocks than the matrix needs: the extra threads must write nothing.
    int M = 21, N = 18, K = 35;
    Guarded<float> A((size_t)M * K), B((size_t)K * N), C((size_t)M * N, NAN);
    fill_uniform(A.data(), A.size(), rng, -1, 1);
    fill_uniform(B.data(), B.size(), rng, -1, 1);
    LaunchShape s = gemm_shape(M, N);
    emulate_gemm<false, true>(dim3(s.grid.x + 2, s.grid.y + 1), s.block, A.data(), B.data(), C.data(), M, N, K);
    std::vector<double> want = gemm_reference("nt", A.data(), B.data(), M, N, K);
    report.close("gemm_nt on a grid larger than needed", C, want, want.size(), 1e-5, 1e-5);
    report.guards(C, "gemm_nt on a grid larger than needed");
}

inline void check_elementwise(Device& dev, Report& report, SplitMix64& rng) {
    const int rows = 13, cols = 11;
    for (int relu : {0, 1}) {
        Guarded<float> z(rows * cols), bias(cols);
        fill_uniform(z.data(), z.size(), rng, -1, 1);
        fill_uniform(bias.data(), bias.size(), rng, -0.5, 0.5);
        std::vector<double> want(rows * cols);
        for (int i = 0; i < rows * cols; ++i) {
            float v = z[i] + bias[i % cols];
            want[i] = relu && !(v > 0) ? 0.0f : v;
        }
        dev.bias_activation(z.data(), bias.data(), rows, cols, relu);
        report.close(relu ? "bias_activation relu" : "bias_activation linear", z, want, want.size(), 0, 0);
        report.guards(z, "bias_activation");
    }
    {
        const long long n = 1000;
        Guarded<float> grad(n), act(n);
        fill_uniform(grad.data(), n, rng, -1, 1);
        fill_uniform(act.data(), n, rng, -1, 1);
        act[7] = 0.0f;  // exactly zero: the ReLU was off
        std::vector<double> want(n);
        for (long long i = 0; i < n; ++i) want[i] = act[i] > 0 ? grad[i] : 0.0;
        dev.relu_backward(grad.data(), act.data(), n);
        report.close("relu_backward", grad, want, n, 0, 0);
        report.guards(grad, "relu_backward");
    }
    {
        const long long n = 4096LL * 256 + 777;  // more elements than threads: the grid-stride loop goes round
        Guarded<float> acc(n), x(n);
        fill_uniform(acc.data(), n, rng, -1, 1);
        fill_uniform(x.data(), n, rng, -1, 1);
        std::vector<double> want(n);
        for (long long i = 0; i < n; ++i) want[i] = acc[i] + x[i];
        dev.add_into(acc.data(), x.data(), n);
        report.close("add_into", acc, want, n, 0, 0);
        report.guards(acc, "add_into");
    }
    {
        const long long n = 3000;
        Guarded<float> params(n), velocity(n), grads(n);
        fill_uniform(params.data(), n, rng, -1, 1);
        fill_uniform(velocity.data(), n, rng, -0.1, 0.1);
        fill_uniform(grads.data(), n, rng, -5, 5);
        float scale = 1.0f / 48, lr = 0.07f, momentum = 0.9f, decay = 5e-4f;
        std::vector<double> want_p(n), want_v(n);
        for (long long i = 0; i < n; ++i) {  // the host update of trainer.h, in double
            double g = (double)grads[i] * scale + (double)decay * params[i];
            double v = (double)momentum * velocity[i] + g;
            want_v[i] = v;
            want_p[i] = params[i] - (double)lr * v;
        }
        dev.sgd_momentum(params.data(), velocity.data(), grads.data(), n, scale, lr, momentum, decay);
        report.close("sgd_momentum parameters", params, want_p, n, 1e-6, 1e-7);
        report.close("sgd_momentum velocity", velocity, want_v, n, 1e-6, 1e-7);
        report.guards(params, "sgd_momentum");
        report.guards(velocity, "sgd_momentum");
    }
}

inline void check_softmax(Device& dev, Report& report, SplitMix64& rng) {
    const int rows = 13, classes = 10;
    Guarded<float> logits(rows * classes);
    Guarded<int> labels(rows);
    fill_uniform(logits.data(), logits.size(), rng, -6, 6);
    logits[3 * classes + 2] = logits[3 * classes + 5] = 50.0f;  // a tie for the maximum: the first one counts
    for (int r = 0; r < rows; ++r) labels[r] = (int)(rng.next() % classes);
    labels[3] = 2;
    std::vector<double> want_stats(2 * rows), want_grad(rows * classes);
    for (int r = 0; r < rows; ++r) {
        const float* z = &logits[r * classes];
        int best = 0;
        for (int j = 1; j < classes; ++j)
            if (z[j] > z[best]) best = j;
        double zmax = z[best], total = 0;
        for (int j = 0; j < classes; ++j) total += std::exp((double)z[j] - zmax);
        want_stats[2 * r] = std::log(total) - (z[labels[r]] - zmax);
        want_stats[2 * r + 1] = best == labels[r];
        for (int j = 0; j < classes; ++j)
            want_grad[r * classes + j] = std::exp((double)z[j] - zmax) / total - (j == labels[r]);
    }
    Guarded<float> stats(2 * rows, NAN), grad(rows * classes, NAN);
    dev.softmax_xent(logits.data(), labels.data(), rows, classes, grad.data(), stats.data());
    report.close("softmax_xent losses and hits", stats, want_stats, want_stats.size(), 1e-5, 1e-6);
    report.close("softmax_xent gradient", grad, want_grad, want_grad.size(), 1e-5, 1e-6);
    report.guards(stats, "softmax_xent");
    report.guards(grad, "softmax_xent");
    Guarded<float> stats_only(2 * rows, NAN);
    dev.softmax_xent(logits.data(), labels.data(), rows, classes, nullptr, stats_only.data());
    report.close("softmax_xent without gradient", stats_only, want_stats, want_stats.size(), 1e-5, 1e-6);
}

inline void check_sum_columns(Device& dev, Report& report, SplitMix64& rng) {
    const int cases[][3] = {{37, 5, 1}, {3, 4, 49}, {300, 3, 1}, {1000, 2, 1}, {0, 6, 1}, {1, 1, 1}};
    for (const auto& c : cases) {
        int rows = c[0], cols = c[1], inner = c[2];
        Guarded<float> m((size_t)rows * cols * inner), out(cols, NAN);
        fill_uniform(m.data(), m.size(), rng, -1, 1);
        std::vector<double> want(cols, 0.0);
        for (int r = 0; r < rows; ++r)
            for (int j = 0; j < cols; ++j)
                for (int s = 0; s < inner; ++s) want[j] += m[((size_t)r * cols + j) * inner + s];
        dev.sum_columns(m.data(), rows, cols, inner, out.data());
        std::string name = format("sum_columns rows=%d cols=%d inner=%d", rows, cols, inner);
        report.close(name, out, want, cols, 1e-5, 1e-5);
        report.guards(out, name);
    }
    Guarded<float> m(7 * 3), out(3, NAN);
    fill_uniform(m.data(), m.size(), rng, -1, 1);
    std::vector<double> want(3, 0.0);
    for (int r = 0; r < 7; ++r)
        for (int j = 0; j < 3; ++j) want[j] += m[r * 3 + j];
    emulate_sum_columns(dim3(5), dim3(REDUCE_THREADS), m.data(), 7, 3, 1, out.data());
    report.close("sum_columns on more blocks than columns", out, want, 3, 1e-6, 1e-6);
    report.guards(out, "sum_columns on more blocks than columns");
}

inline void check_conv_and_pool(Device& dev, Report& report, SplitMix64& rng) {
    const int N = 2, C = 3, H = 9, W = 8, K = 4, R = 3, P = H - R + 1, Q = W - R + 1;
    Guarded<float> x(N * C * H * W), w(K * C * R * R), b(K), dy(N * K * P * Q);
    fill_uniform(x.data(), x.size(), rng, -1, 1);
    fill_uniform(w.data(), w.size(), rng, -1, 1);
    fill_uniform(b.data(), b.size(), rng, -1, 1);
    fill_uniform(dy.data(), dy.size(), rng, -1, 1);
    auto X = [&](int n, int c, int h, int v) { return (double)x[((n * C + c) * H + h) * W + v]; };
    auto Wt = [&](int k, int c, int ry, int rx) { return (double)w[((k * C + c) * R + ry) * R + rx]; };
    auto DY = [&](int n, int k, int p, int q) { return (double)dy[((n * K + k) * P + p) * Q + q]; };
    for (int relu : {0, 1}) {
        std::vector<double> want(N * K * P * Q);
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < K; ++k)
                for (int p = 0; p < P; ++p)
                    for (int q = 0; q < Q; ++q) {
                        double acc = b[k];
                        for (int c = 0; c < C; ++c)
                            for (int ry = 0; ry < R; ++ry)
                                for (int rx = 0; rx < R; ++rx) acc += X(n, c, p + ry, q + rx) * Wt(k, c, ry, rx);
                        want[((n * K + k) * P + p) * Q + q] = relu && acc <= 0 ? 0.0 : acc;
                    }
        Guarded<float> y(want.size(), NAN);
        dev.conv2d_forward(x.data(), w.data(), b.data(), y.data(), N, C, H, W, K, R, relu);
        report.close(relu ? "conv2d_forward relu" : "conv2d_forward linear", y, want, want.size(), 1e-5, 1e-5);
        report.guards(y, "conv2d_forward");
    }
    std::vector<double> want_dx(N * C * H * W, 0.0), want_dw(K * C * R * R, 0.0);
    for (int n = 0; n < N; ++n)  // the adjoint of the forward sum, term by term
        for (int k = 0; k < K; ++k)
            for (int p = 0; p < P; ++p)
                for (int q = 0; q < Q; ++q)
                    for (int c = 0; c < C; ++c)
                        for (int ry = 0; ry < R; ++ry)
                            for (int rx = 0; rx < R; ++rx) {
                                want_dx[((n * C + c) * H + p + ry) * W + q + rx] += DY(n, k, p, q) * Wt(k, c, ry, rx);
                                want_dw[((k * C + c) * R + ry) * R + rx] += DY(n, k, p, q) * X(n, c, p + ry, q + rx);
                            }
    Guarded<float> dx(want_dx.size(), NAN), dw(want_dw.size(), NAN);
    dev.conv2d_backward_input(dy.data(), w.data(), dx.data(), N, C, H, W, K, R);
    dev.conv2d_backward_weight(x.data(), dy.data(), dw.data(), N, C, H, W, K, R);
    report.close("conv2d_backward_input", dx, want_dx, want_dx.size(), 1e-5, 1e-5);
    report.close("conv2d_backward_weight", dw, want_dw, want_dw.size(), 1e-5, 1e-5);
    report.guards(dx, "conv2d_backward_input");
    report.guards(dw, "conv2d_backward_weight");

    // Pooling, odd height (the last row is dropped), values with ties.
    const int planes = 3, PH = 7, PW = 6, OP = PH / 2, OQ = PW / 2;
    Guarded<float> px(planes * PH * PW), pdy(planes * OP * OQ);
    for (size_t i = 0; i < px.size(); ++i) px[i] = (float)(rng.next() % 4);  // small integers: many ties
    fill_uniform(pdy.data(), pdy.size(), rng, -1, 1);
    std::vector<double> want_y(planes * OP * OQ), want_pdx(planes * PH * PW, 0.0);
    for (int pl = 0; pl < planes; ++pl)
        for (int p = 0; p < OP; ++p)
            for (int q = 0; q < OQ; ++q) {
                int best_h = 2 * p, best_v = 2 * q;
                for (int d = 0; d < 4; ++d) {  // first maximum in (0,0), (0,1), (1,0), (1,1) order
                    int h = 2 * p + d / 2, v = 2 * q + d % 2;
                    if (px[(pl * PH + h) * PW + v] > px[(pl * PH + best_h) * PW + best_v]) best_h = h, best_v = v;
                }
                want_y[(pl * OP + p) * OQ + q] = px[(pl * PH + best_h) * PW + best_v];
                want_pdx[(pl * PH + best_h) * PW + best_v] = pdy[(pl * OP + p) * OQ + q];
            }
    Guarded<float> py(want_y.size(), NAN), pdx(want_pdx.size(), NAN);
    dev.maxpool2_forward(px.data(), py.data(), planes, PH, PW);
    dev.maxpool2_backward(px.data(), pdy.data(), pdx.data(), planes, PH, PW);
    report.close("maxpool2_forward (odd height, ties)", py, want_y, want_y.size(), 0, 0);
    report.close("maxpool2_backward (odd height, ties)", pdx, want_pdx, want_pdx.size(), 0, 0);
    report.guards(py, "maxpool2_forward");
    report.guards(pdx, "maxpool2_backward");
}

// ------------------------------------------------------------------ whole networks

struct Batch {
    int rows, dim;
    std::vector<uint8_t> images, labels;
};

// The double-precision loss SUM of `net` on the batch.
inline double reference_loss(const Network& net, const std::vector<double>& params, const Batch& batch) {
    std::vector<double> in(batch.images.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = batch.images[i] / 255.0;
    for (size_t l = 0; l < net.layers().size(); ++l) {
        std::vector<double> out((size_t)batch.rows * net.layers()[l]->out_size());
        net.layers()[l]->forward_reference(params.data() + net.offset(l), in.data(), out.data(), batch.rows);
        in.swap(out);
    }
    double loss = 0;
    int classes = net.classes();
    for (int r = 0; r < batch.rows; ++r) {
        const double* z = &in[(size_t)r * classes];
        double zmax = z[0], total = 0;
        for (int j = 1; j < classes; ++j) zmax = std::max(zmax, z[j]);
        for (int j = 0; j < classes; ++j) total += std::exp(z[j] - zmax);
        loss += std::log(total) + zmax - z[batch.labels[r]];
    }
    return loss;
}

// The trainer's gradient computation (trainer.h compute_gradients) on an
// emulated device: gradient sums of rows [first, first + rows) of the batch,
// then the loss sum and the hit count.
inline std::vector<float> emulated_gradients(Device& dev, const Network& net, const std::vector<float>& params,
                                             const Batch& batch, int first, int rows, std::vector<float>* logits) {
    Workspace ws(dev, net, std::max(rows, 1));
    std::vector<float> grads(net.param_count() + 2, NAN);
    std::vector<int> labels(batch.rows);
    std::vector<float> row_stats(2 * batch.rows);
    if (rows == 0) {
        std::fill(grads.begin(), grads.end(), 0.0f);
        return grads;
    }
    dev.gather_batch(batch.images.data(), batch.labels.data(), nullptr, first, rows, batch.dim, ws.input(),
                     labels.data());
    forward(dev, net, ws, params.data(), rows);
    dev.softmax_xent(ws.logits(), labels.data(), rows, net.classes(), ws.dlogits(), row_stats.data());
    dev.sum_columns(row_stats.data(), rows, 2, 1, grads.data() + net.param_count());
    backward(dev, net, ws, params.data(), rows, grads.data());
    if (logits) logits->assign(ws.logits(), ws.logits() + (size_t)rows * net.classes());
    dev.release_all();
    return grads;
}

inline void check_network(Device& dev, Report& report, const Network& net, int rows, int stride, SplitMix64& rng) {
    int dim = (int)net.input_size();
    Batch batch{rows, dim, std::vector<uint8_t>((size_t)rows * dim), std::vector<uint8_t>(rows)};
    for (auto& pixel : batch.images) pixel = (uint8_t)(rng.next() & 0xFF);
    for (auto& label : batch.labels) label = (uint8_t)(rng.next() % net.classes());
    std::vector<float> params = net.initial_parameters(rng.next());
    for (auto& p : params)
        if (p == 0.0f) p = (float)(0.2 * rng.uniform() - 0.1);  // biases: not all zero
    std::vector<float> logits;
    std::vector<float> grads = emulated_gradients(dev, net, params, batch, 0, rows, &logits);

    std::vector<double> exact(params.begin(), params.end());
    // Forward: the emulated logits against the reference's.
    std::vector<double> in(batch.images.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = batch.images[i] / 255.0;
    for (size_t l = 0; l < net.layers().size(); ++l) {
        std::vector<double> out((size_t)rows * net.layers()[l]->out_size());
        net.layers()[l]->forward_reference(exact.data() + net.offset(l), in.data(), out.data(), rows);
        in.swap(out);
    }
    std::string name = net.kind() + " [" + net.describe() + "]";
    report.close(name + ": forward pass (logits)", logits, in, in.size(), 1e-4, 1e-4);
    double loss = reference_loss(net, exact, batch);
    report.close(name + ": loss sum", &grads[net.param_count()], &loss, 1, 1e-5, 1e-5);

    // Backward: every `stride`-th parameter against central differences.
    std::vector<double> numeric, analytic;
    for (long long i = 0; i < net.param_count(); ++i) {
        if (i % stride) continue;
        const double eps = 1e-5;
        double saved = exact[i];
        exact[i] = saved + eps;
        double up = reference_loss(net, exact, batch);
        exact[i] = saved - eps;
        double down = reference_loss(net, exact, batch);
        exact[i] = saved;
        numeric.push_back((up - down) / (2 * eps));
        analytic.push_back(grads[i]);
    }
    double scale = 0;
    for (double g : numeric) scale = std::max(scale, std::fabs(g));
    report.close(format("%s: %zu gradients against finite differences", name.c_str(), numeric.size()), analytic,
                 numeric, numeric.size(), 2e-3, 1e-4 * std::max(scale, 1.0));

    // Data parallelism: shards' gradient sums add up to the whole batch's.
    std::vector<float> sum(grads.size(), 0.0f);
    int cuts[] = {0, rows / 3, rows / 3, rows};  // the middle shard is empty
    for (int s = 0; s < 3; ++s) {
        std::vector<float> part = emulated_gradients(dev, net, params, batch, cuts[s], cuts[s + 1] - cuts[s], nullptr);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    report.close(name + ": gradient sums over 3 shards (one empty) = whole batch", sum, grads, grads.size(), 1e-4,
                 1e-5 * std::max(scale, 1.0));
}

inline void check_split(Report& report) {
    std::vector<int> counts = split_rows(64, {0.5, 0.25, 0.125, 0.125});
    report.expect(counts == std::vector<int>({32, 16, 8, 8}), "split_rows: exact shares");
    counts = split_rows(10, {1.0 / 3, 1.0 / 3, 1.0 / 3});
    report.expect(counts == std::vector<int>({4, 3, 3}), "split_rows: remainder to the first of equal shares");
    counts = split_rows(7, {0.9, 0.05, 0.05});
    int total = 0;
    for (int c : counts) total += c;
    report.expect(total == 7 && counts[0] >= 6, "split_rows: a slow device may get nothing");
}

// Runs every check; returns the process exit status.
inline int run_all() {
    Device dev(0, /*emulated=*/true);
    Report report;
    SplitMix64 rng(12345);
    std::printf("cpu-check: the kernels' thread bodies, run on the CPU over their launch grids\n");
    check_gather(dev, report, rng);
    check_gemm(dev, report, rng);
    check_elementwise(dev, report, rng);
    check_softmax(dev, report, rng);
    check_sum_columns(dev, report, rng);
    check_conv_and_pool(dev, report, rng);
    check_split(report);
    check_network(dev, report, Network::mlp(6, 5, {7, 6}, 4), 5, 1, rng);
    check_network(dev, report, Network::cnn(16, 16, 10), 3, 7, rng);
    check_network(dev, report, Network::mlp(28, 28, {256, 128}, 10), 4, 401, rng);
    check_network(dev, report, Network::cnn(28, 28, 10), 3, 53, rng);
    std::printf("cpu-check: %d passed, %d failed\n", report.passed(), report.failed());
    return report.failed() ? 1 : 0;
}

}  // namespace cpu_check
