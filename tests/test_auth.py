"""CURVE authentication and encryption: `rcuda keys`, `rcuda server --auth
DIR`, the client's keys from its config, and every socket a client can reach
refusing strangers.  Real servers, real programs built with nvcc."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
import zmq

from auth_helpers import KeyedSession, Keys, make_keys
from conftest import CUDA_SOURCES, RCUDA, requires_nvcc, run_program
from multi_helpers import MULTI_KERNELS
from rcuda import auth, protocol
from rcuda.auth import ClientKeys, KeyFileError
from rcuda.config import ClientConfig, parse_server
from rcuda.errors import ProtocolError, cudaError
from rcuda.lane import LaneClosed

SIM_KERNELS = str(CUDA_SOURCES / "sim_kernels.py")


@pytest.fixture
def keys(tmp_path) -> Keys:
    return make_keys(tmp_path)


@pytest.fixture
def auth_server(server_factory, keys):
    return server_factory("--backend", "sim", "--kernels", SIM_KERNELS, "--auth", str(keys.server_dir))


def rcuda(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RCUDA_")} | (env or {})
    return subprocess.run([*RCUDA, *args], capture_output=True, text=True, timeout=timeout, env=full_env)


# ------------------------------------------------------------------ rcuda keys


def test_rcuda_keys_makes_a_client_pair_with_a_private_secret(tmp_path):
    result = rcuda("keys", str(tmp_path / "k"), "--name", "alice")
    assert result.returncode == 0, result.stderr
    public, secret = tmp_path / "k" / "alice.key", tmp_path / "k" / "alice.key_secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    assert f"RCUDA_KEY={secret}" in result.stdout and "clients/" in result.stdout
    pub, sec = auth.load_key_pair(secret)
    assert zmq.curve_public(sec) == pub == auth.load_public_key(public)
    again = rcuda("keys", str(tmp_path / "k"), "--name", "alice")
    assert again.returncode == 2 and "already exists: pass --force" in again.stderr
    assert rcuda("keys", str(tmp_path / "k"), "--name", "alice", "--force").returncode == 0
    assert auth.load_key_pair(secret) != (pub, sec)


def test_rcuda_keys_server_makes_what_server_auth_takes(tmp_path):
    result = rcuda("keys", str(tmp_path / "srv"), "--server")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "srv" / "server.key_secret").is_file() and (tmp_path / "srv" / "clients").is_dir()
    assert f"--auth {tmp_path / 'srv'}" in result.stdout


@pytest.mark.parametrize("layout, complaint", [
    ("missing", "no such folder"),
    ("no-server-key", "no server.key_secret in it: create the server's key pair with `rcuda keys"),
    ("no-clients", "no clients/ folder in it"),
])
def test_server_auth_dir_problems_are_explained(tmp_path, layout, complaint):
    directory = tmp_path / "auth"
    if layout != "missing":
        directory.mkdir()
    if layout == "no-clients":
        auth.create_key_pair(directory, "server")
    result = rcuda("server", "--listen", "tcp://127.0.0.1:0", "--backend", "sim", "--auth", str(directory),
                   timeout=60)
    assert result.returncode == 2 and complaint in result.stderr, result.stderr


def test_non_loopback_needs_auth_or_insecure(tmp_path, server_factory):
    result = rcuda("server", "--listen", "tcp://0.0.0.0:0", "--backend", "sim")
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0 without authentication" in result.stderr
    assert "--auth DIR" in result.stderr and "--insecure" in result.stderr
    keys = make_keys(tmp_path)
    server = server_factory("--backend", "sim", "--auth", str(keys.server_dir), listen="tcp://0.0.0.0:0")
    assert "clients authenticated with keys in" in server.ready_line


# ------------------------------------------------------------------ client configuration


def test_client_keys_find_each_servers_public_key(tmp_path):
    keys = make_keys(tmp_path)
    other = tmp_path / "other"
    auth.create_key_pair(other, "server")
    folder = tmp_path / "known"
    folder.mkdir()
    shutil.copy(other / "server.key", folder / "10.0.0.2_7777.key")
    a, b, c = parse_server("10.0.0.1:7777"), parse_server("10.0.0.2:7777"), parse_server("10.0.0.3:7777")
    client = ClientKeys(str(keys.client_secret), [f"10.0.0.1:7777={keys.server_public}", str(folder)])
    assert client.for_server(a).server == auth.load_public_key(keys.server_public)
    assert client.for_server(b).server == auth.load_public_key(other / "server.key")
    with pytest.raises(KeyFileError, match="no public key for server 10.0.0.3:7777"):
        client.for_server(c)
    # A general file serves every server; with no server_key, the key's own folder is searched.
    assert ClientKeys(str(keys.client_secret), [str(keys.server_public)]).for_server(c) is not None
    shutil.copy(keys.server_public, keys.client_secret.parent / "server.key")
    assert ClientKeys(str(keys.client_secret)).for_server(c).server == auth.load_public_key(keys.server_public)
    # Naming the public half finds the secret beside it.
    assert ClientKeys(str(keys.client_public)).pair == auth.load_key_pair(keys.client_secret)
    assert ClientKeys(None).for_server(a) is None


@pytest.mark.parametrize("key, server_key, complaint", [
    (None, ["x.key"], "server_key (RCUDA_SERVER_KEY) is set but the client has no key pair"),
    ("public", [], "holds only a public key"),
    ("missing", [], "cannot read client key"),
])
def test_client_key_mistakes_are_explained(tmp_path, key, server_key, complaint):
    keys = make_keys(tmp_path)
    lonely = tmp_path / "lonely.key"  # a public key with no secret beside it
    shutil.copy(keys.server_public, lonely)
    paths = {None: None, "public": str(lonely), "missing": str(tmp_path / "nope.key_secret")}
    with pytest.raises(KeyFileError, match=re.escape(complaint)):
        ClientKeys(paths[key], server_key)


def test_client_config_reads_keys_from_file_and_environment(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[client]\nkey = "~/k/me.key_secret"\nserver_key = ["a:1=/x.key", "/keys"]\n')
    loaded = ClientConfig.load({"RCUDA_CONFIG": str(config)})
    assert loaded.key == str(Path("~/k/me.key_secret").expanduser()) and loaded.server_key == ["a:1=/x.key", "/keys"]
    env = ClientConfig.load({"RCUDA_CONFIG": str(config), "RCUDA_KEY": "/k", "RCUDA_SERVER_KEY": "/a.key, b:2=/b"})
    assert env.key == "/k" and env.server_key == ["/a.key", "b:2=/b"]


# ------------------------------------------------------------------ accepted and refused


@requires_nvcc
def test_accepted_key_runs_a_program(auth_server, keys, compile_cuda):
    result = run_program(compile_cuda("vector_add.cu"), auth_server, "100000", env_extra=keys.env())
    assert "PASSED vectorAdd n=100000" in result.stdout, result.stdout + result.stderr


@requires_nvcc
@pytest.mark.parametrize("who, complaint", [
    ("no key", "requires a key (it runs with --auth) and this client has none"),
    ("stranger", "does not accept this client's key"),
    ("wrong server key", "is RCUDA_SERVER_KEY that server's public key"),
])
def test_refused_clients_fail_at_connect_saying_why(auth_server, keys, compile_cuda, who, complaint):
    env = {"no key": {"RCUDA_KEY": "", "RCUDA_SERVER_KEY": ""},
           "stranger": keys.env(secret=keys.stranger_secret),
           "wrong server key": keys.env(server_key=keys.client_public)}[who]
    started = time.monotonic()
    result = run_program(compile_cuda("vector_add.cu"), auth_server, "1000",
                         env_extra=env | {"RCUDA_TIMEOUT": "20"})
    assert "PASSED" not in result.stdout and result.returncode != 0
    assert complaint in result.stderr, result.stderr
    assert "cudaErrorDevicesUnavailable" in result.stdout
    assert time.monotonic() - started < 15, "a refused key is reported at once, not after RCUDA_TIMEOUT"


def test_monitor_events_are_read_without_pyzmqs_asyncio_helper():
    import struct
    event, value = auth.parse_monitor_event([struct.pack("=hi", zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400),
                                             b"tcp://127.0.0.1:1"])
    assert (event, value) == (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400)
    with pytest.raises(ProtocolError, match="malformed ZeroMQ monitor message"):
        auth.parse_monitor_event([b"\x01\x00"])


@requires_nvcc
def test_client_with_a_key_against_a_server_without_auth(sim_server, keys, compile_cuda):
    result = run_program(compile_cuda("vector_add.cu"), sim_server, "1000", env_extra=keys.env())
    assert "PASSED" not in result.stdout
    # ZeroMQ reports the mechanism mismatch, or (the side that fails first
    # just closes) only that the handshake failed: both explanations name --auth.
    # (A run on a loaded machine saw the first; the test used to accept only the second.)
    assert ("does not use authentication (it runs without --auth), but this client has a key" in result.stderr
            or "does it run with --auth?" in result.stderr), result.stderr


def test_rcuda_devices_and_smi_use_the_clients_keys(auth_server, keys):
    devices = rcuda("devices", "--servers", auth_server.address, env=keys.env())
    assert devices.returncode == 0 and "rcuda sim GPU 0" in devices.stdout, devices.stdout + devices.stderr
    assert (f"{auth_server.address}: TCP lane sealed with AES-256-GCM, keyed over ZeroMQ CURVE (Curve25519)"
            in devices.stdout)
    refused = rcuda("devices", "--servers", auth_server.address)
    assert refused.returncode == 1 and "requires a key" in refused.stdout, refused.stdout
    smi = rcuda("smi", "--servers", auth_server.address, env=keys.env())
    assert smi.returncode == 0 and "sim backend" in smi.stdout, smi.stdout + smi.stderr
    # A session's worker reports to the daemon over the CURVE-protected status socket.
    curve = ClientKeys(str(keys.client_secret), [str(keys.server_public)]).for_server(
        parse_server(auth_server.address))
    session = KeyedSession(auth_server.address, curve)
    try:
        deadline, sessions = time.monotonic() + 20, []
        while not sessions and time.monotonic() < deadline:
            report = json.loads(rcuda("smi", "--servers", auth_server.address, "--json", env=keys.env()).stdout)
            sessions = report[0].get("sessions", [])
            time.sleep(0.5)
        assert [s.get("program") for s in sessions] == ["test"], report
    finally:
        session.close()


def test_client_keys_are_read_again_without_a_restart(auth_server, keys, tmp_path):
    stranger = keys.env(secret=keys.stranger_secret)
    assert "does not accept this client's key" in rcuda("devices", "--servers", auth_server.address,
                                                        env=stranger).stdout
    shutil.copy(keys.stranger_secret.with_suffix(".key"), keys.server_dir / "clients")
    assert rcuda("devices", "--servers", auth_server.address, env=stranger).returncode == 0
    (keys.server_dir / "clients" / "mallory.key").unlink()
    assert rcuda("devices", "--servers", auth_server.address, env=stranger).returncode == 1
    assert auth_server.wait_for_log("refused a connection with key")  # the operator sees refusals


# ------------------------------------------------------------------ every socket is protected


def test_every_worker_socket_refuses_strangers(auth_server, keys):
    """A raw ZeroMQ client without an accepted key gets nothing from any
    socket of a session worker (GPU, heartbeat), even knowing the session's
    tokens, and a connection to its peer port without the session's peer
    secret opens nothing; with the accepted key (and the secret) the same
    messages are answered."""
    mine = ClientKeys(str(keys.client_secret), [str(keys.server_public)]).for_server(parse_server(auth_server.address))
    session = KeyedSession(auth_server.address, mine)
    hello = session.hello
    # Lanes and the peer port, sealed with keys from secrets that only the
    # CURVE-encrypted hello reply carries.
    assert len(hello["lane_ports"]) == 1 and len(hello["lane_secret"]) == 32 and len(hello["peer_secret"]) == 32
    stranger_pair = auth.load_key_pair(keys.stranger_secret)
    stranger = auth.Curve(*stranger_pair, mine.server)
    messages = {
        hello["ports"][0]: protocol.pack({"op": "mem_info", "seq": 7}),
        hello["control_port"]: protocol.pack({"op": "ping", "seq": 7, "token": hello["token"]}),
    }
    try:
        for port, message in messages.items():
            for who in (None, stranger):
                sock = session.socket(port, curve=who)
                try:
                    sock.send(message)
                except zmq.Again:  # the refused handshake dropped the connection first: refused too
                    pass
                else:
                    assert not sock.poll(1500), \
                        f"port {port} answered a client with {'a stranger' if who else 'no'} key"
                sock.close()
        # The accepted key is answered on the heartbeat socket (the GPU socket
        # answers only its own connection: shown by the open above).
        sock = session.socket(hello["control_port"])
        sock.send(messages[hello["control_port"]])
        assert sock.poll(10000), "the heartbeat socket did not answer the accepted key"
        sock.close()
        # The peer port: its session's secret opens it, a made-up one does not.
        peer_hello = {"op": "peer_hello", "seq": 0, "token": hello["peer_token"]}
        for secret, answered in ((bytes(32), False), ("mine", True)):
            lane = session.peer_lane(secret)
            lane.send(peer_hello)
            if answered:
                assert lane.receive()[0]["op"] == "peer_welcome"
            else:
                with pytest.raises(LaneClosed):
                    lane.receive()
            lane.close()
    finally:
        session.close()


def test_plain_server_hands_out_no_secrets(sim_server):
    session = KeyedSession(sim_server.address, None)
    try:
        assert session.hello.get("peer_secret") is None and session.hello.get("lane_secret") is None
    finally:
        session.close()


# ------------------------------------------------------------------ peer copies with --auth


@requires_nvcc
def test_peer_copies_between_auth_servers_go_server_to_server(tmp_path, server_factory, compile_cuda):
    """Two --auth servers with their own key pairs, neither knowing the
    other: the copy still goes server to server, sealed with the
    destination session's peer secret."""
    first, second = make_keys(tmp_path / "one"), make_keys(tmp_path / "two")
    shutil.copy(first.client_public, second.server_dir / "clients")  # one client, known to both
    servers = [server_factory("--backend", "sim", "--kernels", str(MULTI_KERNELS), "--auth", str(k.server_dir))
               for k in (first, second)]
    server_key = ",".join(f"{s.address}={k.server_public}" for s, k in zip(servers, (first, second)))
    env = {"RCUDA_KEY": str(first.client_secret), "RCUDA_SERVER_KEY": server_key}
    size = 3 << 20
    result = run_program(compile_cuda("peer_copy.cu"), servers, "peer", str(size), "1", env_extra=env)
    assert "PASSED peer_copy" in result.stdout, result.stdout + result.stderr
    deadline = time.monotonic() + 10
    while f"sent {size} bytes" not in servers[0].stderr and time.monotonic() < deadline:
        time.sleep(0.2)
    assert re.search(rf"sent {size} bytes to GPU1 .* \(tcp://127\.0\.0\.1:\d+\)", servers[0].stderr), \
        servers[0].stderr[-3000:]


