"""Ctrl-C and SIGTERM stop an app the same way (no torch).

``restore = interrupt_on_signals()`` makes SIGINT (even when it was inherited as ignored,
e.g. by a background job) and SIGTERM (what systemd, docker and ``timeout`` send) raise
``KeyboardInterrupt`` in the main thread, so an app's own Ctrl-C path (write what was
streamed, mark it interrupted) also runs on SIGTERM; ``restore()`` puts the old handlers
back. Outside the main thread it does nothing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


def interrupt_on_signals() -> Callable[[], None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt; returns a function restoring the old
    handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return restore
