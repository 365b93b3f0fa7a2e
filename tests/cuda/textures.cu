// CUDA arrays, texture and surface objects, pitched and 3-D copies: an
// ordinary CUDA runtime program (the same source passes on a GPU).  Each
// section prints "ok <name>"; the program ends with "PASSED textures".
//
// Sections are independent: a failing check prints "FAILED [<section>] line
// N: ..." and abandons that section only, so a failure points at one section
// (the others still run; the program then exits 1 without "PASSED").
//
// Expected texture values are computed on the host as the CUDA programming
// guide defines texture fetching: texel centres at i + 0.5; point sampling
// takes texel floor(x); linear filtering blends texels floor(x - 0.5) and the
// next with weights frac(x - 0.5) held in 9-bit fixed point (8 fractional
// bits); wrap and mirror apply to normalized coordinates only (with
// unnormalized ones they act as clamp).  The coordinates chosen for linear
// filtering are multiples of 1/64 texel, so the weights are exact and host and
// GPU agree; linear results are still compared with a tolerance of 1/256
// relative, point results exactly (1e-6 for normalized integer reads).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// ---------------------------------------------------------------- checks
// check.h's checks exit; here they abandon the current section instead.

static const char *g_section = "?";
struct SectionFailed {};

#undef CHECK
#undef EXPECT
#undef EXPECT_AND_CLEAR
#undef REQUIRE

#define FAIL(...)                                                                      \
    do {                                                                               \
        printf("FAILED [%s] line %d: ", g_section, __LINE__);                          \
        printf(__VA_ARGS__);                                                           \
        printf("\n");                                                                  \
        fflush(stdout);                                                                \
        throw SectionFailed();                                                         \
    } while (0)

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t err_ = (call);                                                     \
        if (err_ != cudaSuccess) FAIL("%s -> %s", #call, cudaGetErrorName(err_));      \
    } while (0)

// The call must fail with `code` (which then stays the thread's last error).
#define EXPECT(call, code)                                                             \
    do {                                                                               \
        cudaError_t err_ = (call);                                                     \
        if (err_ != (code))                                                            \
            FAIL("%s -> %s, expected %s", #call, cudaGetErrorName(err_),               \
                 cudaGetErrorName(code));                                              \
    } while (0)

// EXPECT, then consume the error as cudaGetLastError would.
#define EXPECT_AND_CLEAR(call, code)                                                   \
    do {                                                                               \
        EXPECT(call, code);                                                            \
        cudaGetLastError();                                                            \
    } while (0)

