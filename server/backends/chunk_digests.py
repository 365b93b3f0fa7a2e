"""Digests of device memory, chunk by chunk: how a server tells which chunks
of a mirror changed since the client last had them (server/mirror_views.py)
without copying the unchanged ones off the GPU.

`on_host`: xxHash's XXH3 of each chunk of bytes the host holds (the sim's
device memory, or bytes read from a GPU).

`GpuDigests`: on a GPU, each 8-byte word is multiplied by an odd weight of
its place in the chunk, mixed (xor-shift, multiply, xor-shift), and the
mixed words of a chunk are summed modulo 2**64, in one reduction that reads
the chunk once at the GPU's memory speed (a 1 GiB mirror in about a
millisecond, against a third of a second to copy it to the host).  Every
step is a bijection of the word, so a change of one word always changes the
digest; changes of several collide with a chance of about 2**-64.
`reference` is the same function in numpy: the GPU's kernel is checked
against it at its first use, and where they disagree the server digests on
the host instead (correct, and as slow as before).
"""
from __future__ import annotations

import numpy as np
import xxhash

GOLDEN = 0x9E3779B97F4A7C15
_MIX = f"""
__device__ unsigned long long rcuda_mix(unsigned long long x) {{
    x ^= x >> 31;
    x *= {GOLDEN:#x}ULL;
    x ^= x >> 29;
    return x;
}}
"""


def on_host(data, chunk: int) -> np.ndarray:
    """One uint64 digest per `chunk` bytes of `data` (the last may be short)."""
    view = memoryview(data).cast("B")
    return np.fromiter((xxhash.xxh3_64_intdigest(view[at:at + chunk]) for at in range(0, len(view), chunk)),
                       np.uint64, -(-len(view) // chunk))


def weights(words: int) -> np.ndarray:
    """The odd weight of each word's place in a chunk (fixed: digests of one
    server are compared with each other only)."""
    return np.frombuffer(np.random.default_rng(0x72637564).bytes(8 * words), np.uint64) | np.uint64(1)


def reference(words: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The GPU's digests in numpy: `words` is (chunks, words per chunk) uint64."""
    x = words * weight  # uint64 arrays wrap modulo 2**64
    x ^= x >> np.uint64(31)
    x *= np.uint64(GOLDEN)
    x ^= x >> np.uint64(29)
    return x.sum(axis=1, dtype=np.uint64)


class GpuDigests:
    """The digests of whole chunks of device memory, computed on the GPU with
    CuPy (the cupy backend's; the device must be current)."""

    def __init__(self, chunk: int):
        import cupy

        assert chunk % 8 == 0
        self._cupy = cupy
        self.chunk = chunk
        self._weight = cupy.asarray(weights(chunk // 8))
        self._kernel = cupy.ReductionKernel("uint64 word, uint64 weight", "uint64 digest",
                                            "rcuda_mix(word * weight)", "a + b", "digest = a", "0",
                                            "rcuda_chunk_digest", preamble=_MIX)
        self._check()

    def __call__(self, ptr: int, chunks: int, device: int, stream: int) -> np.ndarray:
        """The digests of the `chunks` whole chunks at address `ptr` of GPU
        `device`, once the work before them in `stream` (a runtime stream
        handle) is done."""
        cupy = self._cupy
        memory = cupy.cuda.UnownedMemory(ptr, chunks * self.chunk, None, device)
        words = cupy.ndarray((chunks, self.chunk // 8), cupy.uint64, cupy.cuda.MemoryPointer(memory, 0))
        with cupy.cuda.ExternalStream(stream):
            return self._kernel(words, self._weight, axis=1).get()

    def _check(self) -> None:
        """The kernel computes `reference`'s function (raises where not)."""
        cupy = self._cupy
        host = np.frombuffer(np.random.default_rng(1).bytes(2 * self.chunk), np.uint64).reshape(2, -1)
        gpu = self._kernel(cupy.asarray(host), self._weight, axis=1).get()
        expected = reference(host, weights(self.chunk // 8))
        if not np.array_equal(gpu, expected):
            raise RuntimeError(f"the GPU's chunk digests {gpu} are not the reference's {expected}")
