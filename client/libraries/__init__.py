"""cuBLAS, cuBLASLt, cuFFT and cuRAND on the client: a module per library
(cublas.py, cublaslt.py, cufft.py, cufft_xt.py, curand.py) registering its
functions with @library() (registry.py), the objects programs hold
(objects.py), and which function serves an export (dispatch.py).  The
library modules load at a program's first library call.

The library modules may import client/runtime/ (they build on it), never
the other way round; objects.py imports only client/interposer.py, since
the client state holds it.
"""
