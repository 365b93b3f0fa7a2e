"""server/backends/cuda_arrays.py without a GPU: its ctypes structures and
constants against cuda.h as the C compiler reads it, its mappings of wire
values to driver values, and the driver calls it makes (a fake driver)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cuda_h_layout import check_structure, report
from rcuda.errors import CudaError, cudaError
from rcuda.server.backends import cuda_arrays as ca
from rcuda.server.backends.arrays import FORMATS, ArraySpec

STRUCTS = [ca.CUDA_ARRAY3D_DESCRIPTOR, ca.CUDA_MEMCPY3D, ca.CUDA_RESOURCE_DESC, ca.CUDA_TEXTURE_DESC,
           ca.CUDA_RESOURCE_VIEW_DESC, ca.CUDA_ARRAY_DESCRIPTOR]
CONSTANTS = ["CU_MEMORYTYPE_HOST", "CU_MEMORYTYPE_DEVICE", "CU_MEMORYTYPE_ARRAY", "CU_RESOURCE_TYPE_ARRAY",
             "CU_RESOURCE_TYPE_MIPMAPPED_ARRAY", "CU_RESOURCE_TYPE_LINEAR", "CU_RESOURCE_TYPE_PITCH2D",
             "CU_TRSF_READ_AS_INTEGER", "CU_TRSF_NORMALIZED_COORDINATES", "CU_TRSF_SRGB",
             "CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION", "CU_TRSF_SEAMLESS_CUBEMAP", "CU_TRSA_OVERRIDE_FORMAT"]
FORMAT_CONSTANTS = {"uint8": "CU_AD_FORMAT_UNSIGNED_INT8", "uint16": "CU_AD_FORMAT_UNSIGNED_INT16",
                    "uint32": "CU_AD_FORMAT_UNSIGNED_INT32", "int8": "CU_AD_FORMAT_SIGNED_INT8",
                    "int16": "CU_AD_FORMAT_SIGNED_INT16", "int32": "CU_AD_FORMAT_SIGNED_INT32",
                    "float16": "CU_AD_FORMAT_HALF", "float32": "CU_AD_FORMAT_FLOAT"}

@pytest.fixture(scope="module")
def header(tmp_path_factory) -> dict[str, tuple[int, ...]]:
    """What the C compiler says of cuda.h: name -> numbers."""
    return report(tmp_path_factory.mktemp("cuda_arrays_layout"), STRUCTS,
                  CONSTANTS + list(FORMAT_CONSTANTS.values()) + ["CUDA_VERSION"])


def test_the_header_is_cuda_13(header):
    assert header["CUDA_VERSION"][0] // 1000 == 13


@pytest.mark.parametrize("structure", STRUCTS, ids=lambda s: s.__name__)
def test_each_structure_is_laid_out_as_cuda_h_says(header, structure):
    check_structure(header, structure)


def test_the_constants_are_cuda_h_s(header):
    for constant in CONSTANTS:
        assert getattr(ca, constant) == header[constant][0], constant
    assert {name: number for name, number in ca.ARRAY_FORMATS.items()} == \
        {name: header[constant][0] for name, constant in FORMAT_CONSTANTS.items()}


# ---------------------------------------------------------------- wire values -> driver values

def test_formats_map_to_the_driver_s_with_their_channels():
    assert set(ca.ARRAY_FORMATS) == set(FORMATS)
    assert ca.array_format("float32", 4) == (0x20, 4)
    assert ca.array_format("uint8", 1) == (0x01, 1)
    assert ca.array_format("int16", 2) == (0x09, 2)
    for format, channels in (("float64", 1), ("uint8", 3), ("int32", 0), (None, 1)):
        with pytest.raises(CudaError) as caught:
            ca.array_format(format, channels)
        assert caught.value.status == cudaError.cudaErrorInvalidChannelDescriptor


def test_an_array_descriptor_keeps_cuda_s_sides_and_flags():
    layered_cubemap = ArraySpec("float16", 2, 16, 16, 12, 0x01 | 0x04 | 0x02)
    described = ca.array_descriptor(layered_cubemap)
    assert (described.Width, described.Height, described.Depth) == (16, 16, 12)
    assert (described.Format, described.NumChannels, described.Flags) == (0x10, 2, 0x07)
    one_d = ca.array_descriptor(ArraySpec("uint32", 1, 100, 0, 0, 0))
    assert (one_d.Width, one_d.Height, one_d.Depth, one_d.Format) == (100, 0, 0, 0x03)
    assert ca.array_bytes(ArraySpec("float32", 4, 8, 4, 0, 0, levels=3)) == 16 * (8 * 4 + 4 * 2 + 2 * 1)


def texture(**fields) -> dict:
    """A cudaTextureDesc as the client sends it (zeros but for `fields`)."""
    desc = {"addressMode": [0, 0, 0], "filterMode": 0, "readMode": 0, "sRGB": 0, "borderColor": [0.0] * 4,
            "normalizedCoords": 0, "maxAnisotropy": 0, "mipmapFilterMode": 0, "mipmapLevelBias": 0.0,
            "minMipmapLevelClamp": 0.0, "maxMipmapLevelClamp": 0.0, "disableTrilinearOptimization": 0,
            "seamlessCubemap": 0}
    desc.update(fields)
    return desc


def test_read_mode_element_type_is_read_as_integer():
    assert ca.texture_flags(texture(readMode=0)) == ca.CU_TRSF_READ_AS_INTEGER
    assert ca.texture_flags(texture(readMode=1)) == 0
    with pytest.raises(CudaError) as caught:
        ca.texture_flags(texture(readMode=2))
    assert caught.value.status == cudaError.cudaErrorInvalidValue


@pytest.mark.parametrize("field, flag", [("normalizedCoords", 0x02), ("sRGB", 0x10),
                                         ("disableTrilinearOptimization", 0x20), ("seamlessCubemap", 0x40)])
def test_each_yes_no_field_sets_its_flag(field, flag):
    assert ca.texture_flags(texture(readMode=1, **{field: 1})) == flag
    assert ca.texture_flags(texture(readMode=0, **{field: 1})) == flag | ca.CU_TRSF_READ_AS_INTEGER


def test_a_texture_descriptor_carries_every_field():
    described = ca.texture_descriptor(texture(addressMode=[3, 1, 2], filterMode=1, readMode=1, normalizedCoords=1,
                                              maxAnisotropy=8, mipmapFilterMode=1, mipmapLevelBias=0.5,
                                              minMipmapLevelClamp=1.0, maxMipmapLevelClamp=4.0,
                                              borderColor=[0.25, 0.5, 0.75, 1.0]))
    assert list(described.addressMode) == [3, 1, 2]
    assert (described.filterMode, described.flags, described.maxAnisotropy, described.mipmapFilterMode) == \
        (1, ca.CU_TRSF_NORMALIZED_COORDINATES, 8, 1)
    assert (described.mipmapLevelBias, described.minMipmapLevelClamp, described.maxMipmapLevelClamp) == \
        (0.5, 1.0, 4.0)
    assert list(described.borderColor) == [0.25, 0.5, 0.75, 1.0]
    assert list(described.reserved) == [0] * 12


@pytest.mark.parametrize("bad", [{"addressMode": [0, 0]}, {"borderColor": [0.0] * 5}, {"filterMode": "linear"},
                                 {"mipmapLevelBias": "x"}])
def test_a_malformed_texture_descriptor_is_an_invalid_value(bad):
    with pytest.raises(CudaError) as caught:
        ca.texture_descriptor(texture(**bad))
    assert caught.value.status == cudaError.cudaErrorInvalidValue
    incomplete = texture()
    del incomplete["seamlessCubemap"]
    with pytest.raises(CudaError):
        ca.texture_descriptor(incomplete)


def test_a_view_descriptor_carries_every_field():
    view = dict(zip(ca.VIEW_FIELDS, range(1, 9)))
    described = ca.view_descriptor(view)
    assert [getattr(described, field) for field in ca.VIEW_FIELDS] == list(range(1, 9))
    with pytest.raises(CudaError):
        ca.view_descriptor({**view, "width": -1})


def test_memory_resources_and_the_bytes_they_may_read():
    linear, ptr, size = ca.memory_resource({"type": "linear", "ptr": 0x1000, "format": "float32", "channels": 2,
                                            "size": 800}, "t")
    assert (linear.resType, ptr, size) == (ca.CU_RESOURCE_TYPE_LINEAR, 0x1000, 800)
    assert (linear.res.linear.devPtr, linear.res.linear.format, linear.res.linear.numChannels,
            linear.res.linear.sizeInBytes) == (0x1000, 0x20, 2, 800)
    pitched, ptr, size = ca.memory_resource({"type": "pitch2D", "ptr": 0x2000, "format": "uint16", "channels": 4,
                                             "width": 10, "height": 3, "pitch": 128}, "t")
    p = pitched.res.pitch2D
    assert (pitched.resType, p.devPtr, p.format, p.numChannels, p.width, p.height, p.pitchInBytes) == \
        (ca.CU_RESOURCE_TYPE_PITCH2D, 0x2000, 0x02, 4, 10, 3, 128)
    assert size == 2 * 128 + 10 * 8  # to the end of the last row's texels
    assert pitched.flags == 0
    for bad in ({"type": "linear", "ptr": 0x1000, "format": "float32", "channels": 1, "size": -4},
                {"type": "pitch2D", "ptr": 0x1000, "format": "float32", "channels": 1, "width": 0, "height": 1,
                 "pitch": 64},
                {"type": "surface"}):
        with pytest.raises(CudaError) as caught:
            ca.memory_resource(bad, "t")
        assert caught.value.status == cudaError.cudaErrorInvalidValue


def test_array_resources_name_the_handle():
    assert ca.array_resource(0xABC).res.array.hArray == 0xABC
    mipmap = ca.mipmap_resource(0xDEF)
    assert (mipmap.resType, mipmap.res.mipmap.hMipmappedArray) == (ca.CU_RESOURCE_TYPE_MIPMAPPED_ARRAY, 0xDEF)


# ---------------------------------------------------------------- copies and memsets

def test_copy_sides():
    copy = ca.copy_3d((24, 5, 3))
    ca.set_device(copy, "dst", 0x1000, 64, 8)
    ca.set_host(copy, "src", 0x7000)
    assert (copy.dstMemoryType, copy.dstDevice, copy.dstPitch, copy.dstHeight) == (ca.CU_MEMORYTYPE_DEVICE, 0x1000,
                                                                                  64, 8)
    assert (copy.dstXInBytes, copy.dstY, copy.dstZ, copy.dstLOD) == (0, 0, 0, 0)
    assert (copy.srcMemoryType, copy.srcHost, copy.srcPitch, copy.srcHeight) == (ca.CU_MEMORYTYPE_HOST, 0x7000, 24, 5)
    assert (copy.WidthInBytes, copy.Height, copy.Depth) == (24, 5, 3)
    to_array = ca.copy_3d((16, 2, 1))
    ca.set_array(to_array, "dst", 0xA0, 32, 1, 4)
    assert (to_array.dstMemoryType, to_array.dstArray, to_array.dstXInBytes, to_array.dstY, to_array.dstZ) == \
        (ca.CU_MEMORYTYPE_ARRAY, 0xA0, 32, 1, 4)
    assert not to_array.reserved0 and not to_array.reserved1


def test_a_device_side_gives_the_driver_only_what_it_uses():
    one_slice = ca.copy_3d((24, 5, 1))
    ca.set_device(one_slice, "src", 0x1000, 64, 2)  # fewer rows per slice than the box: unused with one slice
    assert (one_slice.srcPitch, one_slice.srcHeight) == (64, 0)
    one_row = ca.copy_3d((24, 1, 1))
    ca.set_device(one_row, "src", 0x1000, 0, 0)  # no pitch for a single row
    assert (one_row.srcPitch, one_row.srcHeight) == (24, 0)


def covered(pieces, width: int, size: int) -> np.ndarray:
    mask = np.zeros(size, bool)
    for start, pitch, rows in pieces:
        for row in range(rows):
            assert not mask[start + row * pitch:start + row * pitch + width].any(), "a byte set twice"
            mask[start + row * pitch:start + row * pitch + width] = True
    return mask


@pytest.mark.parametrize("pitch, rows, extent", [(64, 5, (24, 5, 3)), (64, 8, (24, 5, 3)), (64, 8, (24, 1, 7)),
                                                 (32, 3, (32, 2, 9)), (16, 4, (8, 4, 1)), (0, 0, (12, 1, 1)),
                                                 (40, 6, (40, 6, 2))])
def test_box_planes_cover_the_box_exactly(pitch, rows, extent):
    width, height, depth = extent
    base = 256
    pieces = list(ca.box_planes(base, pitch, rows, extent))
    size = base + ((depth - 1) * rows + height) * max(pitch, width)
    want = np.zeros(size, bool)
    for z in range(depth):
        for y in range(height):
            start = base + (z * rows + y) * pitch
            want[start:start + width] = True
    assert (covered(pieces, width, size) == want).all()
    assert len(pieces) <= min(depth, height) or len(pieces) == 1
    assert all(piece_pitch == width for _, piece_pitch, piece_rows in pieces if piece_rows == 1)


class FakeDriver:
    """Records calls; fills an out-handle argument with the next number."""

    def __init__(self, status: int = 0):
        self.calls: list[tuple] = []
        self.status = status
        self.next_handle = 0x100

    def __getattr__(self, name: str):
        def function(*args):
            self.calls.append((name, *args))
            out = args[0] if args else None
            if hasattr(out, "_obj") and isinstance(out._obj, (ctypes.c_void_p, ctypes.c_ulonglong)):
                out._obj.value = self.next_handle
                self.next_handle += 0x100
            return self.status
        return function


@pytest.fixture
def fake(monkeypatch) -> FakeDriver:
    driver = FakeDriver()
    monkeypatch.setattr(ca, "driver", lambda: driver)
    return driver


def test_memset_box_sets_elements_not_bytes(fake):
    ca.memset_box(0x1000, 64, 8, 0x1234BEEF, (24, 5, 2), 2, 0x77)
    assert fake.calls == [("cuMemsetD2D16Async", 0x1000, 64, 0xBEEF, 12, 5, 0x77),
                          ("cuMemsetD2D16Async", 0x1000 + 8 * 64, 64, 0xBEEF, 12, 5, 0x77)]
    fake.calls.clear()
    ca.memset_box(0x1000, 64, 5, 0x1FF, (64, 5, 2), 1, 0)  # slices back to back: one call
    assert fake.calls == [("cuMemsetD2D8Async", 0x1000, 64, 0xFF, 64, 10, 0)]
    fake.calls.clear()
    ca.memset_box(0x1000, 64, 5, 7, (8, 5, 1), 4, 0)
    assert fake.calls == [("cuMemsetD2D32Async", 0x1000, 64, 7, 2, 5, 0)]


def test_arrays_are_made_and_freed_by_their_kind(fake):
    plain = ca.DriverArray(ArraySpec("float32", 1, 64, 32, 0, 0))
    assert fake.calls[-1][0] == "cuArray3DCreate_v2" and plain.handle == 0x100
    assert plain.level(0) == plain.handle and len(fake.calls) == 1  # a plain array is its own level
    assert plain.resource(False, 0, "t").res.array.hArray == plain.handle
    with pytest.raises(CudaError):
        plain.resource(True, 0, "t")
    mipmapped = ca.DriverArray(ArraySpec("uint8", 4, 64, 64, 0, 0, levels=4))
    assert fake.calls[-1][0] == "cuMipmappedArrayCreate" and fake.calls[-1][3] == 4
    level = mipmapped.level(2)
    assert fake.calls[-1][0] == "cuMipmappedArrayGetLevel" and fake.calls[-1][2:] == (mipmapped.handle, 2)
    assert mipmapped.level(2) == level and fake.calls[-1][0] == "cuMipmappedArrayGetLevel"
    calls = len(fake.calls)
    mipmapped.level(2)
    assert len(fake.calls) == calls, "a level is asked of the driver once"
    with pytest.raises(CudaError):
        mipmapped.level(4)
    assert mipmapped.resource(True, 0, "t").res.mipmap.hMipmappedArray == mipmapped.handle
    assert mipmapped.resource(False, 2, "t").res.array.hArray == level  # a texture over one level
    mipmapped.destroy()
    plain.destroy()
    assert fake.calls[-2:] == [("cuMipmappedArrayDestroy", mipmapped.handle), ("cuArrayDestroy", plain.handle)]


def test_texture_and_surface_objects_come_back_as_the_driver_s_values(fake):
    resource = ca.array_resource(0xA0)
    handle = ca.create_texture(resource, ca.texture_descriptor(texture()), None)
    assert fake.calls[-1][0] == "cuTexObjectCreate" and fake.calls[-1][4] is None and handle == 0x100
    assert ca.create_surface(resource) == 0x200
    ca.destroy_texture(handle)
    ca.destroy_surface(0x200)
    assert fake.calls[-2:] == [("cuTexObjectDestroy", 0x100), ("cuSurfObjectDestroy", 0x200)]


@pytest.mark.parametrize("status, runtime", [(1, cudaError.cudaErrorInvalidValue),
                                             (2, cudaError.cudaErrorMemoryAllocation),
                                             (400, cudaError.cudaErrorInvalidResourceHandle)])
def test_driver_failures_are_the_matching_runtime_status(fake, status, runtime):
    fake.status = status
    with pytest.raises(CudaError) as caught:
        ca.DriverArray(ArraySpec("float32", 1, 64, 0, 0, 0))
    assert caught.value.status == runtime and "cuArray3DCreate_v2" in str(caught.value)


def _values(call: tuple) -> tuple:
    """A recorded call's arguments, handles (c_void_p) as numbers."""
    return tuple(a.value if isinstance(a, ctypes.c_void_p) else a for a in call)