@requires_nvcc
def test_mixed_servers_need_an_explicit_none_and_copy_safely(tmp_path, server_factory, compile_cuda):
    """A client with a key talks to a server without --auth only when told
    (HOST:PORT=none).  Copies from the --auth server to the plain one go
    through the client (the --auth server pushes only to peers that
    authenticate); the other way they go server to server, encrypted."""
    keys = make_keys(tmp_path)
    secure = server_factory("--backend", "sim", "--kernels", str(MULTI_KERNELS), "--auth", str(keys.server_dir))
    plain = server_factory("--backend", "sim", "--kernels", str(MULTI_KERNELS))
    program = compile_cuda("peer_copy.cu")
    env = {"RCUDA_KEY": str(keys.client_secret), "RCUDA_SERVER_KEY": f"{secure.address}={keys.server_public}",
           "RCUDA_LOG": "info"}
    refused = run_program(program, [secure, plain], "peer", str(1 << 20), "1", env_extra=env)
    assert "PASSED" not in refused.stdout
    assert f"no public key for server {plain.address}" in refused.stderr, refused.stderr
    env["RCUDA_SERVER_KEY"] += f",{plain.address}=none"
    staged = run_program(program, [secure, plain], "peer", str(1 << 20), "1", env_extra=env)
    assert "PASSED peer_copy" in staged.stdout, staged.stdout + staged.stderr
    assert f"go through this process: {secure.address} runs with --auth" in staged.stderr, staged.stderr
    direct = run_program(program, [plain, secure], "peer", str(1 << 20), "1", env_extra=env)
    assert "PASSED peer_copy" in direct.stdout, direct.stdout + direct.stderr
    deadline = time.monotonic() + 10
    while f"sent {1 << 20} bytes" not in plain.stderr and time.monotonic() < deadline:
        time.sleep(0.2)
    assert f"sent {1 << 20} bytes to GPU1" in plain.stderr, plain.stderr[-3000:]


