"""What the streaming server shows about its streams: the per-stream view behind the
dashboard's ``/api/state``, and the dashboard's static files (no torch, no onnxruntime).

    view = StreamView("bed-3", "vitals", "vitals-ppg", sample_rate=125)
    view.on_event({"type": "estimate", "t": 31, "values": {"HR": 72.4}, ...})
    view.to_json()     # the stream's entry of /api/state (schema below)

One :class:`StreamView` per stream, fed every event the server sends to that stream's
client (:meth:`StreamView.on_event`) and the stream's transport counters (samples
received, dropped blocks, errors, lag). ``/api/state`` is::

    {"server": {"time": unix s, "uptime_s", "streams": open streams, "models": [names], ...},
     "streams": [{"id", "task": "vitals"|"kws", "model", "connected",
                  "stale": true when no data came for more than stale_s (below),
                  "health": {"received_s": stream seconds received, "lag_ms",
                             "dropped_blocks", "errors", "last_seen_s": seconds since the
                             client's last message, "last_data_s": seconds since its
                             last block of samples (since the open, before the first)},
                  "vitals": {"HR": {"value": float|null, "valid", "units",
                                    "history": [[t, v|null], … the last 120],
                                    "status", "reason", "left_s", "window_s",
                                    "limits": [{"name": "hr>120", "op": ">",
                                                "threshold": 120}] (below)}},
                  "alarm_rules": [{"name": "hr>120", "vital": "HR", "op": ">",
                                   "threshold": 120, "hold_s": 5, "clear_level": 115,
                                   "units": "bpm", "text": "hr>120 (hold 5 s, …)"}],
                  "alarms": [{"name": "hr>120", "vital": "HR", "since_s": t}],
                  "technical": ["no signal on PLETH (flat line)", …] (active now),
                  "detections": [{"t", "label", "score"}, … the last 20]}]}

**Why no value.** Each vital says why it has no valid value. ``status`` is the monitor's
status of its latest second (:class:`~liquid_stream.apps.vitals.monitor.Estimate`: ``ok``,
``warmup``, ``gap``, ``nosignal``, ``recovering``, ``bridged``; ``warmup`` before the first), and
``reason`` the text a display shows instead of a number (null while ``valid``):

- ``"warming up, N s left"``: the model's window (``window_s``, from the open) minus the
  seconds of signal fed since its last reset (the stream start, or the last ``gap``
  second); ``left_s`` is N (at least 1 while the status is ``warmup``);
- the stream's technical alarms on the channels the vital's model reads
  (``"ECG lead off (II: flat line)"``, ``"no signal on PLETH (flat line)"``) while it is
  ``nosignal``; ``"no data (PLETH, II)"`` (the channels those alarms name) in a long
  gap (``gap``: the model is reset, and warms up again after it);
- ``"recovering, N s left"``: the window still covers a second without signal (N: until
  it no longer does, in ``left_s``); ``"short gap bridged"``: it covers an interpolated
  sample;
- ``"no data"`` while the stream is stale (below), ``"disconnected"`` once it closed.

**Alarm limits.** The alarm rules the stream was opened with (the ``alarms`` of its
``open``, or ``serve --lsl-alarm``) are the stream's ``alarm_rules`` and, per vital, its
``limits``: what a display shows next to the value (``HR > 120``), whether or not an
alarm is active.

**No data.** A connected stream whose client sent no samples for more than ``stale_s``
seconds (default :data:`DEFAULT_STALE_S`; ``serve --stale-s``), while none of its blocks
waits in the server, is *stale*: its entry says ``"stale": true``, its vitals are all
``"valid": false`` (the last values stay in ``value``, the history as it was), its clinical
``alarms`` are ``[]`` and ``technical`` is the one alarm ``"no data for more than N s"``
(the monitor's own technical alarms are as old as its values). The view keeps what it
had: the first block that arrives ends it, and the next event is shown as it comes. A
closed stream is never stale (it is ``connected: false``). This is the server's marking,
so every client of ``/api/state`` sees it, not only the dashboard page.

:func:`static_file` answers ``GET /`` (``index.html``) and ``GET /web/<file>`` from the
dashboard folder ``apps/serve/web/``, refusing any path that leaves it.
"""

from __future__ import annotations

import json
import math
import mimetypes
import re
import time
from collections import deque
from pathlib import Path

from liquid_stream.apps.vitals.alarms import AlarmSyntaxError, parse_alarms
from liquid_stream.io.bidmc_vocab import UNITS, VITALS

