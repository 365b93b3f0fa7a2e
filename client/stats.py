"""RCUDA_STATS=1: a summary of the program's CUDA calls, printed at exit.

Like `nsys`'s CUDA API summary: per runtime function the number of calls
and their total, average and longest time as the program saw them; per
device the bytes moved in each direction and the launches the C fast path
recorded (those are not timed one by one: they take well under a
microsecond each); and what each device's calls travelled on (its lane,
sealed or not, or its ZeroMQ socket).
"""
from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field

DIRECTIONS = ("host to device", "device to host", "on device", "between servers")

#: Protocol ops and the direction of the bytes they move.
OP_DIRECTIONS = {"htod": "host to device", "htod3d": "host to device", "dtoh": "device to host",
                 "dtoh3d": "device to host", "dtod": "on device", "dtod3d": "on device",
                 "peer_push": "between servers"}


@dataclass
class CallTimes:
    calls: int = 0
    total: float = 0.0
    longest: float = 0.0


@dataclass
class DeviceTraffic:
    moved: dict = field(default_factory=lambda: dict.fromkeys(DIRECTIONS, 0))
    fast_launches: int = 0


class Stats:
    def __init__(self):
        self._lock = threading.Lock()
        self._calls: dict[str, CallTimes] = collections.defaultdict(CallTimes)
        self._devices: dict[str, DeviceTraffic] = collections.defaultdict(DeviceTraffic)
        self._links: dict[str, str] = {}  # device -> what its calls travelled on

    def call(self, name: str, seconds: float) -> None:
        with self._lock:
            times = self._calls[name]
            times.calls += 1
            times.total += seconds
            times.longest = max(times.longest, seconds)

    def moved(self, device: str, op: str, size: int) -> None:
        direction = OP_DIRECTIONS.get(op)
        if direction and size:
            with self._lock:
                self._devices[device].moved[direction] += size

    def fast_launches(self, device: str, count: int) -> None:
        with self._lock:
            self._devices[device].fast_launches += count

    def link(self, device: str, transport: str) -> None:
        with self._lock:
            self._links[device] = transport

    def report(self) -> str:
        with self._lock:
            calls = sorted(self._calls.items(), key=lambda item: -item[1].total)
            devices = sorted(self._devices.items())
            links = sorted(self._links.items())
        total = sum(t.total for _, t in calls) or 1.0
        lines = ["rcuda: CUDA API summary (RCUDA_STATS=1)",
                 f"  {'Time (%)':>8}  {'Total (ms)':>11}  {'Calls':>8}  {'Avg (us)':>10}  {'Max (us)':>10}  Name"]
        for name, t in calls:
            lines.append(f"  {100 * t.total / total:8.1f}  {t.total * 1e3:11.3f}  {t.calls:8d}  "
                         f"{t.total / t.calls * 1e6:10.1f}  {t.longest * 1e6:10.1f}  {name}")
        if devices:
            lines.append("rcuda: device traffic")
            lines.append(f"  {'Device':34}" + "".join(f"{d:>17}" for d in DIRECTIONS) + f"{'C launches':>12}")
            for label, traffic in devices:
                lines.append(f"  {label:34}" + "".join(f"{_size(traffic.moved[d]):>17}" for d in DIRECTIONS)
                             + f"{traffic.fast_launches:>12}")
        if links:
            lines.append("rcuda: links")
            lines += [f"  {label:34}{transport}" for label, transport in links]
        return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
