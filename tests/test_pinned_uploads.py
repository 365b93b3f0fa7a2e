"""Uploads from pinned memory wait for the asynchronous downloads into it
that are still in flight (client/memory/host.py, PendingDownloads): in one
stream CUDA runs a download and a later upload of the same bytes in order.
tests/cuda/async_in_c.cu runs it end to end."""


def test_an_upload_waits_only_for_the_downloads_it_overlaps():
    """client/memory/host.py's PendingDownloads: a gate for an upload from
    pinned memory opens once every download in flight into the bytes it
    reads has landed (or failed), and none is needed for other bytes."""
    from rcuda.client.memory.host import PendingDownloads

    pending = PendingDownloads()
    first, second = pending.started(1000, 100), pending.started(1050, 100)  # [1000, 1100), [1050, 1150)
    pending.started(5000, 10)
    assert pending.gate_for(1100 + 50, 10) is None and pending.gate_for(900, 100) is None
    gate = pending.gate_for(1090, 20)  # overlaps both
    assert gate is not None and not gate.opened
    pending.landed(first)
    assert not gate.opened
    pending.landed(second)
    assert gate.opened
    assert pending.gate_for(1090, 20) is None  # both landed: nothing to wait for
