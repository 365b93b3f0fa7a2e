#!/usr/bin/env python3
"""The same unmodified binaries on this machine's GPU and through rcuda, side
by side (benchmarks/gpu/run.sh runs them):

    local_vs_remote.py demo --out FILE.json [--epochs N] [--sim]
        examples/mnist_dp trained on the local GPU (no rcuda, --devices 1),
        through rcuda on 1 and 4 cupy servers (each serving GPU0), and the
        numpy CPU reference: test accuracies, loss curves, and whether they
        agree (1 remote GPU: the same curve as local up to 1e-5; 4 remote
        GPUs: up to 1e-3, accuracy within 0.3 points).
    local_vs_remote.py launch --out FILE.json
        benchmarks/cuda/launch.cu, a launch-bound loop (tiny kernels, then
        cudaDeviceSynchronize), locally and through rcuda on one cupy
        server on loopback.  Goal: remote <= 1.2x local.  Also its loops of
        4 KiB cudaMemsetAsync, 4 KiB cudaMemcpyAsync uploads, and memset +
        upload + launch steps, remote over local (no goal).

    local_vs_remote.py copies --out FILE.json
        benchmarks/cuda/copy.cu timing cudaMemcpy of 64 and 256 MiB both
        ways (pageable host memory): on the local GPU, through rcuda on one
        cupy server on loopback, and a raw TCP stream of the same sizes.
        Goal: rcuda at least 95% of the raw stream both ways.
    local_vs_remote.py managed --out FILE.json
        benchmarks/cuda/streams.cu managed-delta on a 1 GiB managed
        allocation: cudaDeviceSynchronize plus the host reading what a
        kernel changed, after it changed 1 MiB and after it changed all of
        it; locally and through rcuda (default and RCUDA_MANAGED_ON_TOUCH=1).
        Goal: through rcuda, 1 MiB changed costs at most 0.1x all of it.

    local_vs_remote.py graphs --out FILE.json
        benchmarks/cuda/graph_step.cu (rcuda bench micro's graph_launch): a
        step of 100 tiny kernels as a CUDA graph and as 100 launches, each
        step then cudaStreamSynchronize, interleaved in one run; locally and
        through rcuda on one cupy server on loopback.  Goal: through rcuda,
        the graph step >= 5x faster than the launches one by one.

--sim (for checking the script on a machine without a GPU): the rcuda runs
use a sim server instead of cupy ones and the local-GPU run is skipped, said
so in the JSON.  Exit status 0 when the runs completed (agreement and goals
are in the JSON, not the exit status).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path

from rcuda.benchmarks import common
from rcuda.benchmarks.paper import model

SERVERS = 4
GOAL_LAUNCH_LOOP = 1.2


@contextmanager
def servers(sim: bool, count: int = SERVERS, sim_kernels: Path = model.SIM_KERNELS, server_env: dict | None = None):
    """RCUDA_SERVERS of `count` cupy servers serving GPU0 (or one sim server
    with `count` simulated GPUs running `sim_kernels`); `server_env`:
    variables added to the servers' environment."""
    with ExitStack() as stack:
        if sim:
            server = stack.enter_context(common.sim_server(devices=count, kernels=sim_kernels, server_env=server_env))
            yield server.address, f"1 sim server with {count} simulated GPU(s) (no GPU: --sim)"
            return
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", **(server_env or {}))
        addresses = []
        for _ in range(count):
            process = common.start_process([*common.RCUDA, "server", "--listen", "tcp://127.0.0.1:0", "--backend",
                                            "cupy", "--devices", "1", "--log-level", "warning"],
                                           r"ready on tcp://\S+:\d+", env=env)
            stack.callback(process.stop)
            addresses.append(re.search(r"ready on tcp://(\S+:\d+)", process.ready_line)[1])
        yield ",".join(addresses), f"{count} cupy server(s) on loopback, each serving GPU0"


def curve(result: dict) -> list[float]:
    return [float(x) for x in result["losses"]]


