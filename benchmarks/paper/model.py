"""Which GPU the emulated testbed's sim servers pretend to be: the cost
model of the MNIST demo's sim kernels, and its calibration on a real GPU.

examples/mnist_dp/sim_kernels.py reads three knobs from the SERVER's
environment when the server loads the plugin (each session worker inherits
it): RCUDA_SIM_GFLOPS, RCUDA_SIM_GBPS, RCUDA_SIM_LAUNCH_US.  With them every
launch keeps the emulated GPU busy for LAUNCH_US + flops / GFLOPS + bytes /
GBPS, queued behind the launches before it as on a GPU, while the sim device
thread computes its result with numpy meanwhile (server/backends/sim.py,
_queue_gpu_time): a run of launches takes about max(numpy's time, the
modelled time), and the next copy or synchronisation waits for it.  So an
emulated GPU can be slower than numpy on this machine, never faster:
`sim_check` measures what a model really gives, with the same program the
calibration uses.

Models:
    PAPER_ERA   the default: a 64-image step of the MLP takes the paper's
                local-GPU time per batch (18.16 ms) -- 64.45 MFLOP of GEMMs
                at 3.6 GFLOP/s effective, 10 us per launch, 50 GB/s.  The
                only regime a 2-core machine can emulate for four GPUs at
                once (see benchmarks/README.md, "Reproducing the paper's table").
    MODEST      what a modest GPU might give with these naive 16x16-tile
                GEMMs on tiny matrices (assumed: 100 GFLOP/s, 100 GB/s,
                5 us per launch); measured here only to show the sim floor.
    a file      RCUDA_BENCH_SIM_MODEL=FILE.json, written by `calibrate` on a
                GPU machine (benchmarks/gpu/run.sh), replaces the default.

    python -m rcuda.benchmarks.paper.model calibrate --out FILE.json   # on a GPU machine
    python -m rcuda.benchmarks.paper.model check [FILE.json]            # what the sim makes of it
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from rcuda.demo import EXAMPLE_DIR  # package data (rcuda.examples), or the checkout's examples/mnist_dp

from .. import common

SIM_KERNELS = EXAMPLE_DIR / "sim_kernels.py"
TIMER_SOURCE = common.CUDA_DIR / "mnist_kernel_times.cu"
MODEL_FILE_VARIABLE = "RCUDA_BENCH_SIM_MODEL"
#: The paper's local GPU: seconds per 1000 batches.
PAPER_LOCAL_GPU_S = 18.16


@dataclass(frozen=True)
class CostModel:
    name: str
    gflops: float
    gbps: float
    launch_us: float
    source: str  # where the numbers come from, in words

    def environment(self) -> dict[str, str]:
        """What a sim server's environment needs (sim_kernels.py reads it)."""
        return {"RCUDA_SIM_GFLOPS": f"{self.gflops:g}", "RCUDA_SIM_GBPS": f"{self.gbps:g}",
                "RCUDA_SIM_LAUNCH_US": f"{self.launch_us:g}"}

    def as_dict(self) -> dict:
        return {**asdict(self), "environment": self.environment()}


PAPER_ERA = CostModel(
    "paper-era GPU (assumed)", gflops=3.6, gbps=50, launch_us=10,
    source="assumed, no GPU to calibrate on: chosen so that one 64-image step of the MLP (64.45 MFLOP in its GEMMs, "
           "19 launches) is modelled at about the paper's local-GPU time per batch, 18.16 ms")
MODEST = CostModel(
    "modest GPU (assumed)", gflops=100, gbps=100, launch_us=5,
    source="assumed: a modest GPU running mnist_dp's naive 16x16-tile GEMMs on matrices of 16-784 rows")


