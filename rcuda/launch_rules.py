"""The limits a kernel launch must keep: the one copy of them.

A GPU refuses a launch whose configuration breaks a limit of the device
(cudaDeviceProp) or of the kernel (cudaFuncAttributes), and rcuda checks them
before the launch travels so the error comes at the launch, as on a GPU.
They are checked in three places, all from RULES below:

  * the client (client/device.py) for the launches C leaves to Python, and
    the server (server/backends/base.py), with `check_device`/`check_kernel`;
  * the launch fast path in C (native/launch_fast_path.c, record_launch), with
    the functions native/gen_rules.py generates from RULES into
    native/generated/launch_rules.h.  C only asks whether a rule is broken;
    a launch that breaks one goes to Python, which says which.

A cooperative launch (cudaLaunchCooperativeKernel) must also fit its whole
grid on the device at once: `check_cooperative`, from the occupancy
calculation (`active_blocks_per_sm`).  A cluster launch (a cluster shape
given at launch, or the kernel's own from __cluster_dims__) must keep the
cluster rules: `check_cluster_launch` (the client and the sim check them;
the C fast path never records a cluster launch).

A rule compares one value of the launch (each dimension of `grid` or
`block`, the block's `threads`, its dynamic `shared_mem`) with a bound: a
constant or a named limit of its scope ("device": the device's properties,
"kernel": the kernel's attributes).  The first rule broken, in RULES' order,
is the error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rcuda.errors import CudaError, cudaError

#: The values of a launch a rule can compare, and how many each has (3: x, y, z).
VALUES = {"grid": 3, "block": 3, "threads": 1, "shared_mem": 1}

#: The device limits, with the value CUDA gives every current GPU (used when
#: the properties lack one).  The dynamic shared memory a block may use is
#: sharedMemPerBlockOptin, or sharedMemPerBlock on a device without opt-in.
DEVICE_LIMITS = {
    "maxThreadsDim": (1024, 1024, 64),
    "maxGridSize": (2**31 - 1, 65535, 65535),
    "maxThreadsPerBlock": 1024,
    "sharedMemPerBlockOptin": 48 << 10,
}

#: CUDA's limit on a kernel's parameter block (bytes; ptxas refuses more).
MAX_PARAM_BYTES = 32764

#: The kernel limits (cudaFuncAttributes).  One the client was not told is
#: not checked in Python; in C it is 0, which sends the launch to Python.
KERNEL_LIMITS = ("maxThreadsPerBlock", "maxDynamicSharedSizeBytes")


@dataclass(frozen=True)
class Rule:
    """A launch's `value` must be at least (or at most) `bound`."""

    name: str
    scope: str      # "device" or "kernel": whose limits `bound` names
    value: str      # a key of VALUES
    at_least: bool  # True: value >= bound; False: value <= bound (each dimension)
    bound: int | str  # a constant, or a limit of the scope
    error: str      # the cudaError_t a GPU returns
    message: str    # str.format'ed with grid, block, threads, shared_mem, limit and kernel


def _at_least(name, scope, value, bound, error, message) -> Rule:
    return Rule(name, scope, value, True, bound, error, message)


def _at_most(name, scope, value, bound, error, message) -> Rule:
    return Rule(name, scope, value, False, bound, error, message)


INVALID_CONFIGURATION = "cudaErrorInvalidConfiguration"

