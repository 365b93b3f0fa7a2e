"""Many sessions at once against one server: the load benchmark's run with
fewer sessions (benchmarks/load.py runs 50 and records latencies), and the
daemon's queue of hellos, which keeps clients waiting while it moves and
fails them, saying so, when it does not."""
from __future__ import annotations

import os
import threading
import time

import pytest
import zmq

from conftest import CUDA_SOURCES, requires_nvcc
from rcuda.benchmarks.load import run_load
from rcuda.client.transport.session import ServerSession
from rcuda.config import parse_server
from rcuda.errors import TransportError
from rcuda.server.daemon import parallel_worker_starts

SLOW_START = str(CUDA_SOURCES / "slow_start_kernels.py")


@requires_nvcc
def test_twelve_concurrent_sessions_mixing_copies_and_launches():
    result = run_load(sessions=12, rounds=5, n=16384, progress=lambda message: None)
    assert result["peak_concurrent_sessions"] == 12  # all of them live at once, seen by the server
    assert result["server_tracebacks"] == 0
    assert result["latency_us"]["small"]["n"] == 12 * 5
    assert result["calls_checked"] == 12 * 5 * 7  # and each program checked every result (else it fails)


@pytest.fixture
def slow_worker_server(server_factory, tmp_path):
    """A server whose workers each take `delay` seconds to start (written to
    the returned file; 0 while the server itself starts)."""
    delay = tmp_path / "delay"
    delay.write_text("0")
    server = server_factory("--backend", "sim", "--kernels", SLOW_START,
                            env=dict(os.environ, RCUDA_TEST_WORKER_DELAY=str(delay)))
    return server, delay


def connect_all(address: str, count: int, timeout: float) -> list:
    """`count` hellos at once, as many programs starting together would."""
    context = zmq.Context.instance()
    results: list = [None] * count

    def hello(i: int) -> None:
        try:
            results[i] = ServerSession.connect(context, parse_server(address), timeout)
        except TransportError as exc:
            results[i] = exc

    threads = [threading.Thread(target=hello, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def test_queued_hellos_keep_waiting_while_the_queue_moves(slow_worker_server):
    """Hellos for three waves of workers (the daemon starts as many at once
    as the machine has CPUs), each worker 2 s to start: the last waits far
    longer than its 3 s timeout, and gets its session, because its place in
    the queue keeps improving."""
    server, delay = slow_worker_server
    delay.write_text("2")
    hellos = 3 * parallel_worker_starts() + 2  # one is served by the spare
    started = time.monotonic()
    results = connect_all(server.address, hellos, timeout=3.0)
    took = time.monotonic() - started
    try:
        failures = [r for r in results if not isinstance(r, ServerSession)]
        assert not failures, failures
        assert len({r.token for r in results}) == hellos
        assert took > 3.0, f"all {hellos} sessions in {took:.1f}s: the queue was never longer than the timeout"
    finally:
        for r in results:
            if isinstance(r, ServerSession):
                r.close()


def test_a_queue_that_does_not_move_fails_within_the_timeout(slow_worker_server):
    server, delay = slow_worker_server
    delay.write_text("120")  # the spare replacing the first session's worker will not be ready in time
    first = connect_all(server.address, 1, timeout=10.0)[0]
    assert isinstance(first, ServerSession), first
    try:
        started = time.monotonic()
        second = connect_all(server.address, 1, timeout=2.0)[0]
        assert isinstance(second, TransportError), second
        assert "still queued at position 0 for a session worker" in str(second)
        assert time.monotonic() - started < 15
        # The daemon notices the client gave up: no worker will be spent on it.
        assert server.wait_for_log("queued hello(s) dropped: their clients went away"), server.stderr[-2000:]
    finally:
        first.close()


def test_max_sessions_refuses_more_and_frees_the_place_when_one_ends(server_factory):
    from rcuda.errors import CudaError
    server = server_factory("--backend", "sim", "--max-sessions", "2", "--session-timeout", "2")
    first, second = connect_all(server.address, 2, timeout=10.0)
    assert isinstance(first, ServerSession) and isinstance(second, ServerSession), (first, second)
    try:
        with pytest.raises(CudaError, match=r"at its limit of 2 sessions \(--max-sessions\)"):
            ServerSession.connect(zmq.Context.instance(), parse_server(server.address), 10.0)
        first.close()  # no more heartbeats: its worker ends the session after --session-timeout
        deadline, third = time.monotonic() + 30, None
        while third is None and time.monotonic() < deadline:
            try:
                third = ServerSession.connect(zmq.Context.instance(), parse_server(server.address), 10.0)
            except CudaError:
                time.sleep(0.5)
        assert third is not None, "the ended session's place was not freed"
        third.close()
    finally:
        second.close()
