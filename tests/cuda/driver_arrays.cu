// The driver API's CUDA arrays, texture and surface objects: arrays of each
// shape and their descriptors, the 1-D copies at byte offsets, cuMemcpy2D/3D
// (and 3DPeer) with array sides, mipmapped arrays, objects and their queries
// (each API's objects answered by the other's), a kernel launched with
// cuLaunchKernel that samples a texture and writes a surface, and bad input.
// Built with the runtime, linked to libcuda.so.1; run with two GPUs.  Each
// section prints "ok NAME"; a failure prints "FAILED ...".
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "driver_check.h"

// out(x, y) = 2 * the texel right of (x, y), clamped at the right edge.
__global__ void shiftAndDouble(cudaTextureObject_t tex, cudaSurfaceObject_t surf, int width, int height) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) surf2Dwrite(2.0f * tex2D<float>(tex, x + 1.5f, y + 0.5f), surf, x * 4, y);
}

// out[i] = texel i + 1, from a texture over linear memory.
__global__ void fetchPlusOne(cudaTextureObject_t tex, int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<int>(tex, i) + 1;
}

static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)(i * 131 + seed * 7 + (i >> 8)); }

static std::vector<unsigned char> patterned(size_t n, unsigned seed) {
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; i++) v[i] = pattern(i, seed);
    return v;
}

static CUarray make_array(size_t width, size_t height, size_t depth, CUarray_format format, unsigned channels,
                          unsigned flags = 0) {
    CUDA_ARRAY3D_DESCRIPTOR d;
    memset(&d, 0, sizeof d);
    d.Width = width; d.Height = height; d.Depth = depth; d.Format = format; d.NumChannels = channels; d.Flags = flags;
    CUarray array;
    DRV(cuArray3DCreate(&array, &d));
    return array;
}

static void require_descriptor(CUarray array, size_t width, size_t height, size_t depth, CUarray_format format,
                               unsigned channels, unsigned flags) {
    CUDA_ARRAY3D_DESCRIPTOR d;
    DRV(cuArray3DGetDescriptor(&d, array));
    REQUIRE(d.Width == width && d.Height == height && d.Depth == depth && d.Format == format &&
            d.NumChannels == channels && d.Flags == flags);
}

static void arrays() {
    // 1-D and 2-D with cuArrayCreate.
    CUDA_ARRAY_DESCRIPTOR d;
    memset(&d, 0, sizeof d);
    d.Width = 100; d.Height = 0; d.Format = CU_AD_FORMAT_FLOAT; d.NumChannels = 1;
    CUarray line, image;
    DRV(cuArrayCreate(&line, &d));
    d.Width = 64; d.Height = 16; d.Format = CU_AD_FORMAT_UNSIGNED_INT8; d.NumChannels = 4;
    DRV(cuArrayCreate(&image, &d));
    CUDA_ARRAY_DESCRIPTOR back;
    DRV(cuArrayGetDescriptor(&back, line));
    REQUIRE(back.Width == 100 && back.Height == 0 && back.Format == CU_AD_FORMAT_FLOAT && back.NumChannels == 1);
    DRV(cuArrayGetDescriptor(&back, image));
    REQUIRE(back.Width == 64 && back.Height == 16 && back.Format == CU_AD_FORMAT_UNSIGNED_INT8 &&
            back.NumChannels == 4);
    require_descriptor(image, 64, 16, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0);

    // 3-D, layered, cubemap.
    CUarray volume = make_array(8, 6, 5, CU_AD_FORMAT_HALF, 2);
    const unsigned layered = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST;
    CUarray layers = make_array(16, 8, 3, CU_AD_FORMAT_SIGNED_INT16, 1, layered);
    CUarray cube = make_array(8, 8, 6, CU_AD_FORMAT_UNSIGNED_INT32, 2, CUDA_ARRAY3D_CUBEMAP);
    require_descriptor(volume, 8, 6, 5, CU_AD_FORMAT_HALF, 2, 0);
    require_descriptor(layers, 16, 8, 3, CU_AD_FORMAT_SIGNED_INT16, 1, layered);
    require_descriptor(cube, 8, 8, 6, CU_AD_FORMAT_UNSIGNED_INT32, 2, CUDA_ARRAY3D_CUBEMAP);

    // A CUarray is a cudaArray_t: the runtime describes the driver's arrays, and the driver the runtime's.
    cudaChannelFormatDesc channel;
    CHECK(cudaGetChannelDesc(&channel, (cudaArray_t)image));
    REQUIRE(channel.x == 8 && channel.y == 8 && channel.z == 8 && channel.w == 8 &&
            channel.f == cudaChannelFormatKindUnsigned);
    CHECK(cudaGetChannelDesc(&channel, (cudaArray_t)volume));
    REQUIRE(channel.x == 16 && channel.y == 16 && channel.z == 0 && channel.f == cudaChannelFormatKindFloat);
    cudaExtent extent;
    unsigned flags = 99;
    CHECK(cudaArrayGetInfo(&channel, &extent, &flags, (cudaArray_t)layers));
    REQUIRE(extent.width == 16 && extent.height == 8 && extent.depth == 3 &&
            flags == (cudaArrayLayered | cudaArraySurfaceLoadStore) && channel.f == cudaChannelFormatKindSigned);
    cudaArray_t runtime_array;
    cudaChannelFormatDesc int2_desc = cudaCreateChannelDesc<int2>();
    CHECK(cudaMallocArray(&runtime_array, &int2_desc, 20, 4));
    require_descriptor((CUarray)runtime_array, 20, 4, 0, CU_AD_FORMAT_SIGNED_INT32, 2, 0);
    DRV(cuArrayDestroy((CUarray)runtime_array));  // each API frees the other's arrays
    CHECK(cudaFreeArray((cudaArray_t)cube));

    DRV(cuArrayDestroy(line));
    DRV(cuArrayDestroy(image));
    DRV(cuArrayDestroy(volume));
    DRV(cuArrayDestroy(layers));
    DRV_EXPECT(cuArrayDestroy(layers), CUDA_ERROR_INVALID_HANDLE);  // destroyed already
    DRV_EXPECT(cuArrayGetDescriptor(&back, image), CUDA_ERROR_INVALID_HANDLE);
    size_t linear_width = 0, runtime_width = 0;  // the same limit through both APIs
    DRV(cuDeviceGetTexture1DLinearMaxWidth(&linear_width, CU_AD_FORMAT_FLOAT, 4, 0));
    cudaChannelFormatDesc float4_desc = cudaCreateChannelDesc<float4>();
    CHECK(cudaDeviceGetTexture1DLinearMaxWidth(&runtime_width, &float4_desc, 0));
    REQUIRE(linear_width > 0 && linear_width == runtime_width);
    DRV_EXPECT(cuDeviceGetTexture1DLinearMaxWidth(&linear_width, CU_AD_FORMAT_FLOAT, 3, 0), CUDA_ERROR_INVALID_VALUE);
    printf("ok arrays\n");
}

