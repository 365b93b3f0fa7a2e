"""CUDA IPC memory handles: tests/cuda/ipc_memory.cu, a parent and its forked
child sharing device memory of one sim GPU through rcuda (each process its
own session, so its own server worker), with the runtime's and the
driver's calls, and the errors of bad handles."""
from __future__ import annotations

from conftest import requires_nvcc
from program_paths import check_section, run_on_sim
from test_batch_copies import LINK_DRIVER

pytestmark = requires_nvcc


def test_two_processes_share_device_memory(compile_cuda):
    result = run_on_sim(compile_cuda, "ipc_memory.cu", "sim_kernels.py", flags=LINK_DRIVER, devices=1)
    check_section(result, "child", "shared", "errors")
    assert result.returncode == 0 and "PASSED ipc_memory" in result.stdout, result.stdout + result.stderr[-3000:]


def test_on_an_auth_server(compile_cuda, tmp_path):
    """The handle travels the ZeroMQ link the same way."""
    result = run_on_sim(compile_cuda, "ipc_memory.cu", "sim_kernels.py", flags=LINK_DRIVER, devices=1,
                        auth_root=tmp_path)
    check_section(result, "child", "shared", "errors")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


def test_two_processes_share_a_memory_pool(compile_cuda):
    """tests/cuda/pool_ipc.cu: a pool's POSIX file descriptor and its
    pointers' export data, runtime and driver API, and their errors (no
    handle types, a bad handle type, garbage, a stale pointer, an exporter
    gone)."""
    result = run_on_sim(compile_cuda, "pool_ipc.cu", "sim_kernels.py", flags=LINK_DRIVER, devices=1)
    check_section(result, "errors", "importer", "driver_importer", "short_lived", "shared", "exporter_gone")
    assert result.returncode == 0 and "PASSED pool_ipc" in result.stdout, result.stdout + result.stderr[-3000:]


def test_a_memory_pool_on_an_auth_server(compile_cuda, tmp_path):
    result = run_on_sim(compile_cuda, "pool_ipc.cu", "sim_kernels.py", flags=LINK_DRIVER, devices=1,
                        auth_root=tmp_path)
    check_section(result, "errors", "importer", "driver_importer", "short_lived", "shared", "exporter_gone")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


def test_two_processes_share_an_event(compile_cuda):
    """tests/cuda/ipc_events.cu: an interprocess event recorded by either
    process is what the other's query sees (runtime and driver API)."""
    result = run_on_sim(compile_cuda, "ipc_events.cu", "mapped_kernels.py", flags=LINK_DRIVER, devices=1)
    check_section(result, "child", "shared", "errors")
    assert result.returncode == 0 and "PASSED ipc_events" in result.stdout, result.stdout + result.stderr[-3000:]


def test_events_on_an_auth_server(compile_cuda, tmp_path):
    result = run_on_sim(compile_cuda, "ipc_events.cu", "mapped_kernels.py", flags=LINK_DRIVER, devices=1,
                        auth_root=tmp_path)
    check_section(result, "child", "shared", "errors")


def test_two_processes_share_physical_memory(compile_cuda):
    """tests/cuda/vmm_ipc.cu: cuMemCreate with POSIX file descriptor handles,
    cuMemExportToShareableHandle in one process, cuMemImportFromShareableHandle
    in another, both mapping the same bytes; and the errors."""
    result = run_on_sim(compile_cuda, "vmm_ipc.cu", "sim_kernels.py", flags=LINK_DRIVER, devices=1)
    check_section(result, "child", "shared", "errors")
    assert result.returncode == 0 and "PASSED vmm_ipc" in result.stdout, result.stdout + result.stderr[-3000:]
