"""numpy versions of mnist_dp's kernels (kernels.cuh), for rcuda's sim backend:

    rcuda server --backend sim --kernels examples/mnist_dp/sim_kernels.py

Each function does what the CUDA kernel does for the launched grid.  The
grid-stride kernels cover all their elements whatever the grid; the GEMMs
cover the C tiles of the launched blocks only; sum_columns the columns of the
launched blocks.  Kernels that assert their block shape on the GPU assert it
here too (a failed assert is cudaErrorAssert either way).  Arithmetic is
float32 like the GPU's; sums may be added in another order, which changes
results only by rounding.

COSTS (optional) make the simulated GPU take a modelled time per launch, for
benchmarks: set RCUDA_SIM_GFLOPS (floating-point rate, GFLOP/s) in the
server's environment, optionally RCUDA_SIM_GBPS (memory bandwidth, GB/s,
default 1000) and RCUDA_SIM_LAUNCH_US (per-launch overhead, default 5).
"""
import os

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

TILE = 16
REDUCE_THREADS = 256
F32 = np.float32


def _params(launch, formats):
    return [launch.param(i, fmt) for i, fmt in enumerate(formats)]


def _floats(launch, ptr, shape):
    return launch.array(ptr, F32, shape)


# ---------------------------------------------------------------- data


def gather_batch(launch):
    images, labels, order, first, rows, dim, x, y = _params(launch, "QQQiiiQQ")
    if rows <= 0 or dim <= 0:
        return
    if order:
        src = launch.array(order, np.int32, first + rows)[first:].astype(np.int64)
    else:
        src = np.arange(first, first + rows, dtype=np.int64)
    count = int(src.max()) + 1
    pixels = launch.array(images, np.uint8, (count, dim))
    _floats(launch, x, (rows, dim))[:] = pixels[src].astype(F32) / F32(255)
    launch.array(y, np.int32, rows)[:] = launch.array(labels, np.uint8, count)[src]


# ---------------------------------------------------------------- GEMM


def _gemm(trans_a, trans_b):
    def kernel(launch):
        assert tuple(launch.block) == (TILE, TILE, 1), "blockDim == (TILE, TILE, 1)"
        a, b, c, M, N, K = _params(launch, "QQQiii")
        rows, cols = min(M, launch.grid[1] * TILE), min(N, launch.grid[0] * TILE)
        if rows <= 0 or cols <= 0:
            return
        C = _floats(launch, c, (M, N))
        if K <= 0:
            C[:rows, :cols] = 0
            return
        A = _floats(launch, a, (K, M)).T if trans_a else _floats(launch, a, (M, K))
        B = _floats(launch, b, (N, K)).T if trans_b else _floats(launch, b, (K, N))
        C[:rows, :cols] = A[:rows] @ B[:, :cols]
    return kernel


# ---------------------------------------------------------------- dense layers


def bias_activation(launch):
    z, bias, rows, cols, relu = _params(launch, "QQiii")
    if rows <= 0 or cols <= 0:
        return
    Z = _floats(launch, z, (rows, cols))
    v = Z + _floats(launch, bias, cols)
    Z[:] = np.where(v > 0, v, F32(0)) if relu else v


def relu_backward(launch):
    grad, activation, n = _params(launch, "QQq")
    if n <= 0:
        return
    G = _floats(launch, grad, n)
    G[~(_floats(launch, activation, n) > 0)] = 0


def softmax_xent(launch):
    logits, labels, rows, classes, dlogits, row_stats = _params(launch, "QQiiQQ")
    if rows <= 0:
        return
    z = _floats(launch, logits, (rows, classes))
    y = launch.array(labels, np.int32, rows).astype(np.int64)
    assert ((y >= 0) & (y < classes)).all(), "label >= 0 && label < classes"
    best = z.argmax(axis=1)  # the first maximum, as the kernel's strict >
    shifted = z - z[np.arange(rows), best][:, None]
    e = np.exp(shifted)
    total = e.sum(axis=1, dtype=F32)
    stats = _floats(launch, row_stats, (rows, 2))
    stats[:, 0] = np.log(total) - shifted[np.arange(rows), y]
    stats[:, 1] = (best == y).astype(F32)
    if dlogits:
        g = e / total[:, None]
        g[np.arange(rows), y] -= F32(1)
        _floats(launch, dlogits, (rows, classes))[:] = g


