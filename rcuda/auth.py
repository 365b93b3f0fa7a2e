"""CURVE authentication and encryption (CurveZMQ) for servers and clients.

Keys are ZeroMQ certificate files, written and read with zmq.auth:
`NAME.key` holds a public key, `NAME.key_secret` the key pair (mode 0600).
`rcuda keys` creates them.

A server run with `--auth DIR` uses

    DIR/server.key_secret   its own key pair (clients are given DIR/server.key)
    DIR/clients/*.key       the client keys it accepts; the folder is read again
                            whenever it changes, so adding or removing a key
                            needs no restart

and every ZeroMQ socket a client can reach is a CURVE server: the daemon's,
and each session worker's GPU and heartbeat sockets.  Each of those processes
runs its own ZAP handler (zmq.auth.ThreadAuthenticator), which asks
`AllowedKeys` whether a key may connect; an unknown key never gets a byte
through.  The ZAP domain of a socket says what it is for:

    session    daemon, GPU and heartbeat sockets: the keys in clients/
    internal   the daemon's status socket, which the server's own workers
               report to: only the server's key

A client sets its key pair and the server's public key on every socket it
opens (see `ClientKeys`): key from [client] key / RCUDA_KEY, servers' keys
from [client] server_key / RCUDA_SERVER_KEY.

The TCP connections a --auth server takes besides (each GPU's lane, each
worker's peer port) are sealed with keys made from secrets that only the
CURVE-encrypted hello reply carries (rcuda/sealed.py, server/peer.py).
"""
from __future__ import annotations

import logging
import os
import stat
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.utils import z85

from rcuda.config import ConfigError, ServerAddress, config_file
from rcuda.errors import ProtocolError

log = logging.getLogger(__name__)

SERVER_KEY_NAME = "server"
CLIENTS_DIR = "clients"
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"

#: server_key value HOST:PORT=none: that server runs without --auth.
PLAIN = "none"

SESSION_DOMAIN = "session"
INTERNAL_DOMAIN = "internal"

KEY_HELP = "see `rcuda keys --help`"


class KeyFileError(ConfigError):
    """A key file that is missing, unreadable or malformed."""


def default_keys_dir(environ=os.environ) -> Path:
    """Where `rcuda keys` writes by default: next to the config file."""
    return config_file(environ).parent / "keys"


# ---------------------------------------------------------------- key files


def create_key_pair(directory: str | os.PathLike, name: str, force: bool = False) -> tuple[Path, Path]:
    """NAME.key and NAME.key_secret in `directory` (created 0700 if new);
    the secret file is 0600 from the start."""
    directory = Path(directory).expanduser()
    if not name or "/" in name or name.startswith("."):
        raise KeyFileError(f"key name {name!r}: use a plain file name such as 'alice' or 'server'")
    public, secret = directory / f"{name}{PUBLIC_SUFFIX}", directory / f"{name}{SECRET_SUFFIX}"
    if not force and (public.exists() or secret.exists()):
        raise KeyFileError(f"{secret} already exists: pass --force to replace it (clients or servers holding "
                        f"the old public key will then be refused)")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    old_umask = os.umask(0o077)  # zmq.auth writes with the umask: never a readable secret, not even briefly
    try:
        for path in (public, secret):
            path.unlink(missing_ok=True)
        _zmq_auth().create_certificates(str(directory), name)
    finally:
        os.umask(old_umask)
    public.chmod(0o644)
    return public, secret


def _zmq_auth():
    """zmq.auth, imported when keys are used (it costs every program's
    start-up a few milliseconds otherwise)."""
    import zmq.auth
    return zmq.auth


def _check_z85(key: bytes | None, path, what: str) -> bytes:
    if key is None or len(key) != 40:
        raise KeyFileError(f"{path}: no valid CURVE {what} key in it ({KEY_HELP})")
    try:
        z85.decode(key)
    except (ValueError, KeyError):
        raise KeyFileError(f"{path}: the {what} key is not Z85 text ({KEY_HELP})") from None
    return key


