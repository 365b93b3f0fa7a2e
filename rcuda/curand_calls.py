"""cuRAND's generating and setting calls, and its host tables, as the client
forwards them and the servers run them (client/libraries/curand.py,
server/backends/sim_libraries.py, server/backends/cuda_libraries.py): one
table, so the three agree."""
from __future__ import annotations

import struct

#: name -> (the numbers' type, a struct and numpy format; how many
#: parameters follow the count; the sim's SimGenerator method)
GENERATES = {
    "curandGenerate": ("I", 0, "generate"),
    "curandGenerateLongLong": ("Q", 0, "generate_long_long"),
    "curandGenerateUniform": ("f", 0, "uniform"),
    "curandGenerateUniformDouble": ("d", 0, "uniform_double"),
    "curandGenerateNormal": ("f", 2, "normal"),
    "curandGenerateNormalDouble": ("d", 2, "normal_double"),
    "curandGenerateLogNormal": ("f", 2, "log_normal"),
    "curandGenerateLogNormalDouble": ("d", 2, "log_normal_double"),
    "curandGeneratePoisson": ("I", 1, "poisson"),
    "curandGeneratePoissonMethod": ("I", 2, "poisson_method"),
}

#: name -> the struct formats of its parameters after the count, as the C
#: call takes them (the float forms' mean and stddev are floats; Poisson's
#: lambda a double, its method an int); calls not named take none.
PARAMETERS = {
    "curandGenerateNormal": "ff", "curandGenerateLogNormal": "ff",
    "curandGenerateNormalDouble": "dd", "curandGenerateLogNormalDouble": "dd",
    "curandGeneratePoisson": "d", "curandGeneratePoissonMethod": "di",
}

#: The methods curandGeneratePoissonMethod takes (CURAND_CHOOSE_BEST,
#: CURAND_DEVICE_API, CURAND_3RD: what libcurand 10.4.5 accepts; any other is
#: CURAND_STATUS_OUT_OF_RANGE).
POISSON_METHODS = (0, 9, 11)

#: Dimensions of cuRAND's tables of Sobol' direction vectors and scramble constants.
TABLE_DIMENSIONS = 20000
#: curandDirectionVectorSet_t values
DIRECTION_VECTORS_32_JOEKUO6, SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6 = 101, 102
DIRECTION_VECTORS_64_JOEKUO6, SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6 = 103, 104

#: cuRAND's host tables, which the server answers whole (one frame) and the
#: client keeps for the process: name -> (the element's struct format,
#: elements per dimension, the direction vector sets it takes: none for the
#: scramble constants, which take no argument).
TABLES = {
    "curandGetDirectionVectors32": ("I", 32, (DIRECTION_VECTORS_32_JOEKUO6, SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6)),
    "curandGetDirectionVectors64": ("Q", 64, (DIRECTION_VECTORS_64_JOEKUO6, SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6)),
    "curandGetScrambleConstants32": ("I", 1, ()),
    "curandGetScrambleConstants64": ("Q", 1, ()),
}


def table_bytes(name: str) -> int:
    """The size of table `name` (TABLES) in bytes."""
    fmt, per_dimension, _ = TABLES[name]
    return TABLE_DIMENSIONS * per_dimension * struct.calcsize(fmt)

#: name -> (its one value's C type as a struct format, the sim's SimGenerator method)
SETTINGS = {
    "curandSetPseudoRandomGeneratorSeed": ("Q", "set_seed"),
    "curandSetGeneratorOffset": ("Q", "set_offset"),
    "curandSetGeneratorOrdering": ("i", "set_ordering"),
    "curandSetQuasiRandomGeneratorDimensions": ("I", "set_dimensions"),
}
