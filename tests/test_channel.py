"""DeviceChannel under concurrency: several application threads posting
asynchronous messages and making synchronous calls on one device.  Each
thread's messages must reach the device in the order it made them, and each
call must get its own reply."""
from __future__ import annotations

import itertools
import threading
import time
from contextlib import contextmanager

import zmq

from rcuda import protocol
from rcuda.client.channel import DeviceChannel


@contextmanager
def channel_to(serve_device, **channel_options):
    """A DeviceChannel connected to `serve_device(router, stop)` running in
    a thread; everything is closed on the way out, even on failure."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()
    device = threading.Thread(target=serve_device, args=(router, stop), daemon=True)
    device.start()
    channel = DeviceChannel(context, f"tcp://127.0.0.1:{port}", "test GPU", timeout=10.0, **channel_options)
    try:
        yield channel
    finally:
        channel.close()
        stop.set()
        device.join(timeout=5)
        router.close(linger=0)
        context.term()


THREADS = 4
ROUNDS = 300


def serve(router: zmq.Socket, stop: threading.Event) -> None:
    """A device that counts each thread's launches and, on a call, answers
    with that thread's count so far.  A `slow` call (a long synchronize) is
    answered only once thread 1 has launched 5 kernels, or after 3 s."""
    launched: dict[int, int] = {}
    slow = None  # (peer, seq, deadline)
    while not stop.is_set():
        if slow and (launched.get(1, 0) >= 5 or time.monotonic() > slow[2]):
            router.send_multipart([slow[0], protocol.pack({"seq": slow[1], "err": 0, "tid": 0,
                                                           "seen_from_1": launched.get(1, 0)})])
            slow = None
        if not router.poll(20):
            continue
        peer, frame, *_ = router.recv_multipart()
        header = protocol.unpack(frame)
        tid = header["tid"]
        if header["op"] == "slow":
            slow = (peer, header["seq"], time.monotonic() + 3.0)
        elif header["op"] == "launch":
            launched[tid] = launched.get(tid, 0) + 1
        else:
            router.send_multipart([peer, protocol.pack({"seq": header["seq"], "err": 0, "tid": tid,
                                                        "launched": launched.get(tid, 0)})])


def test_threads_calls_and_posts_stay_ordered_and_matched():
    problems: list[str] = []

    def app_thread(tid: int) -> None:
        posted = 0
        for i in range(ROUNDS):
            for _ in range(i % 3):
                channel.post({"op": "launch", "tid": tid}, [b"\0" * 8])
                posted += 1
            reply, _ = channel.call({"op": "mem_info", "tid": tid})
            if reply["tid"] != tid or reply["launched"] != posted:
                problems.append(f"thread {tid} call {i}: got {reply}, had posted {posted}")

    with channel_to(serve) as channel:
        workers = [threading.Thread(target=app_thread, args=(t,)) for t in range(THREADS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=60)
        assert not any(w.is_alive() for w in workers), "a thread is stuck"
        assert not problems, problems[:5]


def test_posts_made_while_another_thread_waits_are_sent_at_once():
    """A call waiting for its reply must not hold back other threads'
    asynchronous messages: here the reply comes only after they arrived."""
    result = {}
    with channel_to(serve) as channel:
        waiter = threading.Thread(target=lambda: result.update(reply=channel.call({"op": "slow", "tid": 0})[0]))
        waiter.start()
        time.sleep(0.1)  # the slow call is waiting
        started = time.monotonic()
        for _ in range(5):
            channel.post({"op": "launch", "tid": 1}, [b"\0" * 8])
        waiter.join(timeout=10)
        assert result["reply"]["seen_from_1"] == 5
        assert time.monotonic() - started < 2.0, "the launches waited for the other thread's reply"


def test_posts_made_during_a_callers_direct_window_keep_their_order(monkeypatch):
    """While a synchronous caller waits on the socket itself (its direct
    window, made long here), other threads' messages wait for the window's
    end at most, then go out in order, and a call from another thread gets
    its own reply."""
    from rcuda.client import channel as channel_module
    monkeypatch.setattr(channel_module, "DIRECT_WINDOW_MS", 300)
    result = {}
    with channel_to(serve) as channel:
        waiter = threading.Thread(target=lambda: result.update(reply=channel.call({"op": "slow", "tid": 0})[0]))
        waiter.start()
        time.sleep(0.1)  # the slow call holds the socket, inside its window
        started = time.monotonic()
        for _ in range(3):
            channel.post({"op": "launch", "tid": 1}, [b"\0" * 8])
        reply, _ = channel.call({"op": "mem_info", "tid": 1})
        assert reply["tid"] == 1 and reply["launched"] == 3
        for _ in range(2):
            channel.post({"op": "launch", "tid": 1}, [b"\0" * 8])
        waiter.join(timeout=10)
        assert result["reply"]["seen_from_1"] == 5
        assert time.monotonic() - started < 2.0, "the other thread's messages waited for the slow reply"


def serve_delayed(router: zmq.Socket, stop: threading.Event) -> None:
    """Answers every request with its seq, each after the delay (ms) it asks
    for.  A request with `hold` is answered only right after the next one
    without it (both replies in one go, the later request's first)."""
    due: list = []  # (time, order, peer, seq), answered in that order
    held: list = []
    order = itertools.count()
    while not stop.is_set():
        now = time.monotonic()
        for item in sorted(d for d in due if d[0] <= now):
            due.remove(item)
            router.send_multipart([item[2], protocol.pack({"seq": item[3], "err": 0})])
        if not router.poll(1 if due else 20):
            continue
        peer, frame, *_ = router.recv_multipart()
        header = protocol.unpack(frame)
        if header.get("hold"):
            held.append((peer, header["seq"]))
            continue
        at = time.monotonic() + header["delay_ms"] / 1000
        due.append((at, next(order), peer, header["seq"]))
        due.extend((at, next(order), *h) for h in held)
        held.clear()


def test_replies_to_others_arriving_around_a_direct_call_are_never_lost():
    """Asynchronous requests answered to callbacks, and synchronous calls,
    with delays on both sides of the direct window, and replies to others
    queued right behind a caller's own: every reply reaches its receiver,
    whichever thread is on the socket when it arrives (the caller, or the
    forwarding thread after the hand-back)."""
    answered = threading.Semaphore(0)
    delays = [0, 1, 2, 3, 5]
    # No heartbeats here: a call not answered within a WAIT_SLICE fails
    # (ServerTimeout) instead of hanging the test.
    with channel_to(serve_delayed, liveness=lambda: float("-inf")) as channel:
        for kind in ("none", "delayed", "held"):
            for callback_delay in delays:
                for call_delay in delays:
                    case = f"{kind} callback after {callback_delay} ms, call after {call_delay} ms"
                    if kind != "none":
                        channel.post_with_callback({"op": "later", "delay_ms": callback_delay, "hold": kind == "held"},
                                                   (), lambda header, frames, error: answered.release())
                    reply, _ = channel.call({"op": "now", "delay_ms": call_delay})
                    assert reply["err"] == 0, case
                    # Nothing else happens meanwhile that could wake the
                    # forwarding thread: the callback's reply must get through.
                    assert kind == "none" or answered.acquire(timeout=2), f"{case}: callback reply lost"
