"""Asynchronous memsets and copies recorded in C with the launches
(native/async_fast_path.c), run through real programs and servers."""
import re

import pytest

from conftest import CUDA_SOURCES, requires_nvcc, run_program

SYNC_KERNELS = str(CUDA_SOURCES / "sync_kernels.py")


def records_made_in_c(stderr: str) -> int:
    """From the client's exit report (RCUDA_LOG=info), for GPU0."""
    found = re.search(r"GPU0 \(.*\): \d+ synchronous call\(s\) made in C on its link, (\d+) asynchronous", stderr)
    assert found, "no report of the records made in C:\n" + stderr[-3000:]
    return int(found[1])


@requires_nvcc
@pytest.mark.parametrize("flags", [(), ("--default-stream", "per-thread")], ids=["legacy", "per-thread"])
def test_recorded_memsets_and_copies_keep_bytes_order_and_errors(compile_cuda, server_factory, flags):
    """Uploads from pageable memory that the program reuses at once, of 1
    byte to 1 MiB (C records up to 64 KiB); memsets; copies within a device
    (cudaMemset and cudaMemcpy within a device too);
    program order with launches and with downloads into pinned memory;
    uploads from pinned memory that an earlier download fills (read when
    the copy runs, so not recorded); two threads at once; what C leaves to
    Python (bad pointers, unknown streams, another device's memory); and a
    kernel's fault reported by the next synchronisation and every recorded
    kind of call after it.  C records at least the loops' memsets and
    uploads."""
    server = server_factory("--backend", "sim", "--devices", "2", "--kernels", SYNC_KERNELS)
    loop = 150
    result = run_program(compile_cuda("async_in_c.cu", *flags), server, str(loop),
                         env_extra={"RCUDA_LOG": "info"})
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    made = records_made_in_c(result.stderr)
    # 2 a round in each ordered loop, 2 a round in each of two threads
    assert made >= 8 * loop, f"only {made} memsets and copies were recorded in C"


@requires_nvcc
def test_statistics_leave_every_memset_and_copy_to_python(compile_cuda, server_factory):
    """RCUDA_STATS counts each call in Python, so C records none of them.
    The program passes either way."""
    server = server_factory("--backend", "sim", "--devices", "2", "--kernels", SYNC_KERNELS)
    result = run_program(compile_cuda("async_in_c.cu"), server, "10",
                         env_extra={"RCUDA_LOG": "info", "RCUDA_STATS": "1"})
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    assert records_made_in_c(result.stderr) == 0