# ---------------------------------------------------------------- reductions


def sum_columns(launch):
    assert tuple(launch.block) == (REDUCE_THREADS, 1, 1), "blockDim == (REDUCE_THREADS, 1, 1)"
    m, rows, cols, inner, out = _params(launch, "QiiiQ")
    columns = min(cols, launch.grid[0])
    if columns <= 0:
        return
    result = _floats(launch, out, columns)
    if rows <= 0 or inner <= 0:
        result[:] = 0
        return
    sums = _floats(launch, m, (rows, cols, inner)).sum(axis=(0, 2), dtype=np.float64)
    result[:] = sums[:columns].astype(F32)


# ---------------------------------------------------------------- update


def add_into(launch):
    acc, x, n = _params(launch, "QQq")
    if n > 0:
        _floats(launch, acc, n)[:] += _floats(launch, x, n)


def sgd_momentum(launch):
    params, velocity, grad_sum, n, scale, lr, momentum, decay = _params(launch, "QQQqffff")
    if n <= 0:
        return
    p, v = _floats(launch, params, n), _floats(launch, velocity, n)
    g = _floats(launch, grad_sum, n) * F32(scale) + F32(decay) * p
    v[:] = F32(momentum) * v + g
    p[:] = p - F32(lr) * v


# ---------------------------------------------------------------- convolution


def conv2d_forward(launch):
    x, w, b, y, N, C, H, W, K, R, relu = _params(launch, "QQQQiiiiiii")
    P, Q = H - R + 1, W - R + 1
    if N * K * P * Q <= 0:
        return
    windows = sliding_window_view(_floats(launch, x, (N, C, H, W)), (R, R), axis=(2, 3))  # N, C, P, Q, R, R
    columns = windows.transpose(0, 2, 3, 1, 4, 5).reshape(N * P * Q, C * R * R)
    out = (columns @ _floats(launch, w, (K, C * R * R)).T).reshape(N, P, Q, K).transpose(0, 3, 1, 2)
    out = out + _floats(launch, b, K)[None, :, None, None]
    _floats(launch, y, (N, K, P, Q))[:] = np.where(out > 0, out, F32(0)) if relu else out


def conv2d_backward_input(launch):
    dy, w, dx, N, C, H, W, K, R = _params(launch, "QQQiiiiii")
    P, Q = H - R + 1, W - R + 1
    if N * C * H * W <= 0:
        return
    # A full correlation: dy padded by R - 1 on every side, with the kernel flipped.
    padded = np.zeros((N, K, P + 2 * (R - 1), Q + 2 * (R - 1)), F32)
    padded[:, :, R - 1:R - 1 + P, R - 1:R - 1 + Q] = _floats(launch, dy, (N, K, P, Q))
    windows = sliding_window_view(padded, (R, R), axis=(2, 3))  # N, K, H, W, R, R; index i <-> ry = R-1-i
    flipped = _floats(launch, w, (K, C, R, R))[:, :, ::-1, ::-1]
    columns = windows.transpose(0, 2, 3, 1, 4, 5).reshape(N * H * W, K * R * R)
    out = columns @ flipped.transpose(1, 0, 2, 3).reshape(C, K * R * R).T
    _floats(launch, dx, (N, C, H, W))[:] = out.reshape(N, H, W, C).transpose(0, 3, 1, 2)


def conv2d_backward_weight(launch):
    x, dy, dw, N, C, H, W, K, R = _params(launch, "QQQiiiiii")
    P, Q = H - R + 1, W - R + 1
    if K * C * R * R <= 0:
        return
    if N <= 0:
        _floats(launch, dw, (K, C, R, R))[:] = 0
        return
    X = _floats(launch, x, (N, C, H, W))
    DY = _floats(launch, dy, (N, K, P, Q))
    windows = sliding_window_view(X, (P, Q), axis=(2, 3))  # N, C, R, R, P, Q
    out = np.tensordot(DY, windows, axes=([0, 2, 3], [0, 4, 5]))  # K, C, R, R
    _floats(launch, dw, (K, C, R, R))[:] = out


