"""A stand-in for what the cupy backend calls of CuPy (its runtime and
driver bindings, and its pinned memory pool), modelling the order CUDA
documents between streams, so that a read or a wait the backend gets wrong
shows without a GPU.  The sim runs every request at once, in order, and
hides such faults.

- Work runs lazily: only when something waits for it (a synchronisation,
  an event query, a copy CUDA makes synchronous), and then with just what
  it must come after: the work before it in its stream; for the legacy
  stream (0), the work before it in every blocking stream, and for a
  blocking stream, the work before it in the legacy stream (a non-blocking
  stream comes after no other); an event it waits for.  Work CUDA leaves
  unordered runs in whatever order it is waited for, so a read not ordered
  after a write sees the old bytes.
- A kernel the test holds (`hold`) is still running: whatever must wait
  for it raises StillRunning, where a GPU would stall.
- A page-locked host allocation (cudaHostAlloc, which CuPy's pinned pool
  makes for a size it holds no free buffer of) waits for all work issued
  before it: the CUDA C Programming Guide's implicit synchronisation.  So
  does loading a kernel: a module's kernels load lazily (Linux's default
  since CUDA 12.2), at cuModuleGetFunction or the first launch, unless
  cuFuncLoad loaded them (the Programming Guide's lazy loading hazards:
  loading may synchronise the context).
- Copies: pageable host memory is read when the copy is issued (the driver
  stages it, after waiting for the copy's stream) and written before the
  call returns (with the stream's work before it); device and pinned
  memory are read and written when the copy runs.
"""
from __future__ import annotations

import ctypes
import itertools
import types
import weakref

import numpy as np

NON_BLOCKING = 0x01
NOT_READY = 600
DEVICE_BASE = 0x9000_0000_0000  # not a user-space host address


class StillRunning(AssertionError):
    """A wait for a kernel the test holds: on a GPU, the caller would stall."""


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int):
        super().__init__(f"CUDA runtime error {status}")
        self.status = status


class CUDADriverError(RuntimeError):
    def __init__(self, status: int):
        super().__init__(f"CUDA driver error {status}")
        self.status = status


class _Work:
    __slots__ = ("run", "after", "what", "held", "done")

    def __init__(self, run, after, what: str, held: bool):
        self.run, self.after, self.what, self.held, self.done = run, after, what, held, False


