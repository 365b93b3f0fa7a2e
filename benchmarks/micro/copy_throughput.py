"""Copy throughput, host to device and device to host, next to a raw socket.

`rcuda_*`: an unmodified CUDA program (cuda/copy.cu) timing its own
cudaMemcpy calls through rcuda against a sim server over loopback TCP,
made in C on the device's lane (native/sync_fast_path.c, native/link.c);
`rcuda_auth_*` the same program against a server with --auth, where the
lane is sealed (AES-256-GCM records, rcuda/sealed.py), and
`rcuda_auth_socket_*` with RCUDA_LINK=socket there: the device's
CURVE-encrypted ZeroMQ socket, what --auth servers used before.  In the
same run, in interleaved rounds, the same sizes moved:

    raw_tcp_*      by a raw TCP socket stream between two Python processes
                   (sendall / recv_into straight into a preallocated buffer;
                   the receiver acknowledges an upload with one byte, so both
                   measure a complete transfer, as cudaMemcpy does)
    pyzmq_*        by bare pyzmq in frames of rcuda's protocol.CHUNK_SIZE,
                   with one copy on each side as rcuda makes (into "device"
                   memory on the peer, into the destination on the client):
                   ZeroMQ's own cost for bulk data, without rcuda

Rates are GB/s (10^9 bytes per second), the median over repeats.  Host
buffers are ordinary pageable memory, touched before use.  Beside them, the
cipher's own rate on one core: AES-256-GCM on whole records, as the server
runs it (the `cryptography` package's OpenSSL) and as the interposer does
(the system's libcrypto.so.3).
"""
from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import common
from ..common import Context, goal
from . import peers

NAME = "copy"
TITLE = "Copy throughput"

KIB, MIB = 1 << 10, 1 << 20
FULL_SIZES = [4 * KIB << (2 * i) for i in range(9)]  # 4 KiB, 16 KiB, ... 256 MiB
QUICK_SIZES = [4 * KIB, 256 * KIB, 4 * MIB, 16 * MIB, 64 * MIB]
GOAL_FROM_BYTES = 16 * MIB
#: Sealed lanes (--auth) are held to 70% of a raw stream from here on.
AUTH_GOAL_FROM_BYTES = 64 * MIB

LABELS = {
    "rcuda_htod": ("htod", "rcuda cudaMemcpy host→device"),
    "rcuda_auth_htod": ("htod", "rcuda, --auth server (sealed lane, AES-256-GCM)"),
    "rcuda_auth_socket_htod": ("htod", "rcuda, --auth server, RCUDA_LINK=socket (ZeroMQ, CURVE)"),
    "raw_tcp_upload": ("htod", "raw TCP socket stream, upload"),
    "pyzmq_upload": ("htod", "bare pyzmq, CHUNK_SIZE frames, upload"),
    "rcuda_dtoh": ("dtoh", "rcuda cudaMemcpy device→host"),
    "rcuda_auth_dtoh": ("dtoh", "rcuda, --auth server (sealed lane, AES-256-GCM)"),
    "rcuda_auth_socket_dtoh": ("dtoh", "rcuda, --auth server, RCUDA_LINK=socket (ZeroMQ, CURVE)"),
    "raw_tcp_download": ("dtoh", "raw TCP socket stream, download"),
    "pyzmq_download": ("dtoh", "bare pyzmq, CHUNK_SIZE frames, download"),
}


