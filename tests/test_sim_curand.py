"""The sim's cuRAND generators (server/backends/sim_curand.py): Philox's
known answers, moments of every distribution, repeatability, offsets that
jump, Sobol' points, the host tables and scrambled Sobol' built on them,
and cuRAND's error statuses."""
from __future__ import annotations

import numpy as np
import pytest

from rcuda import curand_calls
from rcuda.library_errors import LibraryError
from rcuda.server.backends import sim_curand
from rcuda.server.backends.sim_curand import (CURAND_ORDERING_PSEUDO_BEST, CURAND_ORDERING_PSEUDO_LEGACY,
                                        CURAND_ORDERING_QUASI_DEFAULT, CURAND_RNG_PSEUDO_DEFAULT,
                                        CURAND_RNG_PSEUDO_MRG32K3A, CURAND_RNG_PSEUDO_MT19937,
                                        CURAND_RNG_PSEUDO_MTGP32, CURAND_RNG_PSEUDO_PHILOX4_32_10,
                                        CURAND_RNG_PSEUDO_XORWOW, CURAND_RNG_QUASI_DEFAULT,
                                        CURAND_RNG_QUASI_SCRAMBLED_SOBOL32, CURAND_RNG_QUASI_SOBOL32,
                                        CURAND_RNG_QUASI_SCRAMBLED_SOBOL64, CURAND_RNG_QUASI_SOBOL64, SimGenerator,
                                        philox4x32_10)

PSEUDO = [CURAND_RNG_PSEUDO_XORWOW, CURAND_RNG_PSEUDO_MRG32K3A, CURAND_RNG_PSEUDO_MTGP32, CURAND_RNG_PSEUDO_MT19937,
          CURAND_RNG_PSEUDO_PHILOX4_32_10]
N = 200_000


def status_of(call, *args) -> str:
    with pytest.raises(LibraryError) as e:
        call(*args)
    return e.value.library_status


def seeded(rng_type, seed=1234) -> SimGenerator:
    g = SimGenerator(rng_type)
    g.set_seed(seed)
    return g


def test_philox_known_answers():
    """Random123's kat_vectors for philox4x32-10."""
    assert philox4x32_10(np.zeros((1, 4), np.uint32), (0, 0)).tolist() == [
        [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]]
    counters = np.array([[0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344]], np.uint32)
    assert philox4x32_10(counters, (0xA4093822, 0x299F31D0)).tolist() == [
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]]


@pytest.mark.parametrize("rng_type", PSEUDO)
def test_moments(rng_type):
    g = seeded(rng_type)
    bits = g.generate(N)
    assert bits.dtype == np.uint32 and abs(bits.mean() / 2**32 - 0.5) < 0.01
    u = g.uniform(N)
    assert u.dtype == np.float32 and 0 < u.min() and u.max() <= 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    ud = g.uniform_double(N)
    assert ud.dtype == np.float64 and 0 < ud.min() and ud.max() < 1 and abs(ud.mean() - 0.5) < 0.005
    z = g.normal(N, 2.0, 3.0)
    assert z.dtype == np.float32 and abs(z.mean() - 2) < 0.05 and abs(z.std() - 3) < 0.05
    zd = g.normal_double(N, -1.0, 0.5)
    assert zd.dtype == np.float64 and abs(zd.mean() + 1) < 0.01 and abs(zd.std() - 0.5) < 0.01
    ln = g.log_normal(N, 0.0, 0.5)  # mean exp(s^2/2)
    assert ln.dtype == np.float32 and ln.min() > 0 and abs(ln.mean() - np.exp(0.125)) < 0.01
    lnd = g.log_normal_double(N, 1.0, 0.25)
    assert lnd.dtype == np.float64 and abs(lnd.mean() - np.exp(1 + 0.03125)) < 0.02
    for lam in (0.5, 7.0, 1000.0):
        p = g.poisson(N, lam)
        assert p.dtype == np.uint32 and abs(p.mean() - lam) < 0.02 * lam + 0.01
        assert abs(p.var() - lam) < 0.05 * lam + 0.02


def test_default_types():
    assert SimGenerator(CURAND_RNG_PSEUDO_DEFAULT).rng_type == CURAND_RNG_PSEUDO_XORWOW
    assert SimGenerator(CURAND_RNG_QUASI_DEFAULT).rng_type == CURAND_RNG_QUASI_SOBOL32