def agree(a: dict, b: dict, rel: float, points: float) -> dict:
    la, lb = curve(a), curve(b)
    worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la, lb)) if la and len(la) == len(lb) else None
    gap = abs(a["test_accuracy"] - b["test_accuracy"]) * 100
    return {"worst_relative_loss_difference": worst, "accuracy_difference_points": round(gap, 3),
            "agree": bool(worst is not None and worst <= rel and gap <= points),
            "tolerance": {"relative_loss": rel, "accuracy_points": points}}


def demo(out: Path, epochs: int, sim: bool) -> dict:
    from rcuda import demo as rcuda_demo
    from rcuda import demo_data

    binary = rcuda_demo.build_example(lambda text: None)
    data = demo_data.ensure_mnist5k()
    args = ["--data", str(data), "--epochs", str(epochs)]
    runs: dict = {}
    report = {"what": "mnist_dp (unmodified) on the local GPU and through rcuda; numpy reference",
              "machine": common.describe_machine(), "epochs": epochs, "runs": runs, "comparisons": {}}
    cpu = common.run_program([sys.executable, model.EXAMPLE_DIR / "cpu_reference.py", *args])
    runs["cpu_reference"] = cpu
    if sim:
        report["local_gpu"] = "skipped: --sim (no GPU)"
    else:
        runs["local_gpu_1"] = common.run_program([binary, *args, "--devices", "1"])
    with servers(sim) as (addresses, description):
        report["remote"] = description
        env = common.rcuda_environment(addresses, {"RCUDA_TIMEOUT": "120"})
        for devices, sync in ((1, "host"), (4, "host"), (4, "peer")):
            runs[f"remote_{devices}_{sync}"] = common.run_program(
                [binary, *args, "--devices", str(devices), "--sync", sync], env=env)
        # Equal shares: the same split, so the two ways of summing the
        # gradients (on the host, and on GPU0 after peer copies) add the same
        # numbers in the same order.  Shares by measured speed differ from run
        # to run, and so does the order of additions.
        for sync in ("host", "peer"):
            runs[f"remote_4_{sync}_static"] = common.run_program(
                [binary, *args, "--devices", "4", "--sync", sync, "--static-split"], env=env)
    reference = runs.get("local_gpu_1", runs["cpu_reference"])
    name = "local_gpu_1" if "local_gpu_1" in runs else "cpu_reference"
    for key, run in runs.items():
        if key == name:
            continue
        exact = key == "remote_1_host" and name == "local_gpu_1"  # same GPU, same kernels, same order
        report["comparisons"][f"{key} vs {name}"] = agree(reference, run, 1e-5 if exact else 1e-3, 0.3)
    report["comparisons"]["remote_4_peer_static vs remote_4_host_static"] = agree(
        runs["remote_4_host_static"], runs["remote_4_peer_static"], 1e-5, 0.1)
    report["accuracies"] = {key: run["test_accuracy"] for key, run in runs.items()}
    report["train_seconds"] = {key: run["train_seconds"] for key, run in runs.items()}
    common.write_json(out, report)
    return report


