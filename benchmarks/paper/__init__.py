"""The source paper's table, reproduced with rcuda's MNIST demo.

NOT BUILT YET: it needs the MNIST data-parallel demo (examples/mnist_dp/,
which prints a final `RESULT {json}` line, and its numpy CPU reference
examples/mnist_dp/cpu_reference.py), being written in parallel.  Until then
this suite has no benchmarks and `rcuda bench paper` says so; it never
reports numbers it did not measure.

The paper (per 1000 MNIST batches): CPU 3451 s, local GPU 18.16 s, one
remote GPU 44.31 s; 2 and 4 remote GPUs 1.6x and 2.2x faster than one.

To add it, write a module here (e.g. `table.py`) with the same interface as
the micro benchmarks (see benchmarks/runner.py), and list it in BENCHMARKS:

    NAME = "table"; TITLE = "..."
    def run(ctx: common.Context) -> dict:
        # CPU: examples/mnist_dp/cpu_reference.py; local GPU: the demo binary
        #   without rcuda (only when common.describe_machine()["gpus"]);
        # 1, 2 and 4 remote GPUs: common.sim_server(devices=...) or four
        #   servers (an emulated testbed: network namespaces, tc tbf/htb at
        #   1 and 10 Gbit/s, sim COSTS calibrated on a GPU; label "emulated");
        # parse each run's `RESULT {json}` line (common.run_program does);
        # return {"parameters": ..., "rows": [...], "paper": PAPER,
        #         "ratios": ..., "goals": {"one remote / local": goal(x, "<=", 1.1),
        #                                  "four remote speed-up over one": goal(y, ">=", 3.5)}}
    def plot(result, out_dir) -> list[Path]:
        # plots.bars(result, out_dir / "paper_table.png", [...], ...): scaling bars
"""
from __future__ import annotations

#: The source system's figures, to print beside ours.
PAPER = {"batches": 1000, "cpu_s": 3451.0, "local_gpu_s": 18.16, "remote_1_gpu_s": 44.31,
         "speedup_2_over_1": 1.6, "speedup_4_over_1": 2.2}

#: Why the suite is empty, or None once it has benchmarks.
UNAVAILABLE = ("the paper table needs the MNIST demo (examples/mnist_dp), which is not on this branch yet; "
               "see benchmarks/paper/__init__.py")

BENCHMARKS: list = []
