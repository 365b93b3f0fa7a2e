"""`rcuda smi`: an nvidia-smi for every rcuda server at once.

Asks each server's daemon for its `status` (all servers in parallel, each
bounded by the timeout) and prints, per server, its GPUs (memory used of
total, utilisation where the backend knows it, sessions) and the client
sessions on them (host, pid, program, memory held, calls/s).  A server that
does not answer is shown as unreachable; nothing waits longer than the
timeout.  `--watch` refreshes.
"""
from __future__ import annotations

import concurrent.futures
import json
import sys
import time

import zmq

from rcuda import protocol
from rcuda.auth import ClientKeys
from rcuda.config import ConfigError, ServerAddress


def query(address: ServerAddress, timeout: float, context: zmq.Context, keys: ClientKeys | None = None) -> dict:
    """The server's status, or {"error": why} (never raises, never hangs).
    `keys`: the client's CURVE keys, for servers with --auth."""
    from rcuda.client.transport.session import request_once  # the same hello path a client uses
    from rcuda.errors import RcudaError
    try:
        curve = keys.for_server(address) if keys is not None else None
        return request_once(context, address, {"op": "status", "version": protocol.PROTOCOL_VERSION}, timeout,
                            curve)
    except (RcudaError, ConfigError) as exc:
        return {"error": str(exc)}


def gather(servers: list[ServerAddress], timeout: float,
           keys: ClientKeys | None = None) -> list[tuple[ServerAddress, dict]]:
    context = zmq.Context()
    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, len(servers))) as pool:
            answers = list(pool.map(lambda a: query(a, timeout, context, keys), servers))
    finally:
        context.term()
    return list(zip(servers, answers))


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def render(results: list[tuple[ServerAddress, dict]]) -> str:
    lines = [time.strftime("rcuda smi  %Y-%m-%d %H:%M:%S")]
    for address, status in results:
        if "error" in status:
            lines.append(f"\n{address}: unreachable ({status['error']})")
            continue
        server = status.get("server", {})
        lines.append(f"\n{address}  {status.get('backend', '?')} backend, host {server.get('host', '?')}, "
                     f"rcuda {server.get('version', '?')}")
        lines.append(f"  {'GPU':>3}  {'Name':28} {'Memory used / total':>26}  {'Util':>5}  {'Sessions':>8}")
        for gpu in status.get("gpus", []):
            util = "n/a" if gpu.get("utilization") is None else f"{100 * gpu['utilization']:.0f}%"
            memory = f"{_mib(gpu['memory_used'])} / {_mib(gpu['memory_total'])}"
            lines.append(f"  {gpu['index']:>3}  {gpu['name'][:28]:28} {memory:>26}  {util:>5}  {gpu['sessions']:>8}")
        sessions = status.get("sessions", [])
        if sessions:
            lines.append(f"  {'Client':24} {'PID':>8}  {'Program':20} {'GPU memory':>24} {'Calls/s':>9}")
            for s in sessions:
                held = ", ".join(f"GPU{i}: {_mib(b)}" for i, b in sorted(s.get("memory", {}).items()) if b) or "-"
                lines.append(f"  {str(s.get('host'))[:24]:24} {s.get('pid')!s:>8}  {str(s.get('program'))[:20]:20} "
                             f"{held:>24} {s.get('calls_per_second', 0):9.0f}")
        else:
            lines.append("  no client sessions")
    return "\n".join(lines)


def run(servers: list[ServerAddress], timeout: float, watch: float | None, count: int | None,
        as_json: bool, out=sys.stdout, keys: ClientKeys | None = None) -> int:
    shown = 0
    while True:
        results = gather(servers, timeout, keys)
        if as_json:
            out.write(json.dumps([{"server": str(a), **s} for a, s in results], default=str) + "\n")
        else:
            if watch and out.isatty():
                out.write("\x1b[H\x1b[2J")  # clear the terminal between refreshes
            out.write(render(results) + "\n")
        out.flush()
        shown += 1
        if not watch or (count is not None and shown >= count):
            return 0 if all("error" not in s for _, s in results) else 1
        time.sleep(watch)
