"""Where device pointers lie (docs/design.md "Pointers"): each server's driver
reserves its GPUs' address windows and the program's VMM window, taking the
client's address only as a hint, and the client settles with that.  Checked
with sim servers that ignore hints (RCUDA_SIM_ADDRESSES=own, as an H100's
driver did for 0x6000_0000_0000): two of them hand out the same addresses, so
every window collides and must be moved; and the cupy backend's reservations
against a stand-in driver that ignores hints, as cuMemAddressReserve's
documentation allows."""
from __future__ import annotations

import ctypes
import os

import pytest

from conftest import requires_nvcc, run_program, start_server
from program_paths import check_passed, check_section
from rcuda.binaries import dropin_dir
from rcuda.client.memory import address_space
from rcuda.errors import CudaError, cudaError
from rcuda.protocol import VA_WINDOW_SIZE
from rcuda.server.backends import cuda_vmm

SECTIONS = ["device_windows", "mapped", "vmm", "pinned"]
KERNELS = "driver_memory_kernels.py"  # its addWords is address_windows.cu's


@pytest.fixture(scope="module", params=["own", "hint"])
def result(request, compile_cuda):
    """address_windows.cu on four GPUs, two on each of two sim servers."""
    from conftest import CUDA_SOURCES
    env = {**os.environ, "RCUDA_SIM_ADDRESSES": request.param}
    servers = [start_server("--backend", "sim", "--devices", "2", "--kernels", str(CUDA_SOURCES / KERNELS),
                            env=env) for _ in range(2)]
    try:
        binary = compile_cuda("address_windows.cu", f"-L{dropin_dir()}", "-l:libcuda.so.1")
        yield run_program(binary, servers)
    finally:
        for server in servers:
            server.stop()


pytestmark = requires_nvcc


@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


def test_whole_program_passes(result):
    check_passed(result, "address_windows.cu")


# ---------------------------------------------------------------- the client's claims


def test_a_window_that_collides_here_is_moved_until_it_can_be_claimed():
    taken = address_space.claim_slot(VA_WINDOW_SIZE)  # another GPU's window, say
    hint = address_space.claim_slot(VA_WINDOW_SIZE)
    answers = [taken, taken]  # a driver that keeps offering the taken range, then one that is free
    asked = []

    def move(new_hint):
        asked.append(new_hint)
        return answers.pop(0) if answers else new_hint

    settled = address_space.settle(VA_WINDOW_SIZE, hint, taken, move, "GPU9's device address window")
    try:
        assert settled == asked[-1] and len(asked) == 3 and settled != taken
        assert address_space.claimed(settled, VA_WINDOW_SIZE)
    finally:
        address_space.unclaim(settled)
        address_space.unclaim(taken)


def test_a_window_the_server_keeps_where_it_collides_is_an_error():
    taken = address_space.claim_slot(VA_WINDOW_SIZE)
    hint = address_space.claim_slot(VA_WINDOW_SIZE)
    try:
        with pytest.raises(OSError, match="GPU9's device address window: no room"):
            address_space.settle(VA_WINDOW_SIZE, hint, taken, lambda new_hint: taken, "GPU9's device address window")
        assert not address_space.claimed(hint, 1)
    finally:
        address_space.unclaim(taken)


def test_mapped_memory_freed_in_a_window_gives_its_pages_back_to_the_claim():
    base = address_space.claim_slot(VA_WINDOW_SIZE)
    memory = os.memfd_create("test")
    try:
        os.ftruncate(memory, 8192)
        assert address_space.place(base + 4096, 8192, memory)
        ctypes.memmove(base + 4096, b"mapped", 6)
        assert ctypes.string_at(base + 4096, 6) == b"mapped"
        address_space.unmap(base + 4096, 8192)
        assert not address_space.claim(base + 4096, 4096)  # still claimed: nothing else can go there
    finally:
        os.close(memory)
        address_space.unclaim(base)


# ---------------------------------------------------------------- the cupy backend's driver calls


class HintlessDriver:
    """The CUDA driver's VMM calls as documented, on no GPU: a reservation
    goes where the driver likes (cuMemAddressReserve's addr is a hint, and
    this driver takes none), and cuMemMap maps only inside a reservation.
    Pointer arguments come as ctypes.byref(x), x at ._obj."""

    def __init__(self):
        self.reserved: dict[int, int] = {}
        self.mapped: dict[int, int] = {}
        self.released: list[int] = []
        self._next = 0x7F00_0000_0000

    def cuMemGetAllocationGranularity(self, out, prop, option):
        out._obj.value = 2 << 20
        return 0

    def cuMemAddressReserve(self, out, size, alignment, addr, flags):
        self._next -= size
        self.reserved[self._next] = size
        out._obj.value = self._next
        return 0

    def cuMemAddressFree(self, ptr, size):
        return 0 if self.reserved.pop(ptr, None) == size else 1

    def cuMemCreate(self, out, size, prop, flags):
        out._obj.value = 1000 + len(self.mapped) + len(self.released)
        return 0

    def cuMemMap(self, ptr, size, offset, handle, flags):
        inside = any(b <= ptr and ptr + size <= b + s for b, s in self.reserved.items())
        if not inside:
            return 1  # CUDA_ERROR_INVALID_VALUE
        if offset:
            return 801  # CUDA_ERROR_NOT_SUPPORTED: the offset "currently must be zero" (CUDA 13.0 on an H100)
        self.mapped[ptr] = size
        return 0

    def cuMemUnmap(self, ptr, size):
        return 0 if self.mapped.pop(ptr, None) == size else 1

    def cuMemSetAccess(self, ptr, size, desc, count):
        return 0

    def cuMemRelease(self, handle):
        self.released.append(handle)
        return 0


