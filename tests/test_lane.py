"""The lane (rcuda/lane.py): each device's TCP connection to its server,
where the server offers one.  Its framing (the server's side, also the
tests' and the fuzzer's), a real client's traffic on it, and what a server
does with strangers and garbage on it."""
from __future__ import annotations

import socket
import subprocess
import threading
import time

import numpy as np
import pytest
import zmq

from rcuda import protocol
from rcuda.client.transport.lane import LaneLink
from rcuda.client.state import Runtime
from rcuda.config import ClientConfig, parse_server
from rcuda.errors import CudaError, ProtocolError, cudaError
from rcuda.lane import FRAME_LENGTH, PREFIX, Lane, LaneClosed, UnreadFrame, set_timeouts

from conftest import requires_nvcc, run_program

TESTS = __import__('pathlib').Path(__file__).resolve().parent


@pytest.fixture
def lane_pair():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    server.close()
    left, right = Lane(client), Lane(accepted)
    yield left, right
    left.close()
    right.close()


def frame_bytes(frames) -> list[bytes]:
    return [bytes(f.buffer) for f in frames]


def test_messages_keep_their_header_and_frames(lane_pair):
    left, right = lane_pair
    big = np.arange(300_000, dtype=np.uint8).tobytes()
    cases = [({"op": "a", "seq": 1}, []), ({"op": "b", "n": [1, 2]}, [b"", b"x", big]),
             ({"op": "c"}, [memoryview(np.arange(10, dtype=np.float32))])]
    for header, frames in cases:
        left.send(header, frames)
        got, got_frames = right.receive()
        assert got == header
        assert frame_bytes(got_frames) == [bytes(memoryview(f).cast("B")) for f in frames]


def test_pieces_and_runs_of_messages_are_reassembled(lane_pair):
    """One message dribbled a byte at a time, then three messages in one
    write: the reader returns each whole, in order."""
    left, right = lane_pair
    head = protocol.pack({"op": "slow", "seq": 9})
    message = PREFIX.pack(len(head), 1) + FRAME_LENGTH.pack(5) + head + b"hello"

    def dribble():
        for i in range(len(message)):
            left.sock.send(message[i:i + 1])
            time.sleep(0.001)

    writer = threading.Thread(target=dribble)
    writer.start()
    header, frames = right.receive()
    writer.join()
    assert header == {"op": "slow", "seq": 9} and frame_bytes(frames) == [b"hello"]
    left.sock.sendall(message * 3)
    for _ in range(3):
        assert right.receive()[0]["seq"] == 9
    assert not right.readable()


class SocketTakingPieces:
    """A socket whose kernel buffer takes `room` bytes, then a piece at a
    time; with MSG_DONTWAIT and no room at all, EAGAIN."""

    def __init__(self, room: int):
        self.room, self.data, self.calls = room, bytearray(), []

    def setsockopt(self, *args):
        pass

    def sendmsg(self, parts, ancillary=(), flags=0):
        self.calls.append(flags)
        if self.room == 0:
            if flags & socket.MSG_DONTWAIT:
                raise BlockingIOError(11, "Resource temporarily unavailable")
            self.room = 7  # a blocking send: the reader made some room
        taken = b"".join(bytes(p) for p in parts)[:self.room]
        self.room -= len(taken)
        self.data += taken
        return len(taken)


def test_try_send_sends_whole_messages_or_nothing():
    """A post that would wait for a reader who has stopped reading is not
    sent at all (it goes on the ZeroMQ socket, which queues); one begun is
    finished, in pieces if need be."""
    full = SocketTakingPieces(room=0)
    assert Lane(full).try_send({"op": "launches", "count": 1}, [b"x" * 100]) is False
    assert full.data == b"" and full.calls == [socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT]

    some_room = SocketTakingPieces(room=10)
    assert Lane(some_room).try_send({"op": "launches", "count": 1}, [b"x" * 100]) is True
    expected = PREFIX.pack(len(protocol.pack({"op": "launches", "count": 1})), 1) + FRAME_LENGTH.pack(100) \
        + protocol.pack({"op": "launches", "count": 1}) + b"x" * 100
    assert bytes(some_room.data) == expected  # whole, after waiting for room
    assert some_room.calls[0] & socket.MSG_DONTWAIT and not any(f & socket.MSG_DONTWAIT for f in some_room.calls[1:])


