#!/usr/bin/env python3
"""Load: many client sessions at once against one sim server.

Starts one `rcuda server --backend sim` and SESSIONS copies of
benchmarks/cuda/load_mix.cu (built with `nvcc -cudart shared`, run
unmodified with the interposer) at the same moment.  Their hellos arrive as
one burst: the daemon keeps a single spare worker, so most of them queue for
a worker, with the client's default RCUDA_TIMEOUT (10 s).  Once every
program has its session, all of them are released together and each does
ROUNDS rounds of copies and launches, checking every result.  The server's
`status` is sampled meanwhile for the number of live sessions.

    .venv/bin/python benchmarks/load.py [--sessions 50] [--rounds 20] [--n 65536]

Writes benchmarks/results/load.json (the machine, the latency percentiles of
each kind of call under load, connect times, peak sessions) and load.png
(latency CDFs).  `run_load()` is what tests/test_load.py calls with fewer
sessions.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import the installed package
    from rcuda.benchmarks import common
else:
    from . import common

KERNELS = common.CUDA_DIR / "load_kernels.py"
OPERATIONS = ("htod", "launch", "dtoh", "dtod", "small")
DESCRIPTIONS = {
    "htod": "two cudaMemcpy host to device of N floats",
    "launch": "two kernel launches and cudaDeviceSynchronize",
    "dtoh": "cudaMemcpy device to host of N floats",
    "dtod": "cudaMemset, cudaMemcpy device to device of N/2 floats, 8-byte read back",
    "small": "a 4-byte cudaMemcpy device to host (one round trip)",
}
CONNECT_TIMEOUT = 300.0  # seconds for every session to be established
PROGRAM_TIMEOUT = 900.0


@dataclass
class Session:
    """One client program and what it printed."""

    process: object
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    connected: threading.Event = field(default_factory=threading.Event)
    readers: list[threading.Thread] = field(default_factory=list)

    def start_reading(self) -> None:
        self.readers = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=lambda: self.errors.extend(self.process.stderr), daemon=True)]
        for reader in self.readers:
            reader.start()

    def finish_reading(self) -> None:
        for reader in self.readers:
            reader.join(10)  # the process has ended: its pipes close

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith("CONNECTED") or line.startswith("FAILED"):
                self.connected.set()
        self.connected.set()

    @property
    def stderr(self) -> str:
        return "".join(self.errors)

    @property
    def result(self) -> dict | None:
        found = [line for line in self.lines if line.startswith("RESULT ")]
        return json.loads(found[-1][len("RESULT "):]) if found else None


class SessionCounter:
    """Samples the server's live sessions (its `status`) in the background."""

    def __init__(self, address: str, interval: float = 0.25):
        self.address, self.interval = address, interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import zmq

        from rcuda import protocol
        from rcuda.client.transport.session import request_once
        from rcuda.config import parse_server
        from rcuda.errors import RcudaError

        context, address = zmq.Context(), parse_server(self.address)
        try:
            while not self._stop.wait(self.interval):
                try:
                    status = request_once(context, address, {"op": "status", "version": protocol.PROTOCOL_VERSION},
                                          5.0)
                except RcudaError:
                    continue
                self.peak = max(self.peak, len(status.get("sessions", [])))
        finally:
            context.term()


