"""Which CUDA runtime and driver functions rcuda implements: `rcuda coverage`.

Every function libcudart.so.13 exports is in rcuda's library, and each is
exactly one of (native/routes.ini says which functions C answers):
  * `c`        written by hand in C, no Python (the launch path);
  * a group    implemented in Python by client/runtime/, one group per
               module (client/runtime/<group>.py);
  * `c_first+<group>`  made in C when it can (rcuda_c_<name>), otherwise by
               that group's Python;
  * `unsupported`  answers cudaErrorNotSupported and logs its name once.
Every function libcuda.so.1 exports is too, each either in a group
(client/driver/<group>.py) or `unsupported`
(CUDA_ERROR_NOT_SUPPORTED).  So is every export of libcublas.so.13,
libcublasLt.so.13, libcufft.so.12 and libcurand.so.10: implemented by
client/libraries/<library>.py, `forwarded` (a cuBLAS computation sent by
the generic forwarder of client/libraries/cublas.py), or
`unsupported` (the library's "not supported" status; some answer it by
design, each with its reason: client/libraries/registry.py LIBRARY_REFUSED,
listed in docs/coverage.md).
docs/coverage.md is generated from this (`rcuda coverage --markdown`); a test
fails when it is stale.
"""
from __future__ import annotations

import argparse
import collections
import functools
import re
import sys
from pathlib import Path

from rcuda._generated.cuda_driver_api import DRIVER_FUNCTIONS
from rcuda._generated.cudart_api import FUNCTIONS
from rcuda._generated.libraries_api import LIBRARIES, LIBRARY_FUNCTIONS
from rcuda.left_out import INTEROP

DOC = Path(__file__).resolve().parent.parent / "docs" / "coverage.md"


def implemented() -> dict[str, callable]:
    """The runtime's implementations (client/runtime/)."""
    from rcuda.client import entrypoints  # noqa: F401 - imports every runtime module
    from rcuda.client.runtime import core
    return dict(core.IMPLEMENTED)


def driver_implemented() -> dict[str, callable]:
    """The driver API's implementations (client/driver/)."""
    from rcuda.client.driver import dispatch, registry
    dispatch.load_modules()
    return dict(registry.DRIVER_IMPLEMENTED)


def group_of(fn) -> str:
    """A function's group: the name of the module that implements it."""
    return (fn.func if isinstance(fn, functools.partial) else fn).__module__.rsplit(".", 1)[-1]


INTEROP_GROUP = "interop (by design)"


#: The driver's CUDA 3.1 exports whose device pointers or sizes are 32 bits
#: (CUdeviceptr_v1): rcuda's device addresses lie above 4 GiB, as a 64-bit
#: driver's do, so these cannot name them.  Also left out by design.
ABI32 = re.compile(r"CUdeviceptr_v1|CUDA_MEMCPY[23]D_v1|unsigned int \* (free|total)")
ABI32_GROUP = "32-bit ABI (by design)"
BY_DESIGN = (INTEROP_GROUP, ABI32_GROUP)


def _unsupported(name: str) -> str:
    if INTEROP.search(name):
        return INTEROP_GROUP
    row = DRIVER_FUNCTIONS.get(name)
    if row is not None and row["legacy"] and any(ABI32.search(declared) for _, declared in row["params"]):
        return ABI32_GROUP
    return "unsupported"


def classify() -> dict[str, str]:
    """Runtime function name -> "c", a group name, "c_first+<group>" or "unsupported"."""
    python = implemented()
    table = {}
    for name, row in sorted(FUNCTIONS.items()):
        if row["route"] == "c":
            table[name] = "c"
            continue
        group = group_of(python[name]) if name in python else _unsupported(name)
        table[name] = f"c_first+{group}" if row["c_first"] else group
    return table


def classify_driver() -> dict[str, str]:
    """Driver function name -> a group name or "unsupported"."""
    python = driver_implemented()
    return {name: group_of(python[name]) if name in python else _unsupported(name)
            for name in sorted(DRIVER_FUNCTIONS)}


