"""Build rcuda's interposer library with cffi's embedding mode.

One C module (generated exports of the runtime and the driver API +
interposer.c + cffi's glue) is linked once, and two drop-ins name it:

  rcuda/_lib/librcuda.so               every export, unversioned, for LD_PRELOAD
  rcuda/_lib/cudart/libcudart.so.13    filters of librcuda.so (ld --filter): their
  rcuda/_lib/cudart/libcuda.so.1       symbol tables are libcudart's (with its
                                       version node libcudart.so.13: the loader
                                       refuses an unversioned one) and libcuda's,
                                       their code is librcuda.so's, which the
                                       loader loads in their place

So a process has one copy of the client, however many of the three it loads
(LD_PRELOAD of librcuda.so, a program needing both libcudart.so.13 and
libcuda.so.1): the loader maps librcuda.so once and resolves every symbol of
a filter in it.

librcuda.so embeds the CPython version that runs this script, so it must be
built by an interpreter of the version rcuda is installed for: setup.py does
that.  It carries no path of the build machine: libpython is linked by
soname, found through a RUNPATH relative to the library ($ORIGIN, where
rcuda's Python side links the running interpreter's libpython, see
rcuda/libpython.py), and the interpreter to start is found at run time from where
the library is installed (native/interposer.c, initialize_python).  A build
for a checkout (an editable install, or this script) also writes the
interpreter's path into INTERPRETER_FILE beside the libraries and links
libpython there; a wheel's build does neither.  Run directly for development:
    python native/build.py [--out DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import cffi

NATIVE = Path(__file__).resolve().parent
REPO = NATIVE.parent
MODULE_NAME = "_rcuda_interposer"
#: Beside the libraries of a checkout's build: the interpreter it was built
#: for (read by native/interposer.c).  Never part of a wheel.
INTERPRETER_FILE = "interpreter"

# Entry points that are not CUDA functions (implemented in client/entrypoints.py).
LIFECYCLE_CDEF = """
extern "Python" int rcuda_py_start(void);
extern "Python" void rcuda_py_atexit(void);
extern "Python" void rcuda_py_after_fork_child(void);
static const char *rcuda_library_path(void);
static void rcuda_write_stdout(const char *data, size_t size);
static int rcuda_python_host(void);
static void rcuda_close_client(void);
"""

# The launch fast path (native/launch_fast_path.c): tables Python fills, the
# batches it ships, the current device it shares, and its slow path; and
# whether asynchronous memsets and copies may join the batches
# (native/async_fast_path.c).
FAST_PATH_CDEF = """
extern "Python" cudaError_t rcuda_py_launch(const void *host_fun, dim3 grid, dim3 block, void **args,
                                            size_t shared_mem, void *stream, int per_thread);
static void rcuda_fast_register_kernel(const void *host_fun, uint32_t nparams, const uint32_t *offsets,
                                       const uint32_t *sizes, uint32_t buffer_size);
static void rcuda_fast_kernel_on_device(const void *host_fun, int device, uint32_t fn, uint32_t max_threads,
                                        uint32_t max_dynamic_shared);
static void rcuda_fast_device(int device, int wake_fd, int link, const uint32_t *max_block, const uint32_t *max_grid,
                              uint32_t max_threads, uint32_t max_shared, uint64_t generation);