static void copies() {
    // A 40 x 10 float array (160-byte rows) and a model of its bytes.
    const size_t row = 160, size = row * 10;
    CUarray a = make_array(40, 10, 0, CU_AD_FORMAT_FLOAT, 1);
    std::vector<unsigned char> model = patterned(size, 1), got(size);
    DRV(cuMemcpyHtoA(a, 0, model.data(), size));
    // Offsets that start and end inside rows run row after row.
    std::vector<unsigned char> part = patterned(1000, 2);
    DRV(cuMemcpyHtoA(a, 100, part.data(), part.size()));
    memcpy(&model[100], part.data(), part.size());
    DRV(cuMemcpyAtoH(got.data(), a, 0, size));
    REQUIRE(got == model);
    std::vector<unsigned char> piece(300);
    DRV(cuMemcpyAtoH(piece.data(), a, 164, piece.size()));
    REQUIRE(memcmp(piece.data(), &model[164], piece.size()) == 0);

    // Device memory to and from the array.
    CUdeviceptr d, e;
    DRV(cuMemAlloc(&d, size));
    DRV(cuMemAlloc(&e, size));
    std::vector<unsigned char> third = patterned(size, 3);
    DRV(cuMemcpyHtoD(d, third.data(), size));
    DRV(cuMemcpyDtoA(a, 320, d, 640));
    memcpy(&model[320], third.data(), 640);
    DRV(cuMemcpyAtoD(e, a, 0, size));
    DRV(cuMemcpyDtoH(got.data(), e, size));
    REQUIRE(got == model);

    // Array to array: another format, elements of the same size, rows of another length.
    CUarray b = make_array(50, 8, 0, CU_AD_FORMAT_UNSIGNED_INT32, 1);
    std::vector<unsigned char> b_model(size, 0);
    DRV(cuMemcpyHtoA(b, 0, b_model.data(), size));
    DRV(cuMemcpyAtoA(b, 40, a, 80, 1000));
    memcpy(&b_model[40], &model[80], 1000);
    DRV(cuMemcpyAtoH(got.data(), b, 0, size));
    REQUIRE(got == b_model);

    // cuMemcpy2D: a 24-byte x 5 block of a host image into the array at (byte 8, row 2), back whole.
    const size_t hp = 64;
    std::vector<unsigned char> host_image = patterned(hp * 8, 4);
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST; c.srcHost = host_image.data(); c.srcPitch = hp; c.srcXInBytes = 4; c.srcY = 1;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY; c.dstArray = a; c.dstXInBytes = 8; c.dstY = 2;
    c.WidthInBytes = 24; c.Height = 5;
    DRV(cuMemcpy2D(&c));
    for (size_t y = 0; y < 5; y++) memcpy(&model[(y + 2) * row + 8], &host_image[(y + 1) * hp + 4], 24);
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY; c.srcArray = a;
    c.dstMemoryType = CU_MEMORYTYPE_HOST; c.dstHost = got.data(); c.dstPitch = row;
    c.WidthInBytes = row; c.Height = 10;
    DRV(cuMemcpy2D(&c));
    REQUIRE(got == model);

    // cuMemcpy3D: a host volume into a 3-D array, then a box of it to pitched device memory.
    const size_t w = 8, h = 6, depth = 4, vrow = w * 2;  // uint16 texels
    CUarray v = make_array(w, h, depth, CU_AD_FORMAT_UNSIGNED_INT16, 1);
    std::vector<unsigned char> vol = patterned(vrow * h * depth, 5);
    CUDA_MEMCPY3D m;
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_HOST; m.srcHost = vol.data(); m.srcPitch = vrow; m.srcHeight = h;
    m.dstMemoryType = CU_MEMORYTYPE_ARRAY; m.dstArray = v;
    m.WidthInBytes = vrow; m.Height = h; m.Depth = depth;
    DRV(cuMemcpy3D(&m));
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_ARRAY; m.srcArray = v; m.srcXInBytes = 4; m.srcY = 1; m.srcZ = 1;
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE; m.dstDevice = d; m.dstPitch = 10; m.dstHeight = 3;
    m.WidthInBytes = 8; m.Height = 3; m.Depth = 2;
    DRV(cuMemcpy3D(&m));
    std::vector<unsigned char> box(10 * 3 * 2);
    DRV(cuMemcpyDtoH(box.data(), d, box.size()));
    for (size_t z = 0; z < 2; z++)
        for (size_t y = 0; y < 3; y++)
            REQUIRE(memcmp(&box[(z * 3 + y) * 10], &vol[((z + 1) * h + y + 1) * vrow + 4], 8) == 0);

    // The asynchronous forms in a stream (into pageable memory: complete on return).
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    std::vector<unsigned char> fourth = patterned(size, 6);
    DRV(cuMemcpyHtoAAsync(a, 40, fourth.data(), 400, stream));
    memcpy(&model[40], fourth.data(), 400);
    DRV(cuMemcpyAtoHAsync(got.data(), a, 0, size, stream));
    REQUIRE(got == model);

    DRV(cuStreamDestroy(stream));
    DRV(cuMemFree(d));
    DRV(cuMemFree(e));
    DRV(cuArrayDestroy(a));
    DRV(cuArrayDestroy(b));
    DRV(cuArrayDestroy(v));
    printf("ok copies\n");
}

