#!/usr/bin/env python3
"""Generate rcuda's CUDA runtime tables from the CUDA 13 toolkit.

Run on a machine with the CUDA toolkit and the `libclang` Python package
(`pip install libclang`); the output is committed, so building rcuda needs
neither.  `tests/test_generated.py` re-runs this script into a temporary
folder and fails when the committed files are stale.

Inputs
  * the toolkit's headers (`cuda_runtime_api.h`, `cuda_profiler_api.h` and the
    GL/EGL/VDPAU interop headers, parsed as C by libclang; the graphics types
    they mention come from small shim headers written below, so no GL, EGL or
    VDPAU headers are needed);
  * the toolkit's `libcudart.so.13`: its exported names (the set we must
    export too) and `cudaGetErrorName`/`cudaGetErrorString` for every error.

Outputs (each says in its first line that it is generated, and by what)
  native/generated/cudart_types.h    C types used by the API; also the cffi cdef
  native/generated/cudart_layout.h   _Static_asserts: our structs match CUDA's
  native/generated/libcudart.map     linker version script (node libcudart.so.13)
  native/generated/cudart_signatures.json
                                     every export's signature
  rcuda/_generated/cuda_errors.py    cudaError_t: value, name, CUDA's message

This script knows nothing of how rcuda routes each function (hand-written C,
C first, Python): that is native/routes.ini, and the outputs that depend on it
(native/generated/cudart_exports.c, rcuda/_generated/cudart_api.py) are
written by native/gen_exports.py from the signature table, which needs no
headers.  This script runs it at the end, so that new signatures reach them.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import clang.cindex as ci

REPO = Path(__file__).resolve().parent.parent
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))

# Headers declaring the runtime API, parsed as one C translation unit.
API_HEADERS = [
    "cuda_runtime_api.h",
    "cuda_profiler_api.h",
    "cuda_gl_interop.h",
    "cuda_egl_interop.h",
    "cuda_vdpau_interop.h",
]

# Minimal stand-ins for the graphics headers the interop headers include.
# Only the handful of types those headers mention; all are plain integers or
# opaque pointers, which is what the real headers define them as.
SHIM_HEADERS = {
    "GL/gl.h": "typedef unsigned int GLuint;\ntypedef unsigned int GLenum;\n",
    "EGL/egl.h": (
        "typedef int EGLint;\ntypedef void *EGLImage;\ntypedef void *EGLSync;\n"
        "typedef void *EGLDisplay;\n"
    ),
    "EGL/eglext.h": (
        "typedef void *EGLImageKHR;\ntypedef void *EGLStreamKHR;\ntypedef void *EGLSyncKHR;\n"
    ),
    "vdpau/vdpau.h": (
        "#include <stdint.h>\ntypedef uint32_t VdpDevice;\ntypedef uint32_t VdpVideoSurface;\n"
        "typedef uint32_t VdpOutputSurface;\ntypedef int VdpStatus;\n"
        "typedef VdpStatus VdpGetProcAddress(VdpDevice device, uint32_t function_id, void **function_pointer);\n"
    ),
}

# The registration and launch hooks that nvcc-generated code calls.  They are
# declared only in C++ headers (crt/host_runtime.h, crt/device_functions.h),
# so their signatures are written here, copied from those headers.  The last
# three are exported by libcudart.so.13 but declared in no header; nvcc never
# calls them, and they answer cudaErrorNotSupported.
HOOK_DECLARATIONS = """
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName, int ext, size_t size, int constant, int global);
void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress, const char *deviceName, int ext, size_t size, int constant, int global);
char __cudaInitModule(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
unsigned int __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream);
cudaError_t __cudaRegisterHostVar(void);
cudaError_t __cudaRegisterUnifiedTable(void);
cudaError_t __cudaGetProcAddress(void);
"""

# `_ptsz` (per-thread default stream) and `_ptds` variants share the base
# function's signature; the headers only declare them through macros.
VARIANT_SUFFIXES = ("_ptsz", "_ptds")

GENERATED_NOTE = "generated by native/gen_cudart.py from the CUDA {version} headers; do not edit"


def cudart_version() -> int:
    text = (CUDA_HOME / "include" / "cuda_runtime_api.h").read_text()
    return int(re.search(r"#define CUDART_VERSION\s+(\d+)", text).group(1))


def cuda_version() -> str:
    value = cudart_version()
    return f"{value // 1000}.{value % 1000 // 10}"


def gcc_include_dir() -> str:
    """Where gcc keeps stddef.h & co: libclang's wheel ships no builtin headers."""
    out = subprocess.run(["gcc", "-print-file-name=include"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def parse_translation_unit(shim_dir: Path) -> ci.TranslationUnit:
    source = "\n".join(f'#include "{h}"' for h in API_HEADERS) + "\n"
    source += "#include <stdint.h>\n" + HOOK_DECLARATIONS
    args = ["-x", "c", "-std=c11", f"-I{shim_dir}", f"-I{CUDA_HOME / 'include'}",
            "-isystem", gcc_include_dir()]
    tu = ci.Index.create().parse("rcuda_api.c", args=args, unsaved_files=[("rcuda_api.c", source)])
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        raise SystemExit("libclang could not parse the CUDA headers:\n" + "\n".join(map(str, errors)))
    return tu


def exported_names(libcudart: Path) -> list[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(libcudart)], capture_output=True, text=True, check=True)
    names = {line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()}
    return sorted(n for n in names if n.startswith(("cuda", "__cuda")))


# ---------------------------------------------------------------- C types


def declarator(t: ci.Type, name: str) -> str:
    """C declaration of `name` with type `t` (arrays and function pointers)."""
    if t.kind == ci.TypeKind.CONSTANTARRAY:
        return declarator(t.element_type, f"{name}[{t.element_count}]")
    if t.kind == ci.TypeKind.POINTER:
        pointee = t.get_pointee()
        if pointee.kind in (ci.TypeKind.FUNCTIONPROTO, ci.TypeKind.FUNCTIONNOPROTO):
            return function_declarator(pointee, f"(*{name})")
    if t.kind in (ci.TypeKind.FUNCTIONPROTO, ci.TypeKind.FUNCTIONNOPROTO):
        return function_declarator(t, name)
    return f"{t.spelling} {name}".strip()


def function_declarator(t: ci.Type, name: str) -> str:
    args = ", ".join(declarator(a, "") .strip() for a in t.argument_types()) or "void"
    return f"{t.get_result().spelling} {name}({args})"


class TypeCollector:
    """Finds every type declaration the API's signatures reach."""

    def __init__(self):
        self.decls: dict[tuple, ci.Cursor] = {}

    @staticmethod
    def key(cursor: ci.Cursor) -> tuple:
        loc = cursor.location
        return (cursor.kind, cursor.spelling, loc.file.name if loc.file else "", loc.offset)

    def visit_type(self, t: ci.Type) -> None:
        kind = t.kind
        if kind == ci.TypeKind.ELABORATED:
            self.visit_type(t.get_named_type())
        elif kind == ci.TypeKind.TYPEDEF:
            decl = t.get_declaration()
            if self.add(decl):
                self.visit_type(decl.underlying_typedef_type)
        elif kind in (ci.TypeKind.POINTER,):
            self.visit_type(t.get_pointee())
        elif kind == ci.TypeKind.CONSTANTARRAY:
            self.visit_type(t.element_type)
        elif kind in (ci.TypeKind.FUNCTIONPROTO, ci.TypeKind.FUNCTIONNOPROTO):
            self.visit_type(t.get_result())
            for a in t.argument_types():
                self.visit_type(a)
        elif kind == ci.TypeKind.RECORD:
            decl = t.get_declaration()
            definition = decl.get_definition()
            if definition is not None and self.add(definition):
                for field in definition.type.get_fields():
                    self.visit_type(field.type)
        elif kind == ci.TypeKind.ENUM:
            self.add(t.get_declaration())

    def add(self, cursor: ci.Cursor) -> bool:
        """Record a declaration; False if seen before or a C library type
        (size_t, uint32_t...), which both C and cffi already know."""
        loc = cursor.location.file.name if cursor.location.file else ""
        cuda_dirs = (str(CUDA_HOME), os.path.realpath(CUDA_HOME))
        if not (loc.startswith(cuda_dirs) or "rcuda-shim" in loc or loc == "rcuda_api.c"):
            return False
        k = self.key(cursor)
        if k in self.decls:
            return False
        self.decls[k] = cursor
        return True


def field_name(field: ci.Cursor) -> str:
    """A field's name; "" for an anonymous member (libclang spells those
    "union X::(anonymous at file:line)")."""
    return "" if "(anonymous" in field.spelling else field.spelling


def record_body(record: ci.Cursor, indent: str = "    ") -> str:
    lines = []
    for field in record.type.get_fields():
        ft = field.type
        decl = ft.get_declaration()
        if ft.kind == ci.TypeKind.ELABORATED:
            decl = ft.get_named_type().get_declaration()
        if decl.kind in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.UNION_DECL) and decl.is_anonymous():
            word = "struct" if decl.kind == ci.CursorKind.STRUCT_DECL else "union"
            inner = record_body(decl, indent + "    ")
            name = f" {field_name(field)}" if field_name(field) else ""
            lines.append(f"{indent}{word} {{\n{inner}{indent}}}{name};")
        elif field.is_bitfield():
            lines.append(f"{indent}{ft.spelling} {field.spelling} : {field.get_bitfield_width()};")
        else:
            lines.append(f"{indent}{declarator(ft, field.spelling)};")
    return "\n".join(lines) + "\n"


