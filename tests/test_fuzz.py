"""The server under fuzzing: tens of thousands of malformed and mutated
frames (rcuda.fuzz, bounded in count and time) on the daemon's socket, on a
session's lane (its device's connection; sealed, and its records attacked,
on a --auth server) and its GPU socket, then a normal client must run
correctly.  The longer run (>= 100,000 frames) is
benchmarks/fuzz.py."""
from __future__ import annotations

import pytest

from auth_helpers import make_keys
from conftest import CUDA_SOURCES, requires_nvcc, run_program
from rcuda.auth import ClientKeys
from rcuda.config import parse_server
from rcuda.errors import cudaError
from rcuda.fuzz import Fuzzer

pytestmark = requires_nvcc


@pytest.mark.parametrize("seed", [1, 2])
def test_server_survives_malformed_frames_and_serves_a_normal_client(seed, server_factory, compile_cuda):
    server = server_factory("--backend", "sim", "--kernels", str(CUDA_SOURCES / "sim_kernels.py"),
                            "--memory-limit", str(64 << 20))
    report = Fuzzer(server.address, seed=seed).run(frames=25_000, seconds=90)
    assert report.session_ok and report.frames_sent == 25_000
    assert report.replies > 5_000 and report.error_replies < report.replies  # answered, mostly refused
    # Half the frames went on the lane, well-framed: each one the server
    # answers is answered in time; bad framing then closed the lane.
    assert report.lane_frames_sent > 10_000 and report.lane_replies > 5_000 and report.lane_timeouts == 0, \
        report.lane_timeout_ops
    assert report.lane_closed_on_garbage
    assert server.process.poll() is None, server.stderr
    assert "Traceback" not in server.stderr, server.stderr[server.stderr.index("Traceback") - 500:][:3000]
    assert server.stderr.count("\n") < 2_000  # complaints are rate-limited, not one line a frame
    result = run_program(compile_cuda("vector_add.cu"), server, "100000")
    assert "PASSED vectorAdd n=100000" in result.stdout, result.stdout + result.stderr


def test_a_peer_wait_sent_on_the_lane_is_released(server_factory):
    """A well-formed peer_wait holds its GPU's thread, and so the lane, until
    its transfer comes or is aborted.  The fuzzer aborted only the waits it
    sent on the GPU's socket, so one on the lane stalled the run (seed 8:
    2 s in, then the session ended as silent): it notes those too."""
    server = server_factory("--backend", "sim", "--devices", "2")
    fuzzer = Fuzzer(server.address, seed=0)
    fuzzer.open_session()
    try:
        wait = {"op": "peer_wait", "seq": 7, "xfer": 1, "dst": fuzzer.valid_pointers[0], "size": 64,
                "source": "tcp://192.0.2.1:9"}  # nothing will ever come from there
        fuzzer.lane_message = lambda: (wait, [])
        fuzzer._send_on_lane()
        assert fuzzer.wait_sources == {wait["source"]}
        fuzzer._release_waits()
        # Answered within the lane's 5 s receive timeout, carrying the aborted
        # copy's failure as the next reply carries an asynchronous error.
        reply = fuzzer._lane_call({"op": "mem_info", "seq": 8})
        assert reply["err"] == cudaError.cudaErrorDevicesUnavailable, reply
        assert fuzzer._lane_call({"op": "mem_info", "seq": 9})["err"] == 0
    finally:
        fuzzer.context.destroy(linger=0)


def test_a_broken_lane_is_counted_and_a_new_session_goes_on(server_factory, monkeypatch):
    server = server_factory("--backend", "sim")
    fuzzer = Fuzzer(server.address, seed=3)
    send, calls = fuzzer._send_on_lane, []

    def breaks_once():
        calls.append(1)
        if len(calls) == 100:
            fuzzer.lane.sock.close()
        send()

    monkeypatch.setattr(fuzzer, "_send_on_lane", breaks_once)
    report = fuzzer.run(frames=2_000, seconds=60)
    assert report.lane_resets == 1 and report.frames_sent == 2_000 and report.session_ok
    assert report.lane_frames_sent > 500 and report.lane_timeouts == 0, report.lane_timeout_ops
    assert server.process.poll() is None


def test_a_sealed_lane_under_fuzzing_closes_on_every_tampered_record(server_factory, compile_cuda, tmp_path):
    """Against a --auth server (with the accepted key) the fuzzed lane is
    sealed: the requests inside valid records are refused as on a plain
    lane, and every record altered, replayed, reordered or of an impossible
    size closes the lane unanswered; a new session carries on each time."""
    keys = make_keys(tmp_path)
    server = server_factory("--backend", "sim", "--kernels", str(CUDA_SOURCES / "sim_kernels.py"),
                            "--memory-limit", str(64 << 20), "--auth", str(keys.server_dir))
    curve = ClientKeys(str(keys.client_secret), [str(keys.server_public)]).for_server(parse_server(server.address))
    report = Fuzzer(server.address, seed=5, curve=curve).run(frames=12_000, seconds=120)
    assert report.session_ok and report.lane_sealed and report.frames_sent == 12_000
    assert report.lane_frames_sent > 5_000 and report.lane_replies > 2_500 and report.lane_timeouts == 0, \
        report.lane_timeout_ops
    assert report.tampered_records >= 3 and report.tampered_answered == 0
    assert report.lane_resets == report.tampered_records  # each closed its lane, and nothing else did
    assert report.lane_closed_on_garbage
    assert server.process.poll() is None and "Traceback" not in server.stderr, server.stderr[-3000:]
    result = run_program(compile_cuda("vector_add.cu"), server, "100000", env_extra=keys.env())
    assert "PASSED vectorAdd n=100000" in result.stdout, result.stdout + result.stderr
