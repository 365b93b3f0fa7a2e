"""The sim's cuFFT (server/backends/sim_cufft.py) against numpy's FFTs, over
a fake device memory: every type, 1-3 dimensions, batches, in place with
cuFFT's padded real rows, advanced layouts, and cuFFT's errors."""
from __future__ import annotations

import numpy as np
import pytest

from rcuda.errors import CudaError
from rcuda.library_errors import LibraryError
from rcuda.server.backends.sim_cufft import (CALLS, CUFFT_C2C, CUFFT_C2R, CUFFT_D2Z, CUFFT_FORWARD, CUFFT_INVERSE,
                                       CUFFT_R2C, CUFFT_Z2D, CUFFT_Z2Z, SimPlan)
from rcuda.server.backends.sim_libraries import LibraryMemory

BASE = 0x7000_0000


class Device:
    """A flat buffer of device memory with a bump allocator."""

    def __init__(self, size: int = 1 << 22):
        self.buf = np.zeros(size, np.uint8)
        self.top = BASE
        self.mem = LibraryMemory(self._region)

    def _region(self, ptr, size, what):
        if ptr < BASE or ptr + size > BASE + self.buf.size:
            raise CudaError(1, f"{what}: out of range")
        return self.buf[ptr - BASE:ptr - BASE + size]

    def put(self, array) -> int:
        array = np.ascontiguousarray(array)
        ptr = self.alloc(array.nbytes)
        self.buf[ptr - BASE:ptr - BASE + array.nbytes] = array.view(np.uint8).ravel()
        return ptr

    def alloc(self, nbytes: int) -> int:
        ptr = self.top
        self.top += (nbytes + 255) // 256 * 256
        return ptr

    def get(self, ptr, dtype, count) -> np.ndarray:
        return self.mem.array(ptr, dtype, count).copy()


def plan(rank_n, fft_type, batch=1, **advanced) -> SimPlan:
    p = SimPlan()
    layout = dict(inembed=None, istride=1, idist=0, onembed=None, ostride=1, odist=0) | advanced
    p.make_plan_many(len(rank_n), list(rank_n), layout["inembed"], layout["istride"], layout["idist"],
                     layout["onembed"], layout["ostride"], layout["odist"], fft_type, batch)
    return p


