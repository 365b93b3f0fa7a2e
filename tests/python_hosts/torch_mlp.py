"""PyTorch's own kernels on a GPU, for tests/test_pytorch.py: elementwise
kernels from libtorch_cuda's fatbinaries, torch.matmul (cuBLAS), and the
training steps of a small MLP (Linear, ReLU, cross-entropy, SGD; no cuDNN).
The inputs come from a seeded generator on the CPU, so a local GPU and a
remote one start from the same numbers.  Prints `ok ...` lines, then one
`RESULT {json}` line: the losses and the seconds per training step."""
import json
import time

import torch

STEPS, WARM_UP = 20, 3
device = torch.device("cuda", 0)
seeded = torch.Generator().manual_seed(0)

x = torch.arange(1 << 16, dtype=torch.float32)
assert torch.allclose(((x.to(device) * 2 + 1).sin()).cpu(), (x * 2 + 1).sin(), atol=1e-5)
print("ok elementwise", flush=True)

a, b = torch.randn(256, 512, generator=seeded), torch.randn(512, 128, generator=seeded)
product = (a.to(device) @ b.to(device)).cpu()
assert torch.allclose(product, a @ b, rtol=1e-4, atol=1e-3), (product - a @ b).abs().max()
print("ok matmul", flush=True)

torch.manual_seed(0)  # the layers' initial weights, drawn on the CPU
model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
inputs = torch.randn(512, 784, generator=seeded).to(device)
labels = torch.randint(0, 10, (512,), generator=seeded).to(device)
losses, started = [], 0.0
for step in range(STEPS):
    if step == WARM_UP:
        torch.cuda.synchronize()
        started = time.perf_counter()
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(inputs), labels)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
seconds_per_step = (time.perf_counter() - started) / (STEPS - WARM_UP)
assert losses[-1] < losses[0], losses
print("ok training", flush=True)
print("RESULT " + json.dumps({"losses": losses, "seconds_per_step": seconds_per_step}), flush=True)
