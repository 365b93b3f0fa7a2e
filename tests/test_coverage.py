"""Every CUDA runtime export is in rcuda's library and is exactly one of:
hand-written C, implemented in client/api*.py, or unsupported."""
from __future__ import annotations

import re
from pathlib import Path

from rcuda import coverage
from rcuda._generated.cudart_api import FUNCTIONS

REPO = Path(__file__).resolve().parent.parent


def test_every_export_is_classified_once():
    table = coverage.classify()
    assert set(table) == set(FUNCTIONS) and len(FUNCTIONS) == 422
    python = coverage.implemented()
    c_route = {name for name, row in FUNCTIONS.items() if row["route"] == "c"}
    assert not c_route & set(python), "a function is both hand-written in C and implemented in Python"
    assert set(python) <= set(FUNCTIONS)


def test_c_functions_are_defined_in_the_interposer():
    source = "".join(path.read_text() for path in sorted((REPO / "native").glob("*.c")))
    for name, row in FUNCTIONS.items():
        if row["route"] == "c":
            assert re.search(rf"RCUDA_EXPORT[^;{{]*\b{name}\(", source), f"{name} is not hand-written in native/"


def test_every_export_is_in_both_libraries():
    """Each export is defined exactly once: generated (cudart_exports.c) or
    written by hand (the fast paths, module registration)."""
    sources = "\n".join(path.read_text() for path in [REPO / "native/generated/cudart_exports.c",
                                                      *sorted((REPO / "native").glob("*.c"))])
    version_script = (REPO / "native/generated/libcudart.map").read_text()
    for name in FUNCTIONS:
        definitions = re.findall(rf"RCUDA_EXPORT [^;{{]*\b{name}\(", sources)
        assert len(definitions) == 1, (name, definitions)
        assert re.search(rf"\b{name};", version_script), name


def test_the_groups_issue_4_asks_for_are_implemented():
    table = coverage.classify()
    wanted = ["cudaStreamCreateWithPriority", "cudaStreamWaitEvent", "cudaStreamQuery", "cudaEventElapsedTime",
              "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy2D", "cudaMallocPitch", "cudaMemcpyToSymbol",
              "cudaGetSymbolAddress", "cudaHostAlloc", "cudaHostRegister", "cudaLaunchHostFunc",
              "cudaStreamAddCallback", "cudaDeviceGetAttribute", "cudaFuncGetAttributes", "cudaFuncSetAttribute",
              "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaDeviceReset", "cudaSetDeviceFlags",
              "cudaChooseDevice", "cudaLaunchKernelExC", "cudaMemcpyAsync_ptsz", "cudaMemcpy_ptds"]
    assert [name for name in wanted if table[name] == "unsupported"] == []
