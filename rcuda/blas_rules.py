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

#: cublas<type><family>[_v2][_64] -> family ("gemv", "gemmStridedBatched", "GemmEx"...).
_FAMILY = re.compile(r"^cublas(?:I)?(?:Sc|Dz|Cs|Zd|[SDCZH])?(?P<family>[A-Za-z0-9]+?)(?:_v2)?(?:_64)?$")


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
    for name in ("m", "n", "k", "nrhs", "batchCount", "batchSize"):
        if name in a:
            need(a[name] >= 0, f"{name}={a[name]}")
    if problems:
        return problems
    m, n, k = get("m", 0), get("n", 0), get("k", 0)
    if family in ("gemv",):
        need(a["lda"] >= max(1, m), f"lda={a['lda']} < max(1, m)")
    elif family in ("ger", "geru", "gerc"):
        need(a["lda"] >= max(1, m), f"lda={a['lda']} < max(1, m)")
    elif family in ("symv", "hemv", "trmv", "trsv"):
        need(a["lda"] >= max(1, n), f"lda={a['lda']} < max(1, n)")
    elif family in ("gemm", "gemmBatched", "gemmStridedBatched", "GemmEx", "GemmBatchedEx",
                    "GemmStridedBatchedEx", "gemm3m"):
        need(a["lda"] >= max(1, _rows(a["transa"], m, k)), f"lda={a['lda']}")
        need(a["ldb"] >= max(1, _rows(a["transb"], k, n)), f"ldb={a['ldb']}")
        need(a["ldc"] >= max(1, m), f"ldc={a['ldc']} < max(1, m)")
    elif family in ("symm", "hemm"):
        need(a["lda"] >= max(1, m if a["side"] == 0 else n), f"lda={a['lda']}")
        need(a["ldb"] >= max(1, m), f"ldb={a['ldb']} < max(1, m)")
        need(a["ldc"] >= max(1, m), f"ldc={a['ldc']} < max(1, m)")
    elif family in ("syrk", "herk", "syr2k", "her2k", "syrkx", "herkx"):
        need(a["lda"] >= max(1, _rows(a["trans"], n, k)), f"lda={a['lda']}")
        if "ldb" in a:
            need(a["ldb"] >= max(1, _rows(a["trans"], n, k)), f"ldb={a['ldb']}")
        need(a["ldc"] >= max(1, n), f"ldc={a['ldc']} < max(1, n)")
    elif family in ("trmm", "trsm"):
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
    elif family in ("getrfBatched", "getriBatched", "matinvBatched"):
        need(a["lda"] >= max(1, n), f"lda={a['lda']} < max(1, n)")
        if "ldc" in a:
            need(a["ldc"] >= max(1, n), f"ldc={a['ldc']} < max(1, n)")
        if family == "matinvBatched":
            need(n <= 32, f"n={n} > 32")
            need(a["lda_inv"] >= max(1, n), f"lda_inv={a['lda_inv']} < max(1, n)")
    if family in ("gemv", "ger", "geru", "gerc", "symv", "hemv", "trmv", "trsv"):
        for name in ("incx", "incy"):
            if name in a:
                need(a[name] != 0, f"{name}=0")
    return problems


#: getrsBatched reports its first bad argument in *info as -(its position), the handle first.
_GETRS_POSITIONS = {"trans": 2, "n": 3, "nrhs": 4, "lda": 6, "ldb": 9, "batchSize": 11}


def getrs_info(a: dict) -> int:
    """*info of a getrsBatched call: 0, or -(position) of its first bad argument."""
    n = a["n"]
    checks = [("trans", a["trans"] in (0, 1, 2)), ("n", n >= 0), ("nrhs", a["nrhs"] >= 0),
              ("lda", a["lda"] >= max(1, n)), ("ldb", a["ldb"] >= max(1, n)), ("batchSize", a["batchSize"] >= 0)]
    return next((-_GETRS_POSITIONS[name] for name, ok in checks if not ok), 0)


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
