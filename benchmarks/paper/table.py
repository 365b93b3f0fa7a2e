"""The source paper's table, reproduced with the MNIST demo.

The paper, per 1000 MNIST batches: CPU 3451 s, local GPU 18.16 s, one
remote GPU 44.31 s; 2 and 4 remote GPUs 1.6x and 2.2x faster than one.

Ours, per 1000 batches of 64 images (the demo's MLP, 784-256-128-10,
235,146 parameters), each measured over N batches and scaled (N is in the
JSON and on every line):

    CPU             examples/mnist_dp/cpu_reference.py: the same model and
                    batches in numpy (every core BLAS wants)
    local GPU       the unmodified binary without rcuda, --devices 1; only
                    where this machine has a GPU (never faked: skipped, with
                    the reason, elsewhere)
    N remote GPUs   the binary through rcuda, --devices N, --sync host and
                    peer, on every testbed of testbeds.py: real cupy servers
                    where there is a GPU; EMULATED everywhere else (sim
                    servers whose kernel time follows model.py's cost model,
                    on loopback and behind links shaped to 10 and 1 Gbit/s)

"Global batch 64" is the paper's question -- the same 1000 batches split
over N GPUs; the trainer makes 1, 2 and 4 GPUs follow the same loss curve.
"Per-GPU batch 64" gives each GPU a full batch (global batch 64 x N, fewer
and larger steps; a different training run): the usual way data-parallel
training scales, measured as the improvement.  Configurations are run in
interleaved rounds; each figure is the median over rounds.

Every time is the program's own `train_seconds` (training only: no start-up,
no warm-up, no evaluation) over its `steps`.
"""
from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from .. import common
from ..common import Context
from . import model, testbeds

NAME = "table"
TITLE = "The paper's table: MNIST per 1000 batches, CPU, local GPU, 1, 2 and 4 remote GPUs"

IMAGES_PER_BATCH = 64
GOAL_REMOTE_OVER_LOCAL = 1.1
GOAL_FOUR_OVER_ONE = 3.5
CPU_REFERENCE = model.EXAMPLE_DIR / "cpu_reference.py"
RATES = ("10gbit", "1gbit")

#: The source system's figures, to print beside ours.
PAPER = {"batches": 1000, "cpu_s": 3451.0, "local_gpu_s": 18.16, "remote_1_gpu_s": 44.31,
         "speedup_2_over_1": 1.6, "speedup_4_over_1": 2.2}


def parameters(quick: bool) -> dict:
    if quick:
        configs = [(1, "host", 64), (2, "host", 64), (4, "host", 64), (4, "peer", 64), (4, "host", 256)]
        return {"train_limit": 1280, "epochs": 1, "test_limit": 200, "repeats": 1, "rates": ["1gbit"],
                "configs": configs, "timer_rows": [64, 16], "timer_repeats": 3}
    configs = [(n, sync, IMAGES_PER_BATCH) for n in (1, 2, 4) for sync in ("host", "peer")]
    configs += [(n, sync, IMAGES_PER_BATCH * n) for n in (2, 4) for sync in ("host", "peer")]
    return {"train_limit": 3840, "epochs": 3, "test_limit": 500, "repeats": 3, "rates": list(RATES),
            "configs": configs, "timer_rows": [64, 32, 16], "timer_repeats": 7}


def batches_measured(p: dict) -> int:
    """N: batches of 64 images per run (3840 = 60 x 64 = 15 x 256: whole steps at every global batch)."""
    return p["train_limit"] // IMAGES_PER_BATCH * p["epochs"]


# ---------------------------------------------------------------- running


