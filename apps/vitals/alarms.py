"""Threshold alarms with hysteresis for the vital-sign monitor (no torch, no numpy).

Syntax (``--alarm``): comma-separated rules ``VITAL OP THRESHOLD[:hold=S][:margin=M]``::

    hr>120,spo2<90            # defaults: hold 5 s, margin per vital (below)
    rr>30:hold=10:margin=4    # per-rule overrides

VITAL is ``hr``, ``rr`` or ``spo2``; OP is ``>`` or ``<``.

Rule for ``hr>120`` (``<`` is the mirror image):

- *trigger*: the estimate is valid and strictly above 120 for ``hold`` consecutive
  seconds. An invalid second (warming up, signal gap) restarts that count.
- *clear*: an active alarm clears at the first valid second strictly below
  ``120 - margin``. Values between ``120 - margin`` and 120 and invalid seconds keep it
  active (missing data never silences an alarm).

Default margins: hr 5 bpm, rr 3 breaths/min, spo2 2 %.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from liquid_stream.io.bidmc_vocab import UNITS, VITALS

DEFAULT_MARGIN = {"hr": 5.0, "rr": 3.0, "spo2": 2.0}
DEFAULT_HOLD_S = 5

_RULE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*([<>]=?|=+)\s*([-+]?[0-9]*\.?[0-9]+)\s*((?::[^:]*)*)$")


class AlarmSyntaxError(ValueError):
    """An ``--alarm`` rule that cannot be parsed."""


@dataclass(frozen=True)
class AlarmRule:
    vital: str
    op: str  # ">" or "<"
    threshold: float
    hold_s: int = DEFAULT_HOLD_S
    margin: float = 0.0

    @property
    def name(self) -> str:
        """``hr>120`` (threshold without a trailing ``.0``)."""
        return f"{self.vital}{self.op}{self.threshold:g}"

    @property
    def clear_level(self) -> float:
        return self.threshold - self.margin if self.op == ">" else self.threshold + self.margin

    def breached(self, value: float) -> bool:
        return value > self.threshold if self.op == ">" else value < self.threshold

    def cleared(self, value: float) -> bool:
        return value < self.clear_level if self.op == ">" else value > self.clear_level

    def __str__(self) -> str:
        return (
            f"{self.name} (hold {self.hold_s} s, clears {'<' if self.op == '>' else '>'} "
            f"{self.clear_level:g} {UNITS[self.vital]})"
        )


@dataclass
class Alarm:
    """One rule's state; feed it one estimate per second with :meth:`update`."""

    rule: AlarmRule
    active: bool = False
    run_s: int = 0  # consecutive valid seconds in breach
    episodes: int = 0
    active_s: int = 0
    events: list[tuple[float, str]] = field(default_factory=list)

    def update(self, value: float, valid: bool, time_s: float = 0.0) -> str | None:
        """Advance one second; returns ``"on"``/``"off"`` when the state changes."""
        ok = valid and value is not None and math.isfinite(value)
        event = None
        if ok and self.rule.breached(value):
            self.run_s += 1
        else:
            self.run_s = 0
        if not self.active and self.run_s >= self.rule.hold_s:
            self.active, event = True, "on"
            self.episodes += 1
        elif self.active and ok and self.rule.cleared(value):
            self.active, event, self.run_s = False, "off", 0
        if self.active:
            self.active_s += 1
        if event:
            self.events.append((time_s, event))
        return event


