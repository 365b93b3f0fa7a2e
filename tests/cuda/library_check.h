// What the test programs of NVIDIA's libraries (cublas_*.cu, cublaslt_matmul.cu,
// cufft_*.cu, curand_generators.cu) share, on top of check.h: library status
// checks, tolerances, deterministic values, host <-> device copies, the line
// naming where a library was loaded from, and the section runner.
//
// Output, as tests/program_paths.py and tests/nvidia_libraries.py read it:
// "<lib> from PATH" (where_from), "ok SECTION" after each section
// (run_sections), "FAILED line N: ..." on any failure (then exit 1); each
// program prints "PASSED <name>" itself at the end.
#pragma once
#include "check.h"

#include <dlfcn.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// ---- library statuses -------------------------------------------------------

// `got`, a library's status from `call`, must be `want`; else
// "FAILED line N: CALL -> KIND GOT, expected WANT" and exit.
template <class Status>
static void require_status(Status got, Status want, const char *kind, const char *call, const char *want_name,
                           int line) {
    if (got != want) {
        printf("FAILED line %d: %s -> %s %d, expected %s\n", line, call, kind, (int)got, want_name);
        exit(1);
    }
}

// Each library's pair: X_CHECK(call) (must succeed) and X_EXPECT(call, code).
// Each macro names `call` itself (so #call is the call as written).
#define CUBLAS_CHECK(call)                                                                          \
    require_status<cublasStatus_t>((call), CUBLAS_STATUS_SUCCESS, "cublas status", #call, "CUBLAS_STATUS_SUCCESS", \
                                   __LINE__)
#define CUBLAS_EXPECT(call, code) \
    require_status<cublasStatus_t>((call), (code), "cublas status", #call, #code, __LINE__)
#define CUFFT_CHECK(call) \
    require_status<cufftResult>((call), CUFFT_SUCCESS, "cufftResult", #call, "CUFFT_SUCCESS", __LINE__)
#define CUFFT_EXPECT(call, code) require_status<cufftResult>((call), (code), "cufftResult", #call, #code, __LINE__)
#define CURAND_CHECK(call) \
    require_status<curandStatus_t>((call), CURAND_STATUS_SUCCESS, "curandStatus", #call, "CURAND_STATUS_SUCCESS", \
                                   __LINE__)
#define CURAND_EXPECT(call, code) \
    require_status<curandStatus_t>((call), (code), "curandStatus", #call, #code, __LINE__)

// ---- tolerances -------------------------------------------------------------

// `got` within `tol` of `want`, relative to 1 + |want|.
#define NEAR(got, want, tol)                                                                     \
    do {                                                                                         \
        double g_ = (got), w_ = (want);                                                          \
        if (!(std::fabs(g_ - w_) <= (tol) * (1 + std::fabs(w_)))) {                              \
            printf("FAILED line %d: %s = %.10g, expected %.10g\n", __LINE__, #got, g_, w_);      \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

// `value` within `tol` of `want`, absolutely.
#define WITHIN(value, want, tol)                                                                 \
    do {                                                                                         \
        double v_ = (value), w_ = (want);                                                        \
        if (!(std::fabs(v_ - w_) <= (tol))) {                                                    \
            printf("FAILED line %d: %s = %g, expected %g +- %g\n", __LINE__, #value, v_, w_,     \
                   (double)(tol));                                                               \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

// An error measure `err` no larger than `tol` (NaN fails).
#define AT_MOST(err, tol)                                                                        \
    do {                                                                                         \
        double e_ = (err);                                                                       \
        if (!(e_ <= (tol))) {                                                                    \
            printf("FAILED line %d: %s = %g > %g\n", __LINE__, #err, e_, (double)(tol));         \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

// ---- deterministic values ---------------------------------------------------

// A small LCG: the same values on every run (a program picks its seed with
// seed_values before its sections run).
static unsigned value_seed_ = 12345;
static inline void seed_values(unsigned seed) { value_seed_ = seed; }

// The next value in [-1, 1).
static inline double next_value() {
    value_seed_ = value_seed_ * 1103515245u + 12345u;
    return ((value_seed_ >> 8) & 0xffff) / 32768.0 - 1.0;
}

// A value of T in [-1, 1) (both parts for std::complex, the real part first).
template <class T> struct RandomValue {
    static T make() { return T(next_value()); }
};
template <class R> struct RandomValue<std::complex<R>> {
    static std::complex<R> make() {
        R re = R(next_value());
        return std::complex<R>(re, R(next_value()));
    }
};
template <class T> static T random_value() { return RandomValue<T>::make(); }

template <class T> static std::vector<T> random_vector(size_t n) {
    std::vector<T> v(n);
    for (auto &x : v) x = random_value<T>();
    return v;
}

// ---- host <-> device --------------------------------------------------------

// A new device copy of `h` (cudaFree it).
template <class T> static T *to_device(const std::vector<T> &h) {
    T *d;
    CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

// The first `n` elements at `d`.
template <class T> static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> h(n);
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// ---- the program's frame ----------------------------------------------------

// Prints "<library> from PATH": the file that holds `function` (one of the
// library's), which the tests require to be rcuda's, not NVIDIA's.
static inline void where_from(const char *library, const void *function) {
    Dl_info info;
    REQUIRE(dladdr(function, &info) && info.dli_fname);
    printf("%s from %s\n", library, info.dli_fname);
}

// A section of a program: its name (an argument that picks it) and its
// function, which takes Args (a library handle, or nothing).
template <class... Args> struct Section {
    const char *name;
    void (*run)(Args...);
};

template <class T> struct NotDeduced { typedef T type; };

// Runs the sections named on the command line (all without any) in table
// order, each with `args`; after each, synchronises the device (so a
// section's queued work has finished and its errors show in it) and prints
// "ok NAME".
template <class... Args, size_t N>
static void run_sections(int argc, char **argv, const Section<Args...> (&sections)[N],
                         typename NotDeduced<Args>::type... args) {
    for (const Section<Args...> &s : sections) {
        bool wanted = argc < 2;
        for (int i = 1; i < argc; i++) wanted |= strcmp(argv[i], s.name) == 0;
        if (!wanted) continue;
        s.run(args...);
        CHECK(cudaDeviceSynchronize());
        printf("ok %s\n", s.name);
        fflush(stdout);
    }
}
