"""Synchronous forwarded call latency, next to the baselines it is held to.

The headline figure is `forwarded`: an unmodified CUDA program
(cuda/latency.cu) timing its own cudaMemGetInfo calls, each a round trip
through the interposer and an rcuda sim server over loopback TCP, on the
device's link (its lane; native/link.c), made in C
(native/sync_fast_path.c).  `forwarded_dtoh4` is the same program timing
4-byte cudaMemcpy downloads; `forwarded_auth` and `forwarded_auth_dtoh4`
the same against a server with --auth, where the lane is sealed (AES-256-GCM
records, rcuda/sealed.py), and `forwarded_auth_socket` its cudaMemGetInfo
on the device's CURVE-encrypted ZeroMQ socket (RCUDA_LINK=socket: what
--auth servers used before their lanes were sealed).  In the same run, in interleaved rounds (these machines are shared
and noisy), with the same message sizes:

    raw_tcp        a raw TCP socket ping-pong between two Python processes
    pyzmq_tcp      a bare pyzmq DEALER/ROUTER ping-pong between two processes
    pyzmq_ipc      the same over an ipc (Unix socket) endpoint
    python_client  rcuda's client runtime called from Python (its calls go
                   through cffi into the same C link) -> the sim server
    local_call     cudaGetDevice through rcuda: a call that never leaves the
                   process, what entering the client from C costs by itself

Where a forwarded call's time goes: the server reports the time its GPU
thread spent serving each request (from the request's first byte read to
its reply written: `server_us_per_call`, from `rcuda smi`'s counters); the
wire and the kernel's TCP stack are about what raw_tcp costs minus its own
Python; the rest is the client.

Both ends busy-poll for a moment before they sleep (--spin-us,
RCUDA_SPIN_US): the CPU time per call (`cpu_us_per_call`) shows what that
costs.
"""
from __future__ import annotations

import os
import socket
import tempfile
from contextlib import contextmanager
import time
import timeit
from pathlib import Path

import numpy as np

from .. import common
from ..common import Context, goal, summarise
from . import peers

NAME = "latency"
TITLE = "Synchronous call latency"

LABELS = {
    "forwarded": "CUDA program via rcuda (cudaMemGetInfo, sim server, lane)",
    "forwarded_dtoh4": "CUDA program via rcuda (4-byte cudaMemcpy to the host, lane)",
    "forwarded_auth": "CUDA program via rcuda (cudaMemGetInfo, --auth server: sealed lane)",
    "forwarded_auth_dtoh4": "CUDA program via rcuda (4-byte cudaMemcpy to the host, --auth server: sealed lane)",
    "forwarded_auth_socket": "CUDA program via rcuda (cudaMemGetInfo, --auth server, RCUDA_LINK=socket: ZeroMQ, "
                             "CURVE)",
    "local_call": "CUDA program via rcuda, cudaGetDevice (no message)",
    "python_client": "rcuda client from Python (cffi into the C link) -> sim server",
    "pyzmq_tcp": "bare pyzmq DEALER/ROUTER, tcp",
    "pyzmq_ipc": "bare pyzmq DEALER/ROUTER, ipc",
    "raw_tcp": "raw TCP socket ping-pong (Python)",
}


def parameters(quick: bool) -> dict:
    return {"iterations_per_round": 300 if quick else 2500, "rounds": 1 if quick else 6,
            "warmup_ms": 300 if quick else 1000}


def message_sizes() -> tuple[bytes, int]:
    """The request and reply rcuda sends for cudaMemGetInfo, so that the
    baselines move the same bytes."""
    from rcuda import protocol

    request = protocol.pack({"op": "mem_info", "seq": 1000})
    reply = protocol.pack({**peers.MEM_INFO_REPLY, "seq": 1000})
    return request, len(reply)


# ---------------------------------------------------------------- measurements


