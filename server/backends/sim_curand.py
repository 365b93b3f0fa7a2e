"""cuRAND's host API generators on the sim backend, with numpy.

One `SimGenerator` is one curandGenerator_t, device or host
(curandCreateGenerator and curandCreateGeneratorHost both make one): a
program that compares the two sees the same numbers, as cuRAND promises.

The sequences are NOT bit-identical to cuRAND's; they have cuRAND's
distributions, ranges, lengths, errors and repeatability:

  - Pseudo-random types (XORWOW, MRG32K3A, MTGP32, MT19937, PHILOX4_32_10)
    all draw 32-bit words from Philox4x32-10 (Salmon et al., the algorithm
    of cuRAND's PHILOX4_32_10) keyed by the seed, each type on its own
    counter stream.  Word i of a seed's stream is computed directly, so an
    offset is a jump, not a replay.  cuRAND spreads its sequences over many
    GPU threads in an order of its own; the sim's is the plain stream.
  - Quasi-random types are the Sobol' sequence in Gray-code order from
    Joe and Kuo's direction numbers (new-joe-kuo-6.21201, as scipy.stats.qmc
    has them: bit for bit cuRAND's CURAND_DIRECTION_VECTORS_32_JOEKUO6 and
    _64_JOEKUO6, checked against libcurand 10.4), dimension-major as
    CURAND_ORDERING_QUASI_DEFAULT lays them out.  The scrambled types
    scramble as cuRAND does, with tables of rcuda's own (cuRAND's are
    NVIDIA's data): each dimension's direction vectors multiplied by a
    random unit lower-triangular bit matrix (Matousek's linear scrambling:
    a vector keeps its leading bit, its lower bits are mixed), and every
    point XORed with the dimension's scramble constant (a digital shift),
    so point 0 is the constant.  Both keep the Sobol' sequence's
    stratification (each of the first 2^k points of a dimension in its own
    interval of width 2^-k).  These are the tables curandGetDirectionVectors*
    (the SCRAMBLED sets) and curandGetScrambleConstants* answer on the sim
    (`table`), so a kernel that starts cuRAND's device-API scrambled Sobol'
    from them follows the host API's sequence; the 32-bit tables are the
    64-bit ones' upper halves, as cuRAND's are.
  - Conversions are cuRAND's: uniform floats x * 2^-32 + 2^-33 in float32,
    so in (0, 1]; uniform doubles from 53 bits of two words; normals by
    Box-Muller from pairs (pseudo, hence even lengths) or the inverse normal
    CDF (quasi); log-normals exp(normal); Poisson by the inverse CDF,
    whatever method curandGeneratePoissonMethod names.

Position: pseudo generators count 32-bit words (a double takes two), quasi
generators count points per dimension.  As with cuRAND (checked against
its host generators): the offset sets the position; a new seed or ordering
goes on from the numbers made so far; MTGP32 takes no offset.  New
dimensions restart a quasi-random sequence at the offset.  Ordering does
not change the sim's numbers."""
from __future__ import annotations

import functools

import numpy as np
from scipy import special, stats

from rcuda import curand_calls
from rcuda.library_errors import LibraryError

CURAND_RNG_PSEUDO_DEFAULT = 100
CURAND_RNG_PSEUDO_XORWOW = 101
CURAND_RNG_PSEUDO_MRG32K3A = 121
CURAND_RNG_PSEUDO_MTGP32 = 141
CURAND_RNG_PSEUDO_MT19937 = 142
CURAND_RNG_PSEUDO_PHILOX4_32_10 = 161
CURAND_RNG_QUASI_DEFAULT = 200
CURAND_RNG_QUASI_SOBOL32 = 201
CURAND_RNG_QUASI_SCRAMBLED_SOBOL32 = 202
CURAND_RNG_QUASI_SOBOL64 = 203
CURAND_RNG_QUASI_SCRAMBLED_SOBOL64 = 204

