"""The GPU server's cost of a small synchronous request: a 4-byte
cudaMemcpy to the host served by C (native/served_requests.c) against the
same request served by Python, and against the bare transport, side by
side in interleaved rounds of one run.

No GPU is needed: this is the server's own work per request. The session's
GPU thread (server/device_service.py's DeviceService, the cupy backend)
runs with the tests' stand-ins, CuPy's bindings by tests/fake_cuda.py and
the driver by tests/stand_in_driver.c (device memory is host memory), and
a lane on loopback whose client end is driven from the same thread: send
the request, let the service serve what arrived, read the reply. So no
thread wake-up is measured, only the work on each side.

- `c`: C reads, copies and answers.
- `python`: the same request served the ordinary way (the executor told
  not to serve), with the copy itself left out (the backend's
  memcpy_dtoh answers at once, without the stand-in CuPy, whose Python
  models streams and costs far more than CuPy's bindings): what Python
  costs beside the driver's calls, a lower bound of that path on a GPU.
- `transport`: the server's side only reads the request's bytes and writes
  a ready-made reply, on the same connection: the floor.

The client's side is Python's Lane in all three (rcuda's real client is
C), so round trips differ by the server's work alone.
"""
from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ..common import Context, goal

NAME = "served_requests"
TITLE = "A 4-byte copy to the host: served by C, by Python, and the bare transport"
TESTS = Path(__file__).resolve().parents[2] / "tests"

LABELS = {
    "c": "served by C (native/served_requests.c)",
    "python": "served by Python, the copy left out (a lower bound)",
    "transport": "bare: the request's bytes read, a ready reply written",
}
#: C's round trip should cost at most this much more than the bare transport's.
GOAL_OVER_TRANSPORT_US = 10.0


def unavailable() -> str | None:
    import shutil
    if not (TESTS / "stand_in_service.py").is_file():
        return "needs the repository's tests/ (the stand-ins for CuPy and the driver): run it from a checkout"
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        return "needs a C compiler (cc) to build the stand-in driver"
    return None


def parameters(quick: bool) -> dict:
    return {"requests": 300 if quick else 2000, "rounds": 3 if quick else 9, "size": 4}


@contextlib.contextmanager
def _stand_in_service():
    """A DeviceService on the cupy backend with both stand-ins
    (tests/stand_in_service.py), its lane and the client's end (a Lane),
    and 1 MiB of 'device memory' it may copy."""
    import numpy as np

    sys.path.insert(0, str(TESTS))
    try:
        import stand_in_service
        from rcuda.lane import SpinPolicy
        from rcuda.server.backends.base import Allocation

        with tempfile.TemporaryDirectory() as tmp:
            driver = stand_in_service.build(Path(tmp), "-O2")
            if driver is None:
                raise RuntimeError("no C compiler for the stand-in driver")
            with stand_in_service.service(driver.path) as service:
                service._spin = SpinPolicy(0.0)  # no waiting for a next request: measured is the work
                memory = np.zeros(1 << 20, np.uint8)
                # One of the session's allocations: C's copy and the stand-in CuPy's both read host memory.
                service.device._memory.add(Allocation(memory.ctypes.data, memory.size))
                client = stand_in_service.open_lane(service)
                try:
                    yield service, client, memory
                finally:
                    client.close()
                    service._lane.close()
    finally:
        sys.path.remove(str(TESTS))


def _round_trips(service, client, request: dict, count: int, serve) -> tuple[float, float]:
    """Median seconds per round trip, and per request on the server's side
    (`serve()`: what the server does once the request has arrived)."""
    trips, served = [], []
    for _ in range(count):
        started = time.perf_counter()
        client.send(request)
        while not service._lane.readable():  # (the request is on its way through loopback)
            pass
        serving = time.perf_counter()
        serve()
        done_serving = time.perf_counter()
        header, frames = client.receive()
        trips.append(time.perf_counter() - started)
        served.append(done_serving - serving)
        if header.get("err"):
            raise RuntimeError(f"the request failed: {header}")
    return statistics.median(trips), statistics.median(served)