def classify_libraries() -> dict[str, dict[str, str]]:
    """Library -> {function name -> "cublas", "cufft", "curand" (a client
    module's own), "forwarded" (the sim computes it too), "forwarded, GPU
    only" (the sim answers CUBLAS_STATUS_NOT_SUPPORTED) or "unsupported"}."""
    from rcuda.client.libraries import dispatch, registry
    from rcuda.server.backends.sim_cublas import CALLS as sim_blas
    dispatch.load_modules()
    tables: dict[str, dict[str, str]] = {name: {} for name in LIBRARIES}
    for name, row in sorted(LIBRARY_FUNCTIONS.items()):
        if name in registry.LIBRARY_REFUSED:
            group = "unsupported"  # by design, answered by name with the reason
        elif name in registry.LIBRARY_IMPLEMENTED:
            group = group_of(registry.LIBRARY_IMPLEMENTED[name])
        elif row.get("roles"):
            group = "forwarded" if name in sim_blas else "forwarded, GPU only"
        else:
            group = "unsupported"
        tables[row["library"]][name] = group
    return tables


def library_summary(library: str, table: dict[str, str]) -> str:
    return summary(table, LIBRARIES[library]["soname"], LIBRARIES[library]["not_supported"])


def summary(table: dict[str, str], what: str = "CUDA runtime", unsupported: str = "cudaErrorNotSupported") -> str:
    counts = collections.Counter(table.values())
    interop, abi32 = counts.pop(INTEROP_GROUP, 0), counts.pop(ABI32_GROUP, 0)
    left = counts.get("unsupported", 0)
    supported = len(table) - left - interop - abi32
    parts = ", ".join(f"{group} {n}" for group, n in sorted(counts.items()) if group != "unsupported")
    by_design = "".join(f", {n} more {what}, by design" for n, what in
                        ((interop, "graphics and external-resource interop"), (abi32, "of CUDA 3.1's 32-bit ABI")) if n)
    return f"{supported} of {len(table)} {what} exports implemented ({parts}); {left} answer {unsupported}{by_design}"


def driver_summary(table: dict[str, str]) -> str:
    return summary(table, "CUDA driver API", "CUDA_ERROR_NOT_SUPPORTED")


def markdown(table: dict[str, str], driver: dict[str, str], libraries: dict[str, dict[str, str]]) -> str:
    lines = ["<!-- generated by `rcuda coverage --markdown`; do not edit -->", "# CUDA coverage", "",
             "## The runtime API (libcudart.so.13)", "", summary(table) + ".", "",
             "`c`: hand-written in C, without Python; `core`, `memory`, `streams`, `queries`...: implemented",
             "in `client/runtime/<group>.py`; `c_first+<group>`: made in C when it can, otherwise by that",
             "group's Python;",
             "`unsupported`: returns `cudaErrorNotSupported` and logs its name once.  Which functions C",
             "answers, and where that C is written, is `native/routes.ini`.", "",
             "| function | implementation |", "|---|---|"]
    lines += [f"| `{name}` | {group} |" for name, group in table.items()]
    lines += ["", "### CUDA graphs: what is left out", "", *GRAPHS_LEFT_OUT]
    lines += ["", "### Left out by design: graphics and external-resource interop, CUDA 3.1's 32-bit ABI", "",
              *INTEROP_TEXT]
    lines += ["", "## The driver API (libcuda.so.1)", "", driver_summary(driver) + ".", "",
              "Every name libcuda.so.1 exports, legacy and per-thread variants included.  `core`:",
              "`client/driver/core.py`; `<group>`: `client/driver/<group>.py`; `unsupported`: returns",
              "`CUDA_ERROR_NOT_SUPPORTED` and logs its name once.", "",
              "| function | implementation |", "|---|---|"]
    lines += [f"| `{name}` | {group} |" for name, group in driver.items()]
    lines += ["", "## The libraries (cuBLAS, cuBLASLt, cuFFT, cuRAND)", "",
              "Every name NVIDIA's libcublas.so.13, libcublasLt.so.13, libcufft.so.12 and libcurand.so.10",
              "export.  `cublas`, `cufft`, `curand`...: `client/libraries/<library>.py`; `forwarded`: a cuBLAS",
              "computation the generic forwarder of `client/libraries/cublas.py` sends by its parameters' roles",
              "(`native/library_annotations.ini`), computed by cuBLAS on a GPU and by the sim",
              "(`server/backends/sim_cublas.py`); `forwarded, GPU only`: the sim answers",
              "`CUBLAS_STATUS_NOT_SUPPORTED`;",
              "`unsupported`: returns the library's \"not supported\" status and logs its name once."]
    lines += ["", "### The libraries: what is left out", "", *libraries_left_out()]
    lines += ["", "## PyTorch", "", *PYTORCH]
    for library, rows in libraries.items():
        lines += ["", f"### {LIBRARIES[library]['soname']}", "", library_summary(library, rows) + ".", "",
                  "| function | implementation |", "|---|---|"]
        lines += [f"| `{name}` | {group} |" for name, group in rows.items()]
    return "\n".join(lines) + "\n"


