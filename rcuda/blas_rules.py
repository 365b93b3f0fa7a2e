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
