"""Sim kernel of benchmarks/cuda/graph_step.cu."""
import numpy as np


def graph_tick(launch):
    """graph_tick(unsigned *state, unsigned i): state = state * 31 + i + 1 (32 bits)."""
    state = launch.array(launch.param(0, "Q"), np.uint32, 1)
    state[0] = (int(state[0]) * 31 + launch.param(1, "I") + 1) & 0xFFFFFFFF


KERNELS = {"graph_tick": graph_tick}