def _bare_server(service, request: dict, reply: bytes):
    """The server's side with nothing decoded or copied: the request's bytes
    read and a ready-made reply written, on the service's connection."""
    from rcuda import protocol
    from rcuda.lane import _parts

    server = service._lane.sock
    request_size = sum(len(p) for p in _parts(protocol.pack(request), ()))

    def serve():
        server.recv(request_size, socket.MSG_WAITALL)
        server.sendall(reply)
    return serve


def run(ctx: Context) -> dict:
    from rcuda import protocol
    from rcuda.lane import _parts
    from rcuda.server.backends.base import Done

    params = parameters(ctx.quick)
    runs = {name: {"trip_s": [], "server_s": []} for name in LABELS}
    with _stand_in_service() as (service, client, memory):
        request = {"op": "dtoh", "seq": 1, "src": memory.ctypes.data, "size": params["size"], "stream": 0}
        reply = b"".join(bytes(p) for p in _parts(protocol.pack({"seq": 1, "err": 0}), [bytes(params["size"])]))
        device = service.device
        c_server, copy = device.request_server, device.memcpy_dtoh
        for round_ in range(params["rounds"]):
            ctx.progress(f"round {round_ + 1} of {params['rounds']}: {params['requests']} requests each way")
            for name in ("c", "python"):
                if name == "python":
                    device.request_server = lambda: None
                    device.memcpy_dtoh = lambda src, size, stream: (memoryview(bytes(size)), Done())
                trip, served = _round_trips(service, client, request, params["requests"],
                                            service._serve_what_arrives)
                device.request_server, device.memcpy_dtoh = c_server, copy
                runs[name]["trip_s"].append(trip)
                runs[name]["server_s"].append(served)
            trip, served = _round_trips(service, client, request, params["requests"],
                                        _bare_server(service, request, reply))
            runs["transport"]["trip_s"].append(trip)
            runs["transport"]["server_s"].append(served)
    variants = {}
    for name, label in LABELS.items():
        trip = min(runs[name]["trip_s"])
        variants[name] = {"label": label, "round_trip_us": trip * 1e6, "rounds_us": [t * 1e6 for t in runs[name]["trip_s"]]}
        if runs[name]["server_s"]:
            variants[name]["server_us"] = min(runs[name]["server_s"]) * 1e6
    over = variants["c"]["round_trip_us"] - variants["transport"]["round_trip_us"]
    return {"parameters": {**params, "statistic": "best round's median", "machine": os.uname().machine},
            "variants": variants,
            "ratios": {"server_python_over_c": round(variants["python"]["server_us"] / variants["c"]["server_us"], 2),
                       "trip_c_over_transport": round(variants["c"]["round_trip_us"] /
                                                      variants["transport"]["round_trip_us"], 2),
                       "trip_python_over_transport": round(variants["python"]["round_trip_us"] /
                                                           variants["transport"]["round_trip_us"], 2)},
            "over_transport_us": round(over, 2),
            "goals": {"C's round trip (µs), at most the bare one's + 10": goal(
                round(variants["c"]["round_trip_us"], 2), "<=",
                round(variants["transport"]["round_trip_us"] + GOAL_OVER_TRANSPORT_US, 2))}}


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_served_requests.png"
    bars = [(v["label"], v["round_trip_us"]) for v in result["variants"].values()]
    charts.bars(result, path, bars, "µs per round trip",
                "A 4-byte copy to the host, one thread driving both ends (stand-ins for CuPy and the driver)")
    return [path]


def headline(result: dict) -> list[str]:
    return [f"{name}: {v['round_trip_us']:.1f} µs round trip" +
            (f", {v['server_us']:.1f} µs on the server" if "server_us" in v else "")
            for name, v in result["variants"].items()] + [f"ratios: {result['ratios']}"]
