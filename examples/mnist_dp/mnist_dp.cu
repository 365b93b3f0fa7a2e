// MNIST, trained data-parallel on every GPU of the machine.
//
// An ordinary multi-GPU CUDA program: one host thread per GPU, its own
// kernels (kernels.cuh; no cuBLAS), gradients averaged through the host
// (--sync host) or on GPU0 with cudaMemcpyPeer (--sync peer).  See trainer.h
// for how the work is split and why 1, 2 or 4 GPUs give the same loss curve.
//
//   nvcc -cudart shared -O2 -std=c++17 -o mnist_dp mnist_dp.cu [-DMNIST_DP_ZLIB -lz]
//   ./mnist_dp --data DIR [--model mlp|cnn] [--sync host|peer] [--epochs N] ...
//
// It prints a line per epoch and, at the end, one line "RESULT {json}" for
// scripts.  --cpu-check verifies the kernels on the CPU (no GPU needed);
// --emulate trains with the kernels' thread bodies run on the CPU.
#include <cuda_runtime.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "cpu_check.h"
#include "device.h"
#include "idx.h"
#include "network.h"
#include "trainer.h"

namespace {

const char* USAGE =
    "usage: mnist_dp [--data DIR] [--model mlp|cnn] [--sync host|peer] [--devices N] [--epochs N]\n"
    "                [--batch N] [--lr X] [--momentum X] [--weight-decay X] [--seed N]\n"
    "                [--train-limit N] [--test-limit N] [--static-split] [--warmup-steps N]\n"
    "                [--log-steps N] [--emulate] [--cpu-check]\n"
    "\n"
    "  --data DIR        MNIST IDX files: train-images-idx3-ubyte, train-labels-idx1-ubyte,\n"
    "                    t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (or .gz)\n"
    "                    (default: $XDG_CACHE_HOME/rcuda/mnist5k, or ~/.cache/rcuda/mnist5k)\n"
    "  --model           mlp (784-256-128-10, default) or cnn (LeNet-style)\n"
    "  --sync            host: average on the CPU (default); peer: on GPU0 with cudaMemcpyPeer\n"
    "  --devices N       use the first N GPUs (default: all)\n"
    "  --epochs N        default 10\n"
    "  --batch N         global batch, split among the GPUs (default 64)\n"
    "  --lr X            initial learning rate, cosine schedule (default 0.1)\n"
    "  --momentum X      default 0.9\n"
    "  --weight-decay X  default 0.0005\n"
    "  --seed N          initial weights and shuffling (default 1)\n"
    "  --train-limit N   use the first N training images (default: all)\n"
    "  --test-limit N    use the first N test images (default: all)\n"
    "  --static-split    equal shares instead of shares by measured throughput\n"
    "  --warmup-steps N  timed warm-up steps per GPU for the shares (default 5)\n"
    "  --log-steps N     print the training loss every N steps\n"
    "  --emulate         no GPU: run the kernels' thread bodies on the CPU (--devices N emulated GPUs)\n"
    "  --cpu-check       check every kernel on the CPU against reference loops, then exit\n";

struct Options {
    std::string data, model = "mlp";
    int devices = 0;  // 0: all
    int train_limit = 0, test_limit = 0;
    bool emulate = false, cpu_check = false;
    TrainOptions train;
};

[[noreturn]] void usage_error(const std::string& message) {
    std::fprintf(stderr, "mnist_dp: error: %s\n\n%s", message.c_str(), USAGE);
    std::exit(2);
}

long long parse_int(const std::string& flag, const char* text, long long low, long long high) {
    char* end = nullptr;
    errno = 0;
    long long value = std::strtoll(text, &end, 10);
    if (errno || end == text || *end || value < low || value > high)
        usage_error(format("%s needs a whole number from %lld to %lld, not '%s'", flag.c_str(), low, high, text));
    return value;
}

double parse_real(const std::string& flag, const char* text, double low, double high) {
    char* end = nullptr;
    errno = 0;
    double value = std::strtod(text, &end);
    if (errno || end == text || *end || !(value >= low && value <= high))
        usage_error(format("%s needs a number from %g to %g, not '%s'", flag.c_str(), low, high, text));
    return value;
}

std::string default_data_dir() {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    std::string cache = xdg && *xdg ? xdg : std::string(home ? home : ".") + "/.cache";
    return cache + "/rcuda/mnist5k";
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string flag = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) usage_error(flag + " needs a value");
            return argv[++i];
        };
        if (flag == "--help" || flag == "-h") {
            std::printf("%s", USAGE);
            std::exit(0);
        } else if (flag == "--data") o.data = value();
        else if (flag == "--model") o.model = value();
        else if (flag == "--sync") o.train.sync = value();
        else if (flag == "--devices") o.devices = (int)parse_int(flag, value(), 1, 1024);
        else if (flag == "--epochs") o.train.epochs = (int)parse_int(flag, value(), 1, 100000);
        else if (flag == "--batch") o.train.batch = (int)parse_int(flag, value(), 1, 1 << 20);
        else if (flag == "--lr") o.train.lr = parse_real(flag, value(), 0, 100);
        else if (flag == "--momentum") o.train.momentum = parse_real(flag, value(), 0, 1);
        else if (flag == "--weight-decay") o.train.weight_decay = parse_real(flag, value(), 0, 1);
        else if (flag == "--seed") o.train.seed = (uint64_t)parse_int(flag, value(), 0, (1LL << 62));
        else if (flag == "--train-limit") o.train_limit = (int)parse_int(flag, value(), 1, 1 << 30);
        else if (flag == "--test-limit") o.test_limit = (int)parse_int(flag, value(), 1, 1 << 30);
        else if (flag == "--static-split") o.train.static_split = true;
        else if (flag == "--warmup-steps") o.train.warmup_steps = (int)parse_int(flag, value(), 0, 1000);
        else if (flag == "--log-steps") o.train.log_steps = (int)parse_int(flag, value(), 0, 1 << 30);
        else if (flag == "--emulate") o.emulate = true;
        else if (flag == "--cpu-check") o.cpu_check = true;
        else usage_error("unknown option " + flag);
    }
    if (o.model != "mlp" && o.model != "cnn") usage_error("--model must be mlp or cnn, not " + o.model);
    if (o.train.sync != "host" && o.train.sync != "peer") usage_error("--sync must be host or peer, not " + o.train.sync);
    if (o.data.empty()) o.data = default_data_dir();
    return o;
}

