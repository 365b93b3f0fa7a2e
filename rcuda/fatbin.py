"""Reader for CUDA fatbinaries: images, kernel parameter layouts, variables.

An nvcc-built program registers its device code with
`__cudaRegisterFatBinary(wrapper)`; `wrapper->data` points at one fatbin
container.  The client needs to know how many bytes that container occupies
(`fatbin_size`) and, because `__cudaLaunchKernel` passes `void **args` without
sizes, where every kernel parameter lives in the parameter buffer
(`parse_fatbin(...).kernels()`).

Layout (little endian, checked on nvcc 13.0 output):

    container: u32 magic 0xBA55ED50, u16 version, u16 header_size,
               u64 payload_size, then entries back to back.
    entry:     u16 kind, u16 version, u32 header_size, u64 payload_size (padded),
               +16 u32 compressed size (0 = stored), +28 u32 arch,
               +40 u32 flags, +56 u64 uncompressed size; payload follows the
               header.

Each wrapper points at exactly one container.  The `.nv_fatbin` section of a
program holds several containers back to back (one per wrapper: the
translation unit's own and a small one from the device-link step), so
`fatbin_size` measures one container and `parse_fatbin` accepts a sequence.

Parameter layouts come from a cubin's `.nv.info.<kernel>` section
(EIATTR_KPARAM_INFO records, EIATTR_KPARAM_INFO_V2 for blocks beyond about
4 KiB) when there is a cubin, else from the PTX `.entry` parameter lists with
natural alignment.  Both give the same result.  The cubin also states the
block's size (EIATTR_CBANK_PARAM_SIZE); `Kernel.layout_error` says when the
records found do not account for it.
"""
from __future__ import annotations

import io
import logging
import re
import struct
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path


log = logging.getLogger(__name__)

FATBIN_WRAPPER_MAGIC = 0x466243B1
FATBIN_MAGIC = 0xBA55ED50

# Container header: magic, version, header_size, payload_size.
CONTAINER_HEADER = struct.Struct("<IHHQ")
# First 16 bytes of an entry header: kind, version, header_size, payload_size.
ENTRY_HEADER = struct.Struct("<HHIQ")
ENTRY_COMPRESSED_SIZE = struct.Struct("<I")     # at +16
ENTRY_ARCH = struct.Struct("<I")                # at +28
ENTRY_FLAGS = struct.Struct("<I")               # at +40
ENTRY_UNCOMPRESSED_SIZE = struct.Struct("<Q")   # at +56
OFF_COMPRESSED_SIZE, OFF_ARCH, OFF_FLAGS, OFF_UNCOMPRESSED_SIZE = 16, 28, 40, 56
MIN_ENTRY_HEADER = OFF_UNCOMPRESSED_SIZE + 8

ENTRY_KINDS = {1: "ptx", 2: "cubin", 8: "ltoir"}
ENTRY_KIND_IDS = {name: number for number, name in ENTRY_KINDS.items()}
KIND_PTX, KIND_CUBIN = "ptx", "cubin"
# The flags nvcc sets on every entry it writes for x86-64 Linux (64-bit
# addresses, Linux host); compression bits come on top.
ENTRY_FLAGS_64BIT_LINUX = 0x11

# Entry flag bits that name the compression method.  nvcc 13 sets 0x8000 for
# its default mode (zstd frames) and 0x2000 for `-compress-mode=speed` (raw
# LZ4 blocks, no frame header).
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
COMPRESSION_FLAGS = {FLAG_LZ4: "lz4", FLAG_ZSTD: "zstd"}

# Cubin ELF: kernels are STT_FUNC symbols with this bit in st_other;
# __managed__ variables are STT_OBJECT symbols with STO_CUDA_MANAGED.
STO_CUDA_ENTRY = 0x10
STO_CUDA_MANAGED = 0x04
NV_INFO_PREFIX = ".nv.info."
# .nv.info records: u8 format, u8 attribute, then either a u16 value
# (formats 1-3, 4 bytes in all) or a u16 size and that many bytes (format 4).
EIFMT_SVAL = 0x04
EIATTR_KPARAM_INFO = 0x17
# nvcc 13 describes parameter blocks of more than 4208 bytes with
# EIATTR_KPARAM_INFO_V2 records instead (0x45; the name's place in nvlink's
# table of attribute names gives the number), laid out alike but for the
# last field: KPARAM_INFO packs the size (size << 18 | flags), V2 holds it.
EIATTR_KPARAM_INFO_V2 = 0x45
KPARAM_INFO = struct.Struct("<IHHI")  # index, ordinal, offset, packed size (V2: size)
KPARAM_SIZE_SHIFT = 18
# EIATTR_CBANK_PARAM_SIZE: a u16, the parameter block's size in bytes.
EIATTR_CBANK_PARAM_SIZE = 0x19
# Resource records (checked against `ptxas -v` in tests/test_fatbin.py): in
# the module-wide `.nv.info`, u32 symbol index + u32 value per kernel; in a
# kernel's own section, __launch_bounds__ as three u32.
EIATTR_REGCOUNT = 0x2F
EIATTR_FRAME_SIZE = 0x11
EIATTR_MAX_THREADS = 0x05
# Thread block clusters (sm_90 on), in a kernel's own section:
# __cluster_dims__(x, y, z) as three u32 (PTX .reqnctapercluster); any
# __cluster_dims__, empty ones too, as an empty record (PTX .explicitcluster:
# the kernel must be launched as a cluster); __launch_bounds__' third value
# as one u32 (PTX .maxclusterrank: blocks per cluster at most).
EIATTR_CTA_PER_CLUSTER = 0x3D
EIATTR_EXPLICIT_CLUSTER = 0x3E
EIATTR_MAX_CLUSTER_RANK = 0x3F
SYMBOL_VALUE = struct.Struct("<II")
SHARED_PREFIX = ".nv.shared."
USER_CONSTANT_BANK = ".nv.constant3"  # __constant__ variables
# Sections holding __device__ / __constant__ variables in a cubin.
GLOBAL_SECTIONS = (".nv.global", ".nv.global.init")
CONSTANT_SECTION_PREFIX = ".nv.constant"
KERNEL_CONSTANT_BANK = ".nv.constant0"   # per-kernel parameter bank, not variables