@requires_nvcc
def test_a_stranger_fuzzing_every_port_gets_no_answer(auth_server, keys, compile_cuda):
    """Frames without an accepted key (none, unknown keys, raw TCP bytes) to
    the daemon and to a live session's worker ports: not one answer, and the
    server still serves its client."""
    from rcuda.fuzz import Stranger
    curve = ClientKeys(str(keys.client_secret), [str(keys.server_public)]).for_server(
        parse_server(auth_server.address))
    victim = KeyedSession(auth_server.address, curve)
    try:
        hello = victim.hello
        report = Stranger(auth_server.address, seed=3, server_key=curve.server).run(
            3000, 60, [*hello["ports"], hello["control_port"], hello["peer_port"]])
        assert report.frames_sent == 3000 and report.replies == 0
        assert victim.call({"op": "mem_info"})["err"] == 0  # the session attacked is untouched
    finally:
        victim.close()
    assert auth_server.process.poll() is None and "Traceback" not in auth_server.stderr
    result = run_program(compile_cuda("vector_add.cu"), auth_server, "1000", env_extra=keys.env())
    assert "PASSED vectorAdd n=1000" in result.stdout, result.stdout + result.stderr


# ------------------------------------------------------------------ IPC between users


def test_ipc_exports_open_only_for_the_same_user(auth_server, keys, tmp_path):
    """On a --auth server a session's user is its client's key: memory and
    events one user exports open in another session of the same user only."""
    bob_public, bob_secret = auth.create_key_pair(tmp_path / "bob", "bob")
    shutil.copy(bob_public, keys.server_dir / "clients")

    def session(secret: Path) -> KeyedSession:
        curve = ClientKeys(str(secret), [str(keys.server_public)]).for_server(parse_server(auth_server.address))
        return KeyedSession(auth_server.address, curve)

    alice, bob, alice_again = session(keys.client_secret), session(bob_secret), session(keys.client_secret)
    try:
        ptr = alice.call({"op": "malloc", "size": 4096})["ptr"]
        memory = alice.call({"op": "ipc_export", "ptr": ptr})
        flags = 0x2 | 0x4  # cudaEventDisableTiming | cudaEventInterprocess
        assert alice.call({"op": "event_create", "event": 7, "flags": flags})["err"] == 0
        event = alice.call({"op": "ipc_event_export", "event": 7})
        refused = bob.call({"op": "ipc_open", "worker": memory["worker"], "token": memory["token"]})
        assert refused["err"] == cudaError.cudaErrorInvalidResourceHandle, refused
        refused = bob.call({"op": "event_create", "event": 3, "flags": flags, "ipc": [event["worker"], event["token"]]})
        assert refused["err"] == cudaError.cudaErrorInvalidResourceHandle, refused
        opened = alice_again.call({"op": "ipc_open", "worker": memory["worker"], "token": memory["token"]})
        assert opened["err"] == 0 and opened["size"] == 4096, opened
        opened = alice_again.call({"op": "event_create", "event": 3, "flags": flags,
                                   "ipc": [event["worker"], event["token"]]})
        assert opened["err"] == 0, opened
    finally:
        for s in (alice, bob, alice_again):
            s.close()
