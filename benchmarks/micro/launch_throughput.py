"""Asynchronous tiny-launch throughput, from one host thread.

`rcuda_empty` / `rcuda_params`: an unmodified CUDA program (cuda/launch.cu)
launching a kernel that does nothing, LAUNCHES times in a loop, then
cudaDeviceSynchronize.  Two rates: the loop alone (what the program waits
for, the figure the goal is about) and loop plus synchronize (until the sim
server has taken every launch).  `params` passes four arguments, to show
what packing them costs; `checked` calls cudaGetLastError after every launch,
as careful programs do (answered in C, native/last_error.c); `pinned` is
`params` while 64 page-locked allocations exist, none passed to the kernel
(C then looks at each launch's parameters for their addresses).

The other calls a launch loop makes, as the same program's loop of LAUNCHES
calls: `rcuda_memset` (cudaMemsetAsync of 4 KiB), `rcuda_upload`
(cudaMemcpyAsync of 4 KiB from pageable memory) and `rcuda_step` (a memset,
an upload and a launch in turn), recorded in C with the launches
(native/async_fast_path.c); `rcuda_events` hands work between two streams (a
launch, cudaEventRecord, cudaStreamWaitEvent, a launch in the other stream),
the event calls recorded in C too.

In the same run, for scale:

    pyzmq_send     bare pyzmq: one thread sending launch messages of the
                   same size to a minimal msgpack peer

On a local GPU a tiny launch costs a few microseconds; the remote-vs-local
loop comparison needs a GPU machine (benchmarks/gpu).
"""
from __future__ import annotations

import time
from pathlib import Path

from .. import common
from ..common import Context, goal

NAME = "launch"
TITLE = "Asynchronous tiny-launch throughput"

GOAL_PER_S = 150_000
ASYNC_CALLS = ("memset", "upload", "step", "events")  # launch.cu's loops of other asynchronous calls


def parameters(quick: bool) -> dict:
    return {"launches": 2000 if quick else 20000, "repeats": 1 if quick else 3}


def launch_message() -> tuple[dict, bytes]:
    """The header and parameter frame a 4-argument launch sends."""
    return {"op": "launch", "fn": 2, "grid": [1, 1, 1], "block": [32, 1, 1], "shmem": 0, "stream": 0,
            "cooperative": 0}, bytes(24)


def time_rcuda(binary: Path, server: common.Server, launches: int, repeats: int, kernel: str) -> dict:
    server.wait_idle()
    result = common.run_program([binary, launches, repeats, kernel], env=common.rcuda_environment(server.address))
    loops = [loop for loop, _ in result["loop_s"]]
    totals = [total for _, total in result["loop_s"]]
    return {"loop_per_s": launches / min(loops), "total_per_s": launches / min(totals),
            "loop_us_per_launch": min(loops) / launches * 1e6, "total_us_per_launch": min(totals) / launches * 1e6,
            "runs_loop_s": loops, "runs_total_s": totals}


def time_pyzmq(endpoint: str, launches: int, repeats: int) -> dict:
    import zmq

    from rcuda import protocol

    header, params = launch_message()
    frame = protocol.pack({**header, "seq": 1})
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    loops, totals = [], []
    try:
        sock.connect(endpoint)
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(launches):
                sock.send(frame, zmq.SNDMORE)
                sock.send(params)
            looped = time.perf_counter()
            sock.send(protocol.pack({"op": "mem_info", "seq": 2}))
            sock.recv()
            loops.append(looped - started)
            totals.append(time.perf_counter() - started)
    finally:
        sock.close(linger=0)
    return {"loop_per_s": launches / min(loops), "total_per_s": launches / min(totals),
            "loop_us_per_launch": min(loops) / launches * 1e6, "total_us_per_launch": min(totals) / launches * 1e6}


