"""The forwarding spine, end to end: real nvcc-built programs, unmodified,
through `rcuda run` (or LD_PRELOAD) against real `rcuda server` processes."""
from __future__ import annotations

import re
import socket
import time

import pytest

from conftest import CUDA_SOURCES, RCUDA, requires_nvcc, run_program

pytestmark = requires_nvcc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shows(result, call: str, code: int, name: str) -> bool:
    return f"{call} -> {code} {name}" in result.stdout


def test_vector_add_through_rcuda_run(compile_cuda, sim_server):
    result = run_program(compile_cuda("vector_add.cu"), sim_server)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "devices: 1" in result.stdout
    assert "PASSED vectorAdd n=50000" in result.stdout


def test_vector_add_with_plain_ld_preload(compile_cuda, sim_server):
    result = run_program(compile_cuda("vector_add.cu"), sim_server, "1000", via="preload")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED vectorAdd n=1000" in result.stdout


def test_large_copies_are_chunked_and_exact(compile_cuda, sim_server):
    # 3 x 20 MB each way: several protocol chunks per copy.
    result = run_program(compile_cuda("vector_add.cu"), sim_server, "5000000")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED vectorAdd n=5000000" in result.stdout


def test_parameter_kinds_namespaces_templates_and_grids(compile_cuda, sim_server):
    result = run_program(compile_cuda("kernel_zoo.cu"), sim_server)
    assert result.returncode == 0, result.stdout + result.stderr
    for part in ("scalars", "withStruct", "templates", "namespace", "grid2d", "grid3d", "noParams"):
        assert f"ok {part}" in result.stdout
    assert "device 0: rcuda sim GPU 0, cc 8.0" in result.stdout
    assert "runtime 13000" in result.stdout
    assert "PASSED kernel_zoo" in result.stdout


def test_static_runtime_binary_is_refused_with_advice(compile_cuda, sim_server):
    static = compile_cuda("vector_add.cu", cudart="static")
    result = run_program(static, sim_server)
    assert result.returncode == 2
    assert "static CUDA runtime" in result.stderr and "-cudart shared" in result.stderr
    assert "PASSED" not in result.stdout


def test_unreachable_server_fails_within_timeout_naming_it(compile_cuda):
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = run_program(compile_cuda("errors.cu"), address, "count", env_extra={"RCUDA_TIMEOUT": "2"})
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert shows(result, "cudaGetDeviceCount(&n)", 46, "cudaErrorDevicesUnavailable")
    assert "count=0" in result.stdout
    assert shows(result, "cudaMalloc(&p, 16)", 46, "cudaErrorDevicesUnavailable")  # remembered
    assert address in result.stderr
    assert elapsed < 15, f"took {elapsed:.1f}s with RCUDA_TIMEOUT=2"


def test_a_lost_server_is_reported_without_flooding_the_terminal(compile_cuda):
    """A program that ignores errors and keeps calling: every call fails,
    naming the server, but only the first few say so on stderr, then how
    many were held back."""
    address = f"127.0.0.1:{free_port()}"
    result = run_program(compile_cuda("errors.cu"), address, "count", "500", env_extra={"RCUDA_TIMEOUT": "2"})
    assert result.returncode == 0, result.stderr
    assert "after 500 more calls: 46 cudaErrorDevicesUnavailable" in result.stdout
    naming = [line for line in result.stderr.splitlines() if address in line]
    assert 1 <= len(naming) <= 10, result.stderr[-3000:]


def test_no_servers_configured_means_no_device(compile_cuda):
    result = run_program(compile_cuda("errors.cu"), [], "count", via="preload")
    assert shows(result, "cudaGetDeviceCount(&n)", 100, "cudaErrorNoDevice")
    assert "RCUDA_SERVERS" in result.stderr