static void async_pinned() {
    // Asynchronous copies out of arrays into pinned memory land by the stream's synchronisation.
    const size_t row = 160, size = row * 10;
    CUarray a = make_array(40, 10, 0, CU_AD_FORMAT_FLOAT, 1);
    const size_t w = 8, h = 6, depth = 4, vrow = w * 2;
    CUarray v = make_array(w, h, depth, CU_AD_FORMAT_UNSIGNED_INT16, 1);
    std::vector<unsigned char> flat = patterned(size, 10), vol = patterned(vrow * h * depth, 11);
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    unsigned char *pinned;
    DRV(cuMemAllocHost((void **)&pinned, size + vol.size()));
    memset(pinned, 0, size + vol.size());
    DRV(cuMemcpyHtoAAsync(a, 0, flat.data(), size, stream));
    CUDA_MEMCPY3D m;
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_HOST; m.srcHost = vol.data(); m.srcPitch = vrow; m.srcHeight = h;
    m.dstMemoryType = CU_MEMORYTYPE_ARRAY; m.dstArray = v;
    m.WidthInBytes = vrow; m.Height = h; m.Depth = depth;
    DRV(cuMemcpy3DAsync(&m, stream));
    DRV(cuMemcpyAtoHAsync(pinned, a, 0, size, stream));
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_ARRAY; m.srcArray = v;
    m.dstMemoryType = CU_MEMORYTYPE_HOST; m.dstHost = pinned + size; m.dstPitch = vrow; m.dstHeight = h;
    m.WidthInBytes = vrow; m.Height = h; m.Depth = depth;
    DRV(cuMemcpy3DAsync(&m, stream));
    DRV(cuStreamSynchronize(stream));
    REQUIRE(memcmp(pinned, flat.data(), size) == 0);
    REQUIRE(memcmp(pinned + size, vol.data(), vol.size()) == 0);
    DRV(cuMemFreeHost(pinned));
    DRV(cuStreamDestroy(stream));
    DRV(cuArrayDestroy(a));
    DRV(cuArrayDestroy(v));
    printf("ok async_pinned\n");
}

static void peer() {
    // cuMemcpy3DPeer: a 3-D array on GPU0 to pitched memory on GPU1, and back into another array.
    CUcontext ctx0, ctx1;
    DRV(cuDevicePrimaryCtxRetain(&ctx0, 0));
    DRV(cuDevicePrimaryCtxRetain(&ctx1, 1));
    CHECK(cudaSetDevice(0));
    const size_t w = 12, h = 5, depth = 3, row = w * 4;
    CUarray src = make_array(w, h, depth, CU_AD_FORMAT_SIGNED_INT32, 1);
    CUarray back = make_array(w, h, depth, CU_AD_FORMAT_SIGNED_INT32, 1);
    std::vector<unsigned char> vol = patterned(row * h * depth, 7), got(vol.size());
    CUDA_MEMCPY3D m;
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_HOST; m.srcHost = vol.data(); m.srcPitch = row; m.srcHeight = h;
    m.dstMemoryType = CU_MEMORYTYPE_ARRAY; m.dstArray = src;
    m.WidthInBytes = row; m.Height = h; m.Depth = depth;
    DRV(cuMemcpy3D(&m));
    CHECK(cudaSetDevice(1));
    CUdeviceptr on1;
    const size_t pitch = 64;
    DRV(cuMemAlloc(&on1, pitch * h * depth));
    CUDA_MEMCPY3D_PEER p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = CU_MEMORYTYPE_ARRAY; p.srcArray = src; p.srcContext = ctx0;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE; p.dstDevice = on1; p.dstPitch = pitch; p.dstHeight = h; p.dstContext = ctx1;
    p.WidthInBytes = row; p.Height = h; p.Depth = depth;
    DRV(cuMemcpy3DPeer(&p));
    CUDA_MEMCPY3D_PEER q = p;
    q.srcMemoryType = CU_MEMORYTYPE_DEVICE; q.srcDevice = on1; q.srcPitch = pitch; q.srcHeight = h; q.srcContext = ctx1;
    q.srcArray = NULL;
    q.dstMemoryType = CU_MEMORYTYPE_ARRAY; q.dstArray = back; q.dstContext = ctx0;
    CUstream stream;
    DRV(cuStreamCreate(&stream, 0));
    DRV(cuMemcpy3DPeerAsync(&q, stream));
    DRV(cuStreamSynchronize(stream));
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_ARRAY; m.srcArray = back;
    m.dstMemoryType = CU_MEMORYTYPE_HOST; m.dstHost = got.data(); m.dstPitch = row; m.dstHeight = h;
    m.WidthInBytes = row; m.Height = h; m.Depth = depth;
    DRV(cuMemcpy3D(&m));
    REQUIRE(got == vol);
    q.dstContext = NULL;
    DRV_EXPECT(cuMemcpy3DPeer(&q), CUDA_ERROR_INVALID_CONTEXT);
    DRV(cuStreamDestroy(stream));
    DRV(cuMemFree(on1));
    CHECK(cudaSetDevice(0));
    DRV(cuArrayDestroy(src));
    DRV(cuArrayDestroy(back));
    DRV(cuDevicePrimaryCtxRelease(0));
    DRV(cuDevicePrimaryCtxRelease(1));
    printf("ok peer\n");
}