def time_raw_tcp(address: str, request: bytes, reply_bytes: int, n: int, warmup: int) -> np.ndarray:
    host, port = address.rsplit(":", 1)
    samples = np.empty(n, np.int64)
    reply = memoryview(bytearray(reply_bytes))
    clock = time.perf_counter_ns
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(-warmup, n):
            started = clock()
            sock.sendall(request)
            peers.recv_exactly(sock, reply)
            if i >= 0:
                samples[i] = clock() - started
    return samples


def time_pyzmq(endpoint: str, request: bytes, n: int, warmup: int) -> np.ndarray:
    import zmq

    samples = np.empty(n, np.int64)
    clock = time.perf_counter_ns
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        for i in range(-warmup, n):
            started = clock()
            sock.send(request)
            sock.recv()
            if i >= 0:
                samples[i] = clock() - started
    finally:
        sock.close(linger=0)
    return samples


def time_calls(call, n: int, warmup: int) -> np.ndarray:
    samples = np.empty(n, np.int64)
    clock = time.perf_counter_ns
    for i in range(-warmup, n):
        started = clock()
        call()
        if i >= 0:
            samples[i] = clock() - started
    return samples


def time_forwarded(binary: Path, server: str, n: int, warmup_ms: int, scratch: Path,
                   call: str = "meminfo", env: dict | None = None) -> np.ndarray:
    out = scratch / "latency.bin"
    common.run_program([binary, n, warmup_ms, out, call], env=common.rcuda_environment(server, env))
    samples = np.fromfile(out, dtype=np.int64)
    if samples.size != n:
        raise common.BenchmarkError(f"latency program wrote {samples.size} samples, expected {n}")
    return samples


