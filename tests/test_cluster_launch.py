"""Thread block cluster launches: tests/cuda/cluster_launch.cu (built for
sm_90) run unmodified through rcuda on a sim server with compute capability
9.0 (RCUDA_SIM_COMPUTE_CAPABILITY; tests/cuda/cluster_kernels.py computes
each block's cluster rank from `launch.cluster`): cudaLaunchKernelEx's
cluster attribute, __cluster_dims__ kernels launched with <<<>>>, shapes set
with cudaFuncSetAttribute, the refused shapes, the occupancy queries, the
attributes, and the driver's cuLaunchKernelEx.  Then the pieces alone: the
rules (rcuda/launch_rules.py), the cubin's cluster records
(rcuda/fatbin.py), the wire's optional field, the sim's option, and the
cupy backend's cuLaunchKernelEx structures against cuda.h."""
from __future__ import annotations

import contextlib
import ctypes
import os
import struct
import subprocess
import types

import pytest

from conftest import CUDA_SOURCES, nvcc_path, requires_nvcc, run_program, start_server
from rcuda import fatbin, launch_rules, protocol
from rcuda.binaries import dropin_dir
from rcuda.errors import CudaError, ProtocolError, cudaError
from rcuda.server.backends import cupy_backend
from rcuda.server.backends.sim import SimBackend, sim_properties

KERNELS = str(CUDA_SOURCES / "cluster_kernels.py")
SECTIONS = ["launch", "cluster_dims", "set_shape", "bad_shapes", "occupancy", "attributes", "driver"]
SIM_90 = {"RCUDA_SIM_COMPUTE_CAPABILITY": "9.0"}


def _program(build_dir, *flags: str):
    """cluster_launch.cu for sm_90, with the runtime and rcuda's libcuda.so.1."""
    out = build_dir / ("cluster_launch" + "".join(f.replace("-", "_") for f in flags))
    if not out.exists():
        subprocess.run([nvcc_path(), "-cudart", "shared", "-arch=sm_90", "-o", str(out),
                        str(CUDA_SOURCES / "cluster_launch.cu"), f"-L{dropin_dir()}", "-l:libcuda.so.1", *flags],
                       check=True, capture_output=True, text=True, timeout=300)
    return out


@requires_nvcc
@pytest.mark.parametrize("flags", [(), ("--default-stream", "per-thread")], ids=["legacy", "per-thread"])
def test_cluster_launches(build_dir, flags):
    server = start_server("--backend", "sim", "--kernels", KERNELS, env=dict(os.environ, **SIM_90))
    try:
        result = run_program(_program(build_dir, *flags), server, timeout=300)
    finally:
        server.stop()
    assert result.returncode == 0 and "PASSED cluster_launch" in result.stdout, \
        result.stdout[-3000:] + result.stderr[-3000:]
    for section in SECTIONS:
        assert f"ok {section}" in result.stdout, result.stdout


@requires_nvcc
def test_an_sm_80_sim_cannot_load_the_program(build_dir):
    """The default sim (compute capability 8.0) has no clusters and refuses
    sm_90 code, as an A100 does."""
    server = start_server("--backend", "sim", "--kernels", KERNELS,
                          env={k: v for k, v in os.environ.items() if k != "RCUDA_SIM_COMPUTE_CAPABILITY"})
    try:
        result = run_program(_program(build_dir), server, "launch", timeout=300)
    finally:
        server.stop()
    assert result.returncode != 0 and "FAILED" in result.stdout, result.stdout + result.stderr


def test_on_a_gpu(build_dir, server_factory):
    """The cupy backend on a GPU with clusters: cuLaunchKernelEx with the
    cluster attribute, and the driver agrees with the refusals."""
    from test_backends import cupy_unavailable

    if reason := cupy_unavailable():
        pytest.skip(reason)
    import cupy
    if cupy.cuda.runtime.getDeviceProperties(0)["major"] < 9:
        pytest.skip("the GPU has no thread block clusters (compute capability below 9.0)")
    server = server_factory("--backend", "cupy", "--devices", "1")
    result = run_program(_program(build_dir), server, timeout=300)
    assert result.returncode == 0 and "PASSED cluster_launch" in result.stdout, \
        result.stdout[-3000:] + result.stderr[-3000:]


# ---------------------------------------------------------------- the rules

PROPS = dict(sim_properties(0, 1 << 30, arch=90))
ATTRS = {"maxThreadsPerBlock": 1024, "numRegs": 32, "sharedSizeBytes": 0}


def _refused(status, call):
    with pytest.raises(CudaError) as refused:
        call()
    assert refused.value.status == status, refused.value
    return str(refused.value)


