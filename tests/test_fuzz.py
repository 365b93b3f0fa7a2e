"""The server under fuzzing: tens of thousands of malformed and mutated
frames (rcuda.fuzz, bounded in count and time) on the daemon's socket, on a
session's lane (its device's connection) and its GPU socket, then a normal
client must run correctly.  The longer run (>= 100,000 frames) is
benchmarks/fuzz.py."""
from __future__ import annotations

import pytest

from conftest import CUDA_SOURCES, requires_nvcc, run_program
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
    assert report.lane_frames_sent > 10_000 and report.lane_replies > 5_000 and report.lane_timeouts == 0
    assert report.lane_closed_on_garbage
    assert server.process.poll() is None, server.stderr
    assert "Traceback" not in server.stderr, server.stderr[server.stderr.index("Traceback") - 500:][:3000]
    assert server.stderr.count("\n") < 2_000  # complaints are rate-limited, not one line a frame
    result = run_program(compile_cuda("vector_add.cu"), server, "100000")
    assert "PASSED vectorAdd n=100000" in result.stdout, result.stdout + result.stderr