std::string json_string(const std::string& text) {
    std::string out = "\"";
    for (char c : text) {
        if (c == '"' || c == '\\') out += '\\', out += c;
        else if ((unsigned char)c < 0x20) out += format("\\u%04x", c);
        else out += c;
    }
    return out + "\"";
}

template <class T, class F>
std::string json_list(const std::vector<T>& items, F&& item) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + item(items[i]);
    return out + "]";
}

std::string number(double value) { return format("%.6g", value); }

}  // namespace

int main(int argc, char** argv) {
    Options o = parse(argc, argv);
    if (o.cpu_check) return cpu_check::run_all();

    Dataset train, test;
    try {
        train = load_split(o.data, "train-images-idx3-ubyte", "train-labels-idx1-ubyte");
        test = load_split(o.data, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
    } catch (const IdxError& e) {
        std::fprintf(stderr, "mnist_dp: error: %s\n", e.what());
        return 2;
    }
    if (train.rows != test.rows || train.cols != test.cols)
        fail(format("training images are %dx%d, test images %dx%d", train.rows, train.cols, test.rows, test.cols));
    truncate(train, o.train_limit);
    truncate(test, o.test_limit);

    int available = 0;
    if (o.emulate) {
        available = o.devices ? o.devices : 1;
    } else {
        cudaError_t status = cudaGetDeviceCount(&available);
        if (status != cudaSuccess || available == 0)
            fail(format("no CUDA device: cudaGetDeviceCount says %s (%s); --emulate runs on the CPU",
                        status == cudaSuccess ? "0 devices" : cudaGetErrorString(status),
                        status == cudaSuccess ? "cudaSuccess" : cudaGetErrorName(status)));
    }
    if (o.devices > available) fail(format("--devices %d, but there are only %d", o.devices, available));
    int count = o.devices ? o.devices : available;
    std::vector<std::unique_ptr<Device>> devices;
    for (int d = 0; d < count; ++d) devices.push_back(std::make_unique<Device>(d, o.emulate));

    Network net = o.model == "cnn" ? Network::cnn(train.rows, train.cols, 10)
                                   : Network::mlp(train.rows, train.cols, {256, 128}, 10);
    std::printf("mnist_dp: %d %s:", count, o.emulate ? "emulated device(s)" : "GPU(s)");
    for (const auto& d : devices) std::printf(" [%s]", d->label().c_str());
    std::printf("\nmodel %s: %s; %lld parameters\n", net.kind().c_str(), net.describe().c_str(), net.param_count());
    std::printf("data: %d training and %d test images of %dx%d from %s\n", train.count, test.count, train.rows,
                train.cols, o.data.c_str());
    std::printf("sync %s; global batch %d; %d epochs; lr %g (cosine), momentum %g, weight decay %g; seed %llu\n",
                o.train.sync.c_str(), o.train.batch, o.train.epochs, o.train.lr, o.train.momentum,
                o.train.weight_decay, (unsigned long long)o.train.seed);
    std::fflush(stdout);

    Trainer trainer(net, train, test, devices, o.train);
    trainer.run();

    const auto& epochs = trainer.epochs();
    const EpochResult& last = epochs.back();
    double train_seconds = trainer.train_seconds();
    std::string result = "{";
    result += "\"program\":\"mnist_dp\",\"model\":" + json_string(net.kind());
    result += ",\"sync\":" + json_string(o.train.sync);
    result += ",\"devices\":" + std::to_string(count);
    result += ",\"device_names\":" + json_list(devices, [](const std::unique_ptr<Device>& d) { return json_string(d->name()); });
    result += ",\"emulated\":" + std::string(o.emulate ? "true" : "false");
    result += ",\"parameters\":" + std::to_string(net.param_count());
    result += ",\"epochs\":" + std::to_string(o.train.epochs);
    result += ",\"batch\":" + std::to_string(o.train.batch);
    result += ",\"steps\":" + std::to_string(trainer.steps());
    result += ",\"seed\":" + std::to_string(o.train.seed);
    result += ",\"train_samples\":" + std::to_string(train.count);
    result += ",\"test_samples\":" + std::to_string(test.count);
    result += ",\"test_accuracy\":" + number(last.test_accuracy);
    result += ",\"test_loss\":" + number(last.test_loss);
    result += ",\"train_loss\":" + number(last.train_loss);
    result += ",\"losses\":" + json_list(epochs, [](const EpochResult& e) { return format("%.6f", e.train_loss); });
    result += ",\"test_accuracies\":" + json_list(epochs, [](const EpochResult& e) { return number(e.test_accuracy); });
    result += ",\"epoch_seconds\":" + json_list(epochs, [](const EpochResult& e) { return number(e.seconds); });
    result += ",\"train_seconds\":" + number(train_seconds);
    result += ",\"train_cpu_seconds\":" + number(trainer.train_cpu_seconds());
    result += ",\"total_seconds\":" + number(trainer.total_seconds());
    result += ",\"samples_per_second\":" + number(train.count * (double)o.train.epochs / std::max(train_seconds, 1e-9));
    result += ",\"shares\":" + json_list(trainer.shares(), [](double s) { return number(s); });
    result += ",\"warmup_samples_per_second\":" + json_list(trainer.warmup_throughput(), [](double s) { return number(s); });
    result += ",\"busy_seconds\":" + json_list(trainer.busy_seconds(), [](double s) { return number(s); });
    result += "}";
    std::printf("final: test accuracy %.2f%%, %.1f s training on %d %s\n", 100 * last.test_accuracy, train_seconds,
                count, o.emulate ? "emulated device(s)" : "GPU(s)");
    std::printf("RESULT %s\n", result.c_str());
    return 0;
}