WEB_DIR = Path(__file__).resolve().parent / "web"
DISPLAY = {"hr": "HR", "rr": "RR", "spo2": "SpO2"}  # a target's name on the dashboard
HISTORY = 120  # points of a vital's sparkline
DETECTIONS = 20  # recent detections per KWS stream
DEFAULT_STALE_S = 5.0  # a connected stream with no samples for longer is "no data"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".map": "application/json",
}
PLACEHOLDER = b"""<!doctype html><html><head><meta charset="utf-8">
<title>liquid-stream serve</title></head><body>
<h1>liquid-stream serve</h1><p>The dashboard page is not installed
(<code>apps/serve/web/index.html</code>); the stream state is at
<a href="/api/state">/api/state</a>.</p></body></html>
"""


def finite(v) -> float | None:
    """``v`` as a float, None when it is missing or not finite (JSON has no NaN)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def json_safe(obj):
    """``obj`` with every non-finite float replaced by None (strict JSON: browsers'
    ``JSON.parse`` refuses NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def display(target: str) -> str:
    """A target's dashboard name: ``hr`` -> ``HR``, ``spo2`` -> ``SpO2`` (others as given)."""
    return DISPLAY.get(target.lower(), target) if target.lower() in VITALS else target


def alarm_vital(name: str) -> str:
    """The dashboard name of the vital an alarm rule (``hr>120``) watches (``HR``)."""
    try:
        target = parse_alarms(name)[0].vital
    except (AlarmSyntaxError, IndexError):
        target = name.split("<")[0].split(">")[0]
    return display(target)


RULE_TEXT = re.compile(r"\(hold (\d+) s, clears [<>] ([-+0-9.eE]+)")  # str(AlarmRule)
TECH_CHANNEL = re.compile(r"^(?:ECG lead off \(([^:()]+):|no signal on (\S+) \()")


def alarm_rule(text: str) -> dict | None:
    """One configured rule of a bed's open info (``str(AlarmRule)``: ``"hr>120 (hold 5 s,
    clears < 115 bpm)"``, or a bare ``"hr>120"``) as its ``alarm_rules`` entry; None when
    it cannot be read."""
    text = str(text)
    try:
        rule = parse_alarms(text.split(" ", 1)[0])[0]
    except (AlarmSyntaxError, IndexError):
        return None
    m = RULE_TEXT.search(text)
    return {
        "name": rule.name,
        "vital": display(rule.vital),
        "op": rule.op,
        "threshold": rule.threshold,
        "hold_s": int(m.group(1)) if m else rule.hold_s,
        "clear_level": finite(m.group(2)) if m else rule.clear_level,
        "units": UNITS.get(rule.vital, ""),
        "text": text,
    }


def tech_channel(message: str) -> str | None:
    """The channel a technical alarm names (``"ECG lead off (II: flat line)"`` -> ``II``,
    ``"no signal on PLETH (flat line)"`` -> ``PLETH``); None for another message."""
    m = TECH_CHANNEL.match(message)
    return (m.group(1) or m.group(2)) if m else None


class StreamView:
    """The dashboard's view of one stream: health counters, the last values, sparkline
    history and active alarms of a vitals stream, the recent detections of a KWS stream."""

    def __init__(
        self, sid: str, task: str, model: str, sample_rate: float, stale_s: float = DEFAULT_STALE_S
    ):
        self.id, self.task, self.model = sid, task, model
        self.sample_rate = float(sample_rate)
        self.stale_s = float(stale_s)
        self.opened = time.time()
        self.connected = True
        self.closed_at: float | None = None
        self.received_samples = 0
        self.dropped_blocks = 0
        self.dropped_samples = 0
        self.dropped_events = 0
        self.errors = 0
        self.lag_ms = 0.0
        self.last_seen = time.time()
        self.last_data = self.last_seen  # the last block with samples (the open, before one)
        self.waiting = False  # blocks of it wait in the server (set by the server): not stale
        self.stream_time = 0.0  # the t of the latest event
        self.vitals: dict[str, dict] = {}
        self.alarms: dict[str, dict] = {}  # active, by rule name
        self.technical: list[str] = []  # active technical alarms ("no signal on PLETH (…)")
        self.detections: deque[dict] = deque(maxlen=DETECTIONS)
        self.windows_s: dict[str, float] = {}  # vital -> its model's window (the open's info)
        self.reads: dict[str, set[str]] = {}  # vital -> the channels its model reads
        self.rules: list[dict] = []  # the configured alarm rules (alarm_rules)
        self.limits: dict[str, str] = {}  # vital -> its rules' "limits" as JSON text

    def configure(self, info: dict, models=()) -> None:
        """What the bank said when it opened the stream (a vitals bed's ``info``:
        ``targets``, ``units``, ``windows_s``, ``alarms``) and the bank's models (``target``,
        ``channels``): each vital is listed at once (warming up), with its window, the
        channels its model reads and its alarm limits. A keyword stream's info has none."""
        info = info if isinstance(info, dict) else {}
        targets = [str(t) for t in info.get("targets") or ()]
        units = info.get("units") or {}
        windows = info.get("windows_s") or {}
        for target in targets:
            name = display(target)
            slot = self.vitals.setdefault(name, {"history": deque(maxlen=HISTORY)})
            slot.setdefault("value", None)
            slot.setdefault("valid", False)
            slot.setdefault("units", units.get(target, ""))
            w = finite(windows.get(target))
            if w is not None:
                self.windows_s[name] = w
        for m in models:
            if getattr(m, "target", None) in targets:
                self.reads[display(m.target)] = {str(c) for c in m.channels}
        self.rules = [r for r in map(alarm_rule, info.get("alarms") or ()) if r is not None]
        by_vital: dict[str, list] = {}
        for r in self.rules:
            by_vital.setdefault(r["vital"], []).append(
                {"name": r["name"], "op": r["op"], "threshold": r["threshold"]}
            )
        self.limits = {v: json.dumps(lim, allow_nan=False) for v, lim in by_vital.items()}

    def seen(self, samples: int = 0) -> None:
        """The client sent a message (``samples`` of stream input)."""
        self.last_seen = time.time()
        self.received_samples += samples
        if samples:
            self.last_data = self.last_seen

    def on_event(self, ev: dict) -> None:
        """Take in one event sent to the stream's client."""
        kind = ev.get("type")
        t = finite(ev.get("t"))
        if t is not None:
            self.stream_time = max(self.stream_time, t)
        if kind == "estimate":
            values, valid = ev.get("values") or {}, ev.get("valid") or {}
            units, status = ev.get("units") or {}, ev.get("status") or {}
            for target, v in values.items():
                name = display(target)
                slot = self.vitals.get(name)
                if slot is None:
                    slot = self.vitals[name] = {"history": deque(maxlen=HISTORY)}
                slot["value"] = finite(v)
                slot["valid"] = bool(valid.get(target, False))
                slot["units"] = units.get(target, slot.get("units", ""))
                st = status.get(target)
                slot["status"] = str(st) if st is not None else ("ok" if slot["valid"] else None)
                slot["t"] = t
                if st == "gap":  # the model was reset: it warms up again after the gap
                    slot["reset_t"] = t
                elif st == "nosignal":  # the window covers this second until it has passed
                    slot["bad_t"] = t
                point = [t, finite(v) if slot["valid"] else None]
                slot["history"].append(json.dumps(point))  # kept as JSON: /api/state joins
            tech = ev.get("technical")
            if isinstance(tech, list):
                self.technical = [str(m) for m in tech]
            for name in ev.get("raised") or ():
                self.alarms[name] = {"name": name, "vital": alarm_vital(name), "since_s": t}
            for name in ev.get("cleared") or ():
                self.alarms.pop(name, None)
            active = ev.get("alarms")
            if active is not None:  # the monitor's list of active rules is the truth
                for name in list(self.alarms):
                    if name not in active:
                        del self.alarms[name]
                for name in active:
                    if name not in self.alarms:
                        self.alarms[name] = {"name": name, "vital": alarm_vital(name), "since_s": t}
        elif kind == "detection":
            self.detections.append(
                {"t": t, "label": ev.get("label"), "score": finite(ev.get("score"))}
            )
        elif kind == "error":
            self.errors += 1

    def close(self) -> None:
        """The stream ended (closed by its client, or its connection was lost)."""
        self.connected = False
        self.closed_at = time.time()

    def health(self, now: float | None = None) -> dict:
        """The stream's transport counters (``health`` of its ``/api/state`` entry)."""
        now = time.time() if now is None else now
        return {
            "received_s": self.received_samples / self.sample_rate,
            "lag_ms": round(self.lag_ms, 3),
            "dropped_blocks": self.dropped_blocks,
            "dropped_samples": self.dropped_samples,
            "dropped_events": self.dropped_events,
            "errors": self.errors,
            "last_seen_s": round(max(0.0, now - self.last_seen), 3),
            "last_data_s": round(max(0.0, now - self.last_data), 3),
        }

    def stale(self, now: float | None = None) -> bool:
        """True while the stream is connected, nothing of it waits in the server, and its
        client has sent no samples for more than ``stale_s`` seconds (module docstring)."""
        now = time.time() if now is None else now
        return self.connected and not self.waiting and now - self.last_data > self.stale_s

    def no_data_message(self) -> str:
        """The technical alarm of a stale stream (its text does not change while it lasts)."""
        return f"no data for more than {self.stale_s:g} s"

    def _left(self, name: str, slot: dict, since: str) -> int | None:
        """Whole seconds of signal the vital's model still needs: its window minus the
        seconds fed since ``slot[since]`` (the last reset, the last second without
        signal; the stream start when there is none), at least 1; None without a window."""
        w = self.windows_s.get(name)
        if w is None:
            return None
        t = slot.get("t") or 0.0
        return max(1, math.ceil(w - (t - (slot.get(since) or 0.0)) - 1e-9))

    def reason(self, name: str, slot: dict, stale: bool) -> tuple[str | None, int | None]:
        """Why the vital ``name`` shows no valid value (module docstring) and the seconds
        left before it can (warming up, recovering); (None, None) while it is valid."""
        if stale:
            return "no data", None
        if slot.get("valid") and slot.get("value") is not None:
            return None, None
        if not self.connected:
            return "disconnected", None
        st = slot.get("status") or "warmup"  # before the first estimate: warming up
        if st == "warmup":
            left = self._left(name, slot, "reset_t")
            return (f"warming up, {left} s left" if left else "warming up"), left
        if st in ("nosignal", "gap"):
            reads = self.reads.get(name)
            mine = [m for m in self.technical if reads is None or tech_channel(m) in reads]
            if st == "nosignal":
                return "; ".join(mine) or "no signal", None
            gone = [c for m in mine if (c := tech_channel(m))]  # a long gap: the model reset
            return (f"no data ({', '.join(gone)})" if gone else "no data"), None
        if st == "recovering":
            left = self._left(name, slot, "bad_t")
            return (f"recovering, {left} s left" if left else "recovering"), left
        if st == "bridged":
            return "short gap bridged", None
        return "no value", None

    def to_text(self, now: float | None = None) -> str:
        """The stream's entry of ``/api/state`` as JSON text. Built from pieces: the
        sparkline points are kept as JSON and joined, so a ward of 1000 beds' 120-point
        histories costs a join per vital, not a conversion per point. A stale stream's
        entry has no valid vital and no clinical alarm, and its one technical alarm says
        there is no data."""
        now = time.time() if now is None else now
        stale = self.stale(now)
        head = json.dumps(
            {
                "id": self.id,
                "task": self.task,
                "model": self.model,
                "connected": self.connected,
                "stale": stale,
                "sample_rate": self.sample_rate,
                "stream_time_s": self.stream_time,
                "health": self.health(now),
                "alarms": [] if stale else list(self.alarms.values()),
                "technical": [self.no_data_message()] if stale else self.technical,
                "detections": list(self.detections),
                "alarm_rules": self.rules,
            },
            allow_nan=False,
        )
        vitals = ",".join(self._vital_text(name, slot, stale) for name, slot in self.vitals.items())
        return head[:-1] + ',"vitals":{' + vitals + "}}"

    def _vital_text(self, name: str, slot: dict, stale: bool) -> str:
        """One vital's entry of ``vitals`` as JSON text (its history joined, not converted)."""
        reason, left = self.reason(name, slot, stale)
        return (
            json.dumps(name)
            + ":"
            + json.dumps(
                {
                    "value": slot.get("value"),
                    "valid": slot.get("valid", False) and not stale,
                    "units": slot.get("units", ""),
                    "status": slot.get("status") or "warmup",
                    "reason": reason,
                    "left_s": left,
                    "window_s": self.windows_s.get(name),
                },
                allow_nan=False,
            )[:-1]
            + ',"limits":'
            + self.limits.get(name, "[]")
            + ',"history":['
            + ",".join(slot["history"])
            + "]}"
        )

    def to_json(self, now: float | None = None) -> dict:
        """The stream's entry of ``/api/state`` (the schema in the module docstring)."""
        return json.loads(self.to_text(now))


def static_file(path: str, web_dir: Path = WEB_DIR) -> tuple[int, str, bytes]:
    """``(status, content type, body)`` for ``GET path`` of the dashboard: ``/`` is
    ``index.html`` (a placeholder page when it is not installed), ``/web/<file>`` a file
    of ``web_dir``; a path that leaves ``web_dir`` (``..``, an absolute or encoded
    one) is 403, a missing file 404."""
    from urllib.parse import unquote

    path = path.split("?", 1)[0].split("#", 1)[0]
    if path in ("/", "/index.html"):
        index = web_dir / "index.html"
        if not index.is_file():
            return 200, CONTENT_TYPES[".html"], PLACEHOLDER
        return 200, CONTENT_TYPES[".html"], index.read_bytes()
    if not path.startswith("/web/"):
        return 404, "text/plain; charset=utf-8", b"not found\n"
    rel = unquote(path[len("/web/") :])
    parts = rel.replace("\\", "/").split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in rel:
        return 403, "text/plain; charset=utf-8", b"forbidden\n"
    root = web_dir.resolve()
    target = (root / rel).resolve()
    if not target.is_relative_to(root):  # a symlink out of the folder
        return 403, "text/plain; charset=utf-8", b"forbidden\n"
    if not target.is_file():
        return 404, "text/plain; charset=utf-8", b"not found\n"
    kind = CONTENT_TYPES.get(target.suffix.lower()) or (
        mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    )
    return 200, kind, target.read_bytes()