#define REQUIRE(cond)                                                                  \
    do {                                                                               \
        if (!(cond)) FAIL("%s", #cond);                                                \
    } while (0)

// |got - want| <= tol, else fail naming the sample.
#define REQUIRE_NEAR(got, want, tol, ...)                                              \
    do {                                                                               \
        double g_ = (got), w_ = (want);                                                \
        if (!(fabs(g_ - w_) <= (tol))) {                                               \
            printf("FAILED [%s] line %d: got %.9g, expected %.9g (tolerance %.3g): ",   \
                   g_section, __LINE__, g_, w_, (double)(tol));                        \
            printf(__VA_ARGS__);                                                       \
            printf("\n");                                                              \
            fflush(stdout);                                                            \
            throw SectionFailed();                                                     \
        }                                                                              \
    } while (0)

#define FOR_EACH(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

// ---------------------------------------------------------------- kernels
// Each is implemented for the sim in tests/cuda/texture_kernels.py (same name).

// out = the box of width x height x depth bytes at base, rows `pitch` bytes
// apart, slices `rows` rows apart, packed.
__global__ void readPitched3D(const unsigned char *base, size_t pitch, size_t rows, int width, int height,
                              int depth, unsigned char *out) {
    for (int z = blockIdx.y; z < depth; z += gridDim.y)
        for (int y = blockIdx.x; y < height; y += gridDim.x)
            for (int x = threadIdx.x; x < width; x += blockDim.x)
                out[((size_t)z * height + y) * width + x] = base[((size_t)z * rows + y) * pitch + x];
}

__global__ void sampleTex2D(cudaTextureObject_t tex, const float2 *xy, float *out, int n) {
    FOR_EACH(i, n) out[i] = tex2D<float>(tex, xy[i].x, xy[i].y);
}

__global__ void sampleTex2D4(cudaTextureObject_t tex, const float2 *xy, float4 *out, int n) {
    FOR_EACH(i, n) out[i] = tex2D<float4>(tex, xy[i].x, xy[i].y);
}

// xl[i] = (x, layer)
__global__ void sampleTex1DLayered(cudaTextureObject_t tex, const float2 *xl, float *out, int n) {
    FOR_EACH(i, n) out[i] = tex1DLayered<float>(tex, xl[i].x, (int)xl[i].y);
}

// xyl[i] = (x, y, layer, -)
__global__ void sampleTex2DLayered(cudaTextureObject_t tex, const float4 *xyl, float *out, int n) {
    FOR_EACH(i, n) out[i] = tex2DLayered<float>(tex, xyl[i].x, xyl[i].y, (int)xyl[i].z);
}

__global__ void sampleTex3D(cudaTextureObject_t tex, const float4 *xyz, float *out, int n) {
    FOR_EACH(i, n) out[i] = tex3D<float>(tex, xyz[i].x, xyz[i].y, xyz[i].z);
}

// dir[i] = (x, y, z, -): a direction
__global__ void sampleCubemap(cudaTextureObject_t tex, const float4 *dir, float *out, int n) {
    FOR_EACH(i, n) out[i] = texCubemap<float>(tex, dir[i].x, dir[i].y, dir[i].z);
}

// dir[i] = (x, y, z, layer)
__global__ void sampleCubemapLayered(cudaTextureObject_t tex, const float4 *dir, float *out, int n) {
    FOR_EACH(i, n) out[i] = texCubemapLayered<float>(tex, dir[i].x, dir[i].y, dir[i].z, (int)dir[i].w);
}

// xyl[i] = (x, y, level of detail, -)
__global__ void sampleTex2DLod(cudaTextureObject_t tex, const float4 *xyl, float *out, int n) {
    FOR_EACH(i, n) out[i] = tex2DLod<float>(tex, xyl[i].x, xyl[i].y, xyl[i].z);
}

__global__ void fetchTex1D(cudaTextureObject_t tex, const int *index, float *out, int n) {
    FOR_EACH(i, n) out[i] = tex1Dfetch<float>(tex, index[i]);
}

// Surfaces address x in bytes.
__global__ void writeSurface1D(cudaSurfaceObject_t surf, int width) {
    FOR_EACH(x, width) surf1Dwrite(3 * x + 1, surf, x * (int)sizeof(int));
}

__global__ void writeSurface2D(cudaSurfaceObject_t surf, int width, int height) {
    FOR_EACH(i, width * height) {
        int x = i % width, y = i / width;
        surf2Dwrite(x + 100.0f * y + 0.5f, surf, x * (int)sizeof(float), y);
    }
}

__global__ void doubleSurface2D(cudaSurfaceObject_t surf, int width, int height) {
    FOR_EACH(i, width * height) {
        int x = i % width, y = i / width;
        float v = surf2Dread<float>(surf, x * (int)sizeof(float), y);
        surf2Dwrite(2.0f * v, surf, x * (int)sizeof(float), y);
    }
}

__global__ void writeSurface3D(cudaSurfaceObject_t surf, int width, int height, int depth) {
    FOR_EACH(i, width * height * depth) {
        int x = i % width, y = (i / width) % height, z = i / (width * height);
        surf3Dwrite(x + 10.0f * y + 100.0f * z, surf, x * (int)sizeof(float), y, z);
    }
}

// ---------------------------------------------------------------- helpers

template <typename T> static T *to_device(const T *host, int n) {
    T *d = nullptr;
    CHECK(cudaMalloc(&d, n * sizeof(T)));
    CHECK(cudaMemcpy(d, host, n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

static int blocks_for(int n) { return (n + 63) / 64; }

static bool same_desc(cudaChannelFormatDesc d, int x, int y, int z, int w, cudaChannelFormatKind f) {
    return d.x == x && d.y == y && d.z == z && d.w == w && d.f == f;
}

static bool same_desc(cudaChannelFormatDesc a, cudaChannelFormatDesc b) {
    return same_desc(a, b.x, b.y, b.z, b.w, b.f);
}

static void expect_array(cudaArray_t a, cudaChannelFormatDesc desc, size_t w, size_t h, size_t d, unsigned flags) {
    cudaChannelFormatDesc got_desc;
    cudaExtent e;
    unsigned int got_flags = 12345;
    CHECK(cudaArrayGetInfo(&got_desc, &e, &got_flags, a));
    if (e.width != w || e.height != h || e.depth != d || got_flags != flags)
        FAIL("cudaArrayGetInfo: %zu x %zu x %zu, flags %u; expected %zu x %zu x %zu, flags %u", e.width, e.height,
             e.depth, got_flags, w, h, d, flags);
    if (!same_desc(got_desc, desc))
        FAIL("cudaArrayGetInfo: desc {%d, %d, %d, %d, %d}, expected {%d, %d, %d, %d, %d}", got_desc.x, got_desc.y,
             got_desc.z, got_desc.w, (int)got_desc.f, desc.x, desc.y, desc.z, desc.w, (int)desc.f);
    CHECK(cudaGetChannelDesc(&got_desc, a));
    REQUIRE(same_desc(got_desc, desc));
}

static cudaTextureDesc texture_desc(int mode_x, int mode_y, bool linear, bool normalized,
                                    cudaTextureReadMode read = cudaReadModeElementType) {
    cudaTextureDesc td;
    memset(&td, 0, sizeof(td));
    td.addressMode[0] = (cudaTextureAddressMode)mode_x;
    td.addressMode[1] = (cudaTextureAddressMode)mode_y;
    td.addressMode[2] = (cudaTextureAddressMode)mode_y;
    td.filterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
    td.readMode = read;
    td.normalizedCoords = normalized;
    return td;
}

static cudaResourceDesc array_resource(cudaArray_t a) {
    cudaResourceDesc rd;
    memset(&rd, 0, sizeof(rd));
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = a;
    return rd;
}

static cudaTextureObject_t make_texture(cudaArray_t a, const cudaTextureDesc &td) {
    cudaResourceDesc rd = array_resource(a);
    cudaTextureObject_t tex = 0;
    CHECK(cudaCreateTextureObject(&tex, &rd, &td, nullptr));
    return tex;
}

static cudaSurfaceObject_t make_surface(cudaArray_t a) {
    cudaResourceDesc rd = array_resource(a);
    cudaSurfaceObject_t surf = 0;
    CHECK(cudaCreateSurfaceObject(&surf, &rd));
    return surf;
}

// cudaMemcpy3D of a whole array from or to packed host memory.
static void array_from_host(cudaArray_t a, const void *host, size_t w, size_t h, size_t d, size_t elem) {
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof(p));
    p.srcPtr = make_cudaPitchedPtr((void *)host, w * elem, w, h);
    p.dstArray = a;
    p.extent = make_cudaExtent(w, h, d);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
}

static void array_to_host(void *host, cudaArray_t a, size_t w, size_t h, size_t d, size_t elem) {
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof(p));
    p.srcArray = a;
    p.dstPtr = make_cudaPitchedPtr(host, w * elem, w, h);
    p.extent = make_cudaExtent(w, h, d);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
}

// Host reference of CUDA's texture fetch over a 2-D grid of `c`-channel
// texels already converted to float (normalized reads done).
static int address(int i, int n, int mode, bool normalized, bool *border) {
    if (!normalized && (mode == cudaAddressModeWrap || mode == cudaAddressModeMirror)) mode = cudaAddressModeClamp;
    switch (mode) {
    case cudaAddressModeWrap: return ((i % n) + n) % n;
    case cudaAddressModeMirror: {
        int p = ((i % (2 * n)) + 2 * n) % (2 * n);
        return p < n ? p : 2 * n - 1 - p;
    }
    case cudaAddressModeBorder:
        if (i < 0 || i >= n) *border = true;
        return i;
    default: return i < 0 ? 0 : i >= n ? n - 1 : i;
    }
}

static float weight8(float f) { return roundf(f * 256.0f) / 256.0f; }  // 8 fractional bits

struct Ref2D {
    const float *texels;  // [y][x][c]
    int w, h, c;
    cudaTextureDesc td;
    void texel(int i, int j, double *acc, double weight) const {
        bool border = false;
        int x = address(i, w, td.addressMode[0], td.normalizedCoords, &border);
        int y = address(j, h, td.addressMode[1], td.normalizedCoords, &border);
        for (int k = 0; k < c; k++) acc[k] += weight * (border ? td.borderColor[k] : texels[(y * w + x) * c + k]);
    }
    void sample(float u, float v, float *out) const {
        float x = td.normalizedCoords ? u * w : u, y = td.normalizedCoords ? v * h : v;
        double acc[4] = {0, 0, 0, 0};
        if (td.filterMode == cudaFilterModePoint) {
            texel((int)floorf(x), (int)floorf(y), acc, 1.0);
        } else {
            float xb = x - 0.5f, yb = y - 0.5f;
            int i = (int)floorf(xb), j = (int)floorf(yb);
            double a = weight8(xb - floorf(xb)), b = weight8(yb - floorf(yb));
            texel(i, j, acc, (1 - a) * (1 - b));
            texel(i + 1, j, acc, a * (1 - b));
            texel(i, j + 1, acc, (1 - a) * b);
            texel(i + 1, j + 1, acc, a * b);
        }
        for (int k = 0; k < c; k++) out[k] = (float)acc[k];
    }
};

static const char *mode_name(int mode) {
    static const char *names[] = {"wrap", "clamp", "mirror", "border"};
    return mode >= 0 && mode < 4 ? names[mode] : "?";
}

// ---------------------------------------------------------------- channel_descs

struct Format {
    const char *name;
    int bits;
    cudaChannelFormatKind kind;
};

static const Format FORMATS[] = {
    {"int8", 8, cudaChannelFormatKindSigned},    {"int16", 16, cudaChannelFormatKindSigned},
    {"int32", 32, cudaChannelFormatKindSigned},  {"uint8", 8, cudaChannelFormatKindUnsigned},
    {"uint16", 16, cudaChannelFormatKindUnsigned}, {"uint32", 32, cudaChannelFormatKindUnsigned},
    {"half", 16, cudaChannelFormatKindFloat},    {"float", 32, cudaChannelFormatKindFloat},
};

static cudaChannelFormatDesc format_desc(const Format &f, int channels) {
    return cudaCreateChannelDesc(f.bits, channels > 1 ? f.bits : 0, channels > 2 ? f.bits : 0,
                                 channels > 2 ? f.bits : 0, f.kind);
}

static void channel_descs() {
    // The exported function hands back what it is given, for every kind.
    for (int k = cudaChannelFormatKindSigned; k <= cudaChannelFormatKindUnsignedNormalized1010102; k++) {
        cudaChannelFormatDesc d = cudaCreateChannelDesc(8 + k, 16, 32 - k, k, (cudaChannelFormatKind)k);
        if (!same_desc(d, 8 + k, 16, 32 - k, k, (cudaChannelFormatKind)k)) FAIL("cudaCreateChannelDesc kind %d", k);
    }
    // The template forms (channel_descriptor.h) call it.
    const cudaChannelFormatKind S = cudaChannelFormatKindSigned, U = cudaChannelFormatKindUnsigned,
                                F = cudaChannelFormatKindFloat;
    REQUIRE(same_desc(cudaCreateChannelDesc<float>(), 32, 0, 0, 0, F));
    REQUIRE(same_desc(cudaCreateChannelDesc<float2>(), 32, 32, 0, 0, F));
    REQUIRE(same_desc(cudaCreateChannelDesc<float4>(), 32, 32, 32, 32, F));
    REQUIRE(same_desc(cudaCreateChannelDesc<signed char>(), 8, 0, 0, 0, S));
    REQUIRE(same_desc(cudaCreateChannelDesc<unsigned char>(), 8, 0, 0, 0, U));
    REQUIRE(same_desc(cudaCreateChannelDesc<char2>(), 8, 8, 0, 0, S));
    REQUIRE(same_desc(cudaCreateChannelDesc<uchar4>(), 8, 8, 8, 8, U));
    REQUIRE(same_desc(cudaCreateChannelDesc<short>(), 16, 0, 0, 0, S));
    REQUIRE(same_desc(cudaCreateChannelDesc<ushort2>(), 16, 16, 0, 0, U));
    REQUIRE(same_desc(cudaCreateChannelDesc<short4>(), 16, 16, 16, 16, S));
    REQUIRE(same_desc(cudaCreateChannelDesc<int>(), 32, 0, 0, 0, S));
    REQUIRE(same_desc(cudaCreateChannelDesc<unsigned int>(), 32, 0, 0, 0, U));
    REQUIRE(same_desc(cudaCreateChannelDesc<int2>(), 32, 32, 0, 0, S));
    REQUIRE(same_desc(cudaCreateChannelDesc<uint4>(), 32, 32, 32, 32, U));
    REQUIRE(same_desc(cudaCreateChannelDescHalf(), 16, 0, 0, 0, F));
    REQUIRE(same_desc(cudaCreateChannelDescHalf2(), 16, 16, 0, 0, F));
    REQUIRE(same_desc(cudaCreateChannelDescHalf4(), 16, 16, 16, 16, F));
    REQUIRE(same_desc(cudaCreateChannelDesc<double>(), 0, 0, 0, 0, cudaChannelFormatKindNone));  // no specialization
    REQUIRE(same_desc(cudaCreateChannelDesc<cudaChannelFormatKindUnsignedNormalized8X4>(), 8, 8, 8, 8,
                      cudaChannelFormatKindUnsignedNormalized8X4));
    REQUIRE(same_desc(cudaCreateChannelDesc<cudaChannelFormatKindSignedNormalized16X2>(), 16, 16, 0, 0,
                      cudaChannelFormatKindSignedNormalized16X2));
    REQUIRE(same_desc(cudaCreateChannelDesc<cudaChannelFormatKindNV12>(), 8, 8, 8, 0, cudaChannelFormatKindNV12));
    REQUIRE(same_desc(cudaCreateChannelDesc<cudaChannelFormatKindUnsignedNormalized1010102>(), 10, 10, 10, 2,
                      cudaChannelFormatKindUnsignedNormalized1010102));
    REQUIRE(same_desc(cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed6H>(), 16, 16, 16, 0,
                      cudaChannelFormatKindUnsignedBlockCompressed6H));
    REQUIRE(same_desc(format_desc(FORMATS[6], 4), cudaCreateChannelDescHalf4()));

    // Arrays of every format with 1, 2 and 4 channels report the same desc
    // back, with their extent and flags, and keep their bytes.
    const int W = 13, H = 5;
    for (const Format &f : FORMATS) {
        for (int c : {1, 2, 4}) {
            cudaChannelFormatDesc desc = format_desc(f, c);
            unsigned int flags = c == 2 ? cudaArraySurfaceLoadStore : cudaArrayDefault;
            cudaArray_t a = nullptr;
            cudaError_t err = cudaMallocArray(&a, &desc, W, H, flags);
            if (err != cudaSuccess) FAIL("cudaMallocArray of %d x %s -> %s", c, f.name, cudaGetErrorName(err));
            expect_array(a, desc, W, H, 0, flags);
            const size_t row = (size_t)W * c * f.bits / 8;
            unsigned char host[W * 4 * 4 * H], back[W * 4 * 4 * H];
            for (size_t i = 0; i < row * H; i++) host[i] = (unsigned char)(i * 7 + c * 13 + f.bits);
            memset(back, 0, sizeof(back));
            CHECK(cudaMemcpy2DToArray(a, 0, 0, host, row, row, H, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy2DFromArray(back, row, a, 0, 0, row, H, cudaMemcpyDeviceToHost));
            if (memcmp(host, back, row * H) != 0) FAIL("%d x %s: the bytes did not come back", c, f.name);
            CHECK(cudaFreeArray(a));
        }
    }
    printf("ok channel_descs\n");
}

// ---------------------------------------------------------------- arrays

static void arrays() {
    const cudaChannelFormatDesc f1 = cudaCreateChannelDesc<float>(), f4 = cudaCreateChannelDesc<float4>(),
                                u4 = cudaCreateChannelDesc<uchar4>(), s2 = cudaCreateChannelDesc<short2>();
    cudaArray_t a[13];
    int n = 0;
    CHECK(cudaMallocArray(&a[n], &f4, 100));  // 1-D: height 0
    expect_array(a[n++], f4, 100, 0, 0, 0);
    CHECK(cudaMallocArray(&a[n], &f1, 64, 32, cudaArraySurfaceLoadStore));
    expect_array(a[n++], f1, 64, 32, 0, cudaArraySurfaceLoadStore);
    CHECK(cudaMallocArray(&a[n], &u4, 16, 16, cudaArrayTextureGather));
    expect_array(a[n++], u4, 16, 16, 0, cudaArrayTextureGather);
    CHECK(cudaMalloc3DArray(&a[n], &f1, make_cudaExtent(8, 4, 3)));
    expect_array(a[n++], f1, 8, 4, 3, 0);
    CHECK(cudaMalloc3DArray(&a[n], &s2, make_cudaExtent(8, 4, 3), cudaArraySurfaceLoadStore));
    expect_array(a[n++], s2, 8, 4, 3, cudaArraySurfaceLoadStore);
    CHECK(cudaMalloc3DArray(&a[n], &f1, make_cudaExtent(64, 0, 0)));  // 1-D
    expect_array(a[n++], f1, 64, 0, 0, 0);
    CHECK(cudaMalloc3DArray(&a[n], &f1, make_cudaExtent(64, 32, 0)));  // 2-D
    expect_array(a[n++], f1, 64, 32, 0, 0);
    CHECK(cudaMalloc3DArray(&a[n], &f1, make_cudaExtent(16, 0, 5), cudaArrayLayered));  // 5 layers of 16
    expect_array(a[n++], f1, 16, 0, 5, cudaArrayLayered);
    CHECK(cudaMalloc3DArray(&a[n], &u4, make_cudaExtent(8, 4, 3), cudaArrayLayered | cudaArraySurfaceLoadStore));
    expect_array(a[n++], u4, 8, 4, 3, cudaArrayLayered | cudaArraySurfaceLoadStore);
    CHECK(cudaMalloc3DArray(&a[n], &f1, make_cudaExtent(8, 8, 6), cudaArrayCubemap));
    expect_array(a[n++], f1, 8, 8, 6, cudaArrayCubemap);
    CHECK(cudaMalloc3DArray(&a[n], &f4, make_cudaExtent(4, 4, 12), cudaArrayCubemap | cudaArrayLayered));
    expect_array(a[n++], f4, 4, 4, 12, cudaArrayCubemap | cudaArrayLayered);
    CHECK(cudaMalloc3DArray(&a[n], &f1, make_cudaExtent(4, 4, 6), cudaArrayCubemap | cudaArraySurfaceLoadStore));
    expect_array(a[n++], f1, 4, 4, 6, cudaArrayCubemap | cudaArraySurfaceLoadStore);
    // Any of cudaArrayGetInfo's outputs may be NULL.
    cudaExtent e;
    CHECK(cudaArrayGetInfo(nullptr, &e, nullptr, a[3]));
    REQUIRE(e.width == 8 && e.height == 4 && e.depth == 3);
    unsigned int flags = 0;
    CHECK(cudaArrayGetInfo(nullptr, nullptr, &flags, a[1]));
    REQUIRE(flags == cudaArraySurfaceLoadStore);
    for (int i = 0; i < n; i++) CHECK(cudaFreeArray(a[i]));
    CHECK(cudaFreeArray(nullptr));  // no operation
    printf("ok arrays\n");
}

// ---------------------------------------------------------------- array_copies

static void array_copies() {
    const int W = 16, H = 8;  // floats, rows
    const size_t row = W * sizeof(float);
    const cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
    cudaArray_t a, b;
    CHECK(cudaMallocArray(&a, &desc, W, H));
    CHECK(cudaMallocArray(&b, &desc, W, H));
    static float model_a[H][W], model_b[H][W], back[H][W];
    memset(model_a, 0, sizeof(model_a));
    memset(model_b, 0, sizeof(model_b));
    CHECK(cudaMemcpy2DToArray(a, 0, 0, model_a, row, row, H, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DToArray(b, 0, 0, model_b, row, row, H, cudaMemcpyHostToDevice));
    auto compare = [&](cudaArray_t arr, float (*model)[W], const char *what) {
        memset(back, 0xEE, sizeof(back));
        CHECK(cudaMemcpy2DFromArray(back, row, arr, 0, 0, row, H, cudaMemcpyDeviceToHost));
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                if (memcmp(&back[y][x], &model[y][x], sizeof(float)) != 0)
                    FAIL("%s: element (%d, %d) is %g, expected %g", what, x, y, back[y][x], model[y][x]);
    };

    // 10 x 5 floats of host rows 20 floats apart, from src[1][3], into the
    // array at element (2, 1): wOffset is in bytes, hOffset in rows.
    static float src[H][20];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < 20; x++) src[y][x] = 1000 + 100 * y + x;
    CHECK(cudaMemcpy2DToArray(a, 2 * sizeof(float), 1, &src[1][3], sizeof(src[0]), 10 * sizeof(float), 5,
                              cudaMemcpyHostToDevice));
    for (int y = 0; y < 5; y++)
        for (int x = 0; x < 10; x++) model_a[1 + y][2 + x] = src[1 + y][3 + x];
    compare(a, model_a, "cudaMemcpy2DToArray at an offset");

    // A box out of the array at an offset, into rows 7 floats apart.
    float box[4][7];
    memset(box, 0xEE, sizeof(box));
    CHECK(cudaMemcpy2DFromArray(box, sizeof(box[0]), a, 3 * sizeof(float), 2, 6 * sizeof(float), 4,
                                cudaMemcpyDeviceToHost));
    for (int y = 0; y < 4; y++) {
        for (int x = 0; x < 6; x++) REQUIRE(box[y][x] == model_a[2 + y][3 + x]);
        unsigned int untouched;
        memcpy(&untouched, &box[y][6], 4);
        REQUIRE(untouched == 0xEEEEEEEEu);  // the pitch's padding is not written
    }

    // The Async forms, on a stream.
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    float src2[3][5];
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 5; x++) src2[y][x] = 5000 + 10 * y + x;
    CHECK(cudaMemcpy2DToArrayAsync(a, 11 * sizeof(float), 5, src2, sizeof(src2[0]), sizeof(src2[0]), 3,
                                   cudaMemcpyHostToDevice, s));
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 5; x++) model_a[5 + y][11 + x] = src2[y][x];
    memset(back, 0, sizeof(back));
    CHECK(cudaMemcpy2DFromArrayAsync(back, row, a, 0, 0, row, H, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(memcmp(back, model_a, sizeof(back)) == 0);

    // Array to array, both at offsets.
    CHECK(cudaMemcpy2DArrayToArray(b, 4 * sizeof(float), 0, a, 2 * sizeof(float), 1, 6 * sizeof(float), 3,
                                   cudaMemcpyDeviceToDevice));
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 6; x++) model_b[y][4 + x] = model_a[1 + y][2 + x];
    compare(b, model_b, "cudaMemcpy2DArrayToArray");

    // The deprecated forms: `count` bytes from (wOffset bytes, hOffset rows):
    // whole rows, and a piece of one row.
    float rows[2][W], piece[4] = {-1.5f, -2.5f, -3.5f, -4.5f};
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < W; x++) rows[y][x] = 7000 + 100 * y + x;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CHECK(cudaMemcpyToArray(b, 0, 6, rows, sizeof(rows), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpyToArray(b, 5 * sizeof(float), 3, piece, sizeof(piece), cudaMemcpyHostToDevice));
    memcpy(model_b[6], rows, sizeof(rows));
    memcpy(&model_b[3][5], piece, sizeof(piece));
    compare(b, model_b, "cudaMemcpyToArray");
    float rows_back[2][W], piece_back[4];
    CHECK(cudaMemcpyFromArray(rows_back, b, 0, 6, sizeof(rows_back), cudaMemcpyDeviceToHost));
    REQUIRE(memcmp(rows_back, rows, sizeof(rows)) == 0);
    CHECK(cudaMemcpyFromArray(piece_back, b, 5 * sizeof(float), 3, sizeof(piece_back), cudaMemcpyDeviceToHost));
    REQUIRE(memcmp(piece_back, piece, sizeof(piece)) == 0);
    CHECK(cudaMemcpyArrayToArray(a, 0, 0, b, 0, 0, W * H * sizeof(float), cudaMemcpyDeviceToDevice));
    memcpy(model_a, model_b, sizeof(model_a));
    compare(a, model_a, "cudaMemcpyArrayToArray (whole)");
    CHECK(cudaMemcpyArrayToArray(a, 2 * sizeof(float), 7, b, 8 * sizeof(float), 3, 3 * sizeof(float)));
    for (int x = 0; x < 3; x++) model_a[7][2 + x] = model_b[3][8 + x];
    compare(a, model_a, "cudaMemcpyArrayToArray (in a row)");
#pragma GCC diagnostic pop

    // Device memory to and from arrays.
    float *dp, *dq;
    size_t dpitch, dqpitch;
    CHECK(cudaMallocPitch(&dp, &dpitch, row, H));
    CHECK(cudaMallocPitch(&dq, &dqpitch, row, H));
    float dsrc[H][W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) dsrc[y][x] = -(100 * y + x) - 0.25f;
    CHECK(cudaMemcpy2D(dp, dpitch, dsrc, row, row, H, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DToArray(a, 1 * sizeof(float), 2, (char *)dp + 3 * dpitch + 2 * sizeof(float), dpitch,
                              5 * sizeof(float), 4, cudaMemcpyDeviceToDevice));
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 5; x++) model_a[2 + y][1 + x] = dsrc[3 + y][2 + x];
    compare(a, model_a, "cudaMemcpy2DToArray from device memory");
    CHECK(cudaMemcpy2DFromArray(dq, dqpitch, a, 0, 0, row, H, cudaMemcpyDeviceToDevice));
    memset(back, 0, sizeof(back));
    CHECK(cudaMemcpy2D(back, row, dq, dqpitch, row, H, cudaMemcpyDeviceToHost));
    REQUIRE(memcmp(back, model_a, sizeof(back)) == 0);

    // cudaMemcpy3D into and out of a 3-D array at cudaPos offsets: the array
    // side counts elements, a pointer side bytes; the extent is in the
    // array's elements.
    const int X = 6, Y = 5, Z = 4;
    const cudaChannelFormatDesc idesc = cudaCreateChannelDesc<int>();
    cudaArray_t c3, d3;
    CHECK(cudaMalloc3DArray(&c3, &idesc, make_cudaExtent(X, Y, Z)));
    CHECK(cudaMalloc3DArray(&d3, &idesc, make_cudaExtent(X, Y, Z)));
    static int model3[Z][Y][X], model4[Z][Y][X], back3[Z][Y][X];
    memset(model3, 0, sizeof(model3));
    memset(model4, 0, sizeof(model4));
    array_from_host(c3, model3, X, Y, Z, sizeof(int));
    array_from_host(d3, model4, X, Y, Z, sizeof(int));
    static int hsrc[3][6][8];  // slices of 6 rows of 8 ints
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 6; y++)
            for (int x = 0; x < 8; x++) hsrc[z][y][x] = 10000 * (z + 1) + 100 * y + x;
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof(p));
    p.srcPtr = make_cudaPitchedPtr(hsrc, 8 * sizeof(int), 8, 6);
    p.srcPos = make_cudaPos(1 * sizeof(int), 2, 1);  // bytes, rows, slices
    p.dstArray = c3;
    p.dstPos = make_cudaPos(2, 1, 1);  // elements, rows, slices
    p.extent = make_cudaExtent(3, 2, 2);  // elements
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 2; y++)
            for (int x = 0; x < 3; x++) model3[1 + z][1 + y][2 + x] = hsrc[1 + z][2 + y][1 + x];
    array_to_host(back3, c3, X, Y, Z, sizeof(int));
    REQUIRE(memcmp(back3, model3, sizeof(back3)) == 0);

    // Out of the array at an offset, into pitched host memory at an offset.
    static int hdst[3][7][10];
    memset(hdst, 0, sizeof(hdst));
    memset(&p, 0, sizeof(p));
    p.srcArray = c3;
    p.srcPos = make_cudaPos(1, 1, 1);
    p.dstPtr = make_cudaPitchedPtr(hdst, 10 * sizeof(int), 10, 7);
    p.dstPos = make_cudaPos(2 * sizeof(int), 1, 0);
    p.extent = make_cudaExtent(4, 3, 2);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 7; y++)
            for (int x = 0; x < 10; x++) {
                bool inside = z < 2 && y >= 1 && y < 4 && x >= 2 && x < 6;
                int want = inside ? model3[1 + z][1 + (y - 1)][1 + (x - 2)] : 0;
                if (hdst[z][y][x] != want)
                    FAIL("cudaMemcpy3D out of an array: (%d, %d, %d) is %d, expected %d", x, y, z, hdst[z][y][x],
                         want);
            }

    // Array to array.
    memset(&p, 0, sizeof(p));
    p.srcArray = c3;
    p.srcPos = make_cudaPos(2, 1, 1);
    p.dstArray = d3;
    p.dstPos = make_cudaPos(0, 0, 2);
    p.extent = make_cudaExtent(3, 2, 2);
    p.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3D(&p));
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 2; y++)
            for (int x = 0; x < 3; x++) model4[2 + z][y][x] = model3[1 + z][1 + y][2 + x];
    array_to_host(back3, d3, X, Y, Z, sizeof(int));
    REQUIRE(memcmp(back3, model4, sizeof(back3)) == 0);

    // Array to pitched device memory and back to the host.
    cudaPitchedPtr pp;
    CHECK(cudaMalloc3D(&pp, make_cudaExtent(X * sizeof(int), Y, Z)));
    memset(&p, 0, sizeof(p));
    p.srcArray = c3;
    p.dstPtr = pp;
    p.extent = make_cudaExtent(X, Y, Z);
    p.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3D(&p));
    memset(&p, 0, sizeof(p));
    memset(back3, 0, sizeof(back3));
    p.srcPtr = pp;
    p.dstPtr = make_cudaPitchedPtr(back3, X * sizeof(int), X, Y);
    p.extent = make_cudaExtent(X * sizeof(int), Y, Z);  // no array: bytes
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    REQUIRE(memcmp(back3, model3, sizeof(back3)) == 0);

    CHECK(cudaFree(pp.ptr));
    CHECK(cudaFree(dp));
    CHECK(cudaFree(dq));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(b));
    CHECK(cudaFreeArray(c3));
    CHECK(cudaFreeArray(d3));
    printf("ok array_copies\n");
}

