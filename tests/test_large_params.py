"""Kernel parameter blocks up to CUDA's 32,764 bytes: tests/cuda/large_params.cu
run unmodified through rcuda on sim servers whose plugins check every byte
(tests/cuda/large_params_kernels.py).  Every launch path: <<<>>> (a kernel's
first launch through Python, later ones recorded in C), cudaLaunchKernel,
cudaLaunchKernelEx, a batch of megabytes; on the lane, on the ZeroMQ link of
a --auth server, with RCUDA_STATS, and with layouts read from PTX.  A kernel
whose parameter records cannot be read fails its launch instead of running
without its parameters."""
from __future__ import annotations

import re
import shutil

import pytest
from elftools.elf.elffile import ELFFile

from auth_helpers import KeyedSession, make_keys
from conftest import CUDA_SOURCES, run_program, start_server
from rcuda import protocol, wire
from rcuda.errors import cudaError

KERNELS = str(CUDA_SOURCES / "large_params_kernels.py")
SECTIONS = ["chevrons", "stream", "launch_kernel", "launch_ex", "many"]
PTX_ONLY = ("-gencode", "arch=compute_80,code=compute_80")


def _run(binary, *sections: str, server_args=(), env=None):
    server = start_server("--backend", "sim", "--kernels", KERNELS, *server_args)
    try:
        return run_program(binary, server, *sections, env_extra=env, timeout=300)
    finally:
        server.stop()


def _passed(result) -> None:
    assert result.returncode == 0 and "PASSED large_params" in result.stdout, \
        result.stdout[-3000:] + result.stderr[-3000:]
    for section in SECTIONS:
        assert f"ok {section}" in result.stdout, result.stdout


def test_every_launch_path_on_the_lane(compile_cuda):
    _passed(_run(compile_cuda("large_params.cu")))


@pytest.mark.parametrize("link", ["sealed-lane", "socket"])
def test_every_launch_path_on_a_auth_servers_links(compile_cuda, tmp_path, link):
    keys = make_keys(tmp_path)
    env = {**keys.env(), "RCUDA_LINK": "lane" if link == "sealed-lane" else "socket"}
    _passed(_run(compile_cuda("large_params.cu"), server_args=("--auth", str(keys.server_dir)), env=env))


def test_launches_after_the_first_are_recorded_in_c(compile_cuda):
    """RCUDA_STATS's report counts the launches C recorded: all but each
    kernel's first and those of cudaLaunchKernelEx (3 kernels x 8 launches
    in chevrons, stream and launch_kernel, 96 in many)."""
    result = _run(compile_cuda("large_params.cu"), env={"RCUDA_STATS": "1"})
    _passed(result)
    recorded = re.search(r"C launches\n\s+GPU0 .*?(\d+)\n", result.stderr + "\n")
    assert recorded, result.stderr[-3000:]
    assert int(recorded[1]) == 3 * 8 * 3 - 3 + 96


def test_layouts_from_ptx(compile_cuda):
    """A program with PTX only: layouts from `.param .align 4 .b8 name[32000]`."""
    _passed(_run(compile_cuda("large_params.cu", *PTX_ONLY)))


def test_unreadable_parameter_records_fail_the_launch(compile_cuda, tmp_path):
    """The program's cubin with its KPARAM_INFO_V2 records turned into an
    attribute nobody knows: the cubin still states each block's size, so the
    client knows it cannot lay the parameters out."""
    binary = tmp_path / "large_params_unreadable"
    shutil.copy(compile_cuda("large_params.cu"), binary)
    data = bytearray(binary.read_bytes())
    with open(binary, "rb") as f:
        section = ELFFile(f).get_section_by_name(".nv_fatbin")
        start, end = section["sh_offset"], section["sh_offset"] + section["sh_size"]
    v2_record = bytes([0x04, 0x45, 0x0C, 0x00])  # EIFMT_SVAL, EIATTR_KPARAM_INFO_V2, 12 bytes
    found = [m.start() for m in re.finditer(re.escape(v2_record), bytes(data[start:end]))]
    assert len(found) == 2 + 3 + 4  # bigKernel's, maxKernel's and midKernel's parameters
    for at in found:
        data[start + at + 1] = 0x7F
    binary.write_bytes(data)
    result = _run(binary, "unreadable")
    assert "launch -> cudaErrorInvalidKernelImage" in result.stdout, result.stdout + result.stderr[-3000:]
    assert "ok unreadable" in result.stdout, result.stdout + result.stderr[-3000:]


def test_a_record_claiming_more_parameter_bytes_than_follow_is_refused(sim_server):
    """A `launches` record whose parameter block runs past the end of its
    batch is refused before it runs: an upload record cut short used to
    write the bytes there were."""
    session = KeyedSession(sim_server.address, None)
    try:
        ptr = session.call({"op": "malloc", "size": 64})["ptr"]
        claimed = wire.HTOD_FIELDS.size + 32
        record = (wire.LAUNCH_RECORD.pack(wire.RECORD_HTOD, 0, 1, 1, 1, 1, 1, 1, 0, claimed)
                  + wire.HTOD_FIELDS.pack(ptr) + b"\x55" * 16)
        session.send({"op": "launches", "count": 1}, [record + bytes(-len(record) % 8)])
        session.send({"op": "dtoh", "src": ptr, "size": 64, "stream": 0})
        assert session.gpu.poll(20000)
        reply, *data = session.gpu.recv_multipart()
        reply = protocol.unpack(reply)
        assert reply["err"] == cudaError.cudaErrorInvalidValue and "claims 40 bytes of parameters" in reply["msg"]
        assert session.call({"op": "dtoh", "src": ptr, "size": 64, "stream": 0})["err"] == 0
        session.send({"op": "dtoh", "src": ptr, "size": 64, "stream": 0})
        assert session.gpu.poll(20000)
        assert b"".join(session.gpu.recv_multipart()[1:]) == bytes(64)  # nothing was written
    finally:
        session.close()


def test_on_a_gpu(compile_cuda, server_factory):
    """The cupy backend: the kernels check every byte themselves, on the GPU
    (cuLaunchKernel's packed buffer of 32,764 bytes)."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    server = server_factory("--backend", "cupy", "--devices", "1")
    _passed(run_program(compile_cuda("large_params.cu"), server, timeout=300))