def launch(out: Path, sim: bool, launches: int = 20000, repeats: int = 5) -> dict:
    binary = common.compile_cuda("launch.cu")
    report = {"what": "launch-bound loop (benchmarks/cuda/launch.cu): N tiny launches then cudaDeviceSynchronize, "
                      "best of the repeats", "machine": common.describe_machine(), "launches": launches,
              "repeats": repeats, "kernels": {}}
    # The goal is about launches; the loops of memsets, uploads, steps of
    # all three and hand-overs between streams by events (recorded in C too)
    # are measured beside them.
    for kernel in ("empty", "params", "memset", "upload", "step", "events"):
        entry = {}
        if not sim:
            entry["local"] = _launch_times(common.run_program([binary, launches, repeats, kernel]), launches)
        with servers(sim, 1, common.SIM_KERNELS) as (address, description):
            report["remote"] = description
            entry["remote"] = _launch_times(common.run_program([binary, launches, repeats, kernel],
                                                               env=common.rcuda_environment(address)), launches)
        if kernel in ("empty", "events") and not sim:
            # The same servers with every batch record run through Python
            # (server/backends/cuda_batches.py), as before the batch executor.
            with servers(sim, 1, common.SIM_KERNELS, {"RCUDA_BATCH_EXECUTOR": "python"}) as (address, _):
                entry["remote_python_batches"] = _launch_times(common.run_program(
                    [binary, launches, repeats, kernel], env=common.rcuda_environment(address)), launches)
            entry["python_batches_over_c"] = round(entry["remote_python_batches"]["total_us_per_launch"]
                                                   / entry["remote"]["total_us_per_launch"], 3)
        if "local" in entry:
            ratio = entry["remote"]["total_us_per_launch"] / entry["local"]["total_us_per_launch"]
            entry["remote_over_local"] = round(ratio, 3)
            if kernel in ("empty", "params"):
                entry["goal"] = common.goal(ratio, "<=", GOAL_LAUNCH_LOOP)
        report["kernels"][kernel] = entry
    if sim:
        report["local"] = "skipped: --sim (no GPU)"
    common.write_json(out, report)
    return report


def small_calls(out: Path, sim: bool, calls: int = 5000) -> dict:
    """Synchronous 4-byte copies to the host, idle cudaDeviceSynchronize
    and cudaMemGetInfo (benchmarks/cuda/latency.cu), p50 of each call: on the local GPU,
    through rcuda with the GPU server's C serving them
    (native/served_requests.c), with Python serving them
    (RCUDA_BATCH_EXECUTOR=python), and a raw TCP ping-pong of the same
    sizes.  The issue's goal: at most the ping-pong plus the local call
    plus 10 µs."""
    import tempfile

    import numpy as np

    from rcuda.benchmarks.micro import latency

    binary = common.compile_cuda("latency.cu")
    report = {"what": small_calls.__doc__.split("\n\n")[0], "machine": common.describe_machine(), "calls": calls,
              "p50_us": {}}

    def p50(samples) -> float:
        return float(np.percentile(samples, 50)) / 1e3

    with tempfile.TemporaryDirectory(prefix="rcuda-bench-") as scratch:
        scratch = Path(scratch)
        out_file = scratch / "latency.bin"
        kinds = ("dtoh4", "sync", "meminfo")
        for call in kinds:
            entry = report["p50_us"][call] = {}
            if not sim:
                common.run_program([binary, calls, 200, out_file, call])
                entry["local"] = p50(np.fromfile(out_file, dtype=np.int64))
        for name, server_env in (("remote_c", None), ("remote_python", {"RCUDA_BATCH_EXECUTOR": "python"})):
            with servers(sim, 1, common.SIM_KERNELS, server_env) as (address, description):  # one start for all calls
                report["remote"] = description
                for call in kinds:
                    report["p50_us"][call][name] = p50(latency.time_forwarded(binary, address, calls, 200, scratch,
                                                                              call))
        request, reply_bytes = latency.message_sizes()
        with common.peer("tcp-pingpong", str(len(request)), str(reply_bytes)) as tcp_peer:
            report["p50_us"]["raw_tcp_pingpong"] = p50(latency.time_raw_tcp(tcp_peer.address, request, reply_bytes,
                                                                             calls, 200))
    ping = report["p50_us"]["raw_tcp_pingpong"]
    for call, entry in report["p50_us"].items():
        if call == "raw_tcp_pingpong":
            continue
        entry["python_over_c"] = round(entry["remote_python"] / entry["remote_c"], 3)
        if "local" in entry:
            report.setdefault("goals", {})[f"{call}: rcuda - (ping-pong + local), µs"] = common.goal(
                round(entry["remote_c"] - ping - entry["local"], 2), "<=", 10.0)
    common.write_json(out, report)
    return report