// ---------------------------------------------------------------- pitched_3d

static void pitched_3d() {
    const int W = 40, H = 6, D = 5;  // bytes, rows, slices
    cudaPitchedPtr pp;
    CHECK(cudaMalloc3D(&pp, make_cudaExtent(W, H, D)));
    REQUIRE(pp.pitch >= (size_t)W && pp.xsize == (size_t)W && pp.ysize == (size_t)H);
    static unsigned char model[D][H][W], back[D][H][W];
    auto read_back = [&](cudaPitchedPtr from, unsigned char (*into)[H][W]) {
        cudaMemcpy3DParms p;
        memset(&p, 0, sizeof(p));
        p.srcPtr = from;
        p.dstPtr = make_cudaPitchedPtr(into, W, W, H);
        p.extent = make_cudaExtent(W, H, D);
        p.kind = cudaMemcpyDeviceToHost;
        CHECK(cudaMemcpy3D(&p));
    };
    auto compare = [&](unsigned char (*got)[H][W], unsigned char (*want)[H][W], const char *what) {
        for (int z = 0; z < D; z++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    if (got[z][y][x] != want[z][y][x])
                        FAIL("%s: byte (%d, %d, %d) is %#x, expected %#x", what, x, y, z, got[z][y][x], want[z][y][x]);
    };

    CHECK(cudaMemset3D(pp, 0x11, make_cudaExtent(W, H, D)));
    memset(model, 0x11, sizeof(model));
    // A sub-box: 12 bytes x 3 rows x 2 slices at (5, 2, 1); slices are
    // pitch * ysize bytes apart.
    cudaPitchedPtr sub = pp;
    sub.ptr = (char *)pp.ptr + (1 * pp.ysize + 2) * pp.pitch + 5;
    CHECK(cudaMemset3D(sub, 0x5A, make_cudaExtent(12, 3, 2)));
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 12; x++) model[1 + z][2 + y][5 + x] = 0x5A;
    read_back(pp, back);
    compare(back, model, "cudaMemset3D");

    // Host memory with a pitch (64 bytes) and rows per slice (8) of its own,
    // at srcPos, to the device at dstPos: no array, so bytes.
    static unsigned char hsrc[4][8][64];
    for (int z = 0; z < 4; z++)
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 64; x++) hsrc[z][y][x] = (unsigned char)(z * 61 + y * 17 + x * 3 + 1);
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof(p));
    p.srcPtr = make_cudaPitchedPtr(hsrc, 64, 64, 8);
    p.srcPos = make_cudaPos(4, 1, 1);
    p.dstPtr = pp;
    p.dstPos = make_cudaPos(8, 2, 1);
    p.extent = make_cudaExtent(24, 3, 3);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 24; x++) model[1 + z][2 + y][8 + x] = hsrc[1 + z][1 + y][4 + x];
    read_back(pp, back);
    compare(back, model, "cudaMemcpy3D host to device");

    // A kernel reads the pitched memory: the layout is what CUDA says.
    unsigned char *dout;
    CHECK(cudaMalloc(&dout, sizeof(back)));
    readPitched3D<<<dim3(H, D), 64>>>((const unsigned char *)pp.ptr, pp.pitch, pp.ysize, W, H, D, dout);
    CHECK(cudaGetLastError());
    memset(back, 0, sizeof(back));
    CHECK(cudaMemcpy(back, dout, sizeof(back), cudaMemcpyDeviceToHost));
    compare(back, model, "a kernel reading pitched 3-D memory");

    // Device to device, between two pitched allocations, at offsets.
    cudaPitchedPtr qq;
    CHECK(cudaMalloc3D(&qq, make_cudaExtent(W, H, D)));
    CHECK(cudaMemset3D(qq, 0, make_cudaExtent(W, H, D)));
    static unsigned char model2[D][H][W];
    memset(model2, 0, sizeof(model2));
    memset(&p, 0, sizeof(p));
    p.srcPtr = pp;
    p.srcPos = make_cudaPos(6, 1, 2);
    p.dstPtr = qq;
    p.dstPos = make_cudaPos(0, 3, 0);
    p.extent = make_cudaExtent(30, 3, 3);
    p.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3D(&p));
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 30; x++) model2[z][3 + y][x] = model[2 + z][1 + y][6 + x];
    read_back(qq, back);
    compare(back, model2, "cudaMemcpy3D device to device");

    // cudaMemcpy3DAsync into pitched host memory (rows of 48 bytes, 7 rows per slice).
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    static unsigned char hdst[D][7][48];
    memset(hdst, 0xEE, sizeof(hdst));
    memset(&p, 0, sizeof(p));
    p.srcPtr = qq;
    p.dstPtr = make_cudaPitchedPtr(hdst, 48, 48, 7);
    p.extent = make_cudaExtent(W, H, D);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3DAsync(&p, s));
    CHECK(cudaStreamSynchronize(s));
    for (int z = 0; z < D; z++)
        for (int y = 0; y < 7; y++)
            for (int x = 0; x < 48; x++) {
                int want = y < H && x < W ? model2[z][y][x] : 0xEE;
                if (hdst[z][y][x] != want)
                    FAIL("cudaMemcpy3DAsync: byte (%d, %d, %d) is %#x, expected %#x", x, y, z, hdst[z][y][x], want);
            }

    // cudaMemset2D and cudaMemset2DAsync on pitched memory.
    unsigned char *d2;
    size_t pitch2;
    CHECK(cudaMallocPitch((void **)&d2, &pitch2, 24, 5));
    unsigned char m2[5][24], b2[5][24];
    CHECK(cudaMemset2D(d2, pitch2, 0x22, 24, 5));
    memset(m2, 0x22, sizeof(m2));
    CHECK(cudaMemset2D(d2 + pitch2 + 4, pitch2, 0x33, 8, 3));
    for (int y = 1; y < 4; y++) memset(&m2[y][4], 0x33, 8);
    CHECK(cudaMemset2DAsync(d2 + 3 * pitch2 + 16, pitch2, 0x44, 8, 2, s));
    for (int y = 3; y < 5; y++) memset(&m2[y][16], 0x44, 8);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy2D(b2, 24, d2, pitch2, 24, 5, cudaMemcpyDeviceToHost));
    REQUIRE(memcmp(b2, m2, sizeof(m2)) == 0);

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d2));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(pp.ptr));
    CHECK(cudaFree(qq.ptr));
    printf("ok pitched_3d\n");
}