PSEUDO = (CURAND_RNG_PSEUDO_XORWOW, CURAND_RNG_PSEUDO_MRG32K3A, CURAND_RNG_PSEUDO_MTGP32,
          CURAND_RNG_PSEUDO_MT19937, CURAND_RNG_PSEUDO_PHILOX4_32_10)
QUASI = (CURAND_RNG_QUASI_SOBOL32, CURAND_RNG_QUASI_SCRAMBLED_SOBOL32, CURAND_RNG_QUASI_SOBOL64,
         CURAND_RNG_QUASI_SCRAMBLED_SOBOL64)
QUASI_64 = (CURAND_RNG_QUASI_SOBOL64, CURAND_RNG_QUASI_SCRAMBLED_SOBOL64)
DEFAULTS = {CURAND_RNG_PSEUDO_DEFAULT: CURAND_RNG_PSEUDO_XORWOW, CURAND_RNG_QUASI_DEFAULT: CURAND_RNG_QUASI_SOBOL32}

CURAND_ORDERING_PSEUDO_BEST = 100
CURAND_ORDERING_PSEUDO_DEFAULT = 101
CURAND_ORDERING_PSEUDO_SEEDED = 102
CURAND_ORDERING_PSEUDO_LEGACY = 103
CURAND_ORDERING_PSEUDO_DYNAMIC = 104
CURAND_ORDERING_QUASI_DEFAULT = 201
PSEUDO_ORDERINGS = range(CURAND_ORDERING_PSEUDO_BEST, CURAND_ORDERING_PSEUDO_DYNAMIC + 1)

MAX_DIMENSIONS = 20000
MAX_POISSON_LAMBDA = 400_000

_2POW32_INV = 2.0 ** -32
_2POW53_INV = 2.0 ** -53
_2POW64_INV = 2.0 ** -64

# Philox4x32-10's constants (Random123)
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LOW = np.uint64(0xFFFFFFFF)


