"""Pitched copies: cudaMemcpy2D of a padded float image against a flat
cudaMemcpy of the same bytes, both ways, in the same program and run.

`cuda/pitched.cu` copies a WIDTH x HEIGHT float image between a host buffer
whose rows are padded and a cudaMallocPitch allocation, and the same number
of bytes between a flat host buffer and a flat allocation, in interleaved
rounds.  A 2-D copy travels as one box whose rows are packed by the sender
and unpacked by the receiver (client/runtime/boxes.py), so it should move
at about the flat copy's rate: the padding never crosses the network.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from .. import common
from ..common import Context, goal

NAME = "pitched"
TITLE = "Pitched 2-D copies against flat copies"

#: A 2-D copy should reach this share of the flat copy's rate, each way.
GOAL_SHARE = 0.9

LABELS = {
    "htod_2d": "cudaMemcpy2D host→device (pitched both sides)",
    "htod_flat": "cudaMemcpy host→device (same bytes, flat)",
    "dtoh_2d": "cudaMemcpy2D device→host (pitched both sides)",
    "dtoh_flat": "cudaMemcpy device→host (same bytes, flat)",
}


def parameters(quick: bool) -> dict:
    # quick: 16 MiB, the least a copy takes in parts (client/runtime/boxes.py, PIPELINE_FROM)
    return {"width": 2048 if quick else 4096, "height": 2048 if quick else 4096, "repeats": 3 if quick else 15}


def run(ctx: Context) -> dict:
    params = parameters(ctx.quick)
    ctx.progress("building cuda/pitched.cu")
    binary = common.compile_cuda("pitched.cu")
    with common.sim_server() as server:
        ctx.progress(f"{params['repeats']} rounds of a {params['width']} x {params['height']} float image each way")
        server.wait_idle()
        result = common.run_program([binary, params["width"], params["height"], params["repeats"]],
                                    env=common.rcuda_environment(server.address))
    size = result["bytes"]
    variants = {}
    for name, label in LABELS.items():
        runs = result[f"{name}_s"]
        median = statistics.median(runs)
        variants[name] = {"label": label, "gb_per_s": size / median / 1e9, "median_s": median, "runs_s": runs}
    shares = {direction: variants[f"{direction}_2d"]["gb_per_s"] / variants[f"{direction}_flat"]["gb_per_s"]
              for direction in ("htod", "dtoh")}
    return {"parameters": {**params, "bytes": size, "device_pitch": result["device_pitch"],
                           "host_pitch": result["host_pitch"], "statistic": "median of rounds"},
            "variants": variants, "ratios": {f"{d}_2d_over_flat": round(s, 3) for d, s in shares.items()},
            "goals": {f"cudaMemcpy2D {d} share of a flat copy": goal(round(s, 3), ">=", GOAL_SHARE)
                      for d, s in shares.items()}}


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_pitched.png"
    params = result["parameters"]
    bars = [(v["label"], v["gb_per_s"]) for v in result["variants"].values()]
    charts.bars(result, path, bars, "GB/s",
                f"A {params['width']} x {params['height']} float image ({params['bytes'] >> 20} MiB) via rcuda")
    return [path]


def headline(result: dict) -> list[str]:
    return [f"{name}: {v['gb_per_s']:.2f} GB/s" for name, v in result["variants"].items()] + \
        [f"ratios: {result['ratios']}"]
