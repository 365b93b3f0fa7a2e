"""The MNIST demo (examples/mnist_dp, `rcuda demo`).

The program is built with nvcc exactly as the demo builds it and runs
unmodified through `rcuda run` against real sim servers using the example's
numpy kernels.  Without a GPU its CUDA kernels are checked on the CPU: their
thread bodies against reference loops (--cpu-check) and, in whole training
runs (--emulate), against the numpy reference and the sim kernels.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import RCUDA, requires_nvcc, run_program, start_server

pytestmark = requires_nvcc

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "mnist_dp"
SIM_KERNELS = EXAMPLE / "sim_kernels.py"
CPU_REFERENCE = EXAMPLE / "cpu_reference.py"
RUN_TIMEOUT = 300
SHORT = ["--train-limit", "1024", "--test-limit", "500", "--epochs", "2", "--log-steps", "4"]


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory) -> Path:
    """XDG_CACHE_HOME for the demo runs: never the user's own cache."""
    return tmp_path_factory.mktemp("cache-home")


@pytest.fixture(scope="module")
def mnist_binary(cache_home) -> Path:
    """examples/mnist_dp built by the demo's own build step, into the cache the demo runs use."""
    from rcuda import demo
    return demo.build_example(lambda text: None, cache=cache_home / "rcuda")


@pytest.fixture
def demo_env(cache_home, mnist_binary) -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home))
    env.pop("RCUDA_SERVERS", None)
    return env


@pytest.fixture(scope="module")
def mnist_data(tmp_path_factory) -> Path:
    from rcuda import demo_data
    return demo_data.ensure_mnist5k(tmp_path_factory.mktemp("mnist5k"))


@pytest.fixture(scope="module")
def four_servers():
    """Four sim servers with the example's kernels."""
    servers = []
    try:
        for _ in range(4):
            servers.append(start_server("--backend", "sim", "--kernels", str(SIM_KERNELS)))
        yield servers
    finally:
        for server in servers:
            server.stop()


# ---------------------------------------------------------------- reading the output


