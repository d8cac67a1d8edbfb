"""False and missed alarms of the vital-sign monitor over every held-out record.

    python bench/vitals_alarms.py MODEL.onnx [MODEL.onnx ...] --checkpoint RUN/best.pt \\
        [--alarm 'hr>120,rr>30'] [--split test] [--baseline] \\
        [--out bench/results/vitals_alarms.json]

The records are the ``--split`` records of ``--checkpoint``'s record split (the ones its
training never saw, for ``test``), read from the data root it recorded. Each record is
streamed from its start through ``liquid-stream vitals``' own code path (``open_record`` +
``run_record``, unpaced), and every emitted second is checked against the record's
reference (the numerics over the model's window:
:func:`liquid_stream.apps.vitals.alarms.check_alarm`, as ``RunResult.alarm_check``):

  active   seconds the alarm was on
  true     of those, seconds whose reference breaches the rule
  false    of those, seconds whose reference does not (includes the hysteresis: an alarm
           clears only below threshold − margin, so it stays on while the value sits
           between the two, as long as that lasts)
  missed   seconds the reference breaches the rule while the alarm is off (includes the
           warm-up: no estimate before the window fills, plus the rule's hold time)

Against *the reference's alarm* (the same rule, hold and hysteresis, driven by the
reference): seconds on while it is off and off while it is on, which an exact estimate
scores 0 on. A false *episode* is an alarm episode during which the reference never
breached the rule and the reference's alarm was never on: an alarm that should not have
been raised at all.

``--baseline`` drives the same rules (:class:`liquid_stream.apps.vitals.alarms.Alarm`: the same
hold and hysteresis) with NeuroKit2's estimates instead, on the same seconds against the
same references: every second, the rate over the model's trailing window
(training/data/vitals/bidmc_baseline.py, as ``evaluate --baseline``): HR from the ECG's R peaks
when the models read II (the PPG's peaks where that fails, or alone for PPG-only models),
RR from the record's RESP channel, which no model sees (an advantage for the baseline; the
PPG's respiratory modulation where a record has no RESP). Seconds before a full window are
invalid for both.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path

from liquid_stream.apps.vitals.alarms import check_alarm
from liquid_stream.apps.vitals.run import open_record, run_record
from liquid_stream.nn.checkpoint import split_records

ROOT = Path(__file__).resolve().parents[1]


def baseline_alarms(record: Path, monitor, estimates, spec: str) -> dict[str, list[bool]]:
    """Per rule, the per-second states of the alarm driven by NeuroKit2's estimates (see
    the module docstring) at the seconds of ``estimates``."""
    from liquid_stream.apps.vitals.alarms import Alarm, parse_alarms
    from liquid_stream.training.data.vitals import bidmc_baseline as bb
    from liquid_stream.training.data.vitals.bidmc import read_whole_record, wfdb_dir

    rec = read_whole_record(wfdb_dir(record.parent) / record.name, record.name)
    fs = float(rec.fs)
    rules = parse_alarms(spec)
    peaks = {v: bb.record_peaks(rec, monitor.channels, v) for v in {r.vital for r in rules}}

    def rate(vital: str, end: int, n: int) -> float:
        if end < n:  # before a full window
            return math.nan
        return bb.window_rate(vital, end - n, n, fs, **peaks.get(vital, {}))

    out = {}
    for rule in rules:
        alarm, states = Alarm(rule), []
        n = int(round(monitor.windows_s[rule.vital] * fs))
        for e in estimates:
            v = rate(rule.vital, int(round(e.time_s * fs)), n)
            alarm.update(v, math.isfinite(v), e.time_s)
            states.append(alarm.active)
        out[rule.name] = states
    return out


def table(total: dict, n_records: int) -> list[str]:
    lines = [
        "| rule | seconds breached (ref.) | alarm on | true | false | missed | episodes | "
        "false episodes | records with a false second | reference's alarm on | on while "
        "it is off | off while it is on |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t in total.items():
        lines.append(
            f"| `{name}` | {t['breach_s']} | {t['active_s']} | {t['true_s']} | {t['false_s']} "
            f"| {t['missed_s']} | {t['episodes']} | {t['false_episodes']} | "
            f"{t['records_false']} / {n_records} | {t['ref_active_s']} | "
            f"{t['false_vs_ref_s']} | {t['missed_vs_ref_s']} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="exported vital-sign models (.onnx)")
    ap.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="a training checkpoint whose record split names the records",
    )
    ap.add_argument("--split", default="test", choices=("val", "test"))
    ap.add_argument("--alarm", default="hr>120,rr>30", help="alarm rules (vitals --alarm)")
    ap.add_argument(
        "--baseline",
        action="store_true",
        help="also drive the rules with NeuroKit2's estimates (module docstring)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "vitals_alarms.json")
    args = ap.parse_args()
    command = "python " + shlex.join(["bench/vitals_alarms.py", *sys.argv[1:]])
    records = split_records(args.checkpoint, args.split)
    rules = open_record(args.models, records[0], alarms=args.alarm)[0].alarms
    keys = tuple(check_alarm(rules[0].rule, [], []))  # the counts of one rule
    drivers = ["model", "NeuroKit2"] if args.baseline else ["model"]
    total = {
        d: {
            a.rule.name: {**dict.fromkeys(keys, 0), "records_breached": 0, "records_false": 0}
            for a in rules
        }
        for d in drivers
    }
    per_record, seconds, t0 = [], 0, time.perf_counter()
    for i, rec in enumerate(records, 1):
        monitor, source = open_record(args.models, rec, alarms=args.alarm)
        result = run_record(monitor, source, speed=None)
        ests = result.estimates
        states = {
            "model": {
                r.rule.name: [bool(e.alarms.get(r.rule.name, False)) for e in ests]
                for r in monitor.alarms
            }
        }
        if args.baseline:
            states["NeuroKit2"] = baseline_alarms(rec, monitor, ests, args.alarm)
        row = {"record": rec.name, "seconds": len(ests), "alarms": {}}
        seconds += len(ests)
        for d in drivers:
            for r in monitor.alarms:
                rule = r.rule
                refs = [e.ref.get(rule.vital, math.nan) for e in ests]
                c = check_alarm(rule, states[d][rule.name], refs)
                t = total[d][rule.name]
                for k in keys:
                    t[k] += c[k]
                t["records_breached"] += c["breach_s"] > 0
                t["records_false"] += c["false_s"] > 0
                row["alarms"][rule.name if d == "model" else f"{rule.name} ({d})"] = c
        per_record.append(row)
        print(
            f"[{i}/{len(records)}] {rec.name}: "
            + ", ".join(
                f"{k} active {v['active_s']} s (false {v['false_s']} s, "
                f"{v['false_episodes']} false episodes)"
                for k, v in row["alarms"].items()
            ),
            flush=True,
        )
    wall = time.perf_counter() - t0
    lines = [
        f"Command: `{command}`",
        "",
        f"{len(records)} {args.split} records, {seconds} monitored seconds "
        f"({seconds / 3600:.2f} h); wall {wall:.0f} s.",
        "",
        *table(total["model"], len(records)),
    ]
    if args.baseline:
        lines += [
            "",
            "The same rules driven by NeuroKit2's estimates (same seconds, same references):",
            "",
            *table(total["NeuroKit2"], len(records)),
        ]
    md = "\n".join(lines)
    print("\n" + md)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    res = {
        "command": command,
        "records": len(records),
        "seconds": seconds,
        "wall_s": wall,
        "total": total,
        "per_record": per_record,
    }
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(md + "\n")


if __name__ == "__main__":
    main()
