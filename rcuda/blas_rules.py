"""cuBLAS's checks of its arguments, which it makes before it launches
anything: shapes, leading dimensions, increments, enumerators.

The client checks a computation here before sending it, so that a mistake
is the call's own CUBLAS_STATUS_INVALID_VALUE, as with cuBLAS, even for the
calls that are sent without waiting.  The rules are the reference BLAS's
(xerbla), by the family of the function's name; parameters are named as in
cublas_api.h.
"""
from __future__ import annotations

import re

from .library_errors import LibraryError

#: cublas<type><family>[_v2][_64] -> family ("gemv", "gemmStridedBatched", "GemmEx"...): the type is
#: one capital before the family's small letters (Csyrk: syrk), two letters before nrm2, asum, scal
#: and rot (Csscal: scal) and none before the Ex forms' capitalised names (DotEx, ScalEx, CopyEx).
_FAMILY = re.compile(r"^cublas(?:(?:Sc|Dz|Cs|Zd)(?=nrm2|asum|scal|rot)|I[sdcz](?=am)"
                     r"|(?!Dot|Scal|Swap|Copy)[SDCZH](?=[a-z]))?(?P<family>[A-Za-z0-9]+?)(?:_v2)?(?:_64)?$")


def _rows(trans: int, normal: int, transposed: int) -> int:
    return normal if trans == 0 else transposed


def _problems(family: str, a: dict) -> list[str]:
    """The arguments cuBLAS refuses in a call of `family` with arguments `a`."""
    get = a.get
    problems = []

    def need(ok: bool, text: str) -> None:
        if not ok:
            problems.append(text)

    for name in ("trans", "transa", "transb"):
        if name in a:
            need(a[name] in (0, 1, 2), f"{name}={a[name]}")
    for name in ("uplo", "diag", "side", "mode"):
        if name in a:
            need(a[name] in (0, 1), f"{name}={a[name]}")
    for name in ("m", "n", "k", "kl", "ku", "nrhs", "batchCount", "batchSize"):
        if name in a:
            need(a[name] >= 0, f"{name}={a[name]}")
    if problems:
        return problems
    m, n, k = get("m", 0), get("n", 0), get("k", 0)
    if family in ("gemv", "gemvBatched", "gemvStridedBatched", "ger", "geru", "gerc"):
        need(a["lda"] >= max(1, m), f"lda={a['lda']} < max(1, m)")
    elif family in ("symv", "hemv", "trmv", "trsv", "syr", "her", "syr2", "her2", "tpttr", "trttp"):
        need(a["lda"] >= max(1, n), f"lda={a['lda']} < max(1, n)")
    elif family == "gbmv":
        need(a["lda"] >= get("kl") + get("ku") + 1, f"lda={a['lda']} < kl + ku + 1")
    elif family in ("sbmv", "hbmv", "tbmv", "tbsv"):
        need(a["lda"] >= k + 1, f"lda={a['lda']} < k + 1")
    elif family in ("gemm", "gemmBatched", "gemmStridedBatched", "GemmEx", "GemmBatchedEx",
                    "GemmStridedBatchedEx", "gemmEx", "gemm3m", "gemm3mBatched", "gemm3mStridedBatched", "gemm3mEx"):
        need(a["lda"] >= max(1, _rows(a["transa"], m, k)), f"lda={a['lda']}")
        need(a["ldb"] >= max(1, _rows(a["transb"], k, n)), f"ldb={a['ldb']}")
        need(a["ldc"] >= max(1, m), f"ldc={a['ldc']} < max(1, m)")
    elif family in ("symm", "hemm"):
        need(a["lda"] >= max(1, m if a["side"] == 0 else n), f"lda={a['lda']}")
        need(a["ldb"] >= max(1, m), f"ldb={a['ldb']} < max(1, m)")
        need(a["ldc"] >= max(1, m), f"ldc={a['ldc']} < max(1, m)")
    elif family in ("syrk", "herk", "syr2k", "her2k", "syrkx", "herkx", "syrkEx", "herkEx", "syrk3mEx",
                    "herk3mEx"):
        need(a["lda"] >= max(1, _rows(a["trans"], n, k)), f"lda={a['lda']}")
        if "ldb" in a:
            need(a["ldb"] >= max(1, _rows(a["trans"], n, k)), f"ldb={a['ldb']}")
        need(a["ldc"] >= max(1, n), f"ldc={a['ldc']} < max(1, n)")
    elif family in ("trmm", "trsm", "trsmBatched"):
        need(a["lda"] >= max(1, m if a["side"] == 0 else n), f"lda={a['lda']}")
        need(a["ldb"] >= max(1, m), f"ldb={a['ldb']} < max(1, m)")
        if "ldc" in a:
            need(a["ldc"] >= max(1, m), f"ldc={a['ldc']} < max(1, m)")
    elif family == "geam":
        need(a["lda"] >= max(1, _rows(a["transa"], m, n)), f"lda={a['lda']}")
        need(a["ldb"] >= max(1, _rows(a["transb"], m, n)), f"ldb={a['ldb']}")
        need(a["ldc"] >= max(1, m), f"ldc={a['ldc']} < max(1, m)")
    elif family == "dgmm":
        need(a["lda"] >= max(1, m), f"lda={a['lda']} < max(1, m)")
        need(a["ldc"] >= max(1, m), f"ldc={a['ldc']} < max(1, m)")
    elif family in ("geqrfBatched", "gelsBatched"):
        need(a["lda"] >= max(1, m), f"lda={a['lda']} < max(1, m)")
        if "ldc" in a:
            need(a["ldc"] >= max(1, m), f"ldc={a['ldc']} < max(1, m)")
    elif family in ("getrfBatched", "getriBatched", "matinvBatched"):
        need(a["lda"] >= max(1, n), f"lda={a['lda']} < max(1, n)")
        if "ldc" in a:
            need(a["ldc"] >= max(1, n), f"ldc={a['ldc']} < max(1, n)")
        if family == "matinvBatched":
            need(n <= 32, f"n={n} > 32")
            need(a["lda_inv"] >= max(1, n), f"lda_inv={a['lda_inv']} < max(1, n)")
    if family in LEVEL2:
        for name in ("incx", "incy"):
            if name in a:
                need(a[name] != 0, f"{name}=0")
    return problems


