"""Small synchronous calls and cudaMemcpy made in C on the device's lane
(native/sync_fast_path.c, native/allocation_table.c), run through real
programs and servers."""
import re

import pytest

from conftest import CUDA_SOURCES, requires_nvcc, run_program

SYNC_KERNELS = str(CUDA_SOURCES / "sync_kernels.py")


def calls_made_in_c(stderr: str) -> int:
    """From the client's exit report (RCUDA_LOG=info)."""
    found = re.search(r"GPU0 \(.*\): (\d+) synchronous call\(s\) made in C", stderr)
    assert found, "no report of the calls made in C:\n" + stderr[-3000:]
    return int(found[1])


@requires_nvcc
@pytest.mark.parametrize("flags", [(), ("--default-stream", "per-thread")], ids=["legacy", "per-thread"])
def test_calls_made_in_c_keep_program_order_results_output_and_errors(compile_cuda, server_factory, flags):
    """Python's traffic (asynchronous copies) before launches and a
    synchronisation lands first; results, device output and a kernel's fault
    come back as CUDA reports them, whoever made the call; and C makes the
    calls of a loop that only launches and synchronises."""
    server = server_factory("--backend", "sim", "--kernels", SYNC_KERNELS)
    loop = 300
    result = run_program(compile_cuda("sync_in_c.cu", *flags), server, "30", str(loop),
                         env_extra={"RCUDA_LOG": "info"})
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr[-3000:]
    assert "say 1\nsay 2\nsay 3\n" + "".join(f"say {i}\n" for i in range(1000, 1700)) in result.stdout
    assert re.search(r"cudaDeviceSynchronize: sync on GPU0 \(127.0.0.1:\d+ GPU0\): .*outOfBounds", result.stderr), \
        result.stderr[-3000:]
    # The loop makes 3 synchronous calls a round; a few may go to Python.
    made = calls_made_in_c(result.stderr)
    assert made >= 0.8 * 3 * loop, f"only {made} of the loop's {3 * loop} calls were made in C"


@requires_nvcc
@pytest.mark.parametrize("flags", [(), ("--default-stream", "per-thread")], ids=["legacy", "per-thread"])
def test_copies_made_in_c_keep_bytes_order_and_errors(compile_cuda, server_factory, flags):
    """cudaMemcpy both ways from 1 byte to 3 MiB (more than the socket
    takes at once), at offsets, with explicit and inferred kinds; after an
    upload on the socket and kernels recorded in C; from two threads at
    once; next to copies C must leave to Python (past an allocation's end,
    freed memory, host to host, NULL, device to device); with device output
    longer than a small reply; and a kernel's fault reported by the next
    copy, sticky afterwards.  C makes most of the copies."""
    server = server_factory("--backend", "sim", "--kernels", SYNC_KERNELS)
    loop = 200
    result = run_program(compile_cuda("memcpy_in_c.cu", *flags), server, str(loop),
                         env_extra={"RCUDA_LOG": "info"})
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    assert "".join(f"say {i}\n" for i in range(700)) in result.stdout
    assert re.search(r"cudaMemcpy(_ptds)?: dtoh on GPU0 \(127.0.0.1:\d+ GPU0\): kernel outOfBounds", result.stderr), \
        result.stderr[-3000:]
    # Of the ordered loop's copies, those after an upload on the socket go to
    # Python (2, 0 and 1 of every three rounds' copies are C's); so do some of
    # the threads' (one waits for the other).
    made = calls_made_in_c(result.stderr)
    assert made >= loop, f"only {made} calls were made in C"


@requires_nvcc
def test_statistics_leave_every_call_to_python(compile_cuda, server_factory):
    """RCUDA_STATS counts each call in Python, so C leaves them all to it."""
    server = server_factory("--backend", "sim", "--kernels", SYNC_KERNELS)
    result = run_program(compile_cuda("sync_in_c.cu"), server, "3", "20",
                         env_extra={"RCUDA_LOG": "info", "RCUDA_STATS": "1"})
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr[-3000:]
    assert calls_made_in_c(result.stderr) == 0