def run_load(sessions: int = 50, rounds: int = 20, n: int = 65536, progress=print,
             server_args: tuple = ()) -> dict:
    """Run the load; returns the result record.  Raises BenchmarkError if a
    session fails or any result is wrong."""
    import subprocess

    binary = common.compile_cuda("load_mix.cu")
    with common.sim_server(kernels=KERNELS) as server, tempfile.TemporaryDirectory() as scratch:
        go = Path(scratch) / "go"
        env = common.rcuda_environment(server.address)
        env.pop("RCUDA_TIMEOUT", None)  # the default, 10 s: a burst of hellos must fit in it
        progress(f"{sessions} sessions against {server.address}: starting them at once")
        started = time.monotonic()
        clients: list[Session] = []
        with SessionCounter(server.address) as counter:
            try:
                for _ in range(sessions):
                    process = subprocess.Popen([str(binary), str(rounds), str(n), str(go)], stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True, env=env)
                    session = Session(process)
                    session.start_reading()
                    clients.append(session)
                deadline = time.monotonic() + CONNECT_TIMEOUT
                for session in clients:
                    session.connected.wait(max(0.0, deadline - time.monotonic()))
                connected_after = time.monotonic() - started
                not_connected = [c for c in clients if not any(line.startswith("CONNECTED") for line in c.lines)]
                progress(f"all sessions established after {connected_after:.1f} s" if not not_connected else
                         f"{len(not_connected)} session(s) failed to connect")
                go.touch()  # every session runs its rounds at the same time
                released = time.monotonic()
                for session in clients:
                    try:
                        session.process.wait(timeout=max(1.0, released + PROGRAM_TIMEOUT - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        session.process.kill()
                        session.process.wait()
                ran_for = time.monotonic() - released
                for session in clients:
                    session.finish_reading()
            finally:
                go.touch()
                for session in clients:
                    if session.process.poll() is None:
                        session.process.kill()
                        session.process.wait()
        failures = [c for c in clients if c.process.returncode != 0 or c.result is None
                    or not any(line.startswith("PASSED load_mix") for line in c.lines)]
        if failures:
            first = failures[0]
            raise common.BenchmarkError(
                f"{len(failures)} of {sessions} sessions failed; the first (exit {first.process.returncode}):\n"
                f"{''.join(first.lines)[-2000:]}{first.stderr[-3000:]}")
        server_log = "".join(server.process.stderr_lines)
    results = [c.result for c in clients]
    latencies = {op: common.summarise([v for r in results for v in r[op]]) for op in OPERATIONS}
    # The first round of each session also loads its module and looks up its kernels on the server.
    later = {op: common.summarise([v for r in results for v in r[op][1:]]) for op in OPERATIONS} if rounds > 1 else {}
    from rcuda.config import DEFAULT_TIMEOUT
    return {
        "server": "rcuda server --backend sim: 1 simulated GPU, 1 spare worker (the defaults)",
        "client_timeout_s": DEFAULT_TIMEOUT, "buffer_bytes": n * 4,
        "sessions": sessions, "rounds": rounds, "n": n, "calls_checked": sessions * rounds * 7,
        "peak_concurrent_sessions": counter.peak,
        "connect_us": common.summarise([r["connect_us"] for r in results]),
        "all_connected_after_s": round(connected_after, 2), "rounds_took_s": round(ran_for, 2),
        "latency_us": latencies, "latency_us_after_first_round": later, "operations": DESCRIPTIONS,
        "server_tracebacks": server_log.count("Traceback"),
    }


def plot(result: dict, path: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.6))
    quantiles = [q / 2 for q in range(201)]
    for op in OPERATIONS:
        ax.plot(result["latency_us"][op]["cdf_us"], quantiles, label=f"{op}: {DESCRIPTIONS[op]}")
    ax.plot(result["connect_us"]["cdf_us"], quantiles, "k--", label="connect (hello, worker, open) in the burst")
    ax.set_xscale("log")
    ax.set_xlabel("latency (µs, log scale)")
    ax.set_ylabel("percentile")
    cpus = result["machine"]["cpus_usable"]
    ax.set_title(f"{result['sessions']} concurrent sessions on one sim server ({cpus} CPUs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--n", type=int, default=65536, help="floats per buffer")
    parser.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else common.default_results_dir(False)
    machine = common.describe_machine()
    try:
        result = run_load(args.sessions, args.rounds, args.n, progress=lambda m: print(m, file=sys.stderr))
    except common.BenchmarkError as exc:
        print(f"load: {exc}", file=sys.stderr)
        return 1
    payload = {"benchmark": "load", "title": "concurrent client sessions against one sim server",
               "machine": machine, "load_average_after": [round(v, 2) for v in __import__("os").getloadavg()],
               **result}
    out.mkdir(parents=True, exist_ok=True)
    path = common.write_json(out / "load.json", payload)
    picture = plot(payload, out / "load.png")
    for op in ("connect",) + OPERATIONS:
        stats = payload["connect_us"] if op == "connect" else payload["latency_us"][op]
        print(f"{op:8} p50 {stats['p50'] / 1000:8.2f} ms  p90 {stats['p90'] / 1000:8.2f} ms  "
              f"p99 {stats['p99'] / 1000:8.2f} ms  max {stats['max'] / 1000:8.2f} ms")
    print(f"{result['sessions']} sessions (peak {result['peak_concurrent_sessions']} at once), all results correct; "
          f"wrote {path}{f' and {picture}' if picture else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