def parameters(quick: bool) -> dict:
    from rcuda import protocol

    sizes = QUICK_SIZES if quick else FULL_SIZES
    budget = (32 if quick else 256) * MIB  # bytes per size, direction and round
    max_repeats = 20 if quick else 100
    return {"sizes": sizes, "repeats": {s: max(3, min(max_repeats, budget // s)) for s in sizes},
            # 4 interleaved rounds: the largest sizes get only 3 repeats a
            # round, and with 2 rounds one busy moment moved their medians by 10%.
            "rounds": 1 if quick else 4,
            # untimed small copies first, while the server starts its next spare (cuda/copy.cu)
            "warmup_ms": 300 if quick else 1000,
            "chunk_size": protocol.CHUNK_SIZE, "host_memory": "pageable"}


# ---------------------------------------------------------------- measurements


def copy_times(binary: Path, repeats: dict, warmup_ms: int, scratch: Path,
               env: dict | None = None) -> dict[str, dict[int, list]]:
    """cuda/copy.cu's own timings of its cudaMemcpy calls, by direction
    ("htod", "dtoh") and size: on the local GPU, or through rcuda with `env`."""
    out = scratch / "copy.csv"
    common.run_program([binary, out, warmup_ms, *(f"{s}:{r}" for s, r in repeats.items())], env=env)
    times: dict[str, dict[int, list]] = {"htod": {}, "dtoh": {}}
    for line in out.read_text().splitlines():
        direction, size, seconds = line.split(",")
        times[direction].setdefault(int(size), []).append(float(seconds))
    return times


def time_rcuda(binary: Path, server: common.Server, repeats: dict, warmup_ms: int,
               scratch: Path, variant: str = "rcuda", env: dict | None = None) -> dict[str, dict[int, list]]:
    server.wait_idle()
    times = copy_times(binary, repeats, warmup_ms, scratch, common.rcuda_environment(server.address, env))
    return {f"{variant}_{direction}": by_size for direction, by_size in times.items()}


def touched_buffer(size: int) -> memoryview:
    return memoryview(np.full(size, 7, np.uint8)).cast("B")


def time_raw_tcp(address: str, repeats: dict) -> dict[str, dict[int, list]]:
    host, port = address.rsplit(":", 1)
    buffer = touched_buffer(max(repeats))
    ack = memoryview(bytearray(1))
    times: dict[str, dict[int, list]] = {"raw_tcp_upload": {}, "raw_tcp_download": {}}
    clock = time.perf_counter
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for size, count in repeats.items():
            view = buffer[:size]
            for i in range(-1, count):  # one warm-up each way
                started = clock()
                sock.sendall(peers.STREAM_HEADER.pack(b"U", size, 0))
                sock.sendall(view)
                peers.recv_exactly(sock, ack)
                if i >= 0:
                    times["raw_tcp_upload"].setdefault(size, []).append(clock() - started)
            for i in range(-1, count):
                started = clock()
                sock.sendall(peers.STREAM_HEADER.pack(b"D", size, 0))
                peers.recv_exactly(sock, view)
                if i >= 0:
                    times["raw_tcp_download"].setdefault(size, []).append(clock() - started)
    return times


def time_pyzmq(endpoint: str, repeats: dict, chunk: int) -> dict[str, dict[int, list]]:
    import zmq

    from rcuda import protocol

    buffer = touched_buffer(max(repeats))
    times: dict[str, dict[int, list]] = {"pyzmq_upload": {}, "pyzmq_download": {}}
    clock = time.perf_counter
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        for size, count in repeats.items():
            view = buffer[:size]
            for i in range(-1, count):
                started = clock()
                sock.send(peers.STREAM_HEADER.pack(b"U", size, chunk), zmq.SNDMORE)
                sock.send_multipart(protocol.chunks(view, chunk), copy=False)
                sock.recv()
                if i >= 0:
                    times["pyzmq_upload"].setdefault(size, []).append(clock() - started)
            for i in range(-1, count):
                started = clock()
                sock.send(peers.STREAM_HEADER.pack(b"D", size, chunk))
                frames = sock.recv_multipart(copy=False)[1:]
                offset = 0
                for frame in frames:  # into the destination, as the client copies
                    data = frame.buffer
                    view[offset:offset + len(data)] = data
                    offset += len(data)
                if i >= 0:
                    times["pyzmq_download"].setdefault(size, []).append(clock() - started)
    finally:
        sock.close(linger=0)
    return times


def host_memcpy_gb_per_s(size: int = 64 * MIB) -> float:
    """This machine's memory copy rate: what each extra copy of the data costs."""
    src, dst = np.full(size, 1, np.uint8), np.empty(size, np.uint8)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
    return size / best / 1e9


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# ---------------------------------------------------------------- the benchmark


def run(ctx: Context) -> dict:
    params = parameters(ctx.quick)
    repeats, rounds = params["repeats"], params["rounds"]
    ctx.progress("building cuda/copy.cu")
    binary = common.compile_cuda("copy.cu")
    collected: dict[str, dict[int, list]] = {name: {} for name in LABELS}
    biggest = str(max(params["sizes"]))
    with tempfile.TemporaryDirectory(prefix="rcuda-bench-") as scratch, \
            common.sim_server() as server, \
            common.auth_sim_server() as auth_server, \
            common.peer("tcp-stream", biggest) as tcp_peer, \
            common.peer("zmq-stream", "tcp://127.0.0.1:0", biggest) as zmq_peer:
        measures = {
            "rcuda": lambda: time_rcuda(binary, server, repeats, params["warmup_ms"], Path(scratch)),
            "rcuda, --auth server": lambda: time_rcuda(binary, auth_server, repeats, params["warmup_ms"],
                                                       Path(scratch), "rcuda_auth", auth_server.client_env),
            "rcuda, --auth server, ZeroMQ socket": lambda: time_rcuda(
                binary, auth_server, repeats, params["warmup_ms"], Path(scratch), "rcuda_auth_socket",
                dict(auth_server.client_env, RCUDA_LINK="socket")),
            "raw TCP stream": lambda: time_raw_tcp(tcp_peer.address, repeats),
            "bare pyzmq": lambda: time_pyzmq(zmq_peer.address, repeats, params["chunk_size"]),
        }
        for r in range(rounds):
            for label, measure in measures.items():
                ctx.progress(f"round {r + 1}/{rounds}: {label}, {len(repeats)} sizes up to "
                             f"{max(repeats) // MIB} MiB, both directions")
                for name, by_size in measure().items():
                    for size, seconds in by_size.items():
                        collected[name].setdefault(size, []).extend(seconds)
    series = {name: {"direction": LABELS[name][0], "label": LABELS[name][1],
                     "points": [_point(size, collected[name][size]) for size in params["sizes"]]}
              for name in LABELS}
    ctx.progress("host memcpy rate; AES-256-GCM's own rate")
    return {"parameters": {**params, "repeats": {str(k): v for k, v in repeats.items()}},
            "series": series, "host_memcpy_gb_per_s": round(host_memcpy_gb_per_s(), 2),
            "cipher_gb_per_s": cipher_gb_per_s(), **ratios_and_goals(series)}


def cipher_gb_per_s(seconds: float = 0.3) -> dict:
    """AES-256-GCM on whole records (rcuda.wire.RECORD_MAX), one core:
    sealing and opening as the server does (the `cryptography` package's
    OpenSSL) and as the interposer does (the system's libcrypto.so.3,
    through ctypes: a few microseconds a record beside tens)."""
    import ctypes
    import os

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from rcuda.wire import RECORD_MAX, SEAL_TAG

    plain = bytearray(os.urandom(RECORD_MAX))
    sealed = bytearray(RECORD_MAX + SEAL_TAG)
    aead, key, nonce, head = AESGCM(os.urandom(32)), os.urandom(32), bytes(12), bytes(4)

    def rate(step) -> float:
        count, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            step()
            count += 1
        return round(count * RECORD_MAX / elapsed / 1e9, 2)

    crypto = ctypes.CDLL("libcrypto.so.3")
    crypto.EVP_CIPHER_CTX_new.restype = crypto.EVP_aes_256_gcm.restype = ctypes.c_void_p
    ctx, cipher = ctypes.c_void_p(crypto.EVP_CIPHER_CTX_new()), ctypes.c_void_p(crypto.EVP_aes_256_gcm())
    out, tag, n = (ctypes.c_char * len(sealed))(), (ctypes.c_char * SEAL_TAG)(), ctypes.c_int()
    source = (ctypes.c_char * RECORD_MAX).from_buffer(plain)

    def client_seal():
        crypto.EVP_EncryptInit_ex(ctx, None, None, None, nonce)
        crypto.EVP_EncryptUpdate(ctx, None, ctypes.byref(n), head, len(head))
        crypto.EVP_EncryptUpdate(ctx, out, ctypes.byref(n), source, RECORD_MAX)
        crypto.EVP_EncryptFinal_ex(ctx, out, ctypes.byref(n))
        crypto.EVP_CIPHER_CTX_ctrl(ctx, 0x10, SEAL_TAG, tag)  # EVP_CTRL_AEAD_GET_TAG

    crypto.EVP_EncryptInit_ex(ctx, cipher, None, key, None)
    result = {"record_bytes": RECORD_MAX, "client_libcrypto_seal": rate(client_seal)}
    crypto.EVP_CIPHER_CTX_free(ctx)
    result["server_cryptography_seal"] = rate(lambda: aead.encrypt_into(nonce, plain, head, sealed))
    result["server_cryptography_open"] = rate(lambda: aead.decrypt_into(nonce, sealed, head, plain))
    return result


def _point(size: int, seconds: list) -> dict:
    rates = np.array([size / s / 1e9 for s in seconds])
    return {"bytes": size, "repeats": len(seconds), "seconds_median": float(np.median(seconds)),
            "gb_per_s": round(float(np.median(rates)), 4), "gb_per_s_best": round(float(rates.max()), 4)}


def ratios_and_goals(series: dict) -> dict:
    def rate(name):
        return {p["bytes"]: p["gb_per_s"] for p in series[name]["points"]}

    ratios, goals = {}, {}
    for direction, rcuda, raw, zmq_ in (("htod", "rcuda_htod", "raw_tcp_upload", "pyzmq_upload"),
                                        ("dtoh", "rcuda_dtoh", "raw_tcp_download", "pyzmq_download")):
        ours, theirs, zmq_rates = rate(rcuda), rate(raw), rate(zmq_)
        ratios[f"{direction}_rcuda_over_raw_tcp"] = {str(s): round(ours[s] / theirs[s], 3) for s in ours}
        ratios[f"{direction}_pyzmq_over_raw_tcp"] = {str(s): round(zmq_rates[s] / theirs[s], 3) for s in ours}
        auth, auth_socket = rate(f"rcuda_auth_{direction}"), rate(f"rcuda_auth_socket_{direction}")
        ratios[f"{direction}_auth_over_lane"] = {str(s): round(auth[s] / ours[s], 3) for s in ours}
        ratios[f"{direction}_auth_over_raw_tcp"] = {str(s): round(auth[s] / theirs[s], 3) for s in ours}
        ratios[f"{direction}_auth_socket_over_raw_tcp"] = {str(s): round(auth_socket[s] / theirs[s], 3) for s in ours}
        big = [ours[s] / theirs[s] for s in ours if s >= GOAL_FROM_BYTES]
        if big:
            goals[f"{direction}: rcuda / raw socket, worst size >= 16 MiB"] = goal(min(big), ">=", 0.9)
        big_sealed = [auth[s] / theirs[s] for s in ours if s >= AUTH_GOAL_FROM_BYTES]
        if big_sealed:
            goals[f"{direction}: --auth sealed lane / raw socket, worst size >= 64 MiB"] = \
                goal(min(big_sealed), ">=", 0.7)
    return {"ratios": ratios, "goals": goals}


def plot(result: dict, out_dir: Path) -> list[Path]:
    from .. import charts

    path = out_dir / "micro_copy.png"
    charts.bandwidth(result, path)
    return [path]


def headline(result: dict) -> list[str]:
    lines = []
    for direction in ("htod", "dtoh"):
        ratios = result["ratios"][f"{direction}_rcuda_over_raw_tcp"]
        lines.append(f"{direction} rcuda / raw TCP by size: " +
                     ", ".join(f"{int(s) // KIB} KiB {r:.2f}" for s, r in ratios.items()))
        for key, what in (("auth_over_raw_tcp", "--auth sealed lane / raw TCP"),
                          ("auth_socket_over_raw_tcp", "--auth ZeroMQ CURVE socket / raw TCP")):
            ratios = result["ratios"].get(f"{direction}_{key}", {})
            if ratios:
                lines.append(f"{direction} {what}: " +
                             ", ".join(f"{int(s) // KIB} KiB {r:.2f}" for s, r in ratios.items()))
    lines += [f"{name}: {g['value']:.2f} ({g['goal']}, {'met' if g['met'] else 'not met'})"
              for name, g in result["goals"].items()]
    if "cipher_gb_per_s" in result:
        lines.append(f"AES-256-GCM on one core, GB/s: {result['cipher_gb_per_s']}")
    return lines
