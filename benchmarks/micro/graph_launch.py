"""A step of tiny kernels run as a CUDA graph against the same launches
issued one by one, in the same program and run.

`cuda/graph_step.cu` captures a step of LAUNCHES launches of a one-thread
kernel into a stream (cudaStreamBeginCapture ... cudaStreamEndCapture),
instantiates it, and times STEPS steps of each kind, interleaved (each kind
goes first in every other pair):

    graph   cudaGraphLaunch + cudaStreamSynchronize: one `graph_launch`
            message, which the server runs as the recorded requests in the
            stream (client/graphs.py, server/graphs.py)
    plain   LAUNCHES <<<>>> launches + cudaStreamSynchronize: the launches
            are recorded in C (native/launch_fast_path.c) and shipped in
            `launches` batches, the last one in the same write as the
            synchronisation

Both end when cudaStreamSynchronize returns, so the figures are end to end:
the client's issuing, the messages, the server running every kernel and
the reply.  The kernel folds its launch's index into a state the program
checks: one step of each kind gives the host's value, and after the timed
steps the state is the fold of every step (every launch ran, in order).

Against a sim server every kernel is a Python plugin call on the server, the
same work for both kinds: what a graph can save there is the client's
issuing and the messages, not the kernels.  benchmarks/gpu/run.sh measures
the same program against a cupy server and on the local GPU.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import common
from ..common import Context, goal

NAME = "graph_launch"
TITLE = "A step of tiny kernels as a CUDA graph against one-by-one launches"

KERNELS = common.CUDA_DIR / "graph_kernels.py"
#: The issue's goal: the graph step at least this many times faster, end to end over loopback.
GOAL_SPEEDUP = 5.0
LABELS = {"graph": "cudaGraphLaunch + cudaStreamSynchronize",
          "plain": "100 <<<>>> launches + cudaStreamSynchronize"}


def parameters(quick: bool) -> dict:
    return {"launches": 100, "steps": 20 if quick else 500, "warmup": 3 if quick else 10, "runs": 1 if quick else 3}


def run_program(binary: Path, params: dict, env: dict | None) -> dict:
    """One run of graph_step (env None: without rcuda, on a local GPU)."""
    return common.run_program([binary, params["launches"], params["steps"], params["warmup"]], env=env)


def summarise(runs: list[dict], launches: int) -> dict:
    """Every step of every run pooled: per kind, the step's and the issuing's
    times (µs) and launches per second at the median step; per run, the
    medians and their ratio; the graph's set-up; the checks."""
    variants = {}
    for kind in ("graph", "plain"):
        steps_us = np.concatenate([np.asarray(r[f"{kind}_s"]) for r in runs]) * 1e6
        issue_us = np.concatenate([np.asarray(r[f"{kind}_issue_s"]) for r in runs]) * 1e6
        step = common.summarise(steps_us)
        variants[kind] = {"label": LABELS[kind].replace("100", str(launches)), "step_us": step,
                          "issue_us": {k: v for k, v in common.summarise(issue_us).items() if k != "cdf_us"},
                          "median_step_us": step["p50"], "p90_step_us": step["p90"],
                          "launches_per_s": launches / step["p50"] * 1e6}
    graph, plain = variants["graph"], variants["plain"]
    per_run = [{"graph_median_us": r["graph_median_s"] * 1e6, "plain_median_us": r["plain_median_s"] * 1e6,
                "plain_over_graph": r["plain_median_s"] / r["graph_median_s"]} for r in runs]
    return {
        "variants": variants,
        "per_run": per_run,
        "graph_setup_us": {what: float(np.median([r[f"{what}_s"] for r in runs])) * 1e6
                           for what in ("capture", "instantiate", "upload")},
        "nodes": runs[0]["nodes"],
        "checks": {"one_step_same": all(r["same"] for r in runs), "every_launch_ran": all(r["all_ran"] for r in runs),
                   "state_after_one_step": {"host": runs[0]["expected_state"], "graph": runs[0]["graph_state"],
                                            "plain": runs[0]["plain_state"]}},
        "ratios": {"plain_over_graph_median_step": plain["median_step_us"] / graph["median_step_us"],
                   "plain_over_graph_p90_step": plain["p90_step_us"] / graph["p90_step_us"],
                   "plain_over_graph_issue": plain["issue_us"]["p50"] / graph["issue_us"]["p50"]},
    }


def run(ctx: Context) -> dict:
    params = parameters(ctx.quick)
    ctx.progress("building cuda/graph_step.cu")
    binary = common.compile_cuda("graph_step.cu")
    runs = []
    with common.sim_server(kernels=KERNELS) as server:
        for i in range(params["runs"]):
            ctx.progress(f"run {i + 1}/{params['runs']}: {params['steps']} steps of {params['launches']} launches "
                         f"of each kind, interleaved")
            server.wait_idle()
            runs.append(run_program(binary, params, common.rcuda_environment(server.address)))
    result = summarise(runs, params["launches"])
    speedup = result["ratios"]["plain_over_graph_median_step"]
    return {"parameters": {**params, "statistic": "median and p90 of every step of every run (steps interleaved)"},
            "server": "one sim server on loopback (kernels: Python plugins, cuda/graph_kernels.py)",
            **result,
            "goals": {f"step of {params['launches']} launches: one by one / as a graph (median, end to end)":
                      goal(speedup, ">=", GOAL_SPEEDUP)}}


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_graph_launch.png"
    v = result["variants"]
    n = result["parameters"]["launches"]
    panels = [
        (f"time per step of {n} launches, until cudaStreamSynchronize returned (µs)", "µs",
         [(f"{x['label']}: median", x["median_step_us"]) for x in v.values()]
         + [(f"{x['label']}: p90", x["p90_step_us"]) for x in v.values()], False),
        ("issuing a step: until the last call returned (µs, median)", "µs",
         [(f"{x['label'].split(' + ')[0]}", x["issue_us"]["p50"]) for x in v.values()], False),
        ("launches per second at the median step", "launches/s",
         [(x["label"], x["launches_per_s"]) for x in v.values()], False),
    ]
    ratio = result["ratios"]["plain_over_graph_median_step"]
    where = "a sim server" if "sim" in result.get("server", "sim") else "a GPU server"
    charts.bar_panels(result, path, panels, f"A step of {n} tiny kernels via rcuda ({where}, loopback), median step "
                                            f"one by one / as a graph: {ratio:.2f}x (goal >= {GOAL_SPEEDUP:g}x)")
    return [path]


def headline(result: dict) -> list[str]:
    v, r = result["variants"], result["ratios"]
    lines = [f"{name}: step median {x['median_step_us']:,.0f} us, p90 {x['p90_step_us']:,.0f} us, "
             f"{x['launches_per_s']:,.0f} launches/s, issuing {x['issue_us']['p50']:,.1f} us"
             for name, x in v.items()]
    return lines + [f"one by one / graph: {r['plain_over_graph_median_step']:.2f}x median step, "
                    f"{r['plain_over_graph_p90_step']:.2f}x p90 (goal {GOAL_SPEEDUP:g}x); checks {result['checks']}"]