def run(ctx: Context) -> dict:
    from rcuda import demo, demo_data

    p = parameters(ctx.quick)
    say = ctx.progress
    try:
        binary = demo.build_example(lambda text: say(text))
        data = demo_data.ensure_mnist5k()
    except (demo.DemoError, demo_data.DataError) as exc:
        raise common.BenchmarkError(str(exc)) from None
    args = ["--data", str(data), "--train-limit", str(p["train_limit"]), "--epochs", str(p["epochs"]),
            "--test-limit", str(p["test_limit"])]
    cost_model = model.selected_model()
    gpu = _local_gpu()
    notes = [f"N = {batches_measured(p)} batches of {IMAGES_PER_BATCH} images per run, scaled to 1000"]
    rows: list[dict] = []
    skipped: dict[str, str] = {}

    say("CPU: the numpy reference")
    rows += _cpu_rows(data, p)
    if gpu:
        say(f"local GPU: {gpu}")
        rows += _repeated(p, [(1, s, IMAGES_PER_BATCH) for s in ("host", "peer")],
                          lambda cfg: common.run_program([binary, *args, *_config_args(cfg)]), "local",
                          f"local GPU ({gpu}), no rcuda", False, say)
    else:
        skipped["local GPU"] = "no GPU on this machine (nvidia-smi lists none): the local-GPU row needs a real GPU"
        say(f"local GPU: skipped: {skipped['local GPU']}")

    say(f"emulated GPU: {cost_model.name} ({cost_model.gflops:g} GFLOP/s, {cost_model.gbps:g} GB/s, "
        f"{cost_model.launch_us:g} us per launch); its compute per step, measured on a sim server")
    compute = {"emulated": model.sim_check(cost_model, p["timer_rows"], p["timer_repeats"])}
    if not ctx.quick:  # what a faster GPU model gives here: the sim's numpy floor
        compute["modest_gpu_on_this_machine"] = model.sim_check(model.MODEST, p["timer_rows"], p["timer_repeats"])
    if gpu:
        timings = model.time_kernels(p["timer_rows"], p["timer_repeats"])
        compute["local_gpu"] = {"steps": model.compare_steps(cost_model, timings), "timings": timings}

    beds = []
    if gpu and _cupy_available():
        beds.append(lambda: testbeds.loopback_cupy())
    elif gpu:
        skipped["cupy-loopback"] = "cupy is not installed (pip install 'rcuda[cupy]')"
    beds.append(lambda: testbeds.loopback_sim(cost_model))
    reason = testbeds.netns_unavailable()
    if reason:
        skipped["netns"] = reason
        say(f"netns testbeds: skipped: {reason}")
    else:
        beds += [lambda rate=rate: testbeds.netns_sim(cost_model, rate) for rate in p["rates"]]
    described = []
    for make in beds:
        with make() as bed:
            say(f"testbed {bed.key}: {bed.label}")
            for note in bed.notes:
                say(f"  {note}")
            described.append(bed.describe())
            rows += _repeated(p, p["configs"], lambda cfg, bed=bed: _run_remote(bed, binary, args, cfg), bed.key,
                              bed.label, bed.emulated, say)

    _derive(rows, compute, p)
    return {"parameters": {**{k: v for k, v in p.items() if k != "configs"},
                           "configs": [list(c) for c in p["configs"]],
                           "batches_measured": batches_measured(p), "images_per_batch": IMAGES_PER_BATCH,
                           "program": binary.name},
            "paper": PAPER, "cost_model": cost_model.as_dict(), "compute_per_step": compute,
            "testbeds": described, "skipped": skipped, "notes": notes, "rows": rows,
            "goals": _goals(rows, gpu is not None), "table": _paper_table(rows)}


def _local_gpu() -> str | None:
    gpus = common.describe_machine()["gpus"]
    return gpus[0]["name"] if gpus else None


def _cupy_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("cupy") is not None


def _config_args(cfg) -> list[str]:
    devices, sync, batch = cfg
    return ["--devices", str(devices), "--sync", sync, "--batch", str(batch)]


def _run_remote(bed: testbeds.Testbed, binary: Path, args: list[str], cfg) -> dict:
    """One run through rcuda, with the CPU time the program and the servers
    (daemons and session workers) used for it, start-up and warm-up included."""
    bed.wait_idle()
    env = common.rcuda_environment(bed.servers, {"RCUDA_TIMEOUT": "120"})
    servers_before, program_before = _servers_cpu(bed), _children_cpu()
    result = common.run_program([*bed.prefix, binary, *args, *_config_args(cfg)], env=env)
    result["program_cpu_s"] = round(_children_cpu() - program_before, 3)
    result["servers_cpu_s"] = round(sum(common.cpu_used_between(before, after) for before, after
                                        in zip(servers_before, _servers_cpu(bed))), 3)
    return result


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def _servers_cpu(bed: testbeds.Testbed) -> list[dict[int, float]]:
    return [common.process_group_cpu(pid) for pid in bed.server_pids]