# PTX scalar type sizes; a .b8 array's alignment is its .align (default 1).
PTX_TYPE_SIZES = {
    "b8": 1, "u8": 1, "s8": 1, "pred": 1,
    "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "e4m3x2": 2, "e5m2x2": 2,
    "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "u64": 8, "s64": 8, "f64": 8,
    "b128": 16,
}
PTX_VECTOR = re.compile(r"\.v(\d+)$")
PTX_BRACES_AND_ENDS = re.compile(r"[{};]")
PTX_ENTRY = re.compile(r"\.entry\s+([\w$.]+)\s*(?:\((.*?)\))?", re.S)
PTX_VARIABLE = re.compile(r"(?:^|\s)\.(global|const)\s")
PTX_LINE_DIRECTIVES = re.compile(r"^[ \t]*\.(?:version|target|address_size|file)\b[^\n]*", re.M)
# Module-level statements with .global/.const that define no variable of ours:
# declarations of other modules' variables, texture handles, functions.
PTX_NOT_VARIABLES = {".extern", ".texref", ".surfref", ".samplerref", ".entry", ".func"}
PTX_ATTRIBUTE = re.compile(r"\.attribute\s*\([^)]*\)")


class FatbinError(ValueError):
    """The bytes are not a fatbinary this module understands."""


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter: where it sits in the parameter buffer."""

    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class Kernel:
    """A `__global__` function, by mangled name, and its parameter layout."""

    name: str
    params: tuple[KernelParam, ...]
    # The parameter block's size as the cubin states it (None: not stated,
    # as in PTX).  Not part of equality: PTX and cubin layouts compare equal.
    declared_size: int | None = field(default=None, compare=False)

    @property
    def param_buffer_size(self) -> int:
        """Bytes needed to hold every parameter at its offset."""
        return max((p.offset + p.size for p in self.params), default=0)

    def layout_error(self) -> str | None:
        """Why these parameters cannot be packed as the kernel expects (an
        attribute this reader does not know, records that overlap), or None."""
        if [p.ordinal for p in self.params] != list(range(len(self.params))):
            return f"its parameter records have ordinals {[p.ordinal for p in self.params]}, not 0 to n-1"
        ends = 0
        for p in sorted(self.params, key=lambda p: p.offset):
            if p.offset < ends:
                return f"its parameter {p.ordinal} at offset {p.offset} overlaps the one before"
            ends = p.offset + p.size
        if self.declared_size is not None and self.declared_size != self.param_buffer_size:
            return (f"its cubin says its parameters take {self.declared_size} bytes, the parameter records "
                    f"read cover {self.param_buffer_size}")
        return None


@dataclass(frozen=True)
class KernelResources:
    """What a cubin says a kernel uses: cudaFuncAttributes' raw material."""

    registers: int
    shared_bytes: int        # static __shared__ memory
    local_bytes: int         # stack frame per thread
    const_bytes: int         # the module's __constant__ variables
    max_threads: int | None  # __launch_bounds__ (threads per block), if given
    arch: int                # the cubin's sm_XY as XY
    cluster_dims: tuple[int, int, int] | None = None  # __cluster_dims__(x, y, z), if given
    explicit_cluster: bool = False  # any __cluster_dims__: launched as a cluster only
    max_cluster_blocks: int | None = None  # __launch_bounds__' third value (blocks per cluster), if given


@dataclass(frozen=True)
class Variable:
    """A `__device__` (constant=False) or `__constant__` variable; a
    `__managed__` one is a `__device__` variable with `managed` set."""

    name: str
    size: int
    constant: bool
    # The initializer, from a cubin; empty: zeros (or unknown, from PTX).  Not
    # part of equality: it is data, not layout.
    initial: bytes = field(default=b"", compare=False)
    managed: bool = field(default=False, compare=False)

    def __repr__(self) -> str:
        return (f"Variable(name={self.name!r}, size={self.size}, constant={self.constant}, "
                f"initial=<{len(self.initial)} bytes>)")