GOAL_COPY = 0.95
GOAL_MANAGED_DELTA = 0.1


def copies(out: Path, sim: bool, sizes=(64 << 20, 256 << 20), repeats: int = 5) -> dict:
    """cudaMemcpy of large pageable buffers both ways: local GPU, through
    rcuda on one cupy server, and a raw TCP stream, medians in GB/s."""
    import tempfile

    import numpy as np

    from rcuda.benchmarks.micro import copy_throughput

    binary = common.compile_cuda("copy.cu")
    counts = {size: repeats for size in sizes}
    report = {"what": copies.__doc__.split("\n\n")[0], "machine": common.describe_machine(),
              "sizes": list(sizes), "repeats": repeats, "gb_per_s": {}}

    def rates(times: dict) -> dict:
        return {name: {str(size): round(size / float(np.median(seconds)) / 1e9, 3) for size, seconds in by.items()}
                for name, by in times.items()}

    with tempfile.TemporaryDirectory(prefix="rcuda-bench-") as scratch:
        scratch = Path(scratch)
        if not sim:
            report["gb_per_s"]["local"] = rates(copy_throughput.copy_times(binary, counts, 300, scratch))
        with servers(sim, 1, common.SIM_KERNELS) as (address, description):
            report["remote"] = description
            report["gb_per_s"]["rcuda"] = rates(copy_throughput.copy_times(binary, counts, 300, scratch,
                                                                             common.rcuda_environment(address)))
        with common.peer("tcp-stream", str(max(sizes))) as tcp_peer:
            raw = rates(copy_throughput.time_raw_tcp(tcp_peer.address, counts))
        report["gb_per_s"]["raw_tcp"] = {"htod": raw["raw_tcp_upload"], "dtoh": raw["raw_tcp_download"]}
    report["goals"] = {}
    for direction in ("htod", "dtoh"):
        for size in sizes:
            ratio = report["gb_per_s"]["rcuda"][direction][str(size)] / report["gb_per_s"]["raw_tcp"][direction][str(size)]
            report["goals"][f"{direction} {size >> 20} MiB: rcuda / raw TCP"] = common.goal(round(ratio, 3), ">=",
                                                                                          GOAL_COPY)
    common.write_json(out, report)
    return report


def managed(out: Path, sim: bool, size: int = 1 << 30, repeats: int = 3) -> dict:
    """A kernel changes 1 MiB of a managed allocation, then all of it; each
    time cudaDeviceSynchronize and the host reads what changed: locally and
    through rcuda on one cupy server (and with RCUDA_MANAGED_ON_TOUCH=1)."""
    from rcuda.benchmarks.micro import streams

    binary = common.compile_cuda("streams.cu")
    if sim:
        size = 64 << 20  # the sim's kernels are numpy on this machine's memory
    args = [binary, "managed-delta", size, repeats]
    report = {"what": managed.__doc__.split("\n\n")[0], "machine": common.describe_machine(), "bytes": size,
              "repeats": repeats, "runs": {}}
    if not sim:
        report["runs"]["local"] = common.run_program(args)
    with servers(sim, 1, streams.KERNELS) as (address, description):
        report["remote"] = description
        report["runs"]["rcuda"] = common.run_program(args, env=common.rcuda_environment(address))
        report["runs"]["rcuda_on_touch"] = common.run_program(
            args, env=common.rcuda_environment(address, {"RCUDA_MANAGED_ON_TOUCH": "1"}))
    report["goals"] = {}
    for name in ("rcuda", "rcuda_on_touch"):
        run = report["runs"][name]
        report["goals"][f"{name}: sync after 1 MiB of {size >> 20} MiB changed / after all of it"] = common.goal(
            round(run["part_us"] / run["whole_us"], 4), "<=", GOAL_MANAGED_DELTA)
    common.write_json(out, report)
    return report


