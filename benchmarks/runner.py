"""Runs benchmark suites and writes their results.

A benchmark is a module with:

    NAME, TITLE                     short name (file names) and title
    run(ctx: Context) -> dict       measures; returns what goes into the JSON
                                    (parameters, figures, "ratios", "goals")
    plot(result, out_dir) -> [Path]  draws its PNG(s) from the JSON alone
    headline(result) -> [str]       a few lines for the terminal

and, optionally, unavailable() -> str | None: why it cannot run here and
how to make it run (None: it can).  Such a benchmark is skipped, with that
line, unless --only names it: then the run stops before measuring anything.

Each result is written to OUT_DIR/<suite>_<name>.json with the machine's
description (CPU, memory, kernel, versions, rcuda commit, date, GPUs, load
average before and after), then plotted to OUT_DIR/<suite>_<name>.png.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from . import common, paper
from .micro import (copy_throughput, driver_api, graph_launch, latency, launch_throughput, libraries, pitched, pools,
                    served_requests, startup, streams, torch_startup)

SUITES = {
    "micro": [latency, copy_throughput, launch_throughput, startup, streams, pools, driver_api, libraries,
              torch_startup, pitched, graph_launch, served_requests],
    "paper": paper.BENCHMARKS,
}


def find_benchmark(suite: str, name: str):
    return next((b for b in SUITES.get(suite, []) if b.NAME == name), None)


def unavailable(suite: str) -> str | None:
    """Why a suite cannot run here, or None."""
    if suite == "paper" and not paper.BENCHMARKS:
        return paper.UNAVAILABLE
    return None


def benchmark_unavailable(benchmark) -> str | None:
    """Why `benchmark` cannot run here, or None."""
    check = getattr(benchmark, "unavailable", None)
    return check() if check is not None else None


def run_suites(suites: list[str], quick: bool, out_dir: Path, progress: common.Progress,
               only: list[str] | None = None) -> list[Path]:
    """Run the named suites' benchmarks (those in `only`, if given); returns
    the files written.  A benchmark that fails raises BenchmarkError after
    the ones before it have been written."""
    written: list[Path] = []
    for suite in suites:
        reason = unavailable(suite)
        if reason:
            progress(f"{suite}: skipped: {reason}")
            continue
        for benchmark in SUITES[suite]:
            if only and benchmark.NAME not in only:
                continue
            reason = benchmark_unavailable(benchmark)
            if reason:
                progress(f"{suite}/{benchmark.NAME}: skipped: {reason}")
                continue
            written += run_one(suite, benchmark, quick, out_dir, progress)
    return written


def run_one(suite: str, benchmark, quick: bool, out_dir: Path, progress: common.Progress) -> list[Path]:
    progress.prefix = f"{suite}/{benchmark.NAME}: "
    progress(f"{benchmark.TITLE}{' (quick)' if quick else ''}")
    machine = common.describe_machine()
    started = time.monotonic()
    result = benchmark.run(common.Context(quick=quick, out_dir=out_dir, progress=progress))
    payload = {"suite": suite, "benchmark": benchmark.NAME, "title": benchmark.TITLE, "quick": quick,
               "machine": machine, "load_average_after": list(os.getloadavg()),
               "duration_s": round(time.monotonic() - started, 1), **result}
    path = common.write_json(out_dir / f"{suite}_{benchmark.NAME}.json", payload)
    pictures = benchmark.plot(payload, out_dir)
    for line in benchmark.headline(payload):
        progress(line)
    progress(f"wrote {path.name}, {', '.join(p.name for p in pictures)}")
    progress.prefix = ""
    return [path, *pictures]


def main(suite: str, quick: bool, out: str | None, only: str | None, stream) -> int:
    """`rcuda bench`: run, show progress on `stream`, say where results went.
    Raises BenchmarkError for what the user must fix."""
    try:
        import matplotlib  # noqa: F401 - checked before minutes of measuring
    except ImportError:
        raise common.BenchmarkError("the benchmark plots need matplotlib: pip install 'rcuda[bench]'") from None
    suites = ["micro", "paper"] if suite == "all" else [suite]
    if suite != "all" and unavailable(suite):
        raise common.BenchmarkError(f"{suite}: {unavailable(suite)}")
    names = [n.strip() for n in only.split(",") if n.strip()] if only else None
    known = {b.NAME for s in suites for b in SUITES[s]}
    if names and not set(names) <= known:
        raise common.BenchmarkError(f"--only {only}: unknown benchmark(s) {sorted(set(names) - known)}; "
                                    f"known: {', '.join(sorted(known))}")
    named = [b for s in suites for b in SUITES[s] if b.NAME in (names or ())]
    for benchmark in named:  # asked for by name: not skipped, but refused, saying why
        reason = benchmark_unavailable(benchmark)
        if reason:
            raise common.BenchmarkError(f"--only {benchmark.NAME}: {reason}")
    out_dir = Path(out) if out else common.default_results_dir(quick)
    progress = common.Progress(stream)
    written = run_suites(suites, quick, out_dir, progress, names)
    progress(f"done: {len(written)} files in {out_dir}")
    return 0
