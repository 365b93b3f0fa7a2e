"""Stream memory operations (tests/cuda/stream_memops.cu): cuStreamWriteValue32/64,
cuStreamWaitValue32/64 and cuStreamBatchMemOp, all their exports, run
unmodified through rcuda on a two-GPU sim server, on the lane and on the
ZeroMQ link, and built with --default-stream per-thread; the rules
(rcuda/stream_memops.py) against cuda.h; the stream_mem_ops request,
malformed ones included, on a server; the sim's and the cupy backend's parts."""
from __future__ import annotations

import contextlib
import ctypes
import time
import types

import numpy as np
import pytest

from auth_helpers import KeyedSession
from conftest import requires_nvcc
from program_paths import ON_SOCKETS, check_passed, check_section, run_on_sim
from rcuda import protocol
from rcuda import stream_memops as rules
from rcuda.binaries import dropin_dir
from rcuda.errors import CudaError, ProtocolError, cudaError
from rcuda.server.backends import cupy_backend
from rcuda.server.backends.sim import SimBackend

SECTIONS = ["attributes", "write_value", "wait_value", "two_streams", "batch", "bad_arguments", "two_gpus",
            "unsatisfied"]
LINK_DRIVER = (f"-L{dropin_dir()}", "-l:libcuda.so.1")


def _run(compile_cuda, *sections, flags=(), env=None):
    return run_on_sim(compile_cuda, "stream_memops.cu", "sim_kernels.py", *sections, flags=(*LINK_DRIVER, *flags),
                      env=env)


@pytest.fixture(scope="module")
def result(compile_cuda):
    return _run(compile_cuda)


@requires_nvcc
@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


@requires_nvcc
def test_whole_program_passes(result):
    check_passed(result, "stream_memops.cu")


@requires_nvcc
def test_on_the_zeromq_link(compile_cuda):
    sections = ("write_value", "two_streams", "batch", "unsatisfied")
    check_section(_run(compile_cuda, *sections, env=ON_SOCKETS), *sections)


@requires_nvcc
def test_per_thread_default_stream(compile_cuda):
    """Built with --default-stream per-thread: cuda.h names the _v2_ptsz exports."""
    sections = ("write_value", "wait_value", "two_streams", "batch", "bad_arguments")
    check_section(_run(compile_cuda, *sections, flags=("--default-stream", "per-thread")), *sections)


# ---------------------------------------------------------------- the rules


CONSTANTS = {
    "CU_STREAM_MEM_OP_WAIT_VALUE_32": rules.WAIT_VALUE_32, "CU_STREAM_MEM_OP_WRITE_VALUE_32": rules.WRITE_VALUE_32,
    "CU_STREAM_MEM_OP_WAIT_VALUE_64": rules.WAIT_VALUE_64, "CU_STREAM_MEM_OP_WRITE_VALUE_64": rules.WRITE_VALUE_64,
    "CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES": rules.FLUSH_REMOTE_WRITES, "CU_STREAM_MEM_OP_BARRIER": rules.BARRIER,
    "CU_STREAM_WAIT_VALUE_GEQ": rules.WAIT_GEQ, "CU_STREAM_WAIT_VALUE_EQ": rules.WAIT_EQ,
    "CU_STREAM_WAIT_VALUE_AND": rules.WAIT_AND, "CU_STREAM_WAIT_VALUE_NOR": rules.WAIT_NOR,
    "CU_STREAM_WAIT_VALUE_FLUSH": rules.WAIT_FLUSH,
    "CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER": rules.WRITE_NO_MEMORY_BARRIER,
    "CU_STREAM_MEMORY_BARRIER_TYPE_SYS": rules.BARRIER_TYPES[0],
    "CU_STREAM_MEMORY_BARRIER_TYPE_GPU": rules.BARRIER_TYPES[1],
}


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    """What the C compiler says of cuda.h's batch structure and constants."""
    from cuda_h_layout import report
    return report(tmp_path_factory.mktemp("memop_layout"), [cupy_backend.CUstreamBatchMemOpParams], list(CONSTANTS))


def test_the_numbers_are_cuda_h_s(header):
    for name, number in CONSTANTS.items():
        assert header[name][0] == number, name


def test_the_batch_structure_is_laid_out_as_cuda_h_says(header):
    from cuda_h_layout import check_structure
    check_structure(header, cupy_backend.CUstreamBatchMemOpParams)


