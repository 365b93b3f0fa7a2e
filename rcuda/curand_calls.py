"""cuRAND's generating and setting calls as the client forwards them and the
servers run them (client/libraries/curand.py, server/backends/sim_libraries.py,
server/backends/cuda_libraries.py): one table, so the three agree."""
from __future__ import annotations

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
}

#: name -> (its one value's C type as a struct format, the sim's SimGenerator method)
SETTINGS = {
    "curandSetPseudoRandomGeneratorSeed": ("Q", "set_seed"),
    "curandSetGeneratorOffset": ("Q", "set_offset"),
    "curandSetGeneratorOrdering": ("i", "set_ordering"),
    "curandSetQuasiRandomGeneratorDimensions": ("I", "set_dimensions"),
}