@pytest.mark.parametrize("rng_type", PSEUDO)
def test_repeatable_and_continuing(rng_type):
    a, b = seeded(rng_type), seeded(rng_type)
    first = a.generate(1000)
    assert (first == b.generate(1000)).all()  # a "host" and a "device" generator agree
    second = a.generate(1000)
    assert not (second == first).all()  # the sequence goes on
    assert (np.concatenate([first, second]) == seeded(rng_type).generate(2000)).all()
    a.set_seed(1234)  # a seed set again goes on from the numbers made so far, as cuRAND does
    assert (a.generate(1000) == seeded(rng_type).generate(3000)[2000:]).all()
    if rng_type != CURAND_RNG_PSEUDO_MTGP32:  # the offset sets the place
        a.set_offset(0)
        assert (a.generate(1000) == first).all()
    assert not (seeded(rng_type, 99).generate(1000) == first).all()


def test_types_differ():
    streams = [seeded(t).generate(64).tolist() for t in PSEUDO]
    assert len({tuple(s) for s in streams}) == len(PSEUDO)


def test_offset_jumps_into_the_sequence():
    whole = seeded(CURAND_RNG_PSEUDO_PHILOX4_32_10).generate(1000)
    g = seeded(CURAND_RNG_PSEUDO_PHILOX4_32_10)
    g.set_offset(137)
    assert (g.generate(500) == whole[137:637]).all()
    g.set_seed(1234)  # the place stays
    assert (g.generate(10) == whole[637:647]).all()
    g.set_ordering(CURAND_ORDERING_PSEUDO_BEST)  # so does it on an ordering change
    assert (g.generate(10) == whole[647:657]).all()
    mtgp = seeded(CURAND_RNG_PSEUDO_MTGP32)
    with pytest.raises(LibraryError) as error:
        mtgp.set_offset(10)
    assert error.value.library_status == "CURAND_STATUS_TYPE_ERROR"


def test_uniform_matches_curand_conversion():
    g, h = seeded(CURAND_RNG_PSEUDO_XORWOW), seeded(CURAND_RNG_PSEUDO_XORWOW)
    bits = g.generate(4096)
    want = bits.astype(np.float32) * np.float32(2**-32) + np.float32(2**-33)
    assert (h.uniform(4096) == want).all()
    assert (np.float32(0xFFFFFFFF) * np.float32(2**-32) + np.float32(2**-33)) == 1.0  # why (0, 1]


def test_sobol_points_dimension_major():
    g = SimGenerator(CURAND_RNG_QUASI_SOBOL32)
    g.set_dimensions(2)
    out = g.generate(8).reshape(2, 4)  # 4 points of dimension 0, then of dimension 1
    assert out[0].tolist() == [0, 2**31, 3 * 2**30, 2**30]
    assert out[1].tolist() == [0, 2**31, 2**30, 3 * 2**30]
    nxt = g.generate(4).reshape(2, 2)  # points 4 and 5
    from scipy.stats import qmc
    ref = (qmc.Sobol(2, scramble=False, bits=32).random(8) * 2**32).astype(np.uint64).T
    assert (nxt == ref[:, 4:6]).all()
    g.set_offset(3)
    assert (g.generate(2).reshape(2, 1) == ref[:, 3:4]).all()


def test_sobol_uniform_is_low_discrepancy():
    g = SimGenerator(CURAND_RNG_QUASI_SOBOL32)
    g.set_dimensions(3)
    u = g.uniform_double(3 * 1024).reshape(3, 1024)
    assert np.abs(u.mean(axis=1) - 0.5).max() < 1e-3
    z = g.normal(3 * 4096, 0.0, 1.0)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.02


def test_scrambled_and_64_bit_sobol():
    s = SimGenerator(CURAND_RNG_QUASI_SCRAMBLED_SOBOL32)
    plain = SimGenerator(CURAND_RNG_QUASI_SOBOL32).generate(16)
    assert not (s.generate(16) == plain).all()
    g = SimGenerator(CURAND_RNG_QUASI_SOBOL64)
    v = g.generate_long_long(4)
    assert v.dtype == np.uint64 and v.tolist() == [0, 2**63, 3 * 2**62, 2**62]
    u = g.uniform(1024)
    assert 0 < u.min() and u.max() <= 1


