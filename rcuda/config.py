"""Configuration: which servers, how long to wait, how much to log.

Values come from the environment (RCUDA_SERVERS, RCUDA_TIMEOUT, RCUDA_LOG,
CUDA_VISIBLE_DEVICES); command-line flags of `rcuda run` are turned into the
same variables before the program starts, so the client reads one place.
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field

DEFAULT_PORT = 7777
DEFAULT_TIMEOUT = 10.0  # seconds; bounds every wait for a server


class ConfigError(ValueError):
    """A configuration value that cannot be understood."""


@dataclass(frozen=True)
class ServerAddress:
    """One `rcuda server`, as the user wrote it and as ZeroMQ wants it."""

    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"tcp://{self._bracketed}:{self.port}"

    def endpoint_for_port(self, port: int) -> str:
        """The same host at another port (a session worker's socket)."""
        return f"tcp://{self._bracketed}:{port}"

    @property
    def _bracketed(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    def __str__(self) -> str:
        return f"{self._bracketed}:{self.port}"


_SERVER_RE = re.compile(r"^(?:tcp://)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:/\[\]]+))(?::(?P<port>\d+))?/?$")


def parse_server(text: str, allow_any_port: bool = False) -> ServerAddress:
    """`host`, `host:port`, `tcp://host:port` or `[v6addr]:port`.  Port 0
    ("any free port") only where `allow_any_port` (a listen address)."""
    match = _SERVER_RE.match(text.strip())
    if not match:
        raise ConfigError(f"cannot read server address {text!r}: expected HOST:PORT or tcp://HOST:PORT")
    port = int(match["port"]) if match["port"] else DEFAULT_PORT
    if not (0 if allow_any_port else 1) <= port < 65536:
        raise ConfigError(f"port out of range in server address {text!r}")
    return ServerAddress(match["v6"] or match["host"], port)


def parse_servers(text: str | None) -> list[ServerAddress]:
    """A comma-separated list of servers, in the order their GPUs are numbered."""
    return [parse_server(part) for part in (text or "").split(",") if part.strip()]


def parse_timeout(text: str | None) -> float:
    if text is None or not text.strip():
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"RCUDA_TIMEOUT must be a number of seconds, got {text!r}") from None
    if value <= 0:
        raise ConfigError(f"RCUDA_TIMEOUT must be positive, got {text!r}")
    return value


def select_visible(devices: list, visible: str | None, uuid_of=lambda d: "") -> list:
    """Apply CUDA_VISIBLE_DEVICES the way CUDA does: entries are device indices
    (or `GPU-<uuid prefix>`), in the order given; the list ends at the first
    entry that is invalid, out of range or repeated.  Unset means all."""
    if visible is None:
        return list(devices)
    chosen: list = []
    for entry in visible.split(","):
        entry = entry.strip()
        index = None
        if re.fullmatch(r"\d+", entry):
            index = int(entry)
        elif entry.startswith("GPU-"):
            matches = [i for i, d in enumerate(devices) if uuid_of(d).startswith(entry)]
            index = matches[0] if len(matches) == 1 else None
        if index is None or index >= len(devices) or devices[index] in chosen:
            break
        chosen.append(devices[index])
    return chosen


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ClientConfig:
    servers: list[ServerAddress] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT
    visible_devices: str | None = None

    @classmethod
    def from_environment(cls, environ=os.environ) -> "ClientConfig":
        return cls(
            servers=parse_servers(environ.get("RCUDA_SERVERS")),
            timeout=parse_timeout(environ.get("RCUDA_TIMEOUT")),
            visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
        )
