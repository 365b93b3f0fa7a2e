"""The drop-in libcudart.so.13: a program runs through it with only
LD_LIBRARY_PATH set, on a machine where no real CUDA runtime is visible (the
toolkit is hidden under an empty tmpfs in a private mount namespace)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import requires_nvcc
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc


def test_dropin_defines_the_libcudart_version_node():
    library = dropin_dir() / "libcudart.so.13"
    with open(library, "rb") as f:
        elf = ELFFile(f)
        soname = next(t.soname for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_SONAME")
        versions = elf.get_section_by_name(".gnu.version_d")
        names = {aux.name for _, auxes in versions.iter_versions() for aux in auxes}
    assert soname == "libcudart.so.13"
    assert "libcudart.so.13" in names


@pytest.mark.parametrize("soname", ["libcublas.so.13", "libcublasLt.so.13", "libcufft.so.12", "libcurand.so.10"])
def test_library_dropins_define_nvidias_version_nodes(soname):
    """A program linked to NVIDIA's library needs its version node: the
    loader refuses a library without it."""
    with open(dropin_dir() / soname, "rb") as f:
        elf = ELFFile(f)
        found = next(t.soname for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_SONAME")
        versions = elf.get_section_by_name(".gnu.version_d")
        names = {aux.name for _, auxes in versions.iter_versions() for aux in auxes}
        symbols = {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()}
    assert found == soname and soname in names
    assert {"libcublas.so.13": "cublasSgemm_v2", "libcublasLt.so.13": "cublasLtMatmul",
            "libcufft.so.12": "cufftExecC2C", "libcurand.so.10": "curandGenerateUniform"}[soname] in symbols


def real_cudart_dir() -> Path | None:
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parent.parent if nvcc else None


def in_namespace_without_cuda(script: str, env: dict) -> subprocess.CompletedProcess:
    toolkit = real_cudart_dir()
    return subprocess.run(["unshare", "--mount", "sh", "-c", f"mount -t tmpfs none {toolkit} && {script}"],
                          capture_output=True, text=True, timeout=120, env=env)


def test_runs_with_only_ld_library_path_and_no_cuda_installed(compile_cuda, sim_server):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to hide the CUDA toolkit in a mount namespace")
    probe = in_namespace_without_cuda("true", dict(os.environ))
    if probe.returncode != 0:
        pytest.skip(f"cannot make a private mount namespace here: {probe.stderr.strip()}")
    program = compile_cuda("vector_add.cu")
    bare = {"PATH": "/usr/bin:/bin", "RCUDA_SERVERS": sim_server.address}

    without = in_namespace_without_cuda(f"{program} 1000", bare)
    assert without.returncode != 0
    assert "libcudart.so.13: cannot open shared object file" in without.stderr  # no real runtime anywhere

    through = in_namespace_without_cuda(f"{program} 1000", dict(bare, LD_LIBRARY_PATH=str(dropin_dir())))
    assert through.returncode == 0, through.stdout + through.stderr
    assert "PASSED vectorAdd n=1000" in through.stdout
