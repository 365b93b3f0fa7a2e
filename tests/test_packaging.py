"""rcuda as a user installs it: a wheel built from this tree (`pip wheel .`),
installed into a fresh venv, run from directories that are not a checkout.

The wheel is tagged for this CPython and platform (its library embeds one
CPython version); its libraries carry no path of the build (source tree,
interpreter, libpython's folder) and find the interpreter and libpython of
the venv they are installed in; `rcuda demo` runs from an empty directory
(the example it builds is package data) and from the checkout, whose rcuda/
folder none of its subprocesses may import (it lacks rcuda.server, which
setup.py maps from server/).

The fresh venv gets its dependencies from this test's environment through a
.pth file (plain folders: the editable install's own .pth files there do not
run), so nothing is downloaded but the build requirements `pip wheel` puts in
its isolated build environment (pyproject.toml), as any `pip install .` does.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from conftest import requires_nvcc

REPO = Path(__file__).resolve().parent.parent
PYTHON_NAME = f"python{sys.version_info.major}.{sys.version_info.minor}"
LIBRARIES = ("librcuda.so", "librcuda_server.so", "cudart/libcudart.so.13", "cudart/libcuda.so.1", "cudart/libcublas.so.13",
             "cudart/libcublasLt.so.13", "cudart/libcufft.so.12", "cudart/libcurand.so.10")
BUILD_TIMEOUT = 300
DEMO_TIMEOUT = 300
#: Not copied into the tree the wheel is built from: other environments and
#: earlier builds.  rcuda/_lib (an editable install's libraries, with its
#: interpreter file and libpython link) is copied, as `pip wheel .` in this
#: checkout would see it, so that the test notices if it leaks into the wheel.
NOT_COPIED = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                    "results", ".whl", ".gl", "gpu-results")


@dataclass
class Installed:
    wheel: Path
    source: Path  # the tree the wheel was built from
    venv: Path
    site: Path  # the venv's site-packages

    @property
    def rcuda(self) -> str:
        return str(self.venv / "bin" / "rcuda")

    @property
    def lib_dir(self) -> Path:
        return self.site / "rcuda" / "_lib"


def user_environment(**extra: str) -> dict:
    """This environment less everything that could lead the installed rcuda
    back to the checkout or to this test's interpreter."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "RCUDA_SERVERS", "RCUDA_PYTHONPATH", "RCUDA_PYTHON",
                        "LD_PRELOAD", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("packaging")
    source = base / "src"
    shutil.copytree(REPO, source, symlinks=True, ignore=NOT_COPIED)
    wheels = base / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), "."],
                           cwd=source, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheels.glob("rcuda-*.whl")

    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = venv / "lib" / PYTHON_NAME / "site-packages"
    assert site.is_dir()
    ours = sysconfig.get_paths()
    (site / "test_dependencies.pth").write_text("".join(f"{p}\n" for p in dict.fromkeys([ours["purelib"],
                                                                                       ours["platlib"]])))
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                              "--no-deps", "-q", str(wheel)], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert install.returncode == 0, install.stdout + install.stderr
    return Installed(wheel, source, venv, site)


# ---------------------------------------------------------------- the wheel


