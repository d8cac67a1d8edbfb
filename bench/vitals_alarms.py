"""False and missed alarms of the vital-sign monitor over every held-out record.

    python bench/vitals_alarms.py MODEL.onnx [MODEL.onnx ...] --checkpoint RUN/best.pt \\
        [--alarm 'hr>120,rr>30'] [--split test] [--out bench/results/vitals_alarms.json]

The records are the ``--split`` records of ``--checkpoint``'s record split (the ones its
training never saw, for ``test``), read from the data root it recorded. Each record is
streamed from its start through ``liquid-stream vitals``' own code path (``open_record`` +
``run_record``, unpaced), and every emitted second is checked against the record's
reference (the numerics over the model's window: ``RunResult.alarm_check``):

  active   seconds the alarm was on
  true     of those, seconds whose reference breaches the rule
  false    of those, seconds whose reference does not (includes the hysteresis: an alarm
           clears only below threshold − margin, so it can stay on a few seconds after the
           reference has come back)
  missed   seconds the reference breaches the rule while the alarm is off (includes the
           warm-up: no estimate before the window fills, plus the rule's hold time)

A false *episode* is an alarm episode during which the reference never breached the rule:
an alarm that should not have been raised at all.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from liquid_stream.apps.vitals_run import open_record, run_record  # noqa: E402
from liquid_stream.checkpoint import split_records  # noqa: E402


def false_episodes(result, rule) -> tuple[int, int]:
    """(episodes, of which false): maximal runs of alarm-on seconds; false if no second of
    the run has a finite reference that breaches the rule."""
    episodes = false = 0
    on_before, breached = False, False
    for e in [*result.estimates, None]:
        on = e is not None and bool(e.alarms.get(rule.name, False))
        if on:
            ref = e.ref.get(rule.vital, float("nan"))
            breached |= ref == ref and rule.breached(ref)
        if on_before and not on:  # an episode ended
            episodes += 1
            false += not breached
        if not on:
            breached = False
        on_before = on
    return episodes, false


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="exported vital-sign models (.onnx)")
    ap.add_argument("--checkpoint", type=Path, required=True,
                    help="a training checkpoint whose record split names the records")  # fmt: skip
    ap.add_argument("--split", default="test", choices=("val", "test"))
    ap.add_argument("--alarm", default="hr>120,rr>30", help="alarm rules (vitals --alarm)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "vitals_alarms.json")
    args = ap.parse_args()
    command = "python " + shlex.join(["bench/vitals_alarms.py", *sys.argv[1:]])
    records = split_records(args.checkpoint, args.split)
    rules = open_record(args.models, records[0], alarms=args.alarm)[0].alarms
    total = {a.rule.name: {"active_s": 0, "true_s": 0, "false_s": 0, "missed_s": 0,
                      "breach_s": 0, "episodes": 0, "false_episodes": 0,
                      "records_breached": 0, "records_false": 0} for a in rules}  # fmt: skip
    per_record, seconds, t0 = [], 0, time.perf_counter()
    for i, rec in enumerate(records, 1):
        monitor, source = open_record(args.models, rec, alarms=args.alarm)
        result = run_record(monitor, source, speed=None)
        check = result.alarm_check()
        row = {"record": rec.name, "seconds": len(result.estimates), "alarms": {}}
        seconds += len(result.estimates)
        for r in monitor.alarms:
            rule = r.rule
            c = dict(check[rule.name])
            c["episodes"], c["false_episodes"] = false_episodes(result, rule)
            c["breach_s"] = c["true_s"] + c["missed_s"]
            t = total[rule.name]
            for k in ("active_s", "true_s", "false_s", "missed_s", "breach_s", "episodes",
                      "false_episodes"):  # fmt: skip
                t[k] += c[k]
            t["records_breached"] += c["breach_s"] > 0
            t["records_false"] += c["false_s"] > 0
            row["alarms"][rule.name] = c
        per_record.append(row)
        print(f"[{i}/{len(records)}] {rec.name}: "
              + ", ".join(f"{k} active {v['active_s']} s (false {v['false_s']} s, "
                          f"{v['false_episodes']} false episodes)"
                          for k, v in row["alarms"].items()), flush=True)  # fmt: skip
    wall = time.perf_counter() - t0
    lines = [
        f"Command: `{command}`",
        "",
        f"{len(records)} {args.split} records, {seconds} monitored seconds "
        f"({seconds / 3600:.2f} h); wall {wall:.0f} s.",
        "",
        "| rule | seconds breached (ref.) | alarm on | true | false | missed | episodes | "
        "false episodes | records with a false second |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t in total.items():
        lines.append(
            f"| `{name}` | {t['breach_s']} | {t['active_s']} | {t['true_s']} | {t['false_s']} "
            f"| {t['missed_s']} | {t['episodes']} | {t['false_episodes']} | "
            f"{t['records_false']} / {len(records)} |"
        )
    md = "\n".join(lines)
    print("\n" + md)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    res = {"command": command, "records": len(records), "seconds": seconds, "wall_s": wall,
           "total": total, "per_record": per_record}  # fmt: skip
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(md + "\n")


if __name__ == "__main__":
    main()