def _cpu_rows(data: Path, p: dict) -> list[dict]:
    cmd = [sys.executable, CPU_REFERENCE, "--data", data, "--train-limit", p["train_limit"], "--epochs", p["epochs"],
           "--test-limit", p["test_limit"], "--batch", IMAGES_PER_BATCH]
    runs = [common.run_program(cmd) for _ in range(max(3, p["repeats"]))]
    return [_row("cpu", "CPU (numpy, this machine)", False, (0, "none", IMAGES_PER_BATCH), runs, p)]


def _repeated(p: dict, configs: list, run_one, key: str, label: str, emulated: bool, say) -> list[dict]:
    """Every configuration `repeats` times, in interleaved rounds."""
    results: dict = {tuple(c): [] for c in configs}
    for round_ in range(p["repeats"]):
        for cfg in configs:
            before = _cpu_times()
            result = run_one(cfg)
            result["machine_cpu_busy"] = _busy_fraction(before, _cpu_times())
            result["load_average_1min"] = round(os.getloadavg()[0], 2)
            results[tuple(cfg)].append(result)
            say(f"  {key}: {cfg[0]} GPU(s), sync {cfg[1]}, global batch {cfg[2]}: "
                f"{result['train_seconds'] / result['steps'] * 1000:.1f} ms per step, CPUs "
                f"{100 * result['machine_cpu_busy']:.0f}% busy (round {round_ + 1}/{p['repeats']})")
    return [_row(key, label, emulated, cfg, runs, p) for cfg, runs in results.items()]


def _cpu_per_step(runs: list[dict]) -> dict | None:
    """CPU milliseconds per step, median over the runs: the program's while
    it trained (its own figure, every thread), and the servers' (daemons and
    session workers) over the whole run, start-up and warm-up spread over
    its steps: what emulated GPUs take from the program's cores when they
    share a machine with it."""
    figures = {}
    if all("train_cpu_seconds" in r for r in runs):
        figures["program_training"] = statistics.median(r["train_cpu_seconds"] / r["steps"] for r in runs)
    if all("servers_cpu_s" in r for r in runs):
        figures["servers_whole_run"] = statistics.median(r["servers_cpu_s"] / r["steps"] for r in runs)
    return {who: round(seconds * 1000, 2) for who, seconds in figures.items()} or None


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    """How busy the machine's CPUs were (all processes, other users' too)."""
    return round((after[0] - before[0]) / max(after[1] - before[1], 1), 3)


def _row(key: str, label: str, emulated: bool, cfg, runs: list[dict], p: dict) -> dict:
    devices, sync, batch = cfg
    per_batch = [r["train_seconds"] / (r["steps"] * r["batch"] / IMAGES_PER_BATCH) for r in runs]
    per_step = [r["train_seconds"] / r["steps"] for r in runs]
    kind = "cpu" if key == "cpu" else "local" if key == "local" else "remote"
    return {
        "testbed": key, "label": label, "emulated": emulated, "kind": kind, "devices": devices, "sync": sync,
        "global_batch": batch,
        "scaling": "global batch 64" if batch == IMAGES_PER_BATCH else f"per-GPU batch 64 (global {batch})",
        "batches_measured": batches_measured(p),
        "s_per_1000_batches": round(statistics.median(per_batch) * 1000, 4),
        "ms_per_step": round(statistics.median(per_step) * 1000, 3),
        "runs_s_per_1000_batches": [round(x * 1000, 4) for x in per_batch],
        "load_average_1min": [r["load_average_1min"] for r in runs if "load_average_1min" in r],
        "machine_cpu_busy": statistics.median(busy) if (busy := [r["machine_cpu_busy"] for r in runs
                                                                  if "machine_cpu_busy" in r]) else None,
        "test_accuracy": runs[-1]["test_accuracy"], "parameters": runs[-1]["parameters"],
        "busy_seconds": runs[-1].get("busy_seconds"), "shares": runs[-1].get("shares"),
        "cpu_ms_per_step": _cpu_per_step(runs),
        "device_names": runs[-1].get("device_names"),
    }


# ---------------------------------------------------------------- what the figures mean