@dataclass(frozen=True)
class Entry:
    """One image inside a fatbin container."""

    kind: str                 # "ptx", "cubin", "ltoir" or "kind<N>"
    arch: int                 # 75 for sm_75 / compute_75
    compression: str | None   # None, "zstd" or "lz4"
    payload: bytes            # decompressed image: PTX text or an ELF cubin (other kinds: as stored)
    flags: int = 0            # raw entry flags
    stored_size: int = 0      # bytes the (compressed) image takes in the container

    def __repr__(self) -> str:  # keep the payload out of logs
        return (f"Entry(kind={self.kind!r}, arch={self.arch}, compression={self.compression!r}, "
                f"payload=<{len(self.payload)} bytes>, flags={self.flags:#x}, stored_size={self.stored_size})")


@dataclass(frozen=True)
class Fatbin:
    """The images of one or more fatbin containers."""

    entries: tuple[Entry, ...]
    size: int  # total bytes of all containers read

    def kernels(self) -> dict[str, Kernel]:
        """Kernels by mangled name.  Layouts come from the cubins (all archs
        agree; the first wins), from the PTX only when there is no cubin."""
        return dict(self._kernels)

    def variables(self) -> dict[str, Variable]:
        """Device and constant variables, from the cubins, else the PTX."""
        return dict(self._variables)

    def references(self) -> dict[str, str]:
        """Module-scope texture and surface references (`.global .texref` /
        `.surfref` in PTX, what `texture<>` and `surface<>` declared): name ->
        "texture" or "surface", from the cubins, else the PTX."""
        return dict(self._references)

    def resources(self, arch: int | None = None) -> dict[str, KernelResources]:
        """Per-kernel resources from the cubin for `arch` (the newest cubin
        not newer than it; any cubin when None).  Empty without cubins."""
        cubins = sorted((e for e in self.entries if e.kind == KIND_CUBIN), key=lambda e: e.arch)
        fitting = [e for e in cubins if arch is None or e.arch <= arch] or cubins
        merged: dict = {}
        for entry in reversed(fitting):
            for name, item in cubin_resources(entry.payload, entry.arch).items():
                merged.setdefault(name, item)
        return merged

    def archs(self, kind: str | None = None) -> tuple[int, ...]:
        """Sorted architectures of the entries (of one kind, if given)."""
        return tuple(sorted({e.arch for e in self.entries if kind is None or e.kind == kind}))

    def first(self, kind: str) -> Entry | None:
        """The first entry of a kind, or None."""
        return next((e for e in self.entries if e.kind == kind), None)

    @property
    def layout_source(self) -> str | None:
        """Which kind of image kernels() reads: "cubin", "ptx" or None."""
        return next((k for k in (KIND_CUBIN, KIND_PTX) if self.first(k)), None)

    # cached_property stores into the instance __dict__ directly, so it works
    # on a frozen dataclass (which has no __slots__).
    @cached_property
    def _kernels(self) -> dict[str, Kernel]:
        reader = {KIND_CUBIN: cubin_kernels, KIND_PTX: ptx_kernels}.get(self.layout_source)
        return self._merged(reader)

    @cached_property
    def _variables(self) -> dict[str, Variable]:
        reader = {KIND_CUBIN: cubin_variables, KIND_PTX: ptx_variables}.get(self.layout_source)
        return self._merged(reader)

    @cached_property
    def _references(self) -> dict[str, str]:
        reader = {KIND_CUBIN: cubin_references, KIND_PTX: ptx_references}.get(self.layout_source)
        return self._merged(reader)

    def _merged(self, reader) -> dict:
        """Union of reader(payload) over the entries of the layout source's
        kind: a whole `.nv_fatbin` holds several containers, and the first
        cubin may be the device-link step's empty one."""
        merged: dict = {}
        for entry in self.entries:
            if reader is not None and entry.kind == self.layout_source:
                for name, item in reader(entry.payload).items():
                    merged.setdefault(name, item)
        return merged


# ---------------------------------------------------------------- containers

def fatbin_size(buf) -> int:
    """Bytes of the fatbin container that starts at `buf` (header included).

    `buf` needs to hold only the 16-byte container header.  One container is
    what one registration wrapper points at, so one container is measured."""
    _magic, _version, header_size, payload_size = _container_header(memoryview(buf), 0)
    return header_size + payload_size


def _container_header(view: memoryview, offset: int) -> tuple[int, int, int, int]:
    if len(view) - offset < CONTAINER_HEADER.size:
        raise FatbinError(f"truncated fatbinary: container header at offset {offset} needs "
                          f"{CONTAINER_HEADER.size} bytes, only {len(view) - offset} available")
    magic, version, header_size, payload_size = CONTAINER_HEADER.unpack_from(view, offset)
    if magic != FATBIN_MAGIC:
        hint = " (that is a fatbin wrapper, pass wrapper->data)" if magic == FATBIN_WRAPPER_MAGIC else ""
        raise FatbinError(f"bad fatbin magic {magic:#010x} at offset {offset}, "
                          f"expected {FATBIN_MAGIC:#010x}{hint}")
    if header_size < CONTAINER_HEADER.size:
        raise FatbinError(f"bad fatbin container header size {header_size} at offset {offset}")
    return magic, version, header_size, payload_size


