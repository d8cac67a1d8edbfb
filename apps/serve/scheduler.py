"""Batching: each bank's batcher takes live streams first and bulk streams within their
share, and steps them in one onnxruntime call on the bank's worker
(:class:`SchedulerMixin` of :class:`~.server.StreamServer`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

from .defaults import log
from .hosts import HostedModel
from .protocol import _Stream


class SchedulerMixin:
    """The batchers and their steps."""

    def _batching(self, host: HostedModel) -> bool:
        """Whether ``host``'s batcher runs (not before start, nor once the server stops)."""
        task = self._batchers.get(id(host))
        return task is not None and not task.done()

    async def _batcher(self, host: HostedModel) -> None:
        """Step ``host``'s bank whenever input waits (module docstring: scheduling).

        Live streams first: a step of the live streams' waiting blocks runs as soon as
        every live stream has input or the oldest live block has waited ``budget``.
        Meanwhile (and whenever no live step is due) bulk streams (overflow "wait") run
        in their own steps, each bounded to ``bulk_ms`` of model time (at least one
        block), and, while live streams are open, paced to ``bulk_share`` of one core
        (all banks together): a live block waits behind at most one bounded bulk step,
        and so do opens and closes (they run in the same worker thread, between steps)."""
        while True:
            host.wake.clear()
            now = time.monotonic()
            timeout = None
            if host.pending:  # in arrival order: the first holds the oldest block
                first = next(iter(host.pending))
                oldest = first.inbox[0][0] if first.inbox else now
                wait = oldest + self.budget - now
                if wait <= 0 or len(host.pending) >= host.live:
                    await self._step(host, self._take_live(host), bulk=False)
                    continue
                timeout = wait
            if host.bulk:
                wait = self._bulk_next - now
                if wait <= 0 or not any(h.live for h in self.banks):
                    await self._step(host, self._take_bulk(host), bulk=True)
                    continue
                timeout = wait if timeout is None else min(timeout, wait)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(host.wake.wait(), timeout)

    def _take_live(self, host: HostedModel) -> list:
        """The waiting blocks of the live streams (at most ``max_batch``, longest waiting
        first), their inboxes emptied."""
        work = []
        for s in list(itertools.islice(host.pending, self.max_batch)):
            del host.pending[s]
            if s.inbox and s.id in host.streams:
                work.append((s, list(s.inbox)))
            s.inbox.clear()
            s.queued_blocks = s.queued_samples = 0
            s.room.set()
        return work

    def _take_bulk(self, host: HostedModel) -> list:
        """A bounded share of the bulk streams' waiting blocks: whole blocks, about
        ``bulk_ms`` of model time in all at the bank's measured cost per input second,
        split evenly over the waiting bulk streams (round robin: a stream with blocks
        left goes to the back), at least one block. Their order within a stream is kept,
        so a stream's input reaches its bank as it would in one step."""
        budget = self.bulk_ms / 1000 / host.bulk_cost if host.bulk_cost else 0.0
        streams = list(itertools.islice(host.bulk, self.max_batch))
        share = budget / len(streams)
        work, total = [], 0.0
        for s in streams:
            if work and total >= budget:
                break
            del host.bulk[s]
            blocks, got = [], 0.0
            while s.inbox and (not blocks or got < share):
                arrival, block = s.inbox.popleft()
                if isinstance(block, int):
                    n = block
                else:
                    n = len(block)
                    s.queued_blocks -= 1
                    s.queued_samples -= n
                blocks.append((arrival, block))
                got += n / s.rate
            total += got
            if s.queued_blocks < self.queue_blocks and s.queued_samples < self.queue_s * s.rate:
                s.room.set()
            if s.inbox:
                host.bulk[s] = None
            elif s.drained is not None:
                s.drained.set()
            if blocks and s.id in host.streams:
                work.append((s, blocks))
        return work

    async def _step(self, host: HostedModel, work: list, bulk: bool) -> None:
        """Run one step of ``work`` [(stream, [(arrival, block), ...])] in the bank's
        worker; route the events and refusals; count."""
        if not work:
            return
        loop = asyncio.get_running_loop()
        try:
            errors, events, t_push, t_step, wall = await loop.run_in_executor(
                host.executor, self._step_in_worker, host, work
            )
        except Exception:  # noqa: BLE001 - a bank bug must not end the server
            log.exception("step of %s failed", host.name)
            for s, _ in work:
                self._error(s, "internal error while stepping this model; see the server log")
            return
        t0 = time.thread_time()
        now = time.monotonic()
        for s, blocks in work:
            for msg in errors.get(s, ()):
                self._error(s, msg)
            s.last_latency = now - blocks[0][0]
            if not bulk:
                host.stats.latency.extend(now - a for a, _ in blocks)
        stepped = {s.id: s for s, _ in work}
        for sid, evs in events.items():
            s = stepped.get(sid) or host.streams.get(sid)
            if s is None:
                continue
            for ev in evs:
                self._post(s, ev)
        for s, _ in work:
            if s.new_drops[0]:
                self._notice_drops(s)
        st = host.stats
        st.steps += 1
        st.blocks += sum(len(b) for _, b in work)
        st.batch.append(len(work))
        st.push_s += t_push
        st.step_s += t_step
        st.step_wall_s += wall
        st.route_s += time.thread_time() - t0
        if bulk:
            seconds = sum(
                (b if isinstance(b, int) else len(b)) / s.rate
                for s, blocks in work
                for _, b in blocks
            )
            cpu = t_push + t_step
            st.bulk_steps += 1
            st.bulk_s += seconds
            st.bulk_cpu_s += cpu
            if seconds > 0:
                cost = cpu / seconds
                host.bulk_cost = cost if not host.bulk_cost else 0.7 * host.bulk_cost + 0.3 * cost
            # one clock for every bank: bulk steps take at most bulk_share of one core
            # in all (the banks' threads share the machine's cores with the live steps)
            self._bulk_next = time.monotonic() + cpu * (1 - self.bulk_share) / self.bulk_share

    def _step_in_worker(self, host: HostedModel, work):
        """In the worker: push the waiting blocks, step the bank; (refusals, events, push
        and step CPU seconds of this thread, step wall seconds)."""
        t0 = time.thread_time()
        errors = {}
        for s, blocks in work:
            errs = self._push_blocks(s, blocks)
            if errs:
                errors[s] = errs
        t1, w1 = time.thread_time(), time.perf_counter()
        events = host.bank.step()
        return errors, events, t1 - t0, time.thread_time() - t1, time.perf_counter() - w1

    def _notice_drops(self, s: _Stream) -> None:
        blocks, samples = s.new_drops
        s.new_drops = [0, 0]
        self._post(
            s,
            {
                "type": "dropped",
                "blocks": blocks,
                "samples": samples,
                "total_blocks": s.view.dropped_blocks,
            },
        )
