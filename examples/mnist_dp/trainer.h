// Data-parallel training: one host thread per device.
//
// Every step takes the next global batch of the epoch's shuffled order and
// splits it into contiguous shards, one per device, sized by the devices'
// shares.  Each device computes the SUM of the loss gradients over its shard;
// the reduction adds the sums and divides by the global batch size.  So the
// update is the same for any number of devices and any split, up to
// floating-point rounding: 1, 2 and 4 devices follow the same loss curve.
//
// Synchronisation (--sync):
//   host  the paper's way: each thread copies its device's gradient sums to
//         the host (cudaMemcpy); the threads add them and update the
//         parameters on the CPU, each thread a slice of them, and every
//         thread copies them back to its device (cudaMemcpy).
//   peer  the gradient sums go to GPU0 with cudaMemcpyPeer and are added
//         there by a kernel; GPU0 updates the parameters (sgd_momentum) and
//         every other device pulls them with cudaMemcpyPeer.
//
// Shares: each device's throughput is measured in a short warm-up on the same
// work (all devices at once, as in training; the best of the timed steps)
// and the shares are proportional to it; --static-split gives every device
// the same share.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device.h"
#include "idx.h"
#include "network.h"
#include "rng.h"

struct TrainOptions {
    std::string sync = "host";  // host | peer
    int epochs = 10;
    int batch = 64;  // global batch
    double lr = 0.1;
    double momentum = 0.9;
    double weight_decay = 5e-4;
    uint64_t seed = 1;
    bool static_split = false;
    int warmup_steps = 5;
    int log_steps = 0;  // print the loss every this many steps (0: never)
    int eval_chunk = 500;
};

