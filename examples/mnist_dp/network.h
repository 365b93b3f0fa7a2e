// The models: a stack of layers over one flat parameter vector.
//
//   mlp: Dense(784, 256) ReLU, Dense(256, 128) ReLU, Dense(128, 10)
//   cnn: Conv(1 -> 8, 5x5) ReLU, MaxPool 2x2, Conv(8 -> 16, 5x5) ReLU, MaxPool 2x2,
//        Dense(256, 128) ReLU, Dense(128, 10)                          (LeNet-style)
//
// Each layer owns a slice of the parameter vector (weights, then biases) and
// of the gradient vector, in the same layout.  Weights are He-uniform from
// the seed, biases zero; the initial parameters are made once, on the host.
// Activations are row-major, one row per sample (NCHW for images).
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "device.h"
#include "rng.h"

class Layer {
public:
    virtual ~Layer() = default;
    virtual std::string describe() const = 0;
    virtual long long in_size() const = 0;   // floats per sample
    virtual long long out_size() const = 0;
    virtual long long param_count() const { return 0; }
    virtual void init(float* /*params*/, SplitMix64& /*rng*/) const {}
    virtual void forward(Device& d, const float* params, const float* in, float* out, int rows) const = 0;
    // dout: the loss's gradient w.r.t. this layer's output (may be changed in
    // place); din: where the gradient w.r.t. the input goes (null for the
    // first layer); grads: this layer's slice of the gradient sums.
    virtual void backward(Device& d, const float* params, const float* in, const float* out, float* dout, float* din,
                          float* grads, int rows) const = 0;
    // The forward pass as plain double-precision loops: what --cpu-check
    // compares the kernels with.
    virtual void forward_reference(const double* params, const double* in, double* out, int rows) const = 0;
};

inline double relu_reference(double v, bool relu) { return relu && !(v > 0) ? 0.0 : v; }

// Weights uniform in +-sqrt(6 / fan_in) (He et al.), in memory order.
inline void he_uniform(float* w, long long count, long long fan_in, SplitMix64& rng) {
    double limit = std::sqrt(6.0 / (double)fan_in);
    for (long long i = 0; i < count; ++i) w[i] = (float)((2.0 * rng.uniform() - 1.0) * limit);
}

class Dense : public Layer {
public:
    Dense(int in, int out, bool relu) : in_(in), out_(out), relu_(relu) {}
    std::string describe() const override { return format("dense %d->%d%s", in_, out_, relu_ ? " relu" : ""); }
    long long in_size() const override { return in_; }
    long long out_size() const override { return out_; }
    long long param_count() const override { return (long long)in_ * out_ + out_; }
    void init(float* params, SplitMix64& rng) const override {
        he_uniform(params, (long long)in_ * out_, in_, rng);
        for (int j = 0; j < out_; ++j) params[(long long)in_ * out_ + j] = 0.0f;
    }
    void forward(Device& d, const float* params, const float* in, float* out, int rows) const override {
        d.gemm("nn", in, weights(params), out, rows, out_, in_);  // out = in * W
        d.bias_activation(out, bias(params), rows, out_, relu_);
    }
    void backward(Device& d, const float* params, const float* in, const float* out, float* dout, float* din,
                  float* grads, int rows) const override {
        if (relu_) d.relu_backward(dout, out, (long long)rows * out_);
        d.gemm("tn", in, dout, grads, in_, out_, rows);                // dW = in^T * dout
        d.sum_columns(dout, rows, out_, 1, grads + (long long)in_ * out_);  // db = column sums of dout
        if (din) d.gemm("nt", dout, weights(params), din, rows, in_, out_);  // din = dout * W^T
    }
    void forward_reference(const double* params, const double* in, double* out, int rows) const override {
        for (int r = 0; r < rows; ++r)
            for (int j = 0; j < out_; ++j) {
                double acc = params[(long long)in_ * out_ + j];
                for (int i = 0; i < in_; ++i) acc += in[(long long)r * in_ + i] * params[(long long)i * out_ + j];
                out[(long long)r * out_ + j] = relu_reference(acc, relu_);
            }
    }

private:
    const float* weights(const float* params) const { return params; }
    const float* bias(const float* params) const { return params + (long long)in_ * out_; }
    int in_, out_;
    bool relu_;
};

