// The driver API's legacy execution control and texture and surface
// references, on a PTX module declaring `.global .texref` and `.surfref`
// (driver_legacy_kernels.ptx, whose path is argv[1]; CUDA 13's nvcc no
// longer compiles texture<>): launches through cuFuncSetBlockShape,
// cuFuncSetSharedSize, cuParamSet* and cuLaunch / cuLaunchGrid /
// cuLaunchGridAsync, checked by a kernel reporting what it got; every
// cuTexRef* and cuSurfRef* state function, its round trip and its errors;
// kernels sampling the references bound to linear memory and to an array,
// and writing an array through a surface reference.  Linked to
// libcuda.so.1.  Each section prints "ok NAME"; a failure prints "FAILED ...".
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "driver_check.h"

static CUmodule module_;

static CUfunction function(const char *name) {
    CUfunction f;
    DRV(cuModuleGetFunction(&f, module_, name));
    return f;
}

static CUtexref texref(const char *name) {
    CUtexref t;
    DRV(cuModuleGetTexRef(&t, module_, name));
    return t;
}

static unsigned float_bits(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}

// legacyReport's parameters, set one by one at the offsets the old API's
// programs computed: out (8 bytes), n (4), scale (4), words (16): 32 bytes.
static void set_report_params(CUfunction f, CUdeviceptr out, unsigned n, float scale, const unsigned words[4]) {
    int offset = 0;
    DRV(cuParamSetv(f, offset, &out, sizeof out));
    offset += sizeof out;
    DRV(cuParamSeti(f, offset, n));
    offset += 4;
    DRV(cuParamSetf(f, offset, scale));
    offset += 4;
    DRV(cuParamSetv(f, offset, (void *)words, 16));
    offset += 16;
    DRV(cuParamSetSize(f, offset));
}

static std::vector<unsigned> report(CUdeviceptr out) {
    std::vector<unsigned> got(13);
    DRV(cuMemcpyDtoH(got.data(), out, 13 * 4));
    return got;
}

static void legacy_launch() {
    CUfunction f = function("legacyReport");
    CUdeviceptr out;
    DRV(cuMemAlloc(&out, 13 * 4));
    DRV(cuMemsetD32(out, 0, 13));
    const unsigned words[4] = {0xDEADBEEF, 7, 0xFFFFFFFF, 123456};
    set_report_params(f, out, 77, 2.5f, words);
    DRV(cuFuncSetBlockShape(f, 32, 2, 3));
    DRV(cuFuncSetSharedSize(f, 256));
    DRV(cuLaunchGrid(f, 3, 2));
    DRV(cuCtxSynchronize());
    std::vector<unsigned> got = report(out);
    REQUIRE(got[0] == 3 && got[1] == 2 && got[2] == 32 && got[3] == 2 && got[4] == 3 && got[5] == 256);
    REQUIRE(got[6] == 77 && got[7] == float_bits(2.5f));
    REQUIRE(got[8] == words[0] && got[9] == words[1] && got[10] == words[2] && got[11] == words[3]);
    REQUIRE(got[12] == 6);

    // The state stays with the function: cuLaunch runs one block with it.
    DRV(cuLaunch(f));
    DRV(cuCtxSynchronize());
    got = report(out);
    REQUIRE(got[0] == 1 && got[1] == 1 && got[2] == 32 && got[6] == 77 && got[12] == 7);

    // A parameter changed alone, another shape, a stream.
    DRV(cuParamSeti(f, 8, 78));
    DRV(cuFuncSetBlockShape(f, 64, 1, 1));
    DRV(cuFuncSetSharedSize(f, 0));
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    DRV(cuLaunchGridAsync(f, 4, 1, stream));
    DRV(cuStreamSynchronize(stream));
    got = report(out);
    REQUIRE(got[0] == 4 && got[1] == 1 && got[2] == 64 && got[3] == 1 && got[4] == 1 && got[5] == 0);
    REQUIRE(got[6] == 78 && got[7] == float_bits(2.5f) && got[8] == words[0] && got[12] == 11);

    // cuLaunchKernel of the same function, then a legacy launch (its state set
    // again, as CUDA asks after a cuLaunchKernel): one stream, in order.
    unsigned n = 5;
    float scale = -1.0f;
    unsigned other[4] = {1, 2, 3, 4};
    void *params[] = {&out, &n, &scale, other};
    DRV(cuLaunchKernel(f, 2, 1, 1, 8, 1, 1, 0, stream, params, NULL));
    set_report_params(f, out, 79, 0.5f, words);
    DRV(cuFuncSetBlockShape(f, 8, 4, 1));
    DRV(cuFuncSetSharedSize(f, 64));
    DRV(cuLaunchGridAsync(f, 1, 1, stream));
    DRV(cuStreamSynchronize(stream));
    got = report(out);
    REQUIRE(got[0] == 1 && got[2] == 8 && got[3] == 4 && got[5] == 64 && got[6] == 79);
    REQUIRE(got[7] == float_bits(0.5f) && got[8] == words[0] && got[12] == 14);

    DRV(cuStreamDestroy(stream));
    DRV(cuMemFree(out));
    printf("ok legacy_launch\n");
}

