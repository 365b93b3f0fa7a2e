"""Sim implementations of the kernels of tests/cuda/cluster_launch.cu: each
block's rank in its thread block cluster and the cluster's size, from the
launch's cluster shape (`launch.cluster`, (1, 1, 1) when the launch is not
a cluster launch)."""
import numpy as np


def cluster_ranks(launch):
    """kernel(int *rank, int *size): rank[b] = cg::this_cluster().block_rank()
    and size[b] = its num_blocks() for block b = x + gx * (y + gy * z)."""
    rank, size = launch.param(0, "Q"), launch.param(1, "Q")
    gx, gy, gz = launch.grid
    cx, cy, cz = launch.cluster
    z, y, x = np.meshgrid(np.arange(gz), np.arange(gy), np.arange(gx), indexing="ij")  # C order: b as above
    blocks = gx * gy * gz
    launch.array(rank, np.int32, blocks)[:] = (x % cx + cx * (y % cy + cy * (z % cz))).ravel()
    launch.array(size, np.int32, blocks)[:] = cx * cy * cz


KERNELS = {name: cluster_ranks for name in ("clusterRanks", "fixedRanks", "mustRanks", "setRanks", "wideRanks")}