# ---------------------------------------------------------------- pooling


def _windows(launch, x, planes, H, W):
    P, Q = H // 2, W // 2
    X = _floats(launch, x, (planes, H, W))
    quads = X[:, :2 * P, :2 * Q].reshape(planes, P, 2, Q, 2).transpose(0, 1, 3, 2, 4).reshape(planes, P, Q, 4)
    return quads, quads.argmax(axis=3)  # (0,0), (0,1), (1,0), (1,1); the first maximum wins


def maxpool2_forward(launch):
    x, y, planes, H, W = _params(launch, "QQiii")
    P, Q = H // 2, W // 2
    if planes * P * Q <= 0:
        return
    quads, best = _windows(launch, x, planes, H, W)
    _floats(launch, y, (planes, P, Q))[:] = np.take_along_axis(quads, best[..., None], axis=3)[..., 0]


def maxpool2_backward(launch):
    x, dy, dx, planes, H, W = _params(launch, "QQQiii")
    P, Q = H // 2, W // 2
    if planes * H * W <= 0:
        return
    DX = _floats(launch, dx, (planes, H, W))
    DX[:] = 0
    if P * Q <= 0:
        return
    _, best = _windows(launch, x, planes, H, W)
    plane, p, q = np.indices((planes, P, Q))
    DX[plane, 2 * p + best // 2, 2 * q + best % 2] = _floats(launch, dy, (planes, P, Q))


KERNELS = {
    "gather_batch": gather_batch,
    "gemm_nn": _gemm(False, False),
    "gemm_nt": _gemm(False, True),
    "gemm_tn": _gemm(True, False),
    "bias_activation": bias_activation,
    "relu_backward": relu_backward,
    "softmax_xent": softmax_xent,
    "sum_columns": sum_columns,
    "add_into": add_into,
    "sgd_momentum": sgd_momentum,
    "conv2d_forward": conv2d_forward,
    "conv2d_backward_input": conv2d_backward_input,
    "conv2d_backward_weight": conv2d_backward_weight,
    "maxpool2_forward": maxpool2_forward,
    "maxpool2_backward": maxpool2_backward,
}


# ---------------------------------------------------------------- modelled GPU time


def _work(launch):
    """(floating-point operations, bytes moved) of a launch, roughly."""
    name = launch.demangled.split("(")[0].split()[-1]
    if name.startswith("gemm_"):
        M, N, K = (launch.param(i, "i") for i in (3, 4, 5))
        return 2.0 * M * N * K, 4.0 * (M * K + K * N + M * N)
    if name.startswith("conv2d_"):
        first = 4 if name == "conv2d_forward" else 3
        N, C, H, W, K, R = (launch.param(first + i, "i") for i in range(6))
        P, Q = H - R + 1, W - R + 1
        return 2.0 * N * K * P * Q * C * R * R, 4.0 * (N * C * H * W + K * C * R * R + N * K * P * Q)
    threads = 1
    for g, b in zip(launch.grid, launch.block):
        threads *= g * b
    return float(threads), 12.0 * threads  # element-wise: a few bytes and an operation per thread


def modelled_seconds(flops: float, moved: float) -> float:
    return LAUNCH_SECONDS + flops / (GFLOPS * 1e9) + moved / (GBPS * 1e9)


def _cost(launch):
    return modelled_seconds(*_work(launch))


GFLOPS = float(os.environ.get("RCUDA_SIM_GFLOPS", "0") or 0)
GBPS = float(os.environ.get("RCUDA_SIM_GBPS", "1000") or 1000)
LAUNCH_SECONDS = float(os.environ.get("RCUDA_SIM_LAUNCH_US", "5") or 5) * 1e-6

COSTS = {name: _cost for name in KERNELS} if GFLOPS > 0 else {}