class Conv : public Layer {
public:
    Conv(int channels, int height, int width, int filters, int kernel, bool relu)
        : C_(channels), H_(height), W_(width), K_(filters), R_(kernel), relu_(relu) {}
    std::string describe() const override {
        return format("conv %dx%dx%d->%dx%dx%d (%dx%d)%s", C_, H_, W_, K_, P(), Q(), R_, R_, relu_ ? " relu" : "");
    }
    long long in_size() const override { return (long long)C_ * H_ * W_; }
    long long out_size() const override { return (long long)K_ * P() * Q(); }
    long long param_count() const override { return weight_count() + K_; }
    void init(float* params, SplitMix64& rng) const override {
        he_uniform(params, weight_count(), (long long)C_ * R_ * R_, rng);
        for (int k = 0; k < K_; ++k) params[weight_count() + k] = 0.0f;
    }
    void forward(Device& d, const float* params, const float* in, float* out, int rows) const override {
        d.conv2d_forward(in, params, params + weight_count(), out, rows, C_, H_, W_, K_, R_, relu_);
    }
    void backward(Device& d, const float* params, const float* in, const float* out, float* dout, float* din,
                  float* grads, int rows) const override {
        if (relu_) d.relu_backward(dout, out, rows * out_size());
        d.conv2d_backward_weight(in, dout, grads, rows, C_, H_, W_, K_, R_);
        d.sum_columns(dout, rows, K_, P() * Q(), grads + weight_count());
        if (din) d.conv2d_backward_input(dout, params, din, rows, C_, H_, W_, K_, R_);
    }
    void forward_reference(const double* params, const double* in, double* out, int rows) const override {
        for (int n = 0; n < rows; ++n)
            for (int k = 0; k < K_; ++k)
                for (int p = 0; p < P(); ++p)
                    for (int q = 0; q < Q(); ++q) {
                        double acc = params[weight_count() + k];
                        for (int c = 0; c < C_; ++c)
                            for (int ry = 0; ry < R_; ++ry)
                                for (int rx = 0; rx < R_; ++rx)
                                    acc += in[(((long long)n * C_ + c) * H_ + p + ry) * W_ + q + rx] *
                                           params[(((long long)k * C_ + c) * R_ + ry) * R_ + rx];
                        out[(((long long)n * K_ + k) * P() + p) * Q() + q] = relu_reference(acc, relu_);
                    }
    }

private:
    int P() const { return H_ - R_ + 1; }
    int Q() const { return W_ - R_ + 1; }
    long long weight_count() const { return (long long)K_ * C_ * R_ * R_; }
    int C_, H_, W_, K_, R_;
    bool relu_;
};

class MaxPool2 : public Layer {
public:
    MaxPool2(int channels, int height, int width) : C_(channels), H_(height), W_(width) {}
    std::string describe() const override { return format("maxpool 2x2 %dx%dx%d->%dx%dx%d", C_, H_, W_, C_, H_ / 2, W_ / 2); }
    long long in_size() const override { return (long long)C_ * H_ * W_; }
    long long out_size() const override { return (long long)C_ * (H_ / 2) * (W_ / 2); }
    void forward(Device& d, const float*, const float* in, float* out, int rows) const override {
        d.maxpool2_forward(in, out, rows * C_, H_, W_);
    }
    void backward(Device& d, const float*, const float* in, const float*, float* dout, float* din, float*,
                  int rows) const override {
        if (din) d.maxpool2_backward(in, dout, din, rows * C_, H_, W_);
    }
    void forward_reference(const double*, const double* in, double* out, int rows) const override {
        int P = H_ / 2, Q = W_ / 2;
        for (long long plane = 0; plane < (long long)rows * C_; ++plane)
            for (int p = 0; p < P; ++p)
                for (int q = 0; q < Q; ++q) {
                    const double* x = in + plane * H_ * W_;
                    double best = x[2 * p * W_ + 2 * q];
                    for (int dy = 0; dy < 2; ++dy)
                        for (int dx = 0; dx < 2; ++dx) best = std::max(best, x[(2 * p + dy) * W_ + 2 * q + dx]);
                    out[(plane * P + p) * Q + q] = best;
                }
    }

private:
    int C_, H_, W_;
};