def libraries_left_out() -> list[str]:
    """The cuFFT and cuRAND exports that stay unsupported, and why: those
    refused by design (their reasons, from client/libraries/), then the rest."""
    from rcuda.client.libraries import dispatch, registry
    dispatch.load_modules()
    by_reason: dict[str, list[str]] = {}
    for name, reason in sorted(registry.LIBRARY_REFUSED.items()):
        by_reason.setdefault(reason, []).append(name)
    rows = [f"| {', '.join(f'`{n}`' for n in names)} | {reason} |" for reason, names in by_reason.items()]
    return ["cuFFT and cuRAND (cuBLAS and cuBLASLt aside, whose tables below say what is forwarded).  Answered by",
            "name, with the reason in the log:", "", "| calls | why |", "|---|---|", *rows, "",
            "The rest of libcufft.so.12's `unsupported` exports answer `CUFFT_NOT_SUPPORTED`:", "",
            "| calls | why |", "|---|---|", *CUFFT_LEFT_OUT]


#: cuFFT's exports that stay unsupported, not refused by design (docs/design.md, the libraries).
CUFFT_LEFT_OUT = [
    "| `cufftXtExecDescriptorR2C`, `C2R`, `D2Z`, `Z2D` | rcuda's multi-GPU plans (`client/libraries/cufft_xt.py`) are complex-to-complex; cuFFT's real multi-GPU descriptors have padded, shuffled layouts of their own |",
    "| `cufftSetPlanPropertyInt64`, `cufftGetPlanPropertyInt64`, `cufftResetPlanProperty`, `cufftXtSetWorkAreaPolicy`, `cufftXtQueryPlan` | not yet forwarded: tuning of a plan's JIT, host threads and work area, and multi-GPU 1-D factors |",
    "| `cufftDescription*`, `cufftDevice*` | cuFFT's database of device functions for cuFFTDx (`cufft_device.h`, a C++ header `native/gen_libraries.py` does not read): code for the program's own kernels, not transforms cuFFT runs |",
    "| `cufftXtMakePlanGuru64`, `cufftDebug` | exported by libcufft.so.12 but declared by none of its headers: no signature to forward |",
]


INTEROP_TEXT = [
    f"The functions marked `{INTEROP_GROUP}` in both APIs' tables (OpenGL, EGL, VDPAU, graphics resources,",
    "external memory and semaphores, NvSci, dma-buf handles of device memory) answer `cudaErrorNotSupported`",
    "/ `CUDA_ERROR_NOT_SUPPORTED`: a remote GPU shares no memory with this machine's graphics stack, and",
    "external memory and semaphores, like the dma-buf file descriptor `cuMemGetHandleForAddressRange` makes",
    "for another device's DMA, are handles (file descriptors, NvSci objects) of the GPU's own machine, which",
    "a program here cannot hold.",
    f"The driver's exports marked `{ABI32_GROUP}` are CUDA 3.1's, with 32-bit device pointers or sizes",
    "(`CUdeviceptr_v1`): rcuda's device addresses lie above 4 GiB, as a 64-bit driver's do, so they cannot",
    "name them (programs built with any later cuda.h call the `_v2` exports, which work).",
]

