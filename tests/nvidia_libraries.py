"""Test programs that use NVIDIA's libraries: their build flags, the check
that rcuda's drop-in served them, and a run against the real libraries on a
cupy server (run_on_gpu).

The nvidia-cublas, nvidia-cufft and nvidia-curand wheels (the `test` extra)
give the headers and .so files a program is built against.  Nothing puts
their folder on the library path: at run time the program finds rcuda's
drop-ins (`rcuda run`), as on a client with no CUDA at all."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import program_paths

#: -l names, by the wheel that provides them
WHEELS = {"cublas": "nvidia-cublas", "cublasLt": "nvidia-cublas", "cufft": "nvidia-cufft",
          "curand": "nvidia-curand"}


def nvidia_root() -> Path | None:
    """site-packages/nvidia/cu13, where the wheels install (None: not installed)."""
    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        root = Path(folder) / "cu13"
        if (root / "include").is_dir():
            return root
    return None


def library_flags(*names: str) -> list[str]:
    """nvcc flags to build against the wheels' headers and libraries `names`
    (cublas, cufft, curand...); skips the test when a wheel is missing."""
    root = nvidia_root()
    missing = [n for n in names if root is None or not list((root / "lib").glob(f"lib{n}.so.*"))]
    if missing:
        pytest.skip(f"{', '.join(WHEELS[n] for n in missing)} not installed (pip install -e '.[test]'): "
                    f"no headers or libraries to build the test program against")
    # The wheels ship lib<name>.so.<major> only (no lib<name>.so): -l:FILE names it.
    files = [sorted((root / "lib").glob(f"lib{n}.so.*"))[0].name for n in names]
    return [f"-I{root / 'include'}", f"-L{root / 'lib'}", *(f"-l:{f}" for f in files)]


def assert_library_is_rcudas(stdout: str, library: str) -> None:
    """The program's "<library> from PATH" line (dladdr of one of the
    library's functions) names rcuda's own library: librcuda.so (`rcuda
    lib`; a drop-in is a filter of it, so its functions live there) or a
    drop-in of `rcuda lib --dir`, never a real copy of NVIDIA's."""
    import re
    import subprocess
    import sys
    match = re.search(rf"^{library} from (\S+)$", stdout, re.M)
    assert match, f"the program did not say where {library} came from:\n{stdout}"
    found = Path(match.group(1)).resolve()
    rcuda = [sys.executable, "-m", "rcuda.cli", "lib"]
    interposer = Path(subprocess.run(rcuda, capture_output=True, text=True, check=True).stdout.strip()).resolve()
    dropins = Path(subprocess.run([*rcuda, "--dir"], capture_output=True, text=True, check=True).stdout.strip())
    assert found == interposer or found.parent == dropins.resolve(), f"{library} came from {found}"


def run_on_gpu(compile_cuda, source: str, *libraries: str, devices: int = 1):
    """Run `source` (all its sections), built against `libraries`, on a cupy
    server of `devices` GPUs: NVIDIA's real libraries behind rcuda.  Skips
    the test where cupy has no GPU, or fewer than `devices`."""
    return program_paths.run_on_gpu(compile_cuda, source, devices=devices, flags=library_flags(*libraries))