def load_public_key(path: str | os.PathLike) -> bytes:
    try:
        public, _ = _zmq_auth().load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read public key {path}: {exc}") from None
    return _check_z85(public, path, "public")


def load_key_pair(path: str | os.PathLike, role: str = "key") -> tuple[bytes, bytes]:
    """(public, secret) from a NAME.key_secret file."""
    path = Path(path).expanduser()
    if path.suffix == PUBLIC_SUFFIX and path.with_suffix(SECRET_SUFFIX).exists():
        path = path.with_suffix(SECRET_SUFFIX)  # the user named the public half
    try:
        public, secret = _zmq_auth().load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read {role} {path}: {exc} ({KEY_HELP})") from None
    if secret is None:
        raise KeyFileError(f"{path} holds only a public key: the {role} must be a {SECRET_SUFFIX} file")
    public, secret = _check_z85(public, path, "public"), _check_z85(secret, path, "secret")
    if zmq.curve_public(secret) != public:
        raise KeyFileError(f"{path}: its public and secret keys do not belong together")
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s can be read by other users (mode %o): chmod 600 it", path, stat.S_IMODE(mode))
    return public, secret


# ---------------------------------------------------------------- client side


@dataclass(frozen=True)
class Curve:
    """What a socket needs to connect to one CURVE server: our key pair and
    the server's public key (all Z85)."""

    public: bytes
    secret: bytes
    server: bytes

    def apply(self, socket: zmq.Socket) -> None:
        """Before connect: the socket becomes a CURVE client."""
        socket.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        socket.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        socket.setsockopt(zmq.CURVE_SERVERKEY, self.server)

    @property
    def options(self) -> dict:
        return {zmq.CURVE_PUBLICKEY: self.public, zmq.CURVE_SECRETKEY: self.secret,
                zmq.CURVE_SERVERKEY: self.server}


def apply(socket: zmq.Socket, curve: Curve | None) -> None:
    if curve is not None:
        curve.apply(socket)


class ClientKeys:
    """The client's key pair and the servers' public keys, from its config.

    `server_key` entries: PATH (a public key for any server) or
    HOST:PORT=PATH (for that server); a PATH that is a folder is searched for
    HOST_PORT.key, then HOST.key, then server.key.  A server-specific entry
    wins over a general one.  With a key but no server_key, the key's own
    folder is searched.  HOST:PORT=none says that server runs without --auth:
    the only way a client with a key talks to one unencrypted."""

    def __init__(self, key: str | None, server_keys: list[str] | None = None):
        self.key_path = key
        self.entries = list(server_keys or [])
        self.pair = load_key_pair(key, "client key (RCUDA_KEY)") if key else None
        if self.entries and self.pair is None:
            raise KeyFileError("server_key (RCUDA_SERVER_KEY) is set but the client has no key pair: set RCUDA_KEY "
                            "(or key in [client]) to your NAME.key_secret, made with `rcuda keys`")
        if self.pair is not None and not self.entries:
            self.entries = [str(Path(key).expanduser().parent)]
        self._cache: dict[str, Curve | None] = {}

    @classmethod
    def from_config(cls, config) -> "ClientKeys":
        """From a ClientConfig (its `key` and `server_key`)."""
        return cls(config.key, config.server_key)

    @property
    def enabled(self) -> bool:
        return self.pair is not None

    def for_server(self, address: ServerAddress) -> Curve | None:
        """The CURVE settings for `address`; None when the client has no key
        (plain connections).  KeyFileError when it has one but no public key
        for this server: never fall back to an unencrypted connection."""
        if self.pair is None:
            return None
        name = str(address)
        if name not in self._cache:
            path = self._find(address)
            if path is None:
                raise KeyFileError(
                    f"no public key for server {address}: the client has a key (RCUDA_KEY), so it connects "
                    f"with authentication only; add {address}=PATH_TO/server.key to RCUDA_SERVER_KEY "
                    f"(server_key in [client]), or put {_file_stem(address)}.key or server.key in "
                    f"{', '.join(e for e in self.entries if '=' not in e) or 'a folder listed there'} "
                    f"({address}=none if that server runs without --auth)")
            self._cache[name] = None if path == PLAIN else Curve(self.pair[0], self.pair[1], load_public_key(path))
        return self._cache[name]

    def _find(self, address: ServerAddress) -> Path | str | None:
        specific = [e.split("=", 1)[1].strip() for e in self.entries
                    if "=" in e and _same_server(e.split("=", 1)[0], address)]
        if any(entry.lower() == PLAIN for entry in specific):
            return PLAIN
        general = [e for e in self.entries if "=" not in e]
        for entry in specific + general:
            path = Path(entry.strip()).expanduser()
            if path.is_dir():
                for stem in (_file_stem(address), address.host.replace(":", "_"), SERVER_KEY_NAME):
                    if (path / f"{stem}{PUBLIC_SUFFIX}").is_file():
                        return path / f"{stem}{PUBLIC_SUFFIX}"
            elif path.is_file():
                return path
            elif entry in specific:
                raise KeyFileError(f"server_key for {address}: {path}: no such file")
        return None