def test_kernel_without_sim_implementation(compile_cuda, sim_server):
    result = run_program(compile_cuda("errors.cu"), sim_server, "missing")
    assert shows(result, "cudaGetLastError()", 98, "cudaErrorInvalidDeviceFunction")
    assert shows(result, "cudaGetLastError()", 0, "cudaSuccess")  # not sticky
    assert shows(result, "cudaDeviceSynchronize()", 0, "cudaSuccess")
    assert "noSimKernel" in result.stderr and "--kernels" in result.stderr


def test_out_of_bounds_is_an_illegal_address_sticky_and_server_survives(compile_cuda, sim_server):
    result = run_program(compile_cuda("errors.cu"), sim_server, "oob")
    lines = result.stdout.splitlines()
    assert "cudaGetLastError() -> 0 cudaSuccess" in lines  # the launch itself
    assert shows(result, "cudaDeviceSynchronize()", 700, "cudaErrorIllegalAddress")
    assert lines.count("cudaGetLastError() -> 700 cudaErrorIllegalAddress") == 2  # sticky
    assert shows(result, "cudaMalloc(&q, 16)", 700, "cudaErrorIllegalAddress")
    # The server is unharmed: the next program runs normally.
    again = run_program(compile_cuda("vector_add.cu"), sim_server, "1000")
    assert "PASSED" in again.stdout, again.stderr
    assert sim_server.process.poll() is None


def test_device_side_assert(compile_cuda, sim_server):
    result = run_program(compile_cuda("errors.cu"), sim_server, "assert")
    assert shows(result, "cudaDeviceSynchronize()", 710, "cudaErrorAssert")
    assert shows(result, "cudaGetLastError()", 710, "cudaErrorAssert")


def test_exception_in_kernel_is_a_launch_failure_with_its_message(compile_cuda, sim_server):
    result = run_program(compile_cuda("errors.cu"), sim_server, "raise")
    assert shows(result, "cudaDeviceSynchronize()", 719, "cudaErrorLaunchFailure")
    assert "something in the kernel went wrong" in result.stderr


def test_bad_pointers_and_kinds_are_rejected_and_not_sticky(compile_cuda, sim_server):
    result = run_program(compile_cuda("errors.cu"), sim_server, "badptr")
    assert shows(result, "cudaMemcpy(h, (void *)0x1234, sizeof(h), cudaMemcpyDeviceToHost)", 1,
                 "cudaErrorInvalidValue")
    assert shows(result, "cudaGetLastError()", 1, "cudaErrorInvalidValue")
    assert shows(result, "cudaGetLastError()", 0, "cudaSuccess")
    assert shows(result, "cudaFree((void *)0x1234)", 1, "cudaErrorInvalidValue")
    assert shows(result, "cudaMemcpy(d, h, sizeof(h), (cudaMemcpyKind)42)", 21, "cudaErrorInvalidMemcpyDirection")
    assert shows(result, "cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost)", 0, "cudaSuccess")


def test_invalid_launch_configuration_is_reported_at_launch(compile_cuda, sim_server):
    result = run_program(compile_cuda("errors.cu"), sim_server, "badconfig")
    lines = result.stdout.splitlines()
    assert lines.count("cudaGetLastError() -> 9 cudaErrorInvalidConfiguration") == 2
    assert shows(result, "cudaDeviceSynchronize()", 0, "cudaSuccess")


def test_invalid_device_ordinal(compile_cuda, sim_server):
    result = run_program(compile_cuda("errors.cu"), sim_server, "baddevice")
    assert shows(result, "cudaSetDevice(99)", 101, "cudaErrorInvalidDevice")
    assert shows(result, "cudaGetLastError()", 101, "cudaErrorInvalidDevice")
    assert "device=0" in result.stdout


