"""Sim implementations of the benchmark programs' kernels (benchmarks/cuda/*.cu).

They do nothing, like their CUDA originals: a launch then costs only what
rcuda itself costs.
"""


def nothing(launch):
    pass


KERNELS = {"empty_kernel": nothing, "params_kernel": nothing, "unused_kernel": nothing}
