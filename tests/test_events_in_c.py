"""cudaEventRecord and cudaStreamWaitEvent recorded in C with the launches
(native/async_fast_path.c), run through a real program and server
(tests/cuda/events_in_c.cu)."""
import pytest

from conftest import CUDA_SOURCES, requires_nvcc, run_program
from test_async_in_c import records_made_in_c

STREAM_KERNELS = str(CUDA_SOURCES / "stream_kernels.py")
LOOP = 200


@requires_nvcc
@pytest.mark.parametrize("flags", [(), ("--default-stream", "per-thread")], ids=["legacy", "per-thread"])
def test_event_records_and_waits_keep_cuda_order(compile_cuda, server_factory, flags):
    """A stream waiting for an event is busy while the work before the
    record runs, and the kernel after the wait reads its result; rounds of
    record and wait between two streams, in two threads at once; what stays
    Python's (another device's event, a destroyed one, a wait with flags).
    C records at least the rounds' records and waits."""
    server = server_factory("--backend", "sim", "--devices", "2", "--kernels", STREAM_KERNELS)
    result = run_program(compile_cuda("events_in_c.cu", *flags), server, str(LOOP), env_extra={"RCUDA_LOG": "info"})
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    made = records_made_in_c(result.stderr)
    assert made >= 4 * LOOP + 2 * 4 * LOOP, f"only {made} records and waits were made in C"


@requires_nvcc
def test_memory_pools_take_event_records_back_to_python(compile_cuda, server_factory):
    """Once a pool has freed memory in stream order, each record must note
    its place among the frees (client/memory/pools.py): C makes none then.
    The program passes either way."""
    server = server_factory("--backend", "sim", "--devices", "2", "--kernels", STREAM_KERNELS)
    result = run_program(compile_cuda("events_in_c.cu"), server, str(LOOP), "pool", env_extra={"RCUDA_LOG": "info"})
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    assert records_made_in_c(result.stderr) < 10  # the program's few memsets