class FakeGpu:
    """One GPU's context: `runtime` and `driver` stand in for cupy.cuda's.
    Kernels are Python functions of their parameter buffer, laid out as
    their image's layout says (a ParamLayout: where each parameter goes),
    which the launch's pointers (kernelParams) are copied into."""

    memcpyHostToDevice, memcpyDeviceToHost, memcpyDeviceToDevice = 1, 2, 3
    CUDARuntimeError = CUDARuntimeError
    CUDADriverError = CUDADriverError

    def __init__(self, pinned: "PinnedPool"):
        self.pinned = pinned
        self.runtime = self.driver = self
        self._memory: dict[int, bytearray] = {}
        self._next_ptr = DEVICE_BASE
        self._handles = itertools.count(0x100)
        self._streams: dict[int, list] = {0: [0, None]}  # handle -> [flags, last work]
        self._events: dict[int, _Work | None] = {}
        self._kernels: dict[int, tuple[str, object, object]] = {}
        self._loaded: set[int] = set()
        self._images: list[dict] = []
        self._modules: dict[int, dict[str, int]] = {}  # CUmodule -> {name: CUfunction}
        self.libcuda = _JitDriver(self)  # what server/backends/cuda_jit.py calls through ctypes
        self._held: set[str] = set()
        self._issued: list[_Work] = []

    # -- the test's side

    def kernel(self, name: str, body, layout, loaded: bool = True) -> int:
        """A kernel's handle (what moduleGetFunction gives): `body(params, gpu)`
        runs it, its parameters where `layout` (a ParamLayout) puts them."""
        handle = next(self._handles)
        self._kernels[handle] = (name, body, layout)
        if loaded:
            self._loaded.add(handle)
        return handle

    def image(self, kernels: dict) -> bytes:
        """A module image (a cubin, to the backend) of kernels {name: (body, layout)}."""
        self._images.append(kernels)
        return b"\x7fELF" + (len(self._images) - 1).to_bytes(4, "little")

    def hold(self, name: str) -> None:
        self._held.add(name)

    def release(self, name: str) -> None:
        self._held.discard(name)
        for work in self._issued:
            if work.what == name:
                work.held = False

    def read(self, ptr: int, size: int) -> bytes:
        return bytes(self._device(ptr, size))

    def write(self, ptr: int, data: bytes) -> None:
        self._device(ptr, len(data))[:] = data

    # -- memory

    def _device(self, ptr: int, size: int) -> memoryview:
        for base, block in self._memory.items():
            if base <= ptr and ptr + size <= base + len(block):
                return memoryview(block)[ptr - base:ptr - base + size]
        raise AssertionError(f"{ptr:#x}..+{size} is not device memory")

    def _is_device(self, ptr: int) -> bool:
        return ptr >= DEVICE_BASE

    def malloc(self, size: int) -> int:
        ptr, self._next_ptr = self._next_ptr, self._next_ptr + (size + 0xFFFF & ~0xFFFF)
        self._memory[ptr] = bytearray(size)
        return ptr

    def free(self, ptr: int) -> None:
        self.synchronize_all("cudaFree")
        self._memory.pop(ptr, None)

    def _load(self, ptr: int, size: int) -> bytes:
        return self.read(ptr, size) if self._is_device(ptr) else ctypes.string_at(ptr, size)

    def _store(self, ptr: int, data: bytes) -> None:
        if self._is_device(ptr):
            self.write(ptr, data)
        else:
            ctypes.memmove(ptr, data, len(data))

    def memcpyAsync(self, dst: int, src: int, size: int, kind: int, stream: int) -> None:
        if not self._is_device(src) and not self.pinned.holds(src, size):
            self.streamSynchronize(stream)  # pageable: staged now, once the stream's work is done
            staged = ctypes.string_at(src, size)
            load = lambda: staged  # noqa: E731
        else:
            load = lambda: self._load(src, size)  # noqa: E731
        work = self._issue(stream, lambda: self._store(dst, load()), f"memcpy of {size} bytes")
        if not self._is_device(dst) and not self.pinned.holds(dst, size):
            self._run(work)  # into pageable memory: done when the call returns

    def memsetAsync(self, ptr: int, value: int, size: int, stream: int) -> None:
        self._issue(stream, lambda: self.write(ptr, bytes([value]) * size), "memset")

    def _load_kernel(self, function: int) -> None:
        if function not in self._loaded:
            self.synchronize_all(f"loading kernel {self._kernels[function][0]}")
            self._loaded.add(function)

    def moduleGetFunction(self, module: int, name: str) -> int:
        function = self._modules[module][name]
        self._load_kernel(function)
        return function

    def funcGetAttribute(self, attribute: int, function: int) -> int:
        return 1024 if attribute == 0 else 0  # CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK

    def launchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, kernel_params, extra) -> None:
        self._load_kernel(f)
        name, body, layout = self._kernels[f]
        assert kernel_params and not extra, "the backend passes a pointer per parameter (kernelParams)"
        # As the driver does: each parameter copied from its pointer to where the kernel's image has it.
        params = bytearray(layout.buffer_size)
        pointers = (ctypes.c_void_p * max(len(layout.offsets), 1)).from_address(kernel_params)
        for pointer, offset, size in zip(pointers, layout.offsets, layout.sizes):
            params[offset:offset + size] = ctypes.string_at(pointer, size)
        params = bytes(params)
        self._issue(stream, lambda: body(params, self), name)

    # -- streams and events

    def _issue(self, stream: int, run, what: str, after=()) -> _Work:
        flags, last = self._streams[stream]
        before = [last]
        if stream == 0:
            before += [s[1] for h, s in self._streams.items() if h and not s[0] & NON_BLOCKING]
        elif not flags & NON_BLOCKING:
            before.append(self._streams[0][1])
        work = _Work(run, [w for w in (*before, *after) if w is not None and not w.done], what, what in self._held)
        self._streams[stream][1] = work
        self._issued.append(work)
        return work

    def _run(self, work: _Work | None) -> None:
        if work is None or work.done:
            return
        for earlier in work.after:
            self._run(earlier)
        if work.held:
            raise StillRunning(f"waits for {work.what}, which is still running")
        work.run()
        work.done = True

    def _ready(self, work: _Work | None) -> int:
        try:
            self._run(work)
        except StillRunning:
            return NOT_READY
        return 0

    def synchronize_all(self, what: str) -> None:
        try:
            for work in self._issued:
                self._run(work)
        except StillRunning as exc:
            raise StillRunning(f"{what} {exc}") from None

    def streamCreateWithFlags(self, flags: int) -> int:
        handle = next(self._handles)
        self._streams[handle] = [flags, None]
        return handle

    def streamCreateWithPriority(self, flags: int, priority: int) -> int:
        return self.streamCreateWithFlags(flags)

    def streamDestroy(self, stream: int) -> None:
        self._streams.pop(stream)

    def streamSynchronize(self, stream: int) -> None:
        self._run(self._streams[stream][1])

    def streamQuery(self, stream: int) -> int:
        return self._ready(self._streams[stream][1])

    def streamWaitEvent(self, stream: int, event: int, flags: int) -> None:
        self._issue(stream, lambda: None, "cudaStreamWaitEvent", after=[self._events[event]])

    def eventCreateWithFlags(self, flags: int) -> int:
        handle = next(self._handles)
        self._events[handle] = None
        return handle

    def eventDestroy(self, event: int) -> None:
        self._events.pop(event)

    def eventRecord(self, event: int, stream: int) -> None:
        self._events[event] = self._issue(stream, lambda: None, "cudaEventRecord")

    def eventQuery(self, event: int) -> int:
        return self._ready(self._events[event])

    def eventSynchronize(self, event: int) -> None:
        self._run(self._events[event])

    def deviceSynchronize(self) -> None:
        self.synchronize_all("cudaDeviceSynchronize")

    # -- what the backend asks of the device at open

    def setDevice(self, index: int) -> None:
        pass

    def getDeviceProperties(self, index: int) -> dict:
        return {"name": b"fake GPU", "totalGlobalMem": 1 << 30, "uuid": bytes(16), "luid": bytes(8)}

    def deviceGetAttribute(self, attribute: int, index: int) -> int:
        return 0


