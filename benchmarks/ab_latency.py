"""Synchronous call latency of two rcuda installations, side by side in one
run: this one and a baseline (another checkout's venv), each program run by
its own `rcuda run` against its own sim server, rounds interleaved.

    python -m rcuda.benchmarks.ab_latency --baseline /path/to/old/.venv/bin/python \\
        [--auth] [--rounds 5] [--calls 3000] [--out FILE.json]

Times cuda/latency.cu's cudaMemGetInfo and 4-byte cudaMemcpy to the host
(the same binary for both: it is an ordinary CUDA program); with --auth both
servers run with --auth (fresh keys).  Prints and writes each side's
best-round medians and their ratio, new over baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from rcuda.benchmarks import common


def start_server(python: str, auth_dir: Path | None) -> tuple[subprocess.Popen, str]:
    command = [python, "-P", "-m", "rcuda.cli", "server", "--listen", "tcp://127.0.0.1:0", "--backend", "sim",
               "--log-level", "warning"]
    if auth_dir is not None:
        command += ["--auth", str(auth_dir)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True, cwd=tempfile.gettempdir())
    line = process.stdout.readline()
    found = re.search(r"ready on tcp://(\S+:\d+)", line)
    if not found:
        process.kill()
        raise common.BenchmarkError(f"{python}: the server did not start: {line!r}")
    return process, found[1]


def run_once(python: str, address: str, binary: Path, call: str, calls: int, scratch: Path, env: dict) -> float:
    out = scratch / "samples.bin"
    subprocess.run([python, "-P", "-m", "rcuda.cli", "run", "--servers", address, "--", str(binary), str(calls),
                    "300", str(out), call], check=True, capture_output=True, timeout=300,
                   env=dict(os.environ, **env), cwd=tempfile.gettempdir())
    return float(np.median(np.fromfile(out, dtype=np.int64))) / 1000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the baseline installation's python")
    parser.add_argument("--auth", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    binary = common.compile_cuda("latency.cu")
    sides = {"new": sys.executable, "baseline": args.baseline}
    with tempfile.TemporaryDirectory(prefix="rcuda-ab-") as scratch:
        scratch = Path(scratch)
        env, auth_dir = {}, None
        if args.auth:
            from rcuda import auth
            auth_dir = scratch / "server"
            auth.create_key_pair(auth_dir, "server")
            (auth_dir / "clients").mkdir()
            public, secret = auth.create_key_pair(scratch / "client", "client")
            shutil.copy(public, auth_dir / "clients")
            env = {"RCUDA_KEY": str(secret), "RCUDA_SERVER_KEY": str(auth_dir / "server.key")}
        servers = {name: start_server(python, auth_dir) for name, python in sides.items()}
        medians: dict = {(name, call): [] for name in sides for call in ("meminfo", "dtoh4")}
        try:
            for r in range(args.rounds):
                for name, python in sides.items():
                    for call in ("meminfo", "dtoh4"):
                        medians[(name, call)].append(run_once(python, servers[name][1], binary, call, args.calls,
                                                              scratch, env))
                print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {c} {v[-1]:.1f} us"
                                                                  for (n, c), v in medians.items()), file=sys.stderr)
        finally:
            for process, _ in servers.values():
                process.kill()
    best = {f"{name} {call}": round(min(v), 2) for (name, call), v in medians.items()}
    result = {"auth": args.auth, "calls_per_round": args.calls, "rounds": args.rounds,
              "machine": common.describe_machine(), "best_round_median_us": best,
              "new_over_baseline": {call: round(best[f"new {call}"] / best[f"baseline {call}"], 3)
                                    for call in ("meminfo", "dtoh4")}}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
