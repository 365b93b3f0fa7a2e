"""A fatbinary larger than one frame (3 MiB of initialised __device__ data)
loads on the lane, on a --auth server's sealed lane (many records) and on
its ZeroMQ link, where bulk bytes travel in protocol.CHUNK_SIZE frames (the
server once refused a module that came in more than one)."""
from __future__ import annotations

import pytest

from program_paths import run_on_sim


@pytest.mark.parametrize("link", ["lane", "sealed-lane", "zeromq"])
def test_loads_and_runs(compile_cuda, tmp_path, link):
    result = run_on_sim(compile_cuda, "big_module.cu", "big_module_kernels.py", devices=1,
                        auth_root=tmp_path if link != "lane" else None,
                        env={"RCUDA_LINK": "lane"} if link == "sealed-lane" else None)
    assert result.returncode == 0 and "ok big_module" in result.stdout, result.stdout + result.stderr[-3000:]
