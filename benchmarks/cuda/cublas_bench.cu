// cuBLAS through rcuda: what a library call costs, small and large.
//
//   cublas_bench ROUNDS SMALL_CALLS DOT_CALLS DOT_LENGTH LARGE_CALLS SMALL_SIZES LARGE_SIZES
//
// SMALL_SIZES and LARGE_SIZES are comma-separated square sizes (32,128 and
// 1024,2048).  Each round times, one after the other:
//   small    per small size n: SMALL_CALLS cublasSgemm of n x n matrices
//            (C = A B) issued back to back, then one cudaDeviceSynchronize:
//            the issuing loop alone and the whole until synchronised
//   dot      DOT_CALLS cublasSdot of DOT_LENGTH floats in host pointer mode:
//            each waits for its result (a round trip)
//   meminfo  DOT_CALLS cudaMemGetInfo: a bare round trip, for comparison
//   large    per large size n: LARGE_CALLS cublasSgemm of n x n, then one
//            cudaDeviceSynchronize
// Before timing, every size runs once and its result is checked against a
// host reference (every element of the small ones, 64 sampled elements of
// the large ones), and so is one dot.  Prints one RESULT line (JSON) with
// the seconds of each round and the largest relative error seen.
#include <cublas_v2.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"

#define CUBLAS_CHECK(call)                                                                   \
    do {                                                                                     \
        cublasStatus_t st_ = (call);                                                         \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                  \
            fprintf(stderr, "FAILED %s: cublas status %d\n", #call, (int)st_);               \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static std::vector<int> parse_sizes(const char *text) {
    std::vector<int> sizes;
    for (const char *p = text; *p;) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n <= 0 || n > 16384) {
            fprintf(stderr, "bad size list %s\n", text);
            exit(2);
        }
        sizes.push_back((int)n);
        p = *end == ',' ? end + 1 : end;
    }
    return sizes;
}

// Deterministic values in [-1, 1).
static unsigned seed_ = 12345;
static float next_value() {
    seed_ = seed_ * 1103515245u + 12345u;
    return ((seed_ >> 8) & 0xffff) / 32768.0f - 1.0f;
}

struct Gemm {
    int n;
    std::vector<float> a, b;  // host copies, column-major
    float *da, *db, *dc;
};

static Gemm make_gemm(int n) {
    Gemm g;
    g.n = n;
    size_t count = (size_t)n * n;
    g.a.resize(count);
    g.b.resize(count);
    for (auto &x : g.a) x = next_value();
    for (auto &x : g.b) x = next_value();
    CHECK(cudaMalloc(&g.da, count * sizeof(float)));
    CHECK(cudaMalloc(&g.db, count * sizeof(float)));
    CHECK(cudaMalloc(&g.dc, count * sizeof(float)));
    CHECK(cudaMemcpy(g.da, g.a.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(g.db, g.b.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(g.dc, 0, count * sizeof(float)));
    return g;
}

static void sgemm(cublasHandle_t handle, const Gemm &g) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, g.n, g.n, g.n, &one, g.da, g.n, g.db, g.n, &zero,
                             g.dc, g.n));
}