static void mipmapped() {
    CUDA_ARRAY3D_DESCRIPTOR d;
    memset(&d, 0, sizeof d);
    d.Width = 32; d.Height = 16; d.Format = CU_AD_FORMAT_FLOAT; d.NumChannels = 1;
    CUmipmappedArray mip;
    DRV(cuMipmappedArrayCreate(&mip, &d, 4));
    CUarray levels[4];
    for (unsigned i = 0; i < 4; i++) {
        DRV(cuMipmappedArrayGetLevel(&levels[i], mip, i));
        require_descriptor(levels[i], 32 >> i, 16 >> i, 0, CU_AD_FORMAT_FLOAT, 1, 0);
    }
    CUarray again;
    DRV(cuMipmappedArrayGetLevel(&again, mip, 2));
    REQUIRE(again == levels[2]);
    cudaArray_t runtime_level;
    CHECK(cudaGetMipmappedArrayLevel(&runtime_level, (cudaMipmappedArray_t)mip, 2));
    REQUIRE((CUarray)runtime_level == levels[2]);
    DRV_EXPECT(cuMipmappedArrayGetLevel(&again, mip, 4), CUDA_ERROR_INVALID_VALUE);

    // Copies into levels 2 and 1, each read back.
    std::vector<unsigned char> two = patterned(8 * 4 * 4, 8), got(two.size());
    DRV(cuMemcpyHtoA(levels[2], 0, two.data(), two.size()));
    DRV(cuMemcpyAtoH(got.data(), levels[2], 0, got.size()));
    REQUIRE(got == two);
    DRV_EXPECT(cuMemcpyHtoA(levels[2], 4, two.data(), two.size()), CUDA_ERROR_INVALID_VALUE);  // past the level's end
    std::vector<unsigned char> one = patterned(16 * 8 * 4, 9), got_one(one.size());
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST; c.srcHost = one.data(); c.srcPitch = 64;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY; c.dstArray = levels[1];
    c.WidthInBytes = 64; c.Height = 8;
    DRV(cuMemcpy2D(&c));
    DRV(cuMemcpyAtoH(got_one.data(), levels[1], 0, got_one.size()));
    REQUIRE(got_one == one);
    DRV(cuMemcpyAtoH(got.data(), levels[2], 0, got.size()));  // level 2 untouched
    REQUIRE(got == two);

    DRV_EXPECT(cuArrayDestroy(levels[1]), CUDA_ERROR_INVALID_VALUE);  // the mipmapped array's
    DRV_EXPECT(cuMipmappedArrayDestroy((CUmipmappedArray)levels[0]), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuMipmappedArrayCreate(&mip, &d, 0), CUDA_ERROR_INVALID_VALUE);
    DRV(cuMipmappedArrayDestroy(mip));
    DRV_EXPECT(cuArray3DGetDescriptor(&d, levels[0]), CUDA_ERROR_INVALID_HANDLE);  // gone with it
    printf("ok mipmapped\n");
}

// Device memory a texture may start at: `size` bytes from the texture
// alignment on (cudaMalloc's own alignment may be less); *raw is what to free.
static CUdeviceptr texture_memory(CUdeviceptr *raw, size_t size) {
    int alignment;
    DRV(cuDeviceGetAttribute(&alignment, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 0));
    DRV(cuMemAlloc(raw, size + alignment));
    return (*raw + alignment - 1) / alignment * alignment;
}

static CUDA_TEXTURE_DESC point_texture(unsigned flags) {
    CUDA_TEXTURE_DESC t;
    memset(&t, 0, sizeof t);
    t.addressMode[0] = t.addressMode[1] = t.addressMode[2] = CU_TR_ADDRESS_MODE_CLAMP;
    t.filterMode = CU_TR_FILTER_MODE_POINT;
    t.flags = flags;
    return t;
}

