"""The `lib` op: calls of cuBLAS, cuFFT and cuRAND on one GPU of a session.

Handles, plans and generators are server objects named by ids the client
chose (so creating one needs no round trip of its own); they belong to the
session and go with it (close, cudaDeviceReset).  The backend's library
provider (`Device.libraries()`: server/backends/sim_libraries.py on the sim,
server/backends/cuda_libraries.py on a GPU) runs each call in the stream the
client named, in the order calls arrive.

A call answers {results: [...]}: the values of its host outputs, in order
(a scalar result in host pointer mode, a plan's work size, a host
generator's numbers as a frame).  cuRAND's host tables (direction vectors,
scramble constants: rcuda/curand_calls.py TABLES) belong to no object: a
request for one names object 0 and is answered with the whole table as a
frame.  A library status other than success
answers {status: NAME, msg}; sent asynchronously, it becomes the device's
next reported error instead (cudaErrorInvalidValue, the status named in
the message), as the call's own status can no longer reach the program.
"""
from __future__ import annotations

import math

import numpy as np

from rcuda import blas_rules, curand_calls
from rcuda.errors import CudaError, ProtocolError, cudaError
from rcuda.library_errors import LibraryError

#: Calls that make a new object (named by the request's obj), and those that end one.
CREATES = frozenset({"cublasCreate_v2", "cufftCreate", "curandCreateGenerator", "curandCreateGeneratorHost"})
DESTROYS = frozenset({"cublasDestroy_v2", "cufftDestroy", "curandDestroyGenerator"})
#: The kinds of argument client/libraries/registry.py encodes as a map.
ARGUMENT_MAPS = ({"c"}, {"v", "dtype"}, {"scalar", "dtype"}, {"out", "dtype"})
#: Largest object id (ids are the client's; small positive integers).
MAX_OBJECT_ID = 1 << 62


class LibraryCalls:
    """One session's library objects on one GPU."""

    def __init__(self):
        self._objects: dict[int, object] = {}

    def serve(self, device, header: dict, payload, stream: int, answered: bool):
        call, obj_id, args = header["call"], header["obj"], header["args"]
        _check_arguments(call, args)
        provider = device.libraries()
        try:
            if call in curand_calls.TABLES:
                if obj_id != 0 or not answered:
                    raise ProtocolError(f"lib: {call} is a table: a request of object 0 that expects its reply")
                return {"results": []}, [memoryview(provider.table(call, args))]
            if call in CREATES:
                if not isinstance(obj_id, int) or not 0 < obj_id < MAX_OBJECT_ID or obj_id in self._objects:
                    raise ProtocolError(f"lib: {call} names object {obj_id!r}, which is in use or not a valid id")
                self._objects[obj_id] = provider.create(call, args)
                return {"results": []}
            obj = self._object(call, obj_id)
            if call in DESTROYS:
                del self._objects[obj_id]
                provider.destroy(obj)
                return {"results": []}
            try:
                results, frames = provider.run(call, obj, args, stream, answered)
            except (TypeError, ValueError, OverflowError, KeyError) as exc:
                # arguments of the wrong number or kind: the client's encoding is not this
                raise ProtocolError(f"lib: {call}: its arguments do not fit the call "
                                    f"({type(exc).__name__}: {exc})") from None
        except LibraryError as exc:
            if not answered:
                raise CudaError(cudaError.cudaErrorInvalidValue, f"{call} (sent asynchronously): {exc}") from None
            return {"status": exc.library_status, "msg": exc.detail or exc.library_status}
        return ({"results": results}, frames) if frames else {"results": results}

    def _object(self, call: str, obj_id) -> object:
        """The object every call but a creation works on (so providers always get one)."""
        obj = self._objects.get(obj_id) if isinstance(obj_id, int) else None
        if obj is None:
            raise LibraryError(_invalid_object(call), f"{call}: no handle, plan or generator {obj_id!r:.20} in "
                                                      f"this session on this GPU")
        return obj

    def release(self, device) -> None:
        """The session's objects on this GPU, freed (close, reset)."""
        objects, self._objects = self._objects, {}
        if objects and device is not None:
            provider = device.libraries()
            for obj in objects.values():
                provider.destroy(obj)


def _invalid_object(call: str) -> str:
    if call.startswith("cublas"):
        return "CUBLAS_STATUS_NOT_INITIALIZED"
    if call.startswith("cufft"):
        return "CUFFT_INVALID_PLAN"
    return "CURAND_STATUS_NOT_INITIALIZED"