def parse_alarms(spec: str | list[str] | tuple[str, ...] | None, hold_s: int | None = None):
    """Parse ``"hr>120,spo2<90"`` (or a list of such strings) into :class:`AlarmRule` s.

    ``hold_s`` overrides the default hold for rules without ``:hold=``.
    Raises :class:`AlarmSyntaxError` with a message naming the bad rule.
    """
    if spec is None:
        return []
    parts = [spec] if isinstance(spec, str) else list(spec)
    items = [p.strip() for s in parts for p in s.split(",")]
    rules: list[AlarmRule] = []
    for item in items:
        if not item:
            continue
        m = _RULE.match(item)
        if not m:
            raise AlarmSyntaxError(
                f"bad alarm {item!r}: expected VITAL>NUMBER or VITAL<NUMBER, e.g. hr>120 or "
                "spo2<90 (optional :hold=SECONDS:margin=VALUE)"
            )
        vital, op, number, opts = m.group(1).lower(), m.group(2), m.group(3), m.group(4)
        if vital not in VITALS:
            raise AlarmSyntaxError(
                f"unknown vital {m.group(1)!r} in alarm {item!r}: use one of {', '.join(VITALS)}"
            )
        if op not in (">", "<"):
            raise AlarmSyntaxError(f"bad operator {op!r} in alarm {item!r}: use > or <")
        hold = DEFAULT_HOLD_S if hold_s is None else int(hold_s)
        margin = DEFAULT_MARGIN[vital]
        for opt in filter(None, (o.strip() for o in opts.split(":"))):
            key, _, val = opt.partition("=")
            key = key.strip().lower()
            try:
                if key == "hold":
                    hold = int(val.strip().removesuffix("s"))
                elif key == "margin":
                    margin = float(val)
                else:
                    raise AlarmSyntaxError(
                        f"unknown option {key!r} in alarm {item!r}: use hold=SECONDS or "
                        "margin=VALUE"
                    )
            except ValueError as e:
                if isinstance(e, AlarmSyntaxError):
                    raise
                raise AlarmSyntaxError(f"bad value {opt!r} in alarm {item!r}") from None
        if hold < 1 or margin < 0:
            raise AlarmSyntaxError(f"alarm {item!r}: hold must be >= 1 s and margin >= 0")
        rules.append(AlarmRule(vital, op, float(number), hold, margin))
    names = [r.name for r in rules]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise AlarmSyntaxError(f"duplicate alarm {sorted(dup)[0]!r}")
    return rules


def check_alarm(rule: AlarmRule, on: list[bool], refs: list[float]) -> dict[str, int]:
    """One rule's per-second alarm states ``on`` against the per-second references ``refs``
    (the true value over the model's window; NaN: none that second), three ways:

    - *seconds*: ``active_s`` seconds on; of them ``true_s`` / ``false_s`` with a reference
      that breaches / does not breach the threshold; ``missed_s`` seconds the reference
      breaches it while the alarm is off (``breach_s`` = true + missed). These charge the
      rule's own hold and hysteresis to the alarm: an alarm that rightly came on stays on
      while the value sits between threshold − margin and the threshold, and every such
      second counts as false (on a record that hovers just under the threshold, most of
      them).
    - *the reference's alarm*: the same rule (hold, margin) driven by the references
      (:class:`Alarm`; a NaN reference is an invalid second), on ``ref_active_s`` seconds;
      ``false_vs_ref_s`` seconds the alarm is on while the reference's is off,
      ``missed_vs_ref_s`` the reverse. An estimate equal to the reference scores 0 on
      both, which the per-second counts do not give it.
    - *episodes*: maximal runs of alarm-on seconds; ``false_episodes`` those during which
      no reference breached the rule and the reference's alarm was never on: alarms that
      should not have been raised at all (one raised late, in the hysteresis band of a
      true one, is not).
    """
    if len(on) != len(refs):
        raise ValueError(f"{len(on)} alarm states but {len(refs)} references")
    keys = (
        "active_s",
        "true_s",
        "false_s",
        "missed_s",
        "breach_s",
        "episodes",
        "false_episodes",
        "ref_active_s",
        "false_vs_ref_s",
        "missed_vs_ref_s",
    )
    c = dict.fromkeys(keys, 0)
    ref_alarm = Alarm(rule)
    breached_in_episode = False
    for i, (a, ref) in enumerate(zip(on, refs, strict=True)):
        known = ref is not None and math.isfinite(ref)
        hit = known and rule.breached(ref)
        ref_alarm.update(ref, known, float(i))
        c["active_s"] += a
        c["true_s"] += a and hit
        c["false_s"] += a and known and not hit
        c["missed_s"] += hit and not a
        c["ref_active_s"] += ref_alarm.active
        c["false_vs_ref_s"] += a and not ref_alarm.active
        c["missed_vs_ref_s"] += ref_alarm.active and not a
        breached_in_episode = a and (breached_in_episode or hit or ref_alarm.active)
        if a and (i + 1 == len(on) or not on[i + 1]):  # an episode ends here
            c["episodes"] += 1
            c["false_episodes"] += not breached_in_episode
    c["breach_s"] = c["true_s"] + c["missed_s"]
    return c