def _shard_compute_ms(compute: dict, testbed: str, shard: int) -> float | None:
    """Measured compute per step for a shard of `shard` rows on this
    testbed's kind of GPU (the timer program's step time)."""
    source = compute.get("emulated") if testbed not in ("cupy-loopback", "local") else compute.get("local_gpu")
    for step in (source or {}).get("steps", []):
        if step["rows"] == shard:
            return step["measured_us"] / 1000
    return None


def exchange_bytes(devices: int, sync: str, parameters: int) -> int:
    """Bytes over the busiest link in one step, one direction after the
    other (the trainer waits for each): host sync moves each GPU's gradient
    sums (P + 2 floats) down and the parameters (P floats) up on its own
    link; peer sync pulls N - 1 gradient copies into GPU0 one after the
    other and N - 1 parameter copies out of it."""
    grads, params = 4 * (parameters + 2), 4 * parameters
    if sync == "host":
        return grads + params
    return (devices - 1) * (grads + params)


def _derive(rows: list[dict], compute: dict, p: dict) -> None:
    """Speed-ups (vs one remote on the same testbed and sync, vs the CPU)
    and where each step's time goes."""
    cpu = next((r for r in rows if r["kind"] == "cpu"), None)
    rates = {f"netns-{rate}": float(rate[:-4]) * 1e9 for rate in RATES}
    for row in rows:
        if cpu and row is not cpu:
            row["speedup_over_cpu"] = round(cpu["s_per_1000_batches"] / row["s_per_1000_batches"], 3)
        if row["kind"] != "remote":
            continue
        one = next((r for r in rows if r["testbed"] == row["testbed"] and r["devices"] == 1 and r["sync"] == row["sync"]
                    and r["global_batch"] == IMAGES_PER_BATCH), None)
        if one:
            row["speedup_over_one_remote"] = round(one["s_per_1000_batches"] / row["s_per_1000_batches"], 3)
        shard = row["global_batch"] // row["devices"]
        step = {"total_ms": row["ms_per_step"]}
        shard_ms = _shard_compute_ms(compute, row["testbed"], shard)
        if shard_ms is not None:
            step["compute_ms"] = round(shard_ms, 3)
        moved = exchange_bytes(row["devices"], row["sync"], row["parameters"])
        step["exchange_bytes_busiest_link"] = moved
        if row["testbed"] in rates:
            step["link_ms_at_rate"] = round(moved * 8 / rates[row["testbed"]] * 1000, 3)
        known = step.get("compute_ms", 0) + step.get("link_ms_at_rate", 0)
        step["rest_ms"] = round(row["ms_per_step"] - known, 3)
        row["step"] = step


def _best(rows: list[dict], testbed: str, devices: int, batch: int) -> dict | None:
    candidates = [r for r in rows if r["testbed"] == testbed and r["devices"] == devices and r["global_batch"] == batch]
    return min(candidates, key=lambda r: r["s_per_1000_batches"]) if candidates else None


def _goal(value: float | None, op: str, target: float, note: str) -> dict:
    if value is None:
        return {"value": None, "goal": f"{op} {target:g}", "met": None, "note": note}
    return {**common.goal(value, op, target), "note": note}


def _goals(rows: list[dict], have_gpu: bool) -> dict:
    goals = {}
    local = _best(rows, "local", 1, IMAGES_PER_BATCH)
    remote = _best(rows, "cupy-loopback", 1, IMAGES_PER_BATCH)
    goals["one remote / local (real GPU)"] = _goal(
        remote["s_per_1000_batches"] / local["s_per_1000_batches"] if local and remote else None, "<=",
        GOAL_REMOTE_OVER_LOCAL,
        "best sync of each; cupy server on loopback vs the binary without rcuda" if local and remote else
        "not measured: needs a GPU (run benchmarks/gpu/run.sh on a GPU machine)" if not have_gpu else
        "not measured: the cupy testbed did not run")
    for testbed in dict.fromkeys(r["testbed"] for r in rows if r["kind"] == "remote"):
        one = _best(rows, testbed, 1, IMAGES_PER_BATCH)
        emulated = " (EMULATED)" if one and one["emulated"] else ""
        for batch, words in ((IMAGES_PER_BATCH, "global batch 64"), (IMAGES_PER_BATCH * 4, "per-GPU batch 64")):
            four = _best(rows, testbed, 4, batch)
            if one and four:
                goals[f"four remote speed-up over one, {testbed}{emulated}, {words}"] = _goal(
                    one["s_per_1000_batches"] / four["s_per_1000_batches"], ">=", GOAL_FOUR_OVER_ONE,
                    f"best sync of each: one remote {one['sync']}, four remote {four['sync']}")
    return goals