// ---------------------------------------------------------------- tex2d_point, tex2d_linear

// An 8 x 4 float texture and an 8 x 4 uchar4 one (read as normalized floats).
static const int TW = 8, TH = 4;

static float float_texel(int x, int y) { return 16.0f * x + 64.0f * y + 1.0f; }

static void uchar4_texel(int x, int y, unsigned char *out) {
    out[0] = (unsigned char)(32 * x + y);
    out[1] = (unsigned char)(255 - 16 * x - 8 * y);
    out[2] = (unsigned char)(64 * y);
    out[3] = (unsigned char)((13 * x * y + 5) & 0xff);
}

struct Modes {
    int x, y;
    bool normalized;
};

// Samples the texture at `coords` (texel space; divided by the size when the
// coordinates are normalized) and compares with the host reference.
static void check_2d(cudaArray_t arr, const float *texels, int channels, Modes m, bool linear, const float2 *coords,
                     int n) {
    cudaTextureDesc td = texture_desc(m.x, m.y, linear, m.normalized,
                                      channels == 4 ? cudaReadModeNormalizedFloat : cudaReadModeElementType);
    td.borderColor[0] = -7.0f;  // border texels of the float texture (the uchar4 one keeps 0)
    if (channels == 4) td.borderColor[0] = 0.0f;
    cudaTextureObject_t tex = make_texture(arr, td);
    float2 *uv = new float2[n];
    for (int i = 0; i < n; i++)
        uv[i] = m.normalized ? make_float2(coords[i].x / TW, coords[i].y / TH) : coords[i];
    float2 *duv = to_device(uv, n);
    float *dout;
    CHECK(cudaMalloc(&dout, n * sizeof(float4)));
    if (channels == 1)
        sampleTex2D<<<blocks_for(n), 64>>>(tex, duv, dout, n);
    else
        sampleTex2D4<<<blocks_for(n), 64>>>(tex, duv, (float4 *)dout, n);
    CHECK(cudaGetLastError());
    float *got = new float[n * 4];
    CHECK(cudaMemcpy(got, dout, n * channels * sizeof(float), cudaMemcpyDeviceToHost));
    Ref2D ref = {texels, TW, TH, channels, td};
    for (int i = 0; i < n; i++) {
        float want[4];
        ref.sample(uv[i].x, uv[i].y, want);
        for (int k = 0; k < channels; k++) {
            double tol = linear ? fmax(fabs(want[k]), 1.0) / 256 : channels == 4 ? 1e-6 : 0.0;
            REQUIRE_NEAR(got[i * channels + k], want[k], tol,
                         "%s %s, address modes %s/%s, %s coordinates, texel space (%g, %g), channel %d",
                         channels == 1 ? "float" : "uchar4", linear ? "linear" : "point", mode_name(m.x),
                         mode_name(m.y), m.normalized ? "normalized" : "unnormalized", coords[i].x, coords[i].y, k);
        }
    }
    delete[] uv;
    delete[] got;
    CHECK(cudaFree(duv));
    CHECK(cudaFree(dout));
    CHECK(cudaDestroyTextureObject(tex));
}