def emit_decl(cursor: ci.Cursor) -> str:
    kind = cursor.kind
    if kind == ci.CursorKind.TYPEDEF_DECL:
        return f"typedef {declarator(cursor.underlying_typedef_type, cursor.spelling)};"
    if kind == ci.CursorKind.ENUM_DECL:
        items = ",\n".join(f"    {c.spelling} = {c.enum_value}" for c in cursor.get_children()
                           if c.kind == ci.CursorKind.ENUM_CONSTANT_DECL)
        name = "" if cursor.is_anonymous() else f" {cursor.spelling}"
        return f"enum{name} {{\n{items}\n}};"
    if kind in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.UNION_DECL):
        word = "struct" if kind == ci.CursorKind.STRUCT_DECL else "union"
        return f"{word} {cursor.spelling} {{\n{record_body(cursor)}}};"
    raise ValueError(f"cannot emit {kind} {cursor.spelling}")


def layout_asserts(cursor: ci.Cursor) -> list[str]:
    """Static checks that the emitted struct has CUDA's size and offsets."""
    word = "struct" if cursor.kind == ci.CursorKind.STRUCT_DECL else "union"
    name = f"{word} {cursor.spelling}"
    checks = [f'_Static_assert(sizeof({name}) == {cursor.type.get_size()}, "size of {name}");']
    for field in cursor.type.get_fields():
        if not field_name(field) or field.is_bitfield():
            continue
        offset = cursor.type.get_offset(field.spelling) // 8
        checks.append(f'_Static_assert(offsetof({name}, {field.spelling}) == {offset}, '
                      f'"offset of {name}.{field.spelling}");')
    return checks


