"""Not kernels: loaded as a sim plugin (--kernels), it makes the sim server
stand for a GPU server, which has no memory IPC in rcuda: no device of it
exports memory to other sessions (cudaIpcGetMemHandle is
cudaErrorNotSupported), so it shares no memory pools (pool handle types 0).
For tests/test_memory_pools.py."""
from rcuda.server.backends import base, sim

sim.SimDevice.ipc_export = base.Device.ipc_export
_described = sim.sim_properties


def _without_pool_handles(*args, **kwargs) -> dict:
    return dict(_described(*args, **kwargs), memoryPoolSupportedHandleTypes=0)


sim.sim_properties = _without_pool_handles
KERNELS = {}
