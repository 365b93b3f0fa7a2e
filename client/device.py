"""One remote GPU, as the application sees it: GPU<ordinal>.

Turns runtime operations into protocol messages on the device's channel and
replies back into CUDA statuses.  Error messages name the call, the device
and the server.  A sticky error (an illegal address in a kernel, say) is
remembered: from then on every call on this device fails with it, as on a
real GPU whose context is lost.
"""
from __future__ import annotations

import itertools
import logging
import threading

from rcuda import protocol
from rcuda.errors import CudaError, cudaError, is_sticky

log = logging.getLogger(__name__)


class RemoteDevice:
    def __init__(self, ordinal: int, session, local_index: int, channel, properties: dict):
        self.ordinal = ordinal
        self.session = session
        self.local_index = local_index  # the GPU's index on its server
        self.channel = channel
        self.properties = properties
        self.sticky: CudaError | None = None
        self.output_sink = None  # callable(str): where device printf output goes
        self._function_ids: dict = {}  # Kernel -> id on this device
        self._sent_modules: set[str] = set()
        self._next_function_id = itertools.count(1)
        self._function_lock = threading.Lock()

    @property
    def label(self) -> str:
        return f"GPU{self.ordinal} ({self.session.address} GPU{self.local_index})"

    def __str__(self) -> str:
        return self.label

    # ---------------------------------------------------------- messaging

    def _check_usable(self, op: str) -> None:
        if self.sticky is not None:
            raise CudaError(self.sticky.status, f"{op} on {self.label}: earlier error is sticky: "
                                                f"{self.sticky.message}")

    def request(self, op: str, frames=(), **fields) -> tuple[dict, list]:
        """A synchronous call: waits for the reply, raises CudaError on failure."""
        self._check_usable(op)
        fields["op"] = op
        reply, payload = self.channel.call(fields, frames)
        self._deliver_output(reply)
        status = reply.get("err", 0)
        if status:
            error = CudaError(status, f"{op} on {self.label}: {reply.get('msg') or ''}".rstrip(": "))
            if is_sticky(status):
                self.sticky = error
            raise error
        return reply, payload

    def post(self, op: str, frames=(), **fields) -> None:
        """An asynchronous call: errors surface at a later synchronous one."""
        self._check_usable(op)
        fields["op"] = op
        self.channel.post(fields, frames)

    def _deliver_output(self, reply: dict) -> None:
        text = reply.get("out")
        if text and self.output_sink:
            self.output_sink(text)

    # ---------------------------------------------------------- operations

    def open(self, token: str, va_base: int | None) -> None:
        self.request("open", dev=self.local_index, token=token, va_base=va_base)

    def malloc(self, size: int) -> int:
        reply, _ = self.request("malloc", size=size)
        return reply["ptr"]

    def free(self, ptr: int) -> None:
        self.request("free", ptr=ptr)

    def copy_to_device(self, dst: int, data: memoryview) -> None:
        self.request("htod", protocol.chunks(data), dst=dst, size=len(data))

    def copy_from_device(self, src: int, size: int) -> list:
        """Returns the payload frames (each has .buffer) holding the bytes."""
        _, frames = self.request("dtoh", src=src, size=size)
        if sum(len(f.buffer) for f in frames) != size:
            raise CudaError(cudaError.cudaErrorUnknown, f"dtoh on {self.label}: short reply")
        return frames

    def copy_on_device(self, dst: int, src: int, size: int) -> None:
        self.request("dtod", dst=dst, src=src, size=size)

    def memset(self, ptr: int, value: int, size: int) -> None:
        self.request("memset", ptr=ptr, value=value, size=size)

    def synchronize(self) -> None:
        self.request("sync")

    def mem_info(self) -> tuple[int, int]:
        reply, _ = self.request("mem_info")
        return reply["free"], reply["total"]

    def close(self) -> None:
        """End this device's part of the session (the server frees its memory).
        The reply also proves every earlier asynchronous message arrived."""
        if self.channel.failed:
            return
        try:
            self.channel.call({"op": "close"})
        finally:
            self.channel.close()

    # ---------------------------------------------------------- kernels

    def function_id(self, kernel) -> int:
        """The id under which `kernel` is known on this device.  The first use
        registers it (sending the module's image the first time): a
        synchronous round trip, so a kernel the server cannot run fails at
        its launch, as on a GPU."""
        fn = self._function_ids.get(kernel)
        if fn is not None:
            return fn
        with self._function_lock:
            fn = self._function_ids.get(kernel)
            if fn is not None:
                return fn
            params = kernel.params
            fn = next(self._next_function_id)
            module = kernel.module
            frames = [] if module.key in self._sent_modules else [module.image]
            self.request("function", frames, fn=fn, module=module.key, name=kernel.name,
                         offsets=list(params.offsets), sizes=list(params.sizes))
            self._sent_modules.add(module.key)
            self._function_ids[kernel] = fn
            return fn

    def launch(self, fn: int, grid, block, shared_mem: int, stream: int, params: bytes) -> None:
        self.post("launch", [params], fn=fn, grid=grid, block=block, shmem=shared_mem, stream=stream)

    def check_launch_configuration(self, grid, block, shared_mem: int) -> None:
        """What a GPU rejects at launch time, checked here against the cached
        properties so the error is synchronous as on a GPU."""
        props = self.properties
        limits_block = props.get("maxThreadsDim", [1024, 1024, 64])
        limits_grid = props.get("maxGridSize", [2**31 - 1, 65535, 65535])
        problem = None
        if min(grid) < 1 or min(block) < 1:
            problem = f"grid {tuple(grid)} / block {tuple(block)} has a zero dimension"
        elif any(b > m for b, m in zip(block, limits_block)):
            problem = f"block {tuple(block)} exceeds maxThreadsDim {tuple(limits_block)}"
        elif block[0] * block[1] * block[2] > props.get("maxThreadsPerBlock", 1024):
            problem = f"block {tuple(block)} has more than maxThreadsPerBlock threads"
        elif any(g > m for g, m in zip(grid, limits_grid)):
            problem = f"grid {tuple(grid)} exceeds maxGridSize {tuple(limits_grid)}"
        elif shared_mem > props.get("sharedMemPerBlockOptin", props.get("sharedMemPerBlock", 49152)):
            problem = f"{shared_mem} bytes of dynamic shared memory is more than the device allows"
        if problem:
            raise CudaError(cudaError.cudaErrorInvalidConfiguration, f"launch on {self.label}: {problem}")