# ---------------------------------------------------------------- functions


class Function:
    def __init__(self, name: str, result: str, params: list[tuple[str, str]], base: str):
        self.name, self.result, self.params, self.base = name, result, params, base

    def signature(self) -> dict:
        return {"result": self.result, "params": [[n, d] for n, d in self.params], "base": self.base}


def collect_functions(tu: ci.TranslationUnit, wanted: list[str]) -> tuple[list[Function], TypeCollector]:
    cursors = {}
    for c in tu.cursor.get_children():
        if c.kind == ci.CursorKind.FUNCTION_DECL and c.spelling.startswith(("cuda", "__cuda")):
            cursors.setdefault(c.spelling, c)
    types = TypeCollector()
    functions = []
    missing = []
    for name in wanted:
        base = name
        for suffix in VARIANT_SUFFIXES:
            if name.endswith(suffix) and name not in cursors:
                base = name[: -len(suffix)]
        cursor = cursors.get(name) or cursors.get(base)
        if cursor is None:
            missing.append(name)
            continue
        params = []
        for i, arg in enumerate(cursor.get_arguments()):
            pname = arg.spelling or f"arg{i}"
            params.append((pname, declarator(arg.type, pname)))
            types.visit_type(arg.type)
        types.visit_type(cursor.result_type)
        functions.append(Function(name, cursor.result_type.spelling, params, base))
    if missing:
        raise SystemExit(f"no declaration found for exported functions: {missing}")
    return functions, types


# ---------------------------------------------------------------- errors


def error_table(tu: ci.TranslationUnit, libcudart: Path) -> list[tuple[int, str, str, bool]]:
    """(value, name, message, sticky) per cudaError_t.  `sticky` comes from the
    header's own documentation: the errors after which "the process [is left]
    in an inconsistent state and any further CUDA work will return the same
    error", or after which "the device cannot be used again"."""
    enum = next(c for c in tu.cursor.walk_preorder()
                if c.kind == ci.CursorKind.ENUM_DECL and c.spelling == "cudaError")
    lib = ctypes.CDLL(str(libcudart))
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    rows = []
    for c in enum.get_children():
        if c.kind != ci.CursorKind.ENUM_CONSTANT_DECL:
            continue
        message = lib.cudaGetErrorString(c.enum_value).decode()
        doc = " ".join((c.raw_comment or "").split())
        sticky = "inconsistent state" in doc or "cannot be used again" in doc
        rows.append((c.enum_value, c.spelling, message, sticky))
    return rows


# ---------------------------------------------------------------- writers


def walk_postorder(cursor: ci.Cursor):
    """Children before their parent: a struct defined inside a union comes first."""
    for child in cursor.get_children():
        yield from walk_postorder(child)
    yield cursor