def parse(stdout: str) -> dict:
    """Step losses, epoch lines and the RESULT record of a run's output."""
    steps = {m[1]: float(m[2]) for m in re.finditer(r"^step (\S+) loss (\S+)$", stdout, re.M)}
    epochs = [(float(m[1]), float(m[2])) for m in
              re.finditer(r"^epoch \d+/\d+  loss (\S+)  .*?test (\S+)%", stdout, re.M)]
    results = [json.loads(line[len("RESULT "):]) for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert results, f"no RESULT line in:\n{stdout}"
    return {"steps": steps, "epochs": epochs, "result": results[-1]}


def assert_same_curve(a: dict, b: dict, rel: float = 1e-4) -> None:
    """Same step losses and epoch losses (up to rounding), same test accuracy (within a sample or two)."""
    assert a["steps"] and a["steps"].keys() == b["steps"].keys()
    for step, loss in a["steps"].items():
        assert b["steps"][step] == pytest.approx(loss, rel=rel), f"step {step}"
    assert len(a["epochs"]) == len(b["epochs"]) > 0
    for (loss_a, acc_a), (loss_b, acc_b) in zip(a["epochs"], b["epochs"]):
        assert loss_b == pytest.approx(loss_a, rel=rel)
        assert abs(acc_a - acc_b) <= 0.21  # percent: at most two test images of 1000 may flip


def run_direct(binary: Path, *args: str, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout)


def run_reference(data: Path, *args: str) -> dict:
    result = subprocess.run([sys.executable, str(CPU_REFERENCE), "--data", str(data), *args], capture_output=True,
                            text=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stdout + result.stderr
    return parse(result.stdout)


def run_remote(binary: Path, servers, data: Path, *args: str) -> dict:
    result = run_program(binary, servers, "--data", str(data), *args, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stdout + result.stderr
    return parse(result.stdout)


# ---------------------------------------------------------------- the kernels without a GPU


def test_cpu_check_of_every_kernel(mnist_binary):
    result = run_direct(mnist_binary, "--cpu-check")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = re.search(r"cpu-check: (\d+) passed, (\d+) failed", result.stdout)
    assert summary and int(summary[2]) == 0 and int(summary[1]) >= 60, result.stdout
    for kernel in ("gemm_nn", "gemm_nt", "gemm_tn", "gather_batch", "bias_activation", "relu_backward",
                   "softmax_xent", "sum_columns", "add_into", "sgd_momentum", "conv2d_forward",
                   "conv2d_backward_input", "conv2d_backward_weight", "maxpool2_forward", "maxpool2_backward",
                   "gradients against finite differences"):
        assert f"ok    {kernel}" in result.stdout or f"{kernel} (" in result.stdout, kernel


def test_emulated_cuda_kernels_train_like_the_numpy_reference(mnist_binary, mnist_data):
    """The CUDA kernels' own code, run on the CPU in the real training loop
    (2 emulated devices, host sync), follows the numpy reference."""
    reference = run_reference(mnist_data, *SHORT)
    emulated = run_direct(mnist_binary, "--emulate", "--devices", "2", "--data", str(mnist_data), *SHORT)
    assert emulated.returncode == 0, emulated.stdout + emulated.stderr
    assert_same_curve(reference, parse(emulated.stdout))


def test_emulated_peer_sync_matches_host_sync(mnist_binary, mnist_data):
    """--sync peer's path (peer copies, add_into and sgd_momentum on GPU0) on 3 emulated devices."""
    runs = []
    for sync in ("host", "peer"):
        result = run_direct(mnist_binary, "--emulate", "--devices", "3", "--sync", sync, "--data", str(mnist_data),
                            *SHORT)
        assert result.returncode == 0, result.stdout + result.stderr
        runs.append(parse(result.stdout))
    assert_same_curve(*runs)


# ---------------------------------------------------------------- through rcuda, on sim servers


def test_one_two_four_devices_follow_the_same_loss_curve(mnist_binary, mnist_data, four_servers):
    """Data parallelism is exact: the same seed and global batch give the
    same loss curve on 1, 2 and 4 remote GPUs (shards sized by measured
    throughput, so the splits differ), and the numpy reference's."""
    runs = {n: run_remote(mnist_binary, four_servers, mnist_data, "--devices", str(n), *SHORT) for n in (1, 2, 4)}
    for n, run in runs.items():
        assert run["result"]["devices"] == n
        assert len(run["result"]["shares"]) == n and sum(run["result"]["shares"]) == pytest.approx(1.0, abs=1e-4)
        assert len(run["steps"]) == 8  # 2 epochs x 16 steps, logged every 4
    assert_same_curve(runs[1], runs[2])
    assert_same_curve(runs[1], runs[4])
    assert_same_curve(run_reference(mnist_data, *SHORT), runs[4])


def test_static_split_gives_equal_shares(mnist_binary, mnist_data, four_servers):
    run = run_remote(mnist_binary, four_servers, mnist_data, "--static-split", "--epochs", "1",
                     "--train-limit", "256", "--test-limit", "100")
    assert run["result"]["shares"] == [0.25, 0.25, 0.25, 0.25]


def test_host_and_peer_sync_agree_on_sim_servers(mnist_binary, mnist_data, four_servers):
    host = run_remote(mnist_binary, four_servers, mnist_data, "--sync", "host", *SHORT)
    peer = run_remote(mnist_binary, four_servers, mnist_data, "--sync", "peer", *SHORT)
    assert peer["result"]["sync"] == "peer"
    assert_same_curve(host, peer)


def test_cnn_sim_kernels_match_the_cuda_kernels(mnist_binary, mnist_data, four_servers):
    """The CNN's numpy kernels on sim servers and its CUDA kernels emulated
    on the CPU give the same training."""
    args = ["--model", "cnn", "--train-limit", "512", "--test-limit", "200", "--epochs", "1", "--log-steps", "2"]
    remote = run_remote(mnist_binary, four_servers[:2], mnist_data, *args)
    emulated = run_direct(mnist_binary, "--emulate", "--data", str(mnist_data), *args)
    assert emulated.returncode == 0, emulated.stdout + emulated.stderr
    assert remote["result"]["model"] == "cnn" and remote["result"]["devices"] == 2
    assert_same_curve(remote, parse(emulated.stdout))
    losses = list(remote["steps"].values())
    assert losses[-1] < losses[0] - 0.3 and remote["result"]["test_accuracy"] > 0.3  # it learns


def local_gpu_missing() -> str | None:
    """Why the program cannot run on a local GPU here (None: it can)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no local GPU (nvidia-smi not found)"
    listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60).stdout
    if "GPU 0" not in listing:
        return "no local GPU (nvidia-smi -L lists none)"
    if importlib.util.find_spec("cupy") is None:
        return "the cupy backend needs cupy (pip install -e '.[cupy]')"
    return None


def test_same_binary_same_training_on_a_local_gpu_and_through_rcuda(mnist_binary, mnist_data):
    """On a machine with a GPU: the binary run locally and through rcuda on
    a cupy server (the same GPU) trains identically, and like the numpy
    reference."""
    reason = local_gpu_missing()
    if reason:
        pytest.skip(reason)
    local = run_direct(mnist_binary, "--devices", "1", "--data", str(mnist_data), *SHORT)
    assert local.returncode == 0, local.stdout + local.stderr
    local = parse(local.stdout)
    assert "rcuda sim" not in json.dumps(local["result"]["device_names"])
    server = start_server("--backend", "cupy", "--devices", "1")
    try:
        remote = run_remote(mnist_binary, server, mnist_data, "--devices", "1", *SHORT)
    finally:
        server.stop()
    assert remote["result"]["device_names"] == local["result"]["device_names"]
    assert_same_curve(local, remote, rel=1e-6)
    assert_same_curve(run_reference(mnist_data, *SHORT), remote)


# ---------------------------------------------------------------- the sim kernels on their own


def load_sim_kernels(monkeypatch, **environment):
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("mnist_sim_kernels_under_test", SIM_KERNELS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeLaunch:
    """The plugin interface's `launch` over numpy arrays: pointer i*2**20 is array i."""

    def __init__(self, grid, block, params, arrays, name="kernel"):
        self.grid, self.block, self._params, self._arrays = tuple(grid), tuple(block), params, arrays
        self.demangled = f"{name}(...)"

    def param(self, index, fmt):
        return self._params[index]

    def array(self, ptr, dtype, shape):
        base = self._arrays[ptr >> 20]
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        count = int(np.prod(shape))
        flat = base.reshape(-1).view(np.uint8)[ptr & 0xFFFFF:].view(dtype)[:count]
        return flat.reshape(shape)



def test_sim_gemm_writes_only_the_tiles_of_its_grid_and_checks_its_block(monkeypatch):
    kernels = load_sim_kernels(monkeypatch)
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((20, 7)).astype(np.float32), rng.standard_normal((7, 20)).astype(np.float32)
    C = np.full((20, 20), np.nan, np.float32)
    params = [0 << 20, 1 << 20, 2 << 20, 20, 20, 7]
    kernels.KERNELS["gemm_nn"](FakeLaunch((1, 1, 1), (16, 16, 1), params, [A, B, C]))
    np.testing.assert_allclose(C[:16, :16], (A @ B)[:16, :16], rtol=1e-5)
    assert np.isnan(C[16:]).all() and np.isnan(C[:, 16:]).all()  # blocks not launched write nothing
    kernels.KERNELS["gemm_nn"](FakeLaunch((2, 2, 1), (16, 16, 1), params, [A, B, C]))
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)
    with pytest.raises(AssertionError):  # the CUDA kernel asserts its block shape too
        kernels.KERNELS["gemm_nn"](FakeLaunch((2, 2, 1), (32, 8, 1), params, [A, B, C]))


def test_sim_sum_columns_and_pooling_follow_the_kernels(monkeypatch):
    kernels = load_sim_kernels(monkeypatch)
    m = np.arange(5 * 3 * 2, dtype=np.float32).reshape(5, 3, 2)
    out = np.full(3, np.nan, np.float32)
    kernels.KERNELS["sum_columns"](FakeLaunch((2, 1, 1), (256, 1, 1), [0, 5, 3, 2, 1 << 20], [m, out]))
    np.testing.assert_array_equal(out[:2], m.sum(axis=(0, 2))[:2])
    assert np.isnan(out[2])  # one block per column: column 2 had none
    x = np.array([[[1, 3, 3, 0], [3, 2, 1, 3], [9, 9, 9, 9]]], np.float32)  # 3 x 4: the odd last row is dropped
    dy = np.array([[[10, 20]]], np.float32)
    y, dx = np.zeros((1, 1, 2), np.float32), np.full((1, 3, 4), np.nan, np.float32)
    kernels.KERNELS["maxpool2_forward"](FakeLaunch((1, 1, 1), (256, 1, 1), [0, 1 << 20, 1, 3, 4], [x, y]))
    kernels.KERNELS["maxpool2_backward"](FakeLaunch((1, 1, 1), (256, 1, 1), [0, 1 << 20, 2 << 20, 1, 3, 4],
                                                    [x, dy, dx]))
    np.testing.assert_array_equal(y, [[[3, 3]]])
    # ties go to the first maximum in (0,0), (0,1), (1,0), (1,1) order
    np.testing.assert_array_equal(dx, [[[0, 10, 20, 0], [0, 0, 0, 0], [0, 0, 0, 0]]])


def test_sim_costs_model_gpu_time_only_when_asked(monkeypatch):
    monkeypatch.delenv("RCUDA_SIM_GFLOPS", raising=False)
    assert load_sim_kernels(monkeypatch).COSTS == {}
    kernels = load_sim_kernels(monkeypatch, RCUDA_SIM_GFLOPS="100", RCUDA_SIM_GBPS="1000", RCUDA_SIM_LAUNCH_US="5")
    assert set(kernels.COSTS) == set(kernels.KERNELS)
    launch = FakeLaunch((64, 64, 1), (16, 16, 1), [0, 0, 0, 1000, 1000, 1000], [], name="gemm_nn")
    flops, moved = 2e9, 12e6
    assert kernels.COSTS["gemm_nn"](launch) == pytest.approx(5e-6 + flops / 100e9 + moved / 1000e9)


# ---------------------------------------------------------------- the IDX reader


def write_idx(path: Path, magic: bytes, dims, payload: bytes) -> None:
    path.write_bytes(magic + b"".join(int(d).to_bytes(4, "big") for d in dims) + payload)


@pytest.fixture
def idx_dir(tmp_path, mnist_data) -> Path:
    """A copy of the test data, to be spoiled."""
    for name in os.listdir(mnist_data):
        shutil.copy(mnist_data / name, tmp_path / name)
    return tmp_path


BAD_FILES = {
    "truncated images": ("train-images-idx3-ubyte", lambda p: p.write_bytes(p.read_bytes()[:-100]),
                         r"train-images-idx3-ubyte: truncated: the header says 4000x28x28 = 3136000 bytes of data, "
                         r"the file holds 3135900"),
    "truncated header": ("t10k-labels-idx1-ubyte", lambda p: p.write_bytes(p.read_bytes()[:6]),
                         r"t10k-labels-idx1-ubyte: truncated: 6 bytes"),
    "wrong magic": ("train-labels-idx1-ubyte", lambda p: p.write_bytes(b"\x1f\x8b" + p.read_bytes()[2:]),
                    r"train-labels-idx1-ubyte: not an IDX file: it starts with 1f 8b 08 01"),
    "wrong type": ("t10k-images-idx3-ubyte", lambda p: p.write_bytes(b"\x00\x00\x0d\x03" + p.read_bytes()[4:]),
                   r"IDX data of type 0x0d; only unsigned bytes"),
    "labels for images": ("train-images-idx3-ubyte",
                          lambda p: shutil.copy(p.with_name("train-labels-idx1-ubyte"), p),
                          r"train-images-idx3-ubyte: 1 dimensions, expected 3"),
    "extra bytes": ("t10k-labels-idx1-ubyte", lambda p: p.write_bytes(p.read_bytes() + b"\x00"),
                    r"1001 bytes of data, but the header says 1000"),
    "count mismatch": ("t10k-labels-idx1-ubyte", lambda p: write_idx(p, b"\x00\x00\x08\x01", [999], bytes(999)),
                       r"holds 1000 images but .*t10k-labels-idx1-ubyte holds 999 labels"),
    "not a digit": ("train-labels-idx1-ubyte", lambda p: write_idx(p, b"\x00\x00\x08\x01", [4000], b"\x0c" * 4000),
                    r"label 12 of item 0 is not a digit"),
    "missing": ("t10k-images-idx3-ubyte", lambda p: p.unlink(), r"no t10k-images-idx3-ubyte \(or t10k-images"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_idx_reader_refuses_bad_files_clearly(mnist_binary, idx_dir, case):
    name, spoil, message = BAD_FILES[case]
    spoil(idx_dir / name)
    result = run_direct(mnist_binary, "--emulate", "--data", str(idx_dir), "--epochs", "1", timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert re.search(r"^mnist_dp: error: .*" + message, result.stderr, re.M), result.stderr
    assert "RESULT" not in result.stdout


@pytest.mark.skipif(not any(h.is_file() for h in (Path("/usr/include/zlib.h"), Path("/usr/local/include/zlib.h"))),
                    reason="zlib.h not found: the program is built without gzip support")
def test_idx_reader_takes_gzipped_files_and_refuses_a_truncated_one(mnist_binary, idx_dir):
    for name in os.listdir(idx_dir):
        path = idx_dir / name
        path.with_name(name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    args = ["--emulate", "--data", str(idx_dir), "--epochs", "1", "--train-limit", "128", "--test-limit", "50"]
    result = run_direct(mnist_binary, *args, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert parse(result.stdout)["result"]["train_samples"] == 128
    spoiled = idx_dir / "train-images-idx3-ubyte.gz"
    spoiled.write_bytes(spoiled.read_bytes()[:5000])
    result = run_direct(mnist_binary, *args, timeout=60)
    assert result.returncode == 2
    assert "train-images-idx3-ubyte.gz: cannot decompress" in result.stderr


# ---------------------------------------------------------------- rcuda demo


def closed(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((host, int(port))) != 0


def test_demo_end_to_end_starts_and_stops_its_servers(tmp_path):
    """`rcuda demo` from scratch (empty cache: it builds and converts the
    data itself), a short run on the four servers it starts."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    env.pop("RCUDA_SERVERS", None)
    result = subprocess.run([*RCUDA, "demo", "--epochs", "1", "--", "--train-limit", "512", "--test-limit", "200"],
                            capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "building" in out and (tmp_path / "rcuda" / "mnist5k" / "train-images-idx3-ubyte").is_file()
    started = re.search(r"started 4 local rcuda servers \((?:sim|cupy) backend\): (\S+), (\S+), (\S+), (\S+)$", out,
                        re.M)  # cupy where there is a GPU
    assert started, out
    assert re.search(r"^mnist_dp: 4 GPU\(s\)", out, re.M)
    assert re.search(r"^epoch 1/1  loss \S+  train \S+%  test \S+%", out, re.M)
    assert re.search(r"^shares \(by measured throughput\): (\S+% ){3}\S+%$", out, re.M)
    assert re.search(r"^rcuda demo: test accuracy \d+\.\d\d% after 1 epoch\(s\) \(mlp, 512 training / 200 test "
                     r"images\); \S+ s of training on 4 remote GPU\(s\)", out, re.M), out
    assert "RESULT" not in out  # turned into the summary
    assert all(closed(address) for address in started.groups())


def start_demo(env: dict, *args: str) -> subprocess.Popen:
    # Its own process group, with Ctrl-C's default action (a background job may inherit SIGINT ignored).
    return subprocess.Popen([*RCUDA, "demo", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def servers_of(demo: subprocess.Popen, until: str) -> list[str]:
    """The addresses of the demo's servers, reading its output up to a line starting with `until`."""
    addresses = []
    for line in demo.stdout:
        started = re.search(r"started 4 local rcuda servers \(\w+ backend\): (.*)$", line)
        if started:
            addresses = started[1].split(", ")
        if line.startswith(until):
            return addresses
    raise AssertionError(f"the demo ended before printing {until!r}: {demo.stderr.read()}")


def test_demo_stops_its_servers_on_ctrl_c(demo_env):
    demo = start_demo(demo_env, "--epochs", "50")
    try:
        addresses = servers_of(demo, "epoch 1/50")
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        _, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    assert demo.returncode == 130, err
    assert "interrupted; the servers it started are stopped" in err
    assert len(addresses) == 4 and all(closed(address) for address in addresses)


def test_demo_stops_its_servers_when_the_program_fails(demo_env):
    demo = start_demo(demo_env, "--", "--no-such-option")
    try:
        addresses = servers_of(demo, "rcuda demo: training")
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    assert demo.returncode == 2
    assert "mnist_dp: error: unknown option --no-such-option" in err
    assert "rcuda demo: error: the training program failed (exit status 2)" in err
    assert len(addresses) == 4 and all(closed(address) for address in addresses)


def test_default_demo_reaches_93_percent_on_the_held_out_split(four_servers, demo_env):
    """The README's claim: the default demo (all 4000 training images,
    default epochs) reaches >= 93% test accuracy.  RCUDA_SERVERS set: the
    demo uses these servers instead of starting its own."""
    env = dict(demo_env, RCUDA_SERVERS=",".join(s.address for s in four_servers))
    result = subprocess.run([*RCUDA, "demo"], capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 rcuda server(s) from RCUDA_SERVERS" in result.stdout
    summary = re.search(r"rcuda demo: test accuracy (\S+)% after (\d+) epoch\(s\) \(mlp, 4000 training / 1000 test",
                        result.stdout)
    assert summary, result.stdout
    assert float(summary[1]) >= 93.0


def test_demo_without_nvcc_says_what_to_install(monkeypatch, capsys):
    from rcuda import cli, demo
    monkeypatch.setattr(demo.shutil, "which", lambda *args, **kwargs: None)
    assert cli.main(["demo"]) == 2
    error = capsys.readouterr().err
    assert "rcuda demo: error:" in error and "nvcc" in error and "CUDA 13 toolkit" in error


def netns_unavailable() -> str | None:
    from rcuda.netns import unavailable_reason
    return unavailable_reason()


def test_demo_across_four_network_namespace_hosts(demo_env):
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    result = subprocess.run([*RCUDA, "demo", "--netns", "--epochs", "1", "--", "--train-limit", "256",
                             "--test-limit", "100"], capture_output=True, text=True, timeout=RUN_TIMEOUT,
                            env=demo_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rcuda servers in network-namespace hosts" in result.stdout
    assert re.search(r"^mnist_dp: 4 GPU\(s\)", result.stdout, re.M)
    assert "rcuda demo: test accuracy" in result.stdout