#: the Level 2 families, whose increments must not be 0
LEVEL2 = ("gemv", "gemvBatched", "gemvStridedBatched", "gbmv", "ger", "geru", "gerc", "symv", "hemv", "sbmv", "hbmv",
          "spmv", "hpmv", "trmv", "trsv", "tbmv", "tbsv", "tpmv", "tpsv", "syr", "her", "syr2", "her2", "spr", "hpr",
          "spr2", "hpr2")


def info(name: str, a: dict) -> int:
    """*info of the LAPACK-like calls that have a host `info` (getrsBatched, geqrfBatched, gelsBatched):
    0, or -(position) of the first argument cuBLAS refuses, the handle first."""
    match = _FAMILY.match(name)
    family = match["family"] if match else ""
    ok = lambda v: v >= 0  # noqa: E731
    if family == "getrsBatched":
        n = a["n"]
        checks = [(2, a["trans"] in (0, 1, 2)), (3, ok(n)), (4, ok(a["nrhs"])), (6, a["lda"] >= max(1, n)),
                  (9, a["ldb"] >= max(1, n)), (11, ok(a["batchSize"]))]
    elif family == "geqrfBatched":
        m = a["m"]
        checks = [(2, ok(m)), (3, ok(a["n"])), (5, a["lda"] >= max(1, m)), (8, ok(a["batchSize"]))]
    elif family == "gelsBatched":  # then CUBLAS_STATUS_NOT_SUPPORTED: a transpose (2), m < n (3)
        m = a["m"]
        checks = [(3, ok(m)), (4, ok(a["n"])), (5, ok(a["nrhs"])), (7, a["lda"] >= max(1, m)),
                  (9, a["ldc"] >= max(1, m)), (12, ok(a["batchSize"])), (2, a["trans"] == 0), (3, m >= a["n"])]
    else:
        return 0
    return next((-position for position, good in checks if not good), 0)


def checker(name: str):
    """check(arguments) for cuBLAS function `name`: CUBLAS_STATUS_INVALID_VALUE,
    naming what is wrong, for arguments cuBLAS refuses.  (Made once per
    function: its family is found by its name once.)"""
    match = _FAMILY.match(name)
    family = match["family"] if match else ""

    def check(arguments: dict) -> None:
        problems = _problems(family, arguments)
        if problems:
            raise LibraryError("CUBLAS_STATUS_INVALID_VALUE", f"{name}: {', '.join(problems)}")

    return check


# ---------------------------------------------------------------- cuBLASLt's epilogues

#: rcuda's own call (no library export) that follows a cuBLASLt GEMM on its
#: cuBLAS handle, in its stream: cuBLASLt's epilogue, applied in place to D
#: (client/libraries/cublaslt.py sends it, server/library_calls.py defines it).
MATMUL_EPILOGUE = "cublasLtMatmulEpilogue"
#: cublasLtEpilogue_t (cublasLt.h): DEFAULT, and the bits the forward epilogues are made of.
EPILOGUE_DEFAULT, EPILOGUE_RELU, EPILOGUE_BIAS, EPILOGUE_GELU, EPILOGUE_AUX = 1, 2, 4, 32, 128
#: The epilogues rcuda applies, by their cublasLt.h names.
EPILOGUES = {
    "CUBLASLT_EPILOGUE_RELU": EPILOGUE_RELU,
    "CUBLASLT_EPILOGUE_RELU_AUX": EPILOGUE_RELU | EPILOGUE_AUX,
    "CUBLASLT_EPILOGUE_BIAS": EPILOGUE_BIAS,
    "CUBLASLT_EPILOGUE_RELU_BIAS": EPILOGUE_RELU | EPILOGUE_BIAS,
    "CUBLASLT_EPILOGUE_RELU_AUX_BIAS": EPILOGUE_RELU | EPILOGUE_AUX | EPILOGUE_BIAS,
    "CUBLASLT_EPILOGUE_GELU": EPILOGUE_GELU,
    "CUBLASLT_EPILOGUE_GELU_AUX": EPILOGUE_GELU | EPILOGUE_AUX,
    "CUBLASLT_EPILOGUE_GELU_BIAS": EPILOGUE_GELU | EPILOGUE_BIAS,
    "CUBLASLT_EPILOGUE_GELU_AUX_BIAS": EPILOGUE_GELU | EPILOGUE_AUX | EPILOGUE_BIAS,
}
#: The rest of cublasLt.h's, which answer CUBLAS_STATUS_NOT_SUPPORTED (the backward passes).
UNSUPPORTED_EPILOGUES = {8 | 128: "CUBLASLT_EPILOGUE_DRELU", 8 | 128 | 16: "CUBLASLT_EPILOGUE_DRELU_BGRAD",
                         64 | 128: "CUBLASLT_EPILOGUE_DGELU", 64 | 128 | 16: "CUBLASLT_EPILOGUE_DGELU_BGRAD",
                         256: "CUBLASLT_EPILOGUE_BGRADA", 512: "CUBLASLT_EPILOGUE_BGRADB"}