static void objects() {
    CUarray a = make_array(16, 8, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SURFACE_LDST);
    CUDA_RESOURCE_DESC r;
    memset(&r, 0, sizeof r);
    r.resType = CU_RESOURCE_TYPE_ARRAY;
    r.res.array.hArray = a;
    CUDA_TEXTURE_DESC t;
    memset(&t, 0, sizeof t);
    t.addressMode[0] = CU_TR_ADDRESS_MODE_WRAP; t.addressMode[1] = CU_TR_ADDRESS_MODE_MIRROR;
    t.addressMode[2] = CU_TR_ADDRESS_MODE_BORDER;
    t.filterMode = CU_TR_FILTER_MODE_LINEAR;
    t.flags = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION;
    t.maxAnisotropy = 4; t.mipmapFilterMode = CU_TR_FILTER_MODE_LINEAR; t.mipmapLevelBias = 0.5f;
    t.minMipmapLevelClamp = 0.25f; t.maxMipmapLevelClamp = 3.0f;
    t.borderColor[0] = 0.25f; t.borderColor[1] = 0.5f; t.borderColor[2] = 0.75f; t.borderColor[3] = 1.0f;
    CUDA_RESOURCE_VIEW_DESC v;
    memset(&v, 0, sizeof v);
    v.format = CU_RES_VIEW_FORMAT_FLOAT_1X32; v.width = 16; v.height = 8;
    CUtexObject tex;
    DRV(cuTexObjectCreate(&tex, &r, &t, &v));

    // The driver's queries give back what was given.
    CUDA_RESOURCE_DESC r_back;
    DRV(cuTexObjectGetResourceDesc(&r_back, tex));
    REQUIRE(r_back.resType == CU_RESOURCE_TYPE_ARRAY && r_back.res.array.hArray == a && r_back.flags == 0);
    CUDA_TEXTURE_DESC t_back;
    DRV(cuTexObjectGetTextureDesc(&t_back, tex));
    REQUIRE(memcmp(&t_back, &t, sizeof t) == 0);
    CUDA_RESOURCE_VIEW_DESC v_back;
    DRV(cuTexObjectGetResourceViewDesc(&v_back, tex));
    REQUIRE(memcmp(&v_back, &v, sizeof v) == 0);

    // ...and the runtime's agree.
    cudaTextureDesc rt;
    CHECK(cudaGetTextureObjectTextureDesc(&rt, tex));
    REQUIRE(rt.addressMode[0] == cudaAddressModeWrap && rt.addressMode[1] == cudaAddressModeMirror &&
            rt.addressMode[2] == cudaAddressModeBorder && rt.filterMode == cudaFilterModeLinear);
    REQUIRE(rt.readMode == cudaReadModeElementType && rt.normalizedCoords == 1 && rt.sRGB == 0 &&
            rt.disableTrilinearOptimization == 1 && rt.seamlessCubemap == 0);
    REQUIRE(rt.maxAnisotropy == 4 && rt.mipmapFilterMode == cudaFilterModeLinear && rt.mipmapLevelBias == 0.5f &&
            rt.minMipmapLevelClamp == 0.25f && rt.maxMipmapLevelClamp == 3.0f);
    REQUIRE(rt.borderColor[0] == 0.25f && rt.borderColor[1] == 0.5f && rt.borderColor[2] == 0.75f &&
            rt.borderColor[3] == 1.0f);
    cudaResourceDesc rr;
    CHECK(cudaGetTextureObjectResourceDesc(&rr, tex));
    REQUIRE(rr.resType == cudaResourceTypeArray && rr.res.array.array == (cudaArray_t)a);
    cudaResourceViewDesc rv;
    CHECK(cudaGetTextureObjectResourceViewDesc(&rv, tex));
    REQUIRE(rv.format == cudaResViewFormatFloat1 && rv.width == 16 && rv.height == 8 && rv.depth == 0);

    // The runtime's object over linear memory, queried by the driver (made without a view).
    CUdeviceptr words_raw;
    const size_t n = 256;
    CUdeviceptr words = texture_memory(&words_raw, n * 4);
    cudaResourceDesc lr;
    memset(&lr, 0, sizeof lr);
    lr.resType = cudaResourceTypeLinear;
    lr.res.linear.devPtr = (void *)words;
    lr.res.linear.desc = cudaCreateChannelDesc<float>();
    lr.res.linear.sizeInBytes = n * 4;
    cudaTextureDesc lt;
    memset(&lt, 0, sizeof lt);
    lt.readMode = cudaReadModeNormalizedFloat;
    lt.sRGB = 1;
    cudaTextureObject_t runtime_tex;
    CHECK(cudaCreateTextureObject(&runtime_tex, &lr, &lt, NULL));
    DRV(cuTexObjectGetResourceDesc(&r_back, runtime_tex));
    REQUIRE(r_back.resType == CU_RESOURCE_TYPE_LINEAR && r_back.res.linear.devPtr == words &&
            r_back.res.linear.format == CU_AD_FORMAT_FLOAT && r_back.res.linear.numChannels == 1 &&
            r_back.res.linear.sizeInBytes == n * 4);
    DRV(cuTexObjectGetTextureDesc(&t_back, runtime_tex));
    REQUIRE(t_back.flags == CU_TRSF_SRGB && t_back.filterMode == CU_TR_FILTER_MODE_POINT);
    DRV_EXPECT(cuTexObjectGetResourceViewDesc(&v_back, runtime_tex), CUDA_ERROR_INVALID_VALUE);  // as cuda.h says
    DRV(cuTexObjectDestroy(runtime_tex));  // each API destroys the other's objects

    // The driver's over pitched memory, queried by the runtime.
    int pitch_alignment;
    DRV(cuDeviceGetAttribute(&pitch_alignment, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 0));
    const size_t pitch = (10 * 4 + pitch_alignment - 1) / pitch_alignment * pitch_alignment;
    CUdeviceptr pitched_raw;
    CUdeviceptr pitched = texture_memory(&pitched_raw, pitch * 6);
    CUDA_RESOURCE_DESC pr;
    memset(&pr, 0, sizeof pr);
    pr.resType = CU_RESOURCE_TYPE_PITCH2D;
    pr.res.pitch2D.devPtr = pitched; pr.res.pitch2D.format = CU_AD_FORMAT_UNSIGNED_INT8;
    pr.res.pitch2D.numChannels = 4; pr.res.pitch2D.width = 10; pr.res.pitch2D.height = 6;
    pr.res.pitch2D.pitchInBytes = pitch;
    CUDA_TEXTURE_DESC pt = point_texture(0);
    CUtexObject pitched_tex;
    DRV(cuTexObjectCreate(&pitched_tex, &pr, &pt, NULL));
    CHECK(cudaGetTextureObjectResourceDesc(&rr, pitched_tex));
    cudaChannelFormatDesc uchar4_desc = cudaCreateChannelDesc<uchar4>();
    REQUIRE(rr.resType == cudaResourceTypePitch2D && rr.res.pitch2D.devPtr == (void *)pitched &&
            memcmp(&rr.res.pitch2D.desc, &uchar4_desc, sizeof uchar4_desc) == 0 && rr.res.pitch2D.width == 10 &&
            rr.res.pitch2D.height == 6 && rr.res.pitch2D.pitchInBytes == pitch);
    CHECK(cudaGetTextureObjectTextureDesc(&rt, pitched_tex));
    REQUIRE(rt.readMode == cudaReadModeNormalizedFloat && rt.normalizedCoords == 0);
    CHECK(cudaDestroyTextureObject(pitched_tex));

    // A surface over the array (made with CUDA_ARRAY3D_SURFACE_LDST).
    CUsurfObject surf;
    DRV(cuSurfObjectCreate(&surf, &r));
    DRV(cuSurfObjectGetResourceDesc(&r_back, surf));
    REQUIRE(r_back.resType == CU_RESOURCE_TYPE_ARRAY && r_back.res.array.hArray == a);
    CHECK(cudaGetSurfaceObjectResourceDesc(&rr, surf));
    REQUIRE(rr.resType == cudaResourceTypeArray && rr.res.array.array == (cudaArray_t)a);
    DRV_EXPECT(cuTexObjectGetResourceDesc(&r_back, surf), CUDA_ERROR_INVALID_VALUE);  // a surface, not a texture

    DRV(cuSurfObjectDestroy(surf));
    DRV(cuTexObjectDestroy(tex));
    DRV_EXPECT(cuTexObjectGetTextureDesc(&t_back, tex), CUDA_ERROR_INVALID_VALUE);  // destroyed
    DRV(cuMemFree(pitched_raw));
    DRV(cuMemFree(words_raw));
    DRV(cuArrayDestroy(a));
    printf("ok objects\n");
}

