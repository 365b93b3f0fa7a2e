"""A GPU server's session thread without a GPU: tests/stand_in_driver.c
built as the driver library (the batch executor's and the tensor maps') (device memory is host memory, calls are
logged) and tests/fake_cuda.py as CuPy, under a DeviceService on the cupy
backend.  For the tests of C's batch executor and served requests
(conftest.py's `stand_in`, `driver` and `service` fixtures) and for
benchmarks/micro/served_requests.py."""
from __future__ import annotations

import contextlib
import ctypes
import shutil
import subprocess
import sys
import types
from pathlib import Path

SOURCE = Path(__file__).with_name("stand_in_driver.c")

#: The kinds of call the stand-in logs (its enum).
LAUNCH, MEMSET, DTOD, HTOD, EVENT_RECORD, WAIT, DTOH = 1, 2, 3, 4, 5, 6, 7


class Call(ctypes.Structure):  # tests/stand_in_driver.c's struct stand_in_call
    _fields_ = [("kind", ctypes.c_int), ("context", ctypes.c_void_p), ("function", ctypes.c_void_p),
                ("stream", ctypes.c_void_p), ("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3),
                ("shared_mem", ctypes.c_uint32), ("dst", ctypes.c_uint64), ("src", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("value", ctypes.c_uint64), ("param_bytes", ctypes.c_uint32),
                ("params", ctypes.c_uint8 * 4096)]


def build(directory: Path, optimise: str = "-O1") -> ctypes.CDLL | None:
    """The stand-in driver built in `directory` and opened (its `path`
    set), or None without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    target = directory / "libcuda_stand_in.so"
    subprocess.run([compiler, "-shared", "-fPIC", optimise, "-o", str(target), str(SOURCE)], check=True)
    library = ctypes.CDLL(str(target))
    library.stand_in_call_at.restype = ctypes.POINTER(Call)
    library.stand_in_fail.argtypes = [ctypes.c_void_p, ctypes.c_int]
    library.stand_in_set_current.argtypes = [ctypes.c_void_p]
    library.stand_in_layout.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]
    library.stand_in_tensor_map.restype = ctypes.POINTER(ctypes.c_uint8 * 128)
    library.path = str(target)
    return library


def image_layout(driver, function: int, layout) -> None:
    """The stand-in's `function` has its parameters where `layout` (a
    ParamLayout) says, in its image: what kernelParams are copied into."""
    array = ctypes.c_uint32 * max(len(layout.offsets), 1)
    offsets, sizes = array(*layout.offsets), array(*layout.sizes)
    assert driver.stand_in_layout(function, len(layout.offsets), offsets, sizes) == 0


def tensor_map(driver) -> bytes:
    """The last tensor map the stand-in encoded."""
    return bytes(driver.stand_in_tensor_map().contents)


def calls(driver) -> list[Call]:
    """What the stand-in was called with, in order, since its last reset."""
    return [driver.stand_in_call_at(i).contents for i in range(driver.stand_in_call_count())]


def open_lane(gpu_service):
    """A lane on loopback: the service's end becomes its lane, opened (as
    after `open`); the client's end (a Lane) is returned."""
    import socket
    from rcuda.lane import Lane, set_timeouts

    with socket.create_server(("127.0.0.1", 0)) as listener:
        client_end = socket.create_connection(listener.getsockname())
        server_end, _ = listener.accept()
    for end in (client_end, server_end):
        set_timeouts(end, 5.0, 5.0)
    gpu_service._lane = gpu_service._peer = Lane(server_end, max_payload=1 << 26)
    return Lane(client_end)


@contextlib.contextmanager
def service(driver_path: str):
    """A DeviceService whose device is a CupyDevice of the stand-ins (its
    `gpu`: the fake CuPy's GPU); CuPy and the driver library are put back
    afterwards."""
    import zmq
    from fake_cuda import PinnedPool
    from rcuda.server.backends import cuda_batches, cuda_jit, cuda_tensor_maps, cupy_backend
    from rcuda.server.device_service import DeviceService

    saved = sys.modules.get("cupy"), cuda_batches.DRIVER_LIBRARY, cuda_jit._driver, cuda_tensor_maps._driver
    pool = PinnedPool()
    sys.modules["cupy"] = pool.module()
    cuda_batches.DRIVER_LIBRARY = driver_path
    gpu = pool.gpu()
    cuda_jit._driver = lambda: gpu.libcuda
    cuda_tensor_maps._driver = lambda: ctypes.CDLL(driver_path)
    context = zmq.Context()
    gpu_service = DeviceService(context, types.SimpleNamespace(), 0, "127.0.0.1")
    try:
        gpu_service.device = cupy_backend.CupyDevice(gpu, gpu, 0, None, None)
        gpu_service.gpu = gpu
        yield gpu_service
    finally:
        gpu_service.socket.close()
        context.term()
        cupy, cuda_batches.DRIVER_LIBRARY, cuda_jit._driver, cuda_tensor_maps._driver = saved
        if cupy is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = cupy
