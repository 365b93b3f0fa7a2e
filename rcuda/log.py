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