#: The parts of CUDA graphs rcuda does not have (docs/design.md, "CUDA graphs and stream capture").
GRAPHS_LEFT_OUT = [
    "Both APIs' graphs, stream capture, graph memory nodes, user objects and executable updates work",
    "(`client/graphs.py`).  Not supported, answering `cudaErrorNotSupported` / `CUDA_ERROR_NOT_SUPPORTED`:",
    "",
    "| what | calls |",
    "|---|---|",
    "| conditional nodes (if, while, switch) | `cudaGraphConditionalHandleCreate`, `cudaGraphAddNode` of a conditional node, `cudaGraphSetConditional` in kernels |",
    "| graphs launched from the device | `cudaGraphInstantiate` with `cudaGraphInstantiateFlagDeviceLaunch`, `cudaGraphLaunch` in kernels |",
    "| external semaphore nodes | `cudaGraphAdd/ExecExternalSemaphores*Node*` (rcuda has no external semaphores) |",
    "| programmatic dependencies | edge data other than the default (`cudaGraphEdgeData` ports and types) |",
    "| a graph whose work spans GPUs | `cudaGraphInstantiate` of it |",
]

#: What PyTorch does through rcuda, and the map to the rest of it (tests/test_pytorch.py runs the first part).
PYTORCH = [
    "Runs on sim servers (`tests/test_pytorch.py`, torch 2.14): `is_available`, `device_count`, properties,",
    "`set_device`, tensors to and from GPUs (pinned memory and `non_blocking` too), copies between GPUs of one",
    "server and of two, streams, timed events, `synchronize`, the caching allocator and its statistics,",
    "`empty_cache`, `mem_get_info`, `nn.Linear`'s forward (cuBLASLt, on PyTorch's cuBLAS handle), a clean",
    "exit.  A kernel of PyTorch's fails on the sim, naming it.",
    "",
    "On a GPU server (an H100, torch 2.11, 2026-11-28): PyTorch's elementwise kernels (from libtorch_cuda's",
    "fatbinaries, sent to the server at their first launch) and `torch.matmul` ran and matched the CPU;",
    "`nn.Linear` stopped at cuBLASLt, which refused PyTorch's cuBLAS handle as its own (accepted since, not",
    "yet confirmed on a GPU), so an MLP's training step (`test_pytorch_mlp_on_a_gpu`) has not run through yet.",
    "What stops the rest:",
    "",
    "| what | why |",
    "|---|---|",
    "| cuDNN (`torch.nn.Conv*`, RNNs) | it is not forwarded; NVIDIA's library asks the driver for private tables (`cuGetExportTable`) |",
    "| NCCL (`torch.distributed`) | not forwarded; private driver tables and IPC |",
    "| cuSPARSE, cuSOLVER (`torch.sparse`, `torch.linalg`) | not forwarded: no drop-ins; NVIDIA's libraries link their own runtime |",
    "| CUDA graphs (`torch.cuda.graphs`, `torch.compile`'s `mode=\"reduce-overhead\"`) | stream capture works; not yet tried with PyTorch, whose kernels need a GPU server |",
    "| `torch.compile` (Triton) | not tried: Triton loads cubins through the driver API, which rcuda serves |",
    "| IPC (`torch.multiprocessing` sharing CUDA tensors) | `cudaIpc*` share memory between processes on sim servers; GPU servers have no memory IPC yet |",
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rcuda coverage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print docs/coverage.md")
    parser.add_argument("--unsupported", action="store_true", help="list only the unsupported functions")
    args = parser.parse_args(argv)
    table, driver, libraries = classify(), classify_driver(), classify_libraries()
    if args.markdown:
        sys.stdout.write(markdown(table, driver, libraries))
        return 0
    sections = [(summary(table), table), (driver_summary(driver), driver)]
    sections += [(library_summary(library, rows), rows) for library, rows in libraries.items()]
    for summary_line, rows in sections:
        print(summary_line)
        for name, group in rows.items():
            if not args.unsupported or group == "unsupported":
                print(f"  {name:52} {group}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
