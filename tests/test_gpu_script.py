"""benchmarks/gpu/run.sh, the one-go script for a GPU machine: valid bash
(and clean under shellcheck where it is installed), and its dry-run mode,
which runs the steps that need no GPU, records the GPU ones as skipped with
the reason, records a failing step and carries on, and writes the summary."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import requires_nvcc

REPO = Path(__file__).resolve().parent.parent
RUN_SH = REPO / "benchmarks" / "gpu" / "run.sh"


def test_run_sh_is_valid_bash():
    syntax = subprocess.run(["bash", "-n", str(RUN_SH)], capture_output=True, text=True, timeout=30)
    assert syntax.returncode == 0, syntax.stderr
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck): only bash -n was checked")
    lint = subprocess.run(["shellcheck", str(RUN_SH)], capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout


@requires_nvcc
def test_run_sh_dry_run_records_every_step(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), RCUDA_GPU_DRY_RUN="1", RCUDA_GPU_PYTHON=sys.executable,
               RCUDA_GPU_STEPS="machine venv cupy tests-gpu calibrate launch graphs tests",
               RCUDA_GPU_PYTEST_ARGS="tests/no_such_test_file.py")
    run = subprocess.run(["bash", str(RUN_SH)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = (out / "steps.tsv").read_text().splitlines()
    status = {name: state for name, state, _ in (line.split("\t") for line in lines[1:])}
    assert list(status) == ["machine", "venv", "cupy", "tests-gpu", "demo", "calibrate", "launch", "graphs", "paper",
                            "micro", "tests", "summary"]
    assert status["machine"] == "ok" and (out / "machine" / "uname.txt").is_file()
    assert status["venv"] == f"skipped: using RCUDA_GPU_PYTHON={sys.executable}"
    assert status["cupy"] == status["tests-gpu"] == "skipped: dry run: no GPU"
    assert status["calibrate"].startswith("skipped: dry run")
    assert status["demo"] == status["paper"] == "skipped: not selected (RCUDA_GPU_STEPS)"
    assert status["launch"] == "ok", (out / "logs" / "launch.log").read_text()
    assert status["graphs"] == "ok", (out / "logs" / "graphs.log").read_text()
    assert status["tests"].startswith("failed (exit"), "a failing step is recorded and the run goes on"
    assert status["summary"] == "ok"
    assert "done, with failures: tests" in run.stdout

    launch = json.loads((out / "launch_loop.json").read_text())
    assert launch["local"].startswith("skipped")
    for kernel in ("empty", "params", "memset", "upload", "step"):
        assert launch["kernels"][kernel]["remote"]["total_us_per_launch"] > 0
    graphs = json.loads((out / "graph_step.json").read_text())
    assert graphs["local"].startswith("skipped")
    assert graphs["remote"]["checks"]["one_step_same"] and graphs["remote"]["checks"]["every_launch_ran"]
    assert all(v["median_step_us"] > 0 for v in graphs["remote"]["variants"].values())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dry_run"] is True and summary["steps"]["tests"]["status"].startswith("failed")
    assert "launch_loop.json" in summary["files"] and "graph_step.json" in summary["files"]
    assert "DRY RUN" in (out / "summary.md").read_text()