// Reusable barrier for the device threads (std::barrier is C++20).
class Barrier {
public:
    explicit Barrier(int parties) : parties_(parties) {}
    void wait() {
        std::unique_lock<std::mutex> lock(mutex_);
        unsigned long generation = generation_;
        if (++waiting_ == parties_) {
            waiting_ = 0;
            ++generation_;
            cv_.notify_all();
        } else {
            cv_.wait(lock, [&] { return generation_ != generation; });
        }
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    int parties_, waiting_ = 0;
    unsigned long generation_ = 0;
};

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds the whole process has used (every thread: the device threads
// and, through rcuda, its client's).
inline double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// `total` rows split by `shares` (largest remainder; ties to the lower device).
inline std::vector<int> split_rows(int total, const std::vector<double>& shares) {
    size_t n = shares.size();
    std::vector<int> counts(n);
    std::vector<double> remainder(n);
    int given = 0;
    for (size_t d = 0; d < n; ++d) {
        double exact = total * shares[d];
        counts[d] = (int)std::floor(exact);
        remainder[d] = exact - counts[d];
        given += counts[d];
    }
    while (given < total) {
        size_t best = 0;
        for (size_t d = 1; d < n; ++d)
            if (remainder[d] > remainder[best]) best = d;
        ++counts[best];
        remainder[best] = -1.0;
        ++given;
    }
    return counts;
}

struct EpochResult {
    double train_loss = 0, test_loss = 0, test_accuracy = 0, train_accuracy = 0;
    double seconds = 0, train_seconds = 0;
    double train_cpu_seconds = 0;  // CPU the whole process used while training (all its threads)
};

class Trainer {
public:
    Trainer(const Network& net, const Dataset& train, const Dataset& test, std::vector<std::unique_ptr<Device>>& devices,
            const TrainOptions& options)
        : net_(net), train_(train), test_(test), devices_(devices), opt_(options), barrier_((int)devices.size()),
          replicas_(devices.size()) {}

    // Train; prints progress to stdout.  Returns when every epoch is done.
    void run() {
        params_ = net_.initial_parameters(opt_.seed);
        velocity_.assign(params_.size(), 0.0f);
        order_.resize(train_.count);
        shuffle_rng_ = std::make_unique<SplitMix64>(shuffle_stream(opt_.seed));
        shares_.assign(devices_.size(), 1.0 / devices_.size());
        warmup_throughput_.assign(devices_.size(), 0.0);
        busy_.assign(devices_.size(), 0.0);
        std::vector<std::thread> threads;
        for (size_t d = 0; d < devices_.size(); ++d) threads.emplace_back([this, d] { device_thread((int)d); });
        for (auto& t : threads) t.join();
    }

    const std::vector<EpochResult>& epochs() const { return results_; }
    const std::vector<double>& shares() const { return shares_; }
    const std::vector<double>& warmup_throughput() const { return warmup_throughput_; }
    const std::vector<double>& busy_seconds() const { return busy_; }
    long long steps() const { return steps_; }
    double total_seconds() const { return total_seconds_; }  // from the end of the warm-up
    double train_seconds() const {  // the epochs' training, without their evaluation
        double total = 0;
        for (const auto& e : results_) total += e.train_seconds;
        return total;
    }
    double train_cpu_seconds() const {  // the process's CPU time over those same spans
        double total = 0;
        for (const auto& e : results_) total += e.train_cpu_seconds;
        return total;
    }

private:
    // What one device holds; touched only by its own thread, except that the
    // leader (thread 0) reads the gradient sums' addresses in peer mode.
    struct Replica {
        std::unique_ptr<Workspace> ws;
        float* params = nullptr;
        float* grads = nullptr;  // param_count gradient sums, then [loss sum, correct count]
        float* velocity = nullptr;                // peer mode, GPU0
        std::vector<float*> peer_grads;           // peer mode, GPU0: one buffer per other device
        uint8_t *train_images = nullptr, *train_labels = nullptr, *test_images = nullptr, *test_labels = nullptr;
        int* order = nullptr;
        int* labels = nullptr;
        float* row_stats = nullptr;
        float* stats = nullptr;
        std::vector<float> host_grads;  // host mode: the gradient sums, copied here
    };

    long long P() const { return net_.param_count(); }
    long long grad_floats() const { return P() + 2; }
    bool leader(int d) const { return d == 0; }

    void device_thread(int d) {
        Device& dev = *devices_[d];
        dev.bind();
        setup(d);
        barrier_.wait();
        measure_shares(d);
        Clock::time_point run_start = Clock::now();
        for (int epoch = 0; epoch < opt_.epochs; ++epoch) {
            if (leader(d)) start_epoch(epoch);
            barrier_.wait();
            Clock::time_point epoch_start = Clock::now();
            if (leader(d)) epoch_cpu_start_ = process_cpu_seconds();
            Replica& r = replicas_[d];
            dev.upload(r.order, order_.data(), order_.size() * sizeof(int));
            int steps = (train_.count + opt_.batch - 1) / opt_.batch;
            for (int s = 0; s < steps; ++s) {
                int first = s * opt_.batch, rows = std::min(opt_.batch, train_.count - first);
                std::vector<int> counts = split_rows(rows, shares_);
                int offset = 0;
                for (int p = 0; p < d; ++p) offset += counts[p];
                Clock::time_point busy_start = Clock::now();
                compute_gradients(d, r.order, first + offset, counts[d]);
                if (opt_.sync == "peer")
                    dev.synchronize();
                else
                    dev.download(r.host_grads.data(), r.grads, grad_floats() * sizeof(float));
                busy_[d] += seconds_since(busy_start);
                barrier_.wait();
                if (opt_.sync == "peer") {
                    if (leader(d)) reduce_on_gpu0(rows);
                } else {
                    reduce_on_host(d, rows);
                }
                barrier_.wait();
                if (opt_.sync == "peer") {
                    if (!leader(d))
                        dev.copy_from_peer(r.params, *devices_[0], replicas_[0].params, P() * sizeof(float));
                } else {
                    dev.upload(r.params, params_.data(), P() * sizeof(float));
                }
                if (leader(d)) log_step(epoch, s);
            }
            if (opt_.sync == "peer") dev.synchronize();  // the last parameters have arrived
            barrier_.wait();
            if (leader(d)) {
                train_seconds_ = seconds_since(epoch_start);
                train_cpu_seconds_ = process_cpu_seconds() - epoch_cpu_start_;
            }
            evaluate(d);
            barrier_.wait();
            if (leader(d)) finish_epoch(epoch, seconds_since(epoch_start));
        }
        barrier_.wait();
        if (leader(d)) total_seconds_ = seconds_since(run_start);
        dev.release_all();
    }

    void setup(int d) {
        Device& dev = *devices_[d];
        Replica& r = replicas_[d];
        int capacity = std::max(opt_.batch, opt_.eval_chunk);
        r.ws = std::make_unique<Workspace>(dev, net_, capacity);
        r.params = dev.allocate<float>(P());
        r.grads = dev.allocate<float>(grad_floats());
        r.labels = dev.allocate<int>(capacity);
        r.row_stats = dev.allocate<float>(2 * (size_t)capacity);
        r.stats = dev.allocate<float>(2);
        r.order = dev.allocate<int>(train_.count);
        r.train_images = upload_bytes(dev, train_.images);
        r.train_labels = upload_bytes(dev, train_.labels);
        r.test_images = upload_bytes(dev, test_.images);
        r.test_labels = upload_bytes(dev, test_.labels);
        dev.upload(r.params, params_.data(), P() * sizeof(float));
        r.host_grads.assign(grad_floats(), 0.0f);
        if (opt_.sync == "peer" && leader(d)) {
            r.velocity = dev.allocate<float>(P());
            dev.zero(r.velocity, P() * sizeof(float));
            for (size_t p = 1; p < devices_.size(); ++p) r.peer_grads.push_back(dev.allocate<float>(grad_floats()));
        }
    }

    static uint8_t* upload_bytes(Device& dev, const std::vector<uint8_t>& bytes) {
        uint8_t* ptr = dev.allocate<uint8_t>(bytes.size());
        dev.upload(ptr, bytes.data(), bytes.size());
        return ptr;
    }

    // Gradient sums over training rows order[first .. first + rows) (order ==
    // null: rows first .. first + rows), with the loss sum and the number of
    // correct predictions after them.
    void compute_gradients(int d, const int* order, int first, int rows) {
        Device& dev = *devices_[d];
        Replica& r = replicas_[d];
        if (rows == 0) {
            dev.zero(r.grads, grad_floats() * sizeof(float));
            return;
        }
        int dim = train_.rows * train_.cols;
        dev.gather_batch(r.train_images, r.train_labels, order, first, rows, dim, r.ws->input(), r.labels);
        forward(dev, net_, *r.ws, r.params, rows);
        dev.softmax_xent(r.ws->logits(), r.labels, rows, net_.classes(), r.ws->dlogits(), r.row_stats);
        dev.sum_columns(r.row_stats, rows, 2, 1, r.grads + P());
        backward(dev, net_, *r.ws, r.params, rows, r.grads);
    }

    // Warm-up: every device runs the same few steps at once; shares follow
    // the measured samples per second.
    void measure_shares(int d) {
        Device& dev = *devices_[d];
        int rows = std::min(train_.count, std::max(1, (opt_.batch + (int)devices_.size() - 1) / (int)devices_.size()));
        compute_gradients(d, nullptr, 0, rows);  // first use: module loading, allocation, caches
        dev.synchronize();
        barrier_.wait();
        // The best step is the device's own speed: sharing a machine or a
        // network with the others only ever slows a step down, and a share
        // taken from an unlucky mean would make this device the slowest.
        double best = 0;
        for (int i = 0; i < opt_.warmup_steps; ++i) {
            Clock::time_point start = Clock::now();
            compute_gradients(d, nullptr, 0, rows);
            dev.synchronize();
            double seconds = seconds_since(start);
            if (i == 0 || seconds < best) best = seconds;
        }
        warmup_throughput_[d] = rows / std::max(best, 1e-9);  // own slot
        barrier_.wait();
        if (leader(d)) {
            if (!opt_.static_split && opt_.warmup_steps > 0) {
                double total = 0;
                for (double t : warmup_throughput_) total += t;
                for (size_t p = 0; p < devices_.size(); ++p) shares_[p] = warmup_throughput_[p] / total;
            }
            std::string line = "warm-up (" + std::to_string(rows) + " samples x " + std::to_string(opt_.warmup_steps) +
                               " steps per device):";
            for (size_t p = 0; p < devices_.size(); ++p)
                line += format(" GPU%zu %.0f samples/s%s", p, warmup_throughput_[p], p + 1 < devices_.size() ? "," : "");
            std::printf("%s\n", line.c_str());
            std::printf("shares%s: %s\n", opt_.static_split ? " (static split)" : " (by measured throughput)",
                        share_text().c_str());
            std::fflush(stdout);
        }
        barrier_.wait();
    }

    std::string share_text() const {
        std::string text;
        for (size_t p = 0; p < shares_.size(); ++p) text += format("%s%.1f%%", p ? " " : "", 100.0 * shares_[p]);
        return text;
    }

    void start_epoch(int epoch) {
        for (int i = 0; i < train_.count; ++i) order_[i] = i;
        shuffle_rng_->shuffle(order_);
        lr_ = (float)(opt_.lr * 0.5 * (1.0 + std::cos(M_PI * epoch / opt_.epochs)));  // cosine schedule
        epoch_loss_ = epoch_correct_ = 0;
        step_loss_ = 0;
        step_rows_ = 0;
    }

    // Host mode, every device thread: add the devices' gradient sums (in
    // device order) and run SGD on the host's parameters (the formula of
    // sgd_momentum_thread), for this thread's slice of the parameters; the
    // slices are disjoint, and each element is computed as one thread would.
    void reduce_on_host(int d, int rows) {
        long long n = (long long)devices_.size(), first = P() * d / n, last = P() * (d + 1) / n;
        float scale = 1.0f / (float)rows, momentum = (float)opt_.momentum, decay = (float)opt_.weight_decay, lr = lr_;
        float* __restrict params = params_.data();
        float* __restrict velocity = velocity_.data();
        // A chunk at a time, in loops the compiler vectorises: the sums in a
        // buffer that stays in cache (device by device: the same order of
        // additions for every element), then the update.
        constexpr long long CHUNK = 2048;
        float sum[CHUNK];
        for (long long start = first; start < last; start += CHUNK) {
            long long count = std::min(CHUNK, last - start);
            const float* __restrict g0 = replicas_[0].host_grads.data() + start;
            for (long long i = 0; i < count; ++i) sum[i] = g0[i];
            for (size_t p = 1; p < replicas_.size(); ++p) {
                const float* __restrict g = replicas_[p].host_grads.data() + start;
                for (long long i = 0; i < count; ++i) sum[i] += g[i];
            }
            float* __restrict w = params + start;
            float* __restrict m = velocity + start;
            for (long long i = 0; i < count; ++i) {
                float g = sum[i] * scale + decay * w[i];
                float v = momentum * m[i] + g;
                m[i] = v;
                w[i] = w[i] - lr * v;
            }
        }
        if (!leader(d)) return;
        double loss = 0, correct = 0;
        for (const Replica& r : replicas_) loss += r.host_grads[P()], correct += r.host_grads[P() + 1];
        account(rows, loss, correct);
    }

    // Peer mode, leader: gradient sums to GPU0, added there, update there.
    void reduce_on_gpu0(int rows) {
        Device& gpu0 = *devices_[0];
        Replica& r0 = replicas_[0];
        for (size_t p = 1; p < devices_.size(); ++p)
            gpu0.copy_from_peer(r0.peer_grads[p - 1], *devices_[p], replicas_[p].grads, grad_floats() * sizeof(float));
        for (size_t p = 1; p < devices_.size(); ++p) gpu0.add_into(r0.grads, r0.peer_grads[p - 1], grad_floats());
        gpu0.sgd_momentum(r0.params, r0.velocity, r0.grads, P(), 1.0f / (float)rows, lr_, (float)opt_.momentum,
                          (float)opt_.weight_decay);
        float stats[2];
        gpu0.download(stats, r0.grads + P(), sizeof stats);
        account(rows, stats[0], stats[1]);
    }

    void account(int rows, double loss, double correct) {
        epoch_loss_ += loss;
        epoch_correct_ += correct;
        step_loss_ += loss;
        step_rows_ += rows;
        ++steps_;
    }

    void log_step(int epoch, int step) {
        if (opt_.log_steps <= 0 || (step + 1) % opt_.log_steps) return;
        std::printf("step %d.%d loss %.6f\n", epoch + 1, step + 1, step_loss_ / std::max(step_rows_, 1LL));
        std::fflush(stdout);
        step_loss_ = 0;
        step_rows_ = 0;
    }

    // Each device evaluates its share of the test set, in chunks.
    void evaluate(int d) {
        Device& dev = *devices_[d];
        Replica& r = replicas_[d];
        std::vector<int> counts = split_rows(test_.count, shares_);
        int first = 0;
        for (int p = 0; p < d; ++p) first += counts[p];
        double loss = 0, correct = 0;
        int dim = test_.rows * test_.cols;
        for (int done = 0; done < counts[d];) {
            int rows = std::min(r.ws->capacity, counts[d] - done);
            dev.gather_batch(r.test_images, r.test_labels, nullptr, first + done, rows, dim, r.ws->input(), r.labels);
            forward(dev, net_, *r.ws, r.params, rows);
            dev.softmax_xent(r.ws->logits(), r.labels, rows, net_.classes(), nullptr, r.row_stats);
            dev.sum_columns(r.row_stats, rows, 2, 1, r.stats);
            float stats[2];
            dev.download(stats, r.stats, sizeof stats);
            loss += stats[0];
            correct += stats[1];
            done += rows;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        test_loss_sum_ += loss;
        test_correct_ += correct;
    }

    void finish_epoch(int epoch, double seconds) {
        EpochResult e;
        e.train_loss = epoch_loss_ / train_.count;
        e.train_accuracy = epoch_correct_ / train_.count;
        e.test_loss = test_loss_sum_ / test_.count;
        e.test_accuracy = test_correct_ / test_.count;
        e.seconds = seconds;
        e.train_seconds = train_seconds_;
        e.train_cpu_seconds = train_cpu_seconds_;
        results_.push_back(e);
        test_loss_sum_ = test_correct_ = 0;
        std::printf("epoch %d/%d  loss %.6f  train %.2f%%  test %.2f%% (loss %.4f)  time %.2f s  %.0f samples/s  "
                    "shares %s\n",
                    epoch + 1, opt_.epochs, e.train_loss, 100 * e.train_accuracy, 100 * e.test_accuracy, e.test_loss,
                    e.seconds, train_.count / std::max(e.train_seconds, 1e-9), share_text().c_str());
        std::fflush(stdout);
    }

    const Network& net_;
    const Dataset& train_;
    const Dataset& test_;
    std::vector<std::unique_ptr<Device>>& devices_;
    TrainOptions opt_;
    Barrier barrier_;
    std::mutex mutex_;
    std::vector<Replica> replicas_;
    // Leader-owned state, except the master copy: each thread updates its slice.
    std::vector<float> params_, velocity_;  // host mode: the master copy
    std::vector<int> order_;
    std::unique_ptr<SplitMix64> shuffle_rng_;
    std::vector<double> shares_, warmup_throughput_, busy_;
    std::vector<EpochResult> results_;
    float lr_ = 0;
    double epoch_loss_ = 0, epoch_correct_ = 0, step_loss_ = 0;
    long long step_rows_ = 0, steps_ = 0;
    double test_loss_sum_ = 0, test_correct_ = 0;
    double train_seconds_ = 0, total_seconds_ = 0;
    double epoch_cpu_start_ = 0, train_cpu_seconds_ = 0;
};
