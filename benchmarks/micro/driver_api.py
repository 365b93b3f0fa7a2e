"""The driver API beside the runtime, in one program and one run
(cuda/driver_api.cu, against a sim server):

    launch   empty-kernel launches per second, until synchronised: <<<>>>
             against cuLaunchKernel (both recorded in C after the first,
             native/launch_fast_path.c)
    sync     a synchronous round trip: cudaMemGetInfo against cuMemGetInfo
             (both made in C on the lane, native/sync_fast_path.c)
    local    a call answered in the process: cudaDriverGetVersion against
             cuDriverGetVersion (what entering each API's path costs)

Times are the best of the repeats.
"""
from __future__ import annotations

from pathlib import Path

from rcuda.binaries import dropin_dir

from .. import common
from ..common import Context, goal

NAME = "driver_api"
TITLE = "Driver API next to the runtime"


def parameters(quick: bool) -> dict:
    return {"launches": 2000 if quick else 20000, "calls": 500 if quick else 5000, "repeats": 1 if quick else 3}


def _best(seconds: list, count: int) -> dict:
    """Per second and microseconds per call of the best repeat."""
    best = min(seconds)
    return {"per_s": count / best, "us_per_call": best / count * 1e6}


def run(ctx: Context) -> dict:
    params = parameters(ctx.quick)
    ctx.progress("building cuda/driver_api.cu")
    binary = common.compile_cuda("driver_api.cu", f"-L{dropin_dir()}", "-l:libcuda.so.1")
    with common.sim_server() as server:
        server.wait_idle()
        ctx.progress(f"{params['repeats']} x {params['launches']} launches and {params['calls']} calls per API")
        raw = common.run_program([binary, params["launches"], params["calls"], params["repeats"]],
                                 env=common.rcuda_environment(server.address,
                                                              {"LD_LIBRARY_PATH": str(dropin_dir())}))
    results = {}
    for measure, count in (("launch", raw["launches"]), ("sync", raw["calls"]), ("local", raw["calls"])):
        results[measure] = {api: _best(raw[f"{api}_{measure}_s"], count) for api in ("runtime", "driver")}
    launch, sync, local = results["launch"], results["sync"], results["local"]
    # The driver's calls take the runtime's C paths: no worse than the
    # runtime's, within a tenth (one run's noise on a shared machine).
    goals = {"cuLaunchKernel / <<<>>> launches per second": goal(launch["driver"]["per_s"] / launch["runtime"]["per_s"],
                                                                 ">=", 0.9),
             "cuMemGetInfo / cudaMemGetInfo time": goal(sync["driver"]["us_per_call"] / sync["runtime"]["us_per_call"],
                                                        "<=", 1.1),
             "cuDriverGetVersion / cudaDriverGetVersion time": goal(local["driver"]["us_per_call"]
                                                                    / local["runtime"]["us_per_call"], "<=", 2.0)}
    return {"parameters": {**params, "statistic": "best of repeats"}, "results": results, "raw": raw, "goals": goals}


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_driver_api.png"
    bars = [(f"{measure}: {api}", figures["per_s"]) for measure, by_api in result["results"].items()
            for api, figures in by_api.items()]
    charts.bars(result, path, bars, "calls per second", "Driver API next to the runtime (sim server)", log=True)
    return [path]


def headline(result: dict) -> list[str]:
    lines = []
    for measure, by_api in result["results"].items():
        said = [f"{api} {f['per_s']:,.0f}/s ({f['us_per_call']:.1f} us)" for api, f in by_api.items()]
        lines.append(f"{measure}: " + ", ".join(said))
    return lines
