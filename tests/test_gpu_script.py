"""benchmarks/gpu/run.sh, the one-go script for a GPU machine: valid bash
(and clean under shellcheck where it is installed), and its dry-run mode,
which runs the steps that need no GPU, records the GPU ones as skipped with
the reason, records a failing step and carries on, writes the summary, and
leaves exactly the archive and the summary in $OUT.  And its selection of
the GPU tests, which must find every test file's GPU tests."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import requires_nvcc

REPO = Path(__file__).resolve().parent.parent
RUN_SH = REPO / "benchmarks" / "gpu" / "run.sh"
SCRIPTS = [RUN_SH, REPO / "benchmarks" / "gpu" / "prepare_wheels.sh"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_scripts_are_valid_bash(script):
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert syntax.returncode == 0, syntax.stderr
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck): only bash -n was checked")
    lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout


def test_gpu_selection_finds_every_files_gpu_tests():
    """Each test file that starts cupy servers has tests run.sh's -k
    expression selects (GPU tests are named *on_a_gpu*, *local_gpu*, or
    have a cupy case)."""
    selection = re.search(r'^GPU_TESTS="([^"]+)"', RUN_SH.read_text(), re.M)[1]
    collect = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              "-k", selection, "tests"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert collect.returncode == 0, collect.stdout[-3000:] + collect.stderr[-3000:]
    selected = {line.split("::")[0] for line in collect.stdout.splitlines() if "::" in line}
    uses_a_gpu = re.compile(r'"--backend", "cupy"|run_on_gpu\(|gpu_servers\(|servers_of\(|cupy_unavailable\(\)')
    files = {f"tests/{path.name}" for path in (REPO / "tests").glob("test_*.py")
             if path.name != Path(__file__).name and uses_a_gpu.search(path.read_text())}
    assert files and files <= selected, f"GPU tests run.sh would not run: {sorted(files - selected)}"


@requires_nvcc
def test_run_sh_dry_run_records_every_step(tmp_path):
    out, wheels = tmp_path / "out", tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "COMMIT").write_text("abc1234-dirty\n")  # as prepare_wheels.sh writes it
    env = dict(os.environ, OUT=str(out), RCUDA_GPU_DRY_RUN="1", RCUDA_GPU_PYTHON=sys.executable,
               RCUDA_GPU_WHEELS=str(wheels),
               RCUDA_GPU_STEPS="machine install cupy tests-gpu calibrate launch small-calls copies managed graphs",
               RCUDA_GPU_PYTEST_ARGS="tests/no_such_test_file.py")
    run = subprocess.run(["bash", str(RUN_SH)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    # What comes back from a lent machine: the archive and the summary, nothing else.
    assert sorted(p.name for p in out.iterdir()) == ["gpu-results.tar.gz", "summary.md"]
    with tarfile.open(out / "gpu-results.tar.gz") as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
    results = tmp_path / "unpacked" / "gpu-results"
    lines = (results / "steps.tsv").read_text().splitlines()
    status = {name: state for name, state, _ in (line.split("\t") for line in lines[1:])}
    assert list(status) == ["machine", "install", "cupy", "tests-gpu", "launch", "small-calls", "copies",
                            "managed", "demo", "graphs",
                            "paper", "calibrate", "micro", "summary"]
    assert status["machine"] == "ok" and (results / "machine" / "uname.txt").is_file()
    assert (results / "machine" / "commit.txt").read_text().strip() == "abc1234-dirty"
    assert status["install"] == f"skipped: using RCUDA_GPU_PYTHON={sys.executable}"
    assert status["cupy"] == "skipped: dry run: no GPU"
    assert status["calibrate"].startswith("skipped: dry run")
    assert status["demo"] == status["paper"] == status["micro"] == "skipped: not selected (RCUDA_GPU_STEPS)"
    assert status["launch"] == "ok", (results / "logs" / "launch.log").read_text()
    assert status["graphs"] == "ok", (results / "logs" / "graphs.log").read_text()
    assert status["small-calls"] == "ok", (results / "logs" / "small-calls.log").read_text()
    assert status["copies"] == status["managed"] == "ok", (results / "logs" / "managed.log").read_text()
    assert status["tests-gpu"].startswith("failed (exit"), "a failing step is recorded and the run goes on"
    assert status["summary"] == "ok"
    assert "done, with failures: tests-gpu" in run.stdout

    launch = json.loads((results / "launch_loop.json").read_text())
    assert launch["local"].startswith("skipped")
    for kernel in ("empty", "params", "memset", "upload", "step"):
        assert launch["kernels"][kernel]["remote"]["total_us_per_launch"] > 0
    small = json.loads((results / "small_calls.json").read_text())
    assert all(small["p50_us"][call]["remote_c"] > 0 and "local" not in small["p50_us"][call]
               for call in ("dtoh4", "sync"))
    copies = json.loads((results / "copies.json").read_text())
    assert "local" not in copies["gb_per_s"] and all(rate > 0 for rate in copies["gb_per_s"]["rcuda"]["htod"].values())
    managed = json.loads((results / "managed.json").read_text())
    assert "local" not in managed["runs"] and managed["runs"]["rcuda_on_touch"]["part_us"] > 0
    graphs = json.loads((results / "graph_step.json").read_text())
    assert graphs["local"].startswith("skipped")
    assert graphs["remote"]["checks"]["one_step_same"] and graphs["remote"]["checks"]["every_launch_ran"]
    assert all(v["median_step_us"] > 0 for v in graphs["remote"]["variants"].values())
    summary = json.loads((results / "summary.json").read_text())
    assert summary["dry_run"] is True and summary["steps"]["tests-gpu"]["status"].startswith("failed")
    assert "launch_loop.json" in summary["files"] and "graph_step.json" in summary["files"]
    assert "DRY RUN" in (out / "summary.md").read_text() and "rcuda at abc1234-dirty." in (out / "summary.md").read_text()
    assert summary["commit"] == "abc1234-dirty"
    assert (out / "summary.md").read_text() == (results / "summary.md").read_text()


def test_every_gpu_test_finds_its_fixtures():
    """Without a GPU the GPU tests skip in their first fixture, before pytest
    looks up the rest: a fixture a GPU test names but cannot see (defined
    in another test file) shows only on a GPU.  --setup-plan resolves every
    fixture without running any."""
    selection = re.search(r'^GPU_TESTS="([^"]+)"', RUN_SH.read_text(), re.M)[1]
    plan = subprocess.run([sys.executable, "-m", "pytest", "--setup-plan", "-q", "-p", "no:cacheprovider",
                           "-k", selection, "tests"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert plan.returncode == 0 and "fixture '" not in plan.stdout, plan.stdout[-3000:] + plan.stderr[-3000:]
