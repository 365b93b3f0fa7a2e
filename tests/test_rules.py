"""The domain rules kept once in rcuda/ (launch limits, cudaMemcpyDefault's
kind): what they decide, the errors Python raises from them, and that the C
native/gen_rules.py generates from them decides the same (a small C program
built with the generated headers, fed the same cases)."""
from __future__ import annotations

import itertools
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from rcuda import copy_kinds, launch_rules
from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError
from rcuda.server.backends.base import check_launch_configuration

REPO = Path(__file__).resolve().parent.parent
KINDS = ENUMS["cudaMemcpyKind"]

PROPS = {"maxThreadsDim": [1024, 1024, 64], "maxGridSize": [2**31 - 1, 65535, 65535], "maxThreadsPerBlock": 1024,
         "sharedMemPerBlock": 48 << 10, "sharedMemPerBlockOptin": 99 << 10}
DEVICE = launch_rules.device_limits(PROPS)


def device_error(grid, block, shared_mem=0, limits=DEVICE) -> CudaError | None:
    try:
        launch_rules.check_device(limits, grid, block, shared_mem, where="launch on GPU0: ")
    except CudaError as exc:
        return exc
    return None


# ------------------------------------------------------------------ launch limits


def test_a_launch_within_the_limits_passes():
    assert device_error((2**31 - 1, 65535, 65535), (1024, 1, 1), 99 << 10) is None
    assert device_error((1, 1, 1), (16, 16, 4)) is None


@pytest.mark.parametrize("grid, block, shared_mem, words", [
    ((1, 0, 1), (32, 1, 1), 0, "grid (1, 0, 1) / block (32, 1, 1) has a zero dimension"),
    ((1, 1, 1), (1, 1, 0), 0, "grid (1, 1, 1) / block (1, 1, 0) has a zero dimension"),
    ((1, 1, 1), (1, 1, 65), 0, "block (1, 1, 65) exceeds maxThreadsDim (1024, 1024, 64)"),
    ((1, 1, 1), (4096, 1, 1), 0, "exceeds maxThreadsDim"),
    ((1, 1, 1), (64, 32, 1), 0, "block (64, 32, 1) has 2048 threads, more than maxThreadsPerBlock 1024"),
    ((1, 65536, 1), (32, 1, 1), 0, "grid (1, 65536, 1) exceeds maxGridSize (2147483647, 65535, 65535)"),
    ((1, 1, 1), (32, 1, 1), (99 << 10) + 1,
     "101377 bytes of dynamic shared memory is more than the 101376 a block may use (sharedMemPerBlockOptin)"),
])
def test_each_device_limit_is_named(grid, block, shared_mem, words):
    error = device_error(grid, block, shared_mem)
    assert error is not None and error.status == cudaError.cudaErrorInvalidConfiguration
    assert str(error).startswith("launch on GPU0: ") and words in str(error)


def test_the_first_rule_broken_is_the_one_reported():
    error = device_error((0, 1, 1), (4096, 1, 1), 1 << 30)
    assert "zero dimension" in str(error)


def test_device_limits_from_properties():
    no_opt_in = dict(PROPS, sharedMemPerBlockOptin=0)
    assert launch_rules.device_limits(no_opt_in)["sharedMemPerBlockOptin"] == 48 << 10
    assert device_error((1, 1, 1), (1, 1, 1), (48 << 10) + 1, launch_rules.device_limits(no_opt_in)) is not None
    assert launch_rules.device_limits({}) == launch_rules.DEVICE_LIMITS  # CUDA's values when none are known


def test_the_server_checks_the_same_rules():
    with pytest.raises(CudaError) as raised:
        check_launch_configuration(PROPS, (1, 1, 1), (64, 32, 1), 0)
    assert raised.value.status == cudaError.cudaErrorInvalidConfiguration
    assert str(raised.value) == "block (64, 32, 1) has 2048 threads, more than maxThreadsPerBlock 1024"
    check_launch_configuration(PROPS, (8, 8, 1), (32, 32, 1), 1024)