def test_a_timed_out_read_loses_nothing(lane_pair):
    left, right = lane_pair
    set_timeouts(right.sock, 0.05, 1.0)
    head = protocol.pack({"op": "x", "seq": 3})
    message = PREFIX.pack(len(head), 1) + FRAME_LENGTH.pack(3) + head + b"abc"
    left.sock.sendall(message[:11])
    with pytest.raises(BlockingIOError):
        right.receive()
    left.sock.sendall(message[11:])
    header, frames = right.receive()
    assert header["seq"] == 3 and frame_bytes(frames) == [b"abc"]


def test_a_large_payload_goes_out_whole_and_lands_where_it_is_asked(lane_pair):
    """64 MiB is far more than a socket buffer holds, so sending takes many
    partial writes while the reader reads it into its own buffer: head
    first, then the payload in two pieces through an UnreadFrame."""
    left, right = lane_pair
    data = np.random.default_rng(1).integers(0, 256, 64 << 20, dtype=np.uint8)
    writer = threading.Thread(target=left.send, args=({"op": "htod", "seq": 5}, [memoryview(data)]))
    writer.start()
    head, lengths = right.receive_head()
    assert protocol.unpack(head) == {"op": "htod", "seq": 5} and lengths == [data.nbytes]
    frame = UnreadFrame(right, lengths[0], on_idle=pytest.fail)
    target = np.zeros(data.nbytes, np.uint8)
    frame.read_into(memoryview(target)[:1000])
    frame.read_into(memoryview(target)[1000:])
    writer.join()
    assert frame.left == 0 and np.array_equal(target, data)
    with pytest.raises(ValueError, match="left"):
        frame.read_into(bytearray(1))


def test_an_unread_payload_is_dropped_and_the_next_message_follows(lane_pair):
    left, right = lane_pair
    left.send({"op": "htod", "seq": 1}, [b"x" * 3_000_000])
    left.send({"op": "next", "seq": 2}, [b"tail"])
    head, lengths = right.receive_head()
    frame = UnreadFrame(right, lengths[0], on_idle=pytest.fail)
    frame.read_into(bytearray(10))
    frame.drop_rest()
    header, frames = right.receive()
    assert header["seq"] == 2 and frame_bytes(frames) == [b"tail"]


def test_a_stalled_payload_asks_its_reader_whether_to_go_on(lane_pair):
    left, right = lane_pair
    set_timeouts(right.sock, 0.05, 1.0)
    head = protocol.pack({"op": "htod", "seq": 1})
    left.sock.sendall(PREFIX.pack(len(head), 1) + FRAME_LENGTH.pack(100) + head + b"y" * 40)
    _, lengths = right.receive_head()
    idle = []

    def on_idle():
        idle.append(1)
        if len(idle) == 2:
            left.sock.sendall(b"z" * 60)  # the rest comes after two idle slices
        if len(idle) > 5:
            raise TimeoutError("gave up")

    target = bytearray(100)
    right.read_into(target, on_idle)
    assert bytes(target) == b"y" * 40 + b"z" * 60 and len(idle) == 2
    with pytest.raises(TimeoutError, match="gave up"):
        right.read_into(bytearray(1), on_idle)


class StagingDevice:
    """A backend's device whose memory is not in this process (a GPU's)."""

    def __init__(self, size: int):
        self.memory = bytearray(size)
        self.copies: list[tuple[int, int, int]] = []

    def check_range(self, ptr: int, size: int, what: str) -> None:
        if ptr < 0 or ptr + size > len(self.memory):
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: out of range")

    def host_view(self, ptr: int, size: int, stream: int | None = None):
        return None

    def upload_buffer(self, size: int):
        return None  # any buffer will do

    def memcpy_htod(self, dst: int, data, stream: int = 0) -> None:
        self.memory[dst:dst + len(data)] = data
        self.copies.append((dst, len(data), stream))


