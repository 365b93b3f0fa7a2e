"""Peer topology true to where the GPUs are: two sim GPUs of one server can
access each other (simpleP2P's flow: kernels on one GPU load and store the
other's memory once peer access is enabled, and not before or after), GPUs
of different servers have no link but still copy between them.  Real
nvcc-built programs (tests/cuda/peer_topology.cu) run unmodified against
real sim servers."""
from __future__ import annotations

import pytest

from conftest import CUDA_SOURCES, requires_nvcc, run_program

pytestmark = requires_nvcc

KERNELS = str(CUDA_SOURCES / "peer_kernels.py")


def run_topology(compile_cuda, servers):
    result = run_program(compile_cuda("peer_topology.cu"), servers)
    assert result.returncode == 0 and "PASSED peer_topology" in result.stdout, result.stdout + result.stderr
    for section in ("topology", "bad queries"):
        assert f"ok {section}" in result.stdout
    return result


def test_two_gpus_of_one_server_are_peers(compile_cuda, server_factory):
    server = server_factory("--backend", "sim", "--devices", "2", "--kernels", KERNELS)
    result = run_topology(compile_cuda, server)
    # They share the server's memory: access, the best rank, no atomics or
    # CUDA arrays across the link (the sim has neither).
    for pair in ("0 1", "1 0"):
        assert f"p2p {pair}: access 1 rank 0 atomics 0 arrays 0 canAccessPeer 1" in result.stdout
    for section in ("no access before enabling", "peer copies", "kernels on peer memory",
                    "no access after disabling"):
        assert f"ok {section}" in result.stdout, result.stdout + result.stderr
    assert "ok copies without peer access" not in result.stdout


def test_gpus_of_different_servers_have_no_link_but_copy(compile_cuda, server_factory):
    servers = [server_factory("--backend", "sim", "--kernels", KERNELS) for _ in range(2)]
    result = run_topology(compile_cuda, servers)
    for pair in ("0 1", "1 0"):
        assert f"p2p {pair}: access 0 rank 0 atomics 0 arrays 0 canAccessPeer 0" in result.stdout
    assert "ok copies without peer access" in result.stdout, result.stdout + result.stderr
    assert "ok kernels on peer memory" not in result.stdout


def test_three_gpus_one_server_and_one_elsewhere(compile_cuda, server_factory):
    """Each pair reports what its own servers say: GPU0-2 are peers, GPU3 is
    nobody's."""
    three = server_factory("--backend", "sim", "--devices", "3", "--kernels", KERNELS)
    one = server_factory("--backend", "sim", "--kernels", KERNELS)
    result = run_topology(compile_cuda, [three, one])
    for i in range(4):
        for j in range(4):
            if i != j:
                linked = int(i < 3 and j < 3)
                assert (f"p2p {i} {j}: access {linked} rank 0 atomics 0 arrays 0 canAccessPeer {linked}"
                        in result.stdout), result.stdout
