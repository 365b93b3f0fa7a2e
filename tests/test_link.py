"""A device's link (client/transport/link.py) under concurrency, against a fake device
that answers some requests late and out of order, as a server does now that
it answers a wait when its work is done.  Both kinds run the same checks:
the lane, owned by C (client/transport/lane.py, native/link.c), and the ZeroMQ
socket (client/transport/zmq_socket.py).  Each thread's messages reach the device in
the order it made them, each call gets its own reply, and a call waiting
for a slow reply holds up no other thread."""
from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
import zmq

from rcuda import protocol, sealed
from rcuda.client.transport import native
from rcuda.client.transport.lane import LaneLink
from rcuda.client.transport.link import Gate
from rcuda.client.transport.zmq_socket import SocketLink
from rcuda.errors import ServerTimeout, TransportError
from rcuda.lane import Lane, LaneClosed
from rcuda.wire import REKEY_RECORDS

NATIVE = native.load()
SECRET = bytes(range(32))
needs_native = pytest.mark.skipif(NATIVE is None, reason="the interposer library is not built")


class FakeDevice:
    """Counts each thread's launches; answers a call with that thread's
    count.  A `slow` call is answered only once thread 1 has launched 5
    kernels (or after 3 s); `hold` calls are answered when `release` comes.
    Subclasses say how messages come and go."""

    def __init__(self):
        self.launched: dict[int, int] = {}
        self.slow = None  # (reply_to, seq, deadline)
        self.held: list = []
        self.seen: list[dict] = []
        self.stop = threading.Event()
        self.paused = threading.Event()  # set: the device reads nothing

    def serve_one(self, reply_to, header: dict, frames) -> None:
        self.seen.append(header)
        tid = header.get("tid", 0)
        op = header["op"]
        if op == "slow":
            self.slow = (reply_to, header["seq"], time.monotonic() + 3.0)
        elif op == "hold":
            self.held.append((reply_to, header["seq"]))
        elif op == "release":
            for held in self.held:
                self.send(*held, {"err": 0})
            self.held.clear()
        elif op == "launch":
            self.launched[tid] = self.launched.get(tid, 0) + 1
        elif op == "echo":
            self.send(reply_to, header["seq"], {"err": 0}, [bytes(f.buffer) for f in frames])
        elif op == "notify":
            self.send(reply_to, None, {"notice": "hello"})
        elif not header.get("async"):
            self.send(reply_to, header["seq"], {"err": 0, "tid": tid, "launched": self.launched.get(tid, 0)})

    def tick(self) -> None:
        if self.slow and (self.launched.get(1, 0) >= 5 or time.monotonic() > self.slow[2]):
            reply_to, seq, _ = self.slow
            self.slow = None
            self.send(reply_to, seq, {"err": 0, "seen_from_1": self.launched.get(1, 0)})


class FakeLaneDevice(FakeDevice):
    def __init__(self, connection: socket.socket, seal=None):
        super().__init__()
        connection.settimeout(None)
        self.lane = Lane(connection, seal=seal)

    def send(self, reply_to, seq, reply: dict, frames=()) -> None:
        self.lane.send({"seq": seq, **reply}, frames)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if self.paused.is_set():
                    time.sleep(0.01)
                    continue
                self.tick()
                if self.lane.buffered or _readable(self.lane, 0.02):
                    header, frames = self.lane.receive()
                    self.serve_one(None, header, frames)
        except (LaneClosed, OSError):
            pass


def _readable(lane: Lane, seconds: float) -> bool:
    import select
    return bool(select.select([lane.fileno()], [], [], seconds)[0])


class FakeSocketDevice(FakeDevice):
    def __init__(self, router: zmq.Socket):
        super().__init__()
        self.router = router

    def send(self, reply_to, seq, reply: dict, frames=()) -> None:
        self.router.send_multipart([reply_to, protocol.pack({"seq": seq, **reply}), *frames])

    def run(self) -> None:
        while not self.stop.is_set():
            self.tick()
            if not self.router.poll(20):
                continue
            peer, frame, *payload = self.router.recv_multipart(copy=False)
            self.serve_one(peer.bytes, protocol.unpack(frame.buffer), payload)


@contextmanager
def lane_link(timeout: float = 10.0, sealed_from: int | None = None):
    """A lane link to a fake device; sealed (rcuda/sealed.py, C carrying on
    from Python's handshake) when `sealed_from` gives the record number
    both directions start from."""
    listener = socket.create_server(("127.0.0.1", 0))
    ours = socket.create_connection(listener.getsockname())
    theirs, _ = listener.accept()
    listener.close()
    our_seal = their_seal = None
    if sealed_from is not None:
        handshake = threading.Thread(target=lambda: seals.append(sealed.server_handshake(theirs, SECRET)))
        seals: list = []
        handshake.start()
        our_seal = sealed.client_handshake(ours, SECRET)
        handshake.join(10)
        their_seal = seals[0]
        for direction in (our_seal.send, our_seal.receive, their_seal.send, their_seal.receive):
            direction.number = sealed_from
    device = FakeLaneDevice(theirs, their_seal)
    thread = threading.Thread(target=device.run, daemon=True)
    thread.start()
    link = LaneLink(NATIVE, ours, "test GPU", timeout, seal=our_seal)
    try:
        yield link, device
    finally:
        link.close()
        device.stop.set()
        thread.join(timeout=5)
        device.lane.close()