@pytest.mark.parametrize("grid, cluster", [((8, 1, 1), (2, 1, 1)), ((8, 4, 2), (2, 2, 2)), ((16, 1, 1), (8, 1, 1)),
                                           ((4, 4, 1), (1, 4, 1)), ((3, 5, 7), (1, 1, 1))])
def test_grids_of_whole_clusters_are_launched(grid, cluster):
    assert launch_rules.check_cluster_launch(PROPS, ATTRS, "k", grid, (128, 1, 1), 0, cluster) == cluster


@pytest.mark.parametrize("grid, cluster, says", [
    ((6, 1, 1), (4, 1, 1), "not a whole number"),
    ((4, 3, 1), (2, 2, 1), "not a whole number"),
    ((4, 1, 1), (0, 1, 1), "zero dimension"),
    ((32, 1, 1), (16, 1, 1), "portable limit is 8"),
    ((4, 4, 1), (4, 4, 1), "portable limit is 8"),
])
def test_shapes_cuda_refuses(grid, cluster, says):
    message = _refused(cudaError.cudaErrorInvalidClusterSize, lambda: launch_rules.check_cluster_launch(
        PROPS, ATTRS, "k", grid, (128, 1, 1), 0, cluster, where="here: "))
    assert message.startswith("here: ") and says in message


def test_non_portable_sizes_need_the_kernel_s_leave_and_stop_at_the_device_s_limit():
    wide = dict(ATTRS, nonPortableClusterSizeAllowed=1)
    assert launch_rules.check_cluster_launch(PROPS, wide, "k", (32, 1, 1), (128, 1, 1), 0, (16, 1, 1)) == (16, 1, 1)
    assert "device's limit is 16" in _refused(cudaError.cudaErrorInvalidClusterSize, lambda: launch_rules.
                                              check_cluster_launch(PROPS, wide, "k", (32, 1, 1), (128, 1, 1), 0,
                                                                   (32, 1, 1)))
    # __launch_bounds__' blocks per cluster bound it further.
    bounded = dict(wide, maxBlocksPerCluster=4)
    assert "__launch_bounds__ allow 4" in _refused(cudaError.cudaErrorInvalidClusterSize, lambda: launch_rules.
                                                   check_cluster_launch(PROPS, bounded, "k", (8, 1, 1), (128, 1, 1),
                                                                        0, (8, 1, 1)))


def test_a_kernel_s_own_shape_is_its_every_launch_s():
    fixed = dict(ATTRS, requiredClusterWidth=2, requiredClusterHeight=1, requiredClusterDepth=1, clusterDimMustBeSet=1)
    assert launch_rules.is_cluster_kernel(fixed)
    assert launch_rules.check_cluster_launch(PROPS, fixed, "k", (8, 1, 1), (128, 1, 1), 0, None) == (2, 1, 1)
    assert launch_rules.check_cluster_launch(PROPS, fixed, "k", (8, 1, 1), (128, 1, 1), 0, (2, 1, 1)) == (2, 1, 1)
    _refused(cudaError.cudaErrorInvalidClusterSize,
             lambda: launch_rules.check_cluster_launch(PROPS, fixed, "k", (8, 1, 1), (128, 1, 1), 0, (4, 1, 1)))
    _refused(cudaError.cudaErrorInvalidClusterSize,
             lambda: launch_rules.check_cluster_launch(PROPS, fixed, "k", (7, 1, 1), (128, 1, 1), 0, None))
    must = dict(ATTRS, clusterDimMustBeSet=1)
    _refused(cudaError.cudaErrorInvalidClusterSize,
             lambda: launch_rules.check_cluster_launch(PROPS, must, "k", (8, 1, 1), (128, 1, 1), 0, None))
    half_set = dict(ATTRS, requiredClusterWidth=2)  # height and depth still 0
    _refused(cudaError.cudaErrorInvalidClusterSize,
             lambda: launch_rules.check_cluster_launch(PROPS, half_set, "k", (8, 1, 1), (128, 1, 1), 0, None))
    assert not launch_rules.is_cluster_kernel(ATTRS)
    assert launch_rules.check_cluster_launch(PROPS, ATTRS, "k", (7, 1, 1), (128, 1, 1), 0, None) is None


def test_a_device_without_clusters_refuses_them():
    a100 = sim_properties(0, 1 << 30)
    assert a100["clusterLaunch"] == 0 and a100["major"] == 8
    _refused(cudaError.cudaErrorNotSupported,
             lambda: launch_rules.check_cluster_launch(a100, ATTRS, "k", (8, 1, 1), (128, 1, 1), 0, (2, 1, 1)))
    assert launch_rules.check_cluster_launch(a100, ATTRS, "k", (8, 1, 1), (128, 1, 1), 0, None) is None
    assert launch_rules.max_potential_cluster_size(a100, ATTRS, 128, 0) == 0