static void legacy_errors() {
    CUfunction f = function("legacyReport");
    CUdeviceptr out;
    DRV(cuMemAlloc(&out, 13 * 4));
    const unsigned words[4] = {1, 2, 3, 4};
    set_report_params(f, out, 1, 1.0f, words);

    // No block shape yet (a function of its own, never set).
    CUfunction fetch = function("fetchLinear");
    DRV_EXPECT(cuLaunch(fetch), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuFuncSetBlockShape(f, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuFuncSetBlockShape(f, 1, -1, 1), CUDA_ERROR_INVALID_VALUE);
    DRV(cuFuncSetBlockShape(f, 16, 1, 1));

    // The parameter size must be the kernel's.
    DRV(cuParamSetSize(f, 24));
    DRV_EXPECT(cuLaunchGrid(f, 1, 1), CUDA_ERROR_INVALID_VALUE);
    DRV(cuParamSetSize(f, 32));
    DRV_EXPECT(cuParamSetSize(f, 40000), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuParamSetv(f, 0, NULL, 8), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuParamSeti(f, 32764, 1), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuParamSeti(f, -4, 1), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuParamSetf(f, 32762, 1.0f), CUDA_ERROR_INVALID_VALUE);

    // Grids and blocks the device refuses; no function at all.
    DRV_EXPECT(cuLaunchGrid(f, 0, 1), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuLaunchGrid(f, 1, -2), CUDA_ERROR_INVALID_VALUE);
    DRV(cuFuncSetBlockShape(f, 2048, 1, 1));
    DRV_EXPECT(cuLaunchGrid(f, 1, 1), CUDA_ERROR_INVALID_VALUE);
    DRV(cuFuncSetBlockShape(f, 16, 1, 1));
    DRV(cuFuncSetSharedSize(f, 1 << 20));
    DRV_EXPECT(cuLaunch(f), CUDA_ERROR_INVALID_VALUE);
    DRV(cuFuncSetSharedSize(f, 0));
    DRV_EXPECT(cuLaunchGrid(NULL, 1, 1), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuFuncSetBlockShape(NULL, 1, 1, 1), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuLaunchGridAsync(f, 1, 1, (CUstream)0x1234), CUDA_ERROR_INVALID_HANDLE);

    // cuParamSetTexRef: the default unit and a reference of the function's module only.
    CUtexref linear = texref("texLinear"), made;
    DRV(cuParamSetTexRef(fetch, CU_PARAM_TR_DEFAULT, linear));
    DRV_EXPECT(cuParamSetTexRef(fetch, 0, linear), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefCreate(&made));
    DRV_EXPECT(cuParamSetTexRef(fetch, CU_PARAM_TR_DEFAULT, made), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefDestroy(made));

    // Nothing above broke the context: a good launch still runs.
    DRV(cuMemsetD32(out, 0, 13));
    DRV(cuLaunchGrid(f, 2, 1));
    DRV(cuCtxSynchronize());
    std::vector<unsigned> got = report(out);
    REQUIRE(got[0] == 2 && got[2] == 16 && got[12] == 2);
    DRV(cuMemFree(out));
    printf("ok legacy_errors\n");
}

static void texref_lookup() {
    CUtexref a, b;
    DRV(cuModuleGetTexRef(&a, module_, "texLinear"));
    DRV(cuModuleGetTexRef(&b, module_, "texLinear"));
    REQUIRE(a == b && a != NULL);
    DRV(cuModuleGetTexRef(&b, module_, "texImage"));
    REQUIRE(a != b);
    DRV_EXPECT(cuModuleGetTexRef(&b, module_, "noSuchTexture"), CUDA_ERROR_NOT_FOUND);
    DRV_EXPECT(cuModuleGetTexRef(&b, module_, "fetchLinear"), CUDA_ERROR_NOT_FOUND);
    DRV_EXPECT(cuModuleGetTexRef(&b, module_, "surfImage"), CUDA_ERROR_NOT_FOUND);
    DRV_EXPECT(cuModuleGetTexRef(NULL, module_, "texLinear"), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuModuleGetTexRef(&b, module_, NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuModuleGetTexRef(&b, (CUmodule)0x1234, "texLinear"), CUDA_ERROR_INVALID_HANDLE);
    CUsurfref s, t;
    DRV(cuModuleGetSurfRef(&s, module_, "surfImage"));
    DRV(cuModuleGetSurfRef(&t, module_, "surfImage"));
    REQUIRE(s == t && s != NULL);
    DRV_EXPECT(cuModuleGetSurfRef(&t, module_, "texImage"), CUDA_ERROR_NOT_FOUND);
    DRV_EXPECT(cuModuleGetSurfRef(&t, module_, "writeSurface"), CUDA_ERROR_NOT_FOUND);
    // A module's reference belongs to it.
    DRV_EXPECT(cuTexRefDestroy(a), CUDA_ERROR_INVALID_VALUE);
    printf("ok texref_lookup\n");
}

static void texref_state() {
    CUtexref t;
    DRV(cuTexRefCreate(&t));
    DRV_EXPECT(cuTexRefCreate(NULL), CUDA_ERROR_INVALID_VALUE);

    // What a new reference answers.
    CUaddress_mode am;
    CUfilter_mode fm;
    unsigned flags = 99;
    CUarray_format format = CU_AD_FORMAT_FLOAT;
    int channels = 7, aniso = 5;
    float bias = 9, lo = 9, hi = 9, color[4] = {9, 9, 9, 9};
    for (int dim = 0; dim < 3; dim++) {
        DRV(cuTexRefGetAddressMode(&am, t, dim));
        REQUIRE(am == CU_TR_ADDRESS_MODE_WRAP);
    }
    DRV(cuTexRefGetFilterMode(&fm, t));
    REQUIRE(fm == CU_TR_FILTER_MODE_POINT);
    DRV(cuTexRefGetFlags(&flags, t));
    DRV(cuTexRefGetFormat(&format, &channels, t));
    REQUIRE(flags == 0 && (int)format == 0 && channels == 0);
    DRV(cuTexRefGetMaxAnisotropy(&aniso, t));
    DRV(cuTexRefGetMipmapLevelBias(&bias, t));
    DRV(cuTexRefGetMipmapLevelClamp(&lo, &hi, t));
    DRV(cuTexRefGetBorderColor(color, t));
    REQUIRE(aniso == 0 && bias == 0 && lo == 0 && hi == 0 && color[0] == 0 && color[3] == 0);
    CUdeviceptr address;
    CUarray array;
    CUmipmappedArray mipmapped;
    DRV_EXPECT(cuTexRefGetAddress(&address, t), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefGetArray(&array, t), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefGetMipmappedArray(&mipmapped, t), CUDA_ERROR_INVALID_VALUE);

    // Set and get back, each part; bad values change nothing.
    DRV(cuTexRefSetAddressMode(t, 0, CU_TR_ADDRESS_MODE_CLAMP));
    DRV(cuTexRefSetAddressMode(t, 1, CU_TR_ADDRESS_MODE_MIRROR));
    DRV(cuTexRefSetAddressMode(t, 2, CU_TR_ADDRESS_MODE_BORDER));
    DRV_EXPECT(cuTexRefSetAddressMode(t, 3, CU_TR_ADDRESS_MODE_CLAMP), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefSetAddressMode(t, 0, (CUaddress_mode)4), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefGetAddressMode(&am, t, 0));
    REQUIRE(am == CU_TR_ADDRESS_MODE_CLAMP);
    DRV(cuTexRefGetAddressMode(&am, t, 1));
    REQUIRE(am == CU_TR_ADDRESS_MODE_MIRROR);
    DRV(cuTexRefGetAddressMode(&am, t, 2));
    REQUIRE(am == CU_TR_ADDRESS_MODE_BORDER);
    DRV_EXPECT(cuTexRefGetAddressMode(&am, t, -1), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefGetAddressMode(NULL, t, 0), CUDA_ERROR_INVALID_VALUE);

    DRV(cuTexRefSetFilterMode(t, CU_TR_FILTER_MODE_LINEAR));
    DRV_EXPECT(cuTexRefSetFilterMode(t, (CUfilter_mode)2), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefGetFilterMode(&fm, t));
    REQUIRE(fm == CU_TR_FILTER_MODE_LINEAR);
    DRV(cuTexRefSetMipmapFilterMode(t, CU_TR_FILTER_MODE_LINEAR));
    DRV_EXPECT(cuTexRefSetMipmapFilterMode(t, (CUfilter_mode)5), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefGetMipmapFilterMode(&fm, t));
    REQUIRE(fm == CU_TR_FILTER_MODE_LINEAR);

    DRV(cuTexRefSetMipmapLevelBias(t, 1.5f));
    DRV(cuTexRefGetMipmapLevelBias(&bias, t));
    REQUIRE(bias == 1.5f);
    DRV(cuTexRefSetMipmapLevelClamp(t, 0.25f, 3.0f));
    DRV(cuTexRefGetMipmapLevelClamp(&lo, &hi, t));
    REQUIRE(lo == 0.25f && hi == 3.0f);
    DRV(cuTexRefSetMaxAnisotropy(t, 8));
    DRV(cuTexRefGetMaxAnisotropy(&aniso, t));
    REQUIRE(aniso == 8);
    float border[4] = {0.25f, 0.5f, 0.75f, 1.0f};
    DRV(cuTexRefSetBorderColor(t, border));
    DRV_EXPECT(cuTexRefSetBorderColor(t, NULL), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefGetBorderColor(color, t));
    REQUIRE(memcmp(color, border, sizeof border) == 0);

    DRV(cuTexRefSetFlags(t, CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES));
    DRV_EXPECT(cuTexRefSetFlags(t, 0x80), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefSetFlags(t, CU_TRSF_SRGB | 0x4), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefGetFlags(&flags, t));
    REQUIRE(flags == (CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES));
    DRV(cuTexRefSetFlags(t, CU_TRSF_SRGB | CU_TRSF_SEAMLESS_CUBEMAP | CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION));
    DRV(cuTexRefGetFlags(&flags, t));
    REQUIRE(flags == (CU_TRSF_SRGB | CU_TRSF_SEAMLESS_CUBEMAP | CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION));

    DRV(cuTexRefSetFormat(t, CU_AD_FORMAT_HALF, 2));
    DRV_EXPECT(cuTexRefSetFormat(t, CU_AD_FORMAT_FLOAT, 3), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefSetFormat(t, (CUarray_format)0x99, 1), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefGetFormat(&format, &channels, t));
    REQUIRE(format == CU_AD_FORMAT_HALF && channels == 2);
    DRV(cuTexRefGetFormat(NULL, &channels, t));
    DRV(cuTexRefGetFormat(&format, NULL, t));

    // Bound to an array: its format; then to a mipmapped array.
    CUDA_ARRAY_DESCRIPTOR d;
    memset(&d, 0, sizeof d);
    d.Width = 16; d.Height = 8; d.Format = CU_AD_FORMAT_UNSIGNED_INT8; d.NumChannels = 4;
    DRV(cuArrayCreate(&array, &d));
    DRV_EXPECT(cuTexRefSetArray(t, array, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefSetArray(t, NULL, CU_TRSA_OVERRIDE_FORMAT), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefSetArray(t, array, CU_TRSA_OVERRIDE_FORMAT));
    CUarray back;
    DRV(cuTexRefGetArray(&back, t));
    REQUIRE(back == array);
    DRV(cuTexRefGetFormat(&format, &channels, t));
    REQUIRE(format == CU_AD_FORMAT_UNSIGNED_INT8 && channels == 4);
    DRV_EXPECT(cuTexRefGetAddress(&address, t), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefGetMipmappedArray(&mipmapped, t), CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY3D_DESCRIPTOR d3;
    memset(&d3, 0, sizeof d3);
    d3.Width = 32; d3.Height = 32; d3.Format = CU_AD_FORMAT_FLOAT; d3.NumChannels = 1;
    DRV(cuMipmappedArrayCreate(&mipmapped, &d3, 3));
    DRV_EXPECT(cuTexRefSetMipmappedArray(t, mipmapped, 2), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefSetMipmappedArray(t, mipmapped, CU_TRSA_OVERRIDE_FORMAT));
    CUmipmappedArray mip_back;
    DRV(cuTexRefGetMipmappedArray(&mip_back, t));
    REQUIRE(mip_back == mipmapped);
    DRV_EXPECT(cuTexRefGetArray(&back, t), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefGetFormat(&format, &channels, t));
    REQUIRE(format == CU_AD_FORMAT_FLOAT && channels == 1);

    // Linear memory: cuMemAlloc's is aligned (offset 0); 4 bytes in, the texture reads from the aligned address.
    CUdeviceptr memory;
    DRV(cuMemAlloc(&memory, 8192));
    size_t offset = 99;
    DRV(cuTexRefSetAddress(&offset, t, memory, 4096));
    REQUIRE(offset == 0);
    DRV(cuTexRefGetAddress(&address, t));
    REQUIRE(address == memory);
    DRV_EXPECT(cuTexRefGetArray(&back, t), CUDA_ERROR_INVALID_VALUE);
    DRV(cuTexRefSetAddress(&offset, t, memory + 4, 1024));
    REQUIRE(offset == 4);
    DRV(cuTexRefGetAddress(&address, t));
    REQUIRE(address == memory);
    DRV(cuTexRefSetAddress(NULL, t, memory, 8192));
    DRV_EXPECT(cuTexRefSetAddress(&offset, t, memory + 4096, 8192), CUDA_ERROR_INVALID_VALUE);  // past the end
    DRV_EXPECT(cuTexRefSetAddress(&offset, t, 0x1000, 64), CUDA_ERROR_INVALID_VALUE);  // no allocation
    DRV(cuTexRefGetAddress(&address, t));
    REQUIRE(address == memory);

    // Pitched memory: aligned pointer and pitch; its descriptor's format becomes the reference's.
    CUdeviceptr pitched;
    size_t pitch;
    DRV(cuMemAllocPitch(&pitched, &pitch, 64 * 4, 16, 4));
    d.Width = 64; d.Height = 16; d.Format = CU_AD_FORMAT_FLOAT; d.NumChannels = 1;
    DRV(cuTexRefSetAddress2D(t, &d, pitched, pitch));
    DRV(cuTexRefGetAddress(&address, t));
    DRV(cuTexRefGetFormat(&format, &channels, t));
    REQUIRE(address == pitched && format == CU_AD_FORMAT_FLOAT && channels == 1);
    DRV_EXPECT(cuTexRefSetAddress2D(t, &d, pitched + 4, pitch), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefSetAddress2D(t, &d, pitched, pitch + 4), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefSetAddress2D(t, NULL, pitched, pitch), CUDA_ERROR_INVALID_VALUE);
    d.Width = pitch;  // rows wider than the pitch
    DRV_EXPECT(cuTexRefSetAddress2D(t, &d, pitched, pitch), CUDA_ERROR_INVALID_VALUE);
    d.Width = 64; d.NumChannels = 3;
    DRV_EXPECT(cuTexRefSetAddress2D(t, &d, pitched, pitch), CUDA_ERROR_INVALID_VALUE);

    // Destroyed: its handle is no reference any more.
    DRV(cuTexRefDestroy(t));
    DRV_EXPECT(cuTexRefGetFlags(&flags, t), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuTexRefSetFilterMode(t, CU_TR_FILTER_MODE_POINT), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuTexRefGetFlags(&flags, NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuTexRefDestroy(NULL), CUDA_ERROR_INVALID_VALUE);

    // Surface references: an array made for surface loads and stores, Flags 0.
    CUsurfref s;
    DRV(cuModuleGetSurfRef(&s, module_, "surfImage"));
    DRV_EXPECT(cuSurfRefGetArray(&back, s), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuSurfRefSetArray(s, array, 0), CUDA_ERROR_INVALID_VALUE);  // no CUDA_ARRAY3D_SURFACE_LDST
    CUarray surface_array;
    d3.Width = 16; d3.Height = 8; d3.Depth = 0; d3.Format = CU_AD_FORMAT_SIGNED_INT32; d3.NumChannels = 1;
    d3.Flags = CUDA_ARRAY3D_SURFACE_LDST;
    DRV(cuArray3DCreate(&surface_array, &d3));
    DRV_EXPECT(cuSurfRefSetArray(s, surface_array, 1), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuSurfRefGetArray(&back, s), CUDA_ERROR_INVALID_VALUE);
    DRV(cuSurfRefSetArray(s, surface_array, 0));
    DRV(cuSurfRefGetArray(&back, s));
    REQUIRE(back == surface_array);
    DRV_EXPECT(cuSurfRefGetArray(NULL, s), CUDA_ERROR_INVALID_VALUE);

    DRV(cuArrayDestroy(surface_array));
    DRV(cuArrayDestroy(array));
    DRV(cuMipmappedArrayDestroy(mipmapped));
    DRV(cuMemFree(memory));
    DRV(cuMemFree(pitched));
    printf("ok texref_state\n");
}

static void texref_sampling() {
    // A reference over linear memory: bound before its format is set, read by fetchLinear.
    const int count = 1000;
    std::vector<float> values(count), got(count);
    for (int i = 0; i < count; i++) values[i] = 0.5f * i - 3.0f;
    CUdeviceptr memory, out;
    DRV(cuMemAlloc(&memory, count * 4));
    DRV(cuMemAlloc(&out, count * 4));
    DRV(cuMemcpyHtoD(memory, values.data(), count * 4));
    CUtexref linear = texref("texLinear");
    size_t offset = 99;
    DRV(cuTexRefSetAddress(&offset, linear, memory, count * 4));
    REQUIRE(offset == 0);
    DRV(cuTexRefSetFormat(linear, CU_AD_FORMAT_FLOAT, 1));
    DRV(cuTexRefSetFlags(linear, CU_TRSF_READ_AS_INTEGER));

    CUfunction fetch = function("fetchLinear");
    DRV(cuParamSetTexRef(fetch, CU_PARAM_TR_DEFAULT, linear));
    const int n = 300;
    DRV(cuParamSetv(fetch, 0, &out, 8));
    DRV(cuParamSeti(fetch, 8, n));
    DRV(cuParamSeti(fetch, 12, 0));
    DRV(cuParamSetSize(fetch, 16));
    DRV(cuFuncSetBlockShape(fetch, 128, 1, 1));
    DRV(cuLaunchGrid(fetch, (n + 127) / 128, 1));
    DRV(cuMemcpyDtoH(got.data(), out, n * 4));
    for (int i = 0; i < n; i++) REQUIRE(got[i] == values[i]);

    // Rebound 40 bytes in: the texture reads from the aligned address, the kernel adds the offset in texels.
    DRV(cuTexRefSetAddress(&offset, linear, memory + 40, (count - 10) * 4));
    REQUIRE(offset == 40);
    int texels = (int)(offset / 4);
    DRV(cuParamSeti(fetch, 12, texels));
    DRV(cuLaunchGrid(fetch, (n + 127) / 128, 1));
    DRV(cuMemcpyDtoH(got.data(), out, n * 4));
    for (int i = 0; i < n; i++) REQUIRE(got[i] == values[i + 10]);

    // The newer launch reads the references too.
    int start = 500;
    int m = n;
    void *params[] = {&out, &m, &start};
    DRV(cuLaunchKernel(fetch, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
    DRV(cuMemcpyDtoH(got.data(), out, n * 4));
    for (int i = 0; i < n; i++) REQUIRE(got[i] == values[i + 500]);

    // A reference over an array, point-sampled and clamped: sampleImage reads past the edges.
    const int width = 16, height = 8, wide = 20, tall = 10;
    CUDA_ARRAY_DESCRIPTOR d;
    memset(&d, 0, sizeof d);
    d.Width = width; d.Height = height; d.Format = CU_AD_FORMAT_FLOAT; d.NumChannels = 1;
    CUarray image;
    DRV(cuArrayCreate(&image, &d));
    std::vector<float> pixels(width * height);
    for (int i = 0; i < width * height; i++) pixels[i] = 3.0f * i + 1.0f;
    DRV(cuMemcpyHtoA(image, 0, pixels.data(), pixels.size() * 4));
    CUtexref tex = texref("texImage");
    DRV(cuTexRefSetArray(tex, image, CU_TRSA_OVERRIDE_FORMAT));
    DRV(cuTexRefSetAddressMode(tex, 0, CU_TR_ADDRESS_MODE_CLAMP));
    DRV(cuTexRefSetAddressMode(tex, 1, CU_TR_ADDRESS_MODE_CLAMP));
    DRV(cuTexRefSetFilterMode(tex, CU_TR_FILTER_MODE_POINT));
    DRV(cuTexRefSetFlags(tex, 0));
    CUfunction sample = function("sampleImage");
    DRV(cuParamSetTexRef(sample, CU_PARAM_TR_DEFAULT, tex));
    DRV(cuParamSetv(sample, 0, &out, 8));
    DRV(cuParamSeti(sample, 8, wide));
    DRV(cuParamSeti(sample, 12, tall));
    DRV(cuParamSetSize(sample, 16));
    DRV(cuFuncSetBlockShape(sample, 8, 8, 1));
    DRV(cuLaunchGrid(sample, (wide + 7) / 8, (tall + 7) / 8));
    DRV(cuMemcpyDtoH(got.data(), out, wide * tall * 4));
    for (int y = 0; y < tall; y++)
        for (int x = 0; x < wide; x++) {
            int cx = x < width ? x : width - 1, cy = y < height ? y : height - 1;
            REQUIRE(got[y * wide + x] == pixels[cy * width + cx]);
        }

    // Bound to another array: the next launch samples that one.
    CUarray second;
    DRV(cuArrayCreate(&second, &d));
    std::vector<float> others(width * height);
    for (int i = 0; i < width * height; i++) others[i] = -2.0f * i;
    DRV(cuMemcpyHtoA(second, 0, others.data(), others.size() * 4));
    DRV(cuTexRefSetArray(tex, second, CU_TRSA_OVERRIDE_FORMAT));
    DRV(cuLaunchGrid(sample, (wide + 7) / 8, (tall + 7) / 8));
    DRV(cuMemcpyDtoH(got.data(), out, wide * tall * 4));
    for (int y = 0; y < tall; y++)
        for (int x = 0; x < wide; x++) {
            int cx = x < width ? x : width - 1, cy = y < height ? y : height - 1;
            REQUIRE(got[y * wide + x] == others[cy * width + cx]);
        }

    // A surface reference: writeSurface fills the array.
    CUDA_ARRAY3D_DESCRIPTOR d3;
    memset(&d3, 0, sizeof d3);
    d3.Width = width; d3.Height = height; d3.Format = CU_AD_FORMAT_SIGNED_INT32; d3.NumChannels = 1;
    d3.Flags = CUDA_ARRAY3D_SURFACE_LDST;
    CUarray target;
    DRV(cuArray3DCreate(&target, &d3));
    CUsurfref surf;
    DRV(cuModuleGetSurfRef(&surf, module_, "surfImage"));
    DRV(cuSurfRefSetArray(surf, target, 0));
    CUfunction write = function("writeSurface");
    DRV(cuParamSeti(write, 0, width));
    DRV(cuParamSeti(write, 4, height));
    DRV(cuParamSetSize(write, 8));
    DRV(cuFuncSetBlockShape(write, 16, 4, 1));
    DRV(cuLaunchGrid(write, 1, 2));
    std::vector<int> written(width * height);
    DRV(cuMemcpyAtoH(written.data(), target, 0, written.size() * 4));
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++) REQUIRE(written[y * width + x] == x + 1000 * y);

    DRV(cuArrayDestroy(target));
    DRV(cuArrayDestroy(second));
    DRV(cuArrayDestroy(image));
    DRV(cuMemFree(memory));
    DRV(cuMemFree(out));
    printf("ok texref_sampling\n");
}

static void unloaded() {
    CUtexref t = texref("texLinear");
    CUsurfref s;
    DRV(cuModuleGetSurfRef(&s, module_, "surfImage"));
    CUfunction f = function("legacyReport");
    DRV(cuModuleUnload(module_));
    unsigned flags;
    CUarray array;
    DRV_EXPECT(cuTexRefGetFlags(&flags, t), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuSurfRefGetArray(&array, s), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuModuleGetTexRef(&t, module_, "texLinear"), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuFuncSetBlockShape(f, 1, 1, 1), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuLaunch(f), CUDA_ERROR_INVALID_HANDLE);
    printf("ok unloaded\n");
}

static std::vector<char> read_file(const char *path) {
    FILE *file = fopen(path, "rb");
    REQUIRE(file != NULL);
    std::vector<char> data;
    char buffer[4096];
    size_t got;
    while ((got = fread(buffer, 1, sizeof buffer, file)) > 0) data.insert(data.end(), buffer, buffer + got);
    fclose(file);
    data.push_back(0);
    return data;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: driver_legacy KERNELS.ptx [SECTION...]\n");
        return 2;
    }
    CUtexref none;
    DRV_EXPECT(cuTexRefCreate(&none), CUDA_ERROR_NOT_INITIALIZED);
    DRV(cuInit(0));
    CUcontext ctx;
    DRV(cuDevicePrimaryCtxRetain(&ctx, 0));
    DRV(cuCtxSetCurrent(ctx));
    std::vector<char> ptx = read_file(argv[1]);
    DRV(cuModuleLoadData(&module_, ptx.data()));
    struct { const char *name; void (*run)(); } sections[] = {
        {"legacy_launch", legacy_launch}, {"legacy_errors", legacy_errors}, {"texref_lookup", texref_lookup},
        {"texref_state", texref_state}, {"texref_sampling", texref_sampling}, {"unloaded", unloaded},
    };
    for (auto &section : sections) {
        bool chosen = argc == 2;
        for (int i = 2; i < argc; i++) chosen |= strcmp(argv[i], section.name) == 0;
        if (chosen) section.run();
    }
    printf("PASSED driver_legacy\n");
    return 0;
}