static void tex2d(bool linear) {
    // The textures, and their texels as the host reference reads them.
    static float ftexels[TH][TW], ctexels[TH][TW][4];
    static unsigned char craw[TH][TW][4];
    for (int y = 0; y < TH; y++)
        for (int x = 0; x < TW; x++) {
            ftexels[y][x] = float_texel(x, y);
            uchar4_texel(x, y, craw[y][x]);
            for (int k = 0; k < 4; k++) ctexels[y][x][k] = craw[y][x][k] / 255.0f;
        }
    const cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>(), cdesc = cudaCreateChannelDesc<uchar4>();
    cudaArray_t fa, ca;
    CHECK(cudaMallocArray(&fa, &fdesc, TW, TH));
    CHECK(cudaMallocArray(&ca, &cdesc, TW, TH));
    CHECK(cudaMemcpy2DToArray(fa, 0, 0, ftexels, sizeof(ftexels[0]), sizeof(ftexels[0]), TH, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DToArray(ca, 0, 0, craw, sizeof(craw[0]), sizeof(craw[0]), TH, cudaMemcpyHostToDevice));

    // Coordinates in texel space, inside and well outside the texture: point
    // samples never on a texel boundary, linear ones on multiples of 1/64.
    static const float point_x[] = {0.5f, 3.25f, 7.5f, 5.75f, -2.25f, 9.75f, 13.5f, -9.25f, 17.75f, 23.5f};
    static const float point_y[] = {0.5f, 2.75f, 1.25f, -1.25f, 5.5f, 9.25f, -5.5f};
    static const float linear_x[] = {0.5f,   1.0f,      2.625f,    7.75f,  -0.5f, 0.0f,
                                     8.3125f, 3.140625f, 5.984375f, -6.75f, 12.25f};
    static const float linear_y[] = {0.5f, 1.25f, 3.875f, -0.75f, 2.015625f, 6.5f};
    const float *xs = linear ? linear_x : point_x, *ys = linear ? linear_y : point_y;
    const int nx = linear ? sizeof(linear_x) / sizeof(float) : sizeof(point_x) / sizeof(float);
    const int ny = linear ? sizeof(linear_y) / sizeof(float) : sizeof(point_y) / sizeof(float);
    float2 coords[128];
    int n = 0;
    for (int j = 0; j < ny; j++)
        for (int i = 0; i < nx; i++) coords[n++] = make_float2(xs[i], ys[j]);

    const int Wr = cudaAddressModeWrap, Cl = cudaAddressModeClamp, Mi = cudaAddressModeMirror,
              Bo = cudaAddressModeBorder;
    const Modes float_modes[] = {
        {Cl, Cl, false}, {Bo, Bo, false}, {Wr, Wr, true}, {Mi, Mi, true}, {Cl, Cl, true}, {Bo, Bo, true},
        {Wr, Mi, true},  // a mode per dimension
        {Wr, Bo, false}, // wrap with unnormalized coordinates acts as clamp
    };
    for (const Modes &m : float_modes) check_2d(fa, &ftexels[0][0], 1, m, linear, coords, n);
    const Modes uchar4_modes[] = {{Cl, Cl, false}, {Wr, Wr, true}, {Mi, Cl, true}};
    for (const Modes &m : uchar4_modes) check_2d(ca, &ctexels[0][0][0], 4, m, linear, coords, n);

    if (!linear) {
        // A few values by hand, independent of the host reference.
        const float2 xy[] = {make_float2(3.5f, 2.5f), make_float2(-2.0f, 1.5f), make_float2(9.75f, -0.25f)};
        float2 *dxy = to_device(xy, 3);
        float *dout, got[3];
        CHECK(cudaMalloc(&dout, sizeof(got)));
        cudaTextureObject_t clamp = make_texture(fa, texture_desc(Cl, Cl, false, false));
        sampleTex2D<<<1, 64>>>(clamp, dxy, dout, 3);
        CHECK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
        REQUIRE(got[0] == float_texel(3, 2) && got[1] == float_texel(0, 1) && got[2] == float_texel(7, 0));
        cudaTextureDesc btd = texture_desc(Bo, Bo, false, false);
        btd.borderColor[0] = 42.0f;
        cudaTextureObject_t border = make_texture(fa, btd);
        sampleTex2D<<<1, 64>>>(border, dxy, dout, 3);
        CHECK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
        REQUIRE(got[0] == float_texel(3, 2) && got[1] == 42.0f && got[2] == 42.0f);
        CHECK(cudaDestroyTextureObject(clamp));
        CHECK(cudaDestroyTextureObject(border));
        CHECK(cudaFree(dxy));
        CHECK(cudaFree(dout));
    } else {
        // Half way between texels 2 and 3 of row 1, and a quarter of the way
        // from row 1 to row 2 at texel 5: exact.
        const float2 xy[] = {make_float2(3.0f, 1.5f), make_float2(5.5f, 1.75f)};
        float2 *dxy = to_device(xy, 2);
        float *dout, got[2];
        CHECK(cudaMalloc(&dout, sizeof(got)));
        cudaTextureObject_t clamp = make_texture(fa, texture_desc(Cl, Cl, true, false));
        sampleTex2D<<<1, 64>>>(clamp, dxy, dout, 2);
        CHECK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
        REQUIRE_NEAR(got[0], (float_texel(2, 1) + float_texel(3, 1)) / 2, 1.0 / 256, "half way");
        REQUIRE_NEAR(got[1], 0.75 * float_texel(5, 1) + 0.25 * float_texel(5, 2), 1.0 / 256, "a quarter way");
        CHECK(cudaDestroyTextureObject(clamp));
        CHECK(cudaFree(dxy));
        CHECK(cudaFree(dout));
    }
    CHECK(cudaFreeArray(fa));
    CHECK(cudaFreeArray(ca));
}

static void tex2d_point() {
    tex2d(false);
    printf("ok tex2d_point\n");
}

static void tex2d_linear() {
    tex2d(true);
    printf("ok tex2d_linear\n");
}

// ---------------------------------------------------------------- layered_cubemap

static void run_samples(void (*launch)(cudaTextureObject_t, const float4 *, float *, int), cudaTextureObject_t tex,
                        const float4 *coords, float *got, int n) {
    float4 *dc = to_device(coords, n);
    float *dout;
    CHECK(cudaMalloc(&dout, n * sizeof(float)));
    launch(tex, dc, dout, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got, dout, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(dc));
    CHECK(cudaFree(dout));
}

static void launch_2d_layered(cudaTextureObject_t t, const float4 *c, float *o, int n) {
    sampleTex2DLayered<<<blocks_for(n), 64>>>(t, c, o, n);
}
static void launch_3d(cudaTextureObject_t t, const float4 *c, float *o, int n) {
    sampleTex3D<<<blocks_for(n), 64>>>(t, c, o, n);
}
static void launch_cubemap(cudaTextureObject_t t, const float4 *c, float *o, int n) {
    sampleCubemap<<<blocks_for(n), 64>>>(t, c, o, n);
}
static void launch_cubemap_layered(cudaTextureObject_t t, const float4 *c, float *o, int n) {
    sampleCubemapLayered<<<blocks_for(n), 64>>>(t, c, o, n);
}
static void launch_lod(cudaTextureObject_t t, const float4 *c, float *o, int n) {
    sampleTex2DLod<<<blocks_for(n), 64>>>(t, c, o, n);
}

static void layered_cubemap() {
    const cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
    const int Cl = cudaAddressModeClamp;

    // A 2-D layered array: 4 x 3 texels, 3 layers; texel (x, y) of layer l = 1000 l + 10 y + x.
    const int LW = 4, LH = 3, LL = 3;
    float layered[LL][LH][LW];
    for (int l = 0; l < LL; l++)
        for (int y = 0; y < LH; y++)
            for (int x = 0; x < LW; x++) layered[l][y][x] = 1000.0f * l + 10.0f * y + x;
    cudaArray_t la;
    CHECK(cudaMalloc3DArray(&la, &desc, make_cudaExtent(LW, LH, LL), cudaArrayLayered));
    array_from_host(la, layered, LW, LH, LL, sizeof(float));
    cudaTextureObject_t lt = make_texture(la, texture_desc(Cl, Cl, false, false));
    float4 lc[LL * LH * LW + 2];
    int n = 0;
    for (int l = 0; l < LL; l++)
        for (int y = 0; y < LH; y++)
            for (int x = 0; x < LW; x++) lc[n++] = make_float4(x + 0.5f, y + 0.5f, (float)l, 0);
    lc[n++] = make_float4(-3.0f, 9.5f, 1.0f, 0);  // clamped within layer 1
    lc[n++] = make_float4(2.25f, 0.75f, 2.0f, 0);
    float got[64];
    run_samples(launch_2d_layered, lt, lc, got, n);
    for (int i = 0; i < n; i++) {
        int l = (int)lc[i].z;
        int x = (int)fminf(fmaxf(floorf(lc[i].x), 0), LW - 1), y = (int)fminf(fmaxf(floorf(lc[i].y), 0), LH - 1);
        REQUIRE_NEAR(got[i], layered[l][y][x], 0.0, "tex2DLayered (%g, %g) layer %d", lc[i].x, lc[i].y, l);
    }
    // Linear filtering stays inside a layer: half way between texels 1 and 2
    // of row 1 of layer 2 (clamped rows do not reach layer 1 or 3).
    cudaTextureObject_t llt = make_texture(la, texture_desc(Cl, Cl, true, false));
    float4 lin[] = {make_float4(2.0f, 1.5f, 2.0f, 0), make_float4(0.75f, -4.0f, 0.0f, 0)};
    run_samples(launch_2d_layered, llt, lin, got, 2);
    REQUIRE_NEAR(got[0], (layered[2][1][1] + layered[2][1][2]) / 2, fabs(layered[2][1][1]) / 256, "linear in layer 2");
    REQUIRE_NEAR(got[1], 0.75 * layered[0][0][0] + 0.25 * layered[0][0][1], 1.0 / 256, "linear in layer 0");

    // A 1-D layered array: 5 texels, 4 layers (cudaMemcpy3D: height 1, depth the layers).
    const int SW = 5, SL = 4;
    float strip[SL][SW];
    for (int l = 0; l < SL; l++)
        for (int x = 0; x < SW; x++) strip[l][x] = 100.0f * l + x + 0.25f;
    cudaArray_t sa;
    CHECK(cudaMalloc3DArray(&sa, &desc, make_cudaExtent(SW, 0, SL), cudaArrayLayered));
    array_from_host(sa, strip, SW, 1, SL, sizeof(float));
    cudaTextureObject_t st = make_texture(sa, texture_desc(Cl, Cl, false, false));
    float2 sc[SL * SW];
    for (int l = 0; l < SL; l++)
        for (int x = 0; x < SW; x++) sc[l * SW + x] = make_float2(x + 0.5f, (float)l);
    float2 *dsc = to_device(sc, SL * SW);
    float *dout;
    CHECK(cudaMalloc(&dout, SL * SW * sizeof(float)));
    sampleTex1DLayered<<<1, 64>>>(st, dsc, dout, SL * SW);
    CHECK(cudaMemcpy(got, dout, SL * SW * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < SL * SW; i++) REQUIRE_NEAR(got[i], strip[i / SW][i % SW], 0.0, "tex1DLayered %d", i);
    CHECK(cudaFree(dsc));
    CHECK(cudaFree(dout));

    // A cubemap of 3 x 3 faces: texel (x, y) of face f = 100 f + 10 y + x;
    // faces +x, -x, +y, -y, +z, -z.  Directions along the axes hit face
    // centres; the others are well inside one texel (face and (s, t) as the
    // programming guide's cubemap table says: +x: s = -z, t = -y; -x: s = z,
    // t = -y; +y: s = x, t = z; -y: s = x, t = -z; +z: s = x, t = -y; -z: s =
    // -x, t = -y; texel coordinates ((s/|m| + 1)/2, (t/|m| + 1)/2) * 3).
    const int CW = 3;
    float cube[2 * 6][CW][CW];  // two cubemaps' worth: the second for the layered one
    for (int f = 0; f < 12; f++)
        for (int y = 0; y < CW; y++)
            for (int x = 0; x < CW; x++) cube[f][y][x] = 100.0f * f + 10.0f * y + x;
    cudaArray_t ca, cla;
    CHECK(cudaMalloc3DArray(&ca, &desc, make_cudaExtent(CW, CW, 6), cudaArrayCubemap));
    CHECK(cudaMalloc3DArray(&cla, &desc, make_cudaExtent(CW, CW, 12), cudaArrayCubemap | cudaArrayLayered));
    array_from_host(ca, cube, CW, CW, 6, sizeof(float));
    array_from_host(cla, cube, CW, CW, 12, sizeof(float));
    cudaTextureObject_t ct = make_texture(ca, texture_desc(Cl, Cl, false, true));
    cudaTextureObject_t clt = make_texture(cla, texture_desc(Cl, Cl, false, true));
    struct Dir {
        float x, y, z;
        float want;
    } dirs[] = {
        {1, 0, 0, 11},         {-2, 0, 0, 111},        {0, 3, 0, 211},    {0, -1, 0, 311},
        {0, 0, 1, 411},        {0, 0, -0.5f, 511},     {1, 0.5f, 0.2f, 1}, {-1, -0.6f, 0.5f, 122},
        {0.2f, 1, -0.6f, 201}, {0.7f, -1, 0.1f, 312},  {-0.5f, 0.5f, 1, 400}, {0.5f, -0.25f, -1, 510},
    };
    const int nd = sizeof(dirs) / sizeof(dirs[0]);
    float4 dc[nd];
    for (int i = 0; i < nd; i++) dc[i] = make_float4(dirs[i].x, dirs[i].y, dirs[i].z, 0);
    run_samples(launch_cubemap, ct, dc, got, nd);
    for (int i = 0; i < nd; i++)
        REQUIRE_NEAR(got[i], dirs[i].want, 0.0, "texCubemap (%g, %g, %g)", dirs[i].x, dirs[i].y, dirs[i].z);
    // Layer 1 of the layered cubemap holds faces 6..11.
    for (int i = 0; i < nd; i++) dc[i].w = (float)(i % 2);
    run_samples(launch_cubemap_layered, clt, dc, got, nd);
    for (int i = 0; i < nd; i++)
        REQUIRE_NEAR(got[i], dirs[i].want + 600.0f * (i % 2), 0.0, "texCubemapLayered (%g, %g, %g) layer %d",
                     dirs[i].x, dirs[i].y, dirs[i].z, i % 2);

    CHECK(cudaDestroyTextureObject(lt));
    CHECK(cudaDestroyTextureObject(llt));
    CHECK(cudaDestroyTextureObject(st));
    CHECK(cudaDestroyTextureObject(ct));
    CHECK(cudaDestroyTextureObject(clt));
    CHECK(cudaFreeArray(la));
    CHECK(cudaFreeArray(sa));
    CHECK(cudaFreeArray(ca));
    CHECK(cudaFreeArray(cla));
    printf("ok layered_cubemap\n");
}

// ---------------------------------------------------------------- surface_then_texture

static void surface_then_texture() {
    const cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>(), idesc = cudaCreateChannelDesc<int>();
    const int Cl = cudaAddressModeClamp;

    // 2-D: a kernel writes through a surface (x in bytes), another doubles
    // every texel through surf2Dread/surf2Dwrite, a third reads the array
    // through a texture.
    const int W = 10, H = 7;
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &fdesc, W, H, cudaArraySurfaceLoadStore));
    cudaSurfaceObject_t surf = make_surface(a);
    writeSurface2D<<<2, 32>>>(surf, W, H);
    doubleSurface2D<<<3, 32>>>(surf, W, H);
    CHECK(cudaGetLastError());
    cudaTextureObject_t tex = make_texture(a, texture_desc(Cl, Cl, false, false));
    float2 xy[W * H];
    for (int i = 0; i < W * H; i++) xy[i] = make_float2(i % W + 0.5f, i / W + 0.5f);
    float2 *dxy = to_device(xy, W * H);
    float *dout, got[W * H];
    CHECK(cudaMalloc(&dout, sizeof(got)));
    sampleTex2D<<<blocks_for(W * H), 64>>>(tex, dxy, dout, W * H);
    CHECK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
    for (int i = 0; i < W * H; i++)
        REQUIRE_NEAR(got[i], 2 * (i % W + 100.0f * (i / W) + 0.5f), 0.0, "texel (%d, %d)", i % W, i / W);
    float rows[H][W];
    CHECK(cudaMemcpy2DFromArray(rows, sizeof(rows[0]), a, 0, 0, sizeof(rows[0]), H, cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) REQUIRE(rows[y][x] == 2 * (x + 100.0f * y + 0.5f));

    // 1-D int array through surf1Dwrite.
    const int N = 33;
    cudaArray_t a1;
    CHECK(cudaMallocArray(&a1, &idesc, N, 0, cudaArraySurfaceLoadStore));
    cudaSurfaceObject_t surf1 = make_surface(a1);
    writeSurface1D<<<1, 16>>>(surf1, N);
    CHECK(cudaGetLastError());
    int ints[N];
    CHECK(cudaMemcpy2DFromArray(ints, sizeof(ints), a1, 0, 0, sizeof(ints), 1, cudaMemcpyDeviceToHost));
    for (int x = 0; x < N; x++) REQUIRE(ints[x] == 3 * x + 1);

    // 3-D float array through surf3Dwrite, read back through tex3D and cudaMemcpy3D.
    const int X = 5, Y = 4, Z = 3;
    cudaArray_t a3;
    CHECK(cudaMalloc3DArray(&a3, &fdesc, make_cudaExtent(X, Y, Z), cudaArraySurfaceLoadStore));
    cudaSurfaceObject_t surf3 = make_surface(a3);
    writeSurface3D<<<2, 32>>>(surf3, X, Y, Z);
    CHECK(cudaGetLastError());
    cudaTextureObject_t tex3 = make_texture(a3, texture_desc(Cl, Cl, false, false));
    float4 xyz[X * Y * Z];
    for (int i = 0; i < X * Y * Z; i++) xyz[i] = make_float4(i % X + 0.5f, (i / X) % Y + 0.5f, i / (X * Y) + 0.5f, 0);
    float got3[X * Y * Z], vol[Z][Y][X];
    run_samples(launch_3d, tex3, xyz, got3, X * Y * Z);
    array_to_host(vol, a3, X, Y, Z, sizeof(float));
    for (int i = 0; i < X * Y * Z; i++) {
        int x = i % X, y = (i / X) % Y, z = i / (X * Y);
        REQUIRE_NEAR(got3[i], x + 10.0f * y + 100.0f * z, 0.0, "tex3D (%d, %d, %d)", x, y, z);
        REQUIRE(vol[z][y][x] == x + 10.0f * y + 100.0f * z);
    }

    CHECK(cudaDestroySurfaceObject(surf));
    CHECK(cudaDestroySurfaceObject(surf1));
    CHECK(cudaDestroySurfaceObject(surf3));
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaDestroyTextureObject(tex3));
    CHECK(cudaFree(dxy));
    CHECK(cudaFree(dout));
    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(a1));
    CHECK(cudaFreeArray(a3));
    printf("ok surface_then_texture\n");
}

