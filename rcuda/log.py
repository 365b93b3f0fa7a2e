"""Logging set-up for the two sides.

Library code only calls logging.getLogger(__name__); these functions attach
a handler once.  In the application, messages go to its stderr prefixed with
"rcuda:" so they stand apart from the program's own output; RCUDA_LOG picks
the level (debug traces every forwarded call).
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


def level_from_env(default: str = "warning") -> int:
    name = os.environ.get("RCUDA_LOG", default).strip().lower()
    return LEVELS.get(name, logging.WARNING)


def setup_client_logging(level: str | None = None) -> None:
    """`level`: the client's `log` setting (rcuda/config.py); RCUDA_LOG when None."""
    root = logging.getLogger("rcuda")
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("rcuda: %(levelname)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(LEVELS.get(level, logging.WARNING) if level else level_from_env())
    root.propagate = False


def setup_server_logging(level: str | None = None) -> None:
    root = logging.getLogger("rcuda")
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(LEVELS.get((level or "").lower(), level_from_env("info")))
    root.propagate = False


class RateLimitedLog:
    """Warnings about what a peer sent wrong, at most `burst` per `period`
    seconds: a hostile or broken client must not flood the server's log.
    What is held back is counted and reported with the next line let through."""

    def __init__(self, logger: logging.Logger, burst: int = 10, period: float = 60.0):
        self._logger, self._burst, self._period = logger, burst, period
        self._clock = time.monotonic
        self._lock = threading.Lock()
        self._window_start, self._in_window, self._held = self._clock(), 0, 0

    def warning(self, message: str, *args) -> None:
        with self._lock:
            now = self._clock()
            if now - self._window_start > self._period:
                self._window_start, self._in_window = now, 0
            if self._in_window >= self._burst:
                self._held += 1
                return
            self._in_window += 1
            held, self._held = self._held, 0
        if held:
            message += f" ({held} similar messages held back)"
        self._logger.warning(message, *args)
