"""The sim backend's stand-in for the driver's PTX compiler and linker.

The sim runs kernels as plugins, so it compiles nothing; it checks what a
JIT compiler would reject before anything else, so a program hears about
bad PTX at load or link time as on a GPU, with a log in ptxas' style:

- the text is PTX at all: text, beginning with a `.version` directive and
  naming a `.target`;
- braces and parentheses balance;
- every `.extern .func` a module declares is defined (`.visible .func`) by
  one of the images loaded or linked together.

It does not parse instructions: PTX that passes here may still fail on a
GPU.  Linking combines the inputs into one fatbinary whose kernels plugins
find by name, as for any module.
"""
from __future__ import annotations

import re

from rcuda import fatbin
from rcuda.errors import CudaError, cudaError

PTX_VERSION = re.compile(r"\.version[ \t]+\d+\.\d+")
PTX_EXTERN_FUNC = re.compile(r"\.extern\s+\.func\s+(?:\([^)]*\)\s*)?([\w$]+)")
PTX_DEFINED_FUNC = re.compile(r"\.visible\s+\.(?:func|entry)\s+(?:\([^)]*\)\s*)?([\w$]+)")
PAIRS = {"{": "}", "(": ")"}


def _without_comments(text: str) -> str:
    """Comments blanked, newlines kept (so line numbers stay right)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m[0]), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def syntax_errors(name: str, image: bytes) -> list[str]:
    """What is wrong with one PTX image, as ptxas words it (empty: nothing
    this check can see)."""
    if b"\0" in image.rstrip(b"\0"):
        return [f"ptxas fatal   : {name} is neither PTX text, a cubin nor a fatbinary"]
    text = _without_comments(image.rstrip(b"\0").decode("utf-8", errors="replace"))
    first = re.search(r"\S", text)
    if first is None or not PTX_VERSION.match(text, first.start()):
        where = _line(text, first.start()) if first else 1
        return [f"ptxas application ptx input, line {where}; fatal   : {name}: PTX must begin with a "
                f".version directive"]
    errors = []
    if not fatbin.PTX_TARGET.search(text):
        errors.append(f"ptxas application ptx input, line {_line(text, first.start())}; error   : {name}: "
                      f"no .target directive")
    opened: list[tuple[str, int]] = []
    for match in re.finditer(r"[{}()]", text):
        char = match[0]
        if char in PAIRS:
            opened.append((char, match.start()))
        elif not opened or PAIRS[opened[-1][0]] != char:
            errors.append(f"ptxas application ptx input, line {_line(text, match.start())}; error   : "
                          f"{name}: unbalanced '{char}'")
            break
        else:
            opened.pop()
    else:
        errors += [f"ptxas application ptx input, line {_line(text, pos)}; error   : {name}: '{char}' "
                   f"is never closed" for char, pos in opened[:1]]
    return errors


#: Functions a GPU's driver provides to the PTX it compiles (device-side
#: printf, malloc and assert), so no image need define them.
DRIVER_PROVIDED = frozenset({"vprintf", "malloc", "free", "__assertfail"})


def unresolved_functions(images: list[tuple[str, bytes]]) -> list[str]:
    """`.extern .func`s of these PTX images that none of them defines (nor
    the driver: DRIVER_PROVIDED)."""
    defined, wanted = set(DRIVER_PROVIDED), []
    for name, image in images:
        text = _without_comments(image.decode("utf-8", errors="replace"))
        defined.update(PTX_DEFINED_FUNC.findall(text))
        wanted += [(function, name) for function in PTX_EXTERN_FUNC.findall(text)]
    return [f"error   : Undefined reference to '{function}' in '{name}'"
            for function, name in wanted if function not in defined]


def check(images: list[tuple[str, bytes]], status: cudaError, what: str) -> str:
    """Check PTX images compiled together; CudaError(`status`) with the
    log when one is wrong, else the info log."""
    errors = [e for name, image in images for e in syntax_errors(name, image)]
    errors = errors or unresolved_functions(images)
    if errors:
        raise CudaError(status, "\n".join(errors))
    return (f"sim: {what}: {len(images)} PTX image(s) checked (directives, braces, external functions); "
            f"kernels run as plugins")


def check_module(image: fatbin.Fatbin, key: str) -> str:
    """A module about to be loaded: its PTX is what a GPU would JIT-compile
    when it has no cubin.  The info log."""
    if image.layout_source != fatbin.KIND_PTX:
        return ""
    ptx = [(f"module {key} image {i}", e.payload) for i, e in enumerate(image.entries) if e.kind == fatbin.KIND_PTX]
    for name, text in ptx:  # what is not even PTX is no image at all, as a GPU's driver says
        if not is_ptx(text):
            raise CudaError(cudaError.cudaErrorInvalidKernelImage,
                            f"{name} is neither a fatbinary, a cubin nor PTX (no .version directive first)")
    return check(ptx, cudaError.cudaErrorInvalidPtx, f"module {key}")


def is_ptx(image: bytes) -> bool:
    """Whether `image` is PTX text: its first directive is .version."""
    if b"\0" in image.rstrip(b"\0"):
        return False
    text = _without_comments(image.rstrip(b"\0").decode("utf-8", errors="replace"))
    first = re.search(r"\S", text)
    return first is not None and PTX_VERSION.match(text, first.start()) is not None


def link(inputs: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    """cuLinkComplete: (one fatbinary of every input's images, the info log).
    Each input is (its name, a fatbinary, cubin or PTX image)."""
    named = []  # (input name, entry)
    for name, data in inputs:
        try:
            named += [(name, entry) for entry in fatbin.parse_image(data).entries]
        except fatbin.FatbinError as exc:
            raise CudaError(cudaError.cudaErrorInvalidKernelImage, f"link input {name}: {exc}") from None
    ptx = [(name, entry.payload) for name, entry in named if entry.kind == fatbin.KIND_PTX]
    info = check(ptx, cudaError.cudaErrorInvalidPtx, "link") if ptx else ""
    return fatbin.write_fatbin(entry for _, entry in named), info
