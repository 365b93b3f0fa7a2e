// cuRAND's host API, as an ordinary program uses it: generators XORWOW,
// MRG32k3a, MTGP32, Philox4x32-10 and Sobol32; seed, offset and ordering;
// every distribution (and its double form) into device memory on the
// generator's stream, checked by its moments; repeatability; host generators
// (curandCreateGeneratorHost) giving what the device ones give, as NVIDIA's
// MersenneTwisterGP11213 sample checks; cuRAND's error statuses.  Then the
// rest of the host API: the Joe-Kuo direction vectors and scramble constants
// (host tables) and the scrambled and 64-bit Sobol' generators that use them;
// curandGeneratePoissonMethod; Poisson distributions in device memory drawn
// from by a kernel with the device API's curand_discrete.
// Each section (the arguments; all without any) prints "ok NAME"; a failure
// prints "FAILED line N ...".
#include "library_check.h"

#include <curand.h>
#include <curand_kernel.h>

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

static curandGenerator_t device_generator(curandRngType_t type, unsigned long long seed) {
    curandGenerator_t gen;
    CURAND_CHECK(curandCreateGenerator(&gen, type));
    if (type < CURAND_RNG_QUASI_DEFAULT) CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(gen, seed));
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
        CURAND_CHECK(curandGenerate(gen, bits, n));
        CURAND_CHECK(curandGenerateUniform(gen, u, n));
        CHECK(cudaDeviceSynchronize());
        auto b = to_host(bits, n);
        std::vector<double> scaled(n);
        for (size_t i = 0; i < n; i++) scaled[i] = b[i] / 4294967296.0;
        Moments mb = moments(scaled), mu = moments(to_host(u, n));
        printf("%s: bits mean %.4f, uniform mean %.4f var %.4f\n", k.name, mb.mean, mu.mean, mu.var);
        WITHIN(mb.mean, 0.5, 0.01);
        WITHIN(mu.mean, 0.5, 0.01);
        WITHIN(mu.var, 1.0 / 12, 0.003);
        REQUIRE(mu.min > 0 && mu.max <= 1);
        CURAND_CHECK(curandDestroyGenerator(gen));
    }
    curandGenerator_t sobol = device_generator(CURAND_RNG_QUASI_SOBOL32, 0);
    CURAND_CHECK(curandGenerateUniform(sobol, u, 4096));
    Moments ms = moments(to_host(u, 4096));
    WITHIN(ms.mean, 0.5, 1e-3);  // low discrepancy: far closer than random
    REQUIRE(ms.min > 0 && ms.max <= 1);
    CURAND_CHECK(curandDestroyGenerator(sobol));
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
        CURAND_CHECK(curandSetStream(gen, stream));

        CURAND_CHECK(curandGenerateUniformDouble(gen, d, n));
        CHECK(cudaStreamSynchronize(stream));
        Moments m = moments(to_host(d, n));
        WITHIN(m.mean, 0.5, 0.01);
        WITHIN(m.var, 1.0 / 12, 0.003);
        REQUIRE(m.min > 0 && m.max <= 1);

        CURAND_CHECK(curandGenerateNormal(gen, f, n, 2.0f, 3.0f));
        CHECK(cudaStreamSynchronize(stream));
        m = moments(to_host(f, n));
        WITHIN(m.mean, 2.0, 0.05);
        WITHIN(std::sqrt(m.var), 3.0, 0.05);

        CURAND_CHECK(curandGenerateNormalDouble(gen, d, n, -1.0, 0.5));
        CHECK(cudaStreamSynchronize(stream));
        m = moments(to_host(d, n));
        WITHIN(m.mean, -1.0, 0.01);
        WITHIN(std::sqrt(m.var), 0.5, 0.01);

        CURAND_CHECK(curandGenerateLogNormal(gen, f, n, 0.0f, 0.5f));  // mean exp(s^2/2)
        CHECK(cudaStreamSynchronize(stream));
        m = moments(to_host(f, n));
        WITHIN(m.mean, std::exp(0.125), 0.01);
        REQUIRE(m.min > 0);

        CURAND_CHECK(curandGenerateLogNormalDouble(gen, d, n, 1.0, 0.25));
        CHECK(cudaStreamSynchronize(stream));
        m = moments(to_host(d, n));
        WITHIN(m.mean, std::exp(1.0 + 0.03125), 0.03);

        const double lambdas[] = {0.5, 5.5, 300.0};
        for (double lambda : lambdas) {
            CURAND_CHECK(curandGeneratePoisson(gen, p, n, lambda));
            CHECK(cudaStreamSynchronize(stream));
            m = moments(to_host(p, n));
            WITHIN(m.mean, lambda, 0.02 * lambda + 0.01);
            WITHIN(m.var, lambda, 0.05 * lambda + 0.02);
        }
        CURAND_CHECK(curandDestroyGenerator(gen));
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
        CURAND_CHECK(curandGenerate(a, buf, n));
        auto first = to_host(buf, n);
        CURAND_CHECK(curandGenerate(b, buf, n));
        REQUIRE(same(first, to_host(buf, n)));
        CURAND_CHECK(curandGenerate(a, buf, n));
        auto second = to_host(buf, n);
        REQUIRE(!same(first, second));  // the sequence goes on
        // A seed set again does not restart it: cuRAND goes on from the numbers made so far.
        CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(a, 5ULL));
        CURAND_CHECK(curandGenerate(a, buf, n));
        auto third = to_host(buf, n);
        REQUIRE(!same(first, third) && !same(second, third));
        CURAND_CHECK(curandGenerate(b, buf, n));
        REQUIRE(same(second, to_host(buf, n)));
        CURAND_CHECK(curandGenerate(b, buf, n));
        REQUIRE(same(third, to_host(buf, n)));
        if (k.type != CURAND_RNG_PSEUDO_MTGP32) {  // the offset sets the place: 0 starts over
            CURAND_CHECK(curandSetGeneratorOffset(a, 0ULL));
            CURAND_CHECK(curandGenerate(a, buf, n));
            REQUIRE(same(first, to_host(buf, n)));
        } else {
            CURAND_EXPECT(curandSetGeneratorOffset(a, 0ULL), CURAND_STATUS_TYPE_ERROR);
        }
        CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(b, 6ULL));
        CURAND_CHECK(curandGenerate(b, buf, n));
        REQUIRE(!same(first, to_host(buf, n)));
        CURAND_CHECK(curandDestroyGenerator(a));
        CURAND_CHECK(curandDestroyGenerator(b));
        if (k.type == CURAND_RNG_PSEUDO_MTGP32) continue;  // MTGP32 takes no offset on every cuRAND

        a = device_generator(k.type, 5ULL);
        b = device_generator(k.type, 5ULL);
        CURAND_CHECK(curandSetGeneratorOffset(a, 1000ULL));
        CURAND_CHECK(curandSetGeneratorOffset(b, 1000ULL));
        CURAND_CHECK(curandGenerate(a, buf, n));
        auto offset = to_host(buf, n);
        REQUIRE(!same(first, offset));
        CURAND_CHECK(curandGenerate(b, buf, n));
        REQUIRE(same(offset, to_host(buf, n)));
        CURAND_CHECK(curandDestroyGenerator(a));
        CURAND_CHECK(curandDestroyGenerator(b));
    }
    // orderings: the same one twice gives the same numbers
    curandGenerator_t a = device_generator(CURAND_RNG_PSEUDO_XORWOW, 9ULL), b = device_generator(CURAND_RNG_PSEUDO_XORWOW, 9ULL);
    CURAND_CHECK(curandSetGeneratorOrdering(a, CURAND_ORDERING_PSEUDO_LEGACY));
    CURAND_CHECK(curandSetGeneratorOrdering(b, CURAND_ORDERING_PSEUDO_LEGACY));
    CURAND_CHECK(curandGenerate(a, buf, n));
    auto legacy = to_host(buf, n);
    CURAND_CHECK(curandGenerate(b, buf, n));
    REQUIRE(same(legacy, to_host(buf, n)));
    CURAND_CHECK(curandSetGeneratorOrdering(a, CURAND_ORDERING_PSEUDO_BEST));
    CURAND_CHECK(curandSetGeneratorOrdering(b, CURAND_ORDERING_PSEUDO_BEST));
    CURAND_CHECK(curandGenerate(a, buf, n));
    auto best = to_host(buf, n);
    CURAND_CHECK(curandGenerate(b, buf, n));
    REQUIRE(same(best, to_host(buf, n)));
    CURAND_CHECK(curandDestroyGenerator(a));
    CURAND_CHECK(curandDestroyGenerator(b));
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
        CURAND_CHECK(curandCreateGenerator(&dev, k.type));
        CURAND_CHECK(curandCreateGeneratorHost(&host, k.type));
        if (k.type == CURAND_RNG_QUASI_SOBOL32) {
            CURAND_CHECK(curandSetQuasiRandomGeneratorDimensions(dev, 4));
            CURAND_CHECK(curandSetQuasiRandomGeneratorDimensions(host, 4));
        } else {
            CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(dev, 777ULL));
            CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(host, 777ULL));
        }
        CURAND_CHECK(curandGenerateUniform(dev, dfloat, n));
        CURAND_CHECK(curandGenerateUniform(host, hfloat.data(), n));  // into host memory
        auto dfl = to_host(dfloat, n);
        double diff = 0, sum = 0;
        for (size_t i = 0; i < n; i++) {
            diff += std::fabs(dfl[i] - hfloat[i]);
            sum += std::fabs(hfloat[i]);
        }
        printf("%s: host vs device uniform L1 %g\n", k.name, diff / sum);
        REQUIRE(diff / sum < 1e-6);
        CURAND_CHECK(curandGenerate(dev, dbits, n));  // the sequences go on alike
        CURAND_CHECK(curandGenerate(host, hbits.data(), n));
        REQUIRE(same(to_host(dbits, n), hbits));
        CURAND_CHECK(curandGenerateNormal(dev, dfloat, n, 0.0f, 1.0f));
        CURAND_CHECK(curandGenerateNormal(host, hfloat.data(), n, 0.0f, 1.0f));
        dfl = to_host(dfloat, n);
        double worst = 0;
        for (size_t i = 0; i < n; i++) worst = std::fmax(worst, std::fabs(dfl[i] - hfloat[i]));
        REQUIRE(worst < 1e-4);  // transcendental functions may differ in the last bits
        CURAND_CHECK(curandDestroyGenerator(dev));
        CURAND_CHECK(curandDestroyGenerator(host));
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
    CURAND_CHECK(curandCreateGenerator(&gen, CURAND_RNG_QUASI_DEFAULT));
    CURAND_CHECK(curandSetQuasiRandomGeneratorDimensions(gen, dims));
    CURAND_CHECK(curandSetGeneratorOrdering(gen, CURAND_ORDERING_QUASI_DEFAULT));
    CURAND_EXPECT(curandSetPseudoRandomGeneratorSeed(gen, 1), CURAND_STATUS_TYPE_ERROR);
    CURAND_EXPECT(curandSetGeneratorOrdering(gen, CURAND_ORDERING_PSEUDO_BEST), CURAND_STATUS_OUT_OF_RANGE);
    double *d;
    float *f;
    CHECK(cudaMalloc(&d, n * sizeof(double)));
    CHECK(cudaMalloc(&f, n * sizeof(float)));
    CURAND_CHECK(curandGenerateUniformDouble(gen, d, n));
    auto u = to_host(d, n);
    for (int dim = 0; dim < dims; dim++) {  // dimension-major: each dimension's points together
        std::vector<double> one(u.begin() + dim * per, u.begin() + (dim + 1) * per);
        Moments m = moments(one);
        WITHIN(m.mean, 0.5, 2e-3);
        REQUIRE(m.min > 0 && m.max <= 1);
    }
    CURAND_EXPECT(curandGenerateUniform(gen, f, n + 1), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    CURAND_CHECK(curandGenerateNormal(gen, f, 3 * 999, 1.0f, 2.0f));  // odd, a multiple of 3
    CURAND_CHECK(curandSetGeneratorOffset(gen, 0));
    CURAND_CHECK(curandGenerateNormal(gen, f, n, 1.0f, 2.0f));
    Moments m = moments(to_host(f, n));
    WITHIN(m.mean, 1.0, 0.02);
    WITHIN(std::sqrt(m.var), 2.0, 0.05);
    CURAND_CHECK(curandDestroyGenerator(gen));
    CHECK(cudaFree(d));
    CHECK(cudaFree(f));
}