def _check_arguments(call: str, args) -> None:
    """Arguments are numbers, None, lists of numbers, or the maps
    client/libraries/cublas.py writes: {c: [re, im]} a complex, {v, dtype} a host
    scalar of a type the signature does not say, {scalar, dtype} one to read
    from device memory, {out, dtype} a result (to device memory at `out`,
    or in the reply when `out` is None)."""
    if not call.startswith(("cublas", "cufft", "curand")):
        raise ProtocolError(f"lib: {call!r} is not a cuBLAS, cuFFT or cuRAND call")
    for arg in args:
        if isinstance(arg, dict):
            if set(arg) not in ARGUMENT_MAPS:
                raise ProtocolError(f"lib: {call}: an argument map with keys {sorted(arg)}")
        elif isinstance(arg, (list, tuple)):
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in arg):
                raise ProtocolError(f"lib: {call}: a list argument holds something other than numbers")
        elif arg is not None and (isinstance(arg, bool) or not isinstance(arg, (int, float))):
            raise ProtocolError(f"lib: {call}: an argument of type {type(arg).__name__}")


# ---------------------------------------------------------------- cuBLASLt's epilogues

#: GELU's tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
GELU_SCALE, GELU_CUBIC = math.sqrt(2 / math.pi), 0.044715
#: A RELU bitmask byte's bits, the lowest for the first of its 8 rows.
BIT_VALUES = [1, 2, 4, 8, 16, 32, 64, 128]


def matmul_epilogue(xp, view, args: list) -> None:
    """cuBLASLt's epilogue after a GEMM (blas_rules.MATMUL_EPILOGUE, its
    arguments blas_rules.EPILOGUE_ARGUMENTS), in place on D: the bias
    vector added to every column, then ReLU (max(x, 0)) or GELU (the tanh
    approximation, as cuBLASLt's), the AUX forms storing first the ReLU
    bitmask (bit i + j * aux_ld of a batch's mask set where x > 0, the
    lowest bit of a byte first) or the GELU's input.  Computed in float32
    for half and float D, in float64 for double; D, rounded to its type by
    the GEMM, is rounded again on the store (cuBLASLt rounds once).

    The one definition both backends run, over their array module `xp`
    (numpy on the sim, CuPy on a GPU) and `view(ptr, dtype, batch, rows,
    cols, ld, stride)`: a writable (batch, rows, cols) array of device
    memory whose [b, i, j] is at ptr + (b * stride + i + j * ld) elements."""
    if len(args) != len(blas_rules.EPILOGUE_ARGUMENTS) or not all(isinstance(v, int) for v in args):
        raise ProtocolError(f"lib: {blas_rules.MATMUL_EPILOGUE} takes {len(blas_rules.EPILOGUE_ARGUMENTS)} "
                            f"integers ({', '.join(blas_rules.EPILOGUE_ARGUMENTS)})")
    a = dict(zip(blas_rules.EPILOGUE_ARGUMENTS, args))
    blas_rules.check_epilogue(a)
    epilogue, m, n, batch = a["epilogue"], a["m"], a["n"], a["batch"]
    if not (m and n and batch):
        return
    d_type = np.dtype(blas_rules.EPILOGUE_TYPES[a["d_type"]])
    work = np.float64 if d_type == np.float64 else np.float32
    d = view(a["d"], d_type, batch, m, n, a["ldd"], a["stride_d"])
    x = d.astype(work)
    if epilogue & blas_rules.EPILOGUE_BIAS:
        bias_type = np.dtype(blas_rules.EPILOGUE_TYPES[a["bias_type"]])
        x += view(a["bias"], bias_type, batch, m, 1, m, a["bias_stride"]).astype(work)  # (batch, m, 1): every column
    if epilogue & blas_rules.EPILOGUE_AUX and epilogue & blas_rules.EPILOGUE_RELU:
        rows = -(-m // 8)  # bytes of a column's bits (aux_ld is a multiple of 128 bits: whole bytes)
        bits = xp.zeros((batch, rows * 8, n), np.uint8)
        bits[:, :m] = x > 0
        weights = xp.asarray(BIT_VALUES, np.uint8).reshape(1, 1, 8, 1)
        mask = (bits.reshape(batch, rows, 8, n) * weights).sum(axis=2, dtype=np.uint8)
        view(a["aux"], np.uint8, batch, rows, n, a["aux_ld"] // 8, a["aux_stride"] // 8)[...] = mask
    elif epilogue & blas_rules.EPILOGUE_AUX:
        aux_type = np.dtype(blas_rules.EPILOGUE_TYPES[a["aux_type"]])
        view(a["aux"], aux_type, batch, m, n, a["aux_ld"], a["aux_stride"])[...] = x.astype(aux_type)
    if epilogue & blas_rules.EPILOGUE_RELU:
        x = xp.maximum(x, 0)
    elif epilogue & blas_rules.EPILOGUE_GELU:
        x = 0.5 * x * (1 + xp.tanh(GELU_SCALE * (x + GELU_CUBIC * x * x * x)))
    d[...] = x.astype(d_type)