class Network {
public:
    static Network mlp(int height, int width, std::vector<int> hidden, int classes) {
        Network net("mlp");
        int in = height * width;
        for (int h : hidden) {
            net.add(std::make_unique<Dense>(in, h, true));
            in = h;
        }
        net.add(std::make_unique<Dense>(in, classes, false));
        return net;
    }

    static Network cnn(int height, int width, int classes) {
        Network net("cnn");
        const int R = 5, C1 = 8, C2 = 16;
        int h = height, w = width;
        net.add(std::make_unique<Conv>(1, h, w, C1, R, true));
        h -= R - 1, w -= R - 1;
        net.add(std::make_unique<MaxPool2>(C1, h, w));
        h /= 2, w /= 2;
        net.add(std::make_unique<Conv>(C1, h, w, C2, R, true));
        h -= R - 1, w -= R - 1;
        net.add(std::make_unique<MaxPool2>(C2, h, w));
        h /= 2, w /= 2;
        if (h < 1 || w < 1) fail(format("the cnn needs images of at least 16x16 pixels, not %dx%d", height, width));
        net.add(std::make_unique<Dense>(C2 * h * w, 128, true));
        net.add(std::make_unique<Dense>(128, classes, false));
        return net;
    }

    const std::string& kind() const { return kind_; }
    const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
    long long offset(size_t layer) const { return offsets_[layer]; }
    long long param_count() const { return param_count_; }
    long long input_size() const { return layers_.front()->in_size(); }
    int classes() const { return (int)layers_.back()->out_size(); }

    std::string describe() const {
        std::string text;
        for (const auto& layer : layers_) text += (text.empty() ? "" : ", ") + layer->describe();
        return text;
    }

    std::vector<float> initial_parameters(uint64_t seed) const {
        std::vector<float> params(param_count_);
        SplitMix64 rng = init_stream(seed);
        for (size_t l = 0; l < layers_.size(); ++l) layers_[l]->init(params.data() + offsets_[l], rng);
        return params;
    }

private:
    explicit Network(std::string kind) : kind_(std::move(kind)) {}
    void add(std::unique_ptr<Layer> layer) {
        if (!layers_.empty() && layers_.back()->out_size() != layer->in_size())
            fail("network: " + layer->describe() + " does not fit after " + layers_.back()->describe());
        offsets_.push_back(param_count_);
        param_count_ += layer->param_count();
        layers_.push_back(std::move(layer));
    }
    std::string kind_;
    std::vector<std::unique_ptr<Layer>> layers_;
    std::vector<long long> offsets_;
    long long param_count_ = 0;
};

// One device's activations (act[0] is the input batch, act.back() the
// logits) and their gradients, for up to `capacity` samples at a time.
struct Workspace {
    int capacity;
    std::vector<float*> act, dact;

    Workspace(Device& d, const Network& net, int capacity) : capacity(capacity) {
        act.push_back(d.allocate<float>((size_t)capacity * net.input_size()));
        dact.push_back(nullptr);  // nobody needs the gradient w.r.t. the images
        for (const auto& layer : net.layers()) {
            act.push_back(d.allocate<float>((size_t)capacity * layer->out_size()));
            dact.push_back(d.allocate<float>((size_t)capacity * layer->out_size()));
        }
    }
    float* input() const { return act.front(); }
    float* logits() const { return act.back(); }
    float* dlogits() const { return dact.back(); }
};

inline void forward(Device& d, const Network& net, const Workspace& ws, const float* params, int rows) {
    for (size_t l = 0; l < net.layers().size(); ++l)
        net.layers()[l]->forward(d, params + net.offset(l), ws.act[l], ws.act[l + 1], rows);
}

// From ws.dlogits() back to the gradient sums of every parameter.
inline void backward(Device& d, const Network& net, const Workspace& ws, const float* params, int rows, float* grads) {
    for (size_t l = net.layers().size(); l-- > 0;)
        net.layers()[l]->backward(d, params + net.offset(l), ws.act[l], ws.act[l + 1], ws.dact[l + 1], ws.dact[l],
                                  grads + net.offset(l), rows);
}