def parse_fatbin(data) -> Fatbin:
    """Parse one container, or several back to back (a whole `.nv_fatbin`)."""
    view = memoryview(data).cast("B")
    entries: list[Entry] = []
    offset = 0
    while True:
        found, offset = _parse_container(view, offset)
        entries.extend(found)
        if offset >= len(view):
            break
    log.debug("fatbin of %d bytes: %s", offset, entries)
    return Fatbin(tuple(entries), offset)


def _parse_container(view: memoryview, offset: int) -> tuple[list[Entry], int]:
    """The entries of the container at `offset` and the position after it."""
    _magic, _version, header_size, payload_size = _container_header(view, offset)
    start, end = offset + header_size, offset + header_size + payload_size
    if end > len(view):
        raise FatbinError(f"truncated fatbinary: container at offset {offset} holds {payload_size} "
                          f"bytes of images, only {len(view) - start} available")
    entries = []
    pos = start
    while pos < end:
        entry, pos = _parse_entry(view, pos, end)
        entries.append(entry)
    return entries, end


def _parse_entry(view: memoryview, pos: int, end: int) -> tuple[Entry, int]:
    """The entry at `pos` and the position after it."""
    if end - pos < MIN_ENTRY_HEADER:
        raise FatbinError(f"truncated fatbinary: entry header at offset {pos} needs "
                          f"{MIN_ENTRY_HEADER} bytes, only {end - pos} left in its container")
    kind_id, _version, header_size, payload_size = ENTRY_HEADER.unpack_from(view, pos)
    if header_size < MIN_ENTRY_HEADER:
        raise FatbinError(f"bad fatbin entry header size {header_size} at offset {pos}")
    start = pos + header_size
    if start + payload_size > end:
        raise FatbinError(f"truncated fatbinary: entry at offset {pos} holds {payload_size} bytes, "
                          f"only {max(end - start, 0)} left in its container")
    (compressed_size,) = ENTRY_COMPRESSED_SIZE.unpack_from(view, pos + OFF_COMPRESSED_SIZE)
    (arch,) = ENTRY_ARCH.unpack_from(view, pos + OFF_ARCH)
    (flags,) = ENTRY_FLAGS.unpack_from(view, pos + OFF_FLAGS)
    (uncompressed_size,) = ENTRY_UNCOMPRESSED_SIZE.unpack_from(view, pos + OFF_UNCOMPRESSED_SIZE)
    kind = ENTRY_KINDS.get(kind_id, f"kind{kind_id}")
    stored = bytes(view[start:start + payload_size])
    compression = _compression(flags, compressed_size, pos)
    if compression is not None and kind in (KIND_PTX, KIND_CUBIN):
        if compressed_size > payload_size:
            raise FatbinError(f"corrupt fatbin entry at offset {pos}: compressed size "
                              f"{compressed_size} exceeds its payload of {payload_size} bytes")
        image = _decompress(compression, stored[:compressed_size or payload_size], uncompressed_size, pos)
    else:
        # Stored images may carry alignment padding.  Other kinds (LTO-IR) are
        # kept as stored: nvcc marks them with flags we cannot decode.
        image = stored
    if kind == KIND_PTX:
        image = image.rstrip(b"\0")  # NUL terminator and padding; keep the text only
    return Entry(kind, arch, compression, image, flags, payload_size), start + payload_size


def _compression(flags: int, compressed_size: int, pos: int) -> str | None:
    """The compression method of an entry, from its flags."""
    methods = [name for bit, name in COMPRESSION_FLAGS.items() if flags & bit]
    if len(methods) > 1:
        raise FatbinError(f"fatbin entry at offset {pos} claims several compressions (flags {flags:#x})")
    if methods:
        return methods[0]
    if compressed_size:
        raise FatbinError(f"fatbin entry at offset {pos} is compressed ({compressed_size} bytes) with "
                          f"an unknown method: flags {flags:#x} set neither {FLAG_ZSTD:#x} (zstd) "
                          f"nor {FLAG_LZ4:#x} (lz4)")
    return None


def _decompress(method: str, data: bytes, size: int, pos: int) -> bytes:
    try:
        if method == "zstd":
            import zstandard
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
        else:
            import lz4.block  # raw blocks: nvcc writes no LZ4 frame header
            out = lz4.block.decompress(data, uncompressed_size=size)
    except ImportError as exc:
        raise FatbinError(f"fatbin entry at offset {pos} is {method}-compressed, and the Python "
                          f"package to decompress it is missing: {exc}") from exc
    except Exception as exc:  # zstandard.ZstdError, lz4's LZ4BlockError
        raise FatbinError(f"fatbin entry at offset {pos}: {method} decompression failed: {exc}") from exc
    if len(out) != size:
        raise FatbinError(f"fatbin entry at offset {pos}: {method} gave {len(out)} bytes, "
                          f"header says {size}")
    return out