def test_errors():
    assert status_of(SimGenerator, 7) == "CURAND_STATUS_TYPE_ERROR"
    pseudo, quasi = seeded(CURAND_RNG_PSEUDO_XORWOW), SimGenerator(CURAND_RNG_QUASI_SOBOL32)
    assert status_of(pseudo.normal, 5, 0.0, 1.0) == "CURAND_STATUS_LENGTH_NOT_MULTIPLE"
    assert status_of(pseudo.log_normal_double, 3, 0.0, 1.0) == "CURAND_STATUS_LENGTH_NOT_MULTIPLE"
    assert status_of(pseudo.set_dimensions, 2) == "CURAND_STATUS_TYPE_ERROR"
    assert status_of(pseudo.set_ordering, CURAND_ORDERING_QUASI_DEFAULT) == "CURAND_STATUS_OUT_OF_RANGE"
    assert status_of(pseudo.generate_long_long, 4) == "CURAND_STATUS_TYPE_ERROR"
    assert status_of(pseudo.poisson, 4, 0.0) == "CURAND_STATUS_OUT_OF_RANGE"
    assert status_of(pseudo.poisson, 4, -1.0) == "CURAND_STATUS_OUT_OF_RANGE"
    pseudo.set_ordering(CURAND_ORDERING_PSEUDO_LEGACY)
    assert status_of(quasi.set_seed, 1) == "CURAND_STATUS_TYPE_ERROR"
    assert status_of(quasi.set_ordering, CURAND_ORDERING_PSEUDO_BEST) == "CURAND_STATUS_OUT_OF_RANGE"
    assert status_of(quasi.set_dimensions, 0) == "CURAND_STATUS_OUT_OF_RANGE"
    assert status_of(quasi.set_dimensions, 20001) == "CURAND_STATUS_OUT_OF_RANGE"
    quasi.set_dimensions(3)
    assert quasi.normal(3, 0.0, 1.0).size == 3  # odd is fine for quasi: a multiple of the dimensions
    for call, args in ((quasi.generate, (4,)), (quasi.uniform, (5,)), (quasi.normal_double, (4, 0.0, 1.0)),
                       (quasi.poisson, (7, 2.0))):
        assert status_of(call, *args) == "CURAND_STATUS_LENGTH_NOT_MULTIPLE"
    assert status_of(SimGenerator(CURAND_RNG_QUASI_SOBOL64).generate, 4) == "CURAND_STATUS_TYPE_ERROR"


def test_failed_call_does_not_advance():
    g, h = seeded(CURAND_RNG_PSEUDO_MTGP32), seeded(CURAND_RNG_PSEUDO_MTGP32)
    status_of(g.normal, 3, 0.0, 1.0)
    assert (g.generate(8) == h.generate(8)).all()


def _leading_bit(x: np.ndarray) -> np.ndarray:
    """Each element's most significant set bit, alone."""
    y = x.copy()
    for shift in (1, 2, 4, 8, 16, 32):
        y |= y >> np.uint64(shift)
    return y ^ (y >> np.uint64(1))


def _table(name, *args, dtype, per):
    return np.frombuffer(sim_curand.table(name, list(args)), dtype).reshape(curand_calls.TABLE_DIMENSIONS, per)


