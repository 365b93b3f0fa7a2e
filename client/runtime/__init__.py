"""The CUDA runtime's functions (libcudart.so.13), one Python function per
CUDA function, registered with @cuda() (core.py): registration, launches
and devices (core.py), memory and copies (memory.py), streams and events
(streams.py), device and function queries (queries.py), memory pools
(pools.py), managed memory (managed.py), stream capture (capture.py), graphs
(graphs.py), the
driver's error log (logs.py), libraries and kernel handles
(library_management.py), notifications (notifications.py) and the
runtime's ways into the driver API (driver_access.py).

May import the client's models (graphs.py and capture.py among them), state, interposer.py and registry.py, and
client/driver/'s models (handles, context stacks, loading); never
client/driver/'s or client/libraries/' functions (they build on these).
"""
