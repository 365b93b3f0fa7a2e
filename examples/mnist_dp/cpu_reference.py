#!/usr/bin/env python3
"""The MLP of mnist_dp, trained on the CPU with numpy: the "CPU" row of the
benchmarks and a reference for the CUDA program's numbers.

Same model (784-256-128-10, ReLU), same initial weights and shuffles from the
same seed (SplitMix64, rng.h), same batches, cosine learning rate and SGD
update as `mnist_dp --sync host`, in float32.  With the same options it
prints the same per-epoch lines and a final `RESULT {json}` line; its losses
match the program's up to floating-point rounding.

    python examples/mnist_dp/cpu_reference.py [--data DIR] [--epochs N] ...
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
SHUFFLE_SALT = 0xD1B54A32D192ED03
HIDDEN = (256, 128)
CLASSES = 10
F32 = np.float32


class SplitMix64:
    """rng.h's generator; `draw(n)` returns its next n outputs at once."""

    def __init__(self, seed: int):
        self.state = seed & MASK

    def draw(self, n: int) -> np.ndarray:
        steps = np.arange(1, n + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            z = np.uint64(self.state) + steps * np.uint64(GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        self.state = (self.state + n * GOLDEN) & MASK
        return z ^ (z >> np.uint64(31))

    def uniform(self, n: int) -> np.ndarray:
        return (self.draw(n) >> np.uint64(40)).astype(np.float64) * 2.0 ** -24

    def shuffle(self, items: list) -> None:
        """Fisher-Yates from the last element down, as SplitMix64::shuffle."""
        n = len(items)
        if n < 2:
            return
        sizes = np.arange(n, 1, -1, dtype=np.uint64)
        picks = (self.draw(n - 1) % sizes).tolist()
        for i, j in zip(range(n - 1, 0, -1), picks):
            items[i], items[j] = items[j], items[i]


def initial_parameters(sizes, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """He-uniform weights (in x out, row-major, drawn in memory order), zero biases."""
    rng = SplitMix64(seed)
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        limit = math.sqrt(6.0 / fan_in)
        weights = ((2.0 * rng.uniform(fan_in * fan_out) - 1.0) * limit).astype(F32).reshape(fan_in, fan_out)
        layers.append((weights, np.zeros(fan_out, F32)))
    return layers


def forward(layers, x):
    """Activations of every layer; the last one is the logits."""
    acts = [x]
    for i, (w, b) in enumerate(layers):
        z = acts[-1] @ w + b
        acts.append(np.where(z > 0, z, F32(0)) if i < len(layers) - 1 else z)
    return acts


def softmax_xent(logits, labels):
    """(per-row loss, per-row hit, gradient of the loss sum): kernels.cuh's softmax_xent."""
    rows = np.arange(len(labels))
    best = logits.argmax(axis=1)
    shifted = logits - logits[rows, best][:, None]
    e = np.exp(shifted)
    total = e.sum(axis=1, dtype=F32)
    loss = np.log(total) - shifted[rows, labels]
    grad = e / total[:, None]
    grad[rows, labels] -= F32(1)
    return loss, best == labels, grad


def gradient_sums(layers, x, labels):
    acts = forward(layers, x)
    loss, hits, dz = softmax_xent(acts[-1], labels)
    grads = [None] * len(layers)
    for i in range(len(layers) - 1, -1, -1):
        if i < len(layers) - 1:
            dz = np.where(acts[i + 1] > 0, dz, F32(0))
        grads[i] = (acts[i].T @ dz, dz.sum(axis=0, dtype=np.float64).astype(F32))
        if i > 0:
            dz = dz @ layers[i][0].T
    return grads, float(loss.sum(dtype=np.float64)), float(hits.sum())


def sgd(param, velocity, grad_sum, scale, lr, momentum, decay):
    """The host update of trainer.h, in place, float32."""
    g = grad_sum * scale + decay * param
    velocity[...] = momentum * velocity + g
    param[...] = param - lr * velocity


def load(directory: Path, train_limit: int, test_limit: int):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # rcuda, from a source checkout
    from rcuda import demo_data

    directory = directory or demo_data.ensure_mnist5k()
    train_x, train_y, test_x, test_y = demo_data.load(directory)
    if train_limit:
        train_x, train_y = train_x[:train_limit], train_y[:train_limit]
    if test_limit:
        test_x, test_y = test_x[:test_limit], test_y[:test_limit]
    flat = lambda images: images.reshape(len(images), -1).astype(F32) / F32(255)  # noqa: E731
    return flat(train_x), train_y.astype(np.int64), flat(test_x), test_y.astype(np.int64), directory


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None, help="IDX directory (default: the 5k subset, as rcuda demo)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--log-steps", type=int, default=0)
    args = p.parse_args(argv)

    train_x, train_y, test_x, test_y, directory = load(args.data, args.train_limit, args.test_limit)
    sizes = (train_x.shape[1], *HIDDEN, CLASSES)
    layers = initial_parameters(sizes, args.seed)
    velocities = [(np.zeros_like(w), np.zeros_like(b)) for w, b in layers]
    shuffler = SplitMix64(args.seed ^ SHUFFLE_SALT)
    momentum, decay = F32(args.momentum), F32(args.weight_decay)
    n = len(train_x)
    print(f"cpu_reference: numpy; model mlp {'-'.join(map(str, sizes))}; {n} training and {len(test_x)} test "
          f"images from {directory}", flush=True)
    losses, accuracies, epoch_seconds = [], [], []
    started = time.perf_counter()
    steps = 0
    training = 0.0  # seconds of training, without the evaluations (as mnist_dp's train_seconds)
    for epoch in range(args.epochs):
        epoch_start = time.perf_counter()
        order = list(range(n))
        shuffler.shuffle(order)
        order = np.array(order)
        lr = F32(args.lr * 0.5 * (1.0 + math.cos(math.pi * epoch / args.epochs)))
        epoch_loss = epoch_hits = step_loss = 0.0
        step_rows = 0
        for s, first in enumerate(range(0, n, args.batch)):
            rows = order[first:first + args.batch]
            grads, loss, hits = gradient_sums(layers, train_x[rows], train_y[rows])
            scale = F32(1) / F32(len(rows))
            for (w, b), (vw, vb), (gw, gb) in zip(layers, velocities, grads):
                sgd(w, vw, gw, scale, lr, momentum, decay)
                sgd(b, vb, gb, scale, lr, momentum, decay)
            epoch_loss += loss
            epoch_hits += hits
            step_loss += loss
            step_rows += len(rows)
            steps += 1
            if args.log_steps and (s + 1) % args.log_steps == 0:
                print(f"step {epoch + 1}.{s + 1} loss {step_loss / step_rows:.6f}", flush=True)
                step_loss, step_rows = 0.0, 0
        train_seconds = time.perf_counter() - epoch_start
        training += train_seconds
        loss, hits, _ = softmax_xent(forward(layers, test_x)[-1], test_y)
        test_loss, test_accuracy = float(loss.mean(dtype=np.float64)), float(hits.mean())
        seconds = time.perf_counter() - epoch_start
        losses.append(epoch_loss / n)
        accuracies.append(test_accuracy)
        epoch_seconds.append(seconds)
        print(f"epoch {epoch + 1}/{args.epochs}  loss {epoch_loss / n:.6f}  train {100 * epoch_hits / n:.2f}%  "
              f"test {100 * test_accuracy:.2f}% (loss {test_loss:.4f})  time {seconds:.2f} s  "
              f"{n / max(train_seconds, 1e-9):.0f} samples/s", flush=True)
    total = time.perf_counter() - started
    result = {
        "program": "cpu_reference", "model": "mlp", "sync": "none", "devices": 0, "device_names": ["CPU (numpy)"],
        "emulated": False, "parameters": int(sum(w.size + b.size for w, b in layers)), "epochs": args.epochs,
        "batch": args.batch, "steps": steps, "seed": args.seed, "train_samples": n, "test_samples": len(test_x),
        "test_accuracy": accuracies[-1], "test_loss": test_loss, "train_loss": losses[-1],
        "losses": [round(v, 6) for v in losses], "test_accuracies": accuracies, "epoch_seconds": epoch_seconds,
        "train_seconds": training, "total_seconds": total,
        "samples_per_second": n * args.epochs / max(training, 1e-9),
    }
    print(f"final: test accuracy {100 * accuracies[-1]:.2f}%, {training:.1f} s training on the CPU (numpy)")
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
