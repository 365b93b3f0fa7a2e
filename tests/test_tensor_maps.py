"""Tensor maps (tests/cuda/tensor_maps.cu, the driver API's cuTensorMapEncode*
and cuTensorMapReplaceAddress) run unmodified through rcuda: a map passed by
value to a kernel that loads a tile through it, the address replaced, im2col
maps, the parameters cuda.h refuses; on a sim server (its own encoding,
decoded by the kernel's plugin) and on a GPU server (TMA, compute
capability 9.0).  Without a GPU, a GPU server's session thread with the
stand-in driver (tests/stand_in_service.py): the map is the server
driver's bytes, and the kernel gets them where its loaded image wants
them, which is not where the client's layout has them."""
from __future__ import annotations

import struct
import types

import pytest

from conftest import requires_nvcc
from program_paths import check_passed, check_section, run_on_gpu, run_on_sim
from rcuda import fatbin, tensor_maps, wire
from rcuda.binaries import dropin_dir
from rcuda.server.backends.base import ParamLayout

pytestmark = requires_nvcc
SECTIONS = ["tiles", "im2col", "bad_parameters"]
#: sm_80's code (no TMA: the sim's plugin runs the kernel) and sm_90's (TMA).
FLAGS = (f"-L{dropin_dir()}", "-l:libcuda.so.1", "-gencode", "arch=compute_80,code=sm_80",
         "-gencode", "arch=compute_90,code=sm_90")


@pytest.fixture(scope="module")
def result(compile_cuda):
    return run_on_sim(compile_cuda, "tensor_maps.cu", "tensor_map_kernels.py", flags=FLAGS, devices=1)


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    check_passed(result, "tensor_maps.cu")


def test_on_a_gpu(compile_cuda):
    from program_paths import gpu_count
    gpu_count()  # skips without a GPU, saying why
    import cupy
    if cupy.cuda.runtime.getDeviceProperties(0)["major"] < 9:
        pytest.skip("tensor maps need a GPU of compute capability 9.0 or higher")
    check_passed(run_on_gpu(compile_cuda, "tensor_maps.cu", flags=FLAGS), "tensor_maps.cu")


def test_the_sims_encoding_round_trips():
    m = tensor_maps.TensorMap(kind=tensor_maps.TILED, data_type=7, rank=3, address=0x7000_0000_0000,
                              dims=[1 << 32, 5, 7], strides=[1 << 36, 1 << 39], element_strides=[1, 2, 8],
                              interleave=0, swizzle=3, l2_promotion=2, oob_fill=1, box=[32, 1, 256])
    raw = tensor_maps.encode(m)
    assert len(raw) == tensor_maps.SIZE and tensor_maps.decode(raw) == m
    moved = tensor_maps.decode(tensor_maps.replace_address(raw, 0x7000_0000_0040))
    assert moved.address == 0x7000_0000_0040 and moved.dims == m.dims


# ---------------------------------------------------------------- a GPU server's thread, without a GPU


def layouts(binary) -> tuple[ParamLayout, ParamLayout]:
    """loadTile's parameter layout as the client reads it (the first cubin,
    sm_80's) and as sm_90's cubin, the one an H100's driver loads, has it."""
    def layout(kernel):
        return ParamLayout(tuple(p.offset for p in kernel.params), tuple(p.size for p in kernel.params))

    image, name = next((f, n) for f in map(fatbin.parse_fatbin, fatbin.fatbins_in_elf(binary))
                       for n in f.kernels() if "loadTile" in n)
    sm_90 = next(e for e in image.entries if e.kind == "cubin" and e.arch == 90)
    return layout(image.kernels()[name]), layout(fatbin.cubin_kernels(sm_90.payload)[name])


def frames(data: bytes) -> list:
    return [types.SimpleNamespace(buffer=memoryview(data))]


def test_a_kernel_gets_the_server_drivers_map_where_its_image_wants_it(compile_cuda, driver, service):
    from stand_in_service import calls, image_layout, tensor_map
    client, image = layouts(compile_cuda("tensor_maps.cu", *FLAGS))
    # A 128-byte-aligned CUtensorMap (CUDA 13's cuda.h) sits where each image's
    # parameter constant bank puts it 128-aligned: the layouts differ.
    assert client.sizes == image.sizes == (128, 4, 4, 8) and client.offsets != image.offsets
    handle, gpu, ran = service._handlers, service.gpu, []
    handle["module"]({"module": "m"}, frames(gpu.image({"loadTile": (lambda params, gpu: ran.append(params), image)})))
    handle["function"]({"fn": 3, "module": "m", "name": "loadTile", "offsets": list(client.offsets),
                        "sizes": list(client.sizes)}, [])
    function = service._functions[3][0]
    image_layout(driver, function.handle, image)
    matrix = service.device.malloc(1 << 16)

    # cuTensorMapEncodeTiled: the server's driver encodes it (not the sim's encoding).
    fields = dict(kind=tensor_maps.TILED, data_type=7, rank=2, address=matrix, dims=[96, 64], strides=[384],
                  element_strides=[1, 1], interleave=0, swizzle=0, l2_promotion=0, oob_fill=0, box=[16, 16])
    _, (raw,) = handle["tensor_map_encode"]({"map": fields}, [])
    assert bytes(raw) == tensor_map(driver) and bytes(raw).startswith(b"STAND-IN")
    assert struct.unpack_from("<Q", raw, 8)[0] == matrix

    # loadTile<<<1, 128>>>(map, 32, 16, out), packed by the client's layout.
    params = bytearray(client.buffer_size)
    values = [bytes(raw), struct.pack("<i", 32), struct.pack("<i", 16), struct.pack("<Q", matrix + 4096)]
    for offset, value in zip(client.offsets, values):
        params[offset:offset + len(value)] = value
    record = wire.LAUNCH_RECORD.pack(3, 0, 1, 1, 1, 128, 1, 1, 0, len(params)) + bytes(params)
    handle["launches"]({"count": 1}, frames(record + bytes(-len(record) % 8)))  # C's batch executor
    service.device.launch(function, (1, 1, 1), (128, 1, 1), bytes(params), 0, 0)  # Python's launch
    service.device.synchronize().wait()

    (launched,) = calls(driver)
    for seen in bytes(launched.params[:launched.param_bytes]), ran[0]:
        assert [seen[o:o + s] for o, s in zip(image.offsets, image.sizes)] == values