@pytest.mark.parametrize("word, value, flags, width, expected", [
    (5, 5, rules.WAIT_GEQ, 4, True), (5, 6, rules.WAIT_GEQ, 4, False), (5, 0xFFFFFFF0, rules.WAIT_GEQ, 4, True),
    (0x80000005, 5, rules.WAIT_GEQ, 4, False),  # 2**31 ahead is "behind": the cyclic compare
    (0x7FFFFFFF, 0, rules.WAIT_GEQ, 4, True), (1, 2**64 - 1, rules.WAIT_GEQ, 8, True),
    (2**63, 0, rules.WAIT_GEQ, 8, False),
    (7, 7, rules.WAIT_EQ, 4, True), (7, 8, rules.WAIT_EQ, 4, False),
    (6, 2, rules.WAIT_AND, 4, True), (6, 1, rules.WAIT_AND, 4, False),
    (0, 0, rules.WAIT_NOR, 4, True), (0xFFFFFFFF, 0, rules.WAIT_NOR, 4, False),
    (0xFFFF0000, 0x0000FFFF, rules.WAIT_NOR, 4, False), (0xFFFF0000, 0x0000FFFF, rules.WAIT_NOR, 8, True),
    (5, 5, rules.WAIT_EQ | rules.WAIT_FLUSH, 4, True),
])
def test_wait_conditions(word, value, flags, width, expected):
    assert rules.satisfied(word, value, flags, width) is expected


@pytest.mark.parametrize("op, fine", [
    ([rules.WRITE_VALUE_32, 0x1000, 2**32 - 1, 1], True), ([rules.WRITE_VALUE_32, 0x1000, 2**32, 0], False),
    ([rules.WRITE_VALUE_64, 0x1008, 2**64 - 1, 0], True), ([rules.WRITE_VALUE_64, 0x1004, 1, 0], False),
    ([rules.WAIT_VALUE_32, 0x1002, 1, 0], False), ([rules.WAIT_VALUE_32, 0, 1, 0], False),
    ([rules.WAIT_VALUE_32, 0x1000, 1, rules.WAIT_NOR | rules.WAIT_FLUSH], True),
    ([rules.WAIT_VALUE_32, 0x1000, 1, 4], False), ([rules.WRITE_VALUE_32, 0x1000, 1, 2], False),
    ([rules.BARRIER, 0, 0, 1], True), ([rules.BARRIER, 0, 0, 2], False), ([rules.BARRIER, 8, 0, 0], False),
    ([rules.FLUSH_REMOTE_WRITES, 0, 0, 0], True), ([rules.FLUSH_REMOTE_WRITES, 0, 0, 1], False),
    ([7, 0x1000, 0, 0], False), ([0, 0, 0, 0], False), ([rules.WRITE_VALUE_32, 0x1000, 1], False),
    ([rules.WRITE_VALUE_32, 0x1000, -1, 0], False), ([rules.WRITE_VALUE_32, 0x1000, True, 0], False),
    ([rules.WRITE_VALUE_32, "0x1000", 1, 0], False), ("op", False), (None, False),
])
def test_which_operations_are_well_formed(op, fine):
    assert (rules.problem(op) is None) is fine


# ---------------------------------------------------------------- the backends


@pytest.fixture
def sim():
    return SimBackend(devices=1).open_device(0)


def _word(device, ptr: int, width: int = 4) -> int:
    data, done = device.memcpy_dtoh(ptr, width)
    return int.from_bytes(bytes(data), "little")


def test_the_sim_runs_a_batch_in_order(sim):
    ptr = sim.malloc(64)
    sim.stream_mem_ops([(rules.WRITE_VALUE_32, ptr, 3, 0), (rules.WAIT_VALUE_32, ptr, 3, rules.WAIT_EQ),
                        (rules.BARRIER, 0, 0, 0), (rules.WRITE_VALUE_64, ptr + 8, 2**64 - 2, 0),
                        (rules.WAIT_VALUE_64, ptr + 8, 2**64 - 3, rules.WAIT_GEQ),
                        (rules.FLUSH_REMOTE_WRITES, 0, 0, 0), (rules.WRITE_VALUE_32, ptr, 4, 1)], 0)
    assert (_word(sim, ptr), _word(sim, ptr + 8, 8)) == (4, 2**64 - 2)


