#!/usr/bin/env python3
"""The long fuzz run: rcuda.fuzz against sim servers, with and without --auth.

Runs, each against a fresh `rcuda server --backend sim --memory-limit 64MiB`:

  plain-N     the fuzzer with a real session (daemon, GPU and heartbeat
              sockets, GPU0's lane, the peer port), seeds 1..3, server
              without --auth
  auth-N      the same with an accepted key, seeds 4..5, server with --auth:
              the sockets under CURVE, the lane and the peer port sealed,
              and records on the lane altered, replayed and reordered
  stranger    someone without an accepted key (no key, unknown keys, raw
              TCP bytes) against a --auth server's daemon and a session's
              worker ports: nothing may be answered

After each run the server must still be up with no traceback in its log,
and a normal client (benchmarks/cuda/load_mix.cu, unmodified, through the
interposer; with its key for --auth) must run correctly.

    .venv/bin/python benchmarks/fuzz.py [--frames 100000] [--stranger-frames 50000]

Writes benchmarks/results/fuzz.json: per run the frames, replies, error
replies, seconds, tracebacks and log lines, whether the client then passed,
and the machine.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):
    from rcuda.benchmarks import common
else:
    from . import common

KERNELS = common.CUDA_DIR / "load_kernels.py"
MEMORY_LIMIT = 64 << 20
RUN_SECONDS = 900.0  # the most one run may fuzz for


def make_keys(root: Path) -> dict:
    """A server --auth folder accepting one client, and that client's settings."""
    from rcuda import auth
    server_dir = root / "auth"
    auth.create_key_pair(server_dir, "server")
    (server_dir / "clients").mkdir()
    public, secret = auth.create_key_pair(root / "client", "client")
    shutil.copy(public, server_dir / "clients")
    return {"server_dir": server_dir, "env": {"RCUDA_KEY": str(secret),
                                              "RCUDA_SERVER_KEY": str(server_dir / "server.key")}}


def start_server(auth_dir: Path | None) -> tuple[common.Process, str]:
    cmd = [*common.RCUDA, "server", "--listen", "tcp://127.0.0.1:0", "--backend", "sim", "--kernels", str(KERNELS),
           "--memory-limit", str(MEMORY_LIMIT)]
    if auth_dir is not None:
        cmd += ["--auth", str(auth_dir)]
    process = common.start_process(cmd, r"ready on tcp://\S+:\d+")
    match = re.search(r"ready on tcp://(\S+):(\d+)", process.ready_line)
    return process, f"{match[1]}:{match[2]}"


def client_passes(address: str, env_extra: dict) -> tuple[bool, str]:
    binary = common.compile_cuda("load_mix.cu")
    env = common.rcuda_environment(address, env_extra)
    result = subprocess.run([str(binary), "3", "65536"], capture_output=True, text=True, timeout=300, env=env)
    ok = result.returncode == 0 and "PASSED load_mix rounds=3" in result.stdout
    return ok, "" if ok else (result.stdout + result.stderr)[-3000:]


def one_run(name: str, seed: int, frames: int, keys: dict | None, stranger: bool, progress) -> dict:
    from rcuda import auth, fuzz, protocol
    from rcuda.client.transport.session import request_once
    from rcuda.config import parse_server

    server, address = start_server(keys["server_dir"] if keys else None)
    try:
        curve = None
        if keys:
            curve = auth.ClientKeys(keys["env"]["RCUDA_KEY"], [keys["env"]["RCUDA_SERVER_KEY"]]).for_server(
                parse_server(address))
        progress(f"{name}: {frames} frames, seed {seed}, server {address}{' with --auth' if keys else ''}")
        if stranger:
            import zmq
            context = zmq.Context()
            try:  # a real session, so that its worker's ports are there to attack
                hello = request_once(context, parse_server(address), {
                    "op": "hello", "version": protocol.PROTOCOL_VERSION, "client": {"program": "fuzz victim"}},
                    30.0, curve)
            finally:
                context.term()
            ports = [*hello["ports"], hello["control_port"], hello["peer_port"], *hello.get("lane_ports", [])]
            report = fuzz.Stranger(address, seed, curve.server).run(frames, RUN_SECONDS, ports)
        else:
            report = fuzz.Fuzzer(address, seed, curve=curve).run(frames, RUN_SECONDS)
        alive = server.popen.poll() is None
        ok, why = client_passes(address, keys["env"] if keys else {}) if alive else (False, "server died")
        time.sleep(0.5)
        log = "".join(server.stderr_lines)
    finally:
        server.stop()
    result = {"name": name, "seed": seed, "auth": keys is not None, "stranger": stranger, **asdict(report),
              "server_alive_after": alive, "tracebacks": log.count("Traceback"),
              "server_log_lines": log.count("\n"), "client_after_ok": ok}
    if not ok:
        result["client_failure"] = why
    if result["tracebacks"]:
        result["first_traceback"] = log[log.index("Traceback") - 300:][:3000]
    progress(f"{name}: {report.frames_sent} frames in {report.seconds:.1f}s, {report.replies} replies "
             f"({report.error_replies} errors), tracebacks {result['tracebacks']}, client after: "
             f"{'ok' if ok else 'FAILED'}")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=100_000, help="frames per fuzzer run")
    parser.add_argument("--stranger-frames", type=int, default=50_000)
    parser.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    args = parser.parse_args(argv)
    progress = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    machine = common.describe_machine()
    started = time.monotonic()
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        keys = make_keys(Path(scratch))
        for seed in (1, 2, 3):
            runs.append(one_run(f"plain-{seed}", seed, args.frames, None, False, progress))
        for seed in (4, 5):
            runs.append(one_run(f"auth-{seed}", seed, args.frames, keys, False, progress))
        runs.append(one_run("stranger", 6, args.stranger_frames, keys, True, progress))
    passed = all(r["server_alive_after"] and r["client_after_ok"] and r["tracebacks"] == 0 for r in runs) and \
        all(r["replies"] == 0 for r in runs if r["stranger"])
    payload = {"benchmark": "fuzz", "title": "malformed and mutated frames against rcuda servers",
               "machine": machine, "memory_limit": MEMORY_LIMIT, "passed": passed,
               "frames_total": sum(r["frames_sent"] for r in runs),
               "tracebacks_total": sum(r["tracebacks"] for r in runs),
               "duration_s": round(time.monotonic() - started, 1), "runs": runs}
    out = Path(args.out) if args.out else common.default_results_dir(False)
    path = common.write_json(out / "fuzz.json", payload)
    print(f"{'PASSED' if passed else 'FAILED'}: {payload['frames_total']} frames in {len(runs)} runs, "
          f"{payload['tracebacks_total']} tracebacks; wrote {path}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
