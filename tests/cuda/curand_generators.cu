// cuRAND's host API, as an ordinary program uses it: generators XORWOW,
// MRG32k3a, MTGP32, Philox4x32-10 and Sobol32; seed, offset and ordering;
// every distribution (and its double form) into device memory on the
// generator's stream, checked by its moments; repeatability; host generators
// (curandCreateGeneratorHost) giving what the device ones give, as NVIDIA's
// MersenneTwisterGP11213 sample checks; cuRAND's error statuses.
// Each section (the arguments; all without any) prints "ok NAME"; a failure
// prints "FAILED line N ...".
#include "library_check.h"

#include <curand.h>

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

int main(int argc, char **argv) {
    where_from("curand", (void *)&curandCreateGenerator);
    int version = 0;
    CURAND_CHECK(curandGetVersion(&version));
    REQUIRE(version >= 10000);
    const Section<> sections[] = {
        {"types", types}, {"distributions", distributions}, {"repeatable", repeatable},
        {"host_vs_device", host_vs_device}, {"quasi", quasi}, {"errors", errors},
    };
    run_sections(argc, argv, sections);
    printf("PASSED curand_generators\n");
    return 0;
}
