"""A Python program that is a CUDA host, for tests/test_python_hosts.py:
python host.py MODE [ARGS].  Each mode prints `ok ...` lines and ends with
the exit status 3, which the test checks is the program's own."""
import ctypes
import datetime
import os
import sys
import threading

# Attribute lookups on capsules give PyCapsule_Type a version tag, as large
# imports (PyTorch's) do: cffi's start used to spin on it for ever.
getattr(datetime.datetime_CAPI, "anything", None)

cudart = ctypes.CDLL("libcudart.so.13")  # ctypes releases the GIL around each call


def ctypes_count() -> int:
    count = ctypes.c_int(-1)
    status = cudart.cudaGetDeviceCount(ctypes.byref(count))
    assert status == 0, status
    return count.value


def main(mode: str, *args: str) -> None:
    if mode == "ctypes":
        print("ok devices", ctypes_count(), flush=True)
    elif mode == "thread":  # the first call from a thread that is not the main one
        found = []
        worker = threading.Thread(target=lambda: found.append(ctypes_count()))
        worker.start()
        worker.join(60)
        print("ok devices", found[0], flush=True)
    elif mode == "extension":  # GIL held; modules of a shared library registered before the first call
        library_path, probe_dir = args
        library = ctypes.CDLL(library_path)
        sys.path.insert(0, probe_dir)
        import cuda_probe
        status, count = cuda_probe.device_count()
        print("ok devices", count, "status", status, flush=True)
        status, back = cuda_probe.round_trip(b"rcuda" * 1000)
        assert status == 0 and back == b"rcuda" * 1000, status
        print("ok round trip", flush=True)
        values = (ctypes.c_float * 256)(*range(256))
        device = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(device), ctypes.sizeof(values)) == 0
        assert cudart.cudaMemcpy(device, values, ctypes.sizeof(values), 1) == 0
        assert library.library_square(device, 256) == 0  # the library's own kernel
        assert cudart.cudaMemcpy(values, device, ctypes.sizeof(values), 2) == 0
        assert list(values) == [float(i * i) for i in range(256)], list(values)[:4]
        print("ok library kernel", flush=True)
        managed = ctypes.c_void_p()
        assert cudart.cudaMallocManaged(ctypes.byref(managed), ctypes.sizeof(values), 1) == 0
        on_host = (ctypes.c_float * 256).from_address(managed.value)
        on_host[:] = range(256)
        assert library.library_square(managed, 256) == 0
        # Read with the GIL held while the kernel may run: the read waits for
        # it (native/mapped_memory.c's settler needs no Python).
        assert list(on_host) == [float(i * i) for i in range(256)], list(on_host)[:4]
        print("ok managed memory", flush=True)
    elif mode == "race":  # first calls at once: some holding the GIL, some not
        sys.path.insert(0, args[0])
        import cuda_probe
        barrier = threading.Barrier(6)
        found = []

        def call(with_gil: bool) -> None:
            barrier.wait(30)
            found.append(cuda_probe.device_count()[1] if with_gil else ctypes_count())

        workers = [threading.Thread(target=call, args=(i % 2 == 0,)) for i in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        print("ok devices", sorted(found), flush=True)
    elif mode == "fork":
        print("ok devices", ctypes_count(), flush=True)
        child = os.fork()
        if child == 0:  # the child's client starts over, with sessions of its own
            print("ok child devices", ctypes_count(), flush=True)
            os._exit(5)
        _, status = os.waitpid(child, 0)
        print("ok child exit", os.waitstatus_to_exitcode(status), flush=True)
        print("ok devices again", ctypes_count(), flush=True)
    elif mode == "after_exit":  # calls made after the client closed at the interpreter's exit
        import atexit
        atexit.register(after_exit)  # before the first CUDA call: runs after the client's own exit handler
        device = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(device), 1024) == 0
        after_exit.held = device
        print("ok devices", ctypes_count(), flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")
    sys.exit(3)


def after_exit() -> None:
    """Statuses once the client has closed: releases, waits and queries
    succeed (everything is done), anything new is cudaErrorCudartUnloading."""
    cudart.cudaGetErrorString.restype = ctypes.c_char_p
    device, event, status = ctypes.c_int(-1), ctypes.c_void_p(), ctypes.c_int(-1)
    new = ctypes.c_void_p()
    results = {
        "cudaFree": cudart.cudaFree(after_exit.held),
        "cudaSetDevice": cudart.cudaSetDevice(1),
        "cudaGetDevice": (cudart.cudaGetDevice(ctypes.byref(device)), device.value),
        "cudaEventCreate": cudart.cudaEventCreate(ctypes.byref(event)),
        "cudaEventRecord": cudart.cudaEventRecord(event, None),
        "cudaEventSynchronize": cudart.cudaEventSynchronize(event),
        "cudaStreamIsCapturing": (cudart.cudaStreamIsCapturing(None, ctypes.byref(status)), status.value),
        "cudaDeviceSynchronize": cudart.cudaDeviceSynchronize(),
        "cudaGetLastError": cudart.cudaGetLastError(),
        "cudaMalloc": cudart.cudaMalloc(ctypes.byref(new), 1024),
        "cudaGetErrorString(4)": cudart.cudaGetErrorString(4).decode(),
    }
    print("ok after exit", results, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
