"""rcuda.fatbin on real nvcc output: containers, compression, parameter layouts.

One source file (tests/cuda_sources/fatbin_kernels.cu) is compiled once per
variant, all variants in parallel.  Tests that need no compiler (malformed
data, PTX corner cases) use small fatbinaries built here by hand.
"""
from __future__ import annotations

import dataclasses
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import zstandard
from elftools.elf.elffile import ELFFile

from rcuda import fatbin as fb
from rcuda.fatbin import (FATBIN_MAGIC, FATBIN_WRAPPER_MAGIC, Fatbin, FatbinError, Kernel, KernelParam,
                          Variable, cubin_kernels, fatbin_size, fatbins_in_elf, parse_fatbin, ptx_kernels,
                          ptx_variables)

SOURCE = Path(__file__).resolve().parent / "cuda_sources" / "fatbin_kernels.cu"
NVCC = shutil.which("nvcc") or shutil.which("nvcc", path="/usr/local/cuda/bin")

GENCODE_MULTI = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80",
                 "-gencode", "arch=compute_90,code=compute_90"]
VARIANTS = {
    "default": [],
    "compress_all": ["-Xfatbin", "-compress-all"],
    "lz4": ["-Xfatbin", "-compress-all", "-Xfatbin", "-compress-mode=speed"],
    "multi": GENCODE_MULTI,
    "ptx_only": ["-gencode", "arch=compute_75,code=compute_75"],
}
WITH_CUBIN = ["default", "compress_all", "lz4", "multi"]


def P(*triples: tuple[int, int, int]) -> tuple[KernelParam, ...]:
    """Parameters from (ordinal, offset, size) triples."""
    return tuple(KernelParam(*t) for t in triples)


EXPECTED_KERNELS = {
    # withStruct(P /*24 B*/, float*, char, long long)
    "_Z10withStruct1PPfcx": P((0, 0, 24), (1, 24, 8), (2, 32, 1), (3, 40, 8)),
    # scalars(double*, int, float, double, char, long long, unsigned short, bool)
    "_Z7scalarsPdifdcxtb": P((0, 0, 8), (1, 8, 4), (2, 12, 4), (3, 16, 8), (4, 24, 1), (5, 32, 8),
                             (6, 40, 2), (7, 42, 1)),
    # mixed(char, Chars /*3 B*/, short, float4, Aligned /*16 B, 16-aligned*/, Big /*1000 B*/, double*)
    "_Z5mixedc5Charss6float47Aligned3BigPd": P((0, 0, 1), (1, 1, 3), (2, 4, 2), (3, 16, 16), (4, 32, 16),
                                              (5, 48, 1000), (6, 1048, 8)),
    "_Z6unusedidPc": P((0, 0, 4), (1, 8, 8), (2, 16, 8)),
    "_Z12gridConstant1PPi": P((0, 0, 24), (1, 24, 8)),
    "_Z8noParamsv": (),
    "_Z5tiledPfi": P((0, 0, 8), (1, 8, 4)),
    "_Z4fillIiEvPT_S0_i": P((0, 0, 8), (1, 8, 4), (2, 12, 4)),
    "_Z4fillIdEvPT_S0_i": P((0, 0, 8), (1, 8, 8), (2, 16, 4)),
    "_ZN4math5scaleEPffdts": P((0, 0, 8), (1, 8, 4), (2, 16, 8), (3, 24, 2), (4, 26, 2)),
    # midSized(char, Mid /*16000 B*/, short, int*): beyond 4208 bytes, KPARAM_INFO_V2 records
    "_Z8midSizedc3MidsPi": P((0, 0, 1), (1, 1, 16000), (2, 16002, 2), (3, 16008, 8)),
    # largest(const __grid_constant__ Huge /*32752 B*/, int*, int): CUDA's limit, 32764 bytes
    "_Z7largest4HugePii": P((0, 0, 32752), (1, 32752, 8), (2, 32760, 4)),
}
EXPECTED_VARIABLES = {
    "gvar": Variable("gvar", 64, False),
    "cvar": Variable("cvar", 16, True),
    "initd": Variable("initd", 4, False),
    "dvar": Variable("dvar", 8, False),
}


