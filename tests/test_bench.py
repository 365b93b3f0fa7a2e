"""`rcuda bench`: each micro benchmark and the paper table run in --quick
mode end to end (real nvcc-built programs through the interposer against
real sim servers; the paper table also in network-namespace hosts where
they can be made) and write valid JSON results and PNG plots.  Speed is not
asserted: these machines are shared; the figures live in benchmarks/results.
The paper table's cost-model fit (what benchmarks/gpu/run.sh calibrates on a
GPU) is checked against a sim server with a known model."""
from __future__ import annotations

import json
import math
import subprocess

import pytest
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
    assert set(variants) == {"forwarded", "forwarded_dtoh4", "forwarded_auth", "forwarded_auth_dtoh4",
                             "forwarded_auth_socket", "local_call", "python_client", "pyzmq_tcp", "pyzmq_ipc",
                             "raw_tcp"}
    for stats in variants.values():
        assert stats["n"] == result["parameters"]["iterations_per_round"]
        assert 0 < stats["min"] <= stats["p50"] <= stats["p99"] <= stats["p99.9"] <= stats["max"]
        assert len(stats["cdf_us"]) == 201
    assert result["ratios"]["forwarded_p50_over_pyzmq_p50"]["best_rounds"] > 0
    assert result["ratios"]["dtoh4_p50_over_raw_tcp_p50"]["best_rounds"] > 0
    assert result["server_us_per_call"] > 0


@requires_nvcc
def test_copy_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "copy", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "copy")
    sizes = result["parameters"]["sizes"]
    assert set(result["series"]) == {f"{who}_{direction}" for who in ("rcuda", "rcuda_auth", "rcuda_auth_socket")
                                     for direction in ("htod", "dtoh")} | {"raw_tcp_upload", "raw_tcp_download",
                                                                           "pyzmq_upload", "pyzmq_download"}
    assert set(result["ratios"]["htod_auth_over_lane"]) == {str(s) for s in sizes}
    assert set(result["ratios"]["dtoh_auth_over_raw_tcp"]) == {str(s) for s in sizes}
    assert all(rate > 0 for rate in result["cipher_gb_per_s"].values())
    for series in result["series"].values():
        assert [p["bytes"] for p in series["points"]] == sizes
        assert all(p["gb_per_s"] > 0 and p["repeats"] >= 3 for p in series["points"])
    assert {"htod: rcuda / raw socket, worst size >= 16 MiB", "dtoh: rcuda / raw socket, worst size >= 16 MiB",
            "htod: --auth sealed lane / raw socket, worst size >= 64 MiB",
            "dtoh: --auth sealed lane / raw socket, worst size >= 64 MiB"} == set(result["goals"])


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


@requires_nvcc
def test_paper_quick(tmp_path):
    """The paper table end to end (quick): CPU row, local-GPU row or the
    reason it is missing, remote rows on every testbed, emulated ones
    labelled EMULATED, goals, and both plots.  Without network namespaces
    the netns testbed is skipped and says why."""
    from rcuda.benchmarks.paper import testbeds

    run = run_bench("paper", "--quick", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "paper_table.json").read_text())
    assert result["suite"] == "paper" and result["benchmark"] == "table" and result["quick"] is True
    assert "load_average" in result["machine"] and "load_average_after" in result
    assert all(math.isfinite(x) for x in numbers_in(result))
    assert result["paper"]["local_gpu_s"] == 18.16
    n = result["parameters"]["batches_measured"]
    assert n == result["parameters"]["train_limit"] // 64 * result["parameters"]["epochs"]
    rows = result["rows"]
    kinds = {r["kind"] for r in rows}
    assert "cpu" in kinds and "remote" in kinds
    have_gpu = bool(result["machine"]["gpus"])
    assert ("local" in kinds) == have_gpu
    if not have_gpu:
        assert "GPU" in result["skipped"]["local GPU"]
        assert result["goals"]["one remote / local (real GPU)"]["met"] is None
    testbed = {b["key"]: b for b in result["testbeds"]}
    for row in rows:
        assert row["batches_measured"] == n and row["s_per_1000_batches"] > 0
        if row["kind"] == "remote":
            assert row["emulated"] == testbed[row["testbed"]]["emulated"]
            assert ("EMULATED" in row["label"]) == row["emulated"]
            assert row["emulated"] or row["testbed"] == "cupy-loopback"
            assert 0 < row["test_accuracy"] <= 1
    assert testbed["loopback"]["emulated"]
    netns_reason = testbeds.netns_unavailable()
    if netns_reason:
        assert result["skipped"]["netns"] == netns_reason
    else:
        assert testbed["netns-1gbit"]["emulated"] and "EMULATED" in testbed["netns-1gbit"]["label"]
    for key, table in result["table"].items():
        assert [line["row"] for line in table] == ["CPU", "local GPU", "1 remote GPU", "2 remote GPUs", "4 remote GPUs"]
        four = next(line for line in table if line["row"] == "4 remote GPUs")
        assert four["paper_speedup_over_one_remote"] == 2.2 and four["ours_speedup_over_one_remote"] > 0
    four_over_one = [g for name, g in result["goals"].items() if name.startswith("four remote speed-up")]
    assert four_over_one and all(g["value"] > 0 and g["met"] in (True, False) for g in four_over_one)
    emulated = result["compute_per_step"]["emulated"]["steps"]
    assert [s["rows"] for s in emulated] == result["parameters"]["timer_rows"]
    assert all(s["measured_us"] > 0 and s["modelled_us"] > 0 for s in emulated)
    for name in ("paper_table.png", "paper_scaling.png"):
        image = mpimg.imread(tmp_path / name)
        assert image.shape[0] > 300 and image.shape[1] > 500
    assert "paper/table: [loopback] EMULATED" in run.stderr  # the terminal table says so too