def test_tables_are_joe_kuo_and_scrambled_as_curand_scrambles():
    """The plain tables are Joe and Kuo's vectors (scipy's new-joe-kuo-6.21201,
    which are cuRAND's); the scrambled ones keep each vector's leading bit (a
    unit lower-triangular matrix); the 32-bit tables are the 64-bit ones' upper halves."""
    v32 = _table("curandGetDirectionVectors32", 101, dtype=np.uint32, per=32)
    s32 = _table("curandGetDirectionVectors32", 102, dtype=np.uint32, per=32)
    v64 = _table("curandGetDirectionVectors64", 103, dtype=np.uint64, per=64)
    s64 = _table("curandGetDirectionVectors64", 104, dtype=np.uint64, per=64)
    c32 = _table("curandGetScrambleConstants32", dtype=np.uint32, per=1)[:, 0]
    c64 = _table("curandGetScrambleConstants64", dtype=np.uint64, per=1)[:, 0]
    from scipy.stats import qmc
    assert (v32[:50] == qmc.Sobol(50, scramble=False, bits=32)._sv).all()
    assert v32[0].tolist() == [1 << (31 - j) for j in range(32)]
    assert v32[2, :6].tolist() == [0x80000000, 0xC0000000, 0x60000000, 0x90000000, 0xE8000000, 0x5C000000]
    assert ((v64[:, :32] >> np.uint64(32)).astype(np.uint32) == v32).all()
    assert ((s64[:, :32] >> np.uint64(32)).astype(np.uint32) == s32).all()
    assert ((c64 >> np.uint64(32)).astype(np.uint32) == c32).all()
    assert ((s64 ^ v64) < _leading_bit(v64)).all()  # each keeps its plain vector's leading bit, mixes the rest
    assert (s32 != v32).mean() > 0.9 and len(set(c32.tolist())) == len(c32)
    assert (s32[0] == sim_curand.scrambled_directions(3, 32)[0]).all()  # a generator's rows are the table's


@pytest.mark.parametrize("name, args", [("curandGetDirectionVectors32", [103]), ("curandGetDirectionVectors64", [101]),
                                        ("curandGetDirectionVectors32", [7])])
def test_a_wrong_direction_vector_set_is_out_of_range(name, args):
    assert status_of(sim_curand.table, name, args) == "CURAND_STATUS_OUT_OF_RANGE"


@pytest.mark.parametrize("rng_type, bits", [(CURAND_RNG_QUASI_SCRAMBLED_SOBOL32, 32),
                                            (CURAND_RNG_QUASI_SCRAMBLED_SOBOL64, 64)])
def test_scrambled_sobol_follows_the_tables_and_stays_stratified(rng_type, bits):
    """Point i of dimension d: the constant XOR the scrambled vectors of
    gray(i)'s bits; the first 2^k points of a dimension lie one in each
    interval of width 2^-k, and dimensions 0 and 1 form a (0, m, 2)-net."""
    dims, per, m = 5, 1024, 10
    g = SimGenerator(rng_type)
    g.set_dimensions(dims)
    points = (g.generate_long_long if bits == 64 else g.generate)(dims * per).reshape(dims, per)
    vectors, constants = sim_curand.scrambled_directions(dims, bits), sim_curand.scramble_constants(dims, bits)
    for i in (0, 1, 2, 3, 100, 1023):
        gray, want = i ^ (i >> 1), constants.copy()
        for b in range(bits):
            if gray >> b & 1:
                want ^= vectors[:, b]
        assert (points[:, i] == want).all()
    top = [(points[d] >> np.uint64(bits - m)).astype(np.int64) for d in range(dims)]
    assert all(len(set(t.tolist())) == per for t in top)
    for a in range(m + 1):
        cells = {(x >> (m - a), y >> a) for x, y in zip(top[0].tolist(), top[1].tolist())}
        assert len(cells) == per
    u = (SimGenerator(rng_type).uniform_double(4096) if bits == 64 else SimGenerator(rng_type).uniform(4096))
    assert abs(u.mean() - 0.5) < 1e-3 and 0 < u.min() and u.max() <= 1


def test_poisson_method():
    g, h = seeded(CURAND_RNG_PSEUDO_PHILOX4_32_10), seeded(CURAND_RNG_PSEUDO_PHILOX4_32_10)
    for method in curand_calls.POISSON_METHODS:  # the method is cuRAND's way of computing: the same numbers
        assert (g.poisson_method(N, 7.5, method) == h.poisson(N, 7.5)).all()
    x = g.poisson(N, 7.5)
    assert abs(x.mean() - 7.5) < 0.05 and abs(x.var() - 7.5) < 0.15
    for method in (1, 5, 12, 99):
        assert status_of(g.poisson_method, 4, 7.5, method) == "CURAND_STATUS_OUT_OF_RANGE"
    assert status_of(g.poisson_method, 4, 400001.0, 0) == "CURAND_STATUS_OUT_OF_RANGE"
    assert set(curand_calls.PARAMETERS) <= set(curand_calls.GENERATES)
    for name, (_, count, _) in curand_calls.GENERATES.items():
        assert len(curand_calls.PARAMETERS.get(name, "")) == count, name
