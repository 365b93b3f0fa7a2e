"""CUDA contexts (CUcontext) and each host thread's stack of current ones.

One client sits behind both APIs, so a context is a view of the runtime's
devices, not a second world:

  * the primary context of device d IS the runtime's device d: one handle
    per device, made current by cudaSetDevice(d) as by cuCtxSetCurrent;
  * the thread's current context and the runtime's current device are one
    state: making a context current makes its device the runtime's current
    device (kept in C, native/launch_fast_path.c), so runtime calls that
    follow run on it;
  * a created context (cuCtxCreate) is a handle of its own on one device,
    with its own flags; the streams and events the driver creates while it
    is current are its own and go with it (cuCtxDestroy).  Memory and
    modules belong to the device, as the primary context's do.

A thread starts with an empty stack: no current context for the driver
until cudaSetDevice, cuCtxSetCurrent, cuCtxPushCurrent or cuCtxCreate
(CUDA's runtime also binds the primary context at a thread's first runtime
call; here the runtime's calls just use device 0 until told otherwise).
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from rcuda.driver_errors import CUresult, DriverError

from .handles import handles


@dataclass(eq=False)
class Context:
    handle: int
    ordinal: int            # the device's ordinal in the program
    primary: bool
    id: int                 # cuCtxGetId: unique in the process, never reused
    flags: int = 0          # a created context's (a primary's are its device's)
    cache_config: int = 0   # a created context's cuCtxSetCacheConfig (a primary's is its device's)
    retained: int = 0       # cuDevicePrimaryCtxRetain minus Release (primary contexts)
    attached: int = 0       # cuCtxAttach minus cuCtxDetach (deprecated usage counts)
    used: bool = False      # made current since the device's last reset (a primary is active then too)
    destroyed: bool = False


class Contexts:
    """The process's contexts and every thread's context stack."""

    def __init__(self, bind_device):
        self._bind_device = bind_device  # makes an ordinal the runtime's current device (per thread); None: no context
        self._lock = threading.Lock()
        self._primaries: dict[int, Context] = {}
        self._ids = itertools.count(1)
        self._owners: dict[int, Context] = {}  # stream or event handle -> the created context it belongs to
        self._threads = threading.local()

    # ---------------------------------------------------------- objects

    def primary(self, ordinal: int) -> Context:
        with self._lock:
            context = self._primaries.get(ordinal)
            if context is None:
                context = self._primaries[ordinal] = Context(handles.new_handle(), ordinal, True, next(self._ids))
                handles.add(context)
        return context

    def create(self, ordinal: int, flags: int) -> Context:
        context = Context(handles.new_handle(), ordinal, False, next(self._ids), flags)
        handles.add(context)
        return context

    def adopt(self, context: Context, handle: int) -> None:
        """A stream or event the driver made while `context` was current."""
        if not context.primary:
            with self._lock:
                self._owners[handle] = context

    def owner(self, handle: int, ordinal: int) -> Context:
        """The context a stream or event of device `ordinal` belongs to."""
        return self._owners.get(handle) or self.primary(ordinal)

    def destroy(self, context: Context) -> list[int]:
        """The handle is invalid from now on; threads that still have it
        current get CUDA_ERROR_CONTEXT_IS_DESTROYED (cuda.h, cuCtxDestroy).
        Returns the handles of the streams and events it owned."""
        with self._lock:
            owned = [h for h, owner in self._owners.items() if owner is context]
            for handle in owned:
                del self._owners[handle]
        context.destroyed = True
        handles.remove(context.handle)
        stack = self._stack()
        if stack and stack[-1] is context:
            self.pop()
        return owned

    @staticmethod
    def get(handle: int, call: str) -> Context:
        """The live context behind a CUcontext, else CUDA_ERROR_INVALID_CONTEXT."""
        return handles.get(handle, Context, call, CUresult.CUDA_ERROR_INVALID_CONTEXT)

    # ---------------------------------------------------------- this thread's stack

    def _stack(self) -> list[Context]:
        stack = getattr(self._threads, "stack", None)
        if stack is None:
            stack = self._threads.stack = []
        return stack

    def current(self, call: str) -> Context | None:
        """This thread's current context, None when it has none."""
        stack = self._stack()
        if stack and stack[-1].destroyed:
            raise DriverError(CUresult.CUDA_ERROR_CONTEXT_IS_DESTROYED,
                              f"{call}: the thread's current context was destroyed (by another thread)")
        return stack[-1] if stack else None

    def set_current(self, context: Context | None) -> None:
        """Replace the top of the stack (cuCtxSetCurrent, cudaSetDevice);
        None pops it."""
        stack = self._stack()
        if context is None:
            if stack:
                self.pop()
            return
        if stack:
            stack[-1] = context
        else:
            stack.append(context)
        self._bind(context)

    def bind_primary_if_none(self, ordinal: int) -> None:
        """A runtime call on a thread without a current context: the
        device's primary context becomes current."""
        if not self._stack():
            self.set_current(self.primary(ordinal))

    def push(self, context: Context) -> None:
        self._stack().append(context)
        self._bind(context)

    def _bind(self, context: Context) -> None:
        context.used = True
        self._bind_device(context.ordinal)

    def pop(self) -> Context | None:
        """The popped context (None with an empty stack); the one below, if
        any, is current again, and its device the runtime's."""
        stack = self._stack()
        if not stack:
            return None
        context = stack.pop()
        if stack:
            self._bind(stack[-1])
        else:
            self._bind_device(None)
        return context

    def forget_device(self, ordinal: int) -> None:
        """cudaDeviceReset / cuDevicePrimaryCtxReset: the primary context is
        inactive until it is retained or made current again (its handle
        stays the same)."""
        self.primary(ordinal).used = False