@requires_nvcc
def test_sim_cost_model_fit_recovers_a_known_model():
    """The calibration path of benchmarks/gpu/run.sh, without a GPU: the
    kernel timer run through rcuda on a sim server whose cost model is known
    (slow enough that numpy's own time never shows), then fitted."""
    from rcuda.benchmarks.paper import model

    known = model.CostModel("known", gflops=1.0, gbps=2.0, launch_us=300, source="test")
    with model.sim_server(known) as address:
        from rcuda.benchmarks import common
        timings = model.time_kernels([32], 3, env=common.rcuda_environment(address))
    assert len(model.step_records(timings, 32)) == timings["steps"][0]["launches"] == 19
    fitted, details = model.fit(timings, "fitted", "test")
    assert fitted.gflops == pytest.approx(1.0, rel=0.25)
    assert fitted.launch_us >= 0.8 * 300  # plus the sim's own per-launch handling
    step = model.compare_steps(fitted, timings)[0]
    assert step["modelled_us"] == pytest.approx(step["measured_us"], rel=0.3)


def test_unknown_benchmark_name_is_refused(tmp_path):
    run = run_bench("micro", "--only", "latncy", "--out", str(tmp_path))
    assert run.returncode == 2
    assert "latncy" in run.stderr and "latency" in run.stderr


@requires_nvcc
def test_streams_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "streams", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "streams")
    assert result["idle_sync"]["kernel_still_running"] and result["idle_sync"]["beside_calls"] > 0
    assert result["concurrency"]["parallel_us"] < result["concurrency"]["one_stream_us"]
    assert result["zero_copy"]["mapped_us"] > 0 and result["zero_copy"]["copies_us"] > 0


@requires_nvcc
def test_pools_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "pools", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "pools")
    assert set(result["variants"]) == {"malloc", "async", "async_sync"}
    assert all(v["pairs_per_s"] > 0 for v in result["variants"].values())


@requires_nvcc
def test_pitched_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "pitched", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "pitched")
    assert set(result["variants"]) == {"htod_2d", "htod_flat", "dtoh_2d", "dtoh_flat"}
    assert all(v["gb_per_s"] > 0 for v in result["variants"].values())
    assert result["parameters"]["device_pitch"] >= result["parameters"]["width"] * 4


@requires_nvcc
def test_graph_launch_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "graph_launch", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "graph_launch")
    assert set(result["variants"]) == {"graph", "plain"}
    assert result["nodes"] == result["parameters"]["launches"]
    assert result["checks"]["one_step_same"] and result["checks"]["every_launch_ran"]
    for v in result["variants"].values():
        assert v["step_us"]["n"] == result["parameters"]["steps"] * result["parameters"]["runs"]
        assert 0 < v["issue_us"]["p50"] <= v["median_step_us"] <= v["p90_step_us"] and v["launches_per_s"] > 0


