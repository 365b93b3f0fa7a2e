"""What a server's GPUs are doing, from its session workers' reports.

Each serving worker pushes a report every protocol.STATUS_INTERVAL seconds
(server/worker.py): its client, and per GPU the memory the session holds,
its calls, busy time and bytes moved.  The daemon keeps the latest report
of each session and answers `status` (rcuda smi, the metrics endpoint) from
them, so a query never waits on a busy worker.  Rates (calls/s,
utilisation) come from a session's last two reports.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class SessionRecord:
    report: dict
    received: float
    previous: dict | None = None
    previous_received: float | None = None


COUNTERS = ("calls", "serve_seconds", "bytes_to_device", "bytes_from_device")


@dataclass
class StatusBoard:
    sessions: dict[int, SessionRecord] = field(default_factory=dict)  # worker pid -> its latest reports
    # Counts of sessions that ended, per GPU index: the totals only grow.
    retired: dict[int, dict[str, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, report: dict, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        pid = report.get("pid")
        if not isinstance(pid, int):
            return
        with self._lock:
            if report.get("ended"):
                self.sessions.pop(pid, None)
                self._retire(report)
                return
            old = self.sessions.get(pid)
            self.sessions[pid] = SessionRecord(report, now, old.report if old else None,
                                               old.received if old else None)

    def forget(self, pid: int) -> None:
        """A worker is gone (its final report may never come: killed)."""
        with self._lock:
            record = self.sessions.pop(pid, None)
            if record is not None:
                self._retire(record.report)

    def _retire(self, report: dict) -> None:
        for device in report.get("devices", []):
            if isinstance(device, dict) and isinstance(device.get("index"), int):
                totals = self.retired.setdefault(device["index"], dict.fromkeys(COUNTERS, 0))
                for key in COUNTERS:
                    totals[key] += device.get(key, 0)

    def snapshot(self, devices: list[dict]) -> tuple[list[dict], list[dict]]:
        """(gpus, sessions): per GPU memory used, utilisation (a fraction, or
        None where unknown) and session count; per session its client,
        memory per GPU and calls/s."""
        with self._lock:
            records = list(self.sessions.items())
        with self._lock:
            retired = {index: dict(totals) for index, totals in self.retired.items()}
        gpus = [{"index": i, "name": d.get("name", "?"), "memory_total": d.get("totalGlobalMem", 0),
                 "memory_used": 0, "utilization": 0.0, "sessions": 0,
                 **retired.get(i, dict.fromkeys(COUNTERS, 0))} for i, d in enumerate(devices)]
        sessions = []
        for pid, record in records:
            usage = {d["index"]: d for d in record.report.get("devices", []) if isinstance(d, dict)}
            before = {d["index"]: d for d in (record.previous or {}).get("devices", []) if isinstance(d, dict)}
            interval = (record.received - record.previous_received) if record.previous_received else None
            calls_per_second = 0.0
            for index, now in usage.items():
                if not 0 <= index < len(gpus):
                    continue
                gpu = gpus[index]
                gpu["memory_used"] += now.get("memory", 0)
                gpu["sessions"] += 1 if now.get("calls") or now.get("memory") else 0
                for key in COUNTERS:  # all-time totals: ended sessions' and the live ones' so far
                    gpu[key] += now.get(key, 0)
                if interval and index in before:
                    busy = now.get("busy_seconds", 0) - before[index].get("busy_seconds", 0)
                    gpu["utilization"] += max(0.0, busy) / interval
                    calls_per_second += max(0, now.get("calls", 0) - before[index].get("calls", 0)) / interval
            client = record.report.get("client") or {}
            sessions.append({"worker_pid": pid, "host": client.get("host"), "pid": client.get("pid"),
                             "program": client.get("program"), "age": record.report.get("age", 0),
                             "memory": {str(i): d.get("memory", 0) for i, d in usage.items()},
                             "calls_per_second": calls_per_second})
        for gpu in gpus:
            gpu["utilization"] = min(1.0, gpu["utilization"])
        return gpus, sessions
