"""Streams, events, host functions, default streams, deferred and sticky
errors, device output, exit and fork: tests/cuda/runtime_streams.cu run
unmodified through rcuda against a sim server."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import CUDA_SOURCES, RCUDA, requires_nvcc, run_program

pytestmark = requires_nvcc

KERNELS = str(CUDA_SOURCES / "runtime_kernels.py")


@pytest.fixture(scope="module")
def program(compile_cuda):
    return compile_cuda("runtime_streams.cu")


@pytest.fixture
def server(server_factory, tmp_path):
    marks = tmp_path / "marks.txt"
    server = server_factory("--backend", "sim", "--kernels", KERNELS,
                            env=dict(os.environ, RCUDA_TEST_MARKS=str(marks)))
    server.marks = marks
    return server


def run(program, server, *args, **kwargs):
    result = run_program(program, server, *args, **kwargs)
    assert "FAILED" not in result.stdout, result.stdout + result.stderr
    return result


def test_streams_order_flags_priorities_and_bad_handles(program, server):
    result = run(program, server, "streams")
    assert "priority range 0 -5" in result.stdout
    assert "ok streams" in result.stdout, result.stdout + result.stderr


def test_events_time_the_device_and_launches_do_not_wait(program, server):
    result = run(program, server, "events")
    assert "ok events" in result.stdout, result.stdout + result.stderr
    elapsed = float(re.search(r"elapsed ([\d.]+) ms", result.stdout)[1])
    returned = float(re.search(r"launch returned after ([\d.]+) ms", result.stdout)[1])
    synchronized = float(re.search(r"synchronized after ([\d.]+) ms", result.stdout)[1])
    assert 299 <= elapsed < 3000          # the modelled 300 ms kernel, as the device timed it
    assert returned < 200 < synchronized  # asynchronous launch, synchronous wait
    assert synchronized >= 299


def test_host_functions_run_in_stream_order(program, server):
    result = run(program, server, "callbacks")
    assert "ok callbacks" in result.stdout, result.stdout + result.stderr
    assert "called inside a host function" in result.stderr


def test_legacy_default_stream_is_shared_by_threads(program, server):
    result = run(program, server, "default_streams")
    assert "ok default_streams" in result.stdout, result.stdout + result.stderr
    assert "shared default stream" in result.stdout


def test_per_thread_default_streams(compile_cuda, server):
    per_thread = compile_cuda("runtime_streams.cu", "--default-stream", "per-thread")
    result = run(per_thread, server, "default_streams")
    assert "ok default_streams" in result.stdout, result.stdout + result.stderr
    assert "per-thread default streams" in result.stdout
    ids = re.search(r"legacy=(\d+) thread0=(\d+) thread1=(\d+)", result.stdout).groups()
    assert len(set(ids)) == 3


def test_async_illegal_address_is_reported_at_sync_sticky_until_reset(program, server):
    result = run(program, server, "sticky")
    assert "ok sticky" in result.stdout, result.stdout + result.stderr


def test_launches_recorded_in_c_keep_program_order(program, server):
    result = run(program, server, "launch_batches")
    assert "ok launch_batches" in result.stdout, result.stdout + result.stderr


def test_device_output_reaches_stdout_in_order(program, server):
    result = run(program, server, "printing")
    lines = result.stdout.splitlines()
    assert lines == ["before", "device says 5", "after", "device says 6", "ok printing"]


def test_async_work_queued_at_exit_is_not_lost(program, server):
    for attempt in range(8):
        server.marks.write_text("")
        result = run(program, server, "exit", "150")
        assert result.returncode == 0 and "queued 150" in result.stdout, result.stderr
        marks = server.marks.read_text().split()
        assert marks == [str(i) for i in range(150)], f"run {attempt}: {len(marks)} of 150 launches arrived"


def test_fork_gives_the_child_its_own_context(program, server):
    result = run(program, server, "fork")
    assert "child ok (1 devices)" in result.stdout
    assert "ok fork" in result.stdout, result.stdout + result.stderr


def test_fork_before_the_first_call_gives_both_the_kernels(program, server):
    result = run(program, server, "fork_first")
    assert "child ok" in result.stdout
    assert "ok fork_first" in result.stdout, result.stdout + result.stderr


def test_threads_racing_to_initialise_the_runtime(program, server):
    result = run(program, server, "threads")
    assert "ok threads" in result.stdout, result.stdout + result.stderr


def test_a_long_kernel_is_not_a_dead_server(program, server):
    # 4 s of kernel with RCUDA_TIMEOUT=1.5: heartbeats keep the server alive meanwhile.
    result = run(program, server, "sync_long", "4000", env_extra={"RCUDA_TIMEOUT": "1.5"})
    seconds = float(re.search(r"sync -> cudaSuccess after ([\d.]+) s", result.stdout)[1])
    assert seconds >= 3.9, result.stdout + result.stderr


@contextlib.contextmanager
def frozen(server):
    """SIGSTOP the whole server (daemon and session workers), like a machine
    that stopped answering; SIGCONT on the way out."""
    os.killpg(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(server.process.pid, signal.SIGCONT)


def run_until_frozen(program, server, scenario: str, first_line: str) -> tuple[str, str, float]:
    """Start the scenario (RCUDA_TIMEOUT=2); when it prints `first_line`,
    freeze the server; returns its output and how long it ran after that."""
    process = subprocess.Popen([*RCUDA, "run", "--servers", server.address, "--timeout", "2", "--", str(program),
                                scenario, "30000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == first_line
        with frozen(server):
            started = time.monotonic()
            out, err = process.communicate(timeout=30)
            return out, err, time.monotonic() - started
    finally:
        process.kill()


def test_a_frozen_server_fails_synchronisation_within_the_timeout(program, server):
    out, err, waited = run_until_frozen(program, server, "sync_long", "syncing")
    assert "sync -> cudaErrorDevicesUnavailable" in out, out + err
    assert waited < 10 and server.address in err  # within RCUDA_TIMEOUT (+ slack), naming the server


def test_a_server_that_dies_fails_synchronisation_at_once(program, server):
    """The server goes away while the program waits in cudaDeviceSynchronize
    (made in C on the lane, native/sync_fast_path.c: the kernel is known and
    nothing else is in flight): the lane closes under the wait, and the call
    fails at once, naming itself, the GPU and the server."""
    process = subprocess.Popen([*RCUDA, "run", "--servers", server.address, "--", str(program), "sync_long",
                                "30000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "syncing"
        time.sleep(0.3)  # into the wait
        os.killpg(server.process.pid, signal.SIGKILL)  # the daemon and its session worker, at once
        started = time.monotonic()
        out, err = process.communicate(timeout=30)
        waited = time.monotonic() - started
    finally:
        process.kill()
    assert "sync -> cudaErrorDevicesUnavailable" in out, out + err
    assert waited < 5, f"{waited:.1f} s to notice\n" + out + err
    assert re.search(rf"cudaDeviceSynchronize on GPU0 \({re.escape(server.address)} GPU0\)", err), err


def test_a_frozen_server_does_not_hang_the_exit(program, server):
    _, _, waited = run_until_frozen(program, server, "exit_long", "exiting")
    assert waited < 10


def test_capture_queries_and_the_error_log(compile_cuda, server):
    """No stream is ever capturing; the thread's capture mode is kept; the
    driver's error log is empty (tests/cuda/capture_queries.cu)."""
    from rcuda.binaries import dropin_dir
    result = run(compile_cuda("capture_queries.cu", f"-L{dropin_dir()}", "-l:libcuda.so.1"), server)
    assert "PASSED capture_queries" in result.stdout, result.stdout + result.stderr
    assert "not supported" not in result.stderr, result.stderr
