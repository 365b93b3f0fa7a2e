"""cuRAND's host API (libcurand.so.10) on the client: generators and their
numbers.

A generator is a server object on the device current at its creation.  A
device generator's numbers are made on its GPU, in its stream, and the call
does not wait, as cuRAND's does not.  A host generator
(curandCreateGeneratorHost) is made on the same server, so that it and a
device generator of the same kind give the same sequence (on the sim both
are rcuda's numpy generators; on a GPU server, cuRAND's own): its numbers
come back in the reply and land in the program's host memory before the
call returns.  Settings (seed, offset, ordering, dimensions) travel in the
generator's stream too; what cuRAND checks when they are set or used (the
kind of generator, lengths, ranges) is checked here.

cuRAND's host tables (curandGetDirectionVectors32/64, curandGetScrambleConstants32/64)
are asked of the current device's server once and kept for the process, as
cuRAND's are static: NVIDIA's own on a GPU server, the sim's on a sim one
(the Joe-Kuo vectors are the same there; the scrambled ones and the
constants are those the server's scrambled generators use, so a kernel
starting cuRAND's device-API Sobol' from them follows the host API's
sequence).  A discrete distribution (curandCreatePoissonDistribution) is
made here, in device memory of the current device, laid out as
curand_discrete.h declares it for the device API's curand_discrete() to
read in the program's kernels.
"""
from __future__ import annotations

import math
import struct
import threading

from rcuda import curand_calls
from rcuda._generated.libraries_api import LIBRARIES
from rcuda.errors import CudaError
from rcuda.library_errors import LibraryError

from .. import interposer
from ..runtime import core as runtime_core
from ..runtime import memory as runtime_memory
from .objects import LibraryObject, objects
from .registry import library, required

SUCCESS = 0
VERSION = LIBRARIES["curand"]["version"]
PSEUDO = {100, 101, 121, 141, 142, 161}
MTGP32 = 141
QUASI_32 = {200, 201, 202}
QUASI_64 = {203, 204}
PSEUDO_ORDERINGS = {100, 101, 102, 103, 104}
QUASI_ORDERINGS = {201}
MAX_DIMENSIONS = 20000
MAX_POISSON_LAMBDA = 400_000


class Generator(LibraryObject):
    library = "curand"

    def __init__(self, *args):
        super().__init__(*args)
        self.rng_type = 0
        self.host = False
        self.dimensions = 1


def generator_of(generator, call: str) -> Generator:
    return objects.get(interposer.address(generator), Generator, call, "CURAND_STATUS_NOT_INITIALIZED")


def _out(pointer, what: str):
    return required(pointer, what, "CURAND_STATUS_OUT_OF_RANGE")


def _create(generator, rng_type: int, host: bool) -> int:
    name = "curandCreateGeneratorHost" if host else "curandCreateGenerator"
    _out(generator, "generator")
    if rng_type not in PSEUDO | QUASI_32 | QUASI_64:
        raise LibraryError("CURAND_STATUS_TYPE_ERROR", f"{name}: unknown generator type {rng_type}")
    try:
        obj = objects.create(Generator, name, [rng_type])
    except CudaError as exc:
        raise LibraryError("CURAND_STATUS_INITIALIZATION_FAILED", f"{name}: {exc}") from None
    obj.rng_type, obj.host = rng_type, host
    interposer.ffi.cast("uintptr_t *", generator)[0] = obj.handle
    return SUCCESS


@library()
def curandCreateGenerator(generator, rng_type):
    return _create(generator, rng_type, host=False)


@library()
def curandCreateGeneratorHost(generator, rng_type):
    return _create(generator, rng_type, host=True)


@library()
def curandDestroyGenerator(generator):
    objects.destroy(generator_of(generator, "curandDestroyGenerator"), "curandDestroyGenerator")
    return SUCCESS


@library()
def curandGetVersion(version):
    _out(version, "version")[0] = VERSION[0] * 1000 + VERSION[1] * 100 + VERSION[2]
    return SUCCESS


@library()
def curandGetProperty(type, value):
    if type not in (0, 1, 2):
        raise LibraryError("CURAND_STATUS_OUT_OF_RANGE", f"curandGetProperty: unknown property {type}")
    _out(value, "value")[0] = VERSION[type]
    return SUCCESS