def test_lane_copies_to_a_gpu_are_staged_a_piece_at_a_time(lane_pair):
    from rcuda.server.device_service import land_on_device

    left, right = lane_pair
    data = bytes(range(256)) * 40  # 10240 bytes: pieces of 4096, 4096, 2048
    left.send({"op": "htod"}, [data])
    _, lengths = right.receive_head()
    device = StagingDevice(20000)
    land_on_device(UnreadFrame(right, lengths[0], pytest.fail), device, 100, 7, piece=4096)
    assert device.copies == [(100, 4096, 7), (4196, 4096, 7), (8292, 2048, 7)]
    assert device.memory[100:100 + len(data)] == data
    left.send({"op": "htod"}, [b"q" * 50])
    _, lengths = right.receive_head()
    with pytest.raises(CudaError, match="out of range"):
        land_on_device(UnreadFrame(right, lengths[0], pytest.fail), device, 19990, 0)
    assert device.copies[3:] == []


def test_oversized_messages_and_a_closed_lane_are_named(lane_pair):
    left, right = lane_pair
    right.max_payload = 1000
    left.send({"op": "big"}, [b"\0" * 1001])
    with pytest.raises(ProtocolError, match="1001 payload bytes"):
        right.receive()
    left.close()
    with pytest.raises(LaneClosed):
        while True:  # the rest of the refused message, then the end
            right.receive()


# ------------------------------------------------------------------ against a real server


@pytest.fixture
def runtime(sim_server):
    def make(**config):
        rt = Runtime(ClientConfig(servers=[parse_server(sim_server.address)], timeout=10.0, **config))
        made.append(rt)
        return rt

    made: list[Runtime] = []
    yield make
    for rt in made:
        rt.shutdown()


def test_devices_take_their_lane_and_keep_the_order_of_their_requests(runtime):
    """Asynchronous memsets and synchronous read-backs on one connection:
    every read sees the memset just before it."""
    device = runtime().device(0)
    assert isinstance(device.link, LaneLink)
    ptr = device.malloc(4096)
    for i in range(200):
        for value in (i % 251, (i + 1) % 251):
            device.post("memset", ptr=ptr, value=value, size=4096, stream=0)
        data = bytearray(4096)
        device.copy_from_device(ptr, 4096, into=data)
        assert data == bytes([(i + 1) % 251]) * 4096, f"read {i} overtook the memset before it"


def test_large_copies_land_whole_in_order_and_a_refused_one_leaves_the_lane_in_step(runtime):
    """Synchronous copies of many MiB go out from where they are and land
    where they are asked, each after the asynchronous memset before it; a
    refused one's bytes are dropped by the server and the lane goes on."""
    device = runtime().device(0)
    size = 24 << 20
    ptr = device.malloc(size)
    data = np.random.default_rng(2).integers(0, 256, size, dtype=np.uint8)
    device.post("memset", ptr=ptr, value=9, size=size, stream=0)
    device.copy_to_device(ptr + 1, memoryview(data)[:size - 1])
    back = np.zeros(size, np.uint8)
    assert device.copy_from_device(ptr, size, into=memoryview(back)) == []
    assert back[0] == 9 and np.array_equal(back[1:], data[:size - 1])

    with pytest.raises(CudaError) as refused:  # past the end: refused, its 24 MiB dropped
        device.copy_to_device(ptr + 1, memoryview(data))
    assert refused.value.status == cudaError.cudaErrorInvalidValue
    with pytest.raises(CudaError) as unknown:
        device.copy_to_device(ptr, memoryview(data), stream=12345)
    assert unknown.value.status == cudaError.cudaErrorInvalidResourceHandle
    device.post("memset", ptr=ptr, value=3, size=16, stream=0)
    head = bytearray(16)
    assert device.copy_from_device(ptr, 16, into=head) == []
    assert bytes(head) == b"\x03" * 16 and not device.link.failed


