"""rcuda's benchmarks: micro benchmarks (benchmarks/micro) and the
reproduction of the source paper's table (benchmarks/paper), run by
`rcuda bench [micro|paper|all] [--quick]` (see runner.py).

Installed as `rcuda.benchmarks`; its CUDA programs (benchmarks/cuda) are
built with `nvcc -cudart shared` on first use.
"""