# ---------------------------------------------------------------- fixtures

def _nvcc(out: Path, *flags: str) -> Path:
    cmd = [NVCC, "-o", str(out), str(SOURCE), *flags]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"nvcc failed: {' '.join(cmd)}\n{result.stderr}")
    return out


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Path]:
    """Every variant's program, and "raw": a bare .fatbin file."""
    if NVCC is None:
        pytest.skip("nvcc not found: install the CUDA 13 toolkit to build test programs")
    out = tmp_path_factory.mktemp("fatbin-build")
    jobs = {name: (out / name, "-cudart", "shared", *flags) for name, flags in VARIANTS.items()}
    jobs["raw"] = (out / "raw.fatbin", "-fatbin")
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(_nvcc, *args) for name, args in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="session")
def parsed(built) -> dict[str, Fatbin]:
    """Each program's whole .nv_fatbin section, parsed."""
    return {name: parse_fatbin(b"".join(fatbins_in_elf(built[name]))) for name in VARIANTS}


def _section(path: Path, name: str) -> tuple[bytes, int]:
    with open(path, "rb") as f:
        section = ELFFile(f).get_section_by_name(name)
        return section.data(), section["sh_addr"]


# ---------------------------------------------------------------- real nvcc output

def test_default_output_is_cubin_plus_zstd_ptx(parsed):
    f = parsed["default"]
    # The device-link step's (empty) cubin, then this file's cubin and PTX.
    assert [(e.kind, e.arch, e.compression) for e in f.entries] == [
        ("cubin", 75, None), ("cubin", 75, None), ("ptx", 75, "zstd")]
    ptx = f.first("ptx").payload
    assert b".target sm_75" in ptx and not ptx.endswith(b"\0")
    assert all(e.payload.startswith(b"\x7fELF") for e in f.entries if e.kind == "cubin")
    assert f.archs() == (75,) and f.layout_source == "cubin"


@pytest.mark.parametrize("variant, method", [("compress_all", "zstd"), ("lz4", "lz4")])
def test_compressed_images_decompress_to_the_same_bytes(parsed, variant, method):
    f, plain = parsed[variant], parsed["default"]
    assert {e.compression for e in f.entries} == {method}
    assert all(e.stored_size < len(e.payload) for e in f.entries)
    assert [e.payload for e in f.entries] == [e.payload for e in plain.entries]
    assert f.kernels() == plain.kernels()


def test_several_gencode_targets(parsed):
    f = parsed["multi"]
    assert f.archs("cubin") == (75, 80) and f.archs("ptx") == (90,)
    layouts = [cubin_kernels(e.payload) for e in f.entries if e.kind == "cubin" and cubin_kernels(e.payload)]
    assert len(layouts) == 2 and layouts[0] == layouts[1] == f.kernels()
    assert ptx_kernels(f.first("ptx").payload) == f.kernels()


def test_ptx_only_program_uses_the_ptx(parsed):
    f = parsed["ptx_only"]
    assert {e.kind for e in f.entries} == {"ptx"} and f.layout_source == "ptx"
    assert f.kernels() == parsed["default"].kernels()
    assert f.variables() == EXPECTED_VARIABLES


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_kernel_layouts(parsed, variant):
    kernels = parsed[variant].kernels()
    assert {name: k.params for name, k in kernels.items()} == EXPECTED_KERNELS
    assert kernels["_Z10withStruct1PPfcx"].param_buffer_size == 48
    assert kernels["_Z8noParamsv"].param_buffer_size == 0
    assert kernels["_Z5mixedc5Charss6float47Aligned3BigPd"].param_buffer_size == 1056


@pytest.mark.parametrize("variant", WITH_CUBIN)
def test_ptx_layout_equals_cubin_layout(parsed, variant):
    f = parsed[variant]
    assert f.layout_source == "cubin"
    assert ptx_kernels(f.first("ptx").payload) == f.kernels()
    assert ptx_variables(f.first("ptx").payload) == f.variables()


