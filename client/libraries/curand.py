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
"""
from __future__ import annotations

import struct

from rcuda import curand_calls
from rcuda._generated.libraries_api import LIBRARIES
from rcuda.errors import CudaError
from rcuda.library_errors import LibraryError

from .. import interposer
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
    if name == "curandGeneratePoisson" and not parameters[0] > 0:
        raise LibraryError("CURAND_STATUS_OUT_OF_RANGE", f"{name}: lambda {parameters[0]} must be positive")
    if not obj.host:
        obj.call(name, [interposer.address(output), int(count), *parameters])
        return SUCCESS
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