RULES = (
    _at_least("grid_not_empty", "device", "grid", 1, INVALID_CONFIGURATION,
              "grid {grid} / block {block} has a zero dimension"),
    _at_least("block_not_empty", "device", "block", 1, INVALID_CONFIGURATION,
              "grid {grid} / block {block} has a zero dimension"),
    _at_most("block_dimensions", "device", "block", "maxThreadsDim", INVALID_CONFIGURATION,
             "block {block} exceeds maxThreadsDim {limit}"),
    _at_most("block_threads", "device", "threads", "maxThreadsPerBlock", INVALID_CONFIGURATION,
             "block {block} has {threads} threads, more than maxThreadsPerBlock {limit}"),
    _at_most("grid_dimensions", "device", "grid", "maxGridSize", INVALID_CONFIGURATION,
             "grid {grid} exceeds maxGridSize {limit}"),
    _at_most("dynamic_shared_memory", "device", "shared_mem", "sharedMemPerBlockOptin", INVALID_CONFIGURATION,
             "{shared_mem} bytes of dynamic shared memory is more than the {limit} a block may use "
             "(sharedMemPerBlockOptin)"),
    _at_most("kernel_threads", "kernel", "threads", "maxThreadsPerBlock", "cudaErrorLaunchOutOfResources",
             "{threads} threads per block, kernel {kernel} allows {limit} (maxThreadsPerBlock: "
             "__launch_bounds__ or registers)"),
    _at_most("kernel_dynamic_shared_memory", "kernel", "shared_mem", "maxDynamicSharedSizeBytes",
             "cudaErrorInvalidValue",
             "{shared_mem} bytes of dynamic shared memory, kernel {kernel} allows {limit} "
             "(maxDynamicSharedSizeBytes: raise it with "
             "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize))"),
)


def device_limits(props: dict) -> dict:
    """The device limits RULES use, from cudaDeviceProp fields."""
    limits = {name: props.get(name, default) for name, default in DEVICE_LIMITS.items()}
    if not props.get("sharedMemPerBlockOptin"):  # no opt-in: what every block gets
        limits["sharedMemPerBlockOptin"] = props.get("sharedMemPerBlock", DEVICE_LIMITS["sharedMemPerBlockOptin"])
    return limits


def kernel_limits(attrs: dict) -> dict:
    """The kernel limits RULES use, from cudaFuncAttributes fields; one
    `attrs` lacks is unbounded (not checked)."""
    return {name: attrs.get(name, math.inf) for name in KERNEL_LIMITS}


# ------------------------------------------------------------------ checking

def limit_dimensions(scope: str, limit: str) -> int:
    """3 for a limit given per dimension (x, y, z), else 1."""
    return len(DEVICE_LIMITS[limit]) if scope == "device" and isinstance(DEVICE_LIMITS[limit], tuple) else 1


def condition(rule: Rule, values: dict, limit: str, join: str) -> str:
    """`rule` as an expression true when a launch breaks it, in a language
    whose spellings are given: `values` maps each launch value to its
    dimensions' expressions, `limit` formats a limit (fields name and
    dimension) and `join` is the language's "or".  Python's checks (below)
    and C's (native/gen_rules.py) are both spelled by it."""
    spelled = values[rule.value]
    if len(spelled) != VALUES[rule.value]:
        raise ValueError(f"{rule.value} has {VALUES[rule.value]} dimensions, spelled {spelled}")
    if isinstance(rule.bound, int):
        bounds = [str(rule.bound)] * len(spelled)
    elif limit_dimensions(rule.scope, rule.bound) == 3:
        bounds = [limit.format(name=rule.bound, dimension=f"[{i}]") for i in range(3)]
    else:
        bounds = [limit.format(name=rule.bound, dimension="")] * len(spelled)
    op = "<" if rule.at_least else ">"
    return join.join(f"{value} {op} {bound}" for value, bound in zip(spelled, bounds))


PYTHON_VALUES = {"grid": ("grid[0]", "grid[1]", "grid[2]"), "block": ("block[0]", "block[1]", "block[2]"),
                 "threads": ("threads",), "shared_mem": ("shared_mem",)}


def python_source(scope: str) -> str:
    """The Python function `first_broken_<scope>(grid, block, shared_mem,
    limits)`: the index in RULES of the first rule of `scope` the launch
    breaks, or -1.  Compiled once, at import (below): every launch through
    Python is checked, so it runs plain comparisons rather than walking RULES."""
    lines = [f"def first_broken_{scope}(grid, block, shared_mem, limits):",
             "    threads = block[0] * block[1] * block[2]"]
    for index, rule in enumerate(RULES):
        if rule.scope == scope:
            lines += [f"    if {condition(rule, PYTHON_VALUES, 'limits[{name!r}]{dimension}', ' or ')}:  # {rule.name}",
                      f"        return {index}"]
    return "\n".join([*lines, "    return -1", ""])


