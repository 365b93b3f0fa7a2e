"""cuFFT (libcufft.so.12) on the client: plans and their executions.

A cufftHandle is a plan of the device current at its creation (numbered
from 1, as cuFFT numbers them).  Every way of making one (cufftPlan1d/2d/3d,
cufftPlanMany, cufftMakePlan*) becomes one `cufftMakePlanMany64` on the
server, which answers the work area's size; executions are sent without
waiting, in the plan's stream.  The plan's type is known here, so an
execution of the wrong type or direction fails at once, as cuFFT's does.
"""
from __future__ import annotations

from rcuda._generated.libraries_api import LIBRARIES
from rcuda.errors import CudaError
from rcuda.library_errors import LibraryError

from .. import interposer
from ..runtime import core as runtime_core
from .objects import LibraryObject, objects
from .registry import library, refused, required

SUCCESS = 0
VERSION = LIBRARIES["cufft"]["version"]
#: cufftType values: (input is complex, output is complex, double precision)
TYPES = {0x29: "C2C", 0x2a: "R2C", 0x2c: "C2R", 0x69: "Z2Z", 0x6a: "D2Z", 0x6c: "Z2D"}
FORWARD, INVERSE = -1, 1
MAX_RANK = 3


class Plan(LibraryObject):
    library = "cufft"

    def __init__(self, *args):
        super().__init__(*args)
        self.fft_type: int | None = None  # set once made
        self.layout: list | None = None   # cufftMakePlanMany64's arguments, once made
        self.work_size = 0
        self.auto_allocation = True
        self.gpus: list[int] | None = None  # cufftXtSetGPUs (client/libraries/cufft_xt.py)
        self.staging: int | None = None     # a multi-GPU plan's buffer on its own GPU


def plan_of(plan, call: str) -> Plan:
    return objects.get(int(plan), Plan, call, "CUFFT_INVALID_PLAN")


def _out(pointer, what: str):
    return required(pointer, what, "CUFFT_INVALID_VALUE")


def _new_plan(call: str) -> Plan:
    try:
        return objects.create(Plan, "cufftCreate", [], plan=True)
    except CudaError as exc:
        raise LibraryError("CUFFT_SETUP_FAILED", f"{call}: {exc}") from None


def _layout(rank, n, inembed, istride, idist, onembed, ostride, odist, fft_type, batch, call: str) -> list:
    """A plan's shape as cufftMakePlanMany64 takes it, checked as cuFFT checks it."""
    if fft_type not in TYPES:
        raise LibraryError("CUFFT_INVALID_TYPE", f"{call}: unknown cufftType {fft_type:#x}")
    if not 1 <= rank <= MAX_RANK:
        raise LibraryError("CUFFT_INVALID_SIZE", f"{call}: rank {rank} is not 1, 2 or 3")
    sizes = [int(v) for v in n]
    if any(v < 1 for v in sizes) or batch < 1:
        raise LibraryError("CUFFT_INVALID_SIZE", f"{call}: sizes {sizes}, batch {batch}")
    return [rank, sizes, inembed, int(istride), int(idist), onembed, int(ostride), int(odist), fft_type, int(batch)]


def _array(pointer, rank: int):
    """A C array of `rank` sizes as a list; NULL as None."""
    return None if pointer == interposer.ffi.NULL else [int(pointer[i]) for i in range(rank)]


def _make(plan: Plan, layout: list, work_size=None) -> int:
    if plan.fft_type is not None:
        raise LibraryError("CUFFT_INVALID_PLAN", f"plan {plan.handle} is made already")
    results, _ = plan.call("cufftMakePlanMany64", layout, wait=True)
    plan.fft_type, plan.layout, plan.work_size = layout[8], layout, int(results[0])
    if work_size is not None and work_size != interposer.ffi.NULL:
        # a multi-GPU plan's is an array, one size per GPU: only its own GPU works
        for i, ordinal in enumerate(plan.gpus or [plan.device.ordinal]):
            work_size[i] = plan.work_size if ordinal == plan.device.ordinal else 0
    return SUCCESS