def graph_steps(out: Path, sim: bool, steps: int = 500, runs: int = 3) -> dict:
    from rcuda.benchmarks.micro import graph_launch

    binary = common.compile_cuda("graph_step.cu")
    params = {**graph_launch.parameters(False), "steps": steps, "runs": runs}
    report = {"what": "a step of tiny kernels as a CUDA graph against the same launches one by one "
                      "(benchmarks/cuda/graph_step.cu), each step then cudaStreamSynchronize, steps interleaved",
              "machine": common.describe_machine(), "parameters": params}
    if sim:
        report["local"] = "skipped: --sim (no GPU)"
    else:
        report["local"] = graph_launch.summarise([graph_launch.run_program(binary, params, None)
                                                  for _ in range(runs)], params["launches"])
    with servers(sim, 1, graph_launch.KERNELS) as (address, description):
        report["remote_server"] = description
        env = common.rcuda_environment(address)
        report["remote"] = graph_launch.summarise([graph_launch.run_program(binary, params, env)
                                                   for _ in range(runs)], params["launches"])
    speedup = report["remote"]["ratios"]["plain_over_graph_median_step"]
    report["goals"] = {f"through rcuda, a step of {params['launches']} launches: one by one / as a graph "
                       "(median, end to end)": common.goal(speedup, ">=", graph_launch.GOAL_SPEEDUP)}
    if not sim:
        remote, local = report["remote"]["variants"], report["local"]["variants"]
        report["remote_over_local"] = {kind: remote[kind]["median_step_us"] / local[kind]["median_step_us"]
                                       for kind in ("graph", "plain")}
    common.write_json(out, report)
    return report


def _launch_times(result: dict, launches: int) -> dict:
    loops = [loop for loop, _ in result["loop_s"]]
    totals = [total for _, total in result["loop_s"]]
    return {"loop_us_per_launch": min(loops) / launches * 1e6, "total_us_per_launch": min(totals) / launches * 1e6,
            "runs_total_s": totals}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    d = actions.add_parser("demo")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--epochs", type=int, default=10)
    d.add_argument("--sim", action="store_true")
    la = actions.add_parser("launch")
    la.add_argument("--out", type=Path, required=True)
    la.add_argument("--launches", type=int, default=20000)
    la.add_argument("--sim", action="store_true")
    sc = actions.add_parser("small-calls")
    sc.add_argument("--out", type=Path, required=True)
    sc.add_argument("--calls", type=int, default=5000)
    sc.add_argument("--sim", action="store_true")
    for name in ("copies", "managed"):
        action = actions.add_parser(name)
        action.add_argument("--out", type=Path, required=True)
        action.add_argument("--sim", action="store_true")
    g = actions.add_parser("graphs")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--steps", type=int, default=500)
    g.add_argument("--sim", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.action == "demo":
            report = demo(args.out, args.epochs, args.sim)
            print(json.dumps({"accuracies": report["accuracies"], "comparisons": report["comparisons"]}, indent=1))
        elif args.action == "small-calls":
            report = small_calls(args.out, args.sim, args.calls)
            print(json.dumps({"p50_us": report["p50_us"], "goals": report.get("goals", {})}, indent=1))
        elif args.action in ("copies", "managed"):
            report = (copies if args.action == "copies" else managed)(args.out, args.sim)
            print(json.dumps({key: report[key] for key in ("gb_per_s", "runs", "goals") if key in report}, indent=1))
        elif args.action == "graphs":
            report = graph_steps(args.out, args.sim, args.steps)
            print(json.dumps({where: {kind: {k: v[k] for k in ("median_step_us", "p90_step_us", "launches_per_s")}
                                      for kind, v in report[where]["variants"].items()}
                              for where in ("local", "remote") if isinstance(report[where], dict)}, indent=1))
            print(json.dumps(report["goals"], indent=1))
        else:
            report = launch(args.out, args.sim, args.launches)
            print(json.dumps(report["kernels"], indent=1))
    except common.BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