def test_kernel_limits():
    limits = launch_rules.kernel_limits({"maxThreadsPerBlock": 128, "maxDynamicSharedSizeBytes": 48 << 10,
                                         "numRegs": 40})
    assert limits == {"maxThreadsPerBlock": 128, "maxDynamicSharedSizeBytes": 48 << 10}
    launch_rules.check_kernel(limits, "bounded", (128, 1, 1), 48 << 10)
    with pytest.raises(CudaError) as raised:
        launch_rules.check_kernel(limits, "bounded", (256, 1, 1), 0, where="launch on GPU0: ")
    assert raised.value.status == cudaError.cudaErrorLaunchOutOfResources
    assert str(raised.value).startswith("launch on GPU0: 256 threads per block, kernel bounded allows 128")
    with pytest.raises(CudaError) as raised:
        launch_rules.check_kernel(limits, "bounded", (32, 1, 1), 64 << 10)
    assert raised.value.status == cudaError.cudaErrorInvalidValue
    assert "65536 bytes of dynamic shared memory, kernel bounded allows 49152" in str(raised.value)
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize" in str(raised.value)


def test_a_kernel_limit_not_known_is_not_checked():
    launch_rules.check_kernel(launch_rules.kernel_limits({}), "k", (1024, 1, 1), 1 << 20)
    launch_rules.check_kernel(launch_rules.kernel_limits({"maxThreadsPerBlock": 1024}), "k", (1024, 1, 1), 1 << 20)


def test_every_rule_names_a_known_value_and_limit_and_error():
    for rule in launch_rules.RULES:
        assert rule.value in launch_rules.VALUES
        assert rule.scope in ("device", "kernel")
        if isinstance(rule.bound, str):
            limits = launch_rules.DEVICE_LIMITS if rule.scope == "device" else launch_rules.KERNEL_LIMITS
            assert rule.bound in limits
        assert rule.error in cudaError.__members__
    assert len({rule.name for rule in launch_rules.RULES}) == len(launch_rules.RULES)


# ------------------------------------------------------------------ copy kinds


def test_default_copies_take_their_kind_from_where_the_sides_are():
    expected = {(False, False): "HostToHost", (True, False): "HostToDevice", (False, True): "DeviceToHost",
                (True, True): "DeviceToDevice"}
    for (dst, src), kind in expected.items():
        assert copy_kinds.checked_kind(KINDS["cudaMemcpyDefault"], dst, src) == KINDS[f"cudaMemcpy{kind}"]


def test_explicit_kinds_are_kept_and_others_refused():
    for name in ("HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice"):
        for dst, src in itertools.product((False, True), repeat=2):
            assert copy_kinds.checked_kind(KINDS[f"cudaMemcpy{name}"], dst, src) == KINDS[f"cudaMemcpy{name}"]
    with pytest.raises(CudaError) as raised:
        copy_kinds.checked_kind(42, True, False)
    assert raised.value.status == cudaError.cudaErrorInvalidMemcpyDirection
    assert copy_kinds.copy_kind(42, True, False) == 42  # C keeps it too; Python then refuses it


# ------------------------------------------------------------------ the generated C agrees

HARNESS = r"""
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include "cudart_types.h"
#include "launch_rules.h"
#include "copy_kind.h"
#include "error_strings.h"

static const char *or_null(const char *text) { return text ? text : "(null)"; }

int main(void)
{
    unsigned long long g[3], b[3], shm, dims[3], grid[3], threads, shared, kmax, kshared;
    int kind, dst, src;
    char what;
    while (scanf(" %c", &what) == 1) {
        if (what == 'L') {
            if (scanf("%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
                      &g[0], &g[1], &g[2], &b[0], &b[1], &b[2], &shm, &dims[0], &dims[1], &dims[2], &grid[0],
                      &grid[1], &grid[2], &threads, &shared, &kmax, &kshared) != 17)
                return 2;
            dim3 gd = {(unsigned)g[0], (unsigned)g[1], (unsigned)g[2]}, bd = {(unsigned)b[0], (unsigned)b[1], (unsigned)b[2]};
            uint32_t max_block[3] = {(uint32_t)dims[0], (uint32_t)dims[1], (uint32_t)dims[2]};
            uint32_t max_grid[3] = {(uint32_t)grid[0], (uint32_t)grid[1], (uint32_t)grid[2]};
            struct launch_device_limits device = {.maxThreadsDim = max_block, .maxGridSize = max_grid,
                                                  .maxThreadsPerBlock = threads, .sharedMemPerBlockOptin = shared};
            struct launch_kernel_limits kernel = {.maxThreadsPerBlock = kmax, .maxDynamicSharedSizeBytes = kshared};
            printf("%d %d\n", launch_device_rule_broken(gd, bd, shm, &device),
                   launch_kernel_rule_broken(gd, bd, shm, &kernel));
        } else if (what == 'E') {
            int code;
            if (scanf("%d", &code) != 1)
                return 2;
            printf("%s|%s|%s|%s\n", cuda_error_name(code), cuda_error_string(code), or_null(cu_error_name(code)),
                   or_null(cu_error_string(code)));
        } else if (what == 'K') {
            if (scanf("%d %d %d", &kind, &dst, &src) != 3)
                return 2;
            printf("%d\n", (int)inferred_copy_kind((enum cudaMemcpyKind)kind, dst, src));
        } else
            return 2;
    }
    return 0;
}
"""