def rand(rng, shape, dtype):
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("n", [(16,), (6, 10), (4, 6, 8), (7,), (5, 3)])
@pytest.mark.parametrize("fft_type,dtype,tol", [(CUFFT_C2C, np.complex64, 1e-4), (CUFFT_Z2Z, np.complex128, 1e-11)])
def test_complex_forward_and_inverse_unnormalised(n, fft_type, dtype, tol):
    rng = np.random.default_rng(1)
    dev, batch = Device(), 3
    x = rand(rng, (batch, *n), dtype)
    src, dst = dev.put(x), dev.alloc(x.nbytes)
    p = plan(n, fft_type, batch)
    name = "cufftExecC2C" if fft_type == CUFFT_C2C else "cufftExecZ2Z"
    axes = tuple(range(1, len(n) + 1))
    CALLS[name](dev.mem, p, src, dst, CUFFT_FORWARD)
    got = dev.get(dst, dtype, x.size).reshape(x.shape)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, np.fft.fftn(x.astype(np.complex128), axes=axes), rtol=tol, atol=tol * x.size)
    CALLS[name](dev.mem, p, dst, dst, CUFFT_INVERSE)  # in place
    back = dev.get(dst, dtype, x.size).reshape(x.shape)
    np.testing.assert_allclose(back / np.prod(n), x, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("n", [(16,), (9,), (6, 10), (4, 5, 6)])
@pytest.mark.parametrize("r2c,c2r,real,cplx,tol", [
    (CUFFT_R2C, CUFFT_C2R, np.float32, np.complex64, 1e-4),
    (CUFFT_D2Z, CUFFT_Z2D, np.float64, np.complex128, 1e-11)])
def test_real_round_trip_out_of_place(n, r2c, c2r, real, cplx, tol):
    rng = np.random.default_rng(2)
    dev, batch = Device(), 2
    x = rand(rng, (batch, *n), real)
    half = n[:-1] + (n[-1] // 2 + 1,)
    src, spec, out = dev.put(x), dev.alloc(batch * np.prod(half) * np.dtype(cplx).itemsize), dev.alloc(x.nbytes)
    names = {CUFFT_R2C: ("cufftExecR2C", "cufftExecC2R"), CUFFT_D2Z: ("cufftExecD2Z", "cufftExecZ2D")}[r2c]
    CALLS[names[0]](dev.mem, plan(n, r2c, batch), src, spec)
    axes = tuple(range(1, len(n) + 1))
    got = dev.get(spec, cplx, batch * np.prod(half)).reshape((batch, *half))
    np.testing.assert_allclose(got, np.fft.rfftn(x.astype(np.float64), axes=axes), rtol=tol, atol=tol * x.size)
    CALLS[names[1]](dev.mem, plan(n, c2r, batch), spec, out)
    back = dev.get(out, real, x.size).reshape(x.shape)
    np.testing.assert_allclose(back / np.prod(n), x, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("n", [(16,), (9,), (4, 6), (3, 4, 5)])
def test_real_round_trip_in_place_uses_padded_rows(n):
    """cuFFT's basic layout in place: each real row holds 2 * (n/2 + 1) reals."""
    rng = np.random.default_rng(3)
    dev, batch = Device(), 2
    last = 2 * (n[-1] // 2 + 1)
    padded = np.zeros((batch, *n[:-1], last), np.float32)
    x = rand(rng, (batch, *n), np.float32)
    padded[..., :n[-1]] = x
    buf = dev.put(padded)
    CALLS["cufftExecR2C"](dev.mem, plan(n, CUFFT_R2C, batch), buf, buf)
    half = n[:-1] + (n[-1] // 2 + 1,)
    spec = dev.get(buf, np.complex64, batch * np.prod(half)).reshape((batch, *half))
    axes = tuple(range(1, len(n) + 1))
    np.testing.assert_allclose(spec, np.fft.rfftn(x, axes=axes), rtol=1e-4, atol=1e-4 * x.size)
    CALLS["cufftExecC2R"](dev.mem, plan(n, CUFFT_C2R, batch), buf, buf)
    back = dev.get(buf, np.float32, padded.size).reshape(padded.shape)[..., :n[-1]]
    np.testing.assert_allclose(back / np.prod(n), x, rtol=1e-4, atol=1e-4)


def test_advanced_layout_strides_embeds_and_distances():
    """Interleaved batches (stride = batch, dist = 1) in, padded rows out."""
    rng = np.random.default_rng(4)
    dev, n, batch = Device(), (4, 6), 3
    x = rand(rng, (4, 6, batch), np.complex64)  # element (b, i, j) at (i*6 + j)*3 + b
    src = dev.put(x)
    onembed = [5, 8]  # output rows of 8, 5 rows per transform -> odist 40
    dst = dev.put(np.full(batch * 40, np.nan, np.complex64))
    p = plan(n, CUFFT_C2C, batch, inembed=[4, 6], istride=batch, idist=1, onembed=onembed, ostride=1, odist=40)
    CALLS["cufftExecC2C"](dev.mem, p, src, dst, CUFFT_FORWARD)
    out = dev.get(dst, np.complex64, batch * 40).reshape(batch, 5, 8)
    want = np.fft.fft2(np.moveaxis(x, -1, 0).astype(np.complex128))
    np.testing.assert_allclose(out[:, :4, :6], want, rtol=1e-4, atol=1e-3)
    assert np.isnan(out[:, 4, :]).all() and np.isnan(out[:, :, 6:]).all()  # the gaps are not written


def test_advanced_real_to_complex_1d_strided():
    rng = np.random.default_rng(5)
    dev, n, batch = Device(), 8, 2
    x = rand(rng, (batch, n), np.float64)
    strided = np.zeros((batch, 2 * n + 3))
    strided[:, 0:2 * n:2] = x  # istride 2, idist 2n+3
    src = dev.put(strided)
    dst = dev.put(np.zeros(batch * 7, np.complex128))
    p = plan((n,), CUFFT_D2Z, batch, inembed=[n], istride=2, idist=2 * n + 3, onembed=[5], ostride=1, odist=7)
    CALLS["cufftExecD2Z"](dev.mem, p, src, dst)
    out = dev.get(dst, np.complex128, batch * 7).reshape(batch, 7)
    np.testing.assert_allclose(out[:, :5], np.fft.rfft(x), atol=1e-12)
    assert (out[:, 5:] == 0).all()


def test_errors():
    dev = Device()
    buf = dev.alloc(1024)
    with pytest.raises(LibraryError) as e:
        plan((8,), 0x33)
    assert e.value.library_status == "CUFFT_INVALID_TYPE"
    for n, batch in (((0,), 1), ((8,), 0), ((-2, 4), 1)):
        with pytest.raises(LibraryError) as e:
            plan(n, CUFFT_C2C, batch)
        assert e.value.library_status == "CUFFT_INVALID_SIZE"
    with pytest.raises(LibraryError) as e:
        SimPlan().make_plan_many(4, [2, 2, 2, 2], None, 1, 0, None, 1, 0, CUFFT_C2C, 1)
    assert e.value.library_status == "CUFFT_INVALID_SIZE"
    with pytest.raises(LibraryError) as e:
        CALLS["cufftExecC2C"](dev.mem, SimPlan(), buf, buf, CUFFT_FORWARD)
    assert e.value.library_status == "CUFFT_INVALID_PLAN"
    with pytest.raises(LibraryError) as e:
        CALLS["cufftExecR2C"](dev.mem, plan((8,), CUFFT_C2C), buf, buf)
    assert e.value.library_status == "CUFFT_INVALID_TYPE"
    with pytest.raises(LibraryError) as e:
        CALLS["cufftExecC2C"](dev.mem, plan((8,), CUFFT_C2C), buf, buf, 0)
    assert e.value.library_status == "CUFFT_INVALID_VALUE"
    with pytest.raises(CudaError):  # a transform past the end of memory
        CALLS["cufftExecC2C"](dev.mem, plan((8,), CUFFT_C2C, 4), BASE + dev.buf.size - 64, buf, CUFFT_FORWARD)


def test_work_area():
    dev = Device()
    p = SimPlan()
    size = p.make_plan_many(1, [64], None, 1, 0, None, 1, 0, CUFFT_C2C, 2)
    assert size == p.work_size > 0
    p.set_auto_allocation(0)
    data = dev.put(np.ones(128, np.complex64))
    with pytest.raises(LibraryError) as e:
        CALLS["cufftExecC2C"](dev.mem, p, data, data, CUFFT_FORWARD)
    assert e.value.library_status == "CUFFT_NO_WORKSPACE"
    p.set_work_area(dev.alloc(size))
    CALLS["cufftExecC2C"](dev.mem, p, data, data, CUFFT_FORWARD)
    assert dev.get(data, np.complex64, 128)[0] == 64