def test_occupancy_of_clusters():
    """16 blocks of 128 threads per multiprocessor (by warps), 16
    multiprocessors a cluster may span, 132 // 16 = 8 such groups."""
    assert launch_rules.active_blocks_per_sm(PROPS, ATTRS, 128, 0) == 16
    assert launch_rules.max_potential_cluster_size(PROPS, ATTRS, 128, 0) == 8
    assert launch_rules.max_potential_cluster_size(PROPS, dict(ATTRS, nonPortableClusterSizeAllowed=1), 128, 0) == 16
    fixed = dict(ATTRS, requiredClusterWidth=2, requiredClusterHeight=3, requiredClusterDepth=1)
    assert launch_rules.max_potential_cluster_size(PROPS, fixed, 128, 0) == 6
    assert launch_rules.max_active_clusters(PROPS, ATTRS, "k", (128, 1, 1), 0, (2, 1, 1)) == 8 * (256 // 2)
    assert launch_rules.max_active_clusters(PROPS, ATTRS, "k", (128, 1, 1), 0, (8, 1, 1)) == 8 * 32
    assert launch_rules.max_active_clusters(PROPS, fixed, "k", (128, 1, 1), 0, None) == 8 * (256 // 6)
    # A block taking a whole multiprocessor's shared memory: one per multiprocessor.
    big = PROPS["sharedMemPerBlockOptin"]
    assert launch_rules.max_potential_cluster_size(PROPS, ATTRS, 128, big) == 8
    assert launch_rules.max_active_clusters(PROPS, ATTRS, "k", (128, 1, 1), big, (8, 1, 1)) == 8 * 2
    _refused(cudaError.cudaErrorInvalidClusterSize,
             lambda: launch_rules.max_active_clusters(PROPS, ATTRS, "k", (128, 1, 1), 0, None))
    _refused(cudaError.cudaErrorInvalidClusterSize,
             lambda: launch_rules.max_active_clusters(PROPS, fixed, "k", (128, 1, 1), 0, (2, 1, 1)))


# ---------------------------------------------------------------- the cubin

@requires_nvcc
def test_the_cubin_says_a_kernel_s_cluster_shape(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text("__global__ void __cluster_dims__(2, 3, 1) fixed(int *p) { p[0] = 1; }\n"
                      "__global__ void __cluster_dims__() must(int *p) { p[0] = 1; }\n"
                      "__global__ void __launch_bounds__(256, 1, 4) bounded(int *p) { p[0] = 1; }\n"
                      "__global__ void plain(int *p) { p[0] = 1; }\n")
    cubin = tmp_path / "k.cubin"
    subprocess.run([nvcc_path(), "-arch=sm_90", "-cubin", "-o", str(cubin), str(source)], check=True,
                   capture_output=True, timeout=300)
    resources = fatbin.cubin_resources(cubin.read_bytes(), 90)
    fixed, must = resources["_Z5fixedPi"], resources["_Z4mustPi"]
    bounded, plain = resources["_Z7boundedPi"], resources["_Z5plainPi"]
    assert (fixed.cluster_dims, fixed.explicit_cluster, fixed.max_cluster_blocks) == ((2, 3, 1), True, None)
    assert (must.cluster_dims, must.explicit_cluster) == (None, True)
    assert (bounded.cluster_dims, bounded.explicit_cluster, bounded.max_cluster_blocks) == (None, False, 4)
    assert (plain.cluster_dims, plain.explicit_cluster, plain.max_cluster_blocks) == (None, False, None)


# ---------------------------------------------------------------- the wire and the sim

def test_the_launch_op_s_cluster_is_optional_and_checked():
    header = {"op": "launch", "seq": 1, "fn": 1, "grid": [8, 1, 1], "block": [32, 1, 1], "shmem": 0, "stream": 0,
              "cooperative": 0}
    assert protocol.check_header(dict(header)) == "launch"
    assert protocol.check_header(dict(header, cluster=[2, 1, 1])) == "launch"
    with pytest.raises(ProtocolError):
        protocol.check_header(dict(header, cluster="2x1x1"))


def test_the_sim_s_compute_capability_option(monkeypatch):
    monkeypatch.setenv("RCUDA_SIM_COMPUTE_CAPABILITY", "9.0")
    device = SimBackend(1).open_device(0)
    props = device.properties()
    assert (props["major"], props["minor"], props["clusterLaunch"]) == (9, 0, 1)
    assert device.attributes()["cudaDevAttrClusterLaunch"] == 1
    monkeypatch.setenv("RCUDA_SIM_COMPUTE_CAPABILITY", "90")
    assert SimBackend(1).open_device(0).properties()["major"] == 9
    monkeypatch.setenv("RCUDA_SIM_COMPUTE_CAPABILITY", "7.5")
    with pytest.raises(ValueError, match="RCUDA_SIM_COMPUTE_CAPABILITY"):
        SimBackend(1)
    monkeypatch.delenv("RCUDA_SIM_COMPUTE_CAPABILITY")
    props = SimBackend(1).open_device(0).properties()
    assert (props["major"], props["clusterLaunch"]) == (8, 0)


# ---------------------------------------------------------------- the cupy backend's structures

LAUNCH_STRUCTS = [cupy_backend.CUlaunchConfig, cupy_backend.CUlaunchAttribute, cupy_backend.CUlaunchAttributeValue]
LAUNCH_CONSTANTS = ["CU_LAUNCH_ATTRIBUTE_COOPERATIVE", "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION"]


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    """What the C compiler says of cuda.h's launch structures."""
    from cuda_h_layout import report

    return report(tmp_path_factory.mktemp("launch_layout"), LAUNCH_STRUCTS, LAUNCH_CONSTANTS + [
        f"CU_FUNC_ATTRIBUTE_{n}" for n in (
            "CLUSTER_SIZE_MUST_BE_SET", "REQUIRED_CLUSTER_WIDTH", "REQUIRED_CLUSTER_HEIGHT", "REQUIRED_CLUSTER_DEPTH",
            "NON_PORTABLE_CLUSTER_SIZE_ALLOWED", "CLUSTER_SCHEDULING_POLICY_PREFERENCE")])


@pytest.mark.parametrize("structure", LAUNCH_STRUCTS, ids=lambda s: s.__name__)
def test_the_launch_structures_are_laid_out_as_cuda_h_says(header, structure):
    from cuda_h_layout import check_structure

    check_structure(header, structure)


def test_the_launch_constants_are_cuda_h_s(header):
    for constant in LAUNCH_CONSTANTS:
        assert getattr(cupy_backend, constant) == header[constant][0], constant
    for field, number in cupy_backend.CLUSTER_FUNCTION_ATTRIBUTES.items():
        words = {"clusterDimMustBeSet": "CLUSTER_SIZE_MUST_BE_SET"}.get(field)
        if words is None:
            words = "".join(f"_{c}" if c.isupper() else c.upper() for c in field)
        assert number == header[f"CU_FUNC_ATTRIBUTE_{words}"][0], field


def test_the_cupy_backend_launches_clusters_with_cu_launch_kernel_ex(monkeypatch):
    """_launch_ex's call, with a fake driver: the config, its attributes and
    a pointer per parameter into the packed buffer."""
    seen = {}

    def fake_launch_kernel_ex(config_pointer, handle, params, extra):
        config = config_pointer._obj
        seen["config"] = (config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX, config.blockDimY,
                          config.blockDimZ, config.sharedMemBytes, config.hStream, config.numAttrs)
        attrs = (cupy_backend.CUlaunchAttribute * config.numAttrs).from_address(config.attrs)
        seen["attrs"] = [(a.id, tuple(getattr(a.value.clusterDim, d) for d in "xyz"), a.value.cooperative)
                         for a in attrs]
        seen["handle"], seen["extra"] = handle, extra
        seen["params"] = [ctypes.cast(params[i], ctypes.POINTER(ctypes.c_int)).contents.value for i in range(2)]
        return 0

    monkeypatch.setattr(cupy_backend, "_cu_launch_kernel_ex", lambda: fake_launch_kernel_ex)
    device = types.SimpleNamespace(_streams={3: 0x5000}, index=0, _cuda=lambda what: contextlib.nullcontext())
    function = types.SimpleNamespace(handle=0x1234, name="k", layout=types.SimpleNamespace(offsets=(0, 8)))
    buffer = ctypes.create_string_buffer(struct.pack("<i4xi4x", 11, 22), 16)
    for cooperative in (False, True):
        pointers = cupy_backend.param_pointers(function.layout, buffer)
        cupy_backend.CupyDevice._launch_ex(device, function, (8, 6, 1), (128, 1, 1), pointers, 256, 3, cooperative,
                                           (2, 3, 1))
        assert seen["config"] == (8, 6, 1, 128, 1, 1, 256, 0x5000, 2 if cooperative else 1)
        assert seen["attrs"][0][:2] == (cupy_backend.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, (2, 3, 1))
        if cooperative:
            assert seen["attrs"][1][0] == cupy_backend.CU_LAUNCH_ATTRIBUTE_COOPERATIVE and seen["attrs"][1][2] == 1
        assert (seen["handle"], seen["extra"], seen["params"]) == (0x1234, None, [11, 22])
