"""server/mirror_views.py: a mirror's download sends only the chunks whose
digests differ from those of what the client has; chunks the host sent are
sent back; a mirror rewritten all over is sent whole without digesting; a
part of a mirror (managed memory where the host touches it) is digested
alone.  server/backends/chunk_digests.py: the GPU's digest function tells
apart the changes a plain sum of words would not."""
from __future__ import annotations

import numpy as np

from rcuda.server.backends.chunk_digests import on_host, reference, weights
from rcuda.server.mirror_views import CHUNK, MAX_COOLDOWN, MIN_BYTES, MirrorViews

SRC = 0x1000_0000_0000
SIZE = MIN_BYTES + CHUNK // 2  # a partial last chunk


def digests_of(device, asked=None):
    """Device.chunk_digests over the numpy array `device` at SRC; `asked`
    collects the ranges digested."""
    def digests(address: int, size: int, chunk: int):
        if asked is not None:
            asked.append((address - SRC, size))
        return on_host(memoryview(device[address - SRC:address - SRC + size]), chunk)
    return digests


def download(views, device, asked=None):
    return views.changed_runs(SRC, device.size, 0, device.size, digests_of(device, asked))


def learnt():
    views, device = MirrorViews(), (np.arange(SIZE) % 251).astype(np.uint8)
    assert download(views, device) is None  # first: all of it
    assert download(views, device) is None  # second: all of it, and learnt
    return views, device


def test_only_the_changed_chunks_go_and_nothing_when_nothing_changed():
    views, device = learnt()
    assert download(views, device) == []
    device[3 * CHUNK + 100] += 1
    device[3 * CHUNK + 101] += 1
    device[5 * CHUNK] += 1
    device[6 * CHUNK - 1] += 1
    device[-1] += 1  # the partial last chunk
    chunks = SIZE // CHUNK
    assert download(views, device) == [(3 * CHUNK, CHUNK), (5 * CHUNK, CHUNK), (chunks * CHUNK, CHUNK // 2)]
    assert download(views, device) == []


def test_chunks_the_host_sent_go_back():
    views, device = learnt()
    views.host_sent(SRC + 2 * CHUNK - 8, 16)  # across two chunks
    assert download(views, device) == [(CHUNK, 2 * CHUNK)]
    assert download(views, device) == []


def test_a_mirror_rewritten_all_over_is_sent_whole_then_learnt_again():
    views, device = learnt()
    sent_whole = 0
    for _ in range(2 + 3):  # rewritten each time: whole, cooling down, learnt again, whole...
        device += 1
        sent_whole += download(views, device) is None
    assert sent_whole == 5
    for _ in range(MAX_COOLDOWN + 2):  # now only a chunk changes: it is learnt again, then compared
        device[CHUNK] += 1
        runs = download(views, device)
    assert runs == [(CHUNK, CHUNK)]


def test_small_mirrors_and_freed_ones():
    views = MirrorViews()
    small = np.zeros(MIN_BYTES - 1, np.uint8)
    for _ in range(3):
        assert views.changed_runs(SRC, small.size, 0, small.size, digests_of(small)) is None
    views, device = learnt()
    views.forget(SRC, SIZE)
    assert download(views, device) is None  # a new mirror at the same address starts over


def part(views, device, offset, length):
    return views.changed_runs(SRC, device.size, offset, length, digests_of(device))


def test_a_part_is_learnt_and_compared_alone():
    views, device = MirrorViews(), (np.arange(SIZE) % 251).astype(np.uint8)
    window = (4 * CHUNK, 2 * CHUNK)
    assert part(views, device, *window) is None  # first: all of it
    assert part(views, device, *window) is None  # second: all of it, and learnt
    device[5 * CHUNK + 7] += 1
    device[CHUNK] += 1  # outside the part: not looked at
    assert part(views, device, *window) == [(5 * CHUNK, CHUNK)]
    assert part(views, device, *window) == []
    last = SIZE // CHUNK * CHUNK  # the partial last chunk, alone
    for _ in range(2):
        assert part(views, device, last, SIZE - last) is None
    assert part(views, device, last, SIZE - last) == []
    # the whole mirror: the parts learnt are compared, the rest sent (and learnt next time)
    assert download(views, device) == [(0, 4 * CHUNK), (6 * CHUNK, last - 6 * CHUNK)]


def test_a_part_not_on_chunks_is_sent_whole_and_forgotten():
    views, device = learnt()
    assert part(views, device, CHUNK + 4096, CHUNK) is None
    assert download(views, device) == [(CHUNK, 2 * CHUNK)]  # the digests there may not be the client's


def test_a_first_download_digests_nothing_and_cooling_down_digests_nothing():
    views, device = MirrorViews(), (np.arange(SIZE) % 251).astype(np.uint8)
    asked = []
    assert download(views, device, asked) is None and asked == []  # once: maybe never again
    assert download(views, device, asked) is None and asked == [(0, SIZE)]
    device += 1
    assert download(views, device, asked) is None and len(asked) == 2  # all changed: cooling down
    device += 1
    assert download(views, device, asked) is None and len(asked) == 2


def test_the_gpu_digest_sees_changes_a_sum_of_words_would_not():
    words = np.frombuffer(np.random.default_rng(7).bytes(4 * 4096), np.uint64).reshape(4, -1).copy()
    weight = weights(words.shape[1])
    base = reference(words, weight)
    assert len(set(base.tolist())) == 4
    changed = words.copy()
    changed[0, 10] += np.uint64(1)  # one word, by one
    changed[1, [3, 9]] ^= np.uint64(1 << 63)  # the top bit of two words: a weighted sum alone would not see it
    changed[2, [5, 6]] = changed[2, [6, 5]]  # two words swapped: a plain sum would not see it
    changed[3, 7] -= np.uint64(1)
    changed[3, 8] += np.uint64(1)  # two words moved in opposite directions: nor here
    assert (reference(changed, weight) != base).all()
    assert (reference(words.copy(), weight) == base).all()


def test_a_gpu_server_sends_only_the_changed_chunk(service):
    """The device service's mirror_dtoh on a CupyDevice (CuPy and the driver
    stood in for: no CuPy kernels, so it digests on the host): the third
    download of an unchanged mirror sends nothing, the fourth the one chunk
    a write changed, with its bytes."""
    device, size = service.device, 8 << 20
    ptr = device.malloc(size)
    device.write_now(ptr, memoryview(np.zeros(size, np.uint8)))
    mirror_dtoh = service._handlers["mirror_dtoh"]
    sent = [mirror_dtoh({"src": ptr, "size": size}, []) for _ in range(3)]
    assert [header for header, _ in sent] == [{}, {}, {"runs": 0}]
    device.write_now(ptr + 3 * CHUNK + 5, memoryview(b"\x07"))
    header, (table, chunk) = mirror_dtoh({"src": ptr, "size": size}, [])
    assert header == {"runs": 1} and np.frombuffer(table, "<u8").tolist() == [3 * CHUNK, CHUNK]
    assert bytes(chunk)[5] == 7 and bytes(chunk).count(0) == CHUNK - 1