_CHECKS: dict = {}
for _scope in ("device", "kernel"):
    exec(python_source(_scope), _CHECKS)  # noqa: S102 - source built above from RULES


def first_broken(scope: str, limits: dict, grid, block, shared_mem: int) -> Rule | None:
    """The first rule of `scope` the launch breaks, given that scope's
    `limits` (`device_limits`, `kernel_limits`), or None."""
    index = _CHECKS[f"first_broken_{scope}"](grid, block, shared_mem, limits)
    return None if index < 0 else RULES[index]


def _check(scope: str, limits: dict, grid, block, shared_mem: int, kernel: str, where: str) -> None:
    rule = first_broken(scope, limits, grid, block, shared_mem)
    if rule is None:
        return
    limit = rule.bound if isinstance(rule.bound, int) else limits[rule.bound]
    raise CudaError(cudaError[rule.error], where + rule.message.format(
        grid=tuple(grid), block=tuple(block), threads=block[0] * block[1] * block[2], shared_mem=shared_mem,
        limit=tuple(limit) if isinstance(limit, (list, tuple)) else limit, kernel=kernel))


def check_device(limits: dict, grid, block, shared_mem: int, where: str = "") -> None:
    """The CUDA error, naming the limit, for a launch the device whose
    `device_limits` these are would refuse; `where` prefixes its message."""
    _check("device", limits, grid, block, shared_mem, "", where)


def check_kernel(limits: dict, kernel: str, block, shared_mem: int, where: str = "") -> None:
    """The CUDA error, naming the limit, for a launch of `kernel` (its name)
    beyond its own `kernel_limits`; `where` prefixes its message."""
    _check("kernel", limits, (1, 1, 1), block, shared_mem, kernel, where)


# ------------------------------------------------------------------ co-residency