static void kernels() {
    const int width = 16, height = 8;
    CUarray in = make_array(width, height, 0, CU_AD_FORMAT_FLOAT, 1);
    CUarray out = make_array(width, height, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SURFACE_LDST);
    std::vector<float> texels(width * height), got(width * height);
    for (int i = 0; i < width * height; i++) texels[i] = 0.5f * i - 7.0f;
    DRV(cuMemcpyHtoA(in, 0, texels.data(), texels.size() * 4));
    CUDA_RESOURCE_DESC r;
    memset(&r, 0, sizeof r);
    r.resType = CU_RESOURCE_TYPE_ARRAY;
    r.res.array.hArray = in;
    CUDA_TEXTURE_DESC t = point_texture(CU_TRSF_READ_AS_INTEGER);
    CUtexObject tex;
    DRV(cuTexObjectCreate(&tex, &r, &t, NULL));
    r.res.array.hArray = out;
    CUsurfObject surf;
    DRV(cuSurfObjectCreate(&surf, &r));

    CUfunction shift;
    CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&shift, (const void *)shiftAndDouble));
    int w = width, h = height;
    void *params[] = {&tex, &surf, &w, &h};
    DRV(cuLaunchKernel(shift, 2, 1, 1, 8, height, 1, 0, NULL, params, NULL));
    DRV(cuCtxSynchronize());
    DRV(cuMemcpyAtoH(got.data(), out, 0, got.size() * 4));
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            REQUIRE(got[y * width + x] == 2.0f * texels[y * width + (x + 1 < width ? x + 1 : x)]);

    // A texture over linear memory.
    const int n = 300;
    CUdeviceptr ints_raw, result;
    CUdeviceptr ints = texture_memory(&ints_raw, n * 4);
    DRV(cuMemAlloc(&result, n * 4));
    std::vector<int> values(n), back(n);
    for (int i = 0; i < n; i++) values[i] = i * i - 1000;
    DRV(cuMemcpyHtoD(ints, values.data(), n * 4));
    CUDA_RESOURCE_DESC lr;
    memset(&lr, 0, sizeof lr);
    lr.resType = CU_RESOURCE_TYPE_LINEAR;
    lr.res.linear.devPtr = ints; lr.res.linear.format = CU_AD_FORMAT_SIGNED_INT32; lr.res.linear.numChannels = 1;
    lr.res.linear.sizeInBytes = n * 4;
    CUtexObject linear_tex;
    DRV(cuTexObjectCreate(&linear_tex, &lr, &t, NULL));
    CUfunction fetch;
    CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&fetch, (const void *)fetchPlusOne));
    int count = n;
    void *fetch_params[] = {&linear_tex, &result, &count};
    DRV(cuLaunchKernel(fetch, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, fetch_params, NULL));
    DRV(cuMemcpyDtoH(back.data(), result, n * 4));
    for (int i = 0; i < n; i++) REQUIRE(back[i] == values[i] + 1);

    DRV(cuTexObjectDestroy(linear_tex));
    DRV(cuTexObjectDestroy(tex));
    DRV(cuSurfObjectDestroy(surf));
    DRV(cuMemFree(ints_raw));
    DRV(cuMemFree(result));
    DRV(cuArrayDestroy(in));
    DRV(cuArrayDestroy(out));
    printf("ok kernels\n");
}

