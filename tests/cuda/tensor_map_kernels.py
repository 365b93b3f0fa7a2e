"""Sim implementation of tests/cuda/tensor_maps.cu's kernel: what TMA would
load, read through the sim's encoding of the map (rcuda/tensor_maps.py)."""
import numpy as np

from rcuda.tensor_maps import decode

TILE = 16


def load_tile(launch):
    """loadTile(const __grid_constant__ CUtensorMap map, int x, int y, float *out)."""
    tensor_map = decode(launch.param(0, "128s"))
    x, y, out = launch.param(1, "i"), launch.param(2, "i"), launch.param(3, "Q")
    cols, rows = tensor_map.dims
    matrix = launch.array(tensor_map.address, np.float32, rows * tensor_map.strides[0] // 4)
    tile = matrix.reshape(rows, tensor_map.strides[0] // 4)[y:y + TILE, x:x + TILE]
    launch.array(out, np.float32, TILE * TILE)[:] = tile.reshape(-1)


KERNELS = {"loadTile": load_tile}
