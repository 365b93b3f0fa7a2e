"""`rcuda devices`: the GPUs a program would see, GPU0..N, and where they are.

Asks every server in RCUDA_SERVERS (or --servers) for its GPUs with the
daemon's `info` request, all at once and each bounded by the timeout, numbers
them in server order and applies CUDA_VISIBLE_DEVICES exactly as the client
does (rcuda.config.select_visible).  A server that does not answer is listed
as unreachable; then GPU numbers are not shown, because a program started now
would fail to initialise (cudaErrorDevicesUnavailable) rather than number
the remaining GPUs differently.
"""
from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field

from rcuda import protocol
from rcuda.config import ConfigError, ServerAddress, select_visible
from rcuda.errors import RcudaError


@dataclass
class ServerInfo:
    address: str
    reachable: bool
    error: str = ""
    backend: str = ""
    host: str = ""
    version: str = ""
    transport: str = ""  # how a session's calls travel (and their cipher)
    devices: list = field(default_factory=list)  # cudaDeviceProp-like dicts


@dataclass
class DeviceRow:
    index: int | None  # GPU<index> as a program sees it; None when numbering is unknown
    server: str
    server_index: int
    name: str
    memory: int
    compute_capability: str
    backend: str
    uuid: str


def query(servers: list[ServerAddress], timeout: float, keys=None) -> list[ServerInfo]:
    """`info` from every server, in parallel; never waits longer than about
    `timeout`.  `keys`: the client's CURVE keys (rcuda.auth.ClientKeys), for
    servers with --auth."""
    import zmq

    from rcuda.client.transport.session import request_once

    context = zmq.Context.instance()
    results: list[ServerInfo | None] = [None] * len(servers)

    def ask(i: int, address: ServerAddress) -> None:
        try:
            curve = keys.for_server(address) if keys is not None else None
            reply = request_once(context, address, {"op": "info", "version": protocol.PROTOCOL_VERSION}, timeout,
                                 curve)
            server = reply.get("server") or {}
            results[i] = ServerInfo(str(address), True, backend=str(reply.get("backend", "")),
                                    host=str(server.get("host", "")), version=str(server.get("version", "")),
                                    transport=str(server.get("transport", "")),
                                    devices=list(reply.get("devices") or []))
        except (RcudaError, ConfigError) as exc:
            results[i] = ServerInfo(str(address), False, error=str(exc))

    threads = [threading.Thread(target=ask, args=(i, a), daemon=True) for i, a in enumerate(servers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 5)
    return [r or ServerInfo(str(a), False, error="no answer") for r, a in zip(results, servers)]


def table(infos: list[ServerInfo], visible: str | None) -> list[DeviceRow]:
    """The GPUs in the order a program numbers them."""
    rows = []
    for info in infos:
        for local_index, props in enumerate(info.devices):
            rows.append(DeviceRow(
                index=None, server=info.address, server_index=local_index, name=str(props.get("name", "?")),
                memory=int(props.get("totalGlobalMem", 0)),
                compute_capability=f"{props.get('major', '?')}.{props.get('minor', '?')}",
                backend=info.backend, uuid=f"GPU-{props['uuid_str']}" if props.get("uuid_str") else ""))
    if not all(info.reachable for info in infos):
        return rows
    chosen = select_visible(rows, visible, uuid_of=lambda row: row.uuid)
    for index, row in enumerate(chosen):
        row.index = index
    return chosen


def render_text(infos: list[ServerInfo], rows: list[DeviceRow], visible: str | None) -> str:
    header = ("GPU", "SERVER", "SERVER GPU", "NAME", "MEMORY", "CC", "BACKEND", "UUID")
    cells = [header] + [("-" if r.index is None else str(r.index), r.server, str(r.server_index), r.name,
                         _gib(r.memory), r.compute_capability, r.backend, r.uuid) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    unreachable = [i for i in infos if not i.reachable]
    for info in unreachable:
        lines.append(f"{info.address}: unreachable: {info.error}")
    if unreachable:
        lines.append(f"{len(unreachable)} of {len(infos)} server(s) unreachable: a program started now fails "
                     f"with cudaErrorDevicesUnavailable, so GPU numbers are not shown")
    elif visible is not None:
        total = sum(len(i.devices) for i in infos)
        lines.append(f"CUDA_VISIBLE_DEVICES={visible}: {len(rows)} of {total} GPU(s) visible")
    if not rows and not unreachable:
        lines.append("no GPUs")
    lines += [f"{info.address}: {info.transport}" for info in infos if info.reachable and info.transport]
    return "\n".join(lines)


def render_json(infos: list[ServerInfo], rows: list[DeviceRow], visible: str | None) -> str:
    servers = [{k: v for k, v in asdict(i).items() if k != "devices"} | {"devices": len(i.devices)} for i in infos]
    return json.dumps({"devices": [asdict(r) for r in rows], "servers": servers,
                       "cuda_visible_devices": visible}, indent=2)


def _gib(size: int) -> str:
    return f"{size / (1 << 30):.1f} GiB"
