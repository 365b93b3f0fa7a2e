// cuRAND's host API, as an ordinary program uses it: generators XORWOW,
// MRG32k3a, MTGP32, Philox4x32-10 and Sobol32; seed, offset and ordering;
// every distribution (and its double form) into device memory on the
// generator's stream, checked by its moments; repeatability; host generators
// (curandCreateGeneratorHost) giving what the device ones give, as NVIDIA's
// MersenneTwisterGP11213 sample checks; cuRAND's error statuses.
// Each section (the arguments; all without any) prints "ok NAME"; a failure
// prints "FAILED line N ...".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>
#include <curand.h>
#include <dlfcn.h>

#include "check.h"

#define CURAND(call)                                                                      \
    do {                                                                                  \
        curandStatus_t s_ = (call);                                                       \
        if (s_ != CURAND_STATUS_SUCCESS) {                                                \
            printf("FAILED line %d: %s -> curandStatus %d\n", __LINE__, #call, (int)s_); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define EXPECT_RAND(call, code)                                                           \
    do {                                                                                  \
        curandStatus_t s_ = (call);                                                       \
        if (s_ != (code)) {                                                               \
            printf("FAILED line %d: %s -> curandStatus %d, expected %s\n", __LINE__, #call, \
                   (int)s_, #code);                                                       \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define WITHIN(value, want, tol)                                                          \
    do {                                                                                  \
        double v_ = (value), w_ = (want);                                                 \
        if (!(std::fabs(v_ - w_) <= (tol))) {                                             \
            printf("FAILED line %d: %s = %g, expected %g +- %g\n", __LINE__, #value, v_, w_, \
                   (double)(tol));                                                        \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

struct Kind {
    curandRngType_t type;
    const char *name;
};
static const Kind PSEUDO[] = {{CURAND_RNG_PSEUDO_XORWOW, "XORWOW"},
                              {CURAND_RNG_PSEUDO_MRG32K3A, "MRG32K3A"},
                              {CURAND_RNG_PSEUDO_MTGP32, "MTGP32"},
                              {CURAND_RNG_PSEUDO_PHILOX4_32_10, "PHILOX4_32_10"}};

struct Moments {
    double mean, var, min, max;
};

template <class T> static Moments moments(const std::vector<T> &v) {
    double sum = 0, sq = 0, lo = 1e300, hi = -1e300;
    for (T x : v) {
        sum += (double)x;
        lo = std::fmin(lo, (double)x);
        hi = std::fmax(hi, (double)x);
    }
    double mean = sum / v.size();
    for (T x : v) sq += ((double)x - mean) * ((double)x - mean);
    return {mean, sq / v.size(), lo, hi};
}

template <class T> static std::vector<T> from_device(const T *d, size_t n) {
    std::vector<T> host(n);
    CHECK(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}

static curandGenerator_t device_generator(curandRngType_t type, unsigned long long seed) {
    curandGenerator_t gen;
    CURAND(curandCreateGenerator(&gen, type));
    if (type < CURAND_RNG_QUASI_DEFAULT) CURAND(curandSetPseudoRandomGeneratorSeed(gen, seed));
    return gen;
}

// Every generator type: bits and uniform floats in (0, 1] with the uniform's moments.
static void types() {
    const size_t n = 1 << 16;
    unsigned int *bits;
    float *u;
    CHECK(cudaMalloc(&bits, n * sizeof(unsigned int)));
    CHECK(cudaMalloc(&u, n * sizeof(float)));
    for (const Kind &k : PSEUDO) {
        curandGenerator_t gen = device_generator(k.type, 1234ULL);
        CURAND(curandGenerate(gen, bits, n));
        CURAND(curandGenerateUniform(gen, u, n));
        CHECK(cudaDeviceSynchronize());
        auto b = from_device(bits, n);
        std::vector<double> scaled(n);
        for (size_t i = 0; i < n; i++) scaled[i] = b[i] / 4294967296.0;
        Moments mb = moments(scaled), mu = moments(from_device(u, n));
        printf("%s: bits mean %.4f, uniform mean %.4f var %.4f\n", k.name, mb.mean, mu.mean, mu.var);
        WITHIN(mb.mean, 0.5, 0.01);
        WITHIN(mu.mean, 0.5, 0.01);
        WITHIN(mu.var, 1.0 / 12, 0.003);
        REQUIRE(mu.min > 0 && mu.max <= 1);
        CURAND(curandDestroyGenerator(gen));
    }
    curandGenerator_t sobol = device_generator(CURAND_RNG_QUASI_SOBOL32, 0);
    CURAND(curandGenerateUniform(sobol, u, 4096));
    Moments ms = moments(from_device(u, 4096));
    WITHIN(ms.mean, 0.5, 1e-3);  // low discrepancy: far closer than random
    REQUIRE(ms.min > 0 && ms.max <= 1);
    CURAND(curandDestroyGenerator(sobol));
    CHECK(cudaFree(bits));
    CHECK(cudaFree(u));
}

// Every distribution and its double form on a stream of the program's.
static void distributions() {
    const size_t n = 1 << 17;
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    float *f;
    double *d;
    unsigned int *p;
    CHECK(cudaMalloc(&f, n * sizeof(float)));
    CHECK(cudaMalloc(&d, n * sizeof(double)));
    CHECK(cudaMalloc(&p, n * sizeof(unsigned int)));
    for (const Kind &k : PSEUDO) {
        curandGenerator_t gen = device_generator(k.type, 42ULL);
        CURAND(curandSetStream(gen, stream));

        CURAND(curandGenerateUniformDouble(gen, d, n));
        CHECK(cudaStreamSynchronize(stream));
        Moments m = moments(from_device(d, n));
        WITHIN(m.mean, 0.5, 0.01);
        WITHIN(m.var, 1.0 / 12, 0.003);
        REQUIRE(m.min > 0 && m.max <= 1);

        CURAND(curandGenerateNormal(gen, f, n, 2.0f, 3.0f));
        CHECK(cudaStreamSynchronize(stream));
        m = moments(from_device(f, n));
        WITHIN(m.mean, 2.0, 0.05);
        WITHIN(std::sqrt(m.var), 3.0, 0.05);

        CURAND(curandGenerateNormalDouble(gen, d, n, -1.0, 0.5));
        CHECK(cudaStreamSynchronize(stream));
        m = moments(from_device(d, n));
        WITHIN(m.mean, -1.0, 0.01);
        WITHIN(std::sqrt(m.var), 0.5, 0.01);

        CURAND(curandGenerateLogNormal(gen, f, n, 0.0f, 0.5f));  // mean exp(s^2/2)
        CHECK(cudaStreamSynchronize(stream));
        m = moments(from_device(f, n));
        WITHIN(m.mean, std::exp(0.125), 0.01);
        REQUIRE(m.min > 0);

        CURAND(curandGenerateLogNormalDouble(gen, d, n, 1.0, 0.25));
        CHECK(cudaStreamSynchronize(stream));
        m = moments(from_device(d, n));
        WITHIN(m.mean, std::exp(1.0 + 0.03125), 0.03);

        const double lambdas[] = {0.5, 5.5, 300.0};
        for (double lambda : lambdas) {
            CURAND(curandGeneratePoisson(gen, p, n, lambda));
            CHECK(cudaStreamSynchronize(stream));
            m = moments(from_device(p, n));
            WITHIN(m.mean, lambda, 0.02 * lambda + 0.01);
            WITHIN(m.var, lambda, 0.05 * lambda + 0.02);
        }
        CURAND(curandDestroyGenerator(gen));
    }
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(f));
    CHECK(cudaFree(d));
    CHECK(cudaFree(p));
}

static bool same(const std::vector<unsigned int> &a, const std::vector<unsigned int> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(unsigned int)) == 0;
}

// Same type, seed, offset and ordering: the same numbers; a new seed, an
// offset: others; setting the seed again restarts the sequence.
static void repeatable() {
    const size_t n = 4096;
    unsigned int *buf;
    CHECK(cudaMalloc(&buf, n * sizeof(unsigned int)));
    for (const Kind &k : PSEUDO) {
        curandGenerator_t a = device_generator(k.type, 5ULL), b = device_generator(k.type, 5ULL);
        CURAND(curandGenerate(a, buf, n));
        auto first = from_device(buf, n);
        CURAND(curandGenerate(b, buf, n));
        REQUIRE(same(first, from_device(buf, n)));
        CURAND(curandGenerate(a, buf, n));
        auto second = from_device(buf, n);
        REQUIRE(!same(first, second));  // the sequence goes on
        // A seed set again does not restart it: cuRAND goes on from the numbers made so far.
        CURAND(curandSetPseudoRandomGeneratorSeed(a, 5ULL));
        CURAND(curandGenerate(a, buf, n));
        auto third = from_device(buf, n);
        REQUIRE(!same(first, third) && !same(second, third));
        CURAND(curandGenerate(b, buf, n));
        REQUIRE(same(second, from_device(buf, n)));
        CURAND(curandGenerate(b, buf, n));
        REQUIRE(same(third, from_device(buf, n)));
        if (k.type != CURAND_RNG_PSEUDO_MTGP32) {  // the offset sets the place: 0 starts over
            CURAND(curandSetGeneratorOffset(a, 0ULL));
            CURAND(curandGenerate(a, buf, n));
            REQUIRE(same(first, from_device(buf, n)));
        } else {
            EXPECT_RAND(curandSetGeneratorOffset(a, 0ULL), CURAND_STATUS_TYPE_ERROR);
        }
        CURAND(curandSetPseudoRandomGeneratorSeed(b, 6ULL));
        CURAND(curandGenerate(b, buf, n));
        REQUIRE(!same(first, from_device(buf, n)));
        CURAND(curandDestroyGenerator(a));
        CURAND(curandDestroyGenerator(b));
        if (k.type == CURAND_RNG_PSEUDO_MTGP32) continue;  // MTGP32 takes no offset on every cuRAND

        a = device_generator(k.type, 5ULL);
        b = device_generator(k.type, 5ULL);
        CURAND(curandSetGeneratorOffset(a, 1000ULL));
        CURAND(curandSetGeneratorOffset(b, 1000ULL));
        CURAND(curandGenerate(a, buf, n));
        auto offset = from_device(buf, n);
        REQUIRE(!same(first, offset));
        CURAND(curandGenerate(b, buf, n));
        REQUIRE(same(offset, from_device(buf, n)));
        CURAND(curandDestroyGenerator(a));
        CURAND(curandDestroyGenerator(b));
    }
    // orderings: the same one twice gives the same numbers
    curandGenerator_t a = device_generator(CURAND_RNG_PSEUDO_XORWOW, 9ULL), b = device_generator(CURAND_RNG_PSEUDO_XORWOW, 9ULL);
    CURAND(curandSetGeneratorOrdering(a, CURAND_ORDERING_PSEUDO_LEGACY));
    CURAND(curandSetGeneratorOrdering(b, CURAND_ORDERING_PSEUDO_LEGACY));
    CURAND(curandGenerate(a, buf, n));
    auto legacy = from_device(buf, n);
    CURAND(curandGenerate(b, buf, n));
    REQUIRE(same(legacy, from_device(buf, n)));
    CURAND(curandSetGeneratorOrdering(a, CURAND_ORDERING_PSEUDO_BEST));
    CURAND(curandSetGeneratorOrdering(b, CURAND_ORDERING_PSEUDO_BEST));
    CURAND(curandGenerate(a, buf, n));
    auto best = from_device(buf, n);
    CURAND(curandGenerate(b, buf, n));
    REQUIRE(same(best, from_device(buf, n)));
    CURAND(curandDestroyGenerator(a));
    CURAND(curandDestroyGenerator(b));
    CHECK(cudaFree(buf));
}

// A host generator of a type and seed gives the device generator's numbers:
// bits exactly, floats within rounding (cuRAND's promise, NVIDIA's
// MersenneTwisterGP11213 sample's check: MTGP32, seed 777, uniform floats).
static void host_vs_device() {
    const size_t n = 240000;
    unsigned int *dbits;
    float *dfloat;
    CHECK(cudaMalloc(&dbits, n * sizeof(unsigned int)));
    CHECK(cudaMalloc(&dfloat, n * sizeof(float)));
    std::vector<unsigned int> hbits(n);
    std::vector<float> hfloat(n);
    const Kind all[] = {PSEUDO[0], PSEUDO[1], PSEUDO[2], PSEUDO[3], {CURAND_RNG_QUASI_SOBOL32, "SOBOL32"}};
    for (const Kind &k : all) {
        curandGenerator_t dev, host;
        CURAND(curandCreateGenerator(&dev, k.type));
        CURAND(curandCreateGeneratorHost(&host, k.type));
        if (k.type == CURAND_RNG_QUASI_SOBOL32) {
            CURAND(curandSetQuasiRandomGeneratorDimensions(dev, 4));
            CURAND(curandSetQuasiRandomGeneratorDimensions(host, 4));
        } else {
            CURAND(curandSetPseudoRandomGeneratorSeed(dev, 777ULL));
            CURAND(curandSetPseudoRandomGeneratorSeed(host, 777ULL));
        }
        CURAND(curandGenerateUniform(dev, dfloat, n));
        CURAND(curandGenerateUniform(host, hfloat.data(), n));  // into host memory
        auto dfl = from_device(dfloat, n);
        double diff = 0, sum = 0;
        for (size_t i = 0; i < n; i++) {
            diff += std::fabs(dfl[i] - hfloat[i]);
            sum += std::fabs(hfloat[i]);
        }
        printf("%s: host vs device uniform L1 %g\n", k.name, diff / sum);
        REQUIRE(diff / sum < 1e-6);
        CURAND(curandGenerate(dev, dbits, n));  // the sequences go on alike
        CURAND(curandGenerate(host, hbits.data(), n));
        REQUIRE(same(from_device(dbits, n), hbits));
        CURAND(curandGenerateNormal(dev, dfloat, n, 0.0f, 1.0f));
        CURAND(curandGenerateNormal(host, hfloat.data(), n, 0.0f, 1.0f));
        dfl = from_device(dfloat, n);
        double worst = 0;
        for (size_t i = 0; i < n; i++) worst = std::fmax(worst, std::fabs(dfl[i] - hfloat[i]));
        REQUIRE(worst < 1e-4);  // transcendental functions may differ in the last bits
        CURAND(curandDestroyGenerator(dev));
        CURAND(curandDestroyGenerator(host));
    }
    CHECK(cudaFree(dbits));
    CHECK(cudaFree(dfloat));
}

// Sobol32 in several dimensions: lengths in whole points, low discrepancy per
// dimension, normals by the inverse CDF (so odd lengths are fine).
static void quasi() {
    const int dims = 3;
    const size_t per = 1024, n = dims * per;
    curandGenerator_t gen;
    CURAND(curandCreateGenerator(&gen, CURAND_RNG_QUASI_DEFAULT));
    CURAND(curandSetQuasiRandomGeneratorDimensions(gen, dims));
    CURAND(curandSetGeneratorOrdering(gen, CURAND_ORDERING_QUASI_DEFAULT));
    EXPECT_RAND(curandSetPseudoRandomGeneratorSeed(gen, 1), CURAND_STATUS_TYPE_ERROR);
    EXPECT_RAND(curandSetGeneratorOrdering(gen, CURAND_ORDERING_PSEUDO_BEST), CURAND_STATUS_OUT_OF_RANGE);
    double *d;
    float *f;
    CHECK(cudaMalloc(&d, n * sizeof(double)));
    CHECK(cudaMalloc(&f, n * sizeof(float)));
    CURAND(curandGenerateUniformDouble(gen, d, n));
    auto u = from_device(d, n);
    for (int dim = 0; dim < dims; dim++) {  // dimension-major: each dimension's points together
        std::vector<double> one(u.begin() + dim * per, u.begin() + (dim + 1) * per);
        Moments m = moments(one);
        WITHIN(m.mean, 0.5, 2e-3);
        REQUIRE(m.min > 0 && m.max <= 1);
    }
    EXPECT_RAND(curandGenerateUniform(gen, f, n + 1), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    CURAND(curandGenerateNormal(gen, f, 3 * 999, 1.0f, 2.0f));  // odd, a multiple of 3
    CURAND(curandSetGeneratorOffset(gen, 0));
    CURAND(curandGenerateNormal(gen, f, n, 1.0f, 2.0f));
    Moments m = moments(from_device(f, n));
    WITHIN(m.mean, 1.0, 0.02);
    WITHIN(std::sqrt(m.var), 2.0, 0.05);
    CURAND(curandDestroyGenerator(gen));
    CHECK(cudaFree(d));
    CHECK(cudaFree(f));
}

// cuRAND's statuses for bad types, lengths, options and parameters.
static void errors() {
    curandGenerator_t gen;
    EXPECT_RAND(curandCreateGenerator(&gen, (curandRngType_t)7), CURAND_STATUS_TYPE_ERROR);
    gen = device_generator(CURAND_RNG_PSEUDO_PHILOX4_32_10, 3ULL);
    float *f;
    double *d;
    unsigned int *p;
    unsigned long long *ll;
    CHECK(cudaMalloc(&f, 64 * sizeof(float)));
    CHECK(cudaMalloc(&d, 64 * sizeof(double)));
    CHECK(cudaMalloc(&p, 64 * sizeof(unsigned int)));
    CHECK(cudaMalloc(&ll, 64 * sizeof(unsigned long long)));
    EXPECT_RAND(curandGenerateNormal(gen, f, 63, 0.0f, 1.0f), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    EXPECT_RAND(curandGenerateNormalDouble(gen, d, 63, 0.0, 1.0), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    EXPECT_RAND(curandGenerateLogNormal(gen, f, 1, 0.0f, 1.0f), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    EXPECT_RAND(curandGenerateLogNormalDouble(gen, d, 33, 0.0, 1.0), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    EXPECT_RAND(curandGeneratePoisson(gen, p, 64, 0.0), CURAND_STATUS_OUT_OF_RANGE);
    EXPECT_RAND(curandGeneratePoisson(gen, p, 64, -2.0), CURAND_STATUS_OUT_OF_RANGE);
    EXPECT_RAND(curandGenerateLongLong(gen, ll, 64), CURAND_STATUS_TYPE_ERROR);
    EXPECT_RAND(curandSetQuasiRandomGeneratorDimensions(gen, 2), CURAND_STATUS_TYPE_ERROR);
    EXPECT_RAND(curandSetGeneratorOrdering(gen, CURAND_ORDERING_QUASI_DEFAULT), CURAND_STATUS_OUT_OF_RANGE);
    CURAND(curandGenerateNormal(gen, f, 64, 0.0f, 1.0f));  // the generator still works
    CURAND(curandDestroyGenerator(gen));

    CURAND(curandCreateGenerator(&gen, CURAND_RNG_QUASI_SOBOL32));
    EXPECT_RAND(curandSetQuasiRandomGeneratorDimensions(gen, 0), CURAND_STATUS_OUT_OF_RANGE);
    EXPECT_RAND(curandSetQuasiRandomGeneratorDimensions(gen, 20001), CURAND_STATUS_OUT_OF_RANGE);
    CURAND(curandSetQuasiRandomGeneratorDimensions(gen, 5));
    EXPECT_RAND(curandGenerate(gen, p, 64), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    EXPECT_RAND(curandGeneratePoisson(gen, p, 64, 3.0), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    EXPECT_RAND(curandGenerateLongLong(gen, ll, 60), CURAND_STATUS_TYPE_ERROR);
    CURAND(curandGenerate(gen, p, 60));
    CURAND(curandDestroyGenerator(gen));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(f));
    CHECK(cudaFree(d));
    CHECK(cudaFree(p));
    CHECK(cudaFree(ll));
}

int main(int argc, char **argv) {
    Dl_info info;
    REQUIRE(dladdr((void *)&curandCreateGenerator, &info) && info.dli_fname);
    printf("curand from %s\n", info.dli_fname);
    int version = 0;
    CURAND(curandGetVersion(&version));
    REQUIRE(version >= 10000);
    struct { const char *name; void (*run)(); } sections[] = {
        {"types", types}, {"distributions", distributions}, {"repeatable", repeatable},
        {"host_vs_device", host_vs_device}, {"quasi", quasi}, {"errors", errors},
    };
    for (auto &section : sections) {
        bool chosen = argc == 1;
        for (int i = 1; i < argc; i++) chosen |= strcmp(argv[i], section.name) == 0;
        if (!chosen) continue;
        section.run();
        printf("ok %s\n", section.name);
    }
    printf("PASSED curand_generators\n");
    return 0;
}