@library()
def curandSetStream(generator, stream):
    generator_of(generator, "curandSetStream").use_stream(stream)
    return SUCCESS


# ---------------------------------------------------------------- settings


@library()
def curandSetPseudoRandomGeneratorSeed(generator, seed):
    obj = generator_of(generator, "curandSetPseudoRandomGeneratorSeed")
    if obj.rng_type not in PSEUDO:
        raise LibraryError("CURAND_STATUS_TYPE_ERROR", "curandSetPseudoRandomGeneratorSeed: not a pseudo-random "
                                                       "generator")
    obj.call("curandSetPseudoRandomGeneratorSeed", [int(seed)])
    return SUCCESS


@library()
def curandSetGeneratorOffset(generator, offset):
    obj = generator_of(generator, "curandSetGeneratorOffset")
    if obj.rng_type == MTGP32:
        raise LibraryError("CURAND_STATUS_TYPE_ERROR", "curandSetGeneratorOffset: an MTGP32 generator takes no "
                                                       "offset")
    obj.call("curandSetGeneratorOffset", [int(offset)])
    return SUCCESS


@library()
def curandSetGeneratorOrdering(generator, order):
    obj = generator_of(generator, "curandSetGeneratorOrdering")
    allowed = PSEUDO_ORDERINGS if obj.rng_type in PSEUDO else QUASI_ORDERINGS
    if order not in allowed:
        raise LibraryError("CURAND_STATUS_OUT_OF_RANGE", f"curandSetGeneratorOrdering: ordering {order} for a "
                                                         f"generator of type {obj.rng_type}")
    obj.call("curandSetGeneratorOrdering", [int(order)])
    return SUCCESS


@library()
def curandSetQuasiRandomGeneratorDimensions(generator, num_dimensions):
    obj = generator_of(generator, "curandSetQuasiRandomGeneratorDimensions")
    if obj.rng_type in PSEUDO:
        raise LibraryError("CURAND_STATUS_TYPE_ERROR", "curandSetQuasiRandomGeneratorDimensions: not a "
                                                       "quasi-random generator")
    if not 1 <= num_dimensions <= MAX_DIMENSIONS:
        raise LibraryError("CURAND_STATUS_OUT_OF_RANGE", f"curandSetQuasiRandomGeneratorDimensions: "
                                                         f"{num_dimensions} dimensions (1 to {MAX_DIMENSIONS})")
    obj.dimensions = num_dimensions
    obj.call("curandSetQuasiRandomGeneratorDimensions", [int(num_dimensions)])
    return SUCCESS


@library()
def curandGenerateSeeds(generator):
    generator_of(generator, "curandGenerateSeeds").call("curandGenerateSeeds", [])
    return SUCCESS


# ---------------------------------------------------------------- numbers

#: The generator kinds the calls that accept only some take (the rest take any).
KINDS = {"curandGenerate": PSEUDO | QUASI_32, "curandGenerateLongLong": QUASI_64}