// C = A B has been computed: compare `samples` elements (0: all) with a
// double-precision host reference; returns the largest error relative to
// the sum of |a_ik b_kj| (the scale of a float's rounding in that element).
static double check_gemm(const Gemm &g, int samples) {
    size_t count = (size_t)g.n * g.n;
    std::vector<float> c(count);
    CHECK(cudaMemcpy(c.data(), g.dc, count * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0;
    int checks = samples ? samples : (int)count;
    for (int s = 0; s < checks; s++) {
        size_t index = samples ? ((size_t)s * 2654435761u) % count : (size_t)s;
        int i = (int)(index % g.n), j = (int)(index / g.n);
        double exact = 0, scale = 0;
        for (int k = 0; k < g.n; k++) {
            double term = (double)g.a[(size_t)k * g.n + i] * g.b[(size_t)j * g.n + k];
            exact += term;
            scale += fabs(term);
        }
        double error = fabs(c[index] - exact) / (scale > 0 ? scale : 1);
        if (error > worst) worst = error;
    }
    return worst;
}

static void print_list(const char *name, const std::vector<double> &values, bool comma = true) {
    printf("\"%s\": [", name);
    for (size_t i = 0; i < values.size(); i++) printf("%s%.9f", i ? ", " : "", values[i]);
    printf("]%s", comma ? ", " : "");
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s ROUNDS SMALL_CALLS DOT_CALLS DOT_LENGTH LARGE_CALLS SMALL_SIZES LARGE_SIZES\n",
                argv[0]);
        return 2;
    }
    int rounds = atoi(argv[1]);
    long small_calls = atol(argv[2]), dot_calls = atol(argv[3]), dot_length = atol(argv[4]),
         large_calls = atol(argv[5]);
    std::vector<int> small_sizes = parse_sizes(argv[6]), large_sizes = parse_sizes(argv[7]);
    if (rounds < 1 || small_calls < 1 || dot_calls < 1 || dot_length < 1 || large_calls < 1) return 2;

    cublasHandle_t handle;
    CUBLAS_CHECK(cublasCreate(&handle));
    CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
    std::vector<Gemm> small, large;
    for (int n : small_sizes) small.push_back(make_gemm(n));
    for (int n : large_sizes) large.push_back(make_gemm(n));
    std::vector<float> x(dot_length), y(dot_length);
    for (auto &v : x) v = next_value();
    for (auto &v : y) v = next_value();
    float *dx, *dy;
    CHECK(cudaMalloc(&dx, dot_length * sizeof(float)));
    CHECK(cudaMalloc(&dy, dot_length * sizeof(float)));
    CHECK(cudaMemcpy(dx, x.data(), dot_length * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, y.data(), dot_length * sizeof(float), cudaMemcpyHostToDevice));

    // Warm-up and checks: every size once, one dot, a few round trips.
    double worst = 0;
    for (auto &g : small) {
        sgemm(handle, g);
        CHECK(cudaDeviceSynchronize());
        worst = fmax(worst, check_gemm(g, 0));
    }
    for (auto &g : large) {
        sgemm(handle, g);
        CHECK(cudaDeviceSynchronize());
        worst = fmax(worst, check_gemm(g, 64));
    }
    float dot = 0;
    CUBLAS_CHECK(cublasSdot(handle, (int)dot_length, dx, 1, dy, 1, &dot));
    double exact = 0, scale = 0;
    for (long i = 0; i < dot_length; i++) exact += (double)x[i] * y[i], scale += fabs((double)x[i] * y[i]);
    worst = fmax(worst, fabs(dot - exact) / (scale > 0 ? scale : 1));
    if (!(worst < 1e-5)) {
        fprintf(stderr, "FAILED: a result is wrong (largest relative error %g)\n", worst);
        return 1;
    }
    size_t free_bytes, total_bytes;
    for (int i = 0; i < 100; i++) CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));

    std::vector<std::vector<double>> small_issue(small.size()), small_total(small.size()), large_s(large.size());
    std::vector<double> dot_s, meminfo_s;
    for (int r = 0; r < rounds; r++) {
        for (size_t s = 0; s < small.size(); s++) {
            long long t0 = now_ns();
            for (long i = 0; i < small_calls; i++) sgemm(handle, small[s]);
            long long t1 = now_ns();
            CHECK(cudaDeviceSynchronize());
            long long t2 = now_ns();
            small_issue[s].push_back((t1 - t0) * 1e-9);
            small_total[s].push_back((t2 - t0) * 1e-9);
        }
        long long t0 = now_ns();
        for (long i = 0; i < dot_calls; i++) CUBLAS_CHECK(cublasSdot(handle, (int)dot_length, dx, 1, dy, 1, &dot));
        long long t1 = now_ns();
        for (long i = 0; i < dot_calls; i++) CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        long long t2 = now_ns();
        dot_s.push_back((t1 - t0) * 1e-9);
        meminfo_s.push_back((t2 - t1) * 1e-9);
        for (size_t s = 0; s < large.size(); s++) {
            long long t3 = now_ns();
            for (long i = 0; i < large_calls; i++) sgemm(handle, large[s]);
            CHECK(cudaDeviceSynchronize());
            large_s[s].push_back((now_ns() - t3) * 1e-9);
        }
    }

    printf("RESULT {\"rounds\": %d, \"small_calls\": %ld, \"dot_calls\": %ld, \"dot_length\": %ld, "
           "\"large_calls\": %ld, \"max_relative_error\": %.3g, ",
           rounds, small_calls, dot_calls, dot_length, large_calls, worst);
    for (size_t s = 0; s < small.size(); s++) {
        std::string name = "small_" + std::to_string(small[s].n);
        print_list((name + "_issue_s").c_str(), small_issue[s]);
        print_list((name + "_total_s").c_str(), small_total[s]);
    }
    for (size_t s = 0; s < large.size(); s++)
        print_list(("large_" + std::to_string(large[s].n) + "_s").c_str(), large_s[s]);
    print_list("dot_s", dot_s);
    print_list("meminfo_s", meminfo_s, false);
    printf("}\n");
    CUBLAS_CHECK(cublasDestroy(handle));
    return 0;
}