def test_the_sim_checks_every_address_before_running_any(sim):
    ptr = sim.malloc(16)
    with pytest.raises(CudaError) as failure:
        sim.stream_mem_ops([(rules.WRITE_VALUE_32, ptr, 1, 0), (rules.WRITE_VALUE_64, ptr + 16, 1, 0)], 0)
    assert failure.value.status == cudaError.cudaErrorInvalidValue
    assert _word(sim, ptr) == 0


def test_an_unsatisfied_wait_fails_on_the_sim_and_stops_its_batch(sim):
    ptr = sim.malloc(16)
    with pytest.raises(CudaError, match="arrival order") as failure:
        sim.stream_mem_ops([(rules.WRITE_VALUE_32, ptr, 1, 0), (rules.WAIT_VALUE_32, ptr, 2, rules.WAIT_GEQ),
                            (rules.WRITE_VALUE_32, ptr + 4, 9, 0)], 0)
    assert failure.value.status == cudaError.cudaErrorNotSupported
    assert (_word(sim, ptr), _word(sim, ptr + 4)) == (1, 0)


def test_a_wait_in_modelled_time_waits_for_the_write_that_satisfied_it(sim):
    """The sim's modelled time: a write behind a long kernel happens when
    the kernel ends, and another stream's wait for it ends no earlier."""
    ptr = sim.malloc(16)
    sim.stream_create(1, 1, 0)
    sim.stream_create(2, 1, 0)
    end = time.perf_counter() + 30
    sim._ends(1, end)  # as a kernel with COSTS would leave stream 1
    sim.stream_mem_ops([(rules.WRITE_VALUE_32, ptr, 1, 0)], 1)
    sim.stream_mem_ops([(rules.WAIT_VALUE_32, ptr, 1, rules.WAIT_EQ)], 2)
    assert not sim.stream_query(2) and sim._stream_done_at(2) >= end
    sim.stream_create(3, 1, 0)
    sim.stream_mem_ops([(rules.WAIT_VALUE_32, ptr + 4, 0, rules.WAIT_EQ)], 3)  # no write to wait for
    assert sim.stream_query(3)


class _FakeDriver:
    def __init__(self):
        self.calls = []

    def __call__(self, stream, count, params, flags):
        ops = ctypes.cast(params, ctypes.POINTER(cupy_backend.CUstreamBatchMemOpParams * count)).contents
        self.calls.append((stream.value, count, flags, [bytes(op) for op in ops]))
        return 0


def test_the_cupy_backend_makes_one_cu_stream_batch_mem_op_v2_call(monkeypatch):
    from rcuda.server.backends.base import Allocation, AllocationTable
    fake = _FakeDriver()
    monkeypatch.setattr(cupy_backend, "_cu_stream_batch_mem_op", lambda: fake)
    memory = AllocationTable()
    memory.add(Allocation(0x10000, 64, None))
    device = types.SimpleNamespace(_streams={0: 0, 3: 0x5000}, index=0, _memory=memory,
                                   _cuda=lambda what: contextlib.nullcontext())
    ops = [(rules.WRITE_VALUE_32, 0x10000, 7, rules.WRITE_NO_MEMORY_BARRIER),
           (rules.WAIT_VALUE_64, 0x10008, 2**64 - 1, rules.WAIT_NOR), (rules.BARRIER, 0, 0, 1),
           (rules.FLUSH_REMOTE_WRITES, 0, 0, 0)]
    cupy_backend.CupyDevice.stream_mem_ops(device, ops, 3)
    (stream, count, flags, params), = fake.calls
    assert (stream, count, flags) == (0x5000, 4, 0)
    layout = [np.frombuffer(p, np.uint64) for p in params]
    # {operation, address, value64, flags, alias}: the write's NO_MEMORY_BARRIER is dropped (v2 takes none)
    assert [int(v) for v in layout[0][:4]] == [rules.WRITE_VALUE_32, 0x10000, 7, 0]
    assert [int(v) for v in layout[1][:4]] == [rules.WAIT_VALUE_64, 0x10008, 2**64 - 1, rules.WAIT_NOR]
    assert int(layout[2][0]) == rules.BARRIER | 1 << 32 and int(layout[3][0]) == rules.FLUSH_REMOTE_WRITES
    with pytest.raises(CudaError):  # beyond the allocation: refused before the driver is called
        cupy_backend.CupyDevice.stream_mem_ops(device, [(rules.WRITE_VALUE_64, 0x10040, 1, 0)], 0)
    assert len(fake.calls) == 1