def _file_stem(address: ServerAddress) -> str:
    return f"{address.host.replace(':', '_')}_{address.port}"


def _same_server(text: str, address: ServerAddress) -> bool:
    from rcuda.config import parse_server
    try:
        return parse_server(text) == address
    except ConfigError:
        raise KeyFileError(f"server_key entry {text!r}=...: not a HOST:PORT") from None


# ---------------------------------------------------------------- handshake failures

_HANDSHAKE_FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | \
    zmq.EVENT_HANDSHAKE_FAILED_AUTH


class HandshakeWatch:
    """Watches a connecting socket's handshakes (a ZeroMQ monitor), so that a
    refused key becomes a clear message at once instead of a silent timeout:
    ZeroMQ itself drops a refused connection without telling the sender."""

    EVENTS = _HANDSHAKE_FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED

    def __init__(self, socket: zmq.Socket):
        self._socket = socket
        self.monitor = socket.get_monitor_socket(self.EVENTS)
        self.failure: tuple[int, int] | None = None  # (event, value) of the last failed handshake
        self.succeeded = False

    def read(self) -> tuple[int, int] | None:
        """Take the monitor's pending events; the latest failure, if any."""
        while self.monitor.poll(0):
            event, value = parse_monitor_event(self.monitor.recv_multipart())
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.succeeded = True
            elif event & _HANDSHAKE_FAILED:
                self.failure = (event, value)
        return self.failure

    def close(self) -> None:
        try:
            self._socket.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(linger=0)


def parse_monitor_event(frames: list[bytes]) -> tuple[int, int]:
    """(event, value) of a ZeroMQ monitor message: a 16-bit event and a
    32-bit value, then the endpoint.  (pyzmq's zmq.utils.monitor does the
    same but imports asyncio, 25 ms of every CUDA program's start-up.)"""
    if len(frames) != 2 or len(frames[0]) != 6:
        raise ProtocolError(f"malformed ZeroMQ monitor message: {frames!r:.80}")
    return struct.unpack("=hi", frames[0])


def explain_handshake_failure(failure: tuple[int, int], address, curve: Curve | None) -> str:
    """Why the server at `address` refused us, in words a user can act on.
    (A mechanism mismatch is not always reported as one: the side that
    fails first may just close the connection, seen as "no detail".)"""
    event, value = failure
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (f"authentication failed: rcuda server at {address} does not accept this client's key "
                f"(ZAP status {value}): ask its operator to copy your public key (the .key file next to "
                f"RCUDA_KEY) into the server's --auth DIR/clients/; {KEY_HELP}")
    mismatch = event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
    if curve is None:
        return (f"authentication failed: rcuda server at {address} requires a key (it runs with --auth) and "
                f"this client has none: set RCUDA_KEY to your key pair and RCUDA_SERVER_KEY to the server's "
                f"public key; {KEY_HELP}")
    if mismatch:
        return (f"rcuda server at {address} does not use authentication (it runs without --auth), but this "
                f"client has a key for it: unset RCUDA_KEY / RCUDA_SERVER_KEY, or start the server with --auth")
    return (f"authentication failed: the encrypted handshake with rcuda server at {address} failed: is "
            f"RCUDA_SERVER_KEY that server's public key (its --auth DIR/server.key), and does it run with "
            f"--auth? {KEY_HELP}")


