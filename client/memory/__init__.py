"""What memory the program has, and where it lives: device allocations and
the pointer map (allocations.py, pointers.py), page-locked host memory
(host.py), mapped host memory and its device mirror (mapped.py), managed
memory (managed.py, managed_arenas.py), stream-ordered pools (pools.py) and
virtual memory management (virtual.py).

Models only: the CUDA functions over them are in client/runtime/ and
client/driver/.  Imports only rcuda/, client/transport/ (a pinned
upload's gate) and this package.
"""