def write_types_header(path: Path, types: TypeCollector, tu: ci.TranslationUnit, note: str,
                       nested_first: bool = False) -> list[str]:
    """`nested_first`: records defined inside another record are written before
    it (cuda.h defines the members of its unions that way)."""
    order = {}
    for i, c in enumerate(walk_postorder(tu.cursor) if nested_first else tu.cursor.walk_preorder()):
        order.setdefault(TypeCollector.key(c), i)
    decls = sorted(types.decls.values(), key=lambda c: order.get(TypeCollector.key(c), 1 << 30))
    body, asserts = [], []
    for cursor in decls:
        if cursor.kind in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.UNION_DECL) and cursor.is_anonymous():
            continue  # printed inline inside its parent
        if cursor.kind == ci.CursorKind.TYPEDEF_DECL:
            under = cursor.underlying_typedef_type
            named = under.get_named_type() if under.kind == ci.TypeKind.ELABORATED else under
            inner = named.get_declaration()
            if (inner.kind in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.UNION_DECL, ci.CursorKind.ENUM_DECL)
                    and inner.is_anonymous()):
                # typedef struct { ... } name;  -- emit the body in place
                text = emit_decl(inner.get_definition() or inner)
                word, rest = text.split(" ", 1)
                body.append(f"typedef {word} {rest.rstrip(';')} {cursor.spelling};")
                continue
        body.append(emit_decl(cursor))
        if cursor.kind in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.UNION_DECL):
            asserts.extend(layout_asserts(cursor))
    path.write_text(f"/* {note} */\n/* Types of the CUDA runtime API; valid C and a valid cffi cdef. */\n\n"
                    + "\n\n".join(body) + "\n")
    return asserts


def write_layout_header(path: Path, asserts: list[str], note: str) -> None:
    path.write_text(f"/* {note} */\n/* Checked at compile time: these layouts are CUDA's own. */\n"
                    "#include <stddef.h>\n" + "\n".join(asserts) + "\n")


def write_version_script(path: Path, functions: list[Function], note: str) -> None:
    names = "\n".join(f"    {f.name};" for f in functions)
    path.write_text(f"/* {note} */\nlibcudart.so.13 {{\n  global:\n{names}\n  local: *;\n}};\n")


def write_signatures(path: Path, functions: list[Function], note: str) -> None:
    """The signature table native/gen_exports.py reads: JSON, one function a line."""
    rows = ",\n".join(f"  {json.dumps(f.name)}: {json.dumps(f.signature())}" for f in functions)
    path.write_text(f'{{"generated": {json.dumps(note)},\n "cudart_version": {cudart_version()},\n'
                    f' "functions": {{\n{rows}\n }}\n}}\n')


def write_error_table(path: Path, errors, note: str) -> None:
    rows = ",\n".join(f"    ({v}, {n!r}, {m!r}, {s})" for v, n, m, s in errors)
    path.write_text(
        f'"""cudaError_t values with CUDA\'s names and messages: {note}.\n\n'
        "Rows are (value, name, message, sticky).  Messages are what the toolkit's\n"
        "own cudaGetErrorString returns; `sticky` marks the errors the header says\n"
        "leave the context in an inconsistent state (every later call fails).\n"
        '"""\n\n'
        f"ERRORS = [\n{rows},\n]\n")


def generate_exports(out_root: Path) -> None:
    """The route-dependent outputs, from the new signatures (native/gen_exports.py)."""
    spec = importlib.util.spec_from_file_location("gen_exports", REPO / "native" / "gen_exports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(out_root)


def generate(out_root: Path) -> None:
    version = cuda_version()
    note = GENERATED_NOTE.format(version=version)
    libcudart = CUDA_HOME / "lib64" / "libcudart.so.13"
    with tempfile.TemporaryDirectory(prefix="rcuda-shim") as tmp:
        shim = Path(tmp)
        for rel, text in SHIM_HEADERS.items():
            (shim / rel).parent.mkdir(parents=True, exist_ok=True)
            (shim / rel).write_text(text)
        tu = parse_translation_unit(shim)
        functions, types = collect_functions(tu, exported_names(libcudart))
        errors = error_table(tu, libcudart)
        native = out_root / "native" / "generated"
        native.mkdir(parents=True, exist_ok=True)
        asserts = write_types_header(native / "cudart_types.h", types, tu, note)
    write_layout_header(native / "cudart_layout.h", asserts, note)
    write_version_script(native / "libcudart.map", functions, note)
    write_signatures(native / "cudart_signatures.json", functions, note)
    python = out_root / "rcuda" / "_generated"
    python.mkdir(parents=True, exist_ok=True)
    write_error_table(python / "cuda_errors.py", errors, note)
    print(f"{len(functions)} functions, {len(types.decls)} type declarations, {len(errors)} errors "
          f"(CUDA {version}) -> {out_root}")
    generate_exports(out_root)


def out_root(argv, doc: str) -> Path:
    """The --out argument of a generator whose docstring is `doc`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO, help="root to write into (default: the repository)")
    return parser.parse_args(argv).out


def main(argv=None) -> None:
    generate(out_root(argv, __doc__))


if __name__ == "__main__":
    main()
