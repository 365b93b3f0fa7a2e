"""server/mirror_views.py: a mirror's download sends only the chunks whose
bytes differ from what the client has; chunks the host sent are sent back;
a mirror rewritten all over is sent whole without comparing; a part of a
mirror (managed memory where the host touches it) is compared alone."""
from __future__ import annotations

import numpy as np

from rcuda.server.mirror_views import CHUNK, MAX_COOLDOWN, MIN_BYTES, MirrorViews

SRC = 0x1000_0000_0000
SIZE = MIN_BYTES + CHUNK // 2  # a partial last chunk


def download(views, device):
    return views.changed_runs(SRC, memoryview(device), device.size)


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
        assert views.changed_runs(SRC, memoryview(small), small.size) is None
    views, device = learnt()
    views.forget(SRC, SIZE)
    assert download(views, device) is None  # a new mirror at the same address starts over


def part(views, device, offset, length):
    return views.changed_runs(SRC, memoryview(device[offset:offset + length]), device.size, offset)


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
    assert download(views, device) == [(CHUNK, 2 * CHUNK)]  # the shadow there may not be the client's
