"""PyTorch as a CUDA host, for tests/test_pytorch.py: everything that needs
no kernel of PyTorch's (nn.Linear's forward is cuBLASLt's), on two GPUs (of
one server or of two).  Prints
`ok ...` lines; a failed check raises."""
import sys

import torch

assert torch.cuda.is_available()
print("ok devices", torch.cuda.device_count(), flush=True)
props = torch.cuda.get_device_properties(1)
print("ok properties", props.name, props.total_memory > 0, props.multi_processor_count > 0, flush=True)
torch.cuda.set_device(1)
assert torch.cuda.current_device() == 1
torch.cuda.set_device(0)

host = torch.arange(1 << 20, dtype=torch.float32)
on_0 = host.cuda()
assert on_0.device == torch.device("cuda", 0) and torch.equal(on_0.cpu(), host)
print("ok to and from the device", flush=True)

pinned = host.pin_memory()
assert pinned.is_pinned()
staged = pinned.to("cuda:0", non_blocking=True)
back = torch.empty_like(host).pin_memory()
back.copy_(staged, non_blocking=True)
torch.cuda.synchronize()
assert torch.equal(back, host)
print("ok non_blocking with pinned memory", flush=True)

on_1 = on_0.to("cuda:1")
assert on_1.device == torch.device("cuda", 1) and torch.equal(on_1.cpu(), host)
reversed_host = host.flip(0)
into_1 = torch.empty(host.shape, device="cuda:1")
into_1.copy_(reversed_host.cuda())  # device 0 to device 1, as cudaMemcpyPeer
assert torch.equal(into_1.cpu(), reversed_host)
print("ok copies between GPUs", flush=True)

stream = torch.cuda.Stream(device=0)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
with torch.cuda.stream(stream):
    start.record()
    copied = pinned.to("cuda:0", non_blocking=True)
    end.record()
end.synchronize()
assert stream.query() and end.query()
assert start.elapsed_time(end) >= 0
stream.synchronize()
assert torch.equal(copied.cpu(), host)
print("ok streams and timed events", flush=True)

allocated = torch.cuda.memory_allocated(0)
assert allocated >= 3 * host.numel() * 4, allocated
stats = torch.cuda.memory_stats(0)
assert stats["allocation.all.current"] >= 3, stats["allocation.all.current"]
free, total = torch.cuda.mem_get_info(0)
assert 0 < free <= total
del on_0, staged, copied
torch.cuda.empty_cache()
assert torch.cuda.memory_allocated(0) == 0 and torch.cuda.memory_reserved(0) == 0
print("ok caching allocator", flush=True)

# nn.Linear's forward: cuBLASLt's matmul with a bias epilogue, on PyTorch's
# cuBLAS handle cast to a cublasLtHandle_t (getCurrentCUDABlasLtHandle()).
torch.manual_seed(0)
linear, inputs = torch.nn.Linear(7, 5), torch.randn(3, 7)
want = linear(inputs)
with torch.no_grad():
    got = linear.to("cuda:1")(inputs.to("cuda:1")).cpu()
assert torch.allclose(got, want, atol=1e-5), (got, want)
print("ok linear", flush=True)

try:
    (on_1 + 1).cpu()  # a kernel of PyTorch's: the sim has none
except RuntimeError as exc:
    print("ok kernel refused:", str(exc).splitlines()[0], flush=True)
sys.exit(3)
