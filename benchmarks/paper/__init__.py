"""The source paper's table, reproduced with rcuda's MNIST demo
(examples/mnist_dp): `rcuda bench paper [--quick]`.  See table.py for what
is measured and how, testbeds.py for where the remote GPUs are (EMULATED
ones included), model.py for the emulated GPUs' cost model and its
calibration on a real GPU."""
from __future__ import annotations

#: The source system's figures, to print beside ours.
PAPER = {"batches": 1000, "cpu_s": 3451.0, "local_gpu_s": 18.16, "remote_1_gpu_s": 44.31,
         "speedup_2_over_1": 1.6, "speedup_4_over_1": 2.2}

#: Why the suite is empty, or None once it has benchmarks.
UNAVAILABLE = None

from . import table  # noqa: E402 - table imports PAPER from here

BENCHMARKS: list = [table]
