"""cuFFT on the sim backend: plans and their executions with numpy.

A plan is cuFFT's advanced layout, always: cufftPlan1d/2d/3d, cufftPlanMany
and every cufftMakePlan* reach `SimPlan.make_plan_many` (the client
translates them).  Executions gather the plan's elements from device memory
(strides, embeds and batch distances as cuFFT places them), transform them
with numpy in the plan's precision (complex64 for C2C/R2C/C2R, complex128
for Z2Z/D2Z/Z2D) and scatter the result, unnormalised as cuFFT's are.  The
gather copies first, so idata == odata (in place) needs nothing special
beyond the padded real rows of cuFFT's basic in-place layout."""
from __future__ import annotations

import math

import numpy as np

from rcuda.library_errors import LibraryError

CUFFT_R2C, CUFFT_C2R, CUFFT_C2C = 0x2A, 0x2C, 0x29
CUFFT_D2Z, CUFFT_Z2D, CUFFT_Z2Z = 0x6A, 0x6C, 0x69
CUFFT_FORWARD, CUFFT_INVERSE = -1, 1

#: type -> (input dtype, output dtype)
TYPES = {
    CUFFT_C2C: (np.complex64, np.complex64),
    CUFFT_R2C: (np.float32, np.complex64),
    CUFFT_C2R: (np.complex64, np.float32),
    CUFFT_Z2Z: (np.complex128, np.complex128),
    CUFFT_D2Z: (np.float64, np.complex128),
    CUFFT_Z2D: (np.complex128, np.float64),
}
NAMES = {CUFFT_C2C: "C2C", CUFFT_R2C: "R2C", CUFFT_C2R: "C2R", CUFFT_Z2Z: "Z2Z", CUFFT_D2Z: "D2Z", CUFFT_Z2D: "Z2D"}
REAL_TO_COMPLEX = (CUFFT_R2C, CUFFT_D2Z)
COMPLEX_TO_REAL = (CUFFT_C2R, CUFFT_Z2D)


class Layout:
    """Where one side's elements are: element (b, i0, i1, i2) of a batch of
    `shape` arrays is at b * dist + stride * ((i0 * embed[1] + i1) * embed[2] + i2),
    in elements of that side's type (cuFFT's advanced data layout)."""

    def __init__(self, shape: tuple, embed: tuple, stride: int, dist: int):
        self.shape, self.embed, self.stride, self.dist = shape, embed, stride, dist

    def offsets(self, batch: int) -> np.ndarray:
        """Element offsets, shaped (batch, *shape)."""
        flat = np.zeros((1,) * len(self.shape), np.int64)
        for axis, size in enumerate(self.shape):
            pitch = math.prod(self.embed[axis + 1:])
            index = np.arange(size, dtype=np.int64).reshape([-1 if a == axis else 1 for a in range(len(self.shape))])
            flat = flat + index * pitch
        batches = np.arange(batch, dtype=np.int64).reshape((-1,) + (1,) * len(self.shape))
        return batches * self.dist + flat * self.stride


