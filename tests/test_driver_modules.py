"""The driver API's modules, libraries, linking and launches: real programs
linked to rcuda's libcuda.so.1 (and libcudart.so.13 for their memory), run
through `rcuda run` against sim servers, loading images nvcc built here
(a fatbinary, a cubin, PTX, -rdc PTX to link), a kernel NVRTC compiles in
the program, and a program mixing <<<>>> and cuLaunchKernel on one stream.
Where there is a GPU, the same programs on cupy servers: the real driver
loads the images, JIT-compiles the PTX and links cuLink*'s inputs."""
from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from conftest import CUDA_SOURCES, nvcc_path, requires_nvcc, run_program
from program_paths import BACKENDS, check_section, gpu_servers, servers_of
from rcuda.binaries import dropin_dir

pytestmark = requires_nvcc
KERNELS = "driver_module_kernels.py"
SECTIONS = [
    "before_init", "fatbin_kernel_params", "same_function", "cubin_extra", "extra_wrong_size",
    "parameter_styles_refused", "ptx_with_logs", "function_count", "function_not_found", "bad_arguments",
    "module_global", "global_not_found", "fatbinary_in_memory", "fatbinary_refuses_ptx", "cubin_for_a_newer_gpu",
    "corrupt_fatbinary", "launch_ex_cooperative", "cooperative_too_large", "launch_ex_cluster", "stream_order",
    "other_context_function", "unloaded", "library_kernel", "library_other_gpu", "library_enumerate",
    "library_enumerate_handles", "kernel_set_attribute", "library_unload", "link_rdc_ptx", "link_destroy",
    "link_undefined_function", "not_an_image_load", "ptx_calling_vprintf", "link_missing_file", "bad_ptx_load",
    "unbalanced_ptx_load", "bad_ptx_link"]
#: Said in the program's log whatever the backend: refusals the program
#: cannot tell apart by their status name the call.
CLIENT_LOGS = ("cuModuleGetGlobal: the module has no variable 'no_such_variable'",
               "cuModuleGetFunction: the module has no kernel 'no_such_kernel'",
               "cuLaunchKernel: the function scale belongs to the context of GPU0")


@pytest.fixture(params=BACKENDS)
def servers(request):
    """A sim server running the kernels' plugins, and a GPU's (cupy) server where there is a GPU."""
    with servers_of(request.param, KERNELS) as servers:
        yield servers


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


def run_modules(build_dir, images, servers):
    program = driver_program(build_dir, "driver_modules.cu", "-x", "c++")
    return run_program(program, servers, *(str(images[k]) for k in ("fatbin", "cubin", "ptx", "caller", "callee",
                                                                     "sm90")))


@pytest.fixture(scope="module")
def modules_run(build_dir, images):
    """One run of driver_modules.cu against a two-GPU sim server."""
    with servers_of("sim", KERNELS, devices=2) as servers:
        return run_modules(build_dir, images, servers)


@pytest.mark.parametrize("section", SECTIONS)
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
    for said in CLIENT_LOGS:
        assert said in modules_run.stderr, modules_run.stderr[-3000:]


def test_driver_modules_on_a_gpu(build_dir, images):
    """The cupy backend: the real driver loads the fatbinary, the cubins
    and the PTX (its JIT), links the -rdc PTX (cuLink*), launches with both
    parameter styles, and writes the JIT's logs.  Two GPUs: another
    server's GPU0 where this machine has one."""
    with gpu_servers(2, one_server=False) as servers:
        import cupy
        # A cubin runs only on GPUs of its compute capability's major version: one for this GPU.
        arch = cupy.cuda.Device(0).compute_capability
        cubin = build_dir / f"driver_module_kernels_sm{arch}.cubin"
        nvcc("-cubin", f"-arch=sm_{arch}", "-o", str(cubin), str(CUDA_SOURCES / "driver_module_kernels.cu"))
        result = run_modules(build_dir, {**images, "cubin": cubin}, servers)
    check_section(result, *SECTIONS)
    assert result.returncode == 0 and "PASSED driver_modules" in result.stdout, result.stdout + result.stderr[-3000:]
    for said in CLIENT_LOGS:
        assert said in result.stderr, result.stderr[-3000:]


def nvrtc_paths() -> tuple[Path, Path]:
    """(include, lib) folders of PyPI's nvidia-cuda-nvrtc (rcuda's test extra)."""
    try:
        files = metadata.files("nvidia-cuda-nvrtc") or []
    except metadata.PackageNotFoundError:
        pytest.fail("nvidia-cuda-nvrtc is not installed: pip install -e '.[test]'")
    header = next(Path(f.locate()) for f in files if f.name == "nvrtc.h")
    library = next(Path(f.locate()) for f in files if f.name == "libnvrtc.so.13")
    return header.parent, library.parent


def test_nvrtc_kernel(build_dir, servers):
    include, lib = nvrtc_paths()
    program = driver_program(build_dir, "driver_nvrtc.cu", "-x", "c++", f"-I{include}", f"-L{lib}",
                             "-l:libnvrtc.so.13", f"-Xlinker=-rpath,{lib}")
    result = run_program(program, servers)
    assert result.returncode == 0 and "PASSED driver_nvrtc" in result.stdout, result.stdout + result.stderr[-3000:]
    for section in ("supported_archs", "device_arch_supported", "nvrtc_compile", "nvrtc_kernel_runs"):
        check_section(result, section)


def test_runtime_and_driver_launches_share_a_stream(build_dir, servers):
    ptx = build_dir / "driver_mixed_kernels.ptx"
    nvcc("-ptx", "-o", str(ptx), str(CUDA_SOURCES / "driver_mixed_kernels.cu"))
    program = driver_program(build_dir, "driver_mixed.cu")
    result = run_program(program, servers, str(ptx))
    assert result.returncode == 0 and "PASSED driver_mixed" in result.stdout, result.stdout + result.stderr[-3000:]
    for section in ("runtime_setup", "driver_module", "interleaved_launches", "stream_order"):
        check_section(result, section)
