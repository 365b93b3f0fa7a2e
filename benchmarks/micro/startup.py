"""Process start-up cost added by the interposer.

A trivial CUDA program (cuda/startup.cu) is run many times, interleaved,
without rcuda (the toolkit's own libcudart; on a machine without a GPU its
cudaGetDeviceCount fails at once with "insufficient driver") and with rcuda
(LD_PRELOAD, a sim server on loopback), in these forms:

    plain          no kernel in the binary, no CUDA call: loading the library
    kernel         a kernel registered by the program's constructors, no
                   call: the registration waits in C (native/registrations.c),
                   so this should cost about what `plain` does
    kernel_count   the same, then one cudaGetDeviceCount: starts the embedded
                   Python, imports the client, connects to the server (hello,
                   session, open) and closes at exit
    rcuda_run      kernel_count started through `rcuda run` (a Python CLI
                   that execs the program)

The goal is about kernel_count: rcuda's median minus native's.  The program
prints the wall-clock time at main and after its call, which splits a run
into before main / the call / exit.  For scale, the interpreter's own start
(`python -c pass`) and importing the client are timed too.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .. import common
from ..common import Context, goal

NAME = "startup"
TITLE = "Process start-up cost"

GOAL_ADDED_MS = 150

LABELS = {
    "native_plain": "native, no kernel, no call",
    "native_kernel_count": "native, kernel + cudaGetDeviceCount",
    "rcuda_plain": "rcuda, no kernel, no call",
    "rcuda_kernel": "rcuda, kernel registered, no call",
    "rcuda_kernel_count": "rcuda, kernel + cudaGetDeviceCount",
    "rcuda_run_kernel_count": "rcuda run CLI, kernel + cudaGetDeviceCount",
    "python_start": "python -c pass (this venv)",
    "python_import_client": "python -c 'import rcuda.client.entrypoints'",
}


def parameters(quick: bool) -> dict:
    return {"repeats": 3 if quick else 15}


def time_process(cmd: list, env: dict) -> dict:
    """Wall-clock milliseconds of one run, split at the program's main and
    after its call when it reports them."""
    started_ns = time.time_ns()
    started = time.perf_counter()
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=120)
    wall = time.perf_counter() - started
    ended_ns = started_ns + int(wall * 1e9)
    if result.returncode != 0:
        raise common.BenchmarkError(f"{' '.join(map(str, cmd))} failed (exit {result.returncode}): "
                                    f"{result.stdout[-1000:]}{result.stderr[-3000:]}")
    times = {"total_ms": wall * 1e3}
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if lines:
        import json

        reported = json.loads(lines[-1][len("RESULT "):])
        times.update(before_main_ms=(reported["main_ns"] - started_ns) / 1e6,
                     call_ms=(reported["called_ns"] - reported["main_ns"]) / 1e6,
                     exit_ms=(ended_ns - reported["called_ns"]) / 1e6, status=reported["status"])
    return times


def run(ctx: Context) -> dict:
    params = parameters(ctx.quick)
    ctx.progress("building cuda/startup.cu (with and without a kernel)")
    plain = common.compile_cuda("startup.cu")
    with_kernel = common.compile_cuda("startup.cu", "-DWITH_KERNEL")
    native_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "RCUDA_SERVERS")}
    samples: dict[str, list[dict]] = {name: [] for name in LABELS}
    with common.sim_server() as server:
        rcuda_env = common.rcuda_environment(server.address)
        cases = {
            "native_plain": ([plain, "none"], native_env, False),
            "native_kernel_count": ([with_kernel, "count"], native_env, False),
            "rcuda_plain": ([plain, "none"], rcuda_env, False),
            "rcuda_kernel": ([with_kernel, "none"], rcuda_env, False),
            "rcuda_kernel_count": ([with_kernel, "count"], rcuda_env, True),
            "rcuda_run_kernel_count": ([*common.RCUDA, "run", "--servers", server.address, "--", with_kernel,
                                        "count"], native_env, True),
            "python_start": ([sys.executable, "-c", "pass"], native_env, False),
            # (not from a checkout in the current directory: -c puts it first on sys.path)
            "python_import_client": ([sys.executable, "-c", "import sys; del sys.path[0]; "
                                      "import rcuda.client.entrypoints"], native_env, False),
        }
        for r in range(params["repeats"]):
            ctx.progress(f"round {r + 1}/{params['repeats']}: {len(cases)} programs")
            for name, (cmd, env, connects) in cases.items():
                if connects:
                    server.wait_idle()  # the previous session's spare worker has started
                samples[name].append(time_process(cmd, env))
    variants = {name: {"label": LABELS[name], **_medians(runs)} for name, runs in samples.items()}
    for name in ("rcuda_kernel_count", "rcuda_run_kernel_count"):
        statuses = {run.get("status") for run in samples[name]}
        if statuses != {0}:
            raise common.BenchmarkError(f"{name}: cudaGetDeviceCount through rcuda returned {statuses}")
    added = {
        "library_only_ms": variants["rcuda_plain"]["total_ms"] - variants["native_plain"]["total_ms"],
        "kernel_registered_ms": variants["rcuda_kernel"]["total_ms"] - variants["native_plain"]["total_ms"],
        "one_call_ms": variants["rcuda_kernel_count"]["total_ms"] - variants["native_kernel_count"]["total_ms"],
        "one_call_via_rcuda_run_ms": variants["rcuda_run_kernel_count"]["total_ms"]
                                     - variants["native_kernel_count"]["total_ms"],
    }
    return {"parameters": {**params, "statistic": "median"}, "variants": variants,
            "added_ms": {k: round(v, 1) for k, v in added.items()},
            "goals": {"start-up added by the interposer (kernel + one call)":
                      goal(added["one_call_ms"], "<=", GOAL_ADDED_MS)}}


def _medians(runs: list[dict]) -> dict:
    keys = [k for k in runs[0] if k.endswith("_ms")]
    out = {k: round(float(np.median([run[k] for run in runs])), 2) for k in keys}
    out["total_ms_all"] = [round(run["total_ms"], 2) for run in runs]
    return out


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_startup.png"
    bars = [(v["label"], v["total_ms"]) for v in result["variants"].values()]
    native = result["variants"]["native_kernel_count"]["total_ms"]
    charts.bars(result, path, bars, "milliseconds from start to exit (median)",
               "Process start-up, with and without rcuda",
               goal=(f"native + {GOAL_ADDED_MS} ms (goal)", native + GOAL_ADDED_MS))
    return [path]


def headline(result: dict) -> list[str]:
    v = result["variants"]["rcuda_kernel_count"]
    split = ", ".join(f"{k[:-3]} {v[k]:.0f} ms" for k in ("before_main_ms", "call_ms", "exit_ms") if k in v)
    return [f"added by rcuda (ms): {result['added_ms']}",
            f"rcuda kernel + one call: {v['total_ms']:.0f} ms ({split})"]