# ---------------------------------------------------------------- bare images

ELF_MAGIC = b"\x7fELF"
ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
ELF_SECTION = struct.Struct("<IIQQQQIIQQ")        # Elf64_Shdr
SHT_NOBITS = 8
PTX_TARGET = re.compile(r"^[ \t]*\.target[ \t]+sm_(\d+)", re.M)


def image_kind(head: bytes) -> str:
    """What a module image given to cuModuleLoadData is, from its first
    bytes: "fatbin", "wrapper" (a registration wrapper around one), "cubin"
    (an ELF image) or "ptx" (anything else: text, checked when loaded)."""
    (magic,) = struct.unpack_from("<I", head.ljust(4, b"\0"))
    if magic == FATBIN_MAGIC:
        return "fatbin"
    if magic == FATBIN_WRAPPER_MAGIC:
        return "wrapper"
    return KIND_CUBIN if head[:4] == ELF_MAGIC else KIND_PTX


def elf_size(read) -> int:
    """Bytes of the ELF image (a cubin) whose bytes `read(offset, size)`
    gives: the end of the furthest of its header tables and sections.  A
    cubin handed to cuModuleLoadData comes without its size."""
    header = ELF_HEADER.unpack(read(0, ELF_HEADER.size))
    if header[0][4] != 2:  # EI_CLASS: ELFCLASS64
        raise FatbinError("cubin is not a 64-bit ELF image")
    phoff, shoff, phentsize, phnum, shentsize, shnum = header[5], header[6], *header[9:13]
    if shentsize and shentsize < ELF_SECTION.size:
        raise FatbinError(f"cubin has {shentsize}-byte section headers")
    end = max(ELF_HEADER.size, phoff + phentsize * phnum, shoff + shentsize * shnum)
    table = read(shoff, shentsize * shnum) if shnum else b""
    for i in range(shnum):
        section = ELF_SECTION.unpack_from(table, i * shentsize)
        if section[1] != SHT_NOBITS:
            end = max(end, section[4] + section[5])  # sh_offset + sh_size
    return end


def cubin_arch(image: bytes) -> int:
    """The sm_XY of a cubin, as XY (from e_flags), 0 when unknown."""
    if len(image) < ELF_HEADER.size:
        return 0
    return (ELF_HEADER.unpack_from(image)[7] >> 8) & 0xFF


def parse_image(data) -> Fatbin:
    """Any image cuModuleLoadData takes: fatbin containers, a cubin or PTX
    text (a bare image becomes a Fatbin of one entry)."""
    data = bytes(data)
    kind = image_kind(data[:4])
    if kind == "fatbin":
        return parse_fatbin(data)
    if kind == "wrapper":
        raise FatbinError("a fatbin wrapper: pass the container it points at")
    if kind == KIND_PTX:
        text = data.rstrip(b"\0")
        target = PTX_TARGET.search(text.decode("utf-8", errors="replace"))
        return Fatbin((Entry(KIND_PTX, int(target[1]) if target else 0, None, text),), len(data))
    return Fatbin((Entry(KIND_CUBIN, cubin_arch(data), None, data),), len(data))


def write_fatbin(entries) -> bytes:
    """One fatbin container holding `entries` (uncompressed), laid out as
    nvcc 13 writes one: what the sim backend's linker hands back."""
    body = b""
    for entry in entries:
        payload = entry.payload + (b"\0" if entry.kind == KIND_PTX else b"")
        payload += b"\0" * (-len(payload) % 8)
        header = bytearray(MIN_ENTRY_HEADER)
        ENTRY_HEADER.pack_into(header, 0, ENTRY_KIND_IDS[entry.kind], 0x0101, len(header), len(payload))
        ENTRY_ARCH.pack_into(header, OFF_ARCH, entry.arch)
        ENTRY_FLAGS.pack_into(header, OFF_FLAGS, ENTRY_FLAGS_64BIT_LINUX)
        body += bytes(header) + payload
    return CONTAINER_HEADER.pack(FATBIN_MAGIC, 1, CONTAINER_HEADER.size, len(body)) + body


# ---------------------------------------------------------------- ELF programs

