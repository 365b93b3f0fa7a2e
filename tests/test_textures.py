"""CUDA arrays, texture and surface objects, pitched and 3-D copies, from
tests/cuda/textures.cu run unmodified through rcuda on a sim server whose
kernels (tests/cuda/texture_kernels.py) sample textures as CUDA defines it.

The program's sections are independent: a failing check prints "FAILED
[<section>] line N: ..." and abandons that section only."""
from __future__ import annotations

import re

import pytest

from conftest import requires_nvcc, run_program
from program_paths import check_section, run_on_sim

pytestmark = requires_nvcc

SECTIONS = ["channel_descs", "arrays", "array_copies", "pitched_3d", "tex2d_point", "tex2d_linear",
            "layered_cubemap", "surface_then_texture", "texture_linear", "mipmapped", "queries", "bad_input",
            "large_pitched"]


@pytest.fixture(scope="module")
def result(sim_program_output):
    return sim_program_output("textures.cu", "texture_kernels.py")


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    failures = [line for line in result.stdout.splitlines() if line.startswith(f"FAILED [{section}]")]
    assert not failures, "\n".join(failures) + "\n\n" + result.stdout + result.stderr
    assert re.search(rf"^ok {section}$", result.stdout, re.MULTILINE), result.stdout + result.stderr


def test_whole_program_passes(result):
    assert result.returncode == 0 and "PASSED textures" in result.stdout, result.stdout + result.stderr


def test_copies_on_an_auth_servers_zeromq_link(compile_cuda, tmp_path):
    """A --auth server: the boxes (large ones in parts) take the ZeroMQ link."""
    sections = ("array_copies", "pitched_3d", "large_pitched")
    result = run_on_sim(compile_cuda, "textures.cu", "texture_kernels.py", *sections, auth_root=tmp_path, devices=1)
    check_section(result, *sections)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


def test_on_a_gpu(compile_cuda, server_factory):
    """The cupy backend: real arrays and texture objects, the hardware's
    sampling checked against the program's host reference."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    server = server_factory("--backend", "cupy", "--devices", "1")
    result = run_program(compile_cuda("textures.cu"), server, timeout=300)
    assert result.returncode == 0 and "PASSED textures" in result.stdout, result.stdout + result.stderr[-3000:]


def test_the_client_refuses_a_surface_over_an_array_without_surface_load_store(monkeypatch):
    """Both APIs' surface objects are made by one client function, which
    refuses an array made without cudaArraySurfaceLoadStore before asking
    the server: a GPU server's driver makes such a surface (the H100's did),
    so no server may be relied on to refuse it."""
    import types

    from rcuda.array_rules import SURFACE_LOAD_STORE
    from rcuda.client import interposer
    from rcuda.client.memory.arrays import CudaArray
    from rcuda.client.runtime import textures
    from rcuda.errors import CudaError, cudaError

    sent = []
    device = types.SimpleNamespace(label="GPU0", request=lambda op, **fields: (sent.append(op), ({"handle": 7}, []))[1])
    kept = []
    monkeypatch.setattr(interposer, "rt", types.SimpleNamespace(device=lambda: device,
                                                                samplers=types.SimpleNamespace(add=kept.append)))

    def array(flags: int) -> CudaArray:
        return CudaArray(0x7A00_0000_0000, device, "float32", 1, 4, 4, 0, flags, (32, 0, 0, 0, 2))

    with pytest.raises(CudaError) as refused:
        textures.create_object({"type": "array", "array": array(0)}, None, None, "cuSurfObjectCreate")
    assert refused.value.status == cudaError.cudaErrorInvalidValue and "SurfaceLoadStore" in str(refused.value)
    assert sent == [] and kept == []  # (the programs' refusals on the sim, both APIs', are this one now)
    assert textures.create_object({"type": "array", "array": array(SURFACE_LOAD_STORE)}, None, None,
                                  "cudaCreateSurfaceObject") == 7
    assert sent == ["surface_create"] and len(kept) == 1