// ---------------------------------------------------------------- texture_linear

// Device memory aligned to cudaDevAttrTextureAlignment, as linear and pitch2D
// resources need: the allocation and the aligned pointer into it.
static void *aligned_malloc(size_t size, void **allocation) {
    int align = 0;
    CHECK(cudaDeviceGetAttribute(&align, cudaDevAttrTextureAlignment, 0));
    if (align <= 0) align = 512;
    CHECK(cudaMalloc(allocation, size + align));
    size_t p = (size_t)*allocation;
    return (void *)((p + align - 1) / align * align);
}

static void fetch(cudaTextureObject_t tex, const int *index, float *got, int n) {
    int *di = to_device(index, n);
    float *dout;
    CHECK(cudaMalloc(&dout, n * sizeof(float)));
    fetchTex1D<<<blocks_for(n), 64>>>(tex, di, dout, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got, dout, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(di));
    CHECK(cudaFree(dout));
}

static cudaTextureObject_t linear_texture(void *ptr, cudaChannelFormatDesc desc, size_t size,
                                          cudaTextureReadMode read) {
    cudaResourceDesc rd;
    memset(&rd, 0, sizeof(rd));
    rd.resType = cudaResourceTypeLinear;
    rd.res.linear.devPtr = ptr;
    rd.res.linear.desc = desc;
    rd.res.linear.sizeInBytes = size;
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaAddressModeClamp, false, false, read);
    cudaTextureObject_t tex = 0;
    CHECK(cudaCreateTextureObject(&tex, &rd, &td, nullptr));
    return tex;
}

static void texture_linear() {
    void *alloc1, *alloc2, *alloc3;
    // float elements
    const int N = 300;
    float values[N];
    for (int i = 0; i < N; i++) values[i] = 0.5f * i - 20.0f;
    float *lin = (float *)aligned_malloc(sizeof(values), &alloc1);
    CHECK(cudaMemcpy(lin, values, sizeof(values), cudaMemcpyHostToDevice));
    cudaTextureObject_t ft =
        linear_texture(lin, cudaCreateChannelDesc<float>(), sizeof(values), cudaReadModeElementType);
    const int idx[] = {0, 1, 150, 299, 37};
    float got[8];
    fetch(ft, idx, got, 5);
    for (int i = 0; i < 5; i++) REQUIRE_NEAR(got[i], values[idx[i]], 0.0, "tex1Dfetch float %d", idx[i]);

    // 8-bit unsigned, read as normalized floats: v / 255.
    unsigned char bytes[64];
    for (int i = 0; i < 64; i++) bytes[i] = (unsigned char)(4 * i + 3);
    unsigned char *lb = (unsigned char *)aligned_malloc(sizeof(bytes), &alloc2);
    CHECK(cudaMemcpy(lb, bytes, sizeof(bytes), cudaMemcpyHostToDevice));
    cudaTextureObject_t bt = linear_texture(lb, cudaCreateChannelDesc<unsigned char>(), sizeof(bytes),
                                            cudaReadModeNormalizedFloat);
    const int bidx[] = {0, 10, 63, 31};
    fetch(bt, bidx, got, 4);
    for (int i = 0; i < 4; i++) REQUIRE_NEAR(got[i], bytes[bidx[i]] / 255.0f, 1e-6, "tex1Dfetch uchar %d", bidx[i]);

    // 16-bit signed, normalized: v / 32767, and -32768 reads as -1 too.
    short shorts[] = {-32768, -32767, -1, 0, 1, 16384, 32767};
    short *ls = (short *)aligned_malloc(sizeof(shorts), &alloc3);
    CHECK(cudaMemcpy(ls, shorts, sizeof(shorts), cudaMemcpyHostToDevice));
    cudaTextureObject_t st = linear_texture(ls, cudaCreateChannelDesc<short>(), sizeof(shorts),
                                            cudaReadModeNormalizedFloat);
    const int sidx[] = {0, 1, 2, 3, 4, 5, 6};
    fetch(st, sidx, got, 7);
    for (int i = 0; i < 7; i++)
        REQUIRE_NEAR(got[i], fmaxf(shorts[i] / 32767.0f, -1.0f), 1e-6, "tex1Dfetch short %d", shorts[i]);

    // tex2D over pitched memory from cudaMallocPitch (cudaResourceTypePitch2D).
    const int PW = 20, PH = 6;
    float *pitched;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&pitched, &pitch, PW * sizeof(float), PH));
    float host[PH][PW];
    for (int y = 0; y < PH; y++)
        for (int x = 0; x < PW; x++) host[y][x] = 3.0f * x + 50.0f * y;
    CHECK(cudaMemcpy2D(pitched, pitch, host, sizeof(host[0]), sizeof(host[0]), PH, cudaMemcpyHostToDevice));
    cudaResourceDesc rd;
    memset(&rd, 0, sizeof(rd));
    rd.resType = cudaResourceTypePitch2D;
    rd.res.pitch2D.devPtr = pitched;
    rd.res.pitch2D.desc = cudaCreateChannelDesc<float>();
    rd.res.pitch2D.width = PW;
    rd.res.pitch2D.height = PH;
    rd.res.pitch2D.pitchInBytes = pitch;
    cudaTextureObject_t pt, plt;
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaAddressModeClamp, false, false);
    CHECK(cudaCreateTextureObject(&pt, &rd, &td, nullptr));
    td.filterMode = cudaFilterModeLinear;
    CHECK(cudaCreateTextureObject(&plt, &rd, &td, nullptr));
    float2 xy[PW * PH + 3];
    for (int i = 0; i < PW * PH; i++) xy[i] = make_float2(i % PW + 0.5f, i / PW + 0.5f);
    xy[PW * PH] = make_float2(4.0f, 2.5f);     // half way between texels 3 and 4 of row 2
    xy[PW * PH + 1] = make_float2(10.5f, 3.25f);  // a quarter of the way back to row 2
    xy[PW * PH + 2] = make_float2(-5.0f, 99.0f);  // clamped to texel (0, 5)
    const int n = PW * PH + 3;
    float2 *dxy = to_device(xy, n);
    float *dout, pgot[PW * PH + 3];
    CHECK(cudaMalloc(&dout, sizeof(pgot)));
    sampleTex2D<<<blocks_for(PW * PH), 64>>>(pt, dxy, dout, PW * PH);
    CHECK(cudaMemcpy(pgot, dout, PW * PH * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < PW * PH; i++) REQUIRE_NEAR(pgot[i], host[i / PW][i % PW], 0.0, "pitch2D texel %d", i);
    sampleTex2D<<<1, 64>>>(plt, dxy + PW * PH, dout, 3);
    CHECK(cudaMemcpy(pgot, dout, 3 * sizeof(float), cudaMemcpyDeviceToHost));
    REQUIRE_NEAR(pgot[0], (host[2][3] + host[2][4]) / 2, host[2][4] / 256, "pitch2D linear, half way");
    REQUIRE_NEAR(pgot[1], 0.25 * host[2][10] + 0.75 * host[3][10], host[3][10] / 256, "pitch2D linear, quarter");
    REQUIRE_NEAR(pgot[2], host[5][0], host[5][0] / 256, "pitch2D linear, clamped");

    CHECK(cudaDestroyTextureObject(ft));
    CHECK(cudaDestroyTextureObject(bt));
    CHECK(cudaDestroyTextureObject(st));
    CHECK(cudaDestroyTextureObject(pt));
    CHECK(cudaDestroyTextureObject(plt));
    CHECK(cudaFree(dxy));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(pitched));
    CHECK(cudaFree(alloc1));
    CHECK(cudaFree(alloc2));
    CHECK(cudaFree(alloc3));
    printf("ok texture_linear\n");
}