def fatbins_in_elf(path, section: str = ".nv_fatbin") -> list[bytes]:
    """The fatbin containers in a program's or shared library's `section`
    (`.nv_fatbin`; `-rdc` programs keep per-file images in `__nv_relfatbin`)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(path, "rb") as f:
            found = ELFFile(f).get_section_by_name(section)
            data = found.data() if found is not None else b""
    except ELFError as exc:
        raise FatbinError(f"{path} is not an ELF file: {exc}") from exc
    containers = []
    offset = 0
    while offset < len(data):
        size = fatbin_size(memoryview(data)[offset:])
        if offset + size > len(data):
            raise FatbinError(f"truncated fatbinary in {path} section {section}: container at "
                              f"offset {offset} claims {size} bytes, section ends at {len(data)}")
        containers.append(data[offset:offset + size])
        offset += size
    return containers


# ---------------------------------------------------------------- cubins

def _open_cubin(image: bytes):
    # pyelftools costs ~25 ms to import: only programs that launch kernels
    # (and servers) need it, not every program's start-up.
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        elf = ELFFile(io.BytesIO(image))
    except ELFError as exc:
        raise FatbinError(f"cubin is not an ELF image: {exc}") from exc
    if elf.elfclass != 64 or not elf.little_endian:
        raise FatbinError("cubin is not a 64-bit little-endian ELF image")
    return elf


def _symbols(elf):
    """(symbol, raw st_other) pairs; pyelftools drops st_other's CUDA bits."""
    symtab = elf.get_section_by_name(".symtab")
    if symtab is None:
        return
    raw = symtab.data()
    entsize = symtab["sh_entsize"] or 24
    st_other_offset = 5  # Elf64_Sym: u32 name, u8 info, u8 other, ...
    for index, symbol in enumerate(symtab.iter_symbols()):
        yield symbol, raw[index * entsize + st_other_offset]


def cubin_kernels(image: bytes) -> dict[str, Kernel]:
    """Kernels of a cubin with their layout from EIATTR_KPARAM_INFO(_V2)."""
    elf = _open_cubin(image)
    kernels = {}
    for symbol, other in _symbols(elf):
        if symbol["st_info"]["type"] == "STT_FUNC" and other & STO_CUDA_ENTRY:
            info = elf.get_section_by_name(NV_INFO_PREFIX + symbol.name)
            if info is None:
                log.debug("kernel %s has no %s section: no parameters", symbol.name, NV_INFO_PREFIX)
                kernels[symbol.name] = Kernel(symbol.name, ())
            else:
                kernels[symbol.name] = _kparams(info.data(), symbol.name)
    return kernels


def _nv_info_records(data: bytes, where: str):
    """(attribute, payload) of each record in a .nv.info section."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 4:
            raise FatbinError(f"truncated .nv.info record in {where} at offset {pos}")
        fmt, attribute, value = data[pos], data[pos + 1], data[pos + 2:pos + 4]
        pos += 4
        if fmt == EIFMT_SVAL:
            (size,) = struct.unpack("<H", value)
            if pos + size > len(data):
                raise FatbinError(f"truncated .nv.info record in {where} at offset {pos - 4}")
            value, pos = data[pos:pos + size], pos + size
        yield attribute, value


def _kparams(data: bytes, kernel: str) -> Kernel:
    """A kernel's layout from its .nv.info records."""
    params, declared_size = {}, None
    for attribute, value in _nv_info_records(data, NV_INFO_PREFIX + kernel):
        if attribute in (EIATTR_KPARAM_INFO, EIATTR_KPARAM_INFO_V2):
            if len(value) < KPARAM_INFO.size:
                raise FatbinError(f"short parameter record (attribute {attribute:#x}, {len(value)} bytes) "
                                  f"for {kernel}")
            _index, ordinal, offset, size = KPARAM_INFO.unpack_from(value)
            if attribute == EIATTR_KPARAM_INFO:
                size >>= KPARAM_SIZE_SHIFT
            params[ordinal] = KernelParam(ordinal, offset, size)
        elif attribute == EIATTR_CBANK_PARAM_SIZE:
            (declared_size,) = struct.unpack("<H", value)
    return Kernel(kernel, tuple(params[o] for o in sorted(params)), declared_size)


def cubin_resources(image: bytes, arch: int = 0) -> dict[str, KernelResources]:
    """Registers, shared/local/constant memory and launch bounds per kernel."""
    elf = _open_cubin(image)
    symbols = list(_symbols(elf))
    kernels = [s.name for s, other in symbols if s["st_info"]["type"] == "STT_FUNC" and other & STO_CUDA_ENTRY]
    by_index = {index: symbol.name for index, (symbol, _) in enumerate(symbols)}
    registers, frames = {}, {}
    module_info = elf.get_section_by_name(".nv.info")
    if module_info is not None:
        for attribute, value in _nv_info_records(module_info.data(), ".nv.info"):
            if attribute in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(value) >= SYMBOL_VALUE.size:
                index, amount = SYMBOL_VALUE.unpack_from(value)
                (registers if attribute == EIATTR_REGCOUNT else frames)[by_index.get(index)] = amount
    constants = elf.get_section_by_name(USER_CONSTANT_BANK)
    const_bytes = constants["sh_size"] if constants is not None else 0
    resources = {}
    for name in kernels:
        shared = elf.get_section_by_name(SHARED_PREFIX + name)
        max_threads = cluster_dims = max_cluster_blocks = None
        explicit_cluster = False
        info = elf.get_section_by_name(NV_INFO_PREFIX + name)
        if info is not None:
            for attribute, value in _nv_info_records(info.data(), NV_INFO_PREFIX + name):
                if attribute == EIATTR_MAX_THREADS and len(value) >= 12:
                    x, y, z = struct.unpack_from("<III", value)
                    max_threads = x * y * z
                elif attribute == EIATTR_CTA_PER_CLUSTER and len(value) >= 12:
                    cluster_dims = struct.unpack_from("<III", value)
                elif attribute == EIATTR_EXPLICIT_CLUSTER:
                    explicit_cluster = True
                elif attribute == EIATTR_MAX_CLUSTER_RANK and len(value) >= 4:
                    (max_cluster_blocks,) = struct.unpack_from("<I", value)
        resources[name] = KernelResources(registers.get(name, 0), shared["sh_size"] if shared is not None else 0,
                                          frames.get(name, 0), const_bytes, max_threads, arch, cluster_dims,
                                          explicit_cluster or cluster_dims is not None, max_cluster_blocks)
    return resources


