"""The source paper's table, reproduced with rcuda's MNIST demo
(examples/mnist_dp): `rcuda bench paper [--quick]`.  See table.py for what
is measured and how, testbeds.py for where the remote GPUs are (EMULATED
ones included), model.py for the emulated GPUs' cost model and its
calibration on a real GPU."""
from __future__ import annotations

from . import table

BENCHMARKS: list = [table]

#: Why the suite is empty, or None once it has benchmarks.
UNAVAILABLE = None