// ---------------------------------------------------------------- mipmapped

static void mipmapped() {
    // 16 x 8, five levels: 16 x 8, 8 x 4, 4 x 2, 2 x 1, 1 x 1; texel (x, y) of
    // level L = 1000 L + 10 y + x.
    const int W = 16, H = 8, LEVELS = 5;
    const cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
    cudaMipmappedArray_t mm;
    CHECK(cudaMallocMipmappedArray(&mm, &desc, make_cudaExtent(W, H, 0), LEVELS));
    for (int level = 0; level < LEVELS; level++) {
        cudaArray_t la;
        CHECK(cudaGetMipmappedArrayLevel(&la, mm, level));
        const int lw = W >> level > 1 ? W >> level : 1, lh = H >> level > 1 ? H >> level : 1;
        cudaExtent e;
        cudaChannelFormatDesc d;
        CHECK(cudaArrayGetInfo(&d, &e, nullptr, la));
        if (e.width != (size_t)lw || e.height != (size_t)lh || e.depth != 0)
            FAIL("level %d: %zu x %zu x %zu, expected %d x %d x 0", level, e.width, e.height, e.depth, lw, lh);
        REQUIRE(same_desc(d, desc));
        float texels[H][W];
        for (int y = 0; y < lh; y++)
            for (int x = 0; x < lw; x++) texels[y][x] = 1000.0f * level + 10.0f * y + x;
        CHECK(cudaMemcpy2DToArray(la, 0, 0, texels, sizeof(texels[0]), lw * sizeof(float), lh, cudaMemcpyHostToDevice));
    }
    cudaArray_t past;
    EXPECT_AND_CLEAR(cudaGetMipmappedArrayLevel(&past, mm, LEVELS), cudaErrorInvalidValue);

    cudaResourceDesc rd;
    memset(&rd, 0, sizeof(rd));
    rd.resType = cudaResourceTypeMipmappedArray;
    rd.res.mipmap.mipmap = mm;
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaAddressModeClamp, false, true);
    td.mipmapFilterMode = cudaFilterModePoint;
    td.minMipmapLevelClamp = 0;
    td.maxMipmapLevelClamp = LEVELS - 1;
    cudaTextureObject_t tex;
    CHECK(cudaCreateTextureObject(&tex, &rd, &td, nullptr));
    // Texel centres of each level, at integer levels of detail; beyond the
    // last level and below 0 the level is clamped.
    float4 c[64];
    float want[64];
    int n = 0;
    for (int level = 0; level < LEVELS; level++) {
        const int lw = W >> level > 1 ? W >> level : 1, lh = H >> level > 1 ? H >> level : 1;
        const int xs[] = {0, lw / 2, lw - 1}, ys[] = {0, lh - 1};
        for (int x : xs)
            for (int y : ys) {
                c[n] = make_float4((x + 0.5f) / lw, (y + 0.5f) / lh, (float)level, 0);
                want[n++] = 1000.0f * level + 10.0f * y + x;
            }
    }
    c[n] = make_float4(0.5f, 0.5f, 7.0f, 0);
    want[n++] = 4000.0f;
    c[n] = make_float4((3 + 0.5f) / W, (2 + 0.5f) / H, -1.0f, 0);
    want[n++] = 23.0f;
    float got[64];
    run_samples(launch_lod, tex, c, got, n);
    for (int i = 0; i < n; i++)
        REQUIRE_NEAR(got[i], want[i], 0.0, "tex2DLod (%g, %g) at level %g", c[i].x, c[i].y, c[i].z);
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaFreeMipmappedArray(mm));
    printf("ok mipmapped\n");
}

// ---------------------------------------------------------------- queries

static void queries() {
    const cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &desc, 8, 4, cudaArraySurfaceLoadStore));
    float host[4][8];
    for (int i = 0; i < 32; i++) host[i / 8][i % 8] = i * 1.5f;
    CHECK(cudaMemcpy2DToArray(a, 0, 0, host, sizeof(host[0]), sizeof(host[0]), 4, cudaMemcpyHostToDevice));

    // An array texture: the descriptors come back as given.
    cudaTextureDesc td;
    memset(&td, 0, sizeof(td));
    td.addressMode[0] = cudaAddressModeWrap;
    td.addressMode[1] = cudaAddressModeMirror;
    td.addressMode[2] = cudaAddressModeBorder;
    td.filterMode = cudaFilterModeLinear;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 1;
    td.borderColor[0] = 1.0f;
    td.borderColor[1] = 2.0f;
    td.borderColor[2] = 3.0f;
    td.borderColor[3] = 4.0f;
    cudaTextureObject_t tex = make_texture(a, td);
    cudaResourceDesc rd;
    memset(&rd, 0xAB, sizeof(rd));
    CHECK(cudaGetTextureObjectResourceDesc(&rd, tex));
    REQUIRE(rd.resType == cudaResourceTypeArray && rd.res.array.array == a);
    cudaTextureDesc got;
    memset(&got, 0xAB, sizeof(got));
    CHECK(cudaGetTextureObjectTextureDesc(&got, tex));
    REQUIRE(got.addressMode[0] == td.addressMode[0] && got.addressMode[1] == td.addressMode[1] &&
            got.addressMode[2] == td.addressMode[2]);
    REQUIRE(got.filterMode == td.filterMode && got.readMode == td.readMode && got.normalizedCoords == 1);
    for (int k = 0; k < 4; k++) REQUIRE(got.borderColor[k] == td.borderColor[k]);
    cudaResourceViewDesc vd;
    EXPECT_AND_CLEAR(cudaGetTextureObjectResourceViewDesc(&vd, tex), cudaErrorInvalidValue);  // no view given

    // A texture with a resource view: the view comes back, and samples.
    cudaResourceViewDesc view;
    memset(&view, 0, sizeof(view));
    view.format = cudaResViewFormatFloat1;
    view.width = 8;
    view.height = 4;
    cudaTextureObject_t vtex;
    cudaResourceDesc ard = array_resource(a);
    cudaTextureDesc ptd = texture_desc(cudaAddressModeClamp, cudaAddressModeClamp, false, false);
    CHECK(cudaCreateTextureObject(&vtex, &ard, &ptd, &view));
    memset(&vd, 0xAB, sizeof(vd));
    CHECK(cudaGetTextureObjectResourceViewDesc(&vd, vtex));
    REQUIRE(vd.format == cudaResViewFormatFloat1 && vd.width == 8 && vd.height == 4 && vd.depth == 0);
    REQUIRE(vd.firstMipmapLevel == 0 && vd.lastMipmapLevel == 0 && vd.firstLayer == 0 && vd.lastLayer == 0);
    float2 xy = make_float2(5.5f, 2.5f);
    float2 *dxy = to_device(&xy, 1);
    float *dout, one;
    CHECK(cudaMalloc(&dout, sizeof(float)));
    sampleTex2D<<<1, 32>>>(vtex, dxy, dout, 1);
    CHECK(cudaMemcpy(&one, dout, sizeof(float), cudaMemcpyDeviceToHost));
    REQUIRE(one == host[2][5]);

    // Linear and pitch2D resources come back with their pointer, format and sizes.
    void *alloc;
    float *lin = (float *)aligned_malloc(1024, &alloc);
    cudaTextureObject_t ltex = linear_texture(lin, cudaCreateChannelDesc<float2>(), 1024, cudaReadModeElementType);
    memset(&rd, 0xAB, sizeof(rd));
    CHECK(cudaGetTextureObjectResourceDesc(&rd, ltex));
    REQUIRE(rd.resType == cudaResourceTypeLinear && rd.res.linear.devPtr == lin && rd.res.linear.sizeInBytes == 1024);
    REQUIRE(same_desc(rd.res.linear.desc, cudaCreateChannelDesc<float2>()));
    float *pitched;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&pitched, &pitch, 16 * sizeof(float), 5));
    cudaResourceDesc prd;
    memset(&prd, 0, sizeof(prd));
    prd.resType = cudaResourceTypePitch2D;
    prd.res.pitch2D.devPtr = pitched;
    prd.res.pitch2D.desc = cudaCreateChannelDesc<float>();
    prd.res.pitch2D.width = 16;
    prd.res.pitch2D.height = 5;
    prd.res.pitch2D.pitchInBytes = pitch;
    cudaTextureObject_t ptex;
    CHECK(cudaCreateTextureObject(&ptex, &prd, &ptd, nullptr));
    memset(&rd, 0xAB, sizeof(rd));
    CHECK(cudaGetTextureObjectResourceDesc(&rd, ptex));
    REQUIRE(rd.resType == cudaResourceTypePitch2D && rd.res.pitch2D.devPtr == pitched);
    REQUIRE(rd.res.pitch2D.width == 16 && rd.res.pitch2D.height == 5 && rd.res.pitch2D.pitchInBytes == pitch);
    REQUIRE(same_desc(rd.res.pitch2D.desc, cudaCreateChannelDesc<float>()));

    // A mipmapped array's texture names it.
    cudaMipmappedArray_t mm;
    CHECK(cudaMallocMipmappedArray(&mm, &desc, make_cudaExtent(8, 8, 0), 2));
    cudaResourceDesc mrd;
    memset(&mrd, 0, sizeof(mrd));
    mrd.resType = cudaResourceTypeMipmappedArray;
    mrd.res.mipmap.mipmap = mm;
    cudaTextureDesc mtd = texture_desc(cudaAddressModeClamp, cudaAddressModeClamp, false, true);
    mtd.maxMipmapLevelClamp = 1;
    cudaTextureObject_t mtex;
    CHECK(cudaCreateTextureObject(&mtex, &mrd, &mtd, nullptr));
    memset(&rd, 0xAB, sizeof(rd));
    CHECK(cudaGetTextureObjectResourceDesc(&rd, mtex));
    REQUIRE(rd.resType == cudaResourceTypeMipmappedArray && rd.res.mipmap.mipmap == mm);

    // A surface names its array.
    cudaSurfaceObject_t surf = make_surface(a);
    memset(&rd, 0xAB, sizeof(rd));
    CHECK(cudaGetSurfaceObjectResourceDesc(&rd, surf));
    REQUIRE(rd.resType == cudaResourceTypeArray && rd.res.array.array == a);

    CHECK(cudaDestroySurfaceObject(surf));
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaDestroyTextureObject(vtex));
    CHECK(cudaDestroyTextureObject(ltex));
    CHECK(cudaDestroyTextureObject(ptex));
    CHECK(cudaDestroyTextureObject(mtex));
    CHECK(cudaFreeMipmappedArray(mm));
    CHECK(cudaFree(dxy));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(alloc));
    CHECK(cudaFree(pitched));
    CHECK(cudaFreeArray(a));
    printf("ok queries\n");
}

