"""Stream attributes, the persisting L2 cache, launch attributes:
tests/cuda/stream_attributes.cu (simpleAttributes' flow, then every stream
attribute read back, copied, refused) run unmodified through rcuda against a
sim server, built with the legacy default stream and with
`--default-stream per-thread` (the `_ptsz` entry points)."""
from __future__ import annotations

import pytest

from conftest import CUDA_SOURCES, requires_nvcc, run_program
from rcuda.server.backends.sim import sim_properties

pytestmark = requires_nvcc

KERNELS = str(CUDA_SOURCES / "attribute_kernels.py")


@pytest.mark.parametrize("flags", [(), ("--default-stream", "per-thread")], ids=["legacy", "per-thread"])
def test_stream_attributes(compile_cuda, server_factory, flags):
    server = server_factory("--backend", "sim", "--kernels", KERNELS)
    result = run_program(compile_cuda("stream_attributes.cu", *flags), server)
    out = result.stdout
    assert result.returncode == 0 and "PASSED stream_attributes" in out, out + result.stderr
    for section in ("limit", "window", "attributes", "copy", "default stream", "launch attributes", "errors"):
        assert f"ok {section}" in out
    # The GPU's own cache sizes (the sim's, like an A100's); the limit is clamped to them.
    props = sim_properties(0, 16 << 30)
    assert (f"persistingL2CacheMaxSize {props['persistingL2CacheMaxSize']} "
            f"accessPolicyMaxWindowSize {props['accessPolicyMaxWindowSize']}") in out
    assert f"limit after asking for twice the maximum: {props['persistingL2CacheMaxSize']}\n" in out
    # A new stream: no window, automatic synchronisation, domain 0 (remote: 1).
    assert "new window: base null num_bytes 0 hitRatio 0.000 hitProp 0 missProp 0" in out
    assert "new others: syncPolicy 1 priority 0 getPriority 0 domain 0 map 0 1" in out
    # What was set is what is read back, by the stream and by its copy.
    window = "window: base same num_bytes 262144 hitRatio 0.600 hitProp 2 missProp 1"
    for what in ("set", "copied", "still copied", "after refusals"):
        assert f"{what} {window}" in out
    assert "reset window: base null num_bytes 0 hitRatio 0.000 hitProp 0 missProp 0" in out
    greatest = props["greatestStreamPriority"]
    assert f"priority range: least {props['leastStreamPriority']} greatest {greatest}" in out
    others = f"others: syncPolicy 3 priority {greatest} getPriority {greatest} domain 1 map 1 0"
    for what in ("set", "copied", "after refusals"):
        assert f"{what} {others}" in out