def _generate(name: str, generator, output, count: int, parameters: list) -> int:
    obj = generator_of(generator, name)
    fmt, parameter_count, _ = curand_calls.GENERATES[name]
    kinds = KINDS.get(name)
    pairs = parameter_count == 2  # normals, by Box-Muller: (mean, stddev) calls make pairs
    if kinds is not None and obj.rng_type not in kinds:
        raise LibraryError("CURAND_STATUS_TYPE_ERROR", f"{name} on a generator of type {obj.rng_type}")
    if output == interposer.ffi.NULL and count:
        raise LibraryError("CURAND_STATUS_OUT_OF_RANGE", f"{name}: outputPtr is NULL")
    if obj.rng_type in PSEUDO and pairs and count % 2:
        raise LibraryError("CURAND_STATUS_LENGTH_NOT_MULTIPLE", f"{name}: {count} numbers on a pseudo-random "
                                                                f"generator (must be even)")
    if obj.rng_type not in PSEUDO and count % obj.dimensions:
        raise LibraryError("CURAND_STATUS_LENGTH_NOT_MULTIPLE", f"{name}: {count} numbers, not a multiple of the "
                                                                f"{obj.dimensions} dimensions")
    if name.startswith("curandGeneratePoisson") and not 0 < parameters[0] <= MAX_POISSON_LAMBDA:
        raise LibraryError("CURAND_STATUS_OUT_OF_RANGE", f"{name}: lambda {parameters[0]} (0 < lambda <= "
                                                         f"{MAX_POISSON_LAMBDA})")
    if name == "curandGeneratePoissonMethod" and parameters[1] not in curand_calls.POISSON_METHODS:
        raise LibraryError("CURAND_STATUS_OUT_OF_RANGE", f"{name}: curandMethod {parameters[1]} (cuRAND takes "
                                                         f"{', '.join(map(str, curand_calls.POISSON_METHODS))})")
    if not obj.host:
        obj.call(name, [interposer.address(output), int(count), *parameters])
        return SUCCESS
    if name == "curandGeneratePoissonMethod":
        # cuRAND 10.4.5, the one rcuda's libcurand is, gives a host generator
        # curandGeneratePoisson's numbers whatever the method; CUDA 13.0's
        # 10.4.0, which a GPU server may have, answers 999 for
        # CURAND_CHOOSE_BEST and 202 for CURAND_3RD there.
        name, parameters = "curandGeneratePoisson", parameters[:1]
    _, payload = obj.call(name, [None, int(count), *parameters], wait=True)
    data = b"".join(bytes(getattr(frame, "buffer", frame)) for frame in payload)
    if len(data) != count * struct.calcsize(fmt):
        raise LibraryError("CURAND_STATUS_INTERNAL_ERROR", f"{name}: {len(data)} bytes came back for {count} numbers")
    interposer.ffi.memmove(output, data, len(data))
    return SUCCESS


@library()
def curandGenerate(generator, outputPtr, num):
    return _generate("curandGenerate", generator, outputPtr, num, [])


@library()
def curandGenerateLongLong(generator, outputPtr, num):
    return _generate("curandGenerateLongLong", generator, outputPtr, num, [])


@library()
def curandGenerateUniform(generator, outputPtr, num):
    return _generate("curandGenerateUniform", generator, outputPtr, num, [])


@library()
def curandGenerateUniformDouble(generator, outputPtr, num):
    return _generate("curandGenerateUniformDouble", generator, outputPtr, num, [])


@library()
def curandGenerateNormal(generator, outputPtr, n, mean, stddev):
    return _generate("curandGenerateNormal", generator, outputPtr, n, [float(mean), float(stddev)])


@library()
def curandGenerateNormalDouble(generator, outputPtr, n, mean, stddev):
    return _generate("curandGenerateNormalDouble", generator, outputPtr, n, [float(mean), float(stddev)])


@library()
def curandGenerateLogNormal(generator, outputPtr, n, mean, stddev):
    return _generate("curandGenerateLogNormal", generator, outputPtr, n, [float(mean), float(stddev)])


@library()
def curandGenerateLogNormalDouble(generator, outputPtr, n, mean, stddev):
    return _generate("curandGenerateLogNormalDouble", generator, outputPtr, n, [float(mean), float(stddev)])


@library()
def curandGeneratePoisson(generator, outputPtr, n, lambda_):
    return _generate("curandGeneratePoisson", generator, outputPtr, n, [float(lambda_)])


@library()
def curandGeneratePoissonMethod(generator, outputPtr, n, lambda_, method):
    """cuRAND's "internal" form, with the method its kernels use: the
    methods cuRAND takes give Poisson numbers (on the sim, the same ones;
    a host generator's are curandGeneratePoisson's, see _generate)."""
    return _generate("curandGeneratePoissonMethod", generator, outputPtr, n, [float(lambda_), int(method)])


# ---------------------------------------------------------------- host tables

#: (call, set) -> the table: a cffi array that lives as long as the process
_tables: dict[tuple, object] = {}
_tables_lock = threading.Lock()