def _packed(n: list, batch: int, fft_type: int) -> list:
    """A plan of tightly packed data (cufftPlan1d/2d/3d)."""
    return _layout(len(n), n, None, 1, 0, None, 1, 0, fft_type, batch, "cufftPlan")


# ---------------------------------------------------------------- plans


@library()
def cufftCreate(handle):
    _out(handle, "handle")[0] = _new_plan("cufftCreate").handle
    return SUCCESS


@library()
def cufftDestroy(plan):
    obj = plan_of(plan, "cufftDestroy")
    objects.destroy(obj, "cufftDestroy")
    if obj.staging is not None:
        runtime_core.IMPLEMENTED["cudaFree"](obj.staging)
    return SUCCESS


def _plan_now(handle, layout: list, call: str) -> int:
    _out(handle, "plan")
    plan = _new_plan(call)
    try:
        _make(plan, layout)
    except Exception:
        objects.destroy(plan, "cufftDestroy")
        raise
    handle[0] = plan.handle
    return SUCCESS


@library()
def cufftPlan1d(plan, nx, type, batch):
    return _plan_now(plan, _packed([nx], batch, type), "cufftPlan1d")


@library()
def cufftPlan2d(plan, nx, ny, type):
    return _plan_now(plan, _packed([nx, ny], 1, type), "cufftPlan2d")


@library()
def cufftPlan3d(plan, nx, ny, nz, type):
    return _plan_now(plan, _packed([nx, ny, nz], 1, type), "cufftPlan3d")


@library()
def cufftPlanMany(plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch):
    layout = _layout(rank, _array(_out(n, "n"), rank), _array(inembed, rank), istride, idist,
                     _array(onembed, rank), ostride, odist, type, batch, "cufftPlanMany")
    return _plan_now(plan, layout, "cufftPlanMany")


@library()
def cufftMakePlan1d(plan, nx, type, batch, workSize):
    return _make(plan_of(plan, "cufftMakePlan1d"), _packed([nx], batch, type), workSize)


@library()
def cufftMakePlan2d(plan, nx, ny, type, workSize):
    return _make(plan_of(plan, "cufftMakePlan2d"), _packed([nx, ny], 1, type), workSize)


@library()
def cufftMakePlan3d(plan, nx, ny, nz, type, workSize):
    return _make(plan_of(plan, "cufftMakePlan3d"), _packed([nx, ny, nz], 1, type), workSize)


@library("cufftMakePlanMany", "cufftMakePlanMany64")
def cufftMakePlanMany(plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, workSize):
    layout = _layout(rank, _array(_out(n, "n"), rank), _array(inembed, rank), istride, idist,
                     _array(onembed, rank), ostride, odist, type, batch, "cufftMakePlanMany")
    return _make(plan_of(plan, "cufftMakePlanMany"), layout, workSize)


# Sizes: cuFFT's estimates are bounds the made plan's size never exceeds;
# the sim's plans need no work area, a GPU's report theirs when made.


def _estimate(n: list, batch: int, fft_type: int, work_size) -> int:
    _out(work_size, "workSize")
    layout = _packed(n, batch, fft_type)
    elements = batch
    for v in layout[1]:
        elements *= v
    work_size[0] = elements * (16 if TYPES[fft_type] in ("Z2Z", "D2Z", "Z2D") else 8)
    return SUCCESS


@library()
def cufftEstimate1d(nx, type, batch, workSize):
    return _estimate([nx], batch, type, workSize)


@library()
def cufftEstimate2d(nx, ny, type, workSize):
    return _estimate([nx, ny], 1, type, workSize)


@library()
def cufftEstimate3d(nx, ny, nz, type, workSize):
    return _estimate([nx, ny, nz], 1, type, workSize)


@library()
def cufftEstimateMany(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, workSize):
    return _estimate(_array(_out(n, "n"), rank) if 1 <= rank <= MAX_RANK else [0], batch, type, workSize)


def _size_of(plan, call: str, work_size, estimate) -> int:
    """A made plan's work size; before it is made, cuFFT's estimate."""
    obj = plan_of(plan, call)
    if obj.fft_type is None:
        return estimate()
    _out(work_size, "workSize")[0] = obj.work_size
    return SUCCESS


