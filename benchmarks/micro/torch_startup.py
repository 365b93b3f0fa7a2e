"""What rcuda adds to a PyTorch program's start: `import torch` and its
first CUDA call (torch.cuda.device_count), without rcuda (this machine's
CUDA: with no GPU, the call answers 0 at once) and through `rcuda run`
against a sim server on loopback, interleaved.

libtorch_cuda registers hundreds of fatbinaries and tens of thousands of
kernels when it loads; rcuda keeps them in C until the first call, then
hands them to the client, which reads an image only when one of its
kernels is first launched.  The registration counts come from RCUDA_STATS.

Needs a Python with both torch and rcuda: RCUDA_TORCH_PYTHON, this one, or
the checkout's .venv-torch (.ci/run makes it).
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import common
from ..common import Context, goal

NAME = "torch_startup"
TITLE = "PyTorch's start: import torch and its first CUDA call"

#: What rcuda may add to the first call (the client's start and the session
#: included) and to the process's memory (images are not copied at start).
GOAL_FIRST_CALL_S = 1.0
GOAL_ADDED_MIB = 150

SCRIPT = ("import json, resource, time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); "
          "n = torch.cuda.device_count(); t2 = time.perf_counter(); "
          "print('RESULT ' + json.dumps({'import_s': t1 - t0, 'first_call_s': t2 - t1, 'devices': n, "
          "'max_rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))")
CHECKOUT = Path(__file__).resolve().parents[2]


#: Where the torch Python's processes start: outside a checkout, whose
#: rcuda/ folder (without the client) would shadow the installed package.
OUTSIDE = tempfile.gettempdir()


@functools.cache
def torch_python() -> str | None:
    """A Python that has torch and rcuda, or None (tests/test_pytorch.py
    runs PyTorch in the same one)."""
    candidates = [os.environ.get("RCUDA_TORCH_PYTHON"), str(CHECKOUT / ".venv-torch" / "bin" / "python"), sys.executable]
    for candidate in filter(None, candidates):
        if Path(candidate).exists() and subprocess.run(
                [candidate, "-c", "import torch, rcuda.client.entrypoints"], capture_output=True, cwd=OUTSIDE,
                timeout=300).returncode == 0:
            return candidate
    return None


def unavailable() -> str | None:
    if torch_python() is None:
        return ("it needs a Python with both torch and rcuda: set RCUDA_TORCH_PYTHON to one, or make the "
                "checkout's .venv-torch (python3 -m venv .venv-torch && .venv-torch/bin/pip install . torch)")
    return None


def parameters(quick: bool) -> dict:
    return {"repeats": 2 if quick else 7}


def _run(cmd: list, env: dict) -> tuple[dict, str]:
    started = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=OUTSIDE)
    total = time.perf_counter() - started
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise common.BenchmarkError(f"{' '.join(cmd)} failed (exit {result.returncode}): {result.stderr[-3000:]}")
    return {**json.loads(lines[-1][len("RESULT "):]), "process_s": total}, result.stderr


def run(ctx: Context) -> dict:
    params = parameters(ctx.quick)
    python = torch_python()
    native_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "RCUDA_SERVERS")}
    samples: dict[str, list[dict]] = {"native": [], "rcuda": []}
    with common.sim_server(devices=1) as server:
        rcuda = [python, "-m", "rcuda.cli", "run", "--servers", server.address, "--", python, "-c", SCRIPT]
        for r in range(params["repeats"]):
            ctx.progress(f"round {r + 1}/{params['repeats']}: without and with rcuda")
            samples["native"].append(_run([python, "-c", SCRIPT], native_env)[0])
            server.wait_idle()
            samples["rcuda"].append(_run(rcuda, native_env)[0])
        server.wait_idle()
        _, stats = _run(rcuda, dict(native_env, RCUDA_STATS="1"))
    registered = {name: int(count) for count, name in
                  re.findall(r"^\s*[\d.]+\s+[\d.]+\s+(\d+)\s+[\d.]+\s+[\d.]+\s+(__cudaRegister\w+)\s*$", stats, re.M)}
    variants = {name: {key: round(float(np.median([run[key] for run in runs])), 3)
                       for key in ("import_s", "first_call_s", "process_s", "max_rss_mib")}
                for name, runs in samples.items()}
    variants["rcuda"]["devices"] = samples["rcuda"][0]["devices"]
    added = {"first_call_s": round(variants["rcuda"]["first_call_s"] - variants["native"]["first_call_s"], 3),
             "max_rss_mib": round(variants["rcuda"]["max_rss_mib"] - variants["native"]["max_rss_mib"], 1)}
    return {"parameters": {**params, "statistic": "median", "torch_python": python}, "variants": variants,
            "registered": registered, "added": added,
            "goals": {"seconds rcuda adds to the first CUDA call": goal(added["first_call_s"], "<=", GOAL_FIRST_CALL_S),
                      "MiB rcuda adds to the process": goal(max(added["max_rss_mib"], 0.1), "<=", GOAL_ADDED_MIB)}}


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_torch_startup.png"
    v = result["variants"]
    bars = [(f"{name}: import torch", v[name]["import_s"] * 1e3) for name in v] + \
           [(f"{name}: first CUDA call", v[name]["first_call_s"] * 1e3) for name in v]
    charts.bars(result, path, bars, "milliseconds (median)", "PyTorch's start, without and with rcuda (sim server)")
    return [path]


def headline(result: dict) -> list[str]:
    v, added = result["variants"], result["added"]
    return [f"first CUDA call: {v['native']['first_call_s'] * 1e3:.0f} ms without rcuda, "
            f"{v['rcuda']['first_call_s'] * 1e3:.0f} ms with (+{added['first_call_s'] * 1e3:.0f} ms); "
            f"memory +{added['max_rss_mib']:.0f} MiB",
            f"registered at start: {result['registered']}"]
