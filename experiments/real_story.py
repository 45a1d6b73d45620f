"""Write the committed story folder that notebook 04 reads: the real-data cue audit and, per
source, every run's slices and drift per target (`anchorviz.analysis.story.export_story`).

    python experiments/real_story.py --store pku=runs/real_cues/pku \\
        --out notebooks/data/real_story

``--store LABEL=FOLDER`` (repeatable): a finished sweep folder of ``experiments/real_cues.py``.
``--seal``: no store; check the tables already in ``--out`` (ranges, runs) and record each
file's sha256 in its ``story.json`` (`anchorviz.analysis.story.seal_story`): the explicit way
to accept the folder's files as they are (e.g. a folder exported before hashes were recorded).
The audit (`anchorviz.analysis.cues.cue_agreement` over the four real files, prompt-cluster
bootstrap, 2,000 resamples, seed 0) is computed when the real-data folder is present
(``$ANCHORVIZ_REALDATA``) and otherwise kept from the existing story folder. Nothing of the
data's text is written: counts, shares, accuracies and drift only.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pandas as pd

from anchorviz.analysis.cues import audit_datasets
from anchorviz.analysis.story import seal_story
from anchorviz.paths import realdata_dir
from anchorviz.viz.story import export_story

DATASETS = ("realdata-ultrafeedback", "realdata-pandalm", "realdata-hh-harmless",
            "realdata-pku-safe")
CUES = ("length", "refusal", "format")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", action="append", metavar="LABEL=FOLDER")
    ap.add_argument("--out", default="notebooks/data/real_story")
    ap.add_argument("--seal", action="store_true",
                    help="record the sha256 of the files already in --out (no store)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.seal:
        if args.store:
            ap.error("--seal takes no --store: it accepts the files already in --out")
        seal_story(args.out)
        print(f"sealed {args.out}")
        return 0
    if not args.store:
        ap.error("give --store LABEL=FOLDER (one per source), or --seal")
    stores = {}
    for item in args.store:
        label, sep, folder = item.partition("=")
        if not sep or not label or not folder:
            sys.exit(f"--store {item!r}: expected LABEL=FOLDER, e.g. pku=runs/real_cues/pku")
        stores[label] = folder
    out = Path(args.out)
    if realdata_dir() is not None:
        audit = audit_datasets(DATASETS, list(CUES))
    elif (out / "audit.csv").is_file():
        audit = pd.read_csv(out / "audit.csv")
    else:
        audit = None
    note = ("Made by `python " + " ".join(sys.argv) + "`. Sources and targets are the real "
            "preference files named in each store; teacher minilm-l3, student minilm-l6, 128 "
            "tokens, bfloat16 autocast, split-varying seeds.")
    export_story(stores, out, audit=audit, note=note)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
