// How long each kernel of one mnist_dp training step takes on GPU0: the
// measurement the sim backend's cost model (examples/mnist_dp/sim_kernels.py,
// RCUDA_SIM_GFLOPS / _GBPS / _LAUNCH_US) is calibrated from.
//
//   mnist_kernel_times ROWS[,ROWS...] REPEATS
//
// For each shard size ROWS (images per device per step) it launches every
// kernel of one step of the MLP (784-256-128-10) with the shapes the trainer
// uses (examples/mnist_dp/device.h chooses them; this program calls the same
// Device methods), each between two events, REPEATS times, and the whole
// step (the trainer's compute_gradients) between two events and on the host
// clock.  It also times the two update kernels of --sync peer.  One line
// `RESULT {json}`: per kernel its name, grid, block, the GEMM sizes, and the
// median and minimum microseconds.
//
// An ordinary CUDA program: run it on a GPU as it is, or through rcuda (on a
// sim server with a cost model it measures the model).
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "device.h"
#include "network.h"

namespace {

struct Timed {
    std::string kernel;
    LaunchShape shape;
    int M = 0, N = 0, K = 0;  // GEMMs only
    std::function<void()> launch;
};

struct Stats {
    double median_us, min_us;
};

Stats stats(std::vector<double> us) {
    std::sort(us.begin(), us.end());
    return {us[us.size() / 2], us.front()};
}

// Event-timed repeats of `work` (after two untimed runs).
Stats time_events(const std::function<void()>& work, int repeats) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    work();
    work();
    CHECK(cudaDeviceSynchronize());
    std::vector<double> us;
    for (int r = 0; r < repeats; ++r) {
        CHECK(cudaEventRecord(start));
        work();
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        us.push_back(ms * 1000.0);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    return stats(us);
}

// Host-clock repeats of `work` followed by cudaDeviceSynchronize.
Stats time_host(const std::function<void()>& work, int repeats) {
    std::vector<double> us;
    for (int r = 0; r < repeats; ++r) {
        long long started = now_ns();
        work();
        CHECK(cudaDeviceSynchronize());
        us.push_back((now_ns() - started) / 1000.0);
    }
    return stats(us);
}

std::string dims(dim3 d) { return format("[%u, %u, %u]", d.x, d.y, d.z); }

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s ROWS[,ROWS...] REPEATS\n", argv[0]);
        return 2;
    }
    std::vector<int> shard_rows;
    for (char* item = std::strtok(argv[1], ","); item; item = std::strtok(nullptr, ",")) shard_rows.push_back(std::atoi(item));
    int repeats = std::atoi(argv[2]);
    if (shard_rows.empty() || repeats < 1) {
        std::fprintf(stderr, "ROWS must be positive numbers, REPEATS at least 1\n");
        return 2;
    }
    const int side = 28, dim = side * side, classes = 10;
    int capacity = *std::max_element(shard_rows.begin(), shard_rows.end());
    Device dev(0, false);
    dev.bind();
    Network net = Network::mlp(side, side, {256, 128}, classes);
    Workspace ws(dev, net, capacity);
    const long long P = net.param_count();
    std::vector<float> host_params = net.initial_parameters(1);
    float* params = dev.allocate<float>(P);
    float* grads = dev.allocate<float>(P + 2);
    float* velocity = dev.allocate<float>(P);
    float* other = dev.allocate<float>(P + 2);
    int* labels = dev.allocate<int>(capacity);
    float* row_stats = dev.allocate<float>(2 * (size_t)capacity);
    std::vector<uint8_t> pixels((size_t)capacity * dim), digits(capacity);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = (uint8_t)(i * 2654435761u >> 24);
    for (int i = 0; i < capacity; ++i) digits[i] = (uint8_t)(i % classes);
    uint8_t* images = dev.allocate<uint8_t>(pixels.size());
    uint8_t* image_labels = dev.allocate<uint8_t>(digits.size());
    dev.upload(images, pixels.data(), pixels.size());
    dev.upload(image_labels, digits.data(), digits.size());
    dev.upload(params, host_params.data(), P * sizeof(float));
    dev.zero(velocity, P * sizeof(float));
    dev.zero(other, (P + 2) * sizeof(float));

    std::string out = format("RESULT {\"program\": \"mnist_kernel_times\", \"device\": \"%s\", \"repeats\": %d, ",
                             dev.name().c_str(), repeats);
    std::string kernels, steps;
    for (int rows : shard_rows) {
        // One step's launches, in the trainer's order (Trainer::compute_gradients).
        std::vector<Timed> list;
        list.push_back({"gather_batch", elementwise_shape((long long)rows * dim), 0, 0, 0,
                        [&, rows] { dev.gather_batch(images, image_labels, nullptr, 0, rows, dim, ws.input(), labels); }});
        const auto& layers = net.layers();
        std::vector<int> width = {dim, 256, 128, classes};
        for (size_t l = 0; l < layers.size(); ++l) {
            int in = width[l], outw = width[l + 1];
            const float* w = params + net.offset(l);
            list.push_back({"gemm_nn", gemm_shape(rows, outw), rows, outw, in,
                            [&, l, rows, in, outw, w] { dev.gemm("nn", ws.act[l], w, ws.act[l + 1], rows, outw, in); }});
            list.push_back({"bias_activation", elementwise_shape((long long)rows * outw), 0, 0, 0,
                            [&, l, rows, in, outw, w] {
                                dev.bias_activation(ws.act[l + 1], w + (long long)in * outw, rows, outw, l + 1 < layers.size());
                            }});
        }
        list.push_back({"softmax_xent", elementwise_shape(rows), 0, 0, 0,
                        [&, rows] { dev.softmax_xent(ws.logits(), labels, rows, classes, ws.dlogits(), row_stats); }});
        list.push_back({"sum_columns", sum_columns_shape(2), 0, 0, 0,
                        [&, rows] { dev.sum_columns(row_stats, rows, 2, 1, grads + P); }});
        for (size_t l = layers.size(); l-- > 0;) {
            int in = width[l], outw = width[l + 1];
            const float* w = params + net.offset(l);
            float* g = grads + net.offset(l);
            if (l + 1 < layers.size())
                list.push_back({"relu_backward", elementwise_shape((long long)rows * outw), 0, 0, 0,
                                [&, l, rows, outw] { dev.relu_backward(ws.dact[l + 1], ws.act[l + 1], (long long)rows * outw); }});
            list.push_back({"gemm_tn", gemm_shape(in, outw), in, outw, rows,
                            [&, l, rows, in, outw, g] { dev.gemm("tn", ws.act[l], ws.dact[l + 1], g, in, outw, rows); }});
            list.push_back({"sum_columns", sum_columns_shape(outw), 0, 0, 0,
                            [&, l, rows, in, outw, g] { dev.sum_columns(ws.dact[l + 1], rows, outw, 1, g + (long long)in * outw); }});
            if (l > 0)
                list.push_back({"gemm_nt", gemm_shape(rows, in), rows, in, outw,
                                [&, l, rows, in, outw, w] { dev.gemm("nt", ws.dact[l + 1], w, ws.dact[l], rows, in, outw); }});
        }
        for (const Timed& t : list) {
            Stats s = time_events(t.launch, repeats);
            kernels += format("%s{\"kernel\": \"%s\", \"rows\": %d, \"grid\": %s, \"block\": %s, \"M\": %d, \"N\": %d, "
                              "\"K\": %d, \"median_us\": %.3f, \"min_us\": %.3f}",
                              kernels.empty() ? "" : ", ", t.kernel.c_str(), rows, dims(t.shape.grid).c_str(),
                              dims(t.shape.block).c_str(), t.M, t.N, t.K, s.median_us, s.min_us);
        }
        // The whole step as the trainer runs it (forward/backward from network.h).
        auto step = [&, rows] {
            dev.gather_batch(images, image_labels, nullptr, 0, rows, dim, ws.input(), labels);
            forward(dev, net, ws, params, rows);
            dev.softmax_xent(ws.logits(), labels, rows, classes, ws.dlogits(), row_stats);
            dev.sum_columns(row_stats, rows, 2, 1, grads + P);
            backward(dev, net, ws, params, rows, grads);
        };
        Stats events = time_events(step, repeats);
        Stats host = time_host(step, repeats);
        steps += format("%s{\"rows\": %d, \"launches\": %zu, \"event_median_us\": %.3f, \"event_min_us\": %.3f, "
                        "\"host_median_us\": %.3f, \"host_min_us\": %.3f}",
                        steps.empty() ? "" : ", ", rows, list.size(), events.median_us, events.min_us, host.median_us,
                        host.min_us);
    }
    // --sync peer's update kernels on GPU0 (once per step, whatever the shard).
    LaunchShape update = elementwise_shape(P);
    Stats add = time_events([&] { dev.add_into(grads, other, P + 2); }, repeats);
    Stats sgd = time_events([&] { dev.sgd_momentum(params, velocity, grads, P, 0.0f, 0.0f, 0.0f, 0.0f); }, repeats);
    for (auto [name, s] : {std::pair<const char*, Stats>{"add_into", add}, {"sgd_momentum", sgd}})
        kernels += format(", {\"kernel\": \"%s\", \"rows\": 0, \"grid\": %s, \"block\": %s, \"M\": 0, \"N\": 0, \"K\": 0, "
                          "\"median_us\": %.3f, \"min_us\": %.3f}",
                          name, dims(update.grid).c_str(), dims(update.block).c_str(), s.median_us, s.min_us);
    out += "\"parameters\": " + std::to_string(P) + ", \"kernels\": [" + kernels + "], \"steps\": [" + steps + "]}";
    std::printf("%s\n", out.c_str());
    dev.release_all();
    return 0;
}