def test_served_requests_quick(tmp_path):
    """No nvcc needed: the GPU server's session thread with the stand-ins."""
    run = run_bench("micro", "--quick", "--only", "served_requests", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "served_requests")
    assert set(result["variants"]) == {"c", "python", "transport"}
    assert all(v["round_trip_us"] > 0 and v["server_us"] > 0 for v in result["variants"].values())


@requires_nvcc
def test_driver_api_quick(tmp_path):
    run = run_bench("micro", "--quick", "--only", "driver_api", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "driver_api")
    launches = result["results"]["launch"]
    assert launches["runtime"]["per_s"] > 0 and launches["driver"]["per_s"] > 0
    assert result["results"]["local"]["driver"]["us_per_call"] > 0


@requires_nvcc
def test_libraries_quick(tmp_path):
    from nvidia_libraries import library_flags

    library_flags("cublas")  # skips without the nvidia-cublas wheel
    run = run_bench("micro", "--quick", "--only", "libraries", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "libraries")
    variants = result["variants"]
    assert set(variants) == {"rcuda", "numpy", "rcuda_all_cores", "numpy_all_cores"}
    params = result["parameters"]
    for figures in variants.values():
        assert set(figures["small"]) == {str(n) for n in params["small_sizes"]}
        assert set(figures["large"]) == {str(n) for n in params["large_sizes"]}
        assert all(s["us_per_call"] > 0 for s in figures["small"].values())
        assert all(s["gflops"] > 0 for s in figures["large"].values())
    rcuda = variants["rcuda"]
    assert all(0 < s["issue_us_per_call"] <= s["us_per_call"] * 1.0001 for s in rcuda["small"].values())
    assert rcuda["dot"]["us_per_call"] > 0 and rcuda["meminfo"]["us_per_call"] > 0
    assert result["max_relative_error"] < 1e-5  # the program checked the GEMMs and the dot
    assert "SGEMM 32x32" in run.stderr  # the headline


@requires_nvcc
def test_torch_startup_quick(tmp_path):
    from rcuda.benchmarks.micro import torch_startup

    reason = torch_startup.unavailable()
    if reason:
        pytest.skip(f"the torch_startup benchmark cannot run: {reason}")
    run = run_bench("micro", "--quick", "--only", "torch_startup", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    result = check_outputs(tmp_path, "torch_startup")
    assert result["variants"]["rcuda"]["devices"] == 1
    assert result["registered"]["__cudaRegisterFatBinary"] > 100  # libtorch_cuda's modules, kept until used


def test_libraries_without_the_cublas_wheel_says_what_to_install(monkeypatch):
    import importlib.util

    from rcuda.benchmarks.common import BenchmarkError
    from rcuda.benchmarks.micro import libraries

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(BenchmarkError, match=r"nvidia-cublas wheel, which is not installed.*pip install"):
        libraries.cublas_flags()


def test_micro_skips_libraries_without_the_cublas_wheel(monkeypatch, capsys, tmp_path):
    """`rcuda bench micro` where the nvidia-cublas wheel cannot be found (its
    `nvidia` package hidden from imports): the libraries benchmark is skipped
    with one line saying why and what to install, the rest run, exit 0; and
    `--only libraries` is refused with that reason.  The other micro
    benchmarks are replaced by one that measures nothing, to stay fast."""
    import sys
    from types import SimpleNamespace

    from rcuda import cli
    from rcuda.benchmarks import runner
    from rcuda.benchmarks.micro import libraries

    monkeypatch.setitem(sys.modules, "nvidia", None)  # find_spec("nvidia") -> None, as without the wheels
    ran = []
    other = SimpleNamespace(NAME="other", TITLE="a benchmark that can run", run=lambda ctx: ran.append(1) or {},
                            plot=lambda result, out_dir: [], headline=lambda result: [])
    monkeypatch.setitem(runner.SUITES, "micro", [libraries, other])

    assert cli.main(["bench", "micro", "--quick", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert all(line.startswith("[") for line in lines), lines  # progress lines only, each whole
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == 1 and "micro/libraries: skipped: " in skipped[0], lines
    assert "nvidia-cublas wheel, which is not installed" in skipped[0]
    assert "pip install 'nvidia-cublas>=13,<14'" in skipped[0] and "pip install -e '.[test]'" in skipped[0]
    assert ran == [1] and (tmp_path / "micro_other.json").is_file()
    assert not (tmp_path / "micro_libraries.json").exists()

    assert cli.main(["bench", "micro", "--quick", "--only", "libraries", "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("rcuda bench: error: --only libraries: ") and "pip install" in error