static void bad_input() {
    CUDA_ARRAY_DESCRIPTOR d;
    memset(&d, 0, sizeof d);
    d.Width = 16; d.Height = 4; d.Format = CU_AD_FORMAT_FLOAT; d.NumChannels = 3;
    CUarray a;
    DRV_EXPECT(cuArrayCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);  // 3 channels
    d.NumChannels = 1; d.Format = (CUarray_format)0x55;
    DRV_EXPECT(cuArrayCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
    d.Format = CU_AD_FORMAT_FLOAT; d.Width = 0;
    DRV_EXPECT(cuArrayCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuArrayCreate(NULL, &d), CUDA_ERROR_INVALID_VALUE);
    d.Width = 16;
    DRV(cuArrayCreate(&a, &d));  // 64-byte rows, 256 bytes

    // NULL arrays are invalid values, unknown ones invalid handles.
    std::vector<unsigned char> buf(512);
    DRV_EXPECT(cuArrayGetDescriptor(&d, NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemcpyHtoA(NULL, 0, buf.data(), 4), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemcpyAtoD(0, NULL, 0, 4), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuArrayDestroy(NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMipmappedArrayDestroy(NULL), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuArrayGetDescriptor(&d, (CUarray)0x1234), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuArrayGetDescriptor(NULL, a), CUDA_ERROR_INVALID_VALUE);

    // Copies past an array's end, or not of whole elements.
    DRV_EXPECT(cuMemcpyHtoA(a, 252, buf.data(), 8), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemcpyAtoH(buf.data(), a, 0, 260), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemcpyAtoH(buf.data(), a, 512, 4), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuMemcpyHtoA(a, 2, buf.data(), 4), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST; c.srcHost = buf.data(); c.srcPitch = 64;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY; c.dstArray = a; c.dstY = 1;
    c.WidthInBytes = 64; c.Height = 4;
    DRV_EXPECT(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);  // rows 1..4 of 4
    d.Format = CU_AD_FORMAT_UNSIGNED_INT16;
    CUarray shorts;
    DRV(cuArrayCreate(&shorts, &d));
    DRV_EXPECT(cuMemcpyAtoA(shorts, 0, a, 0, 32), CUDA_ERROR_INVALID_VALUE);  // elements of 2 and 4 bytes

    // Objects: a surface needs CUDA_ARRAY3D_SURFACE_LDST; bad descriptions.
    CUDA_RESOURCE_DESC r;
    memset(&r, 0, sizeof r);
    r.resType = CU_RESOURCE_TYPE_ARRAY;
    r.res.array.hArray = a;
    CUsurfObject surf;
    DRV_EXPECT(cuSurfObjectCreate(&surf, &r), CUDA_ERROR_INVALID_VALUE);
    CUDA_TEXTURE_DESC t = point_texture(0);
    CUtexObject tex;
    r.flags = 1;
    DRV_EXPECT(cuTexObjectCreate(&tex, &r, &t, NULL), CUDA_ERROR_INVALID_VALUE);
    r.flags = 0;
    t.flags = 0x100;
    DRV_EXPECT(cuTexObjectCreate(&tex, &r, &t, NULL), CUDA_ERROR_INVALID_VALUE);
    t.flags = 0;
    DRV_EXPECT(cuTexObjectCreate(&tex, &r, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    r.resType = (CUresourcetype)7;
    DRV_EXPECT(cuTexObjectCreate(&tex, &r, &t, NULL), CUDA_ERROR_INVALID_VALUE);
    r.resType = CU_RESOURCE_TYPE_ARRAY;
    r.res.array.hArray = NULL;
    DRV_EXPECT(cuTexObjectCreate(&tex, &r, &t, NULL), CUDA_ERROR_INVALID_VALUE);
    r.res.array.hArray = (CUarray)0x1234;
    DRV_EXPECT(cuTexObjectCreate(&tex, &r, &t, NULL), CUDA_ERROR_INVALID_HANDLE);

    DRV(cuArrayDestroy(shorts));
    DRV(cuArrayDestroy(a));
    printf("ok bad_input\n");
}

// What an array without sparse, deferred-mapping or multi-planar storage
// answers (rcuda makes none), through both APIs; and CUDA 2.0's forms of
// array creation and descriptors, with 32-bit sides.
struct DescriptorV1 {
    unsigned int Width, Height;
    CUarray_format Format;
    unsigned int NumChannels;
};

static void queries() {
    CUDA_ARRAY_DESCRIPTOR d = {};
    d.Width = 8; d.Height = 2; d.Format = CU_AD_FORMAT_FLOAT; d.NumChannels = 1;
    CUarray a, plane;
    DRV(cuArrayCreate(&a, &d));
    CUDA_ARRAY_SPARSE_PROPERTIES sparse;
    CUDA_ARRAY_MEMORY_REQUIREMENTS requirements;
    DRV_EXPECT(cuArrayGetSparseProperties(&sparse, a), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuArrayGetMemoryRequirements(&requirements, a, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuArrayGetPlane(&plane, a, 0), CUDA_ERROR_INVALID_VALUE);
    DRV_EXPECT(cuArrayGetPlane(&plane, (CUarray)0x1234, 0), CUDA_ERROR_INVALID_HANDLE);
    DRV_EXPECT(cuArrayGetSparseProperties(NULL, a), CUDA_ERROR_INVALID_VALUE);
    cudaArraySparseProperties runtime_sparse;
    cudaArrayMemoryRequirements runtime_requirements;
    cudaArray_t runtime_plane;
    if (cudaArrayGetSparseProperties(&runtime_sparse, (cudaArray_t)a) != cudaErrorInvalidValue ||
        cudaArrayGetMemoryRequirements(&runtime_requirements, (cudaArray_t)a, 0) != cudaErrorInvalidValue ||
        cudaArrayGetPlane(&runtime_plane, (cudaArray_t)a, 0) != cudaErrorInvalidValue ||
        cudaArrayGetPlane(&runtime_plane, (cudaArray_t)0x1234, 0) != cudaErrorInvalidResourceHandle) {
        printf("FAILED line %d: the runtime's array queries\n", __LINE__);
        exit(1);
    }
    cudaGetLastError();

    void *create = NULL, *describe = NULL;
    CUdriverProcAddressQueryResult found;
    DRV(cuGetProcAddress("cuArrayCreate", &create, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    DRV(cuGetProcAddress("cuArrayGetDescriptor", &describe, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    DescriptorV1 old_form = {16, 4, CU_AD_FORMAT_UNSIGNED_INT16, 2}, back = {};
    CUarray old_array;
    DRV(((CUresult(CUDAAPI *)(CUarray *, const DescriptorV1 *))create)(&old_array, &old_form));
    DRV(((CUresult(CUDAAPI *)(DescriptorV1 *, CUarray))describe)(&back, old_array));
    if (back.Width != 16 || back.Height != 4 || back.Format != CU_AD_FORMAT_UNSIGNED_INT16 || back.NumChannels != 2) {
        printf("FAILED line %d: CUDA 2.0's descriptor read back %u x %u\n", __LINE__, back.Width, back.Height);
        exit(1);
    }
    DRV(cuArrayGetDescriptor(&d, old_array));  // the same array through today's form
    if (d.Width != 16 || d.Height != 4) {
        printf("FAILED line %d: today's descriptor of a CUDA 2.0 array\n", __LINE__);
        exit(1);
    }
    DRV(cuArrayDestroy(old_array));
    DRV(cuArrayDestroy(a));
    printf("ok queries\n");
}

// CUDA 2.0's forms of the 1-D array copies and of page-locked memory (32-bit
// offsets and sizes), reached as an old program's driver would be: by
// cuGetProcAddress at that version.
static void old_abi() {
    void *htoa, *atoh, *atoa, *htoa_async, *atoh_async, *alloc_host, *host_register;
    CUdriverProcAddressQueryResult found;
    DRV(cuGetProcAddress("cuMemcpyHtoA", &htoa, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    DRV(cuGetProcAddress("cuMemcpyAtoH", &atoh, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    DRV(cuGetProcAddress("cuMemcpyAtoA", &atoa, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    DRV(cuGetProcAddress("cuMemcpyHtoAAsync", &htoa_async, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    DRV(cuGetProcAddress("cuMemcpyAtoHAsync", &atoh_async, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    DRV(cuGetProcAddress("cuMemAllocHost", &alloc_host, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    DRV(cuGetProcAddress("cuMemHostRegister", &host_register, 4000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    if (htoa == (void *)cuMemcpyHtoA || alloc_host == (void *)cuMemAllocHost) {
        printf("FAILED line %d: CUDA 2.0's entry points are today's\n", __LINE__);
        exit(1);
    }
    typedef CUresult(CUDAAPI * HtoA)(CUarray, unsigned, const void *, unsigned);
    typedef CUresult(CUDAAPI * AtoH)(void *, CUarray, unsigned, unsigned);
    typedef CUresult(CUDAAPI * AtoA)(CUarray, unsigned, CUarray, unsigned, unsigned);
    typedef CUresult(CUDAAPI * HtoAAsync)(CUarray, unsigned, const void *, unsigned, CUstream);
    typedef CUresult(CUDAAPI * AtoHAsync)(void *, CUarray, unsigned, unsigned, CUstream);
    CUarray a = make_array(256, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1), b = make_array(256, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1);
    std::vector<unsigned char> in = patterned(256, 3);
    DRV(((HtoA)htoa)(a, 16, in.data(), 200));
    DRV(((AtoA)atoa)(b, 0, a, 16, 200));
    unsigned char *pinned = NULL;
    DRV(((CUresult(CUDAAPI *)(void **, unsigned))alloc_host)((void **)&pinned, 4096));
    memset(pinned, 0, 4096);
    DRV(((AtoH)atoh)(pinned, b, 0, 200));
    CUstream stream;
    DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    DRV(((HtoAAsync)htoa_async)(a, 0, pinned + 100, 50, stream));
    DRV(((AtoHAsync)atoh_async)(pinned + 1000, a, 0, 60, stream));
    DRV(cuStreamSynchronize(stream));
    for (int i = 0; i < 200; i++)
        if (pinned[i] != in[i]) {
            printf("FAILED line %d: byte %d through CUDA 2.0's copies is %u, not %u\n", __LINE__, i, pinned[i], in[i]);
            exit(1);
        }
    for (int i = 0; i < 50; i++)
        if (pinned[1000 + i] != in[100 + i]) {
            printf("FAILED line %d: byte %d of the asynchronous copies\n", __LINE__, i);
            exit(1);
        }
    std::vector<unsigned char> registered(8192);
    DRV(((CUresult(CUDAAPI *)(void *, size_t, unsigned))host_register)(registered.data(), registered.size(), 0));
    DRV(cuMemHostUnregister(registered.data()));
    DRV(cuMemFreeHost(pinned));
    DRV(cuStreamDestroy(stream));
    DRV(cuArrayDestroy(a));
    DRV(cuArrayDestroy(b));
    printf("ok old_abi\n");
}

int main(int argc, char **argv) {
    CUarray none;
    CUDA_ARRAY_DESCRIPTOR d = {};
    DRV_EXPECT(cuArrayCreate(&none, &d), CUDA_ERROR_NOT_INITIALIZED);
    DRV(cuInit(0));
    CUcontext ctx;
    DRV(cuDevicePrimaryCtxRetain(&ctx, 0));
    DRV(cuCtxSetCurrent(ctx));
    struct { const char *name; void (*run)(); } sections[] = {
        {"arrays", arrays}, {"copies", copies}, {"peer", peer}, {"mipmapped", mipmapped}, {"objects", objects},
        {"kernels", kernels}, {"bad_input", bad_input}, {"async_pinned", async_pinned}, {"queries", queries},
        {"old_abi", old_abi},
    };
    for (auto &section : sections) {
        bool chosen = argc == 1;
        for (int i = 1; i < argc; i++) chosen |= strcmp(argv[i], section.name) == 0;
        if (chosen) section.run();
    }
    printf("PASSED driver_arrays\n");
    return 0;
}