LABELS = {
    "rcuda_empty": "CUDA program via rcuda, empty kernel",
    "rcuda_params": "CUDA program via rcuda, 4-parameter kernel",
    "rcuda_checked": "CUDA program via rcuda, empty kernel + cudaGetLastError",
    "rcuda_pinned": "CUDA program via rcuda, 4-parameter kernel, 64 page-locked blocks",
    "rcuda_memset": "CUDA program via rcuda, cudaMemsetAsync 4 KiB",
    "rcuda_upload": "CUDA program via rcuda, cudaMemcpyAsync 4 KiB upload",
    "rcuda_step": "CUDA program via rcuda, memset + upload + launch",
    "rcuda_events": "CUDA program via rcuda, launch + cudaEventRecord + cudaStreamWaitEvent + launch, two streams",
    "pyzmq_send": "bare pyzmq send of the same messages",
}


def run(ctx: Context) -> dict:
    params = parameters(ctx.quick)
    n, repeats = params["launches"], params["repeats"]
    ctx.progress("building cuda/launch.cu")
    binary = common.compile_cuda("launch.cu")
    results: dict[str, dict] = {}
    with common.sim_server() as server, common.peer("zmq-msgpack", "tcp://127.0.0.1:0") as msgpack_peer:
        measures = {
            "rcuda_empty": lambda: time_rcuda(binary, server, n, repeats, "empty"),
            "rcuda_params": lambda: time_rcuda(binary, server, n, repeats, "params"),
            "rcuda_checked": lambda: time_rcuda(binary, server, n, repeats, "checked"),
            "rcuda_pinned": lambda: time_rcuda(binary, server, n, repeats, "pinned"),
            **{f"rcuda_{kind}": (lambda kind=kind: time_rcuda(binary, server, n, repeats, kind))
               for kind in ASYNC_CALLS},
            "pyzmq_send": lambda: time_pyzmq(msgpack_peer.address, n, repeats),
        }
        for name, measure in measures.items():
            ctx.progress(f"{repeats} x {n} launches: {LABELS[name]}")
            results[name] = {"label": LABELS[name], **measure()}
    empty = results["rcuda_empty"]
    per_launch = {
        "empty_launch_us": empty["loop_us_per_launch"],
        "four_parameters_us": results["rcuda_params"]["loop_us_per_launch"] - empty["loop_us_per_launch"],
        "cudaGetLastError_us": results["rcuda_checked"]["loop_us_per_launch"] - empty["loop_us_per_launch"],
        "page_locked_blocks_us": results["rcuda_pinned"]["loop_us_per_launch"]
        - results["rcuda_params"]["loop_us_per_launch"],
        "bare_zeromq_send_us": results["pyzmq_send"]["loop_us_per_launch"],
    }
    return {"parameters": {**params, "statistic": "best of repeats"}, "variants": results,
            "loop_us_breakdown": {k: round(v, 2) for k, v in per_launch.items()},
            "goals": {"launches/s from the program's view (empty kernel)":
                      goal(empty["loop_per_s"], ">=", GOAL_PER_S)}}


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_launch.png"
    bars = []
    for name, v in result["variants"].items():
        label = v["label"].replace("CUDA program via rcuda, ", "")
        bars.append((f"{label}: loop", v["loop_per_s"]))
        bars.append((f"{label}: until synchronised", v["total_per_s"]))
    charts.bars(result, path, bars, "calls per second", "Tiny asynchronous calls from one program thread via rcuda",
               goal=(f"launches: goal {GOAL_PER_S:,}/s", GOAL_PER_S), log=True)
    return [path]


def headline(result: dict) -> list[str]:
    v = result["variants"]
    return [f"{name}: {x['loop_per_s']:,.0f}/s loop ({x['loop_us_per_launch']:.1f} us/launch), "
            f"{x['total_per_s']:,.0f}/s until synchronised" for name, x in v.items()] + \
           [f"per-launch breakdown (us): {result['loop_us_breakdown']}"]