@pytest.fixture
def hintless(monkeypatch):
    fake = HintlessDriver()
    monkeypatch.setattr(cuda_vmm, "driver", lambda: fake)
    return fake


def test_cupy_windows_are_where_the_driver_reserved_them(hintless):
    window = cuda_vmm.Reservation(0, VA_WINDOW_SIZE, 0x1000_0000_0000)
    assert window.base != 0x1000_0000_0000 and hintless.reserved[window.base] == VA_WINDOW_SIZE
    allocations = cuda_vmm.AddressWindow(0, window)
    ptr = allocations.allocate(3 << 20)
    assert window.base <= ptr < window.base + VA_WINDOW_SIZE and hintless.mapped[ptr] == 4 << 20
    allocations.free_all()
    window.release()
    assert not hintless.reserved and not hintless.mapped


def test_cupy_program_mappings_go_into_the_sessions_vmm_window(hintless):
    vmm = cuda_vmm.Reservation(0, 1 << 30, 0x6000_0000_0000)
    mappings = cuda_vmm.ProgramMappings(0)
    handle = mappings.create(2 << 20)
    mappings.map(vmm.base + (4 << 20), 2 << 20, 0, handle)  # the address the client handed out
    assert hintless.mapped == {vmm.base + (4 << 20): 2 << 20}
    mappings.unmap(vmm.base + (4 << 20), 2 << 20)
    vmm.release()
    assert not hintless.reserved


def test_pinned_memory_on_zeromq_links(compile_cuda):
    """Every call through Python's link: attaching page-locked memory there too."""
    from program_paths import ON_SOCKETS, run_on_sim
    compile_driver = lambda source: compile_cuda(source, f"-L{dropin_dir()}", "-l:libcuda.so.1")  # noqa: E731
    result = run_on_sim(compile_driver, "address_windows.cu", KERNELS, "pinned", "mapped", env=ON_SOCKETS)
    check_section(result, "pinned", "mapped")


def test_on_a_gpu(compile_cuda):
    """Two GPU servers (GPU0 of this machine twice where it has one): their
    drivers place the windows, the program settles them."""
    from program_paths import run_on_gpu
    result = run_on_gpu(compile_cuda, "address_windows.cu", devices=2, one_server=False,
                        flags=(f"-L{dropin_dir()}", "-l:libcuda.so.1"))
    check_passed(result, "address_windows.cu")


def test_the_service_maps_program_memory_on_the_cupy_backend(hintless, service):
    """The device service's VMM handlers on a CupyDevice (CuPy and the
    driver stood in for, its VMM calls going to the driver above): what
    every cuMemCreate and cuMemMap of a program, and every page-locked block
    a kernel is given (client/memory/pinned.py), asks of a GPU server."""
    handle = service._handlers
    vmm = service.windows.vmm = cuda_vmm.Reservation(0, 1 << 30, 0x6000_0000_0000)
    handle["vmm_create"]({"handle": 7, "size": 4 << 20}, [])
    with pytest.raises(CudaError) as refused:  # as a GPU's driver refuses it, before asking it
        handle["vmm_map"]({"ptr": vmm.base, "size": 2 << 20, "offset": 2 << 20, "handle": 7}, [])
    assert refused.value.status == cudaError.cudaErrorNotSupported and not hintless.mapped
    handle["vmm_map"]({"ptr": vmm.base, "size": 4 << 20, "offset": 0, "handle": 7}, [])
    assert hintless.mapped == {vmm.base: 4 << 20}
    with pytest.raises(CudaError) as refused:  # no shareable handle types on this backend
        handle["vmm_create"]({"handle": 8, "size": 2 << 20, "shareable": 1}, [])
    assert refused.value.status == cudaError.cudaErrorNotSupported
    handle["vmm_release"]({"handle": 7}, [])
    assert not hintless.released  # mapped still
    handle["vmm_unmap"]({"ptr": vmm.base}, [])
    assert not hintless.mapped and len(hintless.released) == 1
    vmm.release()
