"""rcuda's native libraries made ready to load: this interpreter's shared
libpython, found at run time, linked beside them (`rcuda run`, `rcuda lib`,
the benchmarks)."""
from __future__ import annotations

import contextlib
import os
import sysconfig
from pathlib import Path


def native_library(dropin: bool = False) -> tuple[Path, str | None]:
    """The interposer for LD_PRELOAD (with `dropin`: the folder of the drop-in
    libcudart.so.13, for LD_LIBRARY_PATH), ready to load, and None; or, when
    it cannot be made ready (a read-only installation), the folder holding
    libpython, for LD_LIBRARY_PATH.

    The libraries carry no path of the machine that built them: they find
    libpython through RUNPATH $ORIGIN (native/build.py), where this makes a
    link, rcuda/_lib/libpython3.X.so.1.0, to the running interpreter's
    libpython (or mends one that points elsewhere).  Raises ProgramError if
    the library was not built."""
    from rcuda.binaries import LIB_DIR, dropin_dir, library_path

    path = dropin_dir() if dropin else library_path()
    found = _libpython()
    if found is None:  # a Python without a shared libpython: nothing to link (the loader's own paths)
        return path, None
    name, target = found
    link = LIB_DIR / name
    if os.path.realpath(link) == target:
        return path, None
    temporary = LIB_DIR / f".{name}.{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        os.symlink(target, temporary)
        os.replace(temporary, link)  # atomic: programs starting now see the old link or the new one
        return path, None
    except OSError:  # e.g. an installation this user cannot write to
        with contextlib.suppress(OSError):
            temporary.unlink()
        folder = os.path.dirname(target)
        return path, None if _loader_searches(folder) else folder


def _libpython() -> tuple[str, str] | None:
    """(the name rcuda's libraries need, the real file) of this interpreter's
    shared libpython: the one loaded in this process, else the one in its
    sysconfig LIBDIR.  Found now, not when rcuda was built."""
    name = sysconfig.get_config_var("INSTSONAME") or ""
    if ".so" not in name:
        return None
    prefix = name.split(".so", 1)[0] + ".so"  # libpython3.X.so
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith(prefix):
                mapped = fields[5].strip()
                if os.path.isfile(mapped):
                    return name, os.path.realpath(mapped)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for folder in filter(None, [libdir, libdir and multiarch and os.path.join(libdir, multiarch),
                                sysconfig.get_config_var("LIBPL")]):
        if os.path.isfile(os.path.join(folder, name)):
            return name, os.path.realpath(os.path.join(folder, name))
    return None


def _loader_searches(folder: str) -> bool:
    """Whether the dynamic loader finds a library in `folder` without help:
    its default folders, or PREFIX/lib, which an installed rcuda's RUNPATH
    names (native/build.py)."""
    from rcuda.binaries import LIB_DIR

    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    defaults = ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]
    defaults += [os.path.join(d, multiarch) for d in defaults[:2] if multiarch]
    folder = os.path.realpath(folder)
    return folder in {os.path.realpath(d) for d in defaults} or folder == os.path.realpath(LIB_DIR / "../../../..")
