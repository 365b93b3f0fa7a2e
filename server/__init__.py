"""rcuda's server (installed as rcuda.server): `rcuda server` and what
serves a client's GPUs.

  daemon.py          the daemon clients say hello to; hands out session workers
  worker.py          one process per client session: heartbeats, its GPUs
  device_service.py  one thread per GPU of a session: checks each request
                     and runs it on the backend
  library_calls.py   the `lib` op: cuBLAS, cuFFT and cuRAND objects and calls
  peer.py            server-to-server copies
  status.py, metrics.py  what the GPUs are doing (`rcuda smi`, Prometheus)
  backends/          where the GPUs come from: cupy (real GPUs), sim (CPU)

Imports rcuda/ (the shared protocol, errors, rules), never rcuda.client.
"""
