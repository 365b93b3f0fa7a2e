"""`rcuda bench`: each micro benchmark runs in --quick mode end to end (real
nvcc-built programs through the interposer against a real sim server) and
writes a valid JSON result and a PNG plot.  Speed is not asserted: these
machines are shared; the figures live in benchmarks/results."""
from __future__ import annotations

import json
import math
import subprocess

from matplotlib import image as mpimg  # in the test extra: the plots are part of what is checked

from conftest import RCUDA, requires_nvcc


def run_bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*RCUDA, "bench", *args], capture_output=True, text=True, timeout=timeout)


def numbers_in(value):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from numbers_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from numbers_in(v)


def check_outputs(out_dir, name: str) -> dict:
    result = json.loads((out_dir / f"micro_{name}.json").read_text())
    assert result["suite"] == "micro" and result["benchmark"] == name and result["quick"] is True
    machine = result["machine"]
    for key in ("cpu_model", "cpu_cores", "memory_bytes", "kernel", "python", "pyzmq", "libzmq", "numpy",
                "rcuda_commit", "date", "gpus"):
        assert key in machine, key
    assert machine["cpu_cores"] >= 1 and machine["memory_bytes"] > 0
    assert all(math.isfinite(x) for x in numbers_in(result)), "NaN or infinity in the results"
    assert result["goals"], "every benchmark states its goals"
    for g in result["goals"].values():
        assert set(g) == {"value", "goal", "met"} and g["value"] > 0
    png = out_dir / f"micro_{name}.png"
    image = mpimg.imread(png)  # decodes, so a truncated file fails
    assert image.shape[0] > 200 and image.shape[1] > 400
    return result


@requires_nvcc
def test_latency_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "latency", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert "micro/latency: round 1/1" in run.stderr  # progress is shown
    result = check_outputs(tmp_path, "latency")
    variants = result["variants"]
    assert set(variants) == {"forwarded", "local_call", "python_client", "channel", "pyzmq_tcp", "pyzmq_ipc", "raw_tcp"}
    for stats in variants.values():
        assert stats["n"] == result["parameters"]["iterations_per_round"]
        assert 0 < stats["min"] <= stats["p50"] <= stats["p99"] <= stats["p99.9"] <= stats["max"]
        assert len(stats["cdf_us"]) == 201
    assert result["ratios"]["forwarded_p50_over_pyzmq_p50"]["best_rounds"] > 0


@requires_nvcc
def test_copy_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "copy", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "copy")
    sizes = result["parameters"]["sizes"]
    for series in result["series"].values():
        assert [p["bytes"] for p in series["points"]] == sizes
        assert all(p["gb_per_s"] > 0 and p["repeats"] >= 3 for p in series["points"])
    assert {"htod: rcuda / raw socket, worst size >= 16 MiB",
            "dtoh: rcuda / raw socket, worst size >= 16 MiB"} == set(result["goals"])


@requires_nvcc
def test_launch_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "launch", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "launch")
    for v in result["variants"].values():
        assert 0 < v["total_per_s"] <= v["loop_per_s"] * 1.0001


@requires_nvcc
def test_startup_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "startup", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "startup")
    v = result["variants"]
    assert len(v["rcuda_kernel_count"]["total_ms_all"]) == result["parameters"]["repeats"]
    assert v["rcuda_kernel_count"]["call_ms"] > 0


def test_paper_suite_says_it_is_not_built_yet(tmp_path):
    run = run_bench("paper", "--quick", "--out", str(tmp_path))
    assert run.returncode == 2
    assert "MNIST demo" in run.stderr
    assert not list(tmp_path.iterdir()), "no results without measurements"


def test_unknown_benchmark_name_is_refused(tmp_path):
    run = run_bench("micro", "--only", "latncy", "--out", str(tmp_path))
    assert run.returncode == 2
    assert "latncy" in run.stderr and "latency" in run.stderr