def active_blocks_per_sm(props: dict, attrs: dict, block_size: int, dynamic_shared: int) -> int:
    """Resident blocks of this kernel per multiprocessor, limited by warps,
    blocks, registers and shared memory (CUDA's occupancy calculator)."""
    if block_size <= 0 or block_size > attrs["maxThreadsPerBlock"]:
        return 0
    warp = props["warpSize"]
    warps_per_block = -(-block_size // warp)
    by_warps = props["maxThreadsPerMultiProcessor"] // warp // warps_per_block
    by_blocks = props.get("maxBlocksPerMultiProcessor", 32)
    limits = [by_warps, by_blocks]
    registers = attrs.get("numRegs", 0)
    if registers:
        # Registers are allocated per warp in units of 256.
        per_warp = -(-registers * warp // 256) * 256
        warps_by_registers = props["regsPerMultiprocessor"] // per_warp
        limits.append(warps_by_registers // warps_per_block)
    shared = attrs.get("sharedSizeBytes", 0) + dynamic_shared
    if shared:
        per_block = shared + props.get("reservedSharedMemPerBlock", 0)
        limits.append(props["sharedMemPerMultiprocessor"] // per_block)
    return max(0, min(limits))


def check_cooperative(props: dict, attrs: dict, kernel: str, grid, block, shared_mem: int, where: str = "") -> None:
    """The CUDA error for a cooperative launch whose blocks cannot all be
    resident at once (grid-wide synchronisation would wait forever), or on a
    device without cooperative launches; `where` prefixes its message."""
    if not props.get("cooperativeLaunch"):
        raise CudaError(cudaError.cudaErrorNotSupported, where + "the device does not support cooperative launches")
    per_sm = active_blocks_per_sm(props, attrs, block[0] * block[1] * block[2], shared_mem)
    resident = per_sm * props["multiProcessorCount"]
    blocks = grid[0] * grid[1] * grid[2]
    if blocks > resident:
        raise CudaError(cudaError.cudaErrorCooperativeLaunchTooLarge,
                        where + f"grid {tuple(grid)} has {blocks} blocks; {resident} blocks of kernel {kernel} "
                                f"with block {tuple(block)} and {shared_mem} bytes of dynamic shared memory fit "
                                f"on the device at once ({per_sm} per multiprocessor x "
                                f"{props['multiProcessorCount']} multiprocessors)")


# ------------------------------------------------------------------ thread block clusters

#: Blocks per cluster that every GPU with clusters runs (CUDA's portable
#: cluster size, sm_90 on).
PORTABLE_CLUSTER_SIZE = 8
#: Blocks per cluster for a kernel that allows non-portable sizes
#: (cudaFuncAttributeNonPortableClusterSizeAllowed): H100's and B200's limit.
NON_PORTABLE_CLUSTER_SIZE = 16
#: The multiprocessors a cluster's blocks are placed on together (a GPC).
#: rcuda's occupancy model: a device has multiProcessorCount // 16 of them
#: (the multiprocessors left over take no cluster), and a cluster fits when
#: its blocks fit on one at once, each multiprocessor holding
#: `active_blocks_per_sm` blocks.
CLUSTER_MULTIPROCESSORS = 16
#: The cudaFuncAttributes fields of a kernel's required cluster shape.
REQUIRED_CLUSTER_FIELDS = ("requiredClusterWidth", "requiredClusterHeight", "requiredClusterDepth")


def required_cluster(attrs: dict) -> tuple[int, int, int] | None:
    """The cluster shape the kernel must be launched with (__cluster_dims__,
    or cudaFuncAttributeRequiredCluster*), or None."""
    dims = tuple(attrs.get(name, 0) for name in REQUIRED_CLUSTER_FIELDS)
    return dims if any(dims) else None


def is_cluster_kernel(attrs: dict) -> bool:
    """Whether every launch of the kernel is a cluster launch (a shape of its
    own, or one the launch must give)."""
    return bool(attrs.get("clusterDimMustBeSet")) or required_cluster(attrs) is not None


def cluster_size_limit(attrs: dict) -> int:
    """Blocks per cluster the kernel may be launched with: the portable 8,
    16 when it allows non-portable sizes, and no more than its
    __launch_bounds__' maximum blocks per cluster (rcuda's
    `maxBlocksPerCluster`, not a cudaFuncAttributes field)."""
    limit = NON_PORTABLE_CLUSTER_SIZE if attrs.get("nonPortableClusterSizeAllowed") else PORTABLE_CLUSTER_SIZE
    declared = attrs.get("maxBlocksPerCluster")
    return min(limit, declared) if declared else limit


def _invalid_cluster(message: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidClusterSize, message)


def cluster_shape(props: dict, attrs: dict, kernel: str, cluster, where: str = "") -> tuple[int, int, int] | None:
    """The cluster shape of a launch of `kernel` asked for `cluster` (a
    3-tuple, or None when the launch names none): the kernel's own when it
    has one, None when the launch is not a cluster launch.  The CUDA error
    when the device has no clusters (cudaErrorNotSupported), or the shape is
    not one this kernel may have (cudaErrorInvalidClusterSize: another than
    the kernel's own, none for a kernel that needs one, a zero dimension,
    more blocks than `cluster_size_limit`).  `where` prefixes messages."""
    required = required_cluster(attrs)
    if required is not None and not all(required):
        raise _invalid_cluster(where + f"kernel {kernel} requires cluster {required}: its width, height and depth "
                                      f"must all be positive (or all 0)")
    if cluster is None:
        if required is None:
            if attrs.get("clusterDimMustBeSet"):
                raise _invalid_cluster(where + f"kernel {kernel} must be launched as a cluster "
                                              f"(__cluster_dims__): give cudaLaunchAttributeClusterDimension")
            return None
        cluster = required
    cluster = tuple(int(c) for c in cluster)
    if not props.get("clusterLaunch"):
        raise CudaError(cudaError.cudaErrorNotSupported,
                        where + f"cluster {cluster}: the device does not support cluster launches "
                                f"(compute capability {props.get('major')}.{props.get('minor')}, clusters need 9.0)")
    if required is not None and cluster != required:
        raise _invalid_cluster(where + f"cluster {cluster}: kernel {kernel} was compiled for cluster {required} "
                                      f"(__cluster_dims__ or cudaFuncAttributeRequiredCluster*)")
    if any(c < 1 for c in cluster):
        raise _invalid_cluster(where + f"cluster {cluster} has a zero dimension")
    size, limit = math.prod(cluster), cluster_size_limit(attrs)
    if size > limit:
        if limit == attrs.get("maxBlocksPerCluster"):
            why = f"its __launch_bounds__ allow {limit}"
        elif attrs.get("nonPortableClusterSizeAllowed"):
            why = f"the device's limit is {NON_PORTABLE_CLUSTER_SIZE}"
        else:
            why = (f"the portable limit is {PORTABLE_CLUSTER_SIZE} (more needs "
                   f"cudaFuncAttributeNonPortableClusterSizeAllowed)")
        raise _invalid_cluster(where + f"cluster {cluster} has {size} blocks, kernel {kernel} may have {limit}: {why}")
    return cluster


def check_cluster_launch(props: dict, attrs: dict, kernel: str, grid, block, shared_mem: int, cluster,
                         where: str = "") -> tuple[int, int, int] | None:
    """`cluster_shape` of a launch, and the CUDA error when the grid is not
    made of whole clusters or a cluster's blocks cannot be resident together
    (rcuda's model: `CLUSTER_MULTIPROCESSORS`), both
    cudaErrorInvalidClusterSize.  The launch's cluster shape, or None."""
    cluster = cluster_shape(props, attrs, kernel, cluster, where)
    if cluster is None:
        return None
    if any(g % c for g, c in zip(grid, cluster)):
        raise _invalid_cluster(where + f"grid {tuple(grid)} is not a whole number of clusters {cluster} "
                                      f"in every dimension")
    fit = blocks_per_cluster_group(props, attrs, block[0] * block[1] * block[2], shared_mem)
    if math.prod(cluster) > fit:
        raise _invalid_cluster(where + f"cluster {cluster} has {math.prod(cluster)} blocks; {fit} blocks of kernel "
                                      f"{kernel} with block {tuple(block)} and {shared_mem} bytes of dynamic shared "
                                      f"memory fit together on the {_group_size(props)} multiprocessors a cluster "
                                      f"may span")
    return cluster


def _group_size(props: dict) -> int:
    """Multiprocessors a cluster may span."""
    return max(1, min(CLUSTER_MULTIPROCESSORS, props.get("multiProcessorCount", 1)))


def blocks_per_cluster_group(props: dict, attrs: dict, block_size: int, dynamic_shared: int) -> int:
    """Blocks of this kernel resident at once on the multiprocessors one
    cluster may span."""
    return active_blocks_per_sm(props, attrs, block_size, dynamic_shared) * _group_size(props)


def max_potential_cluster_size(props: dict, attrs: dict, block_size: int, dynamic_shared: int) -> int:
    """cudaOccupancyMaxPotentialClusterSize: the kernel's required cluster's
    blocks when it has one; else the most blocks a cluster of it may have
    (`cluster_size_limit`) that fit together (0 on a device without
    clusters, or when no block fits)."""
    if not props.get("clusterLaunch"):
        return 0
    required = required_cluster(attrs)
    if required is not None:
        return math.prod(required)
    return min(cluster_size_limit(attrs), blocks_per_cluster_group(props, attrs, block_size, dynamic_shared))


def max_active_clusters(props: dict, attrs: dict, kernel: str, block, dynamic_shared: int, cluster,
                        where: str = "") -> int:
    """cudaOccupancyMaxActiveClusters: clusters of the launch's shape (the
    kernel's own when `cluster` is None) resident at once: as many as fit on
    each group of multiprocessors, times the groups.  cluster_shape's errors;
    a kernel without a shape of its own needs one (cudaErrorInvalidClusterSize)."""
    shape = cluster_shape(props, attrs, kernel, cluster, where)
    if shape is None:
        raise _invalid_cluster(where + f"kernel {kernel} has no cluster shape of its own: give "
                                      f"cudaLaunchAttributeClusterDimension")
    fit = blocks_per_cluster_group(props, attrs, block[0] * block[1] * block[2], dynamic_shared)
    groups = props.get("multiProcessorCount", 0) // _group_size(props)
    return groups * (fit // math.prod(shape))