# ---------------------------------------------------------------- the request, on a server


@pytest.fixture
def session(sim_server):
    session = KeyedSession(sim_server.address, None)
    yield session
    session.close()



def test_the_request_is_sent_without_a_reply():
    header = {"op": "stream_mem_ops", "seq": 1, "stream": 0, "ops": [[rules.WRITE_VALUE_32, 0x1000, 1, 0]]}
    assert protocol.check_header(header) == "stream_mem_ops" and not protocol.expects_reply(header)
    with pytest.raises(ProtocolError):
        protocol.check_header(dict(header, ops=5))
    with pytest.raises(ProtocolError):
        protocol.check_header(dict(header, ops=[], **{"async": True}))


def test_a_server_writes_and_waits(session):
    ptr = session.call({"op": "malloc", "size": 64})["ptr"]
    session.send({"op": "stream_mem_ops", "stream": 0, "ops": [[rules.WRITE_VALUE_64, ptr, 0x1122334455667788, 0],
                                                               [rules.WAIT_VALUE_32, ptr, 0x55667788, rules.WAIT_EQ],
                                                               [rules.WRITE_VALUE_32, ptr + 8, 9, 0]]})
    assert session.call({"op": "sync"})["err"] == 0
    assert session.read(ptr, 12) == (0x1122334455667788).to_bytes(8, "little") + (9).to_bytes(4, "little")


@pytest.mark.parametrize("ops, stream, error", [
    ([], 0, "operations"), ([[rules.WRITE_VALUE_32, "PTR", 1, 0]] * 256, 0, "operations"),
    ("not a list of lists", 0, "must be list"), ([[rules.WRITE_VALUE_32, "PTR", 1]], 0, "four"),
    ([[rules.WRITE_VALUE_32, "PTR", 2**32, 0]], 0, "does not fit"),
    ([[rules.WRITE_VALUE_32, "PTR", 1.5, 0]], 0, "four"), ([[rules.WRITE_VALUE_32, "PTR", None, 0]], 0, "four"),
    ([[9, "PTR", 1, 0]], 0, "not a CUstreamBatchMemOpType"), ([[rules.WAIT_VALUE_32, "PTR", 1, 8]], 0, "flags"),
    ([[rules.WRITE_VALUE_64, "PTR+4", 1, 0]], 0, "aligned"), ([[rules.BARRIER, "PTR", 0, 0]], 0, "no address"),
    ([[rules.WRITE_VALUE_32, "PTR", 1, 0], [{"a": 1}, 0, 0, 0]], 0, "four"),
    ([[rules.WRITE_VALUE_32, "PTR", 1, 0]], 77, "unknown stream"),
    ([[rules.WRITE_VALUE_32, "PTR", 1, 0], [rules.WRITE_VALUE_32, "PTR+64", 1, 0]], 0, "not inside one allocation"),
])
def test_a_malformed_request_is_refused_and_changes_nothing(session, ops, stream, error):
    """Never answered itself, the next reply carries the refusal; but for a
    header whose fields have the wrong types, which is answered at once."""
    ptr = session.call({"op": "malloc", "size": 64})["ptr"]
    places = {"PTR": ptr, "PTR+4": ptr + 4, "PTR+64": ptr + 64}
    if isinstance(ops, list):
        ops = [[places.get(v, v) if isinstance(v, str) else v for v in op] if isinstance(op, list) else op
               for op in ops]
    session.send({"op": "stream_mem_ops", "stream": stream, "ops": ops})
    session.send({"op": "sync"})
    replies = [session.receive()]  # a header of the wrong types is answered (it may not have meant "no reply")
    if replies[0]["seq"] != session.seq:
        replies.append(session.receive())
    assert replies[-1]["seq"] == session.seq
    failed = [reply for reply in replies if reply["err"]]
    assert len(failed) == 1 and error in failed[0]["msg"], replies
    unknown_stream = error == "unknown stream"
    expected = cudaError.cudaErrorInvalidResourceHandle if unknown_stream else cudaError.cudaErrorInvalidValue
    assert failed[0]["err"] == int(expected)
    assert session.call({"op": "sync"})["err"] == 0  # reported once; the session goes on
    assert session.read(ptr, 64) == bytes(64)