@requires_nvcc
def test_program_order_holds_between_launches_recorded_in_c_and_python_calls(compile_cuda, sim_server):
    """Launches (and memsets, uploads) recorded in C go out before whatever
    the program calls next, through C or Python, from one thread or two
    sharing the device's batches."""
    result = run_program(compile_cuda("stream_order.cu"), sim_server, "300")
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr[-3000:]


def raw_hello(address: str, context) -> tuple[str, dict]:
    """A session opened by hand with the daemon: (host, its hello reply)."""
    host, port = address.rsplit(":", 1)
    daemon = context.socket(zmq.DEALER)
    daemon.setsockopt(zmq.LINGER, 0)
    daemon.connect(f"tcp://{host}:{port}")
    daemon.send(protocol.pack({"op": "hello", "seq": 1, "version": protocol.PROTOCOL_VERSION,
                               "client": {"program": "test"}}))
    assert daemon.poll(20000)
    hello = protocol.unpack(daemon.recv())
    daemon.close()
    return host, hello


def raw_lane(host: str, hello: dict, token: str | None = None) -> tuple[Lane, dict]:
    """GPU0's lane connected by hand (with the session's token unless another
    is given): (the lane, the server's answer to its hello)."""
    lane = Lane(socket.create_connection((host, hello["lane_ports"][0]), timeout=10))
    lane.send({"op": "lane", "seq": 0, "token": token or hello["token"], "dev": 0})
    return lane, lane.receive()[0]


def raw_open(lane: Lane, hello: dict) -> None:
    """GPU0 opened on its lane, by hand."""
    lane.send({"op": "open", "seq": 1, "dev": 0, "token": hello["token"], "va_base": None})
    assert lane.receive()[0]["err"] == 0


BAD_LANE_MESSAGES = {
    "garbage": PREFIX.pack(1 << 30, 1) + b"garbage!",
    "a payload larger than a server buffers": (
        PREFIX.pack(len(protocol.pack({"op": "mem_info", "seq": 4})), 1) + FRAME_LENGTH.pack((1 << 30) + 1)
        + protocol.pack({"op": "mem_info", "seq": 4})),
}


@pytest.mark.parametrize("bad", BAD_LANE_MESSAGES)
def test_strangers_and_garbage_on_the_lane_cost_the_server_nothing(sim_server, bad):
    """A wrong token is refused; requests before `open` are refused; garbage
    on a session's lane ends that session's use of the device (the stream is
    out of step), and the server goes on serving new sessions."""
    context = zmq.Context()
    try:
        host, hello = raw_hello(sim_server.address, context)
        stranger, refused = raw_lane(host, hello, token="0" * 32)
        assert refused["err"] and "token" in refused["msg"]
        with pytest.raises(LaneClosed):
            stranger.receive()

        mine, answer = raw_lane(host, hello)
        assert answer["err"] == 0
        mine.send({"op": "mem_info", "seq": 2})
        assert "before open" in mine.receive()[0]["msg"]
        raw_open(mine, hello)
        mine.send({"op": "mem_info", "seq": 3})
        assert mine.receive()[0]["total"] > 0
        # Two requests in one write (a client may send on before a reply):
        # the second, read along with the first, is served too.
        two = [protocol.pack({"op": "mem_info", "seq": seq}) for seq in (20, 21)]
        mine.sock.sendall(b"".join(PREFIX.pack(len(head), 0) + head for head in two))
        assert [mine.receive()[0]["seq"] for _ in two] == [20, 21]
        try:
            mine.sock.sendall(BAD_LANE_MESSAGES[bad])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may close the lane before the rest is sent
        with pytest.raises(LaneClosed):
            mine.receive()
        mine.close()
    finally:
        context.term()
    rt = Runtime(ClientConfig(servers=[parse_server(sim_server.address)], timeout=10.0))
    try:
        assert rt.device(0).mem_info()[1] > 0
    finally:
        rt.shutdown()


