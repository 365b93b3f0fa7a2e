"""Helpers shared by the multi-GPU tests (test_multi.py, test_netns.py)."""
from __future__ import annotations

import json
import re
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor

from conftest import CUDA_SOURCES, RCUDA, Server, start_server

MULTI_KERNELS = CUDA_SOURCES / "multi_kernels.py"

_DEVICE_LINE = re.compile(r"device (\d+): (.*?) \| mem (\d+) \| cc (\S+) \| pci (\d+) \| uuid (\w+) \| "
                          r"current (-?\d+) \| ptr (\S+) \((\w+)\)")


def start_sim_servers(*device_counts: int, extra: tuple = ()) -> list[Server]:
    """Sim servers with the multi-GPU kernels, one per entry (its number of
    GPUs), started in parallel on free loopback ports."""
    def start(count: int) -> Server:
        return start_server("--backend", "sim", "--devices", str(count), "--kernels", str(MULTI_KERNELS), *extra)

    with ThreadPoolExecutor(len(device_counts)) as pool:
        futures = [pool.submit(start, count) for count in device_counts]
    servers, errors = [], []
    for future in futures:
        try:
            servers.append(future.result())
        except Exception as exc:  # noqa: BLE001 - stop the others, then report
            errors.append(exc)
    if errors:
        stop_all(servers)
        raise errors[0]
    return servers


def stop_all(servers: list[Server]) -> None:
    for server in servers:
        server.stop()


def addresses(servers) -> str:
    return ",".join(s.address if isinstance(s, Server) else s for s in servers)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listed_devices(output: str) -> list[dict]:
    """The device lines printed by tests/cuda/device_list.cu."""
    devices = []
    for match in _DEVICE_LINE.finditer(output):
        devices.append({"index": int(match[1]), "name": match[2], "memory": int(match[3]), "cc": match[4],
                        "uuid8": match[6], "current": int(match[7]), "ptr": int(match[8], 16),
                        "malloc": match[9]})
    return devices


def listed_count(output: str) -> tuple[int, str]:
    match = re.search(r"^count (-?\d+) \((\w+)\)", output, re.M)
    assert match, output
    return int(match[1]), match[2]


def rcuda_devices(servers, *args: str, env: dict | None = None, timeout: float = 60,
                  prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = [*(prefix or []), *RCUDA, "devices", "--servers", addresses(servers), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def devices_json(servers, env: dict | None = None, prefix: list[str] | None = None) -> dict:
    result = rcuda_devices(servers, "--json", env=env, prefix=prefix)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]