def test_wheel_is_tagged_for_this_python_and_platform(installed):
    abi = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
    assert installed.wheel.name == f"rcuda-0.1.0-{abi}-{abi}-{platform}.whl"
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read("rcuda-0.1.0.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in metadata
    assert {f"rcuda/_lib/{name}" for name in LIBRARIES} <= names
    # What `rcuda demo` and `rcuda bench` build, and their sim kernels, are package data.
    example = {f"rcuda/examples/mnist_dp/{p.name}" for p in (REPO / "examples" / "mnist_dp").iterdir()
               if p.suffix in (".cu", ".cuh", ".h", ".py")}
    benchmarks = {f"rcuda/benchmarks/cuda/{p.name}" for p in (REPO / "benchmarks" / "cuda").iterdir()
                  if p.suffix in (".cu", ".h", ".py")}
    assert "rcuda/examples/mnist_dp/mnist_dp.cu" in example and "rcuda/examples/mnist_dp/sim_kernels.py" in example
    assert example <= names and benchmarks <= names
    # Nothing of the build machine: an editable build's interpreter file and libpython link stay out.
    assert not [n for n in names if n.startswith("rcuda/_lib/") and n not in {f"rcuda/_lib/{x}" for x in LIBRARIES}]


def build_paths(installed: Installed) -> set[str]:
    """Paths of the build machine no installed library may name."""
    paths = {str(REPO), str(installed.source), sys.executable, os.path.realpath(sys.executable), sys.prefix}
    for path in (sys.base_prefix, sysconfig.get_config_var("LIBDIR")):
        if path and not path.startswith(("/usr", "/lib")):  # a distribution's own folders are everyone's
            paths.add(path)
    return {p for p in paths if p and p != "/"}


@pytest.mark.parametrize("name", LIBRARIES)
def test_installed_libraries_carry_no_build_paths(installed, name):
    """What `readelf -d` and `strings` would show: libpython needed by soname
    only, a RUNPATH relative to the library, and no build path anywhere in
    the file (searched as bytes: every section, as `strings -a` does)."""
    library = installed.lib_dir / name
    with open(library, "rb") as f:
        dynamic = next(s for s in ELFFile(f).iter_sections() if isinstance(s, DynamicSection))
        tags = [(t.entry.d_tag, t) for t in dynamic.iter_tags()]
        needed = [t.needed for tag, t in tags if tag == "DT_NEEDED"]
        search = [path for tag, t in tags if tag in ("DT_RPATH", "DT_RUNPATH")
                  for path in (t.rpath if tag == "DT_RPATH" else t.runpath).split(":")]
        filtee = [t.entry.d_val for tag, t in tags if tag == "DT_FILTER"]
    if name.startswith("cudart/"):  # a drop-in: a filter of librcuda.so, found beside it
        assert filtee and search == ["$ORIGIN/.."], (filtee, search)
    elif name == "librcuda_server.so":  # plain C, opened by a server's Python: needs nothing of its own
        assert not [n for n in needed if "python" in n] and not search, (needed, search)
    else:
        assert f"lib{PYTHON_NAME}.so.1.0" in needed or not sysconfig.get_config_var("Py_ENABLE_SHARED"), needed
        assert search, "librcuda.so finds libpython beside it"
    assert not [n for n in needed if "/" in n], needed
    assert all(p.startswith("$ORIGIN") for p in search), search
    data = library.read_bytes()
    assert b"rcuda-build-" not in data  # native/build.py's temporary folder
    named = [path for path in build_paths(installed) if os.fsencode(path) in data]
    assert not named, f"{library} names paths of the build: {named}"


# ---------------------------------------------------------------- running it


@requires_nvcc
def test_library_finds_the_interpreter_and_libpython_of_its_venv(installed, compile_cuda, sim_server, tmp_path):
    """A program run with only LD_PRELOAD (or the drop-in's folder on
    LD_LIBRARY_PATH) and a bare PATH: the embedded client is the venv's
    Python (a .pth hook records its sys.executable and sys.prefix)."""
    program = compile_cuda("vector_add.cu")
    record = tmp_path / "embedded.txt"
    (installed.site / "zz_record_interpreter.pth").write_text(
        'import os, sys; w = os.environ.get("RCUDA_TEST_RECORD"); '
        'w and open(w, "a").write(sys.executable + "\\n" + sys.prefix + "\\n")\n')
    try:
        lib = subprocess.run([installed.rcuda, "lib"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             env=user_environment())
        dropin = subprocess.run([installed.rcuda, "lib", "--dir"], capture_output=True, text=True, timeout=60,
                                cwd=tmp_path, env=user_environment())
        assert lib.returncode == 0 and dropin.returncode == 0, lib.stderr + dropin.stderr
        assert lib.stdout.strip() == str(installed.lib_dir / "librcuda.so") and not lib.stderr
        assert dropin.stdout.strip() == str(installed.lib_dir / "cudart")
        link = installed.lib_dir / f"lib{PYTHON_NAME}.so.1.0"
        if sysconfig.get_config_var("Py_ENABLE_SHARED"):  # made by `rcuda lib`, to the running Python's libpython
            assert link.is_symlink() and link.resolve().is_file()

        bare = {"PATH": "/usr/bin:/bin", "RCUDA_SERVERS": sim_server.address, "RCUDA_TEST_RECORD": str(record)}
        for how in ({"LD_PRELOAD": lib.stdout.strip()}, {"LD_LIBRARY_PATH": dropin.stdout.strip()}):
            record.unlink(missing_ok=True)
            result = subprocess.run([str(program), "1000"], capture_output=True, text=True, timeout=120,
                                    cwd=tmp_path, env={**bare, **how})
            assert result.returncode == 0, f"{how}: {result.stdout}{result.stderr}"
            assert "PASSED vectorAdd n=1000" in result.stdout
            venv = os.path.realpath(installed.venv)  # as the library finds it: from its own resolved path
            assert record.read_text().split("\n")[:2] == [f"{venv}/bin/{PYTHON_NAME}", venv], how

        # An interpreter that is not there: a clear fatal error, never a silent cudaSuccess.
        missing = subprocess.run([str(program), "1000"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                                 env={**bare, "LD_PRELOAD": lib.stdout.strip(), "RCUDA_PYTHON": "/nonexistent/python"})
        assert missing.returncode != 0 and "PASSED" not in missing.stdout
        assert "rcuda: fatal: RCUDA_PYTHON=/nonexistent/python is not an executable file" in missing.stderr
    finally:
        (installed.site / "zz_record_interpreter.pth").unlink()


@pytest.fixture(scope="module")
def demo_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo-cache")


@requires_nvcc
def test_demo_runs_from_an_empty_directory(installed, demo_cache, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = subprocess.run([installed.rcuda, "demo", "--epochs", "2"], capture_output=True, text=True,
                            timeout=DEMO_TIMEOUT, cwd=empty, env=user_environment(XDG_CACHE_HOME=str(demo_cache)))
    assert result.returncode == 0, result.stdout + result.stderr
    example = installed.site / "rcuda" / "examples" / "mnist_dp" / "mnist_dp.cu"
    assert f"rcuda demo: building {example} with nvcc" in result.stdout
    assert re.search(r"^rcuda demo: test accuracy \d+\.\d\d% after 2 epoch\(s\) \(mlp, 4000 training / 1000 test "
                     r"images\); \S+ s of training on 4 remote GPU\(s\)", result.stdout, re.M), result.stdout
    assert not list(empty.iterdir())


@requires_nvcc
def test_demo_from_the_checkout_runs_the_installed_rcuda(installed, demo_cache):
    """Started in the checkout, whose rcuda/ folder lacks rcuda.server and
    rcuda.client: its servers and `rcuda run` still import the installed
    package (python -P, or sys.path[0] dropped on 3.10)."""
    result = subprocess.run([installed.rcuda, "demo", "--epochs", "1", "--", "--train-limit", "512",
                             "--test-limit", "200"], capture_output=True, text=True, timeout=DEMO_TIMEOUT, cwd=REPO,
                            env=user_environment(XDG_CACHE_HOME=str(demo_cache)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^rcuda demo: test accuracy \d+\.\d\d% after 1 epoch\(s\)", result.stdout, re.M), result.stdout