def selected_model() -> CostModel:
    """The model of RCUDA_BENCH_SIM_MODEL's file, else PAPER_ERA."""
    path = os.environ.get(MODEL_FILE_VARIABLE, "").strip()
    if not path:
        return PAPER_ERA
    try:
        data = json.loads(Path(path).read_text())
        fitted = data["model"]
        return CostModel(fitted["name"], float(fitted["gflops"]), float(fitted["gbps"]), float(fitted["launch_us"]),
                         fitted["source"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise common.BenchmarkError(f"{MODEL_FILE_VARIABLE}={path}: not a calibration file written by "
                                    f"`python -m rcuda.benchmarks.paper.model calibrate` ({exc})") from None


# ---------------------------------------------------------------- the kernel timer program


def build_kernel_timer() -> Path:
    """benchmarks/cuda/mnist_kernel_times.cu, which includes the example's
    device.h and network.h (so it launches exactly the trainer's shapes);
    built once per content."""
    nvcc = common.nvcc_path()
    if nvcc is None:
        raise common.BenchmarkError("nvcc not found: the calibration builds a CUDA program")
    if not EXAMPLE_DIR.is_dir():
        raise common.BenchmarkError(f"the MNIST example is not at {EXAMPLE_DIR}: reinstall rcuda with its "
                                    f"package data (pip install . in a source checkout)")
    inputs = [TIMER_SOURCE, common.CUDA_DIR / "bench_common.h",
              *sorted(p for p in EXAMPLE_DIR.iterdir() if p.suffix in (".h", ".cuh"))]
    key = hashlib.sha1(b"".join(p.name.encode() + p.read_bytes() for p in inputs) + nvcc.encode()).hexdigest()[:12]
    out = common.build_dir() / f"mnist_kernel_times-{key}"
    if not out.is_file():
        partial = out.with_name(out.name + f".partial-{os.getpid()}")
        cmd = [nvcc, "-cudart", "shared", "-O2", "-std=c++17", "-I", str(EXAMPLE_DIR), "-I", str(common.CUDA_DIR),
               "-o", str(partial), str(TIMER_SOURCE)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise common.BenchmarkError(f"nvcc failed: {' '.join(cmd)}\n{result.stderr}")
        partial.rename(out)
    return out


def time_kernels(rows: list[int], repeats: int, env: dict | None = None, prefix: list | None = None) -> dict:
    """The timer's RESULT: on the local GPU (env None), or through rcuda."""
    binary = build_kernel_timer()
    return common.run_program([*(prefix or []), binary, ",".join(map(str, rows)), repeats], env=env)


# ---------------------------------------------------------------- the model's arithmetic


class _Launch:
    """What sim_kernels._work reads of a launch, from a timer record."""

    def __init__(self, record: dict):
        self.demangled = f"{record['kernel']}(...)"
        self.grid, self.block = tuple(record["grid"]), tuple(record["block"])
        self._gemm = {3: record["M"], 4: record["N"], 5: record["K"]}

    def param(self, index: int, fmt: str):
        return self._gemm[index]


@functools.lru_cache(maxsize=1)
def _sim_kernels():
    """The example's plugin module (its _work is the model's definition of
    a launch's flops and bytes)."""
    spec = importlib.util.spec_from_file_location("mnist_dp_sim_kernels_model", SIM_KERNELS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def work(record: dict) -> tuple[float, float]:
    """(flops, bytes) the sim model charges for one timed launch."""
    return _sim_kernels()._work(_Launch(record))


def modelled_us(model: CostModel, record: dict) -> float:
    flops, moved = work(record)
    return model.launch_us + flops / (model.gflops * 1e3) + moved / (model.gbps * 1e3)


def step_records(timings: dict, rows: int) -> list[dict]:
    return [k for k in timings["kernels"] if k["rows"] == rows]


def modelled_step_us(model: CostModel, timings: dict, rows: int) -> float:
    return sum(modelled_us(model, k) for k in step_records(timings, rows))


def fit(timings: dict, name: str, source: str) -> tuple[CostModel, dict]:
    """Least squares for t = launch + flops / GFLOPS + bytes / GBPS over the
    timed launches, each weighted by 1/t (relative errors: a 3 us launch
    counts as much as a 300 us GEMM), with no negative term: every subset
    of the three terms is tried and the best non-negative fit kept."""
    records = timings["kernels"]
    t = np.array([k["median_us"] for k in records], float)
    flops, moved = np.array([work(k) for k in records], float).T
    columns = np.stack([np.ones_like(t), flops / 1e3, moved / 1e3], axis=1)  # us per launch, per GFLOP/s, per GB/s
    best = None
    for used in itertools.chain.from_iterable(itertools.combinations(range(3), r) for r in (3, 2, 1)):
        a = columns[:, used] / t[:, None]
        coef, *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        if (coef < 0).any():
            continue
        full = np.zeros(3)
        full[list(used)] = coef
        error = float(np.sqrt(np.mean((columns @ full / t - 1) ** 2)))
        if best is None or error < best[1] - 1e-9:
            best = (full, error)
    (launch_us, inv_gflops, inv_gbps), rms = best
    model = CostModel(name, gflops=float(1 / inv_gflops) if inv_gflops > 0 else 1e9,
                      gbps=float(1 / inv_gbps) if inv_gbps > 0 else 1e9, launch_us=float(launch_us), source=source)
    per_kernel = [{"kernel": k["kernel"], "rows": k["rows"], "measured_us": k["median_us"],
                   "modelled_us": round(modelled_us(model, k), 3)} for k in records]
    return model, {"rms_relative_error": round(rms, 4), "per_kernel": per_kernel}


def compare_steps(model: CostModel, timings: dict) -> list[dict]:
    """Per shard size: the modelled step (sum of its launches) next to the
    step the timer measured."""
    return [{"rows": s["rows"], "modelled_us": round(modelled_step_us(model, timings, s["rows"]), 1),
             "measured_us": s["event_median_us"], "measured_host_us": s["host_median_us"]}
            for s in timings["steps"]]


def sim_check(model: CostModel, rows: list[int], repeats: int) -> dict:
    """Run the timer on a loopback sim server with `model`: the step time an
    emulated GPU really has here, next to the modelled one."""
    with sim_server(model) as address:
        timings = time_kernels(rows, repeats, env=common.rcuda_environment(address))
    steps = compare_steps(model, timings)
    for step in steps:
        step["measured_over_modelled"] = round(step["measured_us"] / step["modelled_us"], 3)
    return {"model": model.as_dict(), "steps": steps, "timings": timings}


@contextmanager
def sim_server(model: CostModel | None, devices: int = 1):
    """A loopback sim server with the example's kernels and `model`'s knobs
    (none: numpy's own speed); yields its HOST:PORT."""
    env = dict(os.environ, **(model.environment() if model else {}))
    if model is None:
        env.pop("RCUDA_SIM_GFLOPS", None)
    process = common.start_process([*common.RCUDA, "server", "--listen", "tcp://127.0.0.1:0", "--backend", "sim",
                                    "--devices", str(devices), "--kernels", str(SIM_KERNELS),
                                    "--log-level", "warning"], r"ready on tcp://\S+:\d+", env=env)
    try:
        common.wait_idle(process.popen.pid)
        yield re.search(r"ready on tcp://(\S+:\d+)", process.ready_line)[1]
    finally:
        process.stop()


# ---------------------------------------------------------------- command line


def calibrate(out: Path, rows: list[int], repeats: int) -> dict:
    """Time the kernels on this machine's GPU0, fit the model, check what
    the sim makes of it; write everything to `out`."""
    timings = time_kernels(rows, repeats)
    machine = common.describe_machine()
    model, details = fit(timings, f"calibrated on {timings['device']}",
                         f"fitted to the kernel times of one MLP step measured on {timings['device']} "
                         f"({machine['date']}, benchmarks/cuda/mnist_kernel_times.cu, median of {repeats})")
    report = {"what": "sim cost model of the MNIST kernels, calibrated on a real GPU", "machine": machine,
              "model": model.as_dict(), "fit": details, "steps": compare_steps(model, timings),
              "timings": timings}
    try:
        report["sim_check"] = sim_check(model, rows, max(3, repeats // 3))
    except common.BenchmarkError as exc:
        report["sim_check"] = {"error": str(exc)}
    common.write_json(out, report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rcuda.benchmarks.paper.model", description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    cal = actions.add_parser("calibrate", help="time the kernels on the local GPU and fit the sim model")
    cal.add_argument("--out", required=True, type=Path)
    cal.add_argument("--rows", default="64,32,16")
    cal.add_argument("--repeats", type=int, default=21)
    check = actions.add_parser("check", help="what a sim server makes of a model (default: the selected one)")
    check.add_argument("file", nargs="?", default=None)
    check.add_argument("--rows", default="64,16")
    check.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    try:
        if args.action == "calibrate":
            report = calibrate(args.out, rows, args.repeats)
            model = report["model"]
            sys.stdout.write(f"{model['name']}: {model['gflops']:.4g} GFLOP/s, {model['gbps']:.4g} GB/s, "
                             f"{model['launch_us']:.3g} us per launch (rms relative error "
                             f"{report['fit']['rms_relative_error']:.2f}); written to {args.out}\n")
            for step in report["steps"]:
                sys.stdout.write(f"  step of {step['rows']} rows: measured {step['measured_us']:.0f} us, "
                                 f"modelled {step['modelled_us']:.0f} us\n")
        else:
            if args.file:
                os.environ[MODEL_FILE_VARIABLE] = args.file
            report = sim_check(selected_model(), rows, args.repeats)
            for step in report["steps"]:
                sys.stdout.write(f"{report['model']['name']}: step of {step['rows']} rows on a sim server: "
                                 f"{step['measured_us']:.0f} us measured, {step['modelled_us']:.0f} us modelled\n")
    except common.BenchmarkError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