# ---------------------------------------------------------------- server side


class AllowedKeys:
    """The public keys in a folder, read again when its contents change."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._lock = threading.Lock()
        self._signature = None
        self._keys: frozenset[bytes] = frozenset()

    def keys(self) -> frozenset[bytes]:
        with self._lock:
            try:
                entries = sorted((e.name, e.stat().st_mtime_ns, e.stat().st_size)
                                 for e in os.scandir(self.folder) if e.name.endswith(PUBLIC_SUFFIX))
            except OSError as exc:
                log.error("cannot read the allowed client keys in %s: %s", self.folder, exc)
                return frozenset()
            if entries != self._signature:
                keys = set()
                for name, _, _ in entries:
                    try:
                        keys.add(load_public_key(self.folder / name))
                    except KeyFileError as exc:
                        log.warning("ignoring %s", exc)
                self._signature, self._keys = entries, frozenset(keys)
                log.info("%d client key(s) allowed (%s)", len(keys), self.folder)
            return self._keys


class ServerAuth:
    """A --auth server's keys, and the ZAP handler of one process."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory).expanduser().resolve()
        if not self.directory.is_dir():
            raise KeyFileError(f"--auth {directory}: no such folder (make one with `rcuda keys {directory} --server`)")
        secret = self.directory / f"{SERVER_KEY_NAME}{SECRET_SUFFIX}"
        if not secret.exists():
            raise KeyFileError(f"--auth {directory}: no {secret.name} in it: create the server's key pair with "
                            f"`rcuda keys {directory} --server`")
        self.public, self.secret = load_key_pair(secret, "server key")
        clients = self.directory / CLIENTS_DIR
        if not clients.is_dir():
            raise KeyFileError(f"--auth {directory}: no {CLIENTS_DIR}/ folder in it: put the public keys "
                            f"(NAME.key) of the clients to accept there")
        self.clients = AllowedKeys(clients)
        self._authenticator = None
        self._refusals = None

    def start(self, context: zmq.Context) -> None:
        """Check every CURVE connection to `context`'s sockets from now on."""
        from zmq.auth.thread import ThreadAuthenticator

        from rcuda.log import RateLimitedLog
        self._refusals = RateLimitedLog(log)
        authenticator = ThreadAuthenticator(context, log=logging.getLogger("rcuda.auth.zap"))
        authenticator.start()
        for domain in (SESSION_DOMAIN, INTERNAL_DOMAIN):
            authenticator.configure_curve_callback(domain, credentials_provider=self)
        self._authenticator = authenticator

    def stop(self) -> None:
        if self._authenticator is not None:
            self._authenticator.stop()
            self._authenticator = None

    def callback(self, domain: str, key: bytes) -> bool:
        """ZAP: may the holder of public `key` connect to a socket of `domain`?"""
        if domain == INTERNAL_DOMAIN:
            allowed = key == self.public
        else:
            allowed = key in self.clients.keys()
        if not allowed:
            self._refusals.warning("refused a connection with key %s to a %s socket: not in %s/",
                                   key.decode(errors="replace"), domain, self.clients.folder)
        return allowed

    def protect(self, socket: zmq.Socket, domain: str = SESSION_DOMAIN) -> None:
        """Before bind: the socket becomes a CURVE server checked by ZAP."""
        socket.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
        socket.setsockopt(zmq.CURVE_SERVER, 1)
        socket.setsockopt(zmq.CURVE_SECRETKEY, self.secret)

    def as_own_client(self) -> Curve:
        """For the server's own processes reaching its internal sockets."""
        return Curve(self.public, self.secret, self.public)
