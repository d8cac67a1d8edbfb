"""Batched multi-stream inference: many streams of one exported model stepped in one
onnxruntime call (the engines of ``liquid-stream serve``; synchronous, no transport, no
torch).

    from liquid_stream.apps.batch import BatchedSession, KwsBank, VitalsBank

    bank = KwsBank(shipped("kws-sc10"))           # or VitalsBank([hr.onnx, rr.onnx])
    bank.open("alice", sample_rate=48000)
    bank.push("alice", block)                     # checked now (ValueError), buffered
    for sid, events in bank.step().items(): ...   # JSON-able dicts
    bank.close("alice")

Three layers, one module each:

- :class:`~.session.BatchedSession` (``session.py``): one session, many
  streams' states. Every exported graph takes ``x (batch, T, d_input)`` and its states
  ``state.<name>`` explicitly; ``state_spec`` gives each state's shape with the symbolic
  ``"batch"`` at its own axis (``(batch, W−1)``, ``(H, batch, S)``, …) or none (a value
  shared by the batch). The session keeps each state as one array whose batch axis holds
  a slot per stream; a step **gathers** the stepped streams' slots along each state's
  batch axis, runs **one** call on the stacked blocks, checks each stream's outputs and
  new state finite and **scatters** the new states back (a refused stream keeps its old
  state; the others commit).
- :class:`~.kws.KwsBank` (``kws.py``): many
  :class:`~liquid_stream.apps.kws.spotter.KeywordSpotter` streams: per stream a resampler, the
  pending samples and the spotter's :class:`~liquid_stream.apps.kws.spotter.KeywordTracker`.
- :class:`~.vitals.VitalsBank` (``vitals.py``): many
  :class:`~liquid_stream.apps.vitals.monitor.VitalsMonitor` beds built with
  ``deferred=True``: each bed resamples, checks and applies the NaN-gap rule itself and
  queues the rows (and resets) each model must see; the bank runs the models.

The batching rule. Each model steps in whole chunks of T0 model-rate samples (its
metadata ``chunk``, or the banks' ``chunk`` option). ``step()`` takes every stream with at
least T0 pending samples and runs one T0 chunk of each in one session call; streams with
more repeat, one call per round, until every stream has less than T0 pending; the
remainders wait for more input. The keyword bank takes more per call where the graph
allows it: a stream with k whole chunks waiting runs min(k, ⌊max_chunk / T0⌋) of them at
once, one call per k (T0 = the spotter's 10 ms frame; a graph exported for 10 ms calls has
max_chunk = T0, while the shipped ``kws-sc10``, exported ``--chunk 1600 --sub-block 1``,
steps a 100 ms block in one call instead of ten: docs/serving.md §8). Two exceptions give
a shorter chunk: a vital-sign model about to be reset (a long gap) first runs the rows
before the reset, and ``close`` runs what is left. Chunks of one length run together; a
stream never has two calls in one round.

Shared states split a call. A state without a batch axis (``ssm.fill``: the sub-block
fill; ``frontend.phase``; the scale-norm front end's ``frontend.weight`` = 1 − β^{n+1})
holds one value for the whole call, so the session groups the streams by those values
and makes one call per group. Streams fed the same chunks since their start hold equal
values: the shipped spotter (fill and phase constant in whole 160-sample frames) always
makes one group. The shipped vital-sign models (sub-blocks of one frame since
2026-11-28: the fill is always 0) make one group, plus one per start round among beds
younger than ~80 s (until the weight reaches its float32 fixed point); exported with
sub-blocks of 4 frames, a 1 s chunk of 25 frames moves the fill, up to 4 groups. A
batch-shaped fill / phase / weight in the exported graph would lift this.

Why it is exact. The graph's batch elements never mix (no operation reduces over the
batch axis) except through the shared states, which the grouping makes equal; so a
stream's outputs and states are those of its own :class:`OnnxStreamer` fed the same
chunks, up to float32 rounding where a kernel's summation order depends on the batch
size (measured on the shipped models: relative differences ≤ 1e-6; the tests allow rtol
1e-5). The banks' per-stream logic is the apps' own (KeywordTracker, the monitor's lanes
and alarms), not a copy, and model outputs do not depend on the chunking (the streaming
graphs are exact for any chunk sizes, up to rounding): a stream's events through a bank
equal those of a :class:`KeywordSpotter` / :class:`VitalsMonitor` fed the same input.

Faults stay with their stream: ``push`` checks a block at once (shape, type, NaN / ±inf
for audio, samples beyond the model's input bound: one-line ValueError, nothing
changes); a fault found in ``step`` (a model output or state that would not be finite)
becomes that stream's ``{"type": "error", "message": ...}`` event, its model state as
before the refused chunk, while the other streams go on.
"""

from __future__ import annotations

from liquid_stream.apps.batch.kws import KwsBank
from liquid_stream.apps.batch.session import BatchedSession
from liquid_stream.apps.batch.vitals import VitalsBank

__all__ = ["BatchedSession", "KwsBank", "VitalsBank"]
