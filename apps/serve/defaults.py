"""The streaming server's defaults and limits, its error and its log (shared by the
modules of :mod:`liquid_stream.apps.serve`)."""

from __future__ import annotations

import logging
import re

DEFAULT_PORT = 8765
DEFAULT_BUDGET_MS = 20.0
DEFAULT_QUEUE_BLOCKS = 256
DEFAULT_QUEUE_S = 10.0
DEFAULT_OUT_QUEUE = 256
DEFAULT_OUT_HARD = 8192
DEFAULT_MAX_BATCH = 256  # streams per step (more wait for the next, at once)
DEFAULT_BULK_MS = 10.0  # model time (CPU ms) one step of bulk streams may take, estimated
DEFAULT_BULK_SHARE = 0.5  # of one core bulk steps (all banks) take while live streams are open
MAX_MESSAGE = 1 << 22  # bytes of one WebSocket message
DEFAULT_OPEN_TIMEOUT_S = 10.0  # a connection must open a stream within this
DEFAULT_PING_S = 20.0  # WebSocket keepalive: ping interval, and how long a pong may take
FRAMINGS = ("counted", "raw")
QRS_TOP_HZ = 30.0  # top of the QRS band signal_quality tests on an ECG lead (5-30 Hz)
KEEP_CLOSED = 200  # closed streams kept on the dashboard (connected: false)
KEEP_CLOSED_S = 300.0
STATE_EVERY_S = 0.2  # /api/state is rebuilt at most this often
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,63}$")
COOKIE = "ls_token"
log = logging.getLogger("liquid_stream.serve")


class ServeError(ValueError):
    """A server setting that cannot be used (message says what and why)."""