static void rcuda_fast_set_usable(int device, int usable);
static size_t rcuda_fast_take(int device, char **data, uint32_t *count);
static void rcuda_fast_free(char *data);
static void rcuda_fast_stream(uintptr_t handle, int device, uint64_t id, int add);
static void rcuda_fast_graph(uintptr_t handle, int device, uint64_t id, int add);
static void rcuda_fast_event(uintptr_t handle, int device, uint64_t id, int add);
static void rcuda_fast_events(int welcome);
static void rcuda_fast_per_thread_stream(int device, uint64_t id, uint64_t generation);
static int rcuda_get_current_device(void);
static void rcuda_set_current_device(int device);
static void rcuda_set_driver_context(int current);
static void rcuda_fast_record_ops(int device, int welcome);
static uint64_t rcuda_fast_records_made(int device);
"""

# The device links (native/link.c): Python's calls and posts on them, the
# service thread's wait, liveness and gates; C's synchronous calls
# (native/sync_fast_path.c) with their slow paths, and C's copy of the
# allocation map (native/allocation_table.c) they look pointers up in.
LINK_CDEF = """
#define FAST_MAX_DEVICES ...
struct link_part { const void *data; uint64_t size; int borrowed; };
struct link_reply {
    uint64_t seq;
    int failure, error_number;
    int solicited;
    char *header;
    uint32_t header_size;
    char *payload;
    uint64_t payload_size;
    uint32_t frame_count;
    uint64_t frame_sizes[%(max_frames)d];
    int landed;
};
static int rcuda_link_open(int fd, int device, long long spin_max_ns, long long alive_until_ns);
static int rcuda_link_seal(int handle, const unsigned char *send_key, uint64_t send_number,
                           const unsigned char *receive_key, uint64_t receive_number);
static int rcuda_seal_available(void);
static int rcuda_link_wake_fd(int handle);
static void rcuda_link_alive_until(int handle, long long deadline_ns);
static void rcuda_link_watch_notices(int handle, int watch);
static int rcuda_link_post(int handle, const struct link_part *parts, uint32_t count);
static int rcuda_link_post_awaited(int handle, uint64_t seq, const struct link_part *parts, uint32_t count,
                                   void *into, uint64_t into_size);
static int rcuda_link_call(int handle, uint64_t seq, const char *op, const struct link_part *parts, uint32_t count,
                           void *into, uint64_t into_size, struct link_reply *reply);
static void rcuda_link_free(struct link_reply *reply);
static void rcuda_link_free_payload(char *payload);
static uint64_t rcuda_link_gate(int handle);
static void rcuda_link_open_gate(int handle, uint64_t gate);
static int rcuda_link_service(int handle, int timeout_ms, struct link_reply *delivery);
static int rcuda_link_failure(int handle, int *error_number);
static void rcuda_link_close(int handle);
static void rcuda_link_release(int handle);
static uint64_t rcuda_link_calls_in_c(int handle);
static long long rcuda_link_spin_window(int handle, const char *op);
static uint64_t rcuda_link_records_shipped(int handle);
extern "Python" cudaError_t rcuda_py_link_failed(int device, const char *call, int failure, int error_number);
extern "Python" cudaError_t rcuda_py_link_reply(int device, const char *call, const char *op, uint64_t seq,
                                                const char *header, size_t size);
static void rcuda_fast_device_clean(int device, int clean);
static void rcuda_allocation_added(uint64_t base, uint64_t size, int device);
static void rcuda_allocation_removed(uint64_t base);
static void rcuda_allocations_cleared(void);
static void rcuda_pinned_added(uint64_t base, uint64_t size);
static void rcuda_pinned_block(uint64_t base, uint64_t size, int device, int add);
static void rcuda_pinned_removed(uint64_t base);
"""

# Mapped host memory (native/mapped_memory.c): the mirrors Python makes and
# forgets, the device-side writes it makes, and the refreshes after its own
# synchronisations (on a lane in C; on a ZeroMQ link through Python).
MIRROR_CDEF = """
struct mirror_sync { uint64_t written; int pending; int covers; };
static int rcuda_mirror_add(uint64_t host, uint64_t size, uint64_t device_ptr, int device, uint64_t alias,
                            int dirty, int no_refresh, int guarded);