class _JitDriver:
    """libcuda's module calls as server/backends/cuda_jit.py makes them
    (pointer arguments come as ctypes.byref(x), x at ._obj)."""

    def __init__(self, gpu: FakeGpu):
        self._gpu = gpu

    def cuModuleLoadDataEx(self, out, image, count, options, values) -> int:
        gpu = self._gpu
        kernels = gpu._images[int.from_bytes(image.raw[4:8], "little")]
        module = next(gpu._handles)
        gpu._modules[module] = {name: gpu.kernel(name, body, layout, loaded=False)
                                for name, (body, layout) in kernels.items()}
        out._obj.value = module
        return 0

    def cuModuleGetFunctionCount(self, out, module) -> int:
        out._obj.value = len(self._gpu._modules[module])
        return 0

    def cuModuleEnumerateFunctions(self, functions, count, module) -> int:
        for i, function in enumerate(list(self._gpu._modules[module].values())[:count]):
            functions[i] = function
        return 0

    def cuFuncLoad(self, function) -> int:
        self._gpu._load_kernel(function)
        return 0


class PinnedPool:
    """CuPy's pinned memory pool (cupy.cuda.alloc_pinned_memory): buffers
    kept by size (rounded up to 512 bytes) for reuse; a size with none free
    is a page-locked allocation, which waits for the GPUs' work."""

    def __init__(self):
        self.gpus: list[FakeGpu] = []
        self._free: dict[int, list[np.ndarray]] = {}
        self._blocks: list[tuple[int, int]] = []  # (address, size) of every buffer
        self.allocations = 0

    def gpu(self) -> FakeGpu:
        gpu = FakeGpu(self)
        self.gpus.append(gpu)
        return gpu

    def holds(self, ptr: int, size: int) -> bool:
        return any(base <= ptr and ptr + size <= base + length for base, length in self._blocks)

    def alloc_pinned_memory(self, size: int) -> np.ndarray:
        size = -(-size // 512) * 512
        free = self._free.setdefault(size, [])
        if free:
            block = free.pop()
        else:
            for gpu in self.gpus:
                gpu.synchronize_all("a page-locked host allocation (cudaHostAlloc)")
            block = np.zeros(size, np.uint8)
            self._blocks.append((block.ctypes.data, size))
            self.allocations += 1
        view = block[:]
        weakref.finalize(view, free.append, block)  # back in the pool once unused, as CuPy's
        return view

    def warm(self, *sizes: int) -> None:
        """A pool that already made buffers of these sizes (a server that ran a while)."""
        buffers = [self.alloc_pinned_memory(size) for size in sizes]
        del buffers

    def module(self):
        """What `import cupy` gives the backend."""
        return types.SimpleNamespace(cuda=types.SimpleNamespace(alloc_pinned_memory=self.alloc_pinned_memory))