// cuRAND's statuses for bad types, lengths, options and parameters.
static void errors() {
    curandGenerator_t gen;
    CURAND_EXPECT(curandCreateGenerator(&gen, (curandRngType_t)7), CURAND_STATUS_TYPE_ERROR);
    gen = device_generator(CURAND_RNG_PSEUDO_PHILOX4_32_10, 3ULL);
    float *f;
    double *d;
    unsigned int *p;
    unsigned long long *ll;
    CHECK(cudaMalloc(&f, 64 * sizeof(float)));
    CHECK(cudaMalloc(&d, 64 * sizeof(double)));
    CHECK(cudaMalloc(&p, 64 * sizeof(unsigned int)));
    CHECK(cudaMalloc(&ll, 64 * sizeof(unsigned long long)));
    CURAND_EXPECT(curandGenerateNormal(gen, f, 63, 0.0f, 1.0f), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    CURAND_EXPECT(curandGenerateNormalDouble(gen, d, 63, 0.0, 1.0), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    CURAND_EXPECT(curandGenerateLogNormal(gen, f, 1, 0.0f, 1.0f), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    CURAND_EXPECT(curandGenerateLogNormalDouble(gen, d, 33, 0.0, 1.0), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    CURAND_EXPECT(curandGeneratePoisson(gen, p, 64, 0.0), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandGeneratePoisson(gen, p, 64, -2.0), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandGenerateLongLong(gen, ll, 64), CURAND_STATUS_TYPE_ERROR);
    CURAND_EXPECT(curandSetQuasiRandomGeneratorDimensions(gen, 2), CURAND_STATUS_TYPE_ERROR);
    CURAND_EXPECT(curandSetGeneratorOrdering(gen, CURAND_ORDERING_QUASI_DEFAULT), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_CHECK(curandGenerateNormal(gen, f, 64, 0.0f, 1.0f));  // the generator still works
    CURAND_CHECK(curandDestroyGenerator(gen));

    CURAND_CHECK(curandCreateGenerator(&gen, CURAND_RNG_QUASI_SOBOL32));
    CURAND_EXPECT(curandSetQuasiRandomGeneratorDimensions(gen, 0), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandSetQuasiRandomGeneratorDimensions(gen, 20001), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_CHECK(curandSetQuasiRandomGeneratorDimensions(gen, 5));
    CURAND_EXPECT(curandGenerate(gen, p, 64), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    CURAND_EXPECT(curandGeneratePoisson(gen, p, 64, 3.0), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    CURAND_EXPECT(curandGenerateLongLong(gen, ll, 60), CURAND_STATUS_TYPE_ERROR);
    CURAND_CHECK(curandGenerate(gen, p, 60));
    CURAND_CHECK(curandDestroyGenerator(gen));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(f));
    CHECK(cudaFree(d));
    CHECK(cudaFree(p));
    CHECK(cudaFree(ll));
}

// Significant bits of a direction vector: scrambling keeps a vector's leading bit.
template <class T> static int bit_length(T v) {
    int n = 0;
    for (; v; v >>= 1) n++;
    return n;
}

// curandGetDirectionVectors32/64 and curandGetScrambleConstants32/64: static
// host tables (the same pointer each time), Joe and Kuo's vectors as cuRAND
// has them, the 32-bit tables the 64-bit ones' upper halves, the scrambled
// vectors keeping each plain vector's leading bit; a wrong set is refused.
static void tables() {
    curandDirectionVectors32_t *v32, *s32, *again;
    curandDirectionVectors64_t *v64, *s64;
    unsigned int *c32;
    unsigned long long *c64;
    CURAND_CHECK(curandGetDirectionVectors32(&v32, CURAND_DIRECTION_VECTORS_32_JOEKUO6));
    CURAND_CHECK(curandGetDirectionVectors32(&again, CURAND_DIRECTION_VECTORS_32_JOEKUO6));
    REQUIRE(again == v32);
    CURAND_CHECK(curandGetDirectionVectors32(&s32, CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6));
    CURAND_CHECK(curandGetDirectionVectors64(&v64, CURAND_DIRECTION_VECTORS_64_JOEKUO6));
    CURAND_CHECK(curandGetDirectionVectors64(&s64, CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6));
    CURAND_CHECK(curandGetScrambleConstants32(&c32));
    CURAND_CHECK(curandGetScrambleConstants64(&c64));
    for (int j = 0; j < 32; j++) REQUIRE(v32[0][j] == 1u << (31 - j));  // dimension 0: van der Corput
    const unsigned int dim1[4] = {0x80000000u, 0xc0000000u, 0xa0000000u, 0xf0000000u};
    const unsigned int dim2[6] = {0x80000000u, 0xc0000000u, 0x60000000u, 0x90000000u, 0xe8000000u, 0x5c000000u};
    for (int j = 0; j < 4; j++) REQUIRE(v32[1][j] == dim1[j]);
    for (int j = 0; j < 6; j++) REQUIRE(v32[2][j] == dim2[j]);
    REQUIRE(v64[2][4] == 0xe800000000000000ULL);
    int differ = 0;
    for (int d = 0; d < 20000; d++) {
        REQUIRE((unsigned int)(c64[d] >> 32) == c32[d]);
        for (int j = 0; j < 32; j++) {
            REQUIRE((unsigned int)(v64[d][j] >> 32) == v32[d][j]);
            REQUIRE((unsigned int)(s64[d][j] >> 32) == s32[d][j]);
            REQUIRE(bit_length(s32[d][j]) == bit_length(v32[d][j]));
            differ += s32[d][j] != v32[d][j];
        }
        for (int j = 0; j < 64; j++) REQUIRE(bit_length(s64[d][j]) == bit_length(v64[d][j]));
    }
    REQUIRE(differ > 20000 * 16);  // scrambled: most vectors differ from the plain ones
    CURAND_EXPECT(curandGetDirectionVectors32(&v32, CURAND_DIRECTION_VECTORS_64_JOEKUO6), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandGetDirectionVectors64(&v64, CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6),
                  CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandGetDirectionVectors32(&v32, (curandDirectionVectorSet_t)7), CURAND_STATUS_OUT_OF_RANGE);
}

// The Sobol' point `i` of dimension `d` from direction vectors `v` (Gray-code order) and a scramble constant.
template <class T, class V> static T sobol_point(const V &v, T constant, unsigned i) {
    unsigned gray = i ^ (i >> 1);
    T x = constant;
    for (int b = 0; gray; b++, gray >>= 1)
        if (gray & 1) x ^= v[b];
    return x;
}

// The scrambled and 64-bit Sobol' generators follow the host tables (the
// scrambled ones start each dimension at its constant), device and host
// generators alike; each dimension's first 2^k points fall one in each
// interval of width 2^-k (low discrepancy survives scrambling); the 64-bit
// types take curandGenerateLongLong, not curandGenerate.
static void scrambled() {
    curandDirectionVectors32_t *v32, *s32;
    curandDirectionVectors64_t *v64, *s64;
    unsigned int *c32;
    unsigned long long *c64;
    CURAND_CHECK(curandGetDirectionVectors32(&v32, CURAND_DIRECTION_VECTORS_32_JOEKUO6));
    CURAND_CHECK(curandGetDirectionVectors32(&s32, CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6));
    CURAND_CHECK(curandGetDirectionVectors64(&v64, CURAND_DIRECTION_VECTORS_64_JOEKUO6));
    CURAND_CHECK(curandGetDirectionVectors64(&s64, CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6));
    CURAND_CHECK(curandGetScrambleConstants32(&c32));
    CURAND_CHECK(curandGetScrambleConstants64(&c64));
    const int dims = 4;
    const unsigned per = 1024;
    const size_t n = dims * per;
    unsigned int *bits;
    unsigned long long *wide;
    double *u;
    CHECK(cudaMalloc(&bits, n * sizeof(unsigned int)));
    CHECK(cudaMalloc(&wide, n * sizeof(unsigned long long)));
    CHECK(cudaMalloc(&u, n * sizeof(double)));
    const curandRngType_t types[] = {CURAND_RNG_QUASI_SOBOL32, CURAND_RNG_QUASI_SCRAMBLED_SOBOL32,
                                     CURAND_RNG_QUASI_SOBOL64, CURAND_RNG_QUASI_SCRAMBLED_SOBOL64};
    for (curandRngType_t type : types) {
        bool is64 = type == CURAND_RNG_QUASI_SOBOL64 || type == CURAND_RNG_QUASI_SCRAMBLED_SOBOL64;
        bool scrambled = type == CURAND_RNG_QUASI_SCRAMBLED_SOBOL32 || type == CURAND_RNG_QUASI_SCRAMBLED_SOBOL64;
        curandGenerator_t dev, host;
        CURAND_CHECK(curandCreateGenerator(&dev, type));
        CURAND_CHECK(curandCreateGeneratorHost(&host, type));
        CURAND_CHECK(curandSetQuasiRandomGeneratorDimensions(dev, dims));
        CURAND_CHECK(curandSetQuasiRandomGeneratorDimensions(host, dims));
        if (is64) {
            CURAND_EXPECT(curandGenerate(dev, bits, n), CURAND_STATUS_TYPE_ERROR);
            CURAND_CHECK(curandGenerateLongLong(dev, wide, n));
            std::vector<unsigned long long> h(n);
            CURAND_CHECK(curandGenerateLongLong(host, h.data(), n));
            auto got = to_host(wide, n);
            REQUIRE(memcmp(got.data(), h.data(), n * sizeof(unsigned long long)) == 0);
            for (int d = 0; d < dims; d++) {
                std::vector<bool> seen(per);
                for (unsigned i = 0; i < per; i++) {
                    unsigned long long want = sobol_point(scrambled ? s64[d] : v64[d], scrambled ? c64[d] : 0ULL, i);
                    REQUIRE(got[d * per + i] == want);
                    unsigned cell = (unsigned)(got[d * per + i] >> 54);  // the top 10 bits
                    REQUIRE(!seen[cell]);
                    seen[cell] = true;
                }
            }
        } else {
            CURAND_EXPECT(curandGenerateLongLong(dev, wide, n), CURAND_STATUS_TYPE_ERROR);
            CURAND_CHECK(curandGenerate(dev, bits, n));
            std::vector<unsigned int> h(n);
            CURAND_CHECK(curandGenerate(host, h.data(), n));
            auto got = to_host(bits, n);
            REQUIRE(same(got, h));
            for (int d = 0; d < dims; d++) {
                std::vector<bool> seen(per);
                for (unsigned i = 0; i < per; i++) {
                    unsigned want = sobol_point(scrambled ? s32[d] : v32[d], scrambled ? c32[d] : 0u, i);
                    REQUIRE(got[d * per + i] == want);
                    unsigned cell = got[d * per + i] >> 22;
                    REQUIRE(!seen[cell]);
                    seen[cell] = true;
                }
            }
        }
        // the sequences go on: uniform doubles of the next 1024 points, low discrepancy in every dimension
        CURAND_CHECK(curandGenerateUniformDouble(dev, u, n));
        auto ud = to_host(u, n);
        for (int d = 0; d < dims; d++) {
            std::vector<double> one(ud.begin() + d * per, ud.begin() + (d + 1) * per);
            Moments m = moments(one);
            WITHIN(m.mean, 0.5, 2e-3);
            REQUIRE(m.min > 0 && m.max <= 1);
        }
        CURAND_CHECK(curandDestroyGenerator(dev));
        CURAND_CHECK(curandDestroyGenerator(host));
    }
    CHECK(cudaFree(bits));
    CHECK(cudaFree(wide));
    CHECK(cudaFree(u));
}

// curandGeneratePoissonMethod, cuRAND's internal form: the methods it takes
// give Poisson numbers, the others are out of range; so is a lambda above 400,000.
static void poisson_method() {
    const size_t n = 1 << 17;
    curandGenerator_t host;
    CURAND_CHECK(curandCreateGeneratorHost(&host, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(host, 11ULL));
    std::vector<unsigned int> h(n);
    const curandMethod_t methods[] = {CURAND_CHOOSE_BEST, CURAND_DEVICE_API, CURAND_3RD};
    for (curandMethod_t method : methods) {
        CURAND_CHECK(curandGeneratePoissonMethod(host, h.data(), n, 7.5, method));
        Moments m = moments(h);
        WITHIN(m.mean, 7.5, 0.05);
        WITHIN(m.var, 7.5, 0.15);
    }
    CURAND_EXPECT(curandGeneratePoissonMethod(host, h.data(), n, 7.5, CURAND_ITR), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandGeneratePoissonMethod(host, h.data(), n, 7.5, CURAND_M2), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandGeneratePoissonMethod(host, h.data(), n, 0.0, CURAND_CHOOSE_BEST),
                  CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandGeneratePoisson(host, h.data(), n, 400001.0), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_CHECK(curandGeneratePoisson(host, h.data(), n, 400000.0));
    WITHIN(moments(h).mean, 400000.0, 20.0);
    CURAND_CHECK(curandDestroyGenerator(host));

    unsigned int *p;
    CHECK(cudaMalloc(&p, n * sizeof(unsigned int)));
    curandGenerator_t dev = device_generator(CURAND_RNG_PSEUDO_XORWOW, 12ULL);
    CURAND_CHECK(curandGeneratePoissonMethod(dev, p, n, 3.0, CURAND_CHOOSE_BEST));
    Moments m = moments(to_host(p, n));
    WITHIN(m.mean, 3.0, 0.03);
    WITHIN(m.var, 3.0, 0.08);
    CURAND_CHECK(curandDestroyGenerator(dev));
    CHECK(cudaFree(p));
}

// One draw per thread from a discrete distribution, with the device API (curand_discrete2.h).
__global__ void discrete_draws(curandDiscreteDistribution_t distribution, unsigned long long seed,
                               unsigned int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    curandStatePhilox4_32_10_t state;
    curand_init(seed, i, 0, &state);
    out[i] = curand_discrete(&state, distribution);
}

// curandCreatePoissonDistribution: a distribution in device memory that a
// kernel draws Poisson numbers from (the alias table, and above lambda 2000
// the normal approximation); curandDestroyDistribution; bad lambdas, NULL.
static void discrete() {
    const int n = 1 << 17;
    unsigned int *out;
    CHECK(cudaMalloc(&out, n * sizeof(unsigned int)));
    const double lambdas[] = {0.5, 5.5, 300.0, 3000.0};
    for (double lambda : lambdas) {
        curandDiscreteDistribution_t dist = nullptr;
        CURAND_CHECK(curandCreatePoissonDistribution(lambda, &dist));
        REQUIRE(dist != nullptr);
        cudaPointerAttributes attributes;
        CHECK(cudaPointerGetAttributes(&attributes, dist));
        REQUIRE(attributes.type == cudaMemoryTypeDevice);
        curandDiscreteDistribution_st header;
        CHECK(cudaMemcpy(&header, dist, sizeof header, cudaMemcpyDeviceToHost));
        if (lambda > 2000) {  // the normal approximation: its mean and standard deviation
            REQUIRE(header.method != CURAND_M2);
            NEAR(header.mean, lambda, 1e-3);
            NEAR(header.stddev, std::sqrt(lambda), 1e-2);
        } else {
            REQUIRE(header.method == CURAND_M2 && header.M2 != nullptr);
        }
        discrete_draws<<<n / 256, 256>>>(dist, 1234ULL + (unsigned long long)lambda, out, n);
        CHECK(cudaGetLastError());
        Moments m = moments(to_host(out, n));
        printf("Poisson(%g) by curand_discrete: mean %.4f var %.4f\n", lambda, m.mean, m.var);
        WITHIN(m.mean, lambda, 0.02 * std::sqrt(lambda) + 0.01);
        WITHIN(m.var, lambda, 0.04 * lambda + 0.02);
        CURAND_CHECK(curandDestroyDistribution(dist));
    }
    curandDiscreteDistribution_t dist;
    CURAND_EXPECT(curandCreatePoissonDistribution(0.0, &dist), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandCreatePoissonDistribution(-3.0, &dist), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandCreatePoissonDistribution(400001.0, &dist), CURAND_STATUS_OUT_OF_RANGE);
    CURAND_EXPECT(curandCreatePoissonDistribution(2.0, nullptr), CURAND_STATUS_NOT_INITIALIZED);
    CURAND_EXPECT(curandDestroyDistribution(nullptr), CURAND_STATUS_NOT_INITIALIZED);
    CHECK(cudaFree(out));
}

int main(int argc, char **argv) {
    where_from("curand", (void *)&curandCreateGenerator);
    int version = 0;
    CURAND_CHECK(curandGetVersion(&version));
    REQUIRE(version >= 10000);
    const Section<> sections[] = {
        {"types", types}, {"distributions", distributions}, {"repeatable", repeatable},
        {"host_vs_device", host_vs_device}, {"quasi", quasi}, {"errors", errors},
        {"tables", tables}, {"scrambled", scrambled}, {"poisson_method", poisson_method},
        {"discrete", discrete},
    };
    run_sections(argc, argv, sections);
    printf("PASSED curand_generators\n");
    return 0;
}
