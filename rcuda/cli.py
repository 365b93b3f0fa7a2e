"""The `rcuda` command line.

    rcuda server   serve this machine's GPUs (or simulated ones)
    rcuda run      run an unmodified CUDA program on remote GPUs
    rcuda lib      where the interposer library is
    rcuda bench    run the benchmarks (benchmarks/)
"""
from __future__ import annotations

import argparse
import os
import sys

from rcuda import __version__
from rcuda.config import ConfigError, is_loopback, parse_server, parse_servers, parse_timeout


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rcuda", description="Run unmodified CUDA programs on remote GPUs.")
    parser.add_argument("--version", action="version", version=f"rcuda {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (ServerCommand, RunCommand, LibCommand, BenchCommand):
        module.add_parser(commands)
    args = parser.parse_args(argv)
    try:
        return args.handler(args) or 0
    except (ConfigError, CommandError) as exc:
        print(f"rcuda {args.command}: error: {exc}", file=sys.stderr)
        return 2


class CommandError(Exception):
    """A user error: printed without a traceback."""


class ServerCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("server", help="serve GPUs to rcuda clients",
                                description="Serve this machine's GPUs (cupy backend) or simulated GPUs "
                                            "(sim backend) to rcuda clients.")
        p.add_argument("--listen", default="tcp://127.0.0.1:7777",
                       help="address to listen on (default tcp://127.0.0.1:7777; port 0 picks a free one)")
        p.add_argument("--backend", choices=["auto", "cupy", "sim"], default="auto",
                       help="cupy: real GPUs; sim: CPU simulation; auto: cupy if a GPU is usable")
        p.add_argument("--devices", type=int, default=None,
                       help="GPUs to serve (cupy: the first N, default all; sim: N simulated GPUs, default 1)")
        p.add_argument("--kernels", action="append", default=[], metavar="FILE.py",
                       help="sim kernel plugin file (repeatable; also RCUDA_SIM_KERNELS=a.py:b.py)")
        p.add_argument("--memory-limit", type=int, default=None, metavar="BYTES",
                       help="device memory a session may hold on each GPU")
        p.add_argument("--insecure", action="store_true",
                       help="allow listening on a non-loopback address without authentication")
        p.add_argument("--session-timeout", type=float, default=30.0, metavar="SECONDS",
                       help="end a session whose client has been silent this long (default 30)")
        p.add_argument("--spares", type=int, default=1, help="session workers kept started ahead of need")
        p.add_argument("--log-level", default=None, choices=["debug", "info", "warning", "error"])
        p.set_defaults(handler=ServerCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda.log import setup_server_logging
        from rcuda.server.daemon import Daemon, WorkerError

        setup_server_logging(args.log_level)
        host, _ = _split_listen(args.listen)
        if not is_loopback(host) and not args.insecure:
            raise CommandError(
                f"refusing to listen on {host}: anyone who can reach it could run code on these GPUs and "
                f"read what the sessions hold. Listen on 127.0.0.1 (and tunnel), or pass --insecure on a "
                f"network you trust.")
        kernels = [os.path.abspath(k) for k in args.kernels]
        for k in kernels:
            if not os.path.isfile(k):
                raise CommandError(f"--kernels {k}: no such file")
        config = {"backend": args.backend, "devices": args.devices, "kernels": kernels,
                  "memory_limit": args.memory_limit, "bind_host": host,
                  "session_timeout": args.session_timeout, "log_level": args.log_level}
        daemon = Daemon(args.listen, config, spares=args.spares)
        try:
            endpoint = daemon.start()
        except WorkerError as exc:
            raise CommandError(f"cannot start: {exc}") from None
        names = ", ".join(d.get("name", "?") for d in daemon.devices)
        print(f"rcuda server ready on {endpoint} ({daemon.backend} backend, {len(daemon.devices)} "
              f"device(s): {names})", flush=True)
        daemon.serve_forever()
        return 0


def _split_listen(listen: str) -> tuple[str, int]:
    if not listen.startswith("tcp://"):
        raise CommandError(f"--listen {listen!r}: only tcp://HOST:PORT is supported")
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
        from rcuda.binaries import ProgramError, check_program, find_program, library_path

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
            lib = str(library_path())
        except ProgramError as exc:
            raise CommandError(str(exc)) from None
        env["LD_PRELOAD"] = os.pathsep.join(filter(None, [lib, env.get("LD_PRELOAD")]))
        # The embedded client imports rcuda from exactly where this command runs.
        env["RCUDA_PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        sys.stdout.flush()
        os.execvpe(str(program), command, env)


class LibCommand:
    @staticmethod
    def add_parser(commands) -> None:
        p = commands.add_parser("lib", help="print the path of the interposer library",
                                description="Print the interposer's path, for LD_PRELOAD=$(rcuda lib); with "
                                            "--dir, the folder holding a drop-in libcudart.so.13 for "
                                            "LD_LIBRARY_PATH.")
        p.add_argument("--dir", action="store_true", help="the drop-in libcudart.so.13 folder instead")
        p.set_defaults(handler=LibCommand.run)

    @staticmethod
    def run(args) -> int:
        from rcuda.binaries import ProgramError, dropin_dir, library_path

        try:
            print(dropin_dir() if args.dir else library_path())
        except ProgramError as exc:
            raise CommandError(str(exc)) from None
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
                       help="only these benchmarks (latency, copy, launch, startup)")
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
