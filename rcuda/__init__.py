"""rcuda: run unmodified CUDA programs on GPUs that live on other machines.

`rcuda` holds what client and server share (wire protocol, CUDA error codes,
configuration, the fatbinary reader, the command line); `rcuda.client` runs
inside the application, `rcuda.server` on the GPU machines.
"""

__version__ = "0.1.0"
