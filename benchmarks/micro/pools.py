"""Stream-ordered allocation: cudaMallocAsync/cudaFreeAsync pairs per
second against cudaMalloc/cudaFree pairs, in the same program and run.

`cuda/pools.cu` times, in interleaved rounds, PAIRS of each of:

    malloc       cudaMalloc + cudaFree: two round trips to the server
    async        cudaMallocAsync + cudaFreeAsync on one stream: the pool
                 (client/memory/pools.py) hands the freed block back at once,
                 no message leaves the program
    async_sync   the same with a cudaStreamSynchronize after every pair and
                 the release threshold at its maximum: a training loop's step;
                 the synchronisation is one round trip, the pool keeps its block

On a local GPU cudaMallocAsync from a warm pool costs about a microsecond
and cudaMalloc tens to hundreds; the comparison with a local GPU needs a GPU
machine (benchmarks/gpu).
"""
from __future__ import annotations

from pathlib import Path

from .. import common
from ..common import Context, goal

NAME = "pools"
TITLE = "Stream-ordered allocation against cudaMalloc"

BYTES = 1 << 20
#: cudaMallocAsync/cudaFreeAsync pairs should cost no round trip: well over
#: ten times the rate of cudaMalloc/cudaFree pairs.
GOAL_SPEEDUP = 10.0

LABELS = {
    "malloc": "cudaMalloc + cudaFree",
    "async": "cudaMallocAsync + cudaFreeAsync",
    "async_sync": "cudaMallocAsync + cudaFreeAsync + cudaStreamSynchronize",
}


def parameters(quick: bool) -> dict:
    return {"pairs": 200 if quick else 5000, "repeats": 1 if quick else 5, "bytes": BYTES}


def run(ctx: Context) -> dict:
    params = parameters(ctx.quick)
    ctx.progress("building cuda/pools.cu")
    binary = common.compile_cuda("pools.cu")
    with common.sim_server() as server:
        ctx.progress(f"{params['repeats']} rounds of {params['pairs']} pairs of each kind")
        server.wait_idle()
        result = common.run_program([binary, params["pairs"], params["repeats"], params["bytes"]],
                                    env=common.rcuda_environment(server.address))
    pairs = params["pairs"]
    variants = {name: {"label": label, "pairs_per_s": pairs / min(result[f"{name}_s"]),
                       "us_per_pair": min(result[f"{name}_s"]) / pairs * 1e6, "runs_s": result[f"{name}_s"]}
                for name, label in LABELS.items()}
    speedup = variants["async"]["pairs_per_s"] / variants["malloc"]["pairs_per_s"]
    return {"parameters": {**params, "statistic": "best of repeats"}, "variants": variants,
            "ratios": {"async_over_malloc": round(speedup, 1),
                       "async_sync_over_malloc": round(variants["async_sync"]["pairs_per_s"]
                                                       / variants["malloc"]["pairs_per_s"], 1)},
            "goals": {"cudaMallocAsync pairs per cudaMalloc pair": goal(speedup, ">=", GOAL_SPEEDUP)}}


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_pools.png"
    bars = [(v["label"], v["pairs_per_s"]) for v in result["variants"].values()]
    charts.bars(result, path, bars, "allocate + free pairs per second",
               f"Allocation pairs of {result['parameters']['bytes'] >> 20} MiB from one program thread via rcuda",
               log=True)
    return [path]


def headline(result: dict) -> list[str]:
    return [f"{name}: {v['pairs_per_s']:,.0f} pairs/s ({v['us_per_pair']:.1f} us/pair)"
            for name, v in result["variants"].items()] + [f"ratios: {result['ratios']}"]