def test_texture_references_are_bound_on_the_module_with_the_driver_s_calls(fake):
    """A module's texture reference: cuModuleGetTexRef, the binding, then
    every part of the sampling state; a surface reference: cuSurfRefSetArray."""
    described = texture(addressMode=[1, 2, 3], filterMode=1, maxAnisotropy=4)
    ca.bind_texture_reference(0x77, "texImage", {"type": "array", "array": 5}, 0xA0, described)
    fake.calls[:] = [_values(call) for call in fake.calls]
    names = [call[0] for call in fake.calls]
    assert names[:2] == ["cuModuleGetTexRef", "cuTexRefSetArray"]
    assert fake.calls[0][2:] == (0x77, b"texImage")
    ref = 0x100  # the fake's first out-handle
    assert fake.calls[1][1:] == (ref, 0xA0, ca.CU_TRSA_OVERRIDE_FORMAT)
    assert [c[1:] for c in fake.calls if c[0] == "cuTexRefSetAddressMode"] == \
        [(ref, dim, mode) for dim, mode in enumerate(described["addressMode"])]
    assert {"cuTexRefSetFilterMode", "cuTexRefSetFlags", "cuTexRefSetMaxAnisotropy", "cuTexRefSetMipmapFilterMode",
            "cuTexRefSetMipmapLevelBias", "cuTexRefSetMipmapLevelClamp", "cuTexRefSetBorderColor"} <= set(names)
    flags = next(c for c in fake.calls if c[0] == "cuTexRefSetFlags")
    assert flags[1:] == (ref, ca.texture_flags(described))

    fake.calls.clear()
    ca.bind_texture_reference(0x77, "texLinear", {"type": "linear", "ptr": 0x1004, "size": 400, "format": "float32",
                                                  "channels": 1}, None, described)
    fake.calls[:] = [_values(call) for call in fake.calls]
    assert fake.calls[1][0] == "cuTexRefSetFormat" and fake.calls[1][2:] == (0x20, 1)
    assert fake.calls[2][0] == "cuTexRefSetAddress_v2" and fake.calls[2][3:] == (0x1004, 400)

    fake.calls.clear()
    ca.bind_texture_reference(0x77, "texPitched", {"type": "pitch2D", "ptr": 0x2000, "width": 8, "height": 4,
                                                   "pitch": 64, "format": "uint8", "channels": 4}, None, described)
    assert fake.calls[1][0] == "cuTexRefSetAddress2D_v3" and fake.calls[1][3:] == (0x2000, 64)
    desc = fake.calls[1][2]._obj
    assert (desc.Width, desc.Height, desc.Format, desc.NumChannels) == (8, 4, 0x01, 4)

    fake.calls.clear()
    ca.bind_surface_reference(0x77, "surfImage", 0xB0)
    fake.calls[:] = [_values(call) for call in fake.calls]
    assert [c[0] for c in fake.calls] == ["cuModuleGetSurfRef", "cuSurfRefSetArray"]
    assert fake.calls[1][2:] == (0xB0, 0)
    with pytest.raises(CudaError):  # a malformed description is refused before any call
        ca.bind_texture_reference(0x77, "texImage", {"type": "array", "array": 5}, 0xA0, {"addressMode": [0]})