def _table(name: str, args: list):
    """Table `name` (curand_calls.TABLES) of the current device's server, once per process."""
    key = (name, *args)
    with _tables_lock:
        table = _tables.get(key)
        if table is None:
            device = interposer.rt.device()
            reply, payload = device.request("lib", call=name, obj=0, args=args,
                                            stream=interposer.stream_of(0, device=device).id)
            if "status" in reply:
                raise LibraryError(reply["status"], f"{name} on {device.label}: {reply.get('msg', '')}")
            data = b"".join(bytes(getattr(frame, "buffer", frame)) for frame in payload)
            fmt = curand_calls.TABLES[name][0]
            if len(data) != curand_calls.table_bytes(name):
                raise LibraryError("CURAND_STATUS_INTERNAL_ERROR", f"{name}: {len(data)} bytes came back, not "
                                                                   f"{curand_calls.table_bytes(name)}")
            ctype = "unsigned long long" if fmt == "Q" else "unsigned int"
            table = interposer.ffi.new(f"{ctype}[]", len(data) // struct.calcsize(fmt))
            interposer.ffi.memmove(table, data, len(data))
            _tables[key] = table
    return table


def _direction_vectors(name: str, vectors, direction_set) -> int:
    _out(vectors, "vectors")
    sets = curand_calls.TABLES[name][2]
    if direction_set not in sets:
        raise LibraryError("CURAND_STATUS_OUT_OF_RANGE", f"{name}: direction vector set {direction_set} (this "
                                                         f"call takes {' or '.join(map(str, sets))})")
    table = _table(name, [int(direction_set)])
    interposer.ffi.cast("uintptr_t *", vectors)[0] = int(interposer.ffi.cast("uintptr_t", table))
    return SUCCESS


@library()
def curandGetDirectionVectors32(vectors, set):
    return _direction_vectors("curandGetDirectionVectors32", vectors, set)


@library()
def curandGetDirectionVectors64(vectors, set):
    return _direction_vectors("curandGetDirectionVectors64", vectors, set)


def _scramble_constants(name: str, constants) -> int:
    _out(constants, "constants")
    table = _table(name, [])
    interposer.ffi.cast("uintptr_t *", constants)[0] = int(interposer.ffi.cast("uintptr_t", table))
    return SUCCESS


@library()
def curandGetScrambleConstants32(constants):
    return _scramble_constants("curandGetScrambleConstants32", constants)


@library()
def curandGetScrambleConstants64(constants):
    return _scramble_constants("curandGetScrambleConstants64", constants)


# ---------------------------------------------------------------- discrete distributions

#: curandMethod_t: the alias table the device API reads, and (any other) its normal approximation
CURAND_M2, CURAND_DISCRETE_GAUSS = 5, 7
#: cuRAND: "for lambda greater than 2000, an approximation with a normal distribution is used"
POISSON_NORMAL_ABOVE = 2000.0
#: Probability left out at each end of a Poisson alias table's support (below a double's resolution).
POISSON_TAIL = 2.0 ** -60
#: curand_discrete.h's structs on LP64 (the GPU's layout is the host's):
#: curandDiscreteDistribution_st {self_host_ptr, M2, host_M2, stddev, mean, method, host_gen},
#: curandDistributionM2Shift_st {histogram, host_histogram, shift, length, host_gen},
#: curandHistogramM2_st {V, host_V, K, host_K, host_gen}; then V (double[length]) and K (unsigned[length]).
DISTRIBUTION = struct.Struct("<QQQddiI")
M2_SHIFT = struct.Struct("<QQIII4x")
HISTOGRAM = struct.Struct("<QQQQI4x")


class Distribution:
    """One curandDiscreteDistribution_t: the device memory it is (the
    handle is its address), and the host copy its host pointers name."""

    def __init__(self, device, address: int, host):
        self.device, self.address, self.host = device, address, host


#: handle (a device address) -> its Distribution
_distributions: dict[int, Distribution] = {}


def poisson_alias_table(lam: float) -> tuple[int, list[float], list[int]]:
    """(shift, V, K) of cuRAND's M2 method for Poisson(lam): the device API
    draws u in (0, 1), takes j = floor(length * u) and returns shift + j when
    u < V[j], else shift + K[j] (curand_discrete2.h's _curand_M2_double).
    Walker's alias method (Vose's construction) over the support where the
    probabilities are above POISSON_TAIL, renormalised: V[j] = (j + q_j) / length
    for slot j's own probability q_j."""
    import numpy as np
    from scipy import stats  # here: a program that makes no distribution does not load scipy
    spread = 12 * math.sqrt(lam) + 60  # past it, each tail holds less than 1e-30
    support = np.arange(max(0, math.floor(lam - spread)), math.ceil(lam + spread) + 1)
    probabilities = stats.poisson.pmf(support, lam)
    below, above = np.cumsum(probabilities), np.cumsum(probabilities[::-1])[::-1]
    kept = (below >= POISSON_TAIL) & (above >= POISSON_TAIL)
    lo = int(support[kept][0])
    probabilities = probabilities[kept]
    length = len(probabilities)
    scaled = list(probabilities / probabilities.sum() * length)
    own, alias = [1.0] * length, list(range(length))
    small = [j for j in range(length) if scaled[j] < 1.0]
    large = [j for j in range(length) if scaled[j] >= 1.0]
    while small and large:
        s, big = small.pop(), large.pop()
        own[s], alias[s] = scaled[s], big
        scaled[big] -= 1.0 - scaled[s]
        (small if scaled[big] < 1.0 else large).append(big)
    return lo, [(j + own[j]) / length for j in range(length)], alias


def _distribution_image(base: int, host: int, lam: float, table) -> bytes:
    """The distribution's bytes, its pointers into device memory at `base`
    and its host copy at `host` (the two hold the same bytes); `table`:
    poisson_alias_table(lam), or None for the normal approximation."""
    if table is None:
        return DISTRIBUTION.pack(host, 0, 0, math.sqrt(lam), lam, CURAND_DISCRETE_GAUSS, 0)
    shift, v, k = table
    length = len(v)
    m2 = DISTRIBUTION.size
    histogram = m2 + M2_SHIFT.size
    v_at = histogram + HISTOGRAM.size
    k_at = v_at + 8 * length
    return b"".join([
        DISTRIBUTION.pack(host, base + m2, host + m2, math.sqrt(lam), lam, CURAND_M2, 0),
        M2_SHIFT.pack(base + histogram, host + histogram, shift, length, 0),
        HISTOGRAM.pack(base + v_at, host + v_at, base + k_at, host + k_at, 0),
        struct.pack(f"<{length}d", *v), struct.pack(f"<{length}I", *k),
    ])


def _image_size(table) -> int:
    if table is None:
        return DISTRIBUTION.size
    return DISTRIBUTION.size + M2_SHIFT.size + HISTOGRAM.size + 12 * len(table[1])


@library()
def curandCreatePoissonDistribution(lambda_, discrete_distribution):
    """The histogram of Poisson(lambda) in device memory of the current
    device, for the device API (curand_discrete, curand_discrete4)."""
    if discrete_distribution == interposer.ffi.NULL:
        raise LibraryError("CURAND_STATUS_NOT_INITIALIZED", "curandCreatePoissonDistribution: the distribution "
                                                            "pointer is NULL")
    lam = float(lambda_)
    if not 0 < lam <= MAX_POISSON_LAMBDA:
        raise LibraryError("CURAND_STATUS_OUT_OF_RANGE", f"curandCreatePoissonDistribution: lambda {lam} (0 < "
                                                         f"lambda <= {MAX_POISSON_LAMBDA})")
    device = interposer.rt.device()
    table = None if lam > POISSON_NORMAL_ABOVE else poisson_alias_table(lam)
    size = _image_size(table)
    host = interposer.ffi.new("char[]", size)
    host_address = int(interposer.ffi.cast("uintptr_t", host))
    try:
        base = runtime_memory.allocate(device, size)
    except CudaError as exc:
        raise LibraryError("CURAND_STATUS_ALLOCATION_FAILED", f"curandCreatePoissonDistribution: {exc}") from None
    try:
        image = _distribution_image(base, host_address, lam, table)
        interposer.ffi.memmove(host, image, len(image))
        runtime_memory.memcpy(base, host_address, len(image), runtime_memory.HOST_TO_DEVICE)
    except Exception:
        runtime_core.IMPLEMENTED["cudaFree"](base)
        raise
    _distributions[base] = Distribution(device, base, host)
    interposer.ffi.cast("uintptr_t *", discrete_distribution)[0] = base
    return SUCCESS


@library()
def curandDestroyDistribution(discrete_distribution):
    distribution = _distributions.pop(interposer.address(discrete_distribution), None)
    if distribution is None:
        raise LibraryError("CURAND_STATUS_NOT_INITIALIZED", f"curandDestroyDistribution: "
                                                            f"{interposer.address(discrete_distribution):#x} is not "
                                                            f"a distribution curandCreatePoissonDistribution made")
    try:
        runtime_core.IMPLEMENTED["cudaFree"](distribution.address)
    except CudaError:
        pass  # its device was reset: the memory went with it
    return SUCCESS