@library()
def cufftGetSize1d(handle, nx, type, batch, workSize):
    return _size_of(handle, "cufftGetSize1d", workSize, lambda: _estimate([nx], batch, type, workSize))


@library()
def cufftGetSize2d(handle, nx, ny, type, workSize):
    return _size_of(handle, "cufftGetSize2d", workSize, lambda: _estimate([nx, ny], 1, type, workSize))


@library()
def cufftGetSize3d(handle, nx, ny, nz, type, workSize):
    return _size_of(handle, "cufftGetSize3d", workSize, lambda: _estimate([nx, ny, nz], 1, type, workSize))


@library("cufftGetSizeMany", "cufftGetSizeMany64")
def cufftGetSizeMany(handle, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, workSize):
    return _size_of(handle, "cufftGetSizeMany", workSize,
                    lambda: _estimate(_array(_out(n, "n"), rank), batch, type, workSize))


@library()
def cufftGetSize(handle, workSize):
    obj = plan_of(handle, "cufftGetSize")
    _out(workSize, "workSize")[0] = obj.work_size
    return SUCCESS


@library()
def cufftSetWorkArea(plan, workArea):
    plan_of(plan, "cufftSetWorkArea").call("cufftSetWorkArea", [interposer.address(workArea)])
    return SUCCESS


@library()
def cufftSetAutoAllocation(plan, autoAllocate):
    obj = plan_of(plan, "cufftSetAutoAllocation")
    obj.auto_allocation = bool(autoAllocate)
    obj.call("cufftSetAutoAllocation", [int(bool(autoAllocate))])
    return SUCCESS


@library()
def cufftSetStream(plan, stream):
    plan_of(plan, "cufftSetStream").use_stream(stream)
    return SUCCESS


@library()
def cufftGetVersion(version):
    _out(version, "version")[0] = VERSION[0] * 1000 + VERSION[1] * 100 + VERSION[2]
    return SUCCESS


@library()
def cufftGetProperty(type, value):
    if type not in (0, 1, 2):
        raise LibraryError("CUFFT_INVALID_TYPE", f"cufftGetProperty: unknown property {type}")
    _out(value, "value")[0] = VERSION[type]
    return SUCCESS


# ---------------------------------------------------------------- executions


def execute(plan, idata, odata, direction, kind: str | None, call: str) -> int:
    """Run a made plan of `kind` (None: of whatever kind it is, as
    cufftXtExec does) on idata -> odata; `direction` counts for the complex
    transforms only."""
    obj = plan_of(plan, call)
    if obj.fft_type is None:
        raise LibraryError("CUFFT_INVALID_PLAN", f"{call}: plan {obj.handle} was created but never made")
    made = TYPES[obj.fft_type]
    if kind is not None and made != kind:
        raise LibraryError("CUFFT_INVALID_TYPE", f"{call} on a {made} plan")
    if idata == interposer.ffi.NULL or odata == interposer.ffi.NULL:
        raise LibraryError("CUFFT_INVALID_VALUE", f"{call}: NULL data")
    args = [interposer.address(idata), interposer.address(odata)]
    if made in COMPLEX_TO_COMPLEX:
        if direction not in (FORWARD, INVERSE):
            raise LibraryError("CUFFT_INVALID_VALUE", f"{call}: direction {direction} is neither "
                                                      f"CUFFT_FORWARD nor CUFFT_INVERSE")
        args.append(direction)
    obj.call(f"cufftExec{made}", args)
    return SUCCESS


def _execution(kind: str):
    name = f"cufftExec{kind}"
    if kind in COMPLEX_TO_COMPLEX:
        library(name)(lambda plan, idata, odata, direction: execute(plan, idata, odata, direction, kind, name))
    else:
        library(name)(lambda plan, idata, odata: execute(plan, idata, odata, None, kind, name))


COMPLEX_TO_COMPLEX = ("C2C", "Z2Z")
for _kind in TYPES.values():
    _execution(_kind)


# ---------------------------------------------------------------- cufftXt's typed plans

