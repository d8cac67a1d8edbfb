"""LSL sources: a stream fed from a Lab Streaming Layer inlet instead of a WebSocket
(:class:`LslMixin` of :class:`~.server.StreamServer`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time

import numpy as np

from liquid_stream.apps.serve.state import StreamView

from .protocol import _Stream


class LslMixin:
    """Streams whose blocks come from an LSL inlet (``serve --lsl``)."""

    async def add_lsl(
        self,
        name: str,
        *,
        model: str | None = None,
        alarms: str | None = None,
        timeout: float = 5.0,
        block_s: float = 1.0,
        sid: str | None = None,
        on_event=None,
    ) -> str:
        """Open a vitals stream fed by the live LSL stream ``name``
        (:class:`liquid_stream.io.lsl.LslReader`: channels mapped to PLETH / II / RESP, its
        nominal rate resampled by the bed) and return its id (default ``lsl-NAME``). Its
        estimates go to the dashboard (no client reads them) and to ``on_event(event)``
        (called on the server's loop); it ends when the LSL source does. Blocks are
        ``block_s`` seconds of the stream (sample ``round(k * fs)`` starts block k: the
        chunks of ``vitals --record``); when the bed's inbox is full the pump waits (the
        inlet buffers meanwhile), so nothing is dropped. ValueError (one line) when the
        stream cannot be found or used."""
        from liquid_stream.io.lsl import LslError, LslReader

        loop = asyncio.get_running_loop()
        try:
            reader = await loop.run_in_executor(None, lambda: LslReader(name, timeout))
        except LslError as e:
            raise ValueError(str(e)) from None
        req = {
            "op": "open",
            "model": model or "vitals",
            "channels": list(reader.channels),
            "sample_rate": reader.rate,
            "alarms": alarms,
            "id": sid or f"lsl-{name}",
        }
        try:
            host, sid, kwargs, columns, rate, _ = self._open_request(req, {})
            self._reserved.add(sid)
            host.opening += 1
            try:
                info = await loop.run_in_executor(
                    host.executor, lambda: host.bank.open(sid, **kwargs)
                )
            finally:
                self._reserved.discard(sid)
                host.opening -= 1
        except ValueError:
            reader.close()
            raise
        view = StreamView(sid, host.task, host.name, rate, stale_s=self.stale_s)
        view.configure(info, getattr(host.bank, "models", ()))  # windows, alarm limits
        stream = _Stream(sid, host, None, columns, rate, "wait", view)
        self._set_bound(stream, kwargs.get("channels"))
        stream.open = False  # nobody to send to: the events feed the view (and on_event)
        stream.listener = on_event
        self.streams[sid] = host.streams[sid] = stream
        host.live += 1
        self.views.pop(sid, None)
        self.views[sid] = view
        self._state_cache = None  # a stream more: /api/state shows it at once
        threading.Thread(
            target=self._pump_lsl,
            args=(loop, stream, reader, block_s),
            name=f"lsl-{name}",
            daemon=True,
        ).start()
        return sid

    def _pump_lsl(self, loop, s: _Stream, reader, block_s: float, poll_s: float = 0.02) -> None:
        """Thread: pull the LSL inlet, hand whole blocks to the loop; end the stream with
        the source (the server stopping ends it too)."""
        fs, k, buf, n = reader.rate, 1, [], 0  # n: samples handed on
        try:
            while not reader.ended and not loop.is_closed() and s.id in self.streams:
                x = reader.pull()
                if len(x):
                    buf.append(x)
                    have, used = np.concatenate(buf), 0
                    if not block_s:
                        self._hand(loop, s, have)
                        n, used = n + len(have), len(have)
                    while block_s and (b := int(round(k * block_s * fs))) <= n + len(have) - used:
                        size = b - n  # one block: samples round((k-1) fs) .. round(k fs)
                        self._hand(loop, s, have[used : used + size])
                        n, used, k = b, used + size, k + 1
                    buf = [have[used:]] if used < len(have) else []
                else:
                    time.sleep(poll_s)
            if buf and not loop.is_closed():
                self._hand(loop, s, np.concatenate(buf))
        except (RuntimeError, concurrent.futures.CancelledError):  # the server stopped
            return
        finally:
            reader.close()
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._end(s, False, None), loop)

    def _hand(self, loop, s: _Stream, block: np.ndarray) -> None:
        """Thread: give a source's block to the loop, waiting while its inbox is full
        (the LSL inlet buffers meanwhile: nothing is dropped)."""

        async def put():
            await s.room.wait()
            self._receive(s, block)

        asyncio.run_coroutine_threadsafe(put(), loop).result()