def _paper_table(rows: list[dict]) -> dict:
    """Per testbed, the paper's five rows with its figures beside ours (best
    sync for each row, global batch 64)."""
    cpu = next((r for r in rows if r["kind"] == "cpu"), None)
    local = _best(rows, "local", 1, IMAGES_PER_BATCH)
    paper = PAPER
    paper_rows = {"CPU": paper["cpu_s"], "local GPU": paper["local_gpu_s"], "1 remote GPU": paper["remote_1_gpu_s"],
                  "2 remote GPUs": paper["remote_1_gpu_s"] / paper["speedup_2_over_1"],
                  "4 remote GPUs": paper["remote_1_gpu_s"] / paper["speedup_4_over_1"]}
    tables = {}
    for testbed in dict.fromkeys(r["testbed"] for r in rows if r["kind"] == "remote"):
        ours = {"CPU": cpu, "local GPU": local, **{f"{n} remote GPU{'s' if n > 1 else ''}":
                                                  _best(rows, testbed, n, IMAGES_PER_BATCH) for n in (1, 2, 4)}}
        one = ours["1 remote GPU"]
        lines = []
        for name, paper_s in paper_rows.items():
            row = ours[name]
            line = {"row": name, "paper_s": round(paper_s, 2), "ours_s": row["s_per_1000_batches"] if row else None,
                    "ours_emulated": bool(row and row["emulated"]), "ours_sync": row["sync"] if row else None}
            if name.endswith("GPUs"):
                n = int(name[0])
                line["paper_speedup_over_one_remote"] = paper[f"speedup_{n}_over_1"]
                if row and one:
                    line["ours_speedup_over_one_remote"] = round(one["s_per_1000_batches"] / row["s_per_1000_batches"], 3)
            if name == "1 remote GPU":
                line["paper_over_local"] = round(paper["remote_1_gpu_s"] / paper["local_gpu_s"], 3)
                if row and local:
                    line["ours_over_local"] = round(row["s_per_1000_batches"] / local["s_per_1000_batches"], 3)
                if row and row.get("step", {}).get("compute_ms"):
                    # No local GPU to compare with when it is emulated: its own compute time instead.
                    line["ours_over_its_gpu_compute"] = round(row["ms_per_step"] / row["step"]["compute_ms"], 3)
            if name == "CPU":
                line["paper_over_local_gpu"] = round(paper["cpu_s"] / paper["local_gpu_s"], 1)
            lines.append(line)
        tables[testbed] = lines
    return tables


# ---------------------------------------------------------------- output


def headline(result: dict) -> list[str]:
    lines = [f"per 1000 batches of 64 (measured over {result['parameters']['batches_measured']}); "
             f"emulated GPU: {result['cost_model']['name']}"]
    for reason in result["skipped"].items():
        lines.append(f"skipped {reason[0]}: {reason[1]}")
    for testbed, table in result["table"].items():
        lines.append(f"[{testbed}]" + (" EMULATED" if any(l["ours_emulated"] for l in table) else ""))
        for line in table:
            ours = f"{line['ours_s']:9.2f} s" if line["ours_s"] is not None else "        - "
            extra = ""
            if "ours_speedup_over_one_remote" in line:
                extra = (f"  {line['ours_speedup_over_one_remote']:.2f}x over one remote "
                         f"(paper {line['paper_speedup_over_one_remote']}x)")
            lines.append(f"  {line['row']:<14} ours {ours} ({line['ours_sync'] or '-'})  paper {line['paper_s']:8.2f} s"
                         f"{extra}")
    for name, g in result["goals"].items():
        state = "met" if g["met"] else "NOT met" if g["met"] is False else "not measured"
        value = f"{g['value']:.2f}" if g["value"] is not None else "-"
        lines.append(f"goal {name}: {value} ({g['goal']}): {state}")
    return lines


def plot(result: dict, out_dir: Path) -> list[Path]:
    from . import plots

    return plots.draw(result, out_dir)
