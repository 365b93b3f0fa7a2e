"""Configuration: which servers, how long to wait, how much to log.

Each setting comes from, in rising precedence: its default, the config file
(`$RCUDA_CONFIG`, else `~/.config/rcuda/config.toml`), an environment
variable, a command-line flag.  `rcuda config` shows every effective value
and where it came from.  The client inside a program reads the file and the
environment; `rcuda run` turns its flags into the same variables.

    # ~/.config/rcuda/config.toml
    [client]
    servers = ["gpu1:7777", "gpu2:7777"]    # or "gpu1:7777,gpu2:7777"
    timeout = 10                            # seconds a server may stay silent
    log = "info"
    stats = true                            # print a call summary at exit
    key = "~/.config/rcuda/keys/client.key_secret"   # CURVE key pair (rcuda keys); RCUDA_KEY
    server_key = ["gpu1:7777=~/keys/gpu1.key", "~/keys"]   # servers' public keys; RCUDA_SERVER_KEY
    spin_us = 300                           # busy-poll for a reply before sleeping; RCUDA_SPIN_US
    link = "lane"                           # or "socket": each GPU's ZeroMQ socket, never its lane; RCUDA_LINK
    managed_on_touch = false                # managed memory comes back where the host touches it; RCUDA_MANAGED_ON_TOUCH
    [server]
    listen = "tcp://127.0.0.1:7777"
    backend = "auto"
    spin_us = 300                           # busy-poll for the next request (--spin-us)
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

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


# ---------------------------------------------------------------- layered settings


@dataclass(frozen=True)
class Setting:
    """One effective value and where it came from: "default", the config
    file's path, an environment variable's name, or a flag."""

    name: str
    value: object
    source: str


def _non_negative_float(value, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if not number >= 0:
        raise ConfigError(f"{name} must not be negative, got {value!r}")
    return number


def parse_bool(text) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"expected a yes/no value, got {text!r}")


def parse_log_level(text) -> str:
    value = str(text).strip().lower()
    if value not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log level must be debug, info, warning or error, got {text!r}")
    return value


def _choice(value, name: str, choices: tuple) -> str:
    text = str(value).strip().lower()
    if text not in choices:
        raise ConfigError(f"{name} must be {' or '.join(choices)}, got {value!r}")
    return text


def _servers(value) -> list[ServerAddress]:
    return parse_servers(",".join(value) if isinstance(value, list) else value)


def _path_list(value) -> list[str]:
    """A TOML list, or comma-separated text (RCUDA_SERVER_KEY): each entry
    PATH or HOST:PORT=PATH (see rcuda/auth.py)."""
    items = value if isinstance(value, list) else str(value).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


def _optional_path(value) -> str | None:
    return str(Path(str(value)).expanduser()) if value not in (None, "") else None


@dataclass(frozen=True)
class Spec:
    default: object
    parse: Callable
    env: str | None = None


#: [client]: read inside the program (and by rcuda run/devices/smi).
CLIENT_SPECS = {
    "servers": Spec([], _servers, "RCUDA_SERVERS"),
    "timeout": Spec(DEFAULT_TIMEOUT, lambda v: parse_timeout(str(v)), "RCUDA_TIMEOUT"),
    "log": Spec("warning", parse_log_level, "RCUDA_LOG"),
    "stats": Spec(False, parse_bool, "RCUDA_STATS"),
    # How long a call busy-polls for its reply before it sleeps: a wake-up
    # costs tens of microseconds on some machines, spinning costs a CPU.
    "spin_us": Spec(300.0, lambda v: _non_negative_float(v, "RCUDA_SPIN_US"), "RCUDA_SPIN_US"),
    # A GPU's link (docs/design.md, Transport): its TCP lane where the server
    # offers one and it connects (sealed on --auth servers), else its ZeroMQ
    # socket; "socket" always takes the socket.
    "link": Spec("lane", lambda v: _choice(v, "link", ("lane", "socket")), "RCUDA_LINK"),
    # Managed memory comes back where the host touches it after a
    # synchronisation, not all of it at each (docs/design.md, Managed memory).
    "managed_on_touch": Spec(False, parse_bool, "RCUDA_MANAGED_ON_TOUCH"),
    "key": Spec(None, _optional_path, "RCUDA_KEY"),
    "server_key": Spec([], _path_list, "RCUDA_SERVER_KEY"),
    "visible_devices": Spec(None, lambda v: None if v is None else str(v), "CUDA_VISIBLE_DEVICES"),
}

#: [server]: read by `rcuda server`; flags override the file.
SERVER_SPECS = {
    "listen": Spec("tcp://127.0.0.1:7777", str),
    "backend": Spec("auto", str),
    "devices": Spec(None, lambda v: None if v is None else int(v)),
    "kernels": Spec([], lambda v: [str(Path(str(k)).expanduser()) for k in (v if isinstance(v, list) else [v])]),
    "memory_limit": Spec(None, lambda v: None if v is None else int(v)),
    "session_timeout": Spec(30.0, float),
    "auth": Spec(None, _optional_path),
    "insecure": Spec(False, parse_bool),
    "peer_buffer": Spec(None, lambda v: None if v is None else int(v)),
    "max_sessions": Spec(None, lambda v: None if v is None else int(v)),
    "spin_us": Spec(300.0, lambda v: _non_negative_float(v, "spin_us")),
    "log_level": Spec(None, lambda v: None if v is None else parse_log_level(v), "RCUDA_LOG"),
    "metrics_port": Spec(None, lambda v: None if v is None else int(v)),
}
SECTIONS = {"client": CLIENT_SPECS, "server": SERVER_SPECS}


def config_file(environ=os.environ) -> Path:
    """Where the config file is looked for (it need not exist)."""
    if environ.get("RCUDA_CONFIG"):
        return Path(environ["RCUDA_CONFIG"]).expanduser()
    base = Path(environ.get("XDG_CONFIG_HOME") or Path(environ.get("HOME", "~")) / ".config").expanduser()
    return base / "rcuda" / "config.toml"


def read_config_file(path: Path, explicit: bool = False) -> dict:
    """The file's sections; {} when it does not exist (an error when the
    user named it with RCUDA_CONFIG)."""
    try:
        with open(path, "rb") as f:
            import tomllib  # only when there is a file to read: every program's start-up otherwise
            try:
                data = tomllib.load(f)
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"RCUDA_CONFIG={path}: no such file") from None
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    for section, values in data.items():
        specs = SECTIONS.get(section)
        if specs is None or not isinstance(values, dict):
            raise ConfigError(f"{path}: unknown section [{section}] (expected [client] or [server])")
        unknown = sorted(set(values) - set(specs))
        if unknown:
            raise ConfigError(f"{path}: unknown setting(s) in [{section}]: {', '.join(unknown)} "
                              f"(known: {', '.join(specs)})")
    return data


def resolve(section: str, environ=os.environ, flags: dict | None = None) -> dict[str, Setting]:
    """Every setting of a section with its effective value and source."""
    specs = SECTIONS[section]
    path = config_file(environ)
    from_file = read_config_file(path, explicit=bool(environ.get("RCUDA_CONFIG"))).get(section, {})
    settings = {}
    for name, spec in specs.items():
        value, source = spec.default, "default"
        if name in from_file:
            value, source = from_file[name], str(path)
        if spec.env and environ.get(spec.env) is not None:
            value, source = environ[spec.env], spec.env
        if flags and flags.get(name) is not None:
            value, source = flags[name], f"--{name.replace('_', '-')}"
        try:
            parsed = None if value is None else spec.parse(value)
        except (ConfigError, ValueError, TypeError) as exc:
            raise ConfigError(f"{section} setting {name!r} from {source}: {exc}") from None
        settings[name] = Setting(name, parsed, source)
    return settings


@dataclass(frozen=True)
class ClientConfig:
    servers: list[ServerAddress] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT
    visible_devices: str | None = None
    log: str = "warning"
    stats: bool = False
    spin_us: float = 300.0
    link: str = "lane"
    managed_on_touch: bool = False
    key: str | None = None
    server_key: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, environ=os.environ) -> "ClientConfig":
        values = {name: setting.value for name, setting in resolve("client", environ).items()}
        return cls(**values)

