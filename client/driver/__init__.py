"""The CUDA driver API (libcuda.so.1): one Python function per export,
registered with @driver() (registry.py), in a module per group (core.py,
contexts.py, devices.py, memory.py, modules.py, link.py, launch.py,
functions.py, pointers.py, streams.py, graphs.py, vmm.py).  These load at a
program's first driver call (dispatch.py).  A CUmodule, CUfunction or CUcontext is a
view of the runtime's own objects (handles.py, context_stacks.py: models
the client state holds, loaded in every program).

The function modules may import client/runtime/ (they build on it), never
the other way round.
"""