def wakeup_round_trip_us(cpus: tuple[int, int] | None, n: int = 3000) -> float:
    """Median round trip of one byte to another process over pipes, with
    the two pinned to `cpus` (None: wherever the scheduler puts them).  Each
    trip wakes a process twice; on a virtual machine whose idle vCPUs halt,
    a wake-up on the other CPU is what dominates every latency here."""
    import subprocess

    from rcuda.python_command import python_module_command

    peer_cpu = -1 if cpus is None else cpus[1]
    child = subprocess.Popen([*python_module_command("rcuda.benchmarks.micro.peers"), "pipe-echo", str(peer_cpu)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    mine = os.sched_getaffinity(0)
    try:
        child.stdout.readline()  # "ready pipe"
        if cpus is not None:
            os.sched_setaffinity(0, {cpus[0]})
        out, into = child.stdout.fileno(), child.stdin.fileno()
        samples = np.empty(n, np.int64)
        clock = time.perf_counter_ns
        for i in range(-200, n):
            started = clock()
            os.write(into, b"x")
            os.read(out, 1)
            if i >= 0:
                samples[i] = clock() - started
    finally:
        os.sched_setaffinity(0, mine)
        child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()
    return float(np.median(samples)) / 1000


def msgpack_cost_us() -> float:
    """Microseconds of msgpack work in one round trip: the client packs a
    request and unpacks a reply, the server the reverse."""
    from rcuda import protocol

    request, _ = message_sizes()
    reply = protocol.pack({**peers.MEM_INFO_REPLY, "seq": 1000})

    def one_trip():
        protocol.unpack(protocol.pack(protocol.unpack(request)))
        protocol.unpack(protocol.pack(protocol.unpack(reply)))

    count = 20000
    return min(timeit.repeat(one_trip, number=count, repeat=3)) / count * 1e6


# ---------------------------------------------------------------- the benchmark


def run(ctx: Context) -> dict:
    from rcuda.client.state import Runtime
    from rcuda.config import ClientConfig, parse_server

    params = parameters(ctx.quick)
    n, rounds = params["iterations_per_round"], params["rounds"]
    warmup = max(50, n // 10)
    request, reply_bytes = message_sizes()
    ctx.progress("building cuda/latency.cu")
    binary = common.compile_cuda("latency.cu")
    samples: dict[str, list] = {name: [] for name in LABELS}
    cpu = CpuLedger()
    served: list[float] = []  # the server's microseconds per forwarded call, per round
    ipc_dir = tempfile.TemporaryDirectory(prefix="rcuda-bench-")
    with ipc_dir as scratch, \
            common.sim_server() as server, \
            common.auth_sim_server() as auth_server, \
            common.peer("tcp-pingpong", str(len(request)), str(reply_bytes)) as tcp_peer, \
            common.peer("zmq-pingpong", "tcp://127.0.0.1:0", str(reply_bytes)) as zmq_tcp, \
            common.peer("zmq-pingpong", f"ipc://{scratch}/pingpong", str(reply_bytes)) as zmq_ipc:
        scratch = Path(scratch)
        config = ClientConfig(servers=[parse_server(server.address)], timeout=10.0)
        runtime = Runtime(config)
        try:
            device = runtime.device(0)
            server.wait_idle()  # our hello made the daemon start a spare worker

            def forwarded(call="meminfo", on=server, env=None):
                on.wait_idle()  # the previous program's session started a spare worker
                return time_forwarded(binary, on.address, n, params["warmup_ms"], scratch, call,
                                      env=dict(on.client_env, **(env or {})))

            def forwarded_cpu():
                """The program's CPU time in two runs without warm-up, of n/10
                and n calls: the difference is what n - n/10 calls took.  (The
                server's side is measured with python_client: a program's
                session worker exits with the program, taking its count along.)"""
                for calls, sign in ((n // 10, -1), (n, 1)):
                    server.wait_idle()
                    with cpu.measure("forwarded", sign * calls, None, sign=sign, children=True):
                        time_forwarded(binary, server.address, calls, 0, scratch)

            def with_cpu(name, far, measure):
                if ctx.quick:  # too few calls for CPU times to mean anything
                    return measure()
                server.wait_idle()  # no spare worker starting while we count
                with cpu.measure(name, n + warmup, far):
                    return measure()

            def python_client():
                before = server.usage()
                result = with_cpu("python_client", server, lambda: time_calls(device.mem_info, n, warmup))
                after = server.usage()
                served.append((after["serve_seconds"] - before["serve_seconds"])
                              / max(after["calls"] - before["calls"], 1) * 1e6)
                return result

            measures = {
                "forwarded": forwarded,
                "forwarded_dtoh4": lambda: forwarded("dtoh4"),
                "forwarded_auth": lambda: forwarded(on=auth_server),
                "forwarded_auth_dtoh4": lambda: forwarded("dtoh4", on=auth_server),
                "forwarded_auth_socket": lambda: forwarded(on=auth_server, env={"RCUDA_LINK": "socket"}),
                "local_call": lambda: time_forwarded(binary, server.address, n, 0, scratch, "getdevice"),
                "python_client": python_client,
                "pyzmq_tcp": lambda: with_cpu("pyzmq_tcp", zmq_tcp, lambda: time_pyzmq(zmq_tcp.address, request, n,
                                                                                   warmup)),
                "pyzmq_ipc": lambda: time_pyzmq(zmq_ipc.address, request, n, warmup),
                "raw_tcp": lambda: with_cpu("raw_tcp", tcp_peer, lambda: time_raw_tcp(tcp_peer.address, request,
                                                                                  reply_bytes, n, warmup)),
            }
            for r in range(rounds):
                for name, measure in measures.items():
                    ctx.progress(f"round {r + 1}/{rounds}: {n} round trips, {LABELS[name]}")
                    samples[name].append(measure())
                if not ctx.quick:
                    ctx.progress(f"round {r + 1}/{rounds}: CPU time per forwarded call")
                    forwarded_cpu()
        finally:
            runtime.shutdown()
    ctx.progress("msgpack cost per round trip; process wake-up round trips")
    usable = sorted(os.sched_getaffinity(0))
    wakeups = {"scheduler's choice": wakeup_round_trip_us(None)}
    if len(usable) >= 2:
        wakeups["same CPU"] = wakeup_round_trip_us((usable[0], usable[0]))
        wakeups["across CPUs"] = wakeup_round_trip_us((usable[0], usable[1]))
    variants = {name: {"label": LABELS[name], **summarise(np.concatenate(s) / 1000.0),
                       "round_medians_us": [round(float(np.median(r)) / 1000, 2) for r in s]}
                for name, s in samples.items()}
    return {"parameters": {**params, "call": "cudaMemGetInfo", "request_bytes": len(request),
                           "reply_bytes": reply_bytes, "transport": "tcp (loopback)"},
            "variants": variants, "cpu_us_per_call": cpu.per_call_us(),
            "server_us_per_call": round(min(served), 2) if served else None,
            "msgpack_us_per_round_trip": round(msgpack_cost_us(), 3),
            "pipe_round_trip_us": {k: round(v, 1) for k, v in wakeups.items()},
            **ratios_and_goals(variants)}


class CpuLedger:
    """CPU time per round trip on each side.  Unlike wall-clock latency it
    hardly depends on how busy or idle the machine's CPUs are, so it is the
    steadier figure on a shared machine.  The client side of a CUDA program
    is the program's own CPU time (a waited-for child); of an in-process
    client, this whole process's (its ZeroMQ I/O thread included); the far
    side is the server's or the peer's process group."""

    def __init__(self):
        self.totals: dict[str, list] = {}  # name -> [calls, client seconds, far side seconds or None]

    @contextmanager
    def measure(self, name: str, calls: int, far, sign: int = 1, children: bool = False):
        clock = common.children_cpu_seconds if children else time.process_time
        client, far_side = clock(), far.cpu_seconds() if far else None
        yield
        entry = self.totals.setdefault(name, [0, 0.0, 0.0 if far else None])
        entry[0] += calls
        entry[1] += sign * (clock() - client)
        if far:
            entry[2] += sign * (far.cpu_seconds() - far_side)

    def per_call_us(self) -> dict:
        return {name: {"client": round(client / calls * 1e6, 2),
                       "far_side": None if far is None else round(far / calls * 1e6, 2)}
                for name, (calls, client, far) in self.totals.items() if calls > 0}


def ratios_and_goals(v: dict) -> dict:
    """On a shared machine each variant's round medians jump between regimes
    (vCPUs kept awake by other work, or halted), so a ratio of pooled medians
    mostly says which variant was unlucky.  The ratios here compare each
    variant's best round (its median in its quietest round: the cost of the
    path itself, as timeit's minimum is); the medians of the round-by-round
    ratios and their spread are given too.  Pooled percentiles describe
    the tails."""
    rounds = {name: np.array(stats["round_medians_us"]) for name, stats in v.items()}
    best = {name: float(r.min()) for name, r in rounds.items()}

    def ratio(a, b):
        per_round = rounds[a] / rounds[b]
        return {"best_rounds": round(best[a] / best[b], 3), "paired_median": round(float(np.median(per_round)), 3),
                "per_round": [round(float(x), 2) for x in per_round]}

    forwarded = v["forwarded"]
    ratios = {
        "forwarded_p50_over_pyzmq_p50": ratio("forwarded", "pyzmq_tcp"),
        "forwarded_p50_over_raw_tcp_p50": ratio("forwarded", "raw_tcp"),
        "dtoh4_p50_over_raw_tcp_p50": ratio("forwarded_dtoh4", "raw_tcp"),
        "auth_p50_over_lane_p50": ratio("forwarded_auth", "forwarded"),
        "auth_dtoh4_p50_over_lane_dtoh4_p50": ratio("forwarded_auth_dtoh4", "forwarded_dtoh4"),
        "auth_socket_p50_over_lane_p50": ratio("forwarded_auth_socket", "forwarded"),
        "auth_socket_p50_over_auth_p50": ratio("forwarded_auth_socket", "forwarded_auth"),
        "pyzmq_p50_over_raw_tcp_p50": ratio("pyzmq_tcp", "raw_tcp"),
        "python_client_p50_over_forwarded_p50": ratio("python_client", "forwarded"),
        "pyzmq_ipc_p50_over_pyzmq_tcp_p50": ratio("pyzmq_ipc", "pyzmq_tcp"),
        "forwarded_p99_over_forwarded_p50": round(forwarded["p99"] / forwarded["p50"], 3),
    }
    # What each layer adds to the median round trip (best rounds).
    ladder = {
        "c_entry_alone_cudaGetDevice": best["local_call"],
        "zeromq_over_raw_tcp": best["pyzmq_tcp"] - best["raw_tcp"],
        "forwarded_over_raw_tcp": best["forwarded"] - best["raw_tcp"],
        "python_client_over_c_program": best["python_client"] - best["forwarded"],
        "sealing_over_lane": best["forwarded_auth"] - best["forwarded"],
        "zeromq_and_curve_over_lane": best["forwarded_auth_socket"] - best["forwarded"],
    }
    return {
        "ratios": ratios,
        "best_round_median_us": {k: round(x, 2) for k, x in best.items()},
        "ladder_p50_added_us": {k: round(x, 2) for k, x in ladder.items()},
        "goals": {
            "forwarded p50 / bare pyzmq p50 (best rounds)":
                goal(ratios["forwarded_p50_over_pyzmq_p50"]["best_rounds"], "<=", 1.2),
            "4-byte cudaMemcpy to the host p50 / raw TCP p50 (best rounds)":
                goal(ratios["dtoh4_p50_over_raw_tcp_p50"]["best_rounds"], "<=", 2.0),
            "forwarded p99 / forwarded p50 (pooled)": goal(ratios["forwarded_p99_over_forwarded_p50"], "<=", 3.0),
            "--auth (sealed lane) p50 / lane p50 (best rounds)":
                goal(ratios["auth_p50_over_lane_p50"]["best_rounds"], "<=", 1.3),
            "--auth (sealed lane) 4-byte dtoh p50 / lane's (best rounds)":
                goal(ratios["auth_dtoh4_p50_over_lane_dtoh4_p50"]["best_rounds"], "<=", 1.3),
        },
    }


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_latency.png"
    charts.latency_cdf(result, path)
    return [path]


def headline(result: dict) -> list[str]:
    v, r = result["variants"], result["ratios"]
    fz, ft, d4 = (r["forwarded_p50_over_pyzmq_p50"], r["forwarded_p50_over_raw_tcp_p50"],
                  r["dtoh4_p50_over_raw_tcp_p50"])
    return [f"p50/p99/p99.9 (us): " + "; ".join(f"{name} {s['p50']:.0f}/{s['p99']:.0f}/{s['p99.9']:.0f}"
                                               for name, s in v.items()),
            f"best-round medians (us): {result['best_round_median_us']}",
            f"forwarded/pyzmq p50 {fz['best_rounds']:.2f} best rounds, {fz['paired_median']:.2f} paired median "
            f"(goal <= 1.2); p99/p50 {r['forwarded_p99_over_forwarded_p50']:.2f} (goal <= 3); "
            f"forwarded/raw TCP {ft['best_rounds']:.2f}; 4-byte dtoh/raw TCP {d4['best_rounds']:.2f} (goal <= 2); "
            f"--auth sealed lane/lane {r['auth_p50_over_lane_p50']['best_rounds']:.2f} (goal <= 1.3), 4-byte dtoh "
            f"{r['auth_dtoh4_p50_over_lane_dtoh4_p50']['best_rounds']:.2f}; --auth ZeroMQ CURVE socket/lane "
            f"{r['auth_socket_p50_over_lane_p50']['best_rounds']:.2f}",
            f"server time per call (us): {result['server_us_per_call']}",
            f"CPU us per call (client, far side): {result['cpu_us_per_call'] or 'not measured in quick mode'}",
            f"pipe round trip between two processes (us): {result['pipe_round_trip_us']}"]
