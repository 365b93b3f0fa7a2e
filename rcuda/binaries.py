"""What kind of program `rcuda run` is about to start, and the native library.

nvcc links the CUDA runtime statically by default; such a program never
calls a shared library, so nothing can intercept it.  We look at the ELF file
before running it, so the user gets a clear instruction instead of a program
that silently looks for a local GPU.  A program of the driver API (linked to
libcuda.so.1, NVIDIA's *Drv and *_nvrtc samples) needs no runtime: it is
accepted, unless it also carries the static runtime.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

LIB_DIR = Path(__file__).resolve().parent / "_lib"
SUPPORTED_CUDART = "libcudart.so.13"
DRIVER = "libcuda.so.1"
#: Defined in a program that carries the static runtime (nvcc's registration hook).
STATIC_RUNTIME_SYMBOL = "__cudaRegisterFatBinary"


class ProgramError(Exception):
    """The program cannot run through rcuda; the message says what to do."""


def library_path() -> Path:
    """The interposer for LD_PRELOAD."""
    return _built(LIB_DIR / "librcuda.so")


def dropin_dir() -> Path:
    """The folder holding the drop-ins libcudart.so.13 and libcuda.so.1, for LD_LIBRARY_PATH."""
    _built(LIB_DIR / "cudart" / DRIVER)
    return _built(LIB_DIR / "cudart" / SUPPORTED_CUDART).parent


def _built(path: Path) -> Path:
    if not path.is_file():
        raise ProgramError(f"rcuda's native library is missing ({path}): reinstall rcuda with "
                           f"`pip install .` so that it is built")
    return path


def find_program(command: str) -> Path | None:
    """The absolute path of `command` as the shell would find it (`./prog`
    relative to here, `prog` on PATH); None when there is none."""
    found = shutil.which(command)
    return Path(os.path.abspath(found)) if found else None


def check_program(path: Path) -> None:
    """Raise ProgramError if `path` is a CUDA program rcuda cannot intercept.
    Programs that are not ELF files (scripts) or contain no CUDA are let
    through: they may start CUDA programs of their own."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            needed = _needed_libraries(elf)
            has_cuda_code = elf.get_section_by_name(".nv_fatbin") is not None
            static_runtime = _defines(elf, STATIC_RUNTIME_SYMBOL)
    except (ELFError, OSError):
        return
    cudarts = [n for n in needed if n.startswith("libcudart.so")]
    # Kernels and no runtime library: the static runtime, even in a stripped
    # program (unless it is a driver program, which may embed its kernels).
    if not cudarts and (static_runtime or (has_cuda_code and DRIVER not in needed)):
        raise ProgramError(
            f"{path} is linked with the static CUDA runtime (nvcc's default), which rcuda cannot "
            f"intercept. Rebuild it with `nvcc -cudart shared ...` (or add `-cudart shared` to "
            f"your CUDA flags; with CMake: set_target_properties(TARGET PROPERTIES "
            f"CUDA_RUNTIME_LIBRARY Shared)).")
    for name in cudarts:
        if name != SUPPORTED_CUDART:
            raise ProgramError(f"{path} was built against {name}; rcuda implements {SUPPORTED_CUDART} "
                               f"(CUDA 13). Rebuild it with a CUDA 13 nvcc and `-cudart shared`.")


def _defines(elf: ELFFile, name: str) -> bool:
    """Whether the program itself defines `name` (in its symbol tables)."""
    for table in (".symtab", ".dynsym"):
        section = elf.get_section_by_name(table)
        for symbol in (section.get_symbol_by_name(name) or []) if section is not None else []:
            if symbol["st_shndx"] != "SHN_UNDEF":
                return True
    return False


def _needed_libraries(elf: ELFFile) -> list[str]:
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            return [tag.needed for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]
    return []