def philox4x32_10(counters: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of (N, 4) uint32 counters under a 2-word key -> (N, 4) uint32."""
    c0, c1, c2, c3 = (counters[:, i].astype(np.uint64) for i in range(4))
    k0, k1 = key
    for _ in range(10):
        p0, p1 = _M0 * c0, _M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ np.uint64(k0), p1 & _LOW, (p0 >> 32) ^ c3 ^ np.uint64(k1), p0 & _LOW)
        k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


def _sobol_directions(dimensions: int, bits: int) -> np.ndarray:
    """Joe-Kuo direction numbers, (dimensions, bits), as scipy computes
    them (its Sobol engine's _sv: no public accessor gives 64-bit ones)."""
    return stats.qmc.Sobol(dimensions, scramble=False, bits=bits)._sv.copy()


#: Philox keys of the sim's scrambling: its matrices' and its constants'.
_MATRIX_KEY, _CONSTANT_KEY = (0x5C0B01, 0x4D41), (0x5C0B01, 0x5348)


def _random64(dimensions: int, per_dimension: int, key: tuple[int, int]) -> np.ndarray:
    """(dimensions, per_dimension) uint64 from Philox: entry (d, i) is block
    (d, i) of the key's stream, so a dimension's are the same in any table."""
    d, i = np.meshgrid(np.arange(dimensions, dtype=np.uint32), np.arange(per_dimension, dtype=np.uint32),
                       indexing="ij")
    counters = np.zeros((d.size, 4), np.uint32)
    counters[:, 0], counters[:, 1] = d.ravel(), i.ravel()
    words = philox4x32_10(counters, key).astype(np.uint64)
    return ((words[:, 0] << np.uint64(32)) | words[:, 1]).reshape(dimensions, per_dimension)


def _narrow(table64: np.ndarray, bits: int) -> np.ndarray:
    """A 64-bit table as its `bits`-bit form: the upper halves of its first 32 columns."""
    if bits == 64:
        return table64
    return (table64[..., :32] >> np.uint64(32)).astype(np.uint32) if table64.ndim == 2 else \
        (table64 >> np.uint64(32)).astype(np.uint32)


def scrambled_directions(dimensions: int, bits: int) -> np.ndarray:
    """The sim's scrambled direction vectors, (dimensions, bits): each
    dimension's Joe-Kuo vectors times its random unit lower-triangular
    matrix (bits numbered from the most significant: column p has bit p
    set, random bits below it, none above), as cuRAND's
    CURAND_SCRAMBLED_DIRECTION_VECTORS_* are made."""
    plain = _sobol_directions(dimensions, 64)
    noise = _random64(dimensions, 64, _MATRIX_KEY)
    one = np.uint64(1)
    columns = np.empty_like(noise)
    for p in range(64):
        top = one << np.uint64(63 - p)
        columns[:, p] = top | (noise[:, p] & (top - one))
    scrambled = np.zeros_like(plain)
    for p in range(64):
        has = ((plain >> np.uint64(63 - p)) & one).astype(bool)
        scrambled ^= np.where(has, columns[:, p:p + 1], np.uint64(0))
    return _narrow(scrambled, bits)


def scramble_constants(dimensions: int, bits: int) -> np.ndarray:
    """The sim's scramble constant of each dimension (a digital shift), uint32 or uint64."""
    return _narrow(_random64(dimensions, 1, _CONSTANT_KEY)[:, 0], bits)


@functools.lru_cache(maxsize=None)
def _whole_table(name: str, which: int) -> bytes:
    fmt, _, sets = curand_calls.TABLES[name]
    bits = 64 if fmt == "Q" else 32
    dimensions = curand_calls.TABLE_DIMENSIONS
    if not sets:
        table = scramble_constants(dimensions, bits)
    elif which == sets[0]:
        table = _sobol_directions(dimensions, bits)
    else:
        table = scrambled_directions(dimensions, bits)
    return np.ascontiguousarray(table, np.dtype(fmt)).tobytes()


def table(name: str, args: list) -> bytes:
    """curandGetDirectionVectors32/64 (args: the set) and
    curandGetScrambleConstants32/64 (no args): the whole host table, as
    bytes (TABLE_DIMENSIONS dimensions)."""
    if name not in curand_calls.TABLES:
        _fail("CURAND_STATUS_INTERNAL_ERROR", f"{name} is not one of cuRAND's tables")
    _, _, sets = curand_calls.TABLES[name]
    if len(args) != (1 if sets else 0):
        _fail("CURAND_STATUS_INTERNAL_ERROR", f"{name}: {len(args)} arguments")
    which = args[0] if sets else 0
    if sets and which not in sets:
        _fail("CURAND_STATUS_OUT_OF_RANGE", f"{name}: direction vector set {which} (this call takes "
                                            f"{' or '.join(map(str, sets))})")
    return _whole_table(name, which)


def _fail(status: str, message: str):
    raise LibraryError(status, message)


class SimGenerator:
    """The server's state of one curandGenerator_t (stream aside: the dispatcher's)."""

    def __init__(self, rng_type: int):
        rng_type = DEFAULTS.get(rng_type, rng_type)
        if rng_type not in PSEUDO + QUASI:
            _fail("CURAND_STATUS_TYPE_ERROR", f"curandRngType {rng_type}")
        self.rng_type = rng_type
        self.seed = 0
        self.offset = 0
        self.ordering = CURAND_ORDERING_QUASI_DEFAULT if self.quasi else CURAND_ORDERING_PSEUDO_DEFAULT
        self.dimensions = 1
        self.position = 0
        self._directions: np.ndarray | None = None

    @property
    def quasi(self) -> bool:
        return self.rng_type in QUASI

    # -- options --------------------------------------------------------

    def set_seed(self, seed: int) -> None:
        if self.quasi:
            _fail("CURAND_STATUS_TYPE_ERROR", "a quasirandom generator has no seed")
        # cuRAND keeps the generator's place: a new seed goes on from the numbers made so far
        self.seed = int(seed) & 0xFFFFFFFFFFFFFFFF

    def set_offset(self, offset: int) -> None:
        if self.rng_type == CURAND_RNG_PSEUDO_MTGP32:
            _fail("CURAND_STATUS_TYPE_ERROR", "an MTGP32 generator takes no offset")
        self.offset = self.position = int(offset) & 0xFFFFFFFFFFFFFFFF

    def set_ordering(self, ordering: int) -> None:
        legal = (CURAND_ORDERING_QUASI_DEFAULT,) if self.quasi else PSEUDO_ORDERINGS
        if ordering not in legal:
            _fail("CURAND_STATUS_OUT_OF_RANGE", f"ordering {ordering} for generator type {self.rng_type}")
        self.ordering = ordering

    def set_dimensions(self, dimensions: int) -> None:
        if not self.quasi:
            _fail("CURAND_STATUS_TYPE_ERROR", "dimensions are for quasirandom generators")
        if not 1 <= dimensions <= MAX_DIMENSIONS:
            _fail("CURAND_STATUS_OUT_OF_RANGE", f"{dimensions} dimensions (1 to {MAX_DIMENSIONS})")
        self.dimensions = int(dimensions)
        self._directions = None
        self.position = self.offset

    # -- raw bits ---------------------------------------------------------

    def _words(self, count: int) -> np.ndarray:
        """The next `count` 32-bit words of a pseudo generator's stream."""
        start, self.position = self.position, self.position + count
        if count == 0:
            return np.zeros(0, np.uint32)
        first, last = start // 4, (start + count - 1) // 4
        blocks = np.arange(first, last + 1, dtype=np.uint64)
        counters = np.zeros((blocks.size, 4), np.uint32)
        counters[:, 0] = (blocks & _LOW).astype(np.uint32)
        counters[:, 1] = (blocks >> np.uint64(32)).astype(np.uint32)
        counters[:, 2] = self.rng_type  # each type its own stream
        words = philox4x32_10(counters, (self.seed & 0xFFFFFFFF, self.seed >> 32)).ravel()
        return words[start - first * 4:start - first * 4 + count]

    def _points(self, count: int) -> np.ndarray:
        """The next count / dimensions Sobol' points, dimension-major:
        uint32 (or uint64 for the 64-bit types) of length `count`."""
        bits = 64 if self.rng_type in QUASI_64 else 32
        per_dim = count // self.dimensions
        start, self.position = self.position, self.position + per_dim
        scrambled = self.rng_type in (CURAND_RNG_QUASI_SCRAMBLED_SOBOL32, CURAND_RNG_QUASI_SCRAMBLED_SOBOL64)
        if self._directions is None:
            self._directions = (scrambled_directions if scrambled else _sobol_directions)(self.dimensions, bits)
        dtype = np.uint64 if bits == 64 else np.uint32
        index = np.arange(start, start + per_dim, dtype=np.uint64)
        gray = index ^ (index >> np.uint64(1))
        points = np.zeros((self.dimensions, per_dim), dtype)
        if scrambled:
            points[:] = scramble_constants(self.dimensions, bits)[:, None]
        for bit in range(min(bits, int(gray.max()).bit_length() if per_dim else 0)):
            chosen = ((gray >> np.uint64(bit)) & np.uint64(1)).astype(bool)
            points[:, chosen] ^= self._directions[:, bit:bit + 1]
        return points.ravel()

    def _check_length(self, n: int, pairs: bool = False) -> None:
        if self.quasi and n % self.dimensions:
            _fail("CURAND_STATUS_LENGTH_NOT_MULTIPLE", f"{n} results for {self.dimensions} dimensions")
        if pairs and not self.quasi and n % 2:
            _fail("CURAND_STATUS_LENGTH_NOT_MULTIPLE", f"{n} normal results: Box-Muller makes pairs")

    def _unit32(self, n: int) -> np.ndarray:
        """n doubles in (0, 1) from 32 bits each (quasi: 64 bits for the 64-bit types)."""
        if self.quasi and self.rng_type in QUASI_64:
            return self._points(n).astype(np.float64) * _2POW64_INV + _2POW64_INV / 2
        raw = self._points(n) if self.quasi else self._words(n)
        return raw.astype(np.float64) * _2POW32_INV + _2POW32_INV / 2

    def _unit53(self, n: int) -> np.ndarray:
        """n doubles in (0, 1): two words each (cuRAND's _curand_uniform_double_hq)."""
        if self.quasi:
            return self._unit32(n)
        words = self._words(2 * n).astype(np.uint64)
        z = words[0::2] ^ (words[1::2] << np.uint64(21))
        return z.astype(np.float64) * _2POW53_INV + _2POW53_INV / 2

    # -- generation -------------------------------------------------------

    def generate(self, n: int) -> np.ndarray:
        """curandGenerate: n uint32 with every bit random."""
        if self.rng_type in QUASI_64:
            _fail("CURAND_STATUS_TYPE_ERROR", "curandGenerate on a 64-bit generator: curandGenerateLongLong")
        self._check_length(n)
        return self._points(n) if self.quasi else self._words(n)

    def generate_long_long(self, n: int) -> np.ndarray:
        if self.rng_type not in QUASI_64:
            _fail("CURAND_STATUS_TYPE_ERROR", "curandGenerateLongLong needs a 64-bit quasirandom generator")
        self._check_length(n)
        return self._points(n)

    def uniform(self, n: int) -> np.ndarray:
        """float32 in (0, 1], computed as cuRAND does (the rounding to
        float32 is what can give 1.0)."""
        self._check_length(n)
        if self.rng_type in QUASI_64:
            raw = self._points(n)
            return (raw.astype(np.float32) * np.float32(_2POW64_INV) + np.float32(_2POW64_INV / 2)).astype(np.float32)
        raw = self._points(n) if self.quasi else self._words(n)
        return (raw.astype(np.float32) * np.float32(_2POW32_INV) + np.float32(_2POW32_INV / 2)).astype(np.float32)

    def uniform_double(self, n: int) -> np.ndarray:
        self._check_length(n)
        return self._unit53(n)

    def _standard_normal(self, n: int, double: bool) -> np.ndarray:
        self._check_length(n, pairs=True)
        if self.quasi:
            return special.ndtri(self._unit53(n) if double else self._unit32(n))
        u = self._unit53(n) if double else self._unit32(n)
        radius = np.sqrt(-2.0 * np.log(u[0::2]))
        angle = 2.0 * np.pi * u[1::2]
        out = np.empty(n)
        out[0::2], out[1::2] = radius * np.sin(angle), radius * np.cos(angle)
        return out

    def normal(self, n: int, mean: float, stddev: float) -> np.ndarray:
        z = self._standard_normal(n, double=False).astype(np.float32)
        return z * np.float32(stddev) + np.float32(mean)

    def normal_double(self, n: int, mean: float, stddev: float) -> np.ndarray:
        return self._standard_normal(n, double=True) * stddev + mean

    def log_normal(self, n: int, mean: float, stddev: float) -> np.ndarray:
        return np.exp(self.normal(n, mean, stddev))

    def log_normal_double(self, n: int, mean: float, stddev: float) -> np.ndarray:
        return np.exp(self.normal_double(n, mean, stddev))

    def poisson(self, n: int, lam: float) -> np.ndarray:
        if not 0 < lam <= MAX_POISSON_LAMBDA:
            _fail("CURAND_STATUS_OUT_OF_RANGE", f"lambda {lam} (0 < lambda <= {MAX_POISSON_LAMBDA})")
        self._check_length(n)
        return stats.poisson.ppf(self._unit32(n), lam).astype(np.uint32)

    def poisson_method(self, n: int, lam: float, method: int) -> np.ndarray:
        """curandGeneratePoissonMethod: the methods cuRAND takes, each giving
        the sim's Poisson numbers (a method is how cuRAND's kernels compute them)."""
        if method not in curand_calls.POISSON_METHODS:
            _fail("CURAND_STATUS_OUT_OF_RANGE", f"curandMethod {method} (curandGeneratePoissonMethod takes "
                                                f"{', '.join(map(str, curand_calls.POISSON_METHODS))})")
        return self.poisson(n, lam)
