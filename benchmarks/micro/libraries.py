"""cuBLAS through rcuda against numpy doing the same GEMMs on the server's
machine, in the same run.

`cuda/cublas_bench.cu` links NVIDIA's libcublas.so.13 (the nvidia-cublas
wheel's headers and library) and runs with rcuda's drop-in in its place, so
every cuBLAS call goes to a sim server, which computes it with numpy
(server/backends/sim_cublas.py).  Per round it times:

    small    N SGEMMs of 32 x 32 and of 128 x 128 issued back to back, then
             one cudaDeviceSynchronize: what an asynchronous library call
             costs (no round trip each; the sim computes them one by one)
    dot      N cublasSdot in host pointer mode: each waits for its result, a
             round trip; beside N cudaMemGetInfo, a bare round trip
    large    a few SGEMMs of 1024 x 1024 and 2048 x 2048: GFLOP/s

Beside it, in interleaved rounds, a helper process on the same machine (the
sim server's) times numpy float32 doing the same: `np.matmul` of the same
column-major matrices into a preallocated C, `np.dot` of the same vectors.
The sim's session workers run one BLAS thread each (server/daemon.py:
`OPENBLAS_NUM_THREADS` defaults to 1 there), so numpy is timed with the
same setting; and, to see what the machine's cores give, a second sim
server started with the BLAS threads at the number of CPUs runs the same
program beside numpy with all of them.  (numpy fixes its BLAS threads when
it loads, hence a helper process per setting.)  Figures are the best round
(the fastest of the rounds, as timeit's minimum), with per-round ratios.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from rcuda.python_command import python_module_command

from .. import common
from ..common import Context, goal

NAME = "libraries"
TITLE = "cuBLAS through rcuda against numpy on the server's machine"

#: Microseconds a small SGEMM may add over numpy's own time for it.
GOAL_SMALL_OVERHEAD_US = 30.0
#: A large SGEMM through rcuda reaches this fraction of numpy's GFLOP/s.
GOAL_LARGE_FRACTION = 0.8

CUBLAS_WHEEL = "nvidia-cublas>=13,<14"

VARIANTS = {
    "rcuda": "through rcuda, sim server (its workers' BLAS threads)",
    "numpy": "numpy, the same BLAS threads",
    "rcuda_all_cores": "through rcuda, sim server with BLAS threads = CPUs",
    "numpy_all_cores": "numpy, BLAS threads = CPUs",
}


def parameters(quick: bool) -> dict:
    if quick:
        return {"rounds": 1, "small_calls": 200, "dot_calls": 200, "dot_length": 1024, "large_calls": 1,
                "small_sizes": [32, 128], "large_sizes": [1024]}
    return {"rounds": 5, "small_calls": 2000, "dot_calls": 2000, "dot_length": 1024, "large_calls": 3,
            "small_sizes": [32, 128], "large_sizes": [1024, 2048]}


def cublas_root() -> Path | None:
    """site-packages/nvidia/cu13 of the nvidia-cublas wheel: cublas_v2.h and
    libcublas.so.13 (None: the wheel is not installed in this Python)."""
    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        root = Path(folder) / "cu13"
        if (root / "include" / "cublas_v2.h").is_file() and list((root / "lib").glob("libcublas.so.*")):
            return root
    return None


def unavailable() -> str | None:
    """Why this benchmark cannot run here (what to install), or None."""
    return None if cublas_root() is not None else _wheel_missing()


def _wheel_missing() -> str:
    return (f"it builds cuda/cublas_bench.cu against NVIDIA's cuBLAS headers and libcublas.so.13, from the "
            f"nvidia-cublas wheel, which is not installed in this Python ({sys.executable}): "
            f"pip install '{CUBLAS_WHEEL}' (or, in a checkout, pip install -e '.[test]')")


def cublas_flags() -> list[str]:
    """nvcc flags to build against the nvidia-cublas wheel (its headers, its
    libcublas.so.13); BenchmarkError saying what to install when it is missing."""
    root = cublas_root()
    if root is None:
        raise common.BenchmarkError(f"the libraries benchmark cannot run: {_wheel_missing()}")
    # The wheel ships libcublas.so.13 only (no libcublas.so): -l:FILE names it.
    library = sorted((root / "lib").glob("libcublas.so.*"))[0]
    return [f"-I{root / 'include'}", f"-L{root / 'lib'}", f"-l:{library.name}"]


def worker_blas_environment() -> dict:
    """The BLAS thread variables a sim server's workers get (the user's, or 1)."""
    from rcuda.server.daemon import BLAS_THREAD_VARIABLES, worker_environment

    env = worker_environment()
    return {variable: env[variable] for variable in BLAS_THREAD_VARIABLES}


def all_cores_environment() -> dict:
    from rcuda.server.daemon import BLAS_THREAD_VARIABLES

    cpus = str(len(os.sched_getaffinity(0)))
    return {variable: cpus for variable in BLAS_THREAD_VARIABLES}


def program_arguments(params: dict) -> list:
    return [1, params["small_calls"], params["dot_calls"], params["dot_length"], params["large_calls"],
            ",".join(map(str, params["small_sizes"])), ",".join(map(str, params["large_sizes"]))]


# ---------------------------------------------------------------- numpy's side


def numpy_round(small_calls: int, dot_calls: int, dot_length: int, large_calls: int,
                small_sizes: list, large_sizes: list) -> dict:
    """The program's measurements done by numpy float32 in this process: the
    same keys as its RESULT line (one round)."""
    rng = np.random.default_rng(12345)

    def matrices(n):
        a, b = (np.asfortranarray(rng.uniform(-1, 1, (n, n)).astype(np.float32)) for _ in range(2))
        return a, b, np.zeros((n, n), np.float32, order="F")

    def timed(call, count):
        call()  # warm-up, as the program's untimed first call
        started = time.perf_counter()
        for _ in range(count):
            call()
        return time.perf_counter() - started

    result = {}
    for n in small_sizes:
        a, b, c = matrices(n)
        result[f"small_{n}_total_s"] = [timed(lambda: np.matmul(a, b, out=c), small_calls)]
    x, y = (rng.uniform(-1, 1, dot_length).astype(np.float32) for _ in range(2))
    result["dot_s"] = [timed(lambda: float(np.dot(x, y)), dot_calls)]
    for n in large_sizes:
        a, b, c = matrices(n)
        result[f"large_{n}_s"] = [timed(lambda: np.matmul(a, b, out=c), large_calls)]
    return result


def time_numpy(params: dict, blas_env: dict) -> dict:
    """numpy_round in a helper process with these BLAS thread variables."""
    args = {key: params[key] for key in ("small_calls", "dot_calls", "dot_length", "large_calls",
                                         "small_sizes", "large_sizes")}
    return common.run_program([*python_module_command("rcuda.benchmarks.micro.libraries"), json.dumps(args)],
                              env=dict(os.environ, **blas_env))


# ---------------------------------------------------------------- the run


def run(ctx: Context) -> dict:
    from rcuda.binaries import dropin_dir
    from rcuda.libpython import native_library

    params = parameters(ctx.quick)
    flags = cublas_flags()
    ctx.progress("building cuda/cublas_bench.cu against the nvidia-cublas wheel")
    binary = common.compile_cuda("cublas_bench.cu", *flags)
    # rcuda's drop-in libcublas.so.13 (and libcudart) first, as `rcuda run` does.
    library_path = os.pathsep.join(filter(None, [str(dropin_dir()), native_library()[1]]))
    worker_env, cores_env = worker_blas_environment(), all_cores_environment()
    raw: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    with common.sim_server() as server, common.sim_server(server_env=cores_env) as cores_server:
        def through_rcuda(on):
            on.wait_idle()  # the previous program's session started a spare worker
            return common.run_program([binary, *program_arguments(params)],
                                      env=common.rcuda_environment(on.address, {"LD_LIBRARY_PATH": library_path}))

        def numpy_side(env):
            server.wait_idle()
            cores_server.wait_idle()
            return time_numpy(params, env)

        measures = {"rcuda": lambda: through_rcuda(server), "numpy": lambda: numpy_side(worker_env),
                    "rcuda_all_cores": lambda: through_rcuda(cores_server),
                    "numpy_all_cores": lambda: numpy_side(cores_env)}
        for r in range(params["rounds"]):
            for name, measure in measures.items():
                ctx.progress(f"round {r + 1}/{params['rounds']}: {VARIANTS[name]}")
                raw[name].append(measure())
    variants = {name: figures(name, rounds, params) for name, rounds in raw.items()}
    for name in ("rcuda", "numpy"):
        variants[name]["blas_threads"] = int(worker_env["OPENBLAS_NUM_THREADS"])
    for name in ("rcuda_all_cores", "numpy_all_cores"):
        variants[name]["blas_threads"] = int(cores_env["OPENBLAS_NUM_THREADS"])
    ratios = compare(variants, params)
    return {"parameters": {**params, "statistic": "best of rounds; per-round ratios beside"},
            "variants": variants, "ratios": ratios, "goals": goals_of(ratios, params),
            "max_relative_error": max(r["max_relative_error"] for name in ("rcuda", "rcuda_all_cores")
                                      for r in raw[name]),
            "raw": raw}


def figures(name: str, rounds: list[dict], params: dict) -> dict:
    """Per size: microseconds per small call, GFLOP/s of the large ones; the
    dot (and, through rcuda, the bare round trip): best round and every round."""
    def per_call_us(key, calls):
        values = [r[key][0] / calls * 1e6 for r in rounds]
        return {"us_per_call": min(values), "round_us": [round(v, 2) for v in values]}

    small = {}
    for n in params["small_sizes"]:
        small[str(n)] = per_call_us(f"small_{n}_total_s", params["small_calls"])
        if f"small_{n}_issue_s" in rounds[0]:  # the program's loop alone, before it synchronised
            small[str(n)]["issue_us_per_call"] = per_call_us(f"small_{n}_issue_s", params["small_calls"])["us_per_call"]
    large = {}
    for n in params["large_sizes"]:
        rates = [2.0 * n ** 3 * params["large_calls"] / r[f"large_{n}_s"][0] / 1e9 for r in rounds]
        large[str(n)] = {"gflops": max(rates), "ms_per_call": 2.0 * n ** 3 / max(rates) / 1e6,
                         "round_gflops": [round(v, 2) for v in rates]}
    result = {"label": VARIANTS[name], "small": small, "large": large,
              "dot": per_call_us("dot_s", params["dot_calls"])}
    if "meminfo_s" in rounds[0]:
        result["meminfo"] = per_call_us("meminfo_s", params["dot_calls"])
    return result


def compare(v: dict, params: dict) -> dict:
    """rcuda against numpy with the same BLAS threads (and all cores)."""
    def paired(a: list, b: list, op) -> float:
        return round(float(np.median([op(x, y) for x, y in zip(a, b)])), 3)

    rcuda, numpy_ = v["rcuda"], v["numpy"]
    small_overhead, small_ratio = {}, {}
    for n in map(str, params["small_sizes"]):
        ours, theirs = rcuda["small"][n], numpy_["small"][n]
        small_overhead[n] = {"best_rounds": round(ours["us_per_call"] - theirs["us_per_call"], 2),
                             "paired_median": paired(ours["round_us"], theirs["round_us"], lambda x, y: x - y)}
        small_ratio[n] = round(ours["us_per_call"] / theirs["us_per_call"], 2)

    def large_ratio(ours, theirs):
        return {n: {"best_rounds": round(ours["large"][n]["gflops"] / theirs["large"][n]["gflops"], 3),
                    "paired_median": paired(ours["large"][n]["round_gflops"], theirs["large"][n]["round_gflops"],
                                            lambda x, y: x / y)}
                for n in map(str, params["large_sizes"])}

    return {"small_overhead_us": small_overhead, "small_rcuda_over_numpy": small_ratio,
            "large_gflops_over_numpy": large_ratio(rcuda, numpy_),
            "large_gflops_over_numpy_all_cores": large_ratio(v["rcuda_all_cores"], v["numpy_all_cores"]),
            "large_gflops_default_server_over_numpy_all_cores": large_ratio(rcuda, v["numpy_all_cores"]),
            "dot_over_meminfo": round(rcuda["dot"]["us_per_call"] / rcuda["meminfo"]["us_per_call"], 2),
            "dot_minus_numpy_dot_us": round(rcuda["dot"]["us_per_call"] - numpy_["dot"]["us_per_call"], 2)}


def goals_of(ratios: dict, params: dict) -> dict:
    goals = {f"small SGEMM {n}x{n}: us per call through rcuda - numpy's (best rounds)":
             goal(ratios["small_overhead_us"][str(n)]["best_rounds"], "<=", GOAL_SMALL_OVERHEAD_US)
             for n in params["small_sizes"]}
    worst = min(r["best_rounds"] for r in ratios["large_gflops_over_numpy"].values())
    goals["large SGEMM GFLOP/s through rcuda / numpy, same BLAS threads, worst size"] = \
        goal(worst, ">=", GOAL_LARGE_FRACTION)
    worst = min(r["best_rounds"] for r in ratios["large_gflops_over_numpy_all_cores"].values())
    goals["large SGEMM GFLOP/s through rcuda / numpy, BLAS threads = CPUs, worst size"] = \
        goal(worst, ">=", GOAL_LARGE_FRACTION)
    return goals


# ---------------------------------------------------------------- reporting


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_libraries.png"
    v = result["variants"]
    small = []
    for n in map(str, result["parameters"]["small_sizes"]):
        small += [(f"SGEMM {n}x{n}, through rcuda, until synchronised", v["rcuda"]["small"][n]["us_per_call"]),
                  (f"SGEMM {n}x{n}, through rcuda, issuing only", v["rcuda"]["small"][n]["issue_us_per_call"]),
                  (f"SGEMM {n}x{n}, numpy", v["numpy"]["small"][n]["us_per_call"]),
                  (f"SGEMM {n}x{n}, through rcuda, {v['rcuda_all_cores']['blas_threads']}-thread BLAS server",
                   v["rcuda_all_cores"]["small"][n]["us_per_call"])]
    small += [("Sdot (host pointer mode), through rcuda", v["rcuda"]["dot"]["us_per_call"]),
              ("cudaMemGetInfo (a bare round trip)", v["rcuda"]["meminfo"]["us_per_call"]),
              ("np.dot", v["numpy"]["dot"]["us_per_call"])]
    def short(name):
        threads = v[name]["blas_threads"]
        return f"{'through rcuda' if name.startswith('rcuda') else 'numpy'}, {threads} BLAS thread{'s' * (threads > 1)}"

    large = [(f"SGEMM {n}x{n}, {short(name)}", v[name]["large"][n]["gflops"])
             for n in map(str, result["parameters"]["large_sizes"]) for name in v]
    threads = v["rcuda"]["blas_threads"]
    charts.bar_panels(result, path, [
        ("Small calls: µs per call (log scale)", "µs per call", small, True),
        (f"Large SGEMM: GFLOP/s (the sim's workers: {threads} BLAS thread{'s' * (threads > 1)} unless told; "
         f"a second server told {v['rcuda_all_cores']['blas_threads']})",
         "GFLOP/s", large, False)],
        "cuBLAS through rcuda (sim server) against numpy on the same machine, same run")
    return [path]


def headline(result: dict) -> list[str]:
    v, r = result["variants"], result["ratios"]
    small_sizes, large_sizes = (list(map(str, result["parameters"][k])) for k in ("small_sizes", "large_sizes"))
    rcuda, numpy_, cores, numpy_cores = (v[k] for k in ("rcuda", "numpy", "rcuda_all_cores", "numpy_all_cores"))
    lines = []
    for n in small_sizes:
        s = rcuda["small"][n]
        lines.append(f"SGEMM {n}x{n}: {s['us_per_call']:.1f} us/call through rcuda until synchronised "
                     f"({s['issue_us_per_call']:.1f} us issuing), numpy {numpy_['small'][n]['us_per_call']:.1f} us: "
                     f"overhead {r['small_overhead_us'][n]['best_rounds']:.1f} us (goal <= {GOAL_SMALL_OVERHEAD_US:g})")
    lines.append(f"with the server's BLAS threads at {cores['blas_threads']}: SGEMM "
                 + ", ".join(f"{n}x{n} {cores['small'][n]['us_per_call']:.1f} us/call" for n in small_sizes))
    lines.append(f"Sdot (host pointer mode) {rcuda['dot']['us_per_call']:.1f} us, cudaMemGetInfo "
                 f"{rcuda['meminfo']['us_per_call']:.1f} us ({r['dot_over_meminfo']:.2f}x)")
    for n in large_sizes:
        lines.append(f"SGEMM {n}x{n} GFLOP/s: rcuda {rcuda['large'][n]['gflops']:.1f} / numpy "
                     f"{numpy_['large'][n]['gflops']:.1f} ({r['large_gflops_over_numpy'][n]['best_rounds']:.2f}); "
                     f"all cores {cores['large'][n]['gflops']:.1f} / {numpy_cores['large'][n]['gflops']:.1f} "
                     f"({r['large_gflops_over_numpy_all_cores'][n]['best_rounds']:.2f}) "
                     f"(goal >= {GOAL_LARGE_FRACTION:g})")
    return lines


if __name__ == "__main__":  # the numpy side, in a process of its own: ARGS as JSON
    measured = numpy_round(**json.loads(sys.argv[1]))
    sys.stdout.write(f"RESULT {json.dumps(measured)}\n")
