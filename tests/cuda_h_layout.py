"""What the C compiler says of cuda.h: the size, alignment and field
offsets of structures that rcuda mirrors with ctypes (the cupy backend's
driver calls), and the values of constants, for tests that compare them."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

CUDA_INCLUDE = Path("/usr/local/cuda/include")

# GCC's __builtin_classify_type: what kind of scalar a field is.
INTEGER_CLASSES = {1, 3}  # an integer, an enum
POINTER_CLASS, REAL_CLASS = 5, 8


def leaves(structure, prefix: str = "", base: int = 0):
    """(C path, offset, size, ctypes type) of every field, nested ones too."""
    for name, ctype in structure._fields_:
        path, offset = prefix + name, base + getattr(structure, name).offset
        yield path, offset, ctypes.sizeof(ctype), ctype
        if issubclass(ctype, (ctypes.Structure, ctypes.Union)):
            yield from leaves(ctype, path + ".", offset)


def scalar_class(ctype) -> set[int]:
    if ctype in (ctypes.c_float, ctypes.c_double):
        return {REAL_CLASS}
    if ctype is ctypes.c_void_p:
        return {POINTER_CLASS}
    return INTEGER_CLASSES


def report(folder: Path, structures, constants) -> dict[str, tuple[int, ...]]:
    """Compile and run a C program printing, for each ctypes structure named
    as its C type, (size, alignment), each field's (offset, size) and kind,
    and each constant's value: name -> numbers.  Skips without a compiler."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None or not (CUDA_INCLUDE / "cuda.h").exists():
        pytest.skip("needs a C compiler and the CUDA 13 toolkit's cuda.h")
    lines = []
    for structure in structures:
        name = structure.__name__
        lines.append(f'printf("%s %zu %zu\\n", "{name}", sizeof({name}), _Alignof({name}));')
        for path, _, _, ctype in leaves(structure):
            member = f"(({name} *)0)->{path}"
            lines.append(f'printf("%s %zu %zu\\n", "{name}.{path}", offsetof({name}, {path}), sizeof({member}));')
            if issubclass(ctype, ctypes.Array):
                member += "[0]"
            if not issubclass(ctype, (ctypes.Structure, ctypes.Union)):
                lines.append(f'printf("%s.class %d\\n", "{name}.{path}", __builtin_classify_type({member}));')
    for constant in constants:
        lines.append(f'printf("%s %lld\\n", "{constant}", (long long){constant});')
    source = folder / "layout.c"
    source.write_text("#include <stddef.h>\n#include <stdio.h>\n#include <cuda.h>\n"
                      "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    subprocess.run([compiler, "-std=gnu11", "-Wall", "-Werror", "-I", str(CUDA_INCLUDE), str(source),
                    "-o", str(folder / "layout")], check=True)
    output = subprocess.run([str(folder / "layout")], capture_output=True, text=True, check=True).stdout
    return {name: tuple(int(number) for number in numbers)
            for name, *numbers in (line.split() for line in output.splitlines())}


def check_structure(header: dict, structure) -> None:
    """Every field of `structure` where cuda.h has it, of the same kind."""
    name = structure.__name__
    assert (ctypes.sizeof(structure), ctypes.alignment(structure)) == header[name]
    for path, offset, size, ctype in leaves(structure):
        assert (offset, size) == header[f"{name}.{path}"], f"{name}.{path}: (offset, size)"
        if not issubclass(ctype, (ctypes.Structure, ctypes.Union)):
            element = ctype._type_ if issubclass(ctype, ctypes.Array) else ctype
            assert header[f"{name}.{path}.class"][0] in scalar_class(element), f"{name}.{path}: its kind"
