"""The driver API's modules, libraries, linking and launches: real programs
linked to rcuda's libcuda.so.1 (and libcudart.so.13 for their memory), run
through `rcuda run` against sim servers, loading images nvcc built here
(a fatbinary, a cubin, PTX, -rdc PTX to link), a kernel NVRTC compiles in
the program, and a program mixing <<<>>> and cuLaunchKernel on one stream."""
from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from conftest import CUDA_SOURCES, nvcc_path, requires_nvcc, run_program, start_server
from program_paths import check_section
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc
KERNELS = "driver_module_kernels.py"


def nvcc(*args: str) -> None:
    subprocess.run([nvcc_path(), *args], check=True, capture_output=True, text=True, timeout=300)


def driver_program(build_dir: Path, source: str, *flags: str) -> Path:
    """A program linked to rcuda's libcuda.so.1 (the only one here) and the runtime."""
    out = build_dir / Path(source).stem
    nvcc("-cudart", "shared", "-o", str(out), str(CUDA_SOURCES / source), f"-L{dropin_dir()}", "-l:libcuda.so.1",
         *flags)
    return out


@pytest.fixture(scope="module")
def images(build_dir) -> dict[str, Path]:
    """driver_module_kernels.cu as nvcc -fatbin, -cubin and -ptx; the two
    -rdc PTX halves of a link."""
    source, made = CUDA_SOURCES / "driver_module_kernels.cu", {}
    for kind, flags in (("fatbin", ()), ("cubin", ("-arch=sm_80",)), ("ptx", ())):
        made[kind] = build_dir / f"driver_module_kernels.{kind}"
        nvcc(f"-{kind}", *flags, "-o", str(made[kind]), str(source))
    made["sm90"] = build_dir / "driver_module_kernels_sm90.cubin"
    nvcc("-cubin", "-arch=sm_90", "-o", str(made["sm90"]), str(source))
    for half in ("caller", "callee"):
        made[half] = build_dir / f"driver_link_{half}.ptx"
        nvcc("-ptx", "-rdc=true", "-o", str(made[half]), str(CUDA_SOURCES / f"driver_link_{half}.cu"))
    return made


@pytest.fixture(scope="module")
def modules_run(build_dir, images):
    """One run of driver_modules.cu against a two-GPU sim server."""
    program = driver_program(build_dir, "driver_modules.cu", "-x", "c++")
    server = start_server("--backend", "sim", "--devices", "2", "--kernels", str(CUDA_SOURCES / KERNELS))
    try:
        return run_program(program, server,
                           *(str(images[k]) for k in ("fatbin", "cubin", "ptx", "caller", "callee", "sm90")))
    finally:
        server.stop()


@pytest.mark.parametrize("section", [
    "before_init", "fatbin_kernel_params", "same_function", "cubin_extra", "extra_wrong_size",
    "parameter_styles_refused", "ptx_with_logs", "function_count", "function_not_found", "bad_arguments",
    "module_global", "global_not_found", "fatbinary_in_memory", "fatbinary_refuses_ptx", "cubin_for_a_newer_gpu", "corrupt_fatbinary",
    "launch_ex_cooperative", "cooperative_too_large", "launch_ex_cluster", "stream_order", "other_context_function",
    "unloaded", "library_kernel", "library_other_gpu", "library_enumerate", "library_enumerate_handles",
    "kernel_set_attribute", "library_unload", "link_rdc_ptx", "link_destroy",
    "link_undefined_function", "not_an_image_load", "ptx_calling_vprintf", "link_missing_file", "bad_ptx_load",
    "unbalanced_ptx_load", "bad_ptx_link"])
def test_driver_modules(modules_run, section):
    check_section(modules_run, section)


def test_driver_modules_passes_and_logs(modules_run):
    out = modules_run.stdout
    assert modules_run.returncode == 0 and "PASSED driver_modules" in out, out + modules_run.stderr[-3000:]
    # The sim's checker wrote the logs: what it checked on success, ptxas-style errors on failure.
    assert "info log: sim: module" in out and "PTX image(s) checked" in out, out
    assert "bad PTX log:" in out and "no .target directive" in out, out
    assert "unbalanced PTX log:" in out and "'(' is never closed" in out, out
    assert "Undefined reference to '_Z5twicef'" in out, out
    # Refusals the program cannot tell apart by their status are explained
    # in its log, naming the call.
    assert "/no/such/file.ptx" not in modules_run.stderr  # a missing file: the status says it all
    for said in ("cuModuleGetGlobal: the module has no variable 'no_such_variable'",
                 "cuModuleGetFunction: the module has no kernel 'no_such_kernel'",
                 "cuLaunchKernel: the function scale belongs to the context of GPU0"):
        assert said in modules_run.stderr, modules_run.stderr[-3000:]


def nvrtc_paths() -> tuple[Path, Path]:
    """(include, lib) folders of PyPI's nvidia-cuda-nvrtc (rcuda's test extra)."""
    try:
        files = metadata.files("nvidia-cuda-nvrtc") or []
    except metadata.PackageNotFoundError:
        pytest.fail("nvidia-cuda-nvrtc is not installed: pip install -e '.[test]'")
    header = next(Path(f.locate()) for f in files if f.name == "nvrtc.h")
    library = next(Path(f.locate()) for f in files if f.name == "libnvrtc.so.13")
    return header.parent, library.parent


def test_nvrtc_kernel(build_dir, server_factory):
    include, lib = nvrtc_paths()
    program = driver_program(build_dir, "driver_nvrtc.cu", "-x", "c++", f"-I{include}", f"-L{lib}",
                             "-l:libnvrtc.so.13", f"-Xlinker=-rpath,{lib}")
    server = server_factory("--backend", "sim", "--kernels", str(CUDA_SOURCES / KERNELS))
    result = run_program(program, server)
    assert result.returncode == 0 and "PASSED driver_nvrtc" in result.stdout, result.stdout + result.stderr[-3000:]
    for section in ("supported_archs", "device_arch_supported", "nvrtc_compile", "nvrtc_kernel_runs"):
        check_section(result, section)


def test_runtime_and_driver_launches_share_a_stream(build_dir, server_factory):
    ptx = build_dir / "driver_mixed_kernels.ptx"
    nvcc("-ptx", "-o", str(ptx), str(CUDA_SOURCES / "driver_mixed_kernels.cu"))
    program = driver_program(build_dir, "driver_mixed.cu")
    server = server_factory("--backend", "sim", "--kernels", str(CUDA_SOURCES / KERNELS))
    result = run_program(program, server, str(ptx))
    assert result.returncode == 0 and "PASSED driver_mixed" in result.stdout, result.stdout + result.stderr[-3000:]
    for section in ("runtime_setup", "driver_module", "interleaved_launches", "stream_order"):
        check_section(result, section)