@pytest.mark.parametrize("variant", WITH_CUBIN)
def test_cubins_state_each_parameter_block_size(parsed, variant):
    """EIATTR_CBANK_PARAM_SIZE: every kernel with parameters has it, and the
    records read account for it exactly."""
    kernels = parsed[variant].kernels()
    assert kernels["_Z7largest4HugePii"].declared_size == 32764
    assert kernels["_Z8midSizedc3MidsPi"].declared_size == 16016
    assert kernels["_Z8noParamsv"].declared_size is None
    for kernel in kernels.values():
        assert kernel.layout_error() is None
        assert kernel.declared_size == (kernel.param_buffer_size if kernel.params else None), kernel.name


@pytest.mark.parametrize("variant", WITH_CUBIN)
def test_device_variables(parsed, variant):
    assert parsed[variant].variables() == EXPECTED_VARIABLES


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_fatbin_size_covers_the_section(built, variant):
    section, _ = _section(built[variant], ".nv_fatbin")
    containers = fatbins_in_elf(built[variant])
    assert len(containers) == 2 and b"".join(containers) == section
    for container in containers:
        assert fatbin_size(container[:16]) == len(container)  # the header alone suffices
    assert parse_fatbin(section).size == len(section)


def test_registration_wrappers_point_at_containers(built):
    """What the client gets: each wrapper's data is the start of one container."""
    section, address = _section(built["default"], ".nv_fatbin")
    wrappers, _ = _section(built["default"], ".nvFatBinSegment")
    starts = []
    for offset in range(0, len(wrappers), 24):
        magic, _version, data, _extra = struct.unpack_from("<iiQQ", wrappers, offset)
        assert magic & 0xFFFFFFFF == FATBIN_WRAPPER_MAGIC
        starts.append(data - address)
    expected, offset = [], 0
    for container in fatbins_in_elf(built["default"]):
        expected.append(offset)
        offset += len(container)
    assert starts == expected
    own = section[starts[-1]:]
    f = parse_fatbin(own[:fatbin_size(own)])
    assert set(f.kernels()) == set(EXPECTED_KERNELS)


def test_raw_fatbin_file(built, capsys):
    data = built["raw"].read_bytes()
    assert fatbin_size(data) == len(data)
    f = parse_fatbin(data)
    assert [e.kind for e in f.entries] == ["cubin", "ptx"]
    assert {n: k.params for n, k in f.kernels().items()} == EXPECTED_KERNELS
    assert fb.main([str(built["raw"])]) == 0
    assert "_Z10withStruct1PPfcx" in capsys.readouterr().out