class SimPlan:
    """The server's state of one cufftHandle: empty after cufftCreate, a
    transform after make_plan_many.  Stream and handle numbers are the
    dispatcher's."""

    def __init__(self):
        self.fft_type: int | None = None
        self.n: tuple = ()
        self.batch = 0
        self.work_size = 0
        self.auto_allocation = True
        self.work_area = 0
        self._basic = True
        self._in: Layout | None = None
        self._out: Layout | None = None

    @property
    def made(self) -> bool:
        return self.fft_type is not None

    def make_plan_many(self, rank: int, n, inembed, istride: int, idist: int, onembed, ostride: int, odist: int,
                       fft_type: int, batch: int) -> int:
        """cufftMakePlanMany(64): returns the work area's size in bytes.
        inembed or onembed None: the basic layout (cuFFT then ignores the
        strides and distances too)."""
        if fft_type not in TYPES:
            raise LibraryError("CUFFT_INVALID_TYPE", f"cufftType {fft_type:#x}")
        n = tuple(int(x) for x in n)
        if not 1 <= rank <= 3 or len(n) != rank:
            raise LibraryError("CUFFT_INVALID_SIZE", f"rank {rank} (cuFFT transforms 1 to 3 dimensions)")
        if min(n) < 1 or batch < 1:
            raise LibraryError("CUFFT_INVALID_SIZE", f"sizes {list(n)}, batch {batch}")
        in_shape, out_shape = _shapes(fft_type, n)
        basic = inembed is None or onembed is None
        if basic:
            layouts = (Layout(in_shape, in_shape, 1, math.prod(in_shape)),
                       Layout(out_shape, out_shape, 1, math.prod(out_shape)))
        else:
            inembed, onembed = tuple(int(x) for x in inembed), tuple(int(x) for x in onembed)
            if len(inembed) != rank or len(onembed) != rank or min(inembed + onembed) < 1:
                raise LibraryError("CUFFT_INVALID_VALUE", f"embeds {list(inembed)}, {list(onembed)} for rank {rank}")
            if istride < 1 or ostride < 1 or idist < 0 or odist < 0:
                raise LibraryError("CUFFT_INVALID_VALUE", f"strides {istride}, {ostride}, distances {idist}, {odist}")
            layouts = (Layout(in_shape, inembed, istride, idist), Layout(out_shape, onembed, ostride, odist))
        self.fft_type, self.n, self.batch, self._basic = fft_type, n, batch, basic
        self._in, self._out = layouts
        # Room for the complex side of the whole batch once: a size a program
        # can allocate for cufftSetWorkArea (the real one is cuFFT's own choice).
        complex_side = in_shape if fft_type in COMPLEX_TO_REAL else out_shape
        complex_type = TYPES[fft_type][0 if fft_type in COMPLEX_TO_REAL else 1]
        self.work_size = np.dtype(complex_type).itemsize * math.prod(complex_side) * batch
        return self.work_size

    def set_auto_allocation(self, flag: int) -> None:
        self.auto_allocation = bool(flag)

    def set_work_area(self, ptr: int) -> None:
        self.work_area = int(ptr)

    def layouts(self, in_place: bool) -> tuple[Layout, Layout]:
        """Basic layouts in place: the real side's rows are padded to
        2 * (n/2 + 1) reals, the complex side's length in reals."""
        if not (in_place and self._basic and self.fft_type not in (CUFFT_C2C, CUFFT_Z2Z)):
            return self._in, self._out
        real = self._in if self.fft_type in REAL_TO_COMPLEX else self._out
        padded = real.shape[:-1] + (2 * (self.n[-1] // 2 + 1),)
        real = Layout(real.shape, padded, 1, math.prod(padded))
        return (real, self._out) if self.fft_type in REAL_TO_COMPLEX else (self._in, real)

    def execute(self, mem, fft_type: int, idata: int, odata: int, direction: int) -> None:
        if not self.made:
            raise LibraryError("CUFFT_INVALID_PLAN", "the plan was created but never made (cufftMakePlan*)")
        if fft_type != self.fft_type:
            raise LibraryError("CUFFT_INVALID_TYPE",
                               f"cufftExec{NAMES[fft_type]} on a {NAMES[self.fft_type]} plan")
        if direction not in (CUFFT_FORWARD, CUFFT_INVERSE):
            raise LibraryError("CUFFT_INVALID_VALUE", f"direction {direction}")
        if not self.auto_allocation and self.work_size:
            if not self.work_area:
                raise LibraryError("CUFFT_NO_WORKSPACE", "auto-allocation is off and no cufftSetWorkArea")
            mem.array(self.work_area, np.uint8, self.work_size, what="cuFFT work area")  # it must be device memory
        lay_in, lay_out = self.layouts(idata == odata)
        in_type, out_type = TYPES[fft_type]
        src = _gather(mem, idata, in_type, lay_in, self.batch)
        axes = tuple(range(1, len(self.n) + 1))
        if fft_type in REAL_TO_COMPLEX:
            result = np.fft.rfftn(src, axes=axes)
        elif fft_type in COMPLEX_TO_REAL:
            result = np.fft.irfftn(src, s=self.n, axes=axes, norm="forward")
        elif direction == CUFFT_FORWARD:
            result = np.fft.fftn(src, axes=axes)
        else:
            result = np.fft.ifftn(src, axes=axes, norm="forward")
        offsets = lay_out.offsets(self.batch)
        mem.array(odata, out_type, int(offsets.max()) + 1, what="cuFFT output")[offsets] = result.astype(out_type,
                                                                                                       copy=False)


def _shapes(fft_type: int, n: tuple) -> tuple[tuple, tuple]:
    """The logical input and output arrays of one transform: a real side has
    n, a complex side of a real transform n with n[-1] // 2 + 1 last."""
    half = n[:-1] + (n[-1] // 2 + 1,)
    if fft_type in REAL_TO_COMPLEX:
        return n, half
    if fft_type in COMPLEX_TO_REAL:
        return half, n
    return n, n


def _gather(mem, ptr: int, dtype, layout: Layout, batch: int) -> np.ndarray:
    offsets = layout.offsets(batch)
    return mem.array(ptr, dtype, int(offsets.max()) + 1, what="cuFFT input")[offsets]


def _exec(fft_type: int, fixed_direction: int | None):
    if fixed_direction is None:
        def call(mem, plan: SimPlan, idata: int, odata: int, direction: int) -> None:
            plan.execute(mem, fft_type, idata, odata, direction)
    else:
        def call(mem, plan: SimPlan, idata: int, odata: int) -> None:
            plan.execute(mem, fft_type, idata, odata, fixed_direction)
    call.__name__ = f"cufftExec{NAMES[fft_type]}"
    return call


#: exported name -> fn(mem, plan, idata, odata[, direction])
CALLS = {
    "cufftExecC2C": _exec(CUFFT_C2C, None),
    "cufftExecZ2Z": _exec(CUFFT_Z2Z, None),
    "cufftExecR2C": _exec(CUFFT_R2C, CUFFT_FORWARD),
    "cufftExecD2Z": _exec(CUFFT_D2Z, CUFFT_FORWARD),
    "cufftExecC2R": _exec(CUFFT_C2R, CUFFT_INVERSE),
    "cufftExecZ2D": _exec(CUFFT_Z2D, CUFFT_INVERSE),
}