DIMENSIONS = [0, 1, 2, 32, 63, 64, 65, 1023, 1024, 1025, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1]
SIZES = [0, 1, (48 << 10) - 1, 48 << 10, (48 << 10) + 1, 99 << 10, 2**32 - 1, 2**40]


def rule_number(scope, limits, grid, block, shared_mem) -> int:
    rule = launch_rules.first_broken(scope, limits, grid, block, shared_mem)
    return 0 if rule is None else launch_rules.RULES.index(rule) + 1


def launch_cases(count: int):
    chance = random.Random(20240607)
    for _ in range(count):
        grid = tuple(chance.choice(DIMENSIONS) for _ in range(3))
        block = tuple(chance.choice(DIMENSIONS[:10]) if chance.random() < 0.9 else chance.choice(DIMENSIONS)
                      for _ in range(3))
        device = {"maxThreadsDim": tuple(chance.choice([64, 1024, 2**32 - 1]) for _ in range(3)),
                  "maxGridSize": tuple(chance.choice([65535, 2**31 - 1, 2**32 - 1]) for _ in range(3)),
                  "maxThreadsPerBlock": chance.choice([256, 1024, 2**32 - 1]),
                  "sharedMemPerBlockOptin": chance.choice(SIZES[1:7])}
        kernel = {"maxThreadsPerBlock": chance.choice([0, 128, 1024]),
                  "maxDynamicSharedSizeBytes": chance.choice(SIZES[:7])}
        yield grid, block, chance.choice(SIZES), device, kernel


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("rules")
    (folder / "harness.c").write_text(HARNESS)
    subprocess.run([compiler, "-std=gnu11", "-Wall", "-Werror", "-I", str(REPO / "native" / "generated"),
                    str(folder / "harness.c"), "-o", str(folder / "harness")], check=True)

    def run(lines: list[str]) -> list[str]:
        result = subprocess.run([str(folder / "harness")], input="\n".join(lines) + "\n", capture_output=True,
                                text=True, check=True)
        return result.stdout.splitlines()
    return run


def test_the_generated_launch_check_agrees_with_python(harness):
    cases = list(launch_cases(4000))
    lines = [" ".join(map(str, ["L", *grid, *block, shared, *device["maxThreadsDim"], *device["maxGridSize"],
                                device["maxThreadsPerBlock"], device["sharedMemPerBlockOptin"],
                                kernel["maxThreadsPerBlock"], kernel["maxDynamicSharedSizeBytes"]]))
             for grid, block, shared, device, kernel in cases]
    expected = [f"{rule_number('device', device, grid, block, shared)} {rule_number('kernel', kernel, grid, block, shared)}"
                for grid, block, shared, device, kernel in cases]
    got = harness(lines)
    assert got == expected
    assert {line.split()[0] for line in got} == {str(n) for n in range(7)}, "every device rule was exercised"
    assert {line.split()[1] for line in got} == {"0", "7", "8"}, "every kernel rule was exercised"


def test_the_generated_copy_kind_agrees_with_python(harness):
    cases = [(kind, dst, src) for kind in [*KINDS.values(), 42] for dst in (0, 1) for src in (0, 1)]
    got = harness([f"K {kind} {dst} {src}" for kind, dst, src in cases])
    assert got == [str(copy_kinds.copy_kind(kind, bool(dst), bool(src))) for kind, dst, src in cases]


def test_the_generated_error_strings_agree_with_python(harness):
    """cudaGetErrorName/String (answered in C) and cuGetErrorName/String
    (in C once the client has closed) say what the client's Python says."""
    from rcuda import driver_errors, errors
    from rcuda._generated.cuda_driver_errors import ERRORS as DRIVER_ERRORS
    from rcuda._generated.cuda_errors import ERRORS
    codes = sorted({value for value, *_ in ERRORS} | {value for value, *_ in DRIVER_ERRORS} | {-1, 12345})
    got = harness([f"E {code}" for code in codes])
    assert got == [f"{errors.error_name(code)}|{errors.error_string(code)}|{driver_errors.error_name(code) or '(null)'}|"
                   f"{driver_errors.error_string(code) or '(null)'}" for code in codes]