def test_command_line_dump(built):
    result = subprocess.run([sys.executable, "-m", "rcuda.fatbin", str(built["default"])],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for name in EXPECTED_KERNELS:
        assert name in result.stdout
    assert "offset    40  size 8" in result.stdout
    assert "gvar" in result.stdout and "zstd" in result.stdout


def test_command_line_reports_errors(tmp_path, capsys):
    junk = tmp_path / "junk.fatbin"
    junk.write_bytes(b"\0" * 32)
    assert fb.main([str(junk)]) == 1
    assert "bad fatbin magic" in capsys.readouterr().err


def test_truncated_real_fatbin(built):
    container = fatbins_in_elf(built["default"])[1]
    with pytest.raises(FatbinError, match="truncated"):
        parse_fatbin(container[:-1])
    with pytest.raises(FatbinError, match="truncated"):
        parse_fatbin(container[:40])


def test_kernels_are_cached_and_copied(parsed):
    f = parsed["default"]
    first = f.kernels()
    first.clear()
    assert f.kernels() == parsed["compress_all"].kernels() != {}
    assert f._kernels is f._kernels
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.size = 0


def _unreadable_v2_records(image: bytes) -> bytes:
    """`image` with its KPARAM_INFO_V2 records turned into an attribute this
    reader does not know (as a newer nvcc's might be)."""
    v2 = bytes([fb.EIFMT_SVAL, fb.EIATTR_KPARAM_INFO_V2, fb.KPARAM_INFO.size, 0])
    assert image.count(v2) == 7  # midSized's 4, largest's 3
    return image.replace(v2, bytes([fb.EIFMT_SVAL, 0x7F, fb.KPARAM_INFO.size, 0]))


def test_unreadable_layout_is_an_error_naming_the_kernel(built):
    """The client refuses to pack parameters it cannot place: the launch
    fails with cudaErrorInvalidKernelImage, never runs without them."""
    from rcuda.client.modules import Module, Kernel as ClientKernel
    from rcuda.errors import CudaError, cudaError
    image = _unreadable_v2_records(built["raw"].read_bytes())
    kernel = parse_fatbin(image).kernels()["_Z7largest4HugePii"]
    assert kernel.params == () and kernel.declared_size == 32764
    assert kernel.layout_error() == "its cubin says its parameters take 32764 bytes, the parameter records read cover 0"
    module = Module(lambda: image)
    with pytest.raises(CudaError) as raised:
        ClientKernel(module, "_Z7largest4HugePii").params
    assert raised.value.status == cudaError.cudaErrorInvalidKernelImage
    assert "_Z7largest4HugePii" in str(raised.value) and "32764" in str(raised.value)
    assert ClientKernel(module, "_Z5tiledPfi").params.buffer_size == 12  # small kernels are unaffected


def _nv_info(*records: tuple[int, int, bytes]) -> bytes:
    """A .nv.info section from (format, attribute, value) records."""
    return b"".join(bytes([f, a]) + (struct.pack("<H", len(v)) + v if f == fb.EIFMT_SVAL else v)
                    for f, a, v in records)


def _kparam(attribute: int, ordinal: int, offset: int, size: int) -> tuple[int, int, bytes]:
    packed = size << fb.KPARAM_SIZE_SHIFT | 0x1F000 if attribute == fb.EIATTR_KPARAM_INFO else size
    return fb.EIFMT_SVAL, attribute, fb.KPARAM_INFO.pack(0, ordinal, offset, packed)


def _block_size(size: int) -> tuple[int, int, bytes]:
    return 3, fb.EIATTR_CBANK_PARAM_SIZE, struct.pack("<H", size)


def test_kparam_info_v2_records():
    """As nvcc 13 writes bigKernel(const __grid_constant__ Big /*32000 B*/, int*):
    V2 records hold the size whole; the block's size comes first."""
    data = _nv_info(_block_size(32008), _kparam(fb.EIATTR_KPARAM_INFO_V2, 1, 32000, 8),
                    _kparam(fb.EIATTR_KPARAM_INFO_V2, 0, 0, 32000))
    kernel = fb._kparams(data, "bigKernel")
    assert kernel == Kernel("bigKernel", P((0, 0, 32000), (1, 32000, 8)))
    assert kernel.declared_size == 32008 and kernel.layout_error() is None
    small = fb._kparams(_nv_info(_block_size(12), _kparam(fb.EIATTR_KPARAM_INFO, 1, 8, 4),
                                 _kparam(fb.EIATTR_KPARAM_INFO, 0, 0, 8)), "small")
    assert small.params == P((0, 0, 8), (1, 8, 4)) and small.layout_error() is None


@pytest.mark.parametrize("records, problem", [
    ([_block_size(16), _kparam(fb.EIATTR_KPARAM_INFO_V2, 0, 0, 8)], "take 16 bytes, the parameter records read cover 8"),
    ([_kparam(fb.EIATTR_KPARAM_INFO_V2, 0, 0, 8), _kparam(fb.EIATTR_KPARAM_INFO_V2, 2, 8, 8)], "ordinals [0, 2]"),
    ([_kparam(fb.EIATTR_KPARAM_INFO_V2, 0, 0, 8), _kparam(fb.EIATTR_KPARAM_INFO_V2, 1, 4, 8)],
     "parameter 1 at offset 4 overlaps"),
])
def test_layouts_that_do_not_add_up(records, problem):
    assert problem in fb._kparams(_nv_info(*records), "k").layout_error()


def test_ptx_parameter_of_32000_bytes():
    ptx = b".visible .entry big(.param .align 4 .b8 big_param_0[32000], .param .u64 big_param_1) { ret; }"
    assert ptx_kernels(ptx)["big"] == Kernel("big", P((0, 0, 32000), (1, 32000, 8)))


# ---------------------------------------------------------------- hand-made fatbinaries

def _entry(payload: bytes, kind: int = 1, arch: int = 75, flags: int = 0x11,
           compressed: bool = False, uncompressed_size: int = 0, header_size: int = 64) -> bytes:
    padded = payload + b"\0" * (-len(payload) % 8)
    header = bytearray(header_size)
    struct.pack_into("<HHIQ", header, 0, kind, 0x0101, header_size, len(padded))
    struct.pack_into("<I", header, 16, len(payload) if compressed else 0)
    struct.pack_into("<I", header, 28, arch)
    struct.pack_into("<I", header, 40, flags)
    struct.pack_into("<Q", header, 56, uncompressed_size)
    return bytes(header) + padded


def _container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


PTX = b"""
.version 9.0
.target sm_75
.address_size 64

// .globl k
.global .align 8 .b8 table[3][4];
.visible .global .attribute(.managed) .align 4 .u32 managed;
.const .align 4 .f32 coeffs[2] = {1.0, 2.0};
.extern .global .align 4 .b8 elsewhere[];
.global .texref tex;
.visible .entry k(
    .param .u8 k_param_0,
    .param .v2 .f32 k_param_1,
    .param .u64 .ptr .global .align 16 k_param_2,
    .param .u16 k_param_3,
    .param .v4 .u32 k_param_4,
    .param .align 4 .b8 k_param_5[6],
    .param .f16 k_param_6,
    .param .u32 k_param_7[3]
)
.maxntid 256, 1, 1
{
    .shared .align 4 .b8 scratch[64];
    ret;
}
.visible .entry empty()
{
    ret;
}
"""


def test_ptx_parameters_by_natural_alignment():
    kernels = ptx_kernels(PTX)
    assert kernels["k"] == Kernel("k", P((0, 0, 1), (1, 8, 8), (2, 16, 8), (3, 24, 2), (4, 32, 16),
                                         (5, 48, 6), (6, 54, 2), (7, 56, 12)))
    assert kernels["empty"].params == ()


def test_ptx_variables():
    assert ptx_variables(PTX) == {
        "table": Variable("table", 12, False),
        "managed": Variable("managed", 4, False),
        "coeffs": Variable("coeffs", 8, True),
    }
    # .attribute(.managed) marks a __managed__ variable (cuLibraryGetManaged finds only those)
    assert {name: v.managed for name, v in ptx_variables(PTX).items()} == {"table": False, "managed": True,
                                                                           "coeffs": False}


@pytest.mark.parametrize("method, flags, compress", [
    ("zstd", 0x8011, lambda b: zstandard.ZstdCompressor().compress(b)),
    ("lz4", 0x2011, lambda b: __import__("lz4.block").block.compress(b, store_size=False)),
])
def test_hand_made_compressed_ptx(method, flags, compress):
    data = _container(_entry(compress(PTX + b"\0"), flags=flags, compressed=True, uncompressed_size=len(PTX) + 1))
    f = parse_fatbin(data)
    assert f.entries[0].compression == method and f.entries[0].payload == PTX
    assert f.size == len(data) == fatbin_size(data)
    assert set(f.kernels()) == {"k", "empty"}


def test_unknown_compression_flag_is_named():
    data = _container(_entry(b"x" * 40, flags=0x4011, compressed=True, uncompressed_size=100))
    with pytest.raises(FatbinError, match="unknown method: flags 0x4011"):
        parse_fatbin(data)


def test_corrupt_compressed_payload():
    data = _container(_entry(b"not zstd at all", flags=0x8011, compressed=True, uncompressed_size=100))
    with pytest.raises(FatbinError, match="zstd decompression failed"):
        parse_fatbin(data)


def test_bad_magic_and_wrapper_hint():
    good = _container(_entry(PTX))
    with pytest.raises(FatbinError, match="bad fatbin magic 0x00000000 at offset 0"):
        fatbin_size(b"\0" * 16)
    wrapper = struct.pack("<IiQQ", FATBIN_WRAPPER_MAGIC, 1, 0, 0)
    with pytest.raises(FatbinError, match="pass wrapper->data"):
        parse_fatbin(wrapper)
    with pytest.raises(FatbinError, match=f"bad fatbin magic .* at offset {len(good)}"):
        parse_fatbin(good + b"\0" * 16)


@pytest.mark.parametrize("cut, message", [
    (0, "container header at offset 0 needs 16 bytes, only 0"),
    (10, "needs 16 bytes, only 10"),
    (40, "truncated fatbinary: container at offset 0 holds"),
])
def test_truncated(cut, message):
    data = _container(_entry(PTX))
    with pytest.raises(FatbinError, match=message):
        parse_fatbin(data[:cut])


def test_entry_larger_than_its_container():
    entry = bytearray(_entry(PTX))
    struct.pack_into("<Q", entry, 8, 1 << 20)
    with pytest.raises(FatbinError, match="entry at offset 16 holds 1048576 bytes"):
        parse_fatbin(_container(bytes(entry)))


def test_empty_container_and_unknown_kind():
    assert parse_fatbin(_container()).entries == ()
    f = parse_fatbin(_container(_entry(b"\1\2\3", kind=8), _entry(PTX, header_size=80)))
    assert [e.kind for e in f.entries] == ["ltoir", "ptx"]
    assert f.kernels()["empty"].params == ()


def test_not_an_elf_file(tmp_path):
    path = tmp_path / "text"
    path.write_text("hello")
    with pytest.raises(FatbinError, match="not an ELF file"):
        fatbins_in_elf(path)
    assert fatbins_in_elf(sys.executable) == []  # no device code


# ---------------------------------------------------------------- initializers, resources

@pytest.mark.parametrize("variant", WITH_CUBIN)
def test_variable_initial_values_from_the_cubin(parsed, variant):
    variables = parsed[variant].variables()
    assert variables["initd"].initial == struct.pack("<i", 5)  # __device__ int initd = 5;
    assert variables["cvar"].initial == bytes(16)               # __constant__, no initializer
    assert variables["gvar"].initial == b""                     # .nv.global: zero-filled, no data


def _ptxas_report(tmp_path: Path, arch: str) -> dict[str, dict[str, int]]:
    """What `ptxas -v` says each kernel uses, as the reference."""
    cmd = [NVCC, "-cudart", "shared", f"-arch={arch}", "-Xptxas", "-v", "-o", str(tmp_path / "v"), str(SOURCE)]
    stderr = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stderr
    report, kernel = {}, None
    for line in stderr.splitlines():
        if "Compiling entry function" in line:
            kernel = line.split("'")[1]
            report[kernel] = {"registers": 0, "shared": 0, "stack": 0}
        elif kernel and "Used" in line:
            report[kernel]["registers"] = int(line.split("Used ")[1].split(" registers")[0])
            if "bytes smem" in line:
                report[kernel]["shared"] = int(line.split(" bytes smem")[0].rsplit(" ", 1)[-1])
        elif kernel and "bytes stack frame" in line:
            report[kernel]["stack"] = int(line.split(" bytes stack frame")[0].strip())
    return report


def test_kernel_resources_match_ptxas(tmp_path):
    if NVCC is None:
        pytest.skip("nvcc not found")
    expected = _ptxas_report(tmp_path, "sm_80")
    found = parse_fatbin(b"".join(fatbins_in_elf(tmp_path / "v"))).resources(80)
    assert set(found) == set(expected)
    for name, usage in expected.items():
        r = found[name]
        assert (r.registers, r.shared_bytes, r.local_bytes) == (usage["registers"], usage["shared"], usage["stack"]), name
        assert r.arch == 80 and r.const_bytes == 16  # cvar: 16 bytes
    assert found["_Z5tiledPfi"].max_threads == 128 and found["_Z5tiledPfi"].shared_bytes == 512
    assert found["_Z5tiledPfi"].local_bytes > 0
    assert all(r.max_threads is None for name, r in found.items() if name != "_Z5tiledPfi")
