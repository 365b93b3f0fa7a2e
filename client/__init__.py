"""rcuda's client: the CUDA runtime, driver API and libraries inside the
program's process, forwarding to `rcuda server`s (installed as rcuda.client).

From the bottom up (a module imports only what is below it):

  transport/    a remote GPU's link (lane or ZeroMQ socket), sessions with
                servers, C's fast paths, copies between servers
  memory/       what memory is where: allocations, pointers, page-locked,
                mapped and managed memory, pools, virtual memory
  device.py, streams.py, stream_attributes.py, modules.py, callbacks.py
                the objects a program works with: remote GPUs, streams and
                events, registered kernels, host functions
  driver/handles.py, driver/context_stacks.py, libraries/objects.py
                the driver's and the libraries' objects
  state.py      the process's client state, one `Runtime` object
  interposer.py, registry.py, proc_address.py
                what every API's functions share: the cffi binding and the
                process's state, the registries of implementations, the
                driver entry-point search
  runtime/      the CUDA runtime's functions (libcudart.so.13)
  driver/       the driver API's functions (libcuda.so.1); they build on
                runtime/
  libraries/    cuBLAS, cuBLASLt, cuFFT and cuRAND; they build on runtime/
  entrypoints.py  where C calls into Python: one entry per export; here
                exceptions become CUDA statuses
  stats.py      RCUDA_STATS's summary

tests/test_imports.py fails on an import circle.
"""