#: cudaDataType -> numpy dtype name: the types of D, the bias and the GELU aux matrix an epilogue takes.
EPILOGUE_TYPES = {0: "float32", 1: "float64", 2: "float16"}
#: MATMUL_EPILOGUE's arguments, in order: the epilogue; D (m x n, `batch` of them, `stride_d`
#: elements apart, its cudaDataType and leading dimension); the bias vector (m elements of
#: `bias_type`, `bias_stride` elements from one batch's to the next; 0 without BIAS); the aux
#: output (0 without AUX: for RELU a bitmask, `aux_ld` and `aux_stride` in bits; for GELU a
#: matrix of `aux_type`, the GELU's input).
EPILOGUE_ARGUMENTS = ("epilogue", "m", "n", "batch", "d", "d_type", "ldd", "stride_d", "bias", "bias_type",
                      "bias_stride", "aux", "aux_type", "aux_ld", "aux_stride")


def check_epilogue_support(epilogue: int, d_type: int, bias_type: int, aux_type: int) -> None:
    """CUBLAS_STATUS_NOT_SUPPORTED for an epilogue rcuda does not apply, or
    a cudaDataType of D, the bias or the GELU aux matrix it does not take."""
    if epilogue not in EPILOGUES.values():
        name = UNSUPPORTED_EPILOGUES.get(epilogue, f"epilogue {epilogue}")
        raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED",
                           f"cublasLtMatmul: {name} (rcuda applies RELU, BIAS, GELU and their AUX forms only)")
    types = [("D", d_type)]
    if epilogue & EPILOGUE_BIAS:
        types.append(("the bias", bias_type))
    if epilogue & EPILOGUE_AUX and epilogue & EPILOGUE_GELU:  # RELU's aux is a bitmask, whatever its type
        types.append(("the GELU aux matrix", aux_type))
    for what, data_type in types:
        if data_type not in EPILOGUE_TYPES:
            raise LibraryError("CUBLAS_STATUS_NOT_SUPPORTED", f"cublasLtMatmul: an epilogue with {what} of "
                                                              f"cudaDataType {data_type} (float, double, half only)")


def check_epilogue(a: dict) -> None:
    """cuBLASLt's refusals of an epilogue (`a`: EPILOGUE_ARGUMENTS by name):
    check_epilogue_support's, then CUBLAS_STATUS_INVALID_VALUE for
    arguments cuBLASLt refuses (a missing bias or aux pointer, an aux
    leading dimension or batch stride that is not a multiple of 128 bits
    (RELU) or 8 elements (GELU), or smaller than m)."""
    epilogue = a["epilogue"]
    check_epilogue_support(epilogue, a["d_type"], a["bias_type"], a["aux_type"])
    problems = [f"{name}={a[name]}" for name in ("m", "n", "batch") if a[name] < 0]
    problems += [f"ldd={a['ldd']} < max(1, m)"] * (a["ldd"] < max(1, a["m"]))
    problems += [f"{name}={a[name]} < 0" for name in ("stride_d", "bias_stride", "aux_stride") if a[name] < 0]
    if epilogue & EPILOGUE_BIAS and not a["bias"]:
        problems.append("no CUBLASLT_MATMUL_DESC_BIAS_POINTER")
    if epilogue & EPILOGUE_AUX:
        multiple = 128 if epilogue & EPILOGUE_RELU else 8
        if not a["aux"]:
            problems.append("no CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER")
        if a["aux_ld"] < max(1, a["m"]) or a["aux_ld"] % multiple:
            problems.append(f"CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD {a['aux_ld']} (a multiple of {multiple}, "
                            f"at least m={a['m']})")
        if a["aux_stride"] % multiple:
            problems.append(f"CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE {a['aux_stride']} (a multiple of "
                            f"{multiple})")
    if problems:
        raise LibraryError("CUBLAS_STATUS_INVALID_VALUE", f"cublasLtMatmul: {', '.join(problems)}")
