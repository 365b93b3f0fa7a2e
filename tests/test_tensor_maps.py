"""Tensor maps (tests/cuda/tensor_maps.cu, the driver API's cuTensorMapEncode*
and cuTensorMapReplaceAddress) run unmodified through rcuda: a map passed by
value to a kernel that loads a tile through it, the address replaced, im2col
maps, the parameters cuda.h refuses; on a sim server (its own encoding,
decoded by the kernel's plugin) and on a GPU server (TMA, compute
capability 9.0)."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc
from program_paths import check_passed, check_section, run_on_gpu, run_on_sim
from rcuda import tensor_maps
from rcuda.binaries import dropin_dir

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
