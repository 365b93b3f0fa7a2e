// A step of tiny kernels run as a CUDA graph against the same launches
// issued one by one, in the same run.
//
//   graph_step LAUNCHES STEPS WARMUP
//
// A step is LAUNCHES launches of a one-thread kernel into one stream, then
// cudaStreamSynchronize.  The step is captured once (cudaStreamBeginCapture
// ... cudaStreamEndCapture) and instantiated; then STEPS steps of each kind
// are timed one by one, interleaved (graph, plain, plain, graph, graph,
// plain, ...: each kind goes first in every other pair), after WARMUP
// untimed steps of each:
//
//   graph   cudaGraphLaunch + cudaStreamSynchronize
//   plain   LAUNCHES <<<>>> launches + cudaStreamSynchronize
//
// Each step's time is taken twice: when the last call that issues the work
// returned (issue) and when the synchronisation returned (step).
//
// The kernel folds its launch's index into a 32-bit state (state = state *
// 31 + i + 1), so the state after a step says whether every launch ran, in
// order: one step of each kind from a zeroed state must give the host's
// value, and after the timed steps the state must be the host's fold of
// every step run.  Prints a summary, then one RESULT line (JSON) with every
// step's times.  Exits 1 when a check fails.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>
#include "bench_common.h"

__global__ void graph_tick(unsigned *state, unsigned i)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) state[0] = state[0] * 31u + i + 1u;
}

static unsigned host_step(unsigned state, int launches)
{
    for (int i = 0; i < launches; i++) state = state * 31u + (unsigned)i + 1u;
    return state;
}

static void plain_launches(unsigned *state, int launches, cudaStream_t stream)
{
    for (int i = 0; i < launches; i++) graph_tick<<<1, 1, 0, stream>>>(state, (unsigned)i);
}

static unsigned read_state(unsigned *state, cudaStream_t stream)
{
    unsigned value = 0;
    CHECK(cudaMemcpyAsync(&value, state, sizeof value, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    return value;
}

static double percentile(std::vector<double> v, double p)
{
    std::sort(v.begin(), v.end());
    double at = p / 100.0 * (double)(v.size() - 1);
    size_t lo = (size_t)at, hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (at - (double)lo);
}

static void print_list(const char *name, const std::vector<double> &v)
{
    printf(", \"%s\": [", name);
    for (size_t i = 0; i < v.size(); i++) printf("%s%.9f", i ? ", " : "", v[i]);
    printf("]");
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s LAUNCHES STEPS WARMUP\n", argv[0]);
        return 2;
    }
    int launches = atoi(argv[1]), steps = atoi(argv[2]), warmup = atoi(argv[3]);
    if (launches < 1 || steps < 1 || warmup < 0) {
        fprintf(stderr, "LAUNCHES and STEPS must be positive, WARMUP not negative\n");
        return 2;
    }
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    unsigned *state = nullptr;
    CHECK(cudaMalloc(&state, sizeof(unsigned)));
    CHECK(cudaMemsetAsync(state, 0, sizeof(unsigned), stream));
    graph_tick<<<1, 1, 0, stream>>>(state, 0);  // the kernel's first launch registers it
    CHECK(cudaStreamSynchronize(stream));

    // The step, captured.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    long long began = now_ns();
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    plain_launches(state, launches, stream);
    CHECK(cudaStreamEndCapture(stream, &graph));
    long long captured = now_ns();
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    long long instantiated = now_ns();
    CHECK(cudaGraphUpload(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    long long uploaded = now_ns();
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));

    // One step of each kind from a zeroed state: the same as the host's fold.
    const unsigned expected = host_step(0, launches);
    CHECK(cudaMemsetAsync(state, 0, sizeof(unsigned), stream));
    CHECK(cudaGraphLaunch(exec, stream));
    unsigned graph_value = read_state(state, stream);
    CHECK(cudaMemsetAsync(state, 0, sizeof(unsigned), stream));
    plain_launches(state, launches, stream);
    unsigned plain_value = read_state(state, stream);
    bool same = graph_value == expected && plain_value == expected;

    // Warm-up, then the timed steps, interleaved.
    CHECK(cudaMemsetAsync(state, 0, sizeof(unsigned), stream));
    CHECK(cudaStreamSynchronize(stream));
    for (int s = 0; s < warmup; s++) {
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaStreamSynchronize(stream));
        plain_launches(state, launches, stream);
        CHECK(cudaStreamSynchronize(stream));
    }
    std::vector<double> graph_s, graph_issue_s, plain_s, plain_issue_s;
    for (int s = 0; s < steps; s++) {
        for (int k = 0; k < 2; k++) {
            bool as_graph = (k == 0) == (s % 2 == 0);  // graph first in every other pair
            long long started = now_ns();
            if (as_graph) CHECK(cudaGraphLaunch(exec, stream));
            else plain_launches(state, launches, stream);
            long long issued = now_ns();
            CHECK(cudaStreamSynchronize(stream));
            long long done = now_ns();
            (as_graph ? graph_s : plain_s).push_back((done - started) * 1e-9);
            (as_graph ? graph_issue_s : plain_issue_s).push_back((issued - started) * 1e-9);
        }
    }
    CHECK(cudaGetLastError());
    unsigned final_value = read_state(state, stream);
    unsigned final_expected = 0;
    for (int s = 0; s < 2 * (warmup + steps); s++) final_expected = host_step(final_expected, launches);
    bool all_ran = final_value == final_expected;

    double g50 = percentile(graph_s, 50), g90 = percentile(graph_s, 90);
    double p50 = percentile(plain_s, 50), p90 = percentile(plain_s, 90);
    fprintf(stderr, "step of %d launches, %d steps of each (median, p90):\n", launches, steps);
    fprintf(stderr, "  graph  %9.1f us %9.1f us  %12.0f launches/s\n", g50 * 1e6, g90 * 1e6, launches / g50);
    fprintf(stderr, "  plain  %9.1f us %9.1f us  %12.0f launches/s\n", p50 * 1e6, p90 * 1e6, launches / p50);
    fprintf(stderr, "  plain / graph: %.2fx; checks: one step %s, every step %s\n", p50 / g50,
            same ? "ok" : "MISMATCH", all_ran ? "ok" : "MISMATCH");

    printf("RESULT {\"launches\": %d, \"steps\": %d, \"warmup\": %d, \"nodes\": %zu, "
           "\"capture_s\": %.9f, \"instantiate_s\": %.9f, \"upload_s\": %.9f, "
           "\"expected_state\": %u, \"graph_state\": %u, \"plain_state\": %u, "
           "\"final_state\": %u, \"final_expected\": %u, \"same\": %s, \"all_ran\": %s, "
           "\"graph_median_s\": %.9f, \"graph_p90_s\": %.9f, \"plain_median_s\": %.9f, \"plain_p90_s\": %.9f",
           launches, steps, warmup, nodes, (captured - began) * 1e-9, (instantiated - captured) * 1e-9,
           (uploaded - instantiated) * 1e-9, expected, graph_value, plain_value, final_value, final_expected,
           same ? "true" : "false", all_ran ? "true" : "false", g50, g90, p50, p90);
    print_list("graph_s", graph_s);
    print_list("graph_issue_s", graph_issue_s);
    print_list("plain_s", plain_s);
    print_list("plain_issue_s", plain_issue_s);
    printf("}\n");

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaFree(state));
    CHECK(cudaStreamDestroy(stream));
    return same && all_ran ? 0 : 1;
}
