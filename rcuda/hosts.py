"""`rcuda hosts`: N hosts on this machine (network namespaces, rcuda/netns.py),
each running an `rcuda server` bound to its own address, and a client
namespace to run programs from.

    sudo rcuda hosts up --count 4 --kernels my_kernels.py
    sudo rcuda hosts run -- ./simpleMultiGPU     # RCUDA_SERVERS set for you
    sudo rcuda hosts down

The servers listen on their namespace's address, not loopback, so they run
with --auth (rcuda/auth.py): `up` makes a key pair per host server and one
for the client in the state directory, and `run` points RCUDA_KEY and
RCUDA_SERVER_KEY at them.  `up --insecure` runs the servers without
authentication instead (anyone who can reach the addresses could use them;
here only this machine's namespaces can).  Servers outlive `up`; their logs
are in the state directory (default /run/rcuda/hosts-NAME/).  `down` ends
them and removes every namespace, also after a crash.

    STATE/keys/client/client.key_secret    the client's key pair
    STATE/keys/client/HOST_PORT.key        each server's public key
    STATE/keys/hN/server.key_secret        host N's server key pair
    STATE/keys/hN/clients/client.key       the client key host N accepts
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rcuda.netns import Network, NetnsError, remove_network, unavailable_reason
from rcuda.python_command import python_module_command

log = logging.getLogger(__name__)

DEFAULT_PORT = 7777
SERVER_START_TIMEOUT = 60.0
STATE_ROOT = Path("/run/rcuda")


@dataclass
class HostServer:
    namespace: str
    address: str  # HOST:PORT, as clients give it in RCUDA_SERVERS
    pid: int
    log: str  # the server's stdout and stderr


class Hosts:
    """A `Network` with an rcuda server on every host.  As a context manager
    it stops the servers and removes the namespaces on the way out."""

    def __init__(self, count: int = 4, name: str = "rcuda", subnet: str = "10.77.0", port: int = DEFAULT_PORT,
                 rate: str | None = None, server_args: list[str] | tuple = ("--backend", "sim"),
                 state_dir: str | os.PathLike | None = None, python: str = sys.executable, auth: bool = True):
        self.network = Network(count, name=name, subnet=subnet, rate=rate)
        self.port = port
        self.server_args = list(server_args)
        self.state_dir = Path(state_dir) if state_dir else STATE_ROOT / f"hosts-{name}"
        self.python = python
        self.auth = auth
        self.servers: list[HostServer] = []

    @property
    def keys_dir(self) -> Path:
        return self.state_dir / "keys"

    @property
    def client_environment(self) -> dict[str, str]:
        """What a client needs besides RCUDA_SERVERS: its keys, with --auth."""
        if not self.auth:
            return {}
        from rcuda import auth  # here: every `rcuda` command builds this module's parser
        client = self.keys_dir / "client"
        return {"RCUDA_KEY": str(client / f"client{auth.SECRET_SUFFIX}"), "RCUDA_SERVER_KEY": str(client)}

    def _make_keys(self) -> None:
        """A key pair per host server and one for the client; each server
        accepts the client's key, the client knows each server's key."""
        from rcuda import auth
        client_dir = self.keys_dir / "client"
        client_public, _ = auth.create_key_pair(client_dir, "client", force=True)
        for host in self.network.hosts:
            host_dir = self.keys_dir / host.namespace.rsplit("-", 1)[-1]
            server_public, _ = auth.create_key_pair(host_dir, auth.SERVER_KEY_NAME, force=True)
            (host_dir / auth.CLIENTS_DIR).mkdir(exist_ok=True)
            shutil.copyfile(client_public, host_dir / auth.CLIENTS_DIR / client_public.name)
            shutil.copyfile(server_public, client_dir / f"{host.address}_{self.port}{auth.PUBLIC_SUFFIX}")

    def _security_args(self, host) -> list[str]:
        if not self.auth:
            return ["--insecure"]
        return ["--auth", str(self.keys_dir / host.namespace.rsplit("-", 1)[-1])]

    def __enter__(self) -> "Hosts":
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    @property
    def servers_variable(self) -> str:
        """The value of RCUDA_SERVERS for a program in the client namespace."""
        return ",".join(server.address for server in self.servers)

    def up(self) -> list[HostServer]:
        self.network.up()
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            if self.auth:
                self._make_keys()
            for host in self.network.hosts:
                self.servers.append(self._start(host))
            for server in self.servers:
                self._wait_ready(server)
            self._save()
        except BaseException:
            self.down()
            raise
        return self.servers

    def _start(self, host) -> HostServer:
        logfile = self.state_dir / f"{host.namespace}.log"
        argv = self.network.exec_argv(host.namespace, [
            *python_module_command("rcuda.cli", self.python), "server",
            "--listen", f"tcp://{host.address}:{self.port}",
            *self._security_args(host), *self.server_args])
        with open(logfile, "w") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        return HostServer(host.namespace, f"{host.address}:{self.port}", process.pid, str(logfile))

    @staticmethod
    def _wait_ready(server: HostServer, timeout: float = SERVER_START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = Path(server.log).read_text(errors="replace")
            if "rcuda server ready on" in text:
                return
            if not _alive(server.pid):
                raise NetnsError(f"the rcuda server in {server.namespace} exited:\n{text}")
            time.sleep(0.1)
        raise NetnsError(f"the rcuda server in {server.namespace} was not ready within {timeout:.0f}s:\n"
                         f"{Path(server.log).read_text(errors='replace')}")

    def kill(self, index: int) -> None:
        """Kill host `index`'s server and its workers at once (SIGKILL), like
        a machine going away."""
        server = self.servers[index]
        try:
            os.killpg(server.pid, signal.SIGKILL)  # its own session: the daemon and its workers
        except ProcessLookupError:
            pass

    def down(self) -> None:
        for server in self.servers:
            try:
                os.kill(server.pid, signal.SIGTERM)  # the daemon stops its workers
            except ProcessLookupError:
                pass
        self.network.down()  # ends whatever is still running inside, then removes the namespaces
        for server in self.servers:
            _reap(server.pid)
        self.servers = []
        state = self.state_dir / "state.json"
        if state.exists():
            state.unlink()

    def _save(self) -> None:
        state = {"name": self.network.name, "client_namespace": self.network.client_namespace,
                 "client_address": self.network.client_address, "servers": [asdict(s) for s in self.servers],
                 "client_environment": self.client_environment}
        (self.state_dir / "state.json").write_text(json.dumps(state, indent=2))


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:  # not our child (any more): ask the kernel
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def load_state(name: str, state_dir: str | None = None) -> dict | None:
    path = (Path(state_dir) if state_dir else STATE_ROOT / f"hosts-{name}") / "state.json"
    return json.loads(path.read_text()) if path.exists() else None


# ---------------------------------------------------------------- command line


def add_parser(commands, command_error) -> None:
    p = commands.add_parser("hosts", help="network-namespace hosts on this machine, each running a server",
                            description=__doc__.split("\n\n")[0].replace("\n", " "))
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="create the hosts and start a server on each")
    up.add_argument("--count", type=int, default=4, help="number of hosts (default 4)")
    up.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"server port on each host (default {DEFAULT_PORT})")
    up.add_argument("--subnet", default="10.77.0", help="first three numbers of the /24 (default 10.77.0)")
    up.add_argument("--rate", default=None, help="limit each host's link, e.g. 1gbit (tc tbf, both directions)")
    up.add_argument("--backend", default="sim", choices=["auto", "cupy", "sim"])
    up.add_argument("--devices", type=int, default=None, help="GPUs per server (sim: simulated GPUs)")
    up.add_argument("--kernels", action="append", default=[], metavar="FILE.py", help="sim kernel plugin file")
    up.add_argument("--insecure", action="store_true",
                    help="servers without authentication (default: --auth with keys made in the state directory)")
    for action in (up, actions.add_parser("down", help="stop the servers and remove the namespaces"),
                   actions.add_parser("status", help="show the hosts and their servers")):
        action.add_argument("--name", default="rcuda", help="network name, prefix of the namespaces (default rcuda)")
        action.add_argument("--state-dir", default=None, help="where state and logs are kept "
                                                              "(default /run/rcuda/hosts-NAME)")
    run = actions.add_parser("run", help="run a command in the client namespace, RCUDA_SERVERS set",
                             usage="rcuda hosts run [--name NAME] -- PROGRAM [ARGS...]")
    run.add_argument("--name", default="rcuda")
    run.add_argument("--state-dir", default=None)
    run.add_argument("program", nargs="...", help="the command (e.g. rcuda run -- ./app, or ./app directly)")
    p.set_defaults(handler=lambda args: _command(args, command_error))


def _command(args, command_error) -> int:
    if args.action == "down":
        removed = remove_network(args.name)
        state_dir = Path(args.state_dir) if args.state_dir else STATE_ROOT / f"hosts-{args.name}"
        (state_dir / "state.json").unlink(missing_ok=True)
        print(f"removed {len(removed)} namespace(s): {' '.join(removed)}" if removed else "nothing to remove")
        return 0
    state = load_state(args.name, args.state_dir)
    if args.action == "status":
        if state is None:
            print(f"no hosts named {args.name} (start them with `rcuda hosts up`)")
            return 1
        for server in state["servers"]:
            print(f"{server['namespace']}: {server['address']} pid {server['pid']} "
                  f"{'running' if _alive(server['pid']) else 'NOT RUNNING'} (log {server['log']})")
        print(f"client namespace {state['client_namespace']} ({state['client_address']})")
        return 0
    if args.action == "run":
        if state is None:
            raise command_error(f"no hosts named {args.name}: start them with `rcuda hosts up`")
        command = args.program[1:] if args.program[:1] == ["--"] else args.program
        if not command:
            raise command_error("no program given: rcuda hosts run -- PROGRAM [ARGS...]")
        if command[0] != "rcuda" and not command[0].endswith("/rcuda"):
            # An unmodified CUDA program: through `rcuda run`, which sets LD_PRELOAD.
            command = [*python_module_command("rcuda.cli"), "run", "--", *command]
        env = dict(os.environ, RCUDA_SERVERS=",".join(s["address"] for s in state["servers"]),
                   **state.get("client_environment", {}))
        sys.stdout.flush()
        os.execvpe("ip", ["ip", "netns", "exec", state["client_namespace"], *command], env)
    # up
    reason = unavailable_reason()
    if reason:
        raise command_error(reason)
    server_args = ["--backend", args.backend]
    if args.devices is not None:
        server_args += ["--devices", str(args.devices)]
    for kernels in args.kernels:
        if not os.path.isfile(kernels):
            raise command_error(f"--kernels {kernels}: no such file")
        server_args += ["--kernels", os.path.abspath(kernels)]
    hosts = Hosts(args.count, name=args.name, subnet=args.subnet, port=args.port, rate=args.rate,
                  server_args=server_args, state_dir=args.state_dir, auth=not args.insecure)
    try:
        hosts.up()
    except (NetnsError, ValueError) as exc:
        raise command_error(str(exc)) from None
    for server in hosts.servers:
        print(f"{server.namespace}: rcuda server on {server.address} (pid {server.pid}, log {server.log})")
    print(f"client namespace {hosts.network.client_namespace} at {hosts.network.client_address}"
          f"{f', links limited to {args.rate}' if args.rate else ''}")
    keys = " ".join(f"{k}={v}" for k, v in hosts.client_environment.items())
    print("servers run with --auth: only the client key made here may use them" if hosts.auth else
          "servers run with --insecure: no authentication")
    print(f"run a program:  rcuda hosts run --name {args.name} -- ./program")
    print(f"   or:          {keys + ' ' if keys else ''}ip netns exec {hosts.network.client_namespace} rcuda run "
          f"--servers {hosts.servers_variable} -- ./program")
    print(f"stop:           rcuda hosts down --name {args.name}")
    return 0