// ---------------------------------------------------------------- bad_input

static void bad_input() {
    const cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>(), idesc = cudaCreateChannelDesc<int>();
    float host[64];
    memset(host, 0, sizeof(host));
    cudaArray_t a;  // 8 x 4 floats, no surface flag
    CHECK(cudaMallocArray(&a, &desc, 8, 4));

    // A resource view whose texels are not the array's size, or past its levels.
    {
        cudaResourceDesc res;
        memset(&res, 0, sizeof(res));
        res.resType = cudaResourceTypeArray;
        res.res.array.array = a;
        cudaTextureDesc td;
        memset(&td, 0, sizeof(td));
        cudaResourceViewDesc view;
        memset(&view, 0, sizeof(view));
        view.format = cudaResViewFormatFloat2;  // 8-byte texels over 4-byte ones
        view.width = 8;
        view.height = 4;
        cudaTextureObject_t t = 0;
        EXPECT_AND_CLEAR(cudaCreateTextureObject(&t, &res, &td, &view), cudaErrorInvalidValue);
        view.format = cudaResViewFormatFloat1;
        view.lastMipmapLevel = 1;  // a plain array has one level
        EXPECT_AND_CLEAR(cudaCreateTextureObject(&t, &res, &td, &view), cudaErrorInvalidValue);
        view.lastMipmapLevel = 0;
        CHECK(cudaCreateTextureObject(&t, &res, &td, &view));  // the same texels: fine
        CHECK(cudaDestroyTextureObject(t));
    }

    // Copies running outside the array's extent.
    EXPECT_AND_CLEAR(cudaMemcpy2DToArray(a, sizeof(float), 0, host, 32, 32, 4, cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);  // one float past the end of the rows
    EXPECT_AND_CLEAR(cudaMemcpy2DToArray(a, 0, 1, host, 32, 32, 4, cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);  // one row past the last
    EXPECT_AND_CLEAR(cudaMemcpy2DFromArray(host, 36, a, 0, 0, 36, 1, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMemcpy2DToArray(a, 0, 0, host, 16, 32, 2, cudaMemcpyHostToDevice),
                     cudaErrorInvalidPitchValue);  // source rows closer than their width
    EXPECT_AND_CLEAR(cudaMemcpy2DToArray(nullptr, 0, 0, host, 32, 32, 1, cudaMemcpyHostToDevice),
                     cudaErrorInvalidResourceHandle);
    EXPECT_AND_CLEAR(cudaMemcpy2DToArray(a, 0, 0, host, 32, 32, 1, (cudaMemcpyKind)-1),
                     cudaErrorInvalidMemcpyDirection);
    cudaArray_t a3;
    CHECK(cudaMalloc3DArray(&a3, &idesc, make_cudaExtent(4, 4, 2)));
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof(p));
    p.srcPtr = make_cudaPitchedPtr(host, 4 * sizeof(int), 4, 4);
    p.dstArray = a3;
    p.dstPos = make_cudaPos(0, 0, 1);
    p.extent = make_cudaExtent(4, 4, 2);  // slices 1 and 2 of 2
    p.kind = cudaMemcpyHostToDevice;
    EXPECT_AND_CLEAR(cudaMemcpy3D(&p), cudaErrorInvalidValue);

    // A surface needs cudaArraySurfaceLoadStore.
    cudaResourceDesc rd = array_resource(a);
    cudaSurfaceObject_t surf;
    EXPECT_AND_CLEAR(cudaCreateSurfaceObject(&surf, &rd), cudaErrorInvalidValue);

    // Channel formats CUDA arrays do not have: 3 channels, mixed sizes, 8-bit floats.
    cudaArray_t bad;
    const cudaChannelFormatDesc three = cudaCreateChannelDesc(32, 32, 32, 0, cudaChannelFormatKindFloat);
    const cudaChannelFormatDesc mixed = cudaCreateChannelDesc(8, 16, 0, 0, cudaChannelFormatKindUnsigned);
    const cudaChannelFormatDesc byte_float = cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindFloat);
    EXPECT_AND_CLEAR(cudaMallocArray(&bad, &three, 16, 16), cudaErrorInvalidChannelDescriptor);
    EXPECT_AND_CLEAR(cudaMalloc3DArray(&bad, &three, make_cudaExtent(4, 4, 4)), cudaErrorInvalidChannelDescriptor);
    EXPECT_AND_CLEAR(cudaMallocArray(&bad, &mixed, 16, 16), cudaErrorInvalidChannelDescriptor);
    EXPECT_AND_CLEAR(cudaMallocArray(&bad, &byte_float, 16, 16), cudaErrorInvalidChannelDescriptor);

    // Shapes and flags CUDA refuses.
    EXPECT_AND_CLEAR(cudaMallocArray(&bad, &desc, 0, 4), cudaErrorInvalidValue);  // no width
    EXPECT_AND_CLEAR(cudaMallocArray(&bad, &desc, 16, 16, cudaArrayCubemap), cudaErrorInvalidValue);
    EXPECT_AND_CLEAR(cudaMalloc3DArray(&bad, &desc, make_cudaExtent(6, 0, 6)),
                     cudaErrorInvalidValue);  // 3-D without a height
    EXPECT_AND_CLEAR(cudaMalloc3DArray(&bad, &desc, make_cudaExtent(8, 4, 6), cudaArrayCubemap),
                     cudaErrorInvalidValue);  // faces not square
    EXPECT_AND_CLEAR(cudaMalloc3DArray(&bad, &desc, make_cudaExtent(8, 8, 8), cudaArrayTextureGather),
                     cudaErrorInvalidValue);  // gather is for 2-D arrays

    // Destroying twice.  (CUDA documents a second destroy of a texture
    // object as undefined; its driver answers cudaErrorInvalidValue.)
    cudaTextureObject_t tex = make_texture(a, texture_desc(cudaAddressModeClamp, cudaAddressModeClamp, false, false));
    CHECK(cudaDestroyTextureObject(tex));
    EXPECT_AND_CLEAR(cudaDestroyTextureObject(tex), cudaErrorInvalidValue);
    CHECK(cudaDestroyTextureObject(0));  // no operation
    CHECK(cudaDestroySurfaceObject(0));
    CHECK(cudaFreeArray(a3));
    CHECK(cudaFreeArray(a));
    cudaError_t again = cudaFreeArray(a);  // freed already: the handle is stale
    if (again != cudaErrorInvalidValue && again != cudaErrorInvalidResourceHandle &&
        again != cudaErrorContextIsDestroyed)
        FAIL("cudaFreeArray of a freed array -> %s, expected an invalid-handle error", cudaGetErrorName(again));
    cudaGetLastError();

    // None of it was sticky.
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaGetLastError());
    float *d;
    CHECK(cudaMalloc(&d, 16));
    CHECK(cudaMemcpy(d, host, 16, cudaMemcpyHostToDevice));
    CHECK(cudaFree(d));
    printf("ok bad_input\n");
}

// ---------------------------------------------------------------- main

// Copies of 16 MiB and more whose host rows have gaps travel in parts
// (client/runtime/boxes.py): a 2048 x 2048 float image both ways, with a
// host pitch of its own, into pitched device memory and back.
static void large_pitched() {
    const size_t W = 2048, H = 2048, row = W * sizeof(float), host_pitch = row + 64;
    std::vector<unsigned char> image(host_pitch * H), back(host_pitch * H, 0);
    for (size_t i = 0; i < image.size(); i++) image[i] = (unsigned char)(i * 31 + 7);
    void *d;
    size_t pitch;
    CHECK(cudaMallocPitch(&d, &pitch, row, H));
    CHECK(cudaMemcpy2D(d, pitch, image.data(), host_pitch, row, H, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2D(back.data(), host_pitch, d, pitch, row, H, cudaMemcpyDeviceToHost));
    for (size_t y = 0; y < H; y++) {
        REQUIRE(memcmp(&image[y * host_pitch], &back[y * host_pitch], row) == 0);
        for (size_t x = row; x < host_pitch; x++) REQUIRE(back[y * host_pitch + x] == 0);  // gaps untouched
    }
    CHECK(cudaFree(d));
    printf("ok large_pitched\n");
}

int main(int argc, char **argv) {
    struct Section {
        const char *name;
        void (*run)();
    } sections[] = {
        {"channel_descs", channel_descs},
        {"arrays", arrays},
        {"array_copies", array_copies},
        {"pitched_3d", pitched_3d},
        {"tex2d_point", tex2d_point},
        {"tex2d_linear", tex2d_linear},
        {"layered_cubemap", layered_cubemap},
        {"surface_then_texture", surface_then_texture},
        {"texture_linear", texture_linear},
        {"mipmapped", mipmapped},
        {"queries", queries},
        {"bad_input", bad_input},
        {"large_pitched", large_pitched},
    };
    int failed = 0;
    for (const Section &s : sections) {
        bool chosen = argc == 1;  // no arguments: every section
        for (int a = 1; a < argc; a++) chosen = chosen || strcmp(argv[a], s.name) == 0;
        if (!chosen) continue;
        g_section = s.name;
        cudaGetLastError();  // what a failed section left behind
        try {
            s.run();
        } catch (const SectionFailed &) {
            failed++;
            cudaDeviceSynchronize();
        }
        fflush(stdout);
    }
    if (failed) {
        printf("%d section(s) failed\n", failed);
        return 1;
    }
    printf("PASSED textures\n");
    return 0;
}