def cubin_variables(image: bytes) -> dict[str, Variable]:
    """`__device__` and `__constant__` variables: object symbols in the
    global and constant-bank sections."""
    elf = _open_cubin(image)
    variables = {}
    for symbol, other in _symbols(elf):
        if symbol["st_info"]["type"] != "STT_OBJECT" or not isinstance(symbol["st_shndx"], int):
            continue
        section = elf.get_section(symbol["st_shndx"])
        name = section.name
        constant = name.startswith(CONSTANT_SECTION_PREFIX) and not name.startswith(KERNEL_CONSTANT_BANK)
        if constant or name in GLOBAL_SECTIONS:
            size = symbol["st_size"]
            initial = b""
            if section["sh_type"] != "SHT_NOBITS":  # .nv.global is NOBITS: zeros
                initial = section.data()[symbol["st_value"]:symbol["st_value"] + size]
            variables[symbol.name] = Variable(symbol.name, size, constant, bytes(initial),
                                              managed=bool(other & STO_CUDA_MANAGED))
    return variables


#: Cubin symbol types of texture and surface references (STT_CUDA_TEXTURE,
#: STT_CUDA_SURFACE: pyelftools names them by the OS-specific range).
CUBIN_REFERENCE_TYPES = {"STT_LOOS": "texture", "STT_HIOS": "surface"}


def cubin_references(image: bytes) -> dict[str, str]:
    """Texture and surface references: symbols of the CUDA types, which a
    cubin leaves undefined (the driver binds them)."""
    elf = _open_cubin(image)
    return {symbol.name: CUBIN_REFERENCE_TYPES[symbol["st_info"]["type"]] for symbol, _other in _symbols(elf)
            if symbol["st_info"]["type"] in CUBIN_REFERENCE_TYPES and symbol.name}


# ---------------------------------------------------------------- PTX

def _ptx_text(image) -> str:
    """PTX without comments and without the module header and `.file`
    directives, which end without a `;`."""
    text = bytes(image).decode("utf-8", errors="replace")
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return PTX_LINE_DIRECTIVES.sub(" ", text)


def _ptx_top_level(text: str):
    """Module-level statements of PTX, function bodies left out: each
    statement ends at a `;`, or at the `}` closing a body or initializer
    (yielding the text before its `{`)."""
    depth, start, head = 0, 0, ""
    for match in PTX_BRACES_AND_ENDS.finditer(text):
        char, pos = match[0], match.start()
        if char == "{":
            if depth == 0:
                head = text[start:pos]
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                raise FatbinError(f"unbalanced braces in PTX near offset {pos}")
            if depth == 0:
                yield head.strip()
                start = pos + 1
        elif depth == 0:
            yield text[start:pos].strip()
            start = pos + 1


def ptx_kernels(image) -> dict[str, Kernel]:
    """Kernels of PTX text with offsets from natural alignment."""
    kernels = {}
    for statement in _ptx_top_level(_ptx_text(image)):
        match = PTX_ENTRY.search(statement)
        if match:
            name, param_list = match[1], match[2] or ""
            decls = [d.strip() for d in param_list.split(",") if d.strip()]
            kernels[name] = Kernel(name, _ptx_layout(name, decls))
    return kernels


