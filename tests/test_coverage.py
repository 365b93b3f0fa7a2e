"""Every CUDA runtime export is in rcuda's library and is exactly one of:
hand-written C, C first then client/api*.py, implemented in client/api*.py,
or unsupported; native/routes.ini says where its C is written."""
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
    c_first = {name for name, row in FUNCTIONS.items() if row["c_first"]}
    assert c_first and c_first <= set(python), "C leaves what it cannot do to Python, which must implement it"
    assert not c_first & c_route
    assert {table[name].split("+")[0] for name in c_first} == {"c_first"}


def test_hand_written_c_is_where_routes_ini_says():
    """[c] and [registration] functions are exported by the file named, and
    [c_first] ones have their rcuda_c_<name> there."""
    for name, row in FUNCTIONS.items():
        if row["defined_in"] != "native/generated/cudart_exports.c":
            source = (REPO / row["defined_in"]).read_text()
            assert re.search(rf"RCUDA_EXPORT[^;{{]*\b{name}\(", source), \
                f"{name} is not exported by {row['defined_in']}: fix native/routes.ini"
        if row["c_first"]:
            source = (REPO / row["c_first"]).read_text()
            assert re.search(rf"\bint rcuda_c_{name}\(", source), \
                f"rcuda_c_{name} is not in {row['c_first']}: fix native/routes.ini"


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


def test_every_driver_export_is_classified_once():
    """Every libcuda.so.1 export is in librcuda.so once (generated), in the
    drop-in's symbol table, and either implemented in client/api_driver*.py
    or unsupported."""
    from rcuda._generated.cuda_driver_api import DRIVER_FUNCTIONS
    table = coverage.classify_driver()
    assert set(table) == set(DRIVER_FUNCTIONS)
    assert set(coverage.driver_implemented()) <= set(DRIVER_FUNCTIONS)
    for wanted in ("cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString", "cuGetProcAddress_v2",
                   "cuMemAlloc", "cuMemAlloc_v2", "cuMemcpyHtoD_v2_ptds", "cuLaunchKernel_ptsz", "cuGetExportTable"):
        assert wanted in table, wanted
    assert table["cuInit"] == "core" and table["cuGetProcAddress_v2"] == "core"
    sources = (REPO / "native/generated/cuda_driver_exports.c").read_text()
    for name in DRIVER_FUNCTIONS:
        assert len(re.findall(rf"RCUDA_EXPORT CUresult {name}\(", sources)) == 1, name
    assert not set(DRIVER_FUNCTIONS) & set(FUNCTIONS)


def test_drop_ins_name_every_export_of_librcuda():
    """The drop-ins are filters of librcuda.so: each of their names must be
    defined there, or the program would abort on calling it."""
    import subprocess
    from rcuda._generated.cuda_driver_api import DRIVER_FUNCTIONS
    from rcuda.binaries import LIB_DIR, dropin_dir

    def defined(path):
        out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True)
        functions = [line.split() for line in out.stdout.splitlines() if line.strip()]
        return {fields[-1].split("@")[0] for fields in functions if fields[1] != "A"}  # A: the version node

    library = defined(LIB_DIR / "librcuda.so")
    assert defined(dropin_dir() / "libcuda.so.1") == set(DRIVER_FUNCTIONS) <= library
    assert defined(dropin_dir() / "libcudart.so.13") == set(FUNCTIONS) <= library