#: cudaDataType values (library_types.h)
R_32F, C_32F, R_64F, C_64F = 0, 4, 1, 5
#: (input, output, execution) cudaDataTypes -> the cufftType that is the same transform
XT_TYPES = {(C_32F, C_32F, C_32F): 0x29, (R_32F, C_32F, C_32F): 0x2a, (C_32F, R_32F, C_32F): 0x2c,
            (C_64F, C_64F, C_64F): 0x69, (R_64F, C_64F, C_64F): 0x6a, (C_64F, R_64F, C_64F): 0x6c}
#: half and bfloat16 precisions, which cuFFT has and rcuda does not forward
HALF_TYPES = {2, 6, 14, 15}


def _xt_type(inputtype: int, outputtype: int, executiontype: int, call: str) -> int:
    fft_type = XT_TYPES.get((inputtype, outputtype, executiontype))
    if fft_type is not None:
        return fft_type
    if HALF_TYPES & {inputtype, outputtype, executiontype}:
        raise LibraryError("CUFFT_NOT_SUPPORTED", f"{call}: half and bfloat16 transforms are not supported by rcuda")
    raise LibraryError("CUFFT_INVALID_TYPE", f"{call}: no transform takes cudaDataType {inputtype} to "
                                             f"{outputtype} in {executiontype}")


@library()
def cufftXtMakePlanMany(plan, rank, n, inembed, istride, idist, inputtype, onembed, ostride, odist, outputtype,
                        batch, workSize, executiontype):
    """cufftMakePlanMany64 with the types given as cudaDataTypes."""
    fft_type = _xt_type(inputtype, outputtype, executiontype, "cufftXtMakePlanMany")
    layout = _layout(rank, _array(_out(n, "n"), rank), _array(inembed, rank), istride, idist,
                     _array(onembed, rank), ostride, odist, fft_type, batch, "cufftXtMakePlanMany")
    return _make(plan_of(plan, "cufftXtMakePlanMany"), layout, workSize)


@library()
def cufftXtGetSizeMany(plan, rank, n, inembed, istride, idist, inputtype, onembed, ostride, odist, outputtype,
                       batch, workSize, executiontype):
    fft_type = _xt_type(inputtype, outputtype, executiontype, "cufftXtGetSizeMany")
    return _size_of(plan, "cufftXtGetSizeMany", workSize,
                    lambda: _estimate(_array(_out(n, "n"), rank), batch, fft_type, workSize))


@library()
def cufftXtExec(plan, input, output, direction):
    """Any made plan's transform; the direction counts for complex-to-complex ones only."""
    return execute(plan, input, output, direction, None, "cufftXtExec")


# ---------------------------------------------------------------- callbacks: refused

#: Why cufftXtSetCallback and its kin answer CUFFT_NOT_SUPPORTED.
CALLBACKS = ("cuFFT callbacks are device functions of the program's, linked into cuFFT's own kernels (the "
             "static cuFFT's, or LTO-IR for cufftXtSetJITCallback); rcuda's cuFFT runs on the server, with no "
             "program code to link: transform, then run a kernel of the program's on the result")
# A bad plan is still CUFFT_INVALID_PLAN; any other call is refused.  (NVIDIA's shared libcufft answers
# CUFFT_NOT_IMPLEMENTED to cufftXtSetCallback for any plan: its legacy callbacks need the static cuFFT.)


@refused("CUFFT_NOT_SUPPORTED", CALLBACKS)
def cufftXtSetCallback(plan, callback_routine, cbType, caller_info):
    plan_of(plan, "cufftXtSetCallback")


@refused("CUFFT_NOT_SUPPORTED", CALLBACKS)
def cufftXtClearCallback(plan, cbType):
    plan_of(plan, "cufftXtClearCallback")


@refused("CUFFT_NOT_SUPPORTED", CALLBACKS)
def cufftXtSetCallbackSharedSize(plan, cbType, sharedSize):
    plan_of(plan, "cufftXtSetCallbackSharedSize")


@refused("CUFFT_NOT_SUPPORTED", CALLBACKS)
def cufftXtSetJITCallback(plan, lto_callback_symbol_name, lto_callback_fatbin, lto_callback_fatbin_size, type,
                          caller_info):
    plan_of(plan, "cufftXtSetJITCallback")