def _ptx_layout(kernel: str, decls: list[str]) -> tuple[KernelParam, ...]:
    params, offset = [], 0
    for ordinal, decl in enumerate(decls):
        size, align = _ptx_param_size(kernel, decl)
        offset = -(-offset // align) * align
        params.append(KernelParam(ordinal, offset, size))
        offset += size
    return tuple(params)


def _ptx_param_size(kernel: str, decl: str) -> tuple[int, int]:
    """(size, alignment) of one `.param` declaration."""
    size, align, _name = _ptx_declaration(decl.replace(".param", " ", 1))
    if size is None:
        raise FatbinError(f"cannot size PTX parameter {decl!r} of {kernel}")
    return size, align


def _ptx_declaration(decl: str) -> tuple[int | None, int, str]:
    """(size, alignment, name) of a PTX state-space declaration without its
    state space: `[.align N] [.vN] .type [.ptr .space .align M] name[dims]`.
    size is None when the type or a dimension is unknown."""
    tokens = re.sub(r"\s*\[\s*", "[", decl).split()
    vector, explicit_align, element, pointer = 1, None, None, False
    name, dims = "", []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == ".align":
            i += 1
            if i == len(tokens) or not tokens[i].isdigit():
                return None, 1, name
            if not pointer:  # after .ptr, .align is the pointee's alignment
                explicit_align = int(tokens[i])
        elif token == ".ptr":
            pointer = True
        elif PTX_VECTOR.match(token):
            vector = int(token[2:])
        elif token.startswith(".") and token[1:] in PTX_TYPE_SIZES and element is None:
            element = PTX_TYPE_SIZES[token[1:]]
        elif not token.startswith("."):
            name, _, rest = token.partition("[")
            dims = re.findall(r"(\d*)\]", "[" + rest) if rest else []
            break
        i += 1
    if element is None or any(d == "" for d in dims):
        return None, 1, name
    align = explicit_align or element * vector
    size = element * vector
    for d in dims:
        size *= int(d)
    return size, align, name


def ptx_variables(image) -> dict[str, Variable]:
    """`.global` and `.const` variables defined at module level."""
    variables = {}
    for statement in _ptx_top_level(_ptx_text(image)):
        head = statement.split("=", 1)[0]  # drop an initializer
        match = PTX_VARIABLE.search(head)
        tokens = set(head.split())
        if not match or tokens & PTX_NOT_VARIABLES:
            continue
        size, _align, name = _ptx_declaration(PTX_ATTRIBUTE.sub(" ", head[match.end():]))
        if size is not None and name:
            managed = any(".managed" in a for a in PTX_ATTRIBUTE.findall(head))
            variables[name] = Variable(name, size, match[1] == "const", managed=managed)
    return variables


#: `.global .texref NAME` / `.global .surfref NAME` (the `.tex` state space
#: is the deprecated spelling of `.global .texref`), with any linkage word.
PTX_REFERENCE = re.compile(r"^(?:\.(?:visible|weak|extern)\s+)*(?:\.global\s+\.(texref|surfref)|\.tex\s+\.\w+)"
                           r"\s+([\w$.]+)\s*$")


def ptx_references(image) -> dict[str, str]:
    """Texture and surface references declared at module level."""
    references = {}
    for statement in _ptx_top_level(_ptx_text(image)):
        match = PTX_REFERENCE.match(statement.split("=", 1)[0].strip())
        if match:
            references[match[2]] = "surface" if match[1] == "surfref" else "texture"
    return references


# ---------------------------------------------------------------- command line

def _demangle(name: str) -> str:
    try:
        import cxxfilt
        return cxxfilt.demangle(name)
    except Exception:  # cxxfilt missing or the name is not mangled
        return name


def _load(path: Path) -> tuple[Fatbin, list[int]]:
    """A Fatbin from an ELF program/library or a raw .fatbin file, and the
    sizes of its containers."""
    data = path.read_bytes()
    if data[:4] == b"\x7fELF":
        containers = fatbins_in_elf(path)
        if not containers:
            raise FatbinError(f"{path} has no .nv_fatbin section: no CUDA device code")
        return parse_fatbin(b"".join(containers)), [len(c) for c in containers]
    sizes, offset = [], 0
    while offset < len(data):
        sizes.append(fatbin_size(memoryview(data)[offset:]))
        offset += sizes[-1]
    return parse_fatbin(data), sizes


def dump(fatbin: Fatbin, container_sizes: list[int], out=None) -> None:
    """Print the entries, kernels and variables of a fatbin (to stdout)."""
    out = out or sys.stdout
    print(f"containers: {len(container_sizes)} ({', '.join(map(str, container_sizes))} bytes; "
          f"{fatbin.size} in all)", file=out)
    print("entries:", file=out)
    for e in fatbin.entries:
        print(f"  {e.kind:6} arch {e.arch:<4} compression {e.compression or 'none':5} "
              f"stored {e.stored_size:7} bytes  image {len(e.payload):7} bytes  flags {e.flags:#x}", file=out)
    print(f"kernels (from {fatbin.layout_source or 'no image'}):", file=out)
    for name, kernel in sorted(fatbin.kernels().items()):
        print(f"  {name}  [{_demangle(name)}]  {kernel.param_buffer_size} bytes", file=out)
        for p in kernel.params:
            print(f"    param {p.ordinal}: offset {p.offset:5}  size {p.size}", file=out)
    print("variables:", file=out)
    for name, var in sorted(fatbin.variables().items()):
        print(f"  {name}  {var.size} bytes{'  (constant)' if var.constant else ''}", file=out)


def main(argv: list[str] | None = None) -> int:
    """`python -m rcuda.fatbin FILE`: dump what a program's fatbinary holds."""
    import argparse  # here: the client imports this module in every program's start-up
    parser = argparse.ArgumentParser(prog="python -m rcuda.fatbin",
                                     description="Show the device code images, kernel parameter layouts "
                                                 "and variables in a CUDA program or raw .fatbin file.")
    parser.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    try:
        fatbin, sizes = _load(args.file)
    except (OSError, FatbinError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    dump(fatbin, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
