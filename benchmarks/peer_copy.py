#!/usr/bin/env python3
"""Server-to-server copies vs copies staged through the client.

Runs tests/cuda/peer_copy.cu (built with `nvcc -cudart shared`) unmodified
through rcuda against two sim servers.  In the same run, for each size, it
times cudaMemcpyPeer from GPU0 to GPU1 (bytes go server to server) and the
same copy staged through the program (cudaMemcpy to a host buffer, then to
GPU1).  Scenarios:

  loopback      both servers on 127.0.0.1
  loopback-auth the same with --auth (one client key, each server its own
                key pair): peer copies under CurveZMQ with the destination
                session's peer key, staged copies on the sealed lanes
  netns         two network-namespace hosts joined by veth pairs, client in a
                third namespace (needs root and iproute2)
  netns-RATE    the same with each host's link limited to RATE (tc tbf)

    .venv/bin/python benchmarks/peer_copy.py [--sizes-mib 1,4,16,64,256] [--repeats 3] [--rate 1gbit]

Writes benchmarks/results/peer_copy.json (machine, versions, date, every
timing) and prints a table.  The sim backend's device memory is host memory,
so this measures rcuda's data path (ZeroMQ, the workers, the client), not a GPU.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from rcuda.python_command import python_module_command

REPO = Path(__file__).resolve().parent.parent
PROGRAM_SOURCE = REPO / "tests" / "cuda" / "peer_copy.cu"
KERNELS = REPO / "tests" / "cuda" / "multi_kernels.py"
RESULTS = REPO / "benchmarks" / "results" / "peer_copy.json"
RCUDA = python_module_command("rcuda.cli")  # nothing imported from the current directory
MIB = 1 << 20
SETTLE_SECONDS = 4


def build(workdir: Path) -> Path:
    nvcc = shutil.which("nvcc") or shutil.which("nvcc", path="/usr/local/cuda/bin")
    if nvcc is None:
        sys.exit("nvcc not found: the benchmark builds tests/cuda/peer_copy.cu with the CUDA toolkit")
    binary = workdir / "peer_copy"
    subprocess.run([nvcc, "-cudart", "shared", "-o", str(binary), str(PROGRAM_SOURCE)], check=True)
    return binary


def start_loopback_server(*args: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([*RCUDA, "server", "--listen", "tcp://127.0.0.1:0", "--backend", "sim",
                                "--kernels", str(KERNELS), *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(60)
    match = re.search(r"ready on tcp://(\S+):(\d+)", lines[0] if lines else "")
    if not match:
        process.kill()
        sys.exit(f"server did not start: {lines}")
    return process, f"{match[1]}:{match[2]}"


def run_program(binary: Path, servers: str, sizes: list[int], repeats: int, prefix=(),
                env_extra=None) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["RCUDA_TIMEOUT"] = "60"
    env.update(env_extra or {})
    # SETTLE: after its untimed warm-up copies the program waits, so that the
    # servers' session start-up (each daemon starts a new spare worker, a
    # Python process, on a machine that may have two cores) is not measured.
    cmd = [*prefix, *RCUDA, "run", "--servers", servers, "--", str(binary), "both",
           ",".join(map(str, sizes)), str(repeats), str(SETTLE_SECONDS)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if result.returncode != 0 or "PASSED peer_copy" not in result.stdout:
        sys.exit(f"peer_copy failed:\n{result.stdout}\n{result.stderr}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def summarise(name: str, measurements: list[dict], extra: dict) -> dict:
    rows = []
    for size in sorted({m["bytes"] for m in measurements}):
        row = {"bytes": size}
        for mode in ("peer", "staged"):
            seconds = [m["seconds"] for m in measurements if m["bytes"] == size and m["mode"] == mode]
            median = statistics.median(seconds)
            row[mode] = {"seconds": seconds, "median_s": median, "MiB_per_s": size / MIB / median}
        row["peer_speedup"] = row["staged"]["median_s"] / row["peer"]["median_s"]
        rows.append(row)
    return {"scenario": name, **extra, "results": rows}


def scenario_loopback(binary, sizes, repeats) -> dict:
    servers = [start_loopback_server() for _ in range(2)]
    try:
        addresses = ",".join(address for _, address in servers)
        return summarise("loopback", run_program(binary, addresses, sizes, repeats),
                         {"description": "two sim servers on 127.0.0.1, client on the same machine"})
    finally:
        for process, _ in servers:
            process.terminate()
            process.wait(30)


def scenario_loopback_auth(binary, sizes, repeats) -> dict:
    from rcuda import auth

    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        public, secret = auth.create_key_pair(root / "client", "client")
        servers, server_keys = [], []
        try:
            for name in ("one", "two"):
                server_dir = root / name
                auth.create_key_pair(server_dir, "server")
                (server_dir / "clients").mkdir(exist_ok=True)
                shutil.copy(public, server_dir / "clients")
                servers.append(start_loopback_server("--auth", str(server_dir)))
                server_keys.append(f"{servers[-1][1]}={server_dir / 'server.key'}")
            env = {"RCUDA_KEY": str(secret), "RCUDA_SERVER_KEY": ",".join(server_keys)}
            return summarise("loopback-auth", run_program(binary, ",".join(a for _, a in servers), sizes, repeats,
                                                          env_extra=env),
                             {"description": "two --auth sim servers on 127.0.0.1: peer copies under CurveZMQ, "
                                             "staged copies on the sealed lanes"})
        finally:
            for process, _ in servers:
                process.terminate()
                process.wait(30)


def scenario_netns(binary, sizes, repeats, rate: str | None) -> dict:
    from rcuda.hosts import Hosts

    name = f"rcb{os.getpid()}{'r' if rate else ''}"
    with tempfile.TemporaryDirectory() as state, \
            Hosts(2, name=name, subnet="10.82.0", rate=rate, state_dir=state, auth=False,
                  server_args=["--backend", "sim", "--kernels", str(KERNELS)]) as hosts:
        prefix = hosts.network.exec_argv(hosts.network.client_namespace, [])
        measurements = run_program(binary, hosts.servers_variable, sizes, repeats, prefix)
    description = ("two network-namespace hosts on veth pairs and a bridge, client in a third namespace"
                   + (f"; each host's link limited to {rate} both ways (tc tbf)" if rate else ""))
    return summarise(f"netns-{rate}" if rate else "netns", measurements,
                     {"description": description, "rate": rate})


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory = next((int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), 0)
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_bytes": memory, "kernel": platform.release(),
            "os": platform.platform()}


def versions() -> dict:
    import msgpack
    import numpy
    import zmq

    import rcuda
    nvcc = shutil.which("nvcc") or shutil.which("nvcc", path="/usr/local/cuda/bin")
    nvcc_version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return {"rcuda": rcuda.__version__, "python": platform.python_version(), "pyzmq": zmq.__version__,
            "libzmq": zmq.zmq_version(), "msgpack": ".".join(map(str, msgpack.version)), "numpy": numpy.__version__,
            "nvcc": nvcc_version[-1] if nvcc_version else "?",
            "git": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()}


def print_table(scenarios: list[dict]) -> None:
    print(f"{'scenario':<14} {'size':>8} {'peer MiB/s':>11} {'staged MiB/s':>13} {'peer speedup':>13}")
    for scenario in scenarios:
        for row in scenario["results"]:
            print(f"{scenario['scenario']:<14} {row['bytes'] // MIB:>5} MiB {row['peer']['MiB_per_s']:>11.0f} "
                  f"{row['staged']['MiB_per_s']:>13.0f} {row['peer_speedup']:>12.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mib", default="1,4,16,64,256")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", default="1gbit", help="rate limit of the netns-RATE scenario ('' to skip it)")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args()
    sizes = [int(float(s) * MIB) for s in args.sizes_mib.split(",")]
    from rcuda.netns import unavailable_reason

    with tempfile.TemporaryDirectory() as workdir:
        binary = build(Path(workdir))
        scenarios = [scenario_loopback(binary, sizes, args.repeats),
                     scenario_loopback_auth(binary, sizes, args.repeats)]
        reason = unavailable_reason()
        skipped = {}
        if reason is None:
            scenarios.append(scenario_netns(binary, sizes, args.repeats, None))
            if args.rate:
                scenarios.append(scenario_netns(binary, sizes, args.repeats, args.rate))
        else:
            skipped["netns"] = reason
            print(f"netns scenarios skipped: {reason}", file=sys.stderr)
    report = {"benchmark": "peer_copy", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "what": "cudaMemcpyPeer GPU0 -> GPU1 on two sim servers (server to server) vs the same copy staged "
                      "through the client program (cudaMemcpy D2H + H2D); median of the repeats",
              "machine": machine(), "versions": versions(), "repeats": args.repeats, "skipped": skipped,
              "scenarios": scenarios}
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print_table(scenarios)
    print(f"written to {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