@contextmanager
def socket_link(timeout: float = 10.0):
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    device = FakeSocketDevice(router)
    thread = threading.Thread(target=device.run, daemon=True)
    thread.start()
    link = SocketLink(context, f"tcp://127.0.0.1:{port}", "test GPU", timeout)
    try:
        yield link, device
    finally:
        link.close()
        device.stop.set()
        thread.join(timeout=5)
        router.close(linger=0)
        context.term()


def sealed_lane_link(timeout: float = 10.0):
    """A sealed lane whose records cross a change of keys early on."""
    return lane_link(timeout, sealed_from=REKEY_RECORDS - 40)


LINKS = [pytest.param(lane_link, id="lane", marks=needs_native),
         pytest.param(sealed_lane_link, id="sealed-lane", marks=needs_native),
         pytest.param(socket_link, id="socket")]
LANES = [pytest.param(lane_link, id="lane"), pytest.param(sealed_lane_link, id="sealed-lane")]
THREADS = 4
ROUNDS = 200


@pytest.mark.parametrize("make_link", LINKS)
def test_threads_calls_and_posts_stay_ordered_and_matched(make_link):
    problems: list[str] = []

    def app_thread(tid: int) -> None:
        posted = 0
        for i in range(ROUNDS):
            for _ in range(i % 3):
                link.post({"op": "launch", "tid": tid}, [b"\0" * 8])
                posted += 1
            reply, _ = link.call({"op": "mem_info", "tid": tid})
            if reply["tid"] != tid or reply["launched"] != posted:
                problems.append(f"thread {tid} call {i}: got {reply}, had posted {posted}")

    with make_link() as (link, _):
        workers = [threading.Thread(target=app_thread, args=(t,)) for t in range(THREADS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=60)
        assert not any(w.is_alive() for w in workers), "a thread is stuck"
        assert not problems, problems[:5]


@pytest.mark.parametrize("make_link", LINKS)
def test_a_call_waiting_for_a_late_reply_holds_up_no_other_thread(make_link):
    """The slow call's reply comes only after other threads' launches
    arrived, and after their own calls were answered: replies out of order,
    each to its caller, and nothing waits for the slow one."""
    result = {}
    with make_link() as (link, _):
        waiter = threading.Thread(target=lambda: result.update(reply=link.call({"op": "slow", "tid": 0})[0]))
        waiter.start()
        time.sleep(0.1)  # the slow call is waiting
        started = time.monotonic()
        for i in range(5):
            link.post({"op": "launch", "tid": 1}, [b"\0" * 8])
            reply, _ = link.call({"op": "mem_info", "tid": 1})
            assert reply["launched"] == i + 1
        other_calls = time.monotonic() - started
        waiter.join(timeout=10)
        assert result["reply"]["seen_from_1"] == 5
        assert other_calls < 2.0, f"{other_calls:.2f} s: the other thread's calls waited for the slow one"


@pytest.mark.parametrize("make_link", LINKS)
def test_a_gate_holds_back_what_follows_until_it_opens(make_link):
    """Messages after a closed gate reach the device only once it opens, in
    order; a call made meanwhile is answered after that."""
    with make_link() as (link, device):
        link.post({"op": "launch", "tid": 3}, [b"\0" * 8])
        gate = Gate()
        link.add_gate(gate)
        link.post({"op": "launch", "tid": 3}, [b"\0" * 8])
        answered = {}
        caller = threading.Thread(target=lambda: answered.update(reply=link.call({"op": "mem_info", "tid": 3})[0]))
        caller.start()
        time.sleep(0.2)
        assert device.launched.get(3) == 1 and "reply" not in answered
        gate.open()
        caller.join(timeout=10)
        assert answered["reply"]["launched"] == 2


@pytest.mark.parametrize("make_link", LINKS)
def test_a_gate_opened_before_it_is_added_holds_nothing(make_link):
    with make_link() as (link, _):
        gate = Gate()
        gate.open()
        link.add_gate(gate)
        link.post({"op": "launch", "tid": 4}, [b"\0" * 8])
        assert link.call({"op": "mem_info", "tid": 4})[0]["launched"] == 1


@pytest.mark.parametrize("make_link", LINKS)
def test_awaited_posts_reach_their_callbacks_and_land_in_place(make_link):
    """post_awaited: the reply goes to the callback in the link's thread; a
    payload of exactly len(into) bytes lands in `into`, others come as frames."""
    with make_link() as (link, device):
        into = bytearray(4096)
        payload = np.arange(4096, dtype=np.uint8).tobytes()
        got = []
        done = threading.Event()

        def receive(reply, frames, error):
            got.append((reply, [bytes(f.buffer) for f in frames], error))
            if len(got) == 2:
                done.set()

        link.post_awaited({"op": "echo"}, [payload], receive, into=into)
        link.post_awaited({"op": "echo"}, [b"abc"], receive, into=bytearray(10))
        assert done.wait(10)
        assert bytes(into) == payload and got[0][1] == [] and got[0][2] is None
        assert got[1][1] == [b"abc"]


@pytest.mark.parametrize("make_link", LINKS)
def test_notices_reach_their_handler(make_link):
    with make_link() as (link, _):
        seen = threading.Event()
        link.on_notice = lambda header: seen.set() if header.get("notice") == "hello" else None
        link.post({"op": "notify"})
        assert seen.wait(10)


@needs_native
@pytest.mark.parametrize("make_link", LANES)
def test_a_large_upload_from_pinned_memory_returns_before_it_is_sent(make_link):
    """cudaMemcpyAsync from pinned memory returns at once: a large borrowed
    post is written by the link's service thread, and a call after it is
    answered after it."""
    with make_link() as (link, device):
        data = memoryview(np.ones(64 << 20, dtype=np.uint8))  # more than the socket buffers take
        device.paused.set()  # the device reads nothing for a while
        time.sleep(0.05)
        started = time.monotonic()
        link.post({"op": "launch", "tid": 5}, [data], borrowed=True)
        returned = time.monotonic() - started
        time.sleep(0.2)
        device.paused.clear()
        assert link.call({"op": "mem_info", "tid": 5})[0]["launched"] == 1
        assert returned < 0.2, f"the post took {returned:.2f} s: it waited for the device to read"


@needs_native
@pytest.mark.parametrize("make_link", LANES)
def test_a_writer_reads_while_the_server_writes_to_it(make_link):
    """A large upload and a large reply at once, with only the writer there to
    read: it reads while it waits to write, so neither side stalls."""
    with make_link() as (link, device):
        big = np.arange(48 << 20, dtype=np.uint8) % 251
        into = bytearray(len(big))
        landed = threading.Event()
        link.post_awaited({"op": "echo"}, [big.tobytes()], lambda reply, frames, error: landed.set(), into=into)
        link.post({"op": "launch", "tid": 6}, [big.tobytes()])  # written by this thread, as the echo comes back
        assert link.call({"op": "mem_info", "tid": 6})[0]["launched"] == 1
        assert landed.wait(30) and bytes(into) == big.tobytes()


@needs_native
def test_an_altered_record_fails_a_sealed_link_naming_the_call():
    """Someone between client and server flips a bit of a reply: C's check
    of its record fails the link, and the call says why."""
    with sealed_lane_link() as (link, device):
        assert link.call({"op": "mem_info", "tid": 8})[0]["err"] == 0
        device.paused.set()
        time.sleep(0.05)
        record = bytearray(bytes(next(device.lane.seal.records([b"x" * 64]))))
        record[10] ^= 0x01
        device.lane.sock.sendall(record)
        with pytest.raises(TransportError, match=r"mem_info.*sealed record failed its check"):
            link.call({"op": "mem_info", "tid": 8})


@needs_native
def test_a_closed_connection_fails_waiting_and_later_calls_naming_them():
    with lane_link() as (link, device):
        failed = {}

        def wait():
            try:
                link.call({"op": "hold"})
            except TransportError as exc:
                failed["error"] = exc

        caller = threading.Thread(target=wait)
        caller.start()
        time.sleep(0.1)
        device.lane.sock.shutdown(socket.SHUT_RDWR)
        caller.join(timeout=10)
        assert "hold on test GPU" in str(failed["error"]) and "closed by the server" in str(failed["error"])
        with pytest.raises(TransportError, match="mem_info on test GPU"):
            link.call({"op": "mem_info"})
        assert link.failed


@needs_native
def test_a_silent_server_fails_the_wait_within_the_timeout():
    """No heartbeat (`heard`) for longer than the timeout: the call fails
    with ServerTimeout instead of waiting for ever."""
    with lane_link(timeout=1.0) as (link, _):
        started = time.monotonic()
        with pytest.raises(ServerTimeout, match="hold on test GPU: no reply and no heartbeat"):
            link.call({"op": "hold"})
        assert time.monotonic() - started < 5


@needs_native
def test_heartbeats_keep_a_long_wait_alive():
    with lane_link(timeout=0.5) as (link, device):
        done = threading.Event()
        threading.Thread(target=lambda: (link.call({"op": "hold"}), done.set()), daemon=True).start()
        for _ in range(15):  # 1.5 s, three timeouts, heard all along
            link.heard(time.monotonic())
            time.sleep(0.1)
        link.post({"op": "release"})
        assert done.wait(5) and not link.failed