static void rcuda_mirror_guard(int slot, int guarded);
static void rcuda_mirror_prefetch(int slot, uint64_t offset, uint64_t size);
static void rcuda_mirror_on_touch(int on);
static void rcuda_mirror_remove(int slot);
static void rcuda_mirrors_forget(int device);
static void rcuda_mirror_written(int device, uint64_t stream);
static void rcuda_mirror_before_sync(int device, int scope, uint64_t stream, struct mirror_sync *token);
static int rcuda_mirror_refresh(int device, int handle, const struct mirror_sync *token, struct link_reply *reply);
static int rcuda_mirror_slots(int device, int *slots, uint64_t *device_ptrs, uint64_t *sizes, int max);
static void rcuda_mirror_store(int slot, uint64_t device_ptr, const char *data, uint64_t size);
static int rcuda_mirror_store_runs(int slot, uint64_t device_ptr, const char *payload, uint64_t size, uint64_t count);
static void rcuda_mirror_covered(int device, const struct mirror_sync *token);
static void rcuda_mirror_download_sent(int device, uint64_t device_ptr);
static uint64_t rcuda_mirror_take(int device, char **data, uint64_t **runs, uint32_t *count);
"""

# cudaGetLastError/cudaPeekAtLastError in C (native/last_error.c): Python
# says when an error was recorded; the slow path asks Python.
LAST_ERROR_CDEF = """
extern "Python" cudaError_t rcuda_py_last_error(int take);
static void rcuda_errors_changed(void);
"""

# Runs once, in the embedded interpreter, on the first call into Python.
INIT_CODE = r'''
import os, site, sys
from _rcuda_interposer import ffi, lib

def _python_path():
    """Where rcuda and its dependencies are installed.  `rcuda run` passes its
    own sys.path; otherwise climb from this library to the folder holding
    the rcuda package (site-packages for a normal install)."""
    given = os.environ.get("RCUDA_PYTHONPATH")
    if given:
        return [p for p in given.split(os.pathsep) if p]
    folder = os.path.dirname(ffi.string(lib.rcuda_library_path()).decode())
    while folder and folder != os.path.dirname(folder):
        if os.path.isfile(os.path.join(folder, "rcuda", "__init__.py")):
            return [folder]
        folder = os.path.dirname(folder)
    return []

# Folders this interpreter's own site set up already are left alone (their
# .pth files ran: running them again costs start-up and repeats their hooks).
_paths = [p for p in _python_path() if p not in sys.path]
sys.path[:0] = _paths
for _p in _paths:
    site.addsitedir(_p)  # also runs .pth files (editable installs)
if not getattr(sys, "argv", None):
    sys.argv = [os.path.basename(os.readlink("/proc/self/exe"))]

from rcuda.client import entrypoints
entrypoints.attach(ffi, lib)
'''


# The libraries' exports that have no Python entry point of their own
# (native/library_stubs.c).
LIBRARY_CDEF = """
extern "Python" void rcuda_py_library_unsupported(const char *name);
"""

#: The drop-in libraries of NVIDIA's (native/gen_libraries.py), each a filter
#: of librcuda.so with its own version node.
LIBRARY_DROPINS = ["cublas", "cublasLt", "cufft", "curand"]


# cuGetProcAddress's answer: the address of our export of a name
# (generated/cuda_driver_exports.c).
DRIVER_CDEF = """
static void *rcuda_driver_export(const char *name);
"""


def load_api_table(module: str = "cudart_api", table: str = "FUNCTIONS") -> dict:
    """A generated table of rcuda/_generated: the runtime's (FUNCTIONS) or, with
    ("cuda_driver_api", "DRIVER_FUNCTIONS"), the driver's."""
    spec = importlib.util.spec_from_file_location(module, REPO / "rcuda" / "_generated" / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return getattr(loaded, table)


def load_driver_table() -> dict:
    return load_api_table("cuda_driver_api", "DRIVER_FUNCTIONS")


def load_library_tables() -> tuple[dict, dict]:
    """(LIBRARIES, LIBRARY_FUNCTIONS) of rcuda/_generated/libraries_api.py."""
    return load_api_table("libraries_api", "LIBRARIES"), load_api_table("libraries_api", "LIBRARY_FUNCTIONS")


def library_entry_points(functions: dict) -> str:
    """extern "Python" declarations of the library functions Python serves."""
    lines = []
    for name, row in sorted(functions.items()):
        if row["python"]:
            params = ", ".join(decl for _, decl in row["params"]) or "void"
            lines.append(f'extern "Python" {row["result"]} rcuda_py_{name}({params});')
    return "\n".join(lines)


def python_entry_points(functions: dict) -> str:
    """extern "Python" declarations: one per function routed to Python."""
    lines = []
    for name, row in sorted(functions.items()):
        if row["route"] == "python":
            params = ", ".join(decl for _, decl in row["params"]) or "void"
            lines.append(f'extern "Python" {row["result"]} rcuda_py_{name}({params});')
    return "\n".join(lines)


def load_script(name: str):
    """A module of native/ (its generators), loaded by path: the build runs
    without rcuda installed."""
    spec = importlib.util.spec_from_file_location(f"rcuda_native_{name}", NATIVE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_ffi(extra_link_args: list[str], build_dir: Path) -> cffi.FFI:
    """The cffi module; `build_dir` receives the headers generated at build
    time (wire.h, from rcuda/wire.py)."""
    generated = NATIVE / "generated"
    gen_wire = load_script("gen_wire")
    wire = gen_wire.load_wire()
    (build_dir / "wire.h").write_text(gen_wire.render())
    ffi = cffi.FFI()
    ffi.cdef((generated / "cudart_types.h").read_text())
    ffi.cdef((generated / "cuda_driver_types.h").read_text())
    ffi.cdef(python_entry_points(load_api_table()))
    ffi.cdef(python_entry_points(load_driver_table()))
    ffi.cdef((generated / "libraries_types.h").read_text())
    ffi.cdef(library_entry_points(load_library_tables()[1]))
    ffi.cdef(LIBRARY_CDEF)
    ffi.cdef(DRIVER_CDEF)
    ffi.cdef(LIFECYCLE_CDEF)
    ffi.cdef(FAST_PATH_CDEF)
    ffi.cdef(LINK_CDEF % {"max_frames": wire.MAX_FRAMES})
    ffi.cdef(MIRROR_CDEF)
    ffi.cdef(LAST_ERROR_CDEF)
    ffi.embedding_api("")
    source = "\n".join([
        "#include <stddef.h>",
        "#include <stdint.h>",
        '#include "cudart_types.h"',
        '#include "cudart_layout.h"',
        '#include "cuda_driver_types.h"',
        '#include "cuda_driver_layout.h"',
        '#include "libraries_types.h"',
        '#include "libraries_layout.h"',
        '#include "wire.h"',
        '#include "mapped_memory.h"',
        '#include "interposer.c"',
        '#include "launch_fast_path.c"',
        '#include "after_exit.c"',
        '#include "allocation_table.c"',
        '#include "async_fast_path.c"',
        '#include "msgpack_lite.c"',
        '#include "sealed_records.c"',
        '#include "link.c"',
        '#include "sync_fast_path.c"',
        '#include "mapped_memory.c"',
        '#include "last_error.c"',
        '#include "cudart_exports.c"',
        '#include "cuda_driver_exports.c"',
        '#include "registrations.c"',
        '#include "library_stubs.c"',
        '#include "libraries_exports.c"',
    ])
    # No interpreter path is compiled in: the library finds the interpreter of
    # the environment it is installed in (native/interposer.c).
    ffi.set_source(MODULE_NAME, source, include_dirs=[str(NATIVE), str(generated), str(build_dir)],
                   extra_compile_args=["-O2", "-fvisibility=hidden", "-Wno-unused-function"],
                   extra_link_args=extra_link_args)
    ffi.embedding_init_code(INIT_CODE)
    return ffi


def link_args(soname: str, version_script: Path | None = None, runpath: list[str] = ("$ORIGIN",)) -> list[str]:
    """libpython by soname only (cffi adds -lpython3.X; -L is no RUNPATH),
    found through `runpath`: folders relative to the library ($ORIGIN), never
    absolute ones.  --strip-debug: the debug information would name the
    build tree and the build interpreter's include folder."""
    args = [f"-Wl,-soname,{soname}", f"-Wl,-rpath,{':'.join(runpath)}", "-Wl,--enable-new-dtags",
            "-Wl,--strip-debug", "-Wl,--no-undefined", "-ldl", "-lpthread"]
    if version_script:
        args.append(f"-Wl,--version-script={version_script}")
    return args


def build(out_dir: Path, verbose: bool = False, editable: bool = False) -> list[Path]:
    """Build librcuda.so and the drop-ins into `out_dir` (rcuda/_lib); returns their paths.

    librcuda.so finds libpython in rcuda/_lib (RUNPATH $ORIGIN), where rcuda
    links the running interpreter's; an installed one also in PREFIX/lib
    (four folders up from .../lib/python3.X/site-packages/rcuda/_lib), where
    a Python installed in PREFIX itself (not a venv) keeps it, for a
    read-only installation.  `editable` (a build for a checkout): the
    interpreter's path is written to INTERPRETER_FILE and libpython linked
    beside the libraries now; otherwise neither is there."""
    out_dir = out_dir.resolve()
    (out_dir / "cudart").mkdir(parents=True, exist_ok=True)
    # PREFIX/lib from PREFIX/lib/python3.X/site-packages/rcuda/_lib.
    prefix_lib = [] if editable else ["$ORIGIN/../../../.."]
    library = out_dir / "librcuda.so"
    built = []
    with tempfile.TemporaryDirectory(prefix="rcuda-build-") as tmp, _without_build_rpaths():
        ffi = make_ffi(link_args("librcuda.so", runpath=["$ORIGIN", *prefix_lib]), Path(tmp))
        shutil.move(ffi.compile(tmpdir=tmp, target=library.name, verbose=verbose), library)
        built.append(library)
        built.append(build_filter(out_dir / "cudart" / "libcudart.so.13", load_api_table(), Path(tmp),
                                  NATIVE / "generated" / "libcudart.map"))
        built.append(build_filter(out_dir / "cudart" / "libcuda.so.1", load_driver_table(), Path(tmp)))
        built.append(build_server_executor(out_dir / "librcuda_server.so", Path(tmp)))
        libraries, functions = load_library_tables()
        for name in LIBRARY_DROPINS:
            exports = {f: row for f, row in functions.items() if row["library"] == name}
            built.append(build_filter(out_dir / "cudart" / libraries[name]["soname"], exports, Path(tmp),
                                      NATIVE / "generated" / f"lib{name}.map"))
    for target in built:
        _check_no_build_paths(target)
    interpreter = out_dir / INTERPRETER_FILE
    name, libpython = _libpython()
    link = out_dir / name if name else None
    if editable:
        interpreter.write_text(sys.executable + "\n")
        if link and libpython and os.path.realpath(link) != libpython:
            temporary = link.with_name(f".{name}.{os.getpid()}")
            temporary.unlink(missing_ok=True)
            os.symlink(libpython, temporary)
            os.replace(temporary, link)
    else:  # left by an earlier build into the same folder
        for stale in (interpreter, link):
            if stale and (stale.is_symlink() or stale.exists()):
                stale.unlink()
    return built


# The code of a filter library (build_filter): never run while librcuda.so
# defines every name the filter does (tests/test_coverage.py checks it).
FILTER_SOURCE = """/* written by native/build.py: the symbol table of %(soname)s, a filter of librcuda.so */
#include <stdio.h>
#include <stdlib.h>
static void rcuda_not_in_librcuda(void)
{
    fputs("rcuda: fatal: %(soname)s is a filter of librcuda.so, which lacks a function it was asked for; "
          "rebuild rcuda\\n", stderr);
    abort();
}
#define FILTERED(name) __attribute__((visibility("default"), alias("rcuda_not_in_librcuda"))) void name(void);
%(names)s
"""


def build_filter(target: Path, functions: dict, tmp: Path, version_script: Path | None = None) -> Path:
    """A drop-in named `target`: a filter of librcuda.so (found at $ORIGIN/..)
    with `functions`' names, versioned by `version_script` if given."""
    soname = target.name
    source = tmp / f"{soname}.c"
    names = "\n".join(f"FILTERED({name})" for name in sorted(functions))
    source.write_text(FILTER_SOURCE % {"soname": soname, "names": names})
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    command = [*compiler, "-shared", "-fPIC", "-fvisibility=hidden", "-o", str(target), str(source),
               f"-Wl,-soname,{soname}", "-Wl,--filter=librcuda.so", "-Wl,-rpath,$ORIGIN/..",
               "-Wl,--enable-new-dtags", "-Wl,--no-undefined"]
    if version_script:
        command.append(f"-Wl,--version-script={version_script}")
    subprocess.run(command, check=True)
    return target


def build_server_executor(target: Path, tmp: Path) -> Path:
    """The GPU server's batch executor (native/batch_executor.c, which
    includes native/served_requests.c): plain C, no Python, opened by
    server/backends/cuda_batches.py."""
    gen_wire = load_script("gen_wire")
    (tmp / "wire.h").write_text(gen_wire.render())
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    subprocess.run([*compiler, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-Wall", "-Werror",
                    "-Wno-unused-function", f"-I{tmp}", f"-I{NATIVE / 'generated'}", f"-I{NATIVE}", "-o", str(target),
                    str(NATIVE / "batch_executor.c"), f"-Wl,-soname,{target.name}", "-Wl,--no-undefined", "-ldl"],
                   check=True)
    return target


@contextlib.contextmanager
def _without_build_rpaths():
    """The link command without the rpaths of this Python's own build: a
    Python configured with LDFLAGS=-Wl,-rpath,ITS_LIBDIR (pyenv's) has them
    in LDSHARED, which distutils links every extension with.  LDSHARED and
    LDFLAGS from the environment override sysconfig's there, so both are set
    here, less their rpaths, for the build."""
    saved = {name: os.environ.get(name) for name in ("LDSHARED", "LDFLAGS")}
    os.environ["LDSHARED"] = _drop_rpaths(saved["LDSHARED"] or sysconfig.get_config_var("LDSHARED") or "")
    if saved["LDFLAGS"] is not None:
        os.environ["LDFLAGS"] = _drop_rpaths(saved["LDFLAGS"])
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _drop_rpaths(command: str) -> str:
    words, kept = shlex.split(command), []
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
        elif word in ("-Wl,-rpath", "-Wl,--rpath", "-Wl,-R"):
            skip_next = True  # the folder follows as the next -Wl,FOLDER
        elif not re.match(r"-Wl,(-R|--?rpath)[,=]", word):
            kept.append(word)
    return shlex.join(kept)


def _check_no_build_paths(library: Path) -> None:
    """No path of this machine's build in the library (it is relocatable):
    not the interpreter's, its libpython's folder, nor the source tree's."""
    data = library.read_bytes()
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    system = libdir.startswith(("/usr/", "/lib"))  # a distribution's: its name may well appear
    for path in {sys.executable, os.path.realpath(sys.executable), "" if system else libdir, str(REPO)}:
        if path and os.fsencode(path) in data:
            raise RuntimeError(f"{library} contains the build path {path}: it would not work elsewhere")


def _libpython() -> tuple[str | None, str | None]:
    """(the soname the libraries need, the real file of this interpreter's
    libpython); rcuda/libpython.py finds it the same way at run time."""
    name = sysconfig.get_config_var("INSTSONAME") or ""
    if ".so" not in name:
        return None, None
    libdir = sysconfig.get_config_var("LIBDIR")
    multiarch = sysconfig.get_config_var("MULTIARCH")
    folders = [libdir, libdir and multiarch and os.path.join(libdir, multiarch), sysconfig.get_config_var("LIBPL")]
    for folder in filter(None, folders):
        if os.path.isfile(os.path.join(folder, name)):
            return name, os.path.realpath(os.path.join(folder, name))
    return name, None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Build rcuda's interposer libraries.")
    parser.add_argument("--out", type=Path, default=REPO / "rcuda" / "_lib")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    for path in build(args.out, args.verbose, editable=True):
        print(path)


if __name__ == "__main__":
    os.chdir(REPO)
    main()