def test_last_error_is_answered_in_c_until_something_fails(compile_cuda, server_factory):
    """native/last_error.c: the launch-and-check loop never enters Python;
    an error of this thread, of another thread, or sticky on another GPU is
    reported exactly as the Python runtime reports it."""
    server = server_factory("--backend", "sim", "--devices", "2", "--kernels", str(CUDA_SOURCES / "sim_kernels.py"))
    launches = 2000
    result = run_program(compile_cuda("last_error.cu"), server, str(launches), env_extra={"RCUDA_STATS": "1"})
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr
    through_python = [line for line in result.stderr.splitlines()
                      if "cudaGetLastError/cudaPeekAtLastError (through Python)" in line]
    # The program checks more than `launches` times; Python answers only the
    # first check of each thread and device, and those after an error.
    calls = int(through_python[0].split()[2]) if through_python else 0
    assert 0 < calls <= 20, through_python


def test_a_program_that_makes_no_cuda_call_does_not_start_the_client(compile_cuda, sim_server):
    """Kernels are registered before main in every run; the client (the
    embedded interpreter, ~100 ms) starts only at the first real call.
    PYTHONPROFILEIMPORTTIME makes the embedded interpreter report its
    imports, which shows whether it started."""
    program = compile_cuda("vector_add.cu")
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    idle = run_program(program, sim_server, "--help", via="preload", env_extra=env)
    assert "usage" in (idle.stdout + idle.stderr).lower()
    assert "import time:" not in idle.stderr, idle.stderr[-2000:]
    used = run_program(program, sim_server, "1000", via="preload", env_extra=env)
    assert "PASSED" in used.stdout, used.stdout + used.stderr
    assert "import time:" in used.stderr and "rcuda.client.entrypoints" in used.stderr
    # A runtime-only program loads neither the driver API's functions nor the libraries'.
    imported = re.findall(r"^import time:.*\|\s+(\S+)$", used.stderr, re.M)
    assert "rcuda.client.runtime.memory" in imported, imported
    for module in ("rcuda.client.driver.core", "rcuda.client.driver.memory", "rcuda.client.libraries.cublas"):
        assert module not in imported, f"{module} is imported by a program that never calls it"


def test_cuda_modules_loaded_and_closed_before_and_after_the_first_call(compile_cuda, sim_server):
    """A library's module closed before the first call never reaches the
    client; one loaded after it is registered at once, used, and forgotten
    on dlclose, while the program's own module stays."""
    library = compile_cuda("module_library.cu", "-shared", "-Xcompiler", "-fPIC")
    program = compile_cuda("dlopen_modules.cu", "-ldl")
    result = run_program(program, sim_server, str(library), via="preload")
    assert "PASSED dlopen_modules" in result.stdout, result.stdout + result.stderr


def test_embedded_interpreter_failure_aborts_loudly(compile_cuda, sim_server, tmp_path):
    # An rcuda package that cannot be imported, found before the real one.
    (tmp_path / "rcuda").mkdir()
    (tmp_path / "rcuda" / "__init__.py").write_text("raise ImportError('broken rcuda install')\n")
    result = run_program(compile_cuda("vector_add.cu"), sim_server, "1000", via="preload",
                         env_extra={"RCUDA_PYTHONPATH": str(tmp_path)})
    assert result.returncode != 0
    assert "did not start" in result.stderr and "broken rcuda install" in result.stderr
    assert "PASSED" not in result.stdout


def test_rcuda_run_finds_programs_like_a_shell(compile_cuda, sim_server, tmp_path):
    import shutil
    import subprocess
    import sys
    program = tmp_path / "vadd"
    shutil.copy(compile_cuda("vector_add.cu"), program)
    relative = subprocess.run([sys.executable, "-m", "rcuda.cli", "run", "--servers", sim_server.address, "--",
                               "./vadd", "100"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "PASSED vectorAdd n=100" in relative.stdout, relative.stderr
    missing = subprocess.run([sys.executable, "-m", "rcuda.cli", "run", "--servers", sim_server.address, "--",
                              "./no-such-program"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "command not found" in missing.stderr and "Traceback" not in missing.stderr