def test_spinning_can_be_turned_off_on_both_ends(server_factory):
    server = server_factory("--backend", "sim", "--spin-us", "0")
    rt = Runtime(ClientConfig(servers=[parse_server(server.address)], timeout=10.0, spin_us=0))
    try:
        device = rt.device(0)
        assert isinstance(device.link, LaneLink)
        for _ in range(50):
            assert device.mem_info()[1] > 0
    finally:
        rt.shutdown()


def test_spin_settings_are_checked():
    from rcuda.config import ConfigError

    assert ClientConfig.load({"RCUDA_SPIN_US": "50", "RCUDA_CONFIG": "/dev/null"}).spin_us == 50
    with pytest.raises(ConfigError, match="RCUDA_SPIN_US must not be negative"):
        ClientConfig.load({"RCUDA_SPIN_US": "-1", "RCUDA_CONFIG": "/dev/null"})


def test_the_spin_window_is_learnt_per_kind_of_wait():
    """rcuda.lane.SpinPolicy (the server's): a kind of wait that outlasts the
    window stops spinning (halving, then none); one answered within it spins
    again."""
    from rcuda.lane import SpinPolicy

    spin = SpinPolicy(300e-6)
    assert spin.window("dtoh") == spin.window("mem_info") == 300e-6  # unknown kinds: the whole window
    windows = []
    for _ in range(6):  # a copy behind 20 ms of kernels, over and over
        spin.waited("dtoh", 0.020)
        windows.append(spin.window("dtoh"))
    assert windows[:4] == pytest.approx([150e-6, 75e-6, 37.5e-6, 18.75e-6]) and windows[4:] == [0.0, 0.0]
    spin.waited("mem_info", 40e-6)
    assert spin.window("mem_info") == 300e-6  # other kinds keep theirs
    spin.waited("dtoh", 100e-6)  # answered within the window: worth spinning again
    assert spin.window("dtoh") == 300e-6
    off = SpinPolicy(0.0)
    off.waited("x", 1e-6)
    assert off.window("x") == 0.0


@requires_nvcc
def test_a_client_stops_spinning_for_replies_that_wait_for_the_gpu(server_factory, tmp_path):
    """Copies behind a long kernel: the link (native/link.c) learns not to
    spin for them, while copies answered at once still get the spin (on a
    busy machine a useless spin takes the CPU from the threads and servers
    doing work)."""
    plugin = tmp_path / "slow_kernels.py"
    plugin.write_text("def slow(launch):\n    pass\n\nKERNELS = {'noParams': slow}\n"
                      "COSTS = {'noParams': lambda launch: 0.02}\n")  # 20 ms of emulated GPU time
    image = tmp_path / "kernels.fatbin"
    subprocess.run(["nvcc", "-fatbin", "-o", str(image), str(TESTS / "cuda_sources" / "fatbin_kernels.cu")],
                   check=True, capture_output=True, timeout=300)
    server = server_factory("--backend", "sim", "--kernels", str(plugin))
    # A 5 ms window: replies "at once" come well within it even on a loaded
    # 2-core CI machine, while copies behind a 20 ms kernel never do.
    rt = Runtime(ClientConfig(servers=[parse_server(server.address)], timeout=10.0, spin_us=5000.0))
    try:
        device = rt.device(0)
        link = device.link
        ptr = device.malloc(64)
        for _ in range(5):
            device.copy_from_device(ptr, 64)
        assert link.spin_window("dtoh") > 0  # answered at once: keeps spinning (a slow one only halves it)
        device.request("module", [image.read_bytes()], module="m")
        device.request("function", fn=1, module="m", name="_Z8noParamsv", offsets=[], sizes=[])
        for _ in range(6):
            device.post("launch", [b""], fn=1, grid=[1, 1, 1], block=[1, 1, 1], shmem=0, stream=0,
                        cooperative=0)
            device.copy_from_device(ptr, 64)
        assert link.spin_window("dtoh") == 0.0
        for _ in range(3):
            device.mem_info()
        assert link.spin_window("mem_info") > 0
    finally:
        rt.shutdown()
