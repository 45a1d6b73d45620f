"""Can a linear reward head read a cue from a model's pooled states without changing them?

The question that separates a *readable* cue (one a head on frozen pretrained features can use,
so anchoring the representation cannot stop a student from exploiting it) from a *drift-borne*
cue (one the student must reshape its layers to read, where anchoring should help).

Each kind of artefact (`anchorviz.data.artifacts`) is planted on the chosen side of the demo's
source pairs (VADER movie reviews; seeded split, max 48 tokens):

- ``marker``: " [verified]" on the chosen response;
- ``order``: " so then" on the chosen response, " then so" on the rejected one;
- ``echo``: the chosen response's first word appended to both responses.

A model's mean-pooled states at every layer give, per pair, what the cue adds to the chosen
side minus what it adds to the rejected side: ``x = [h(c + cue) - h(c)] - [h(r + suffix) -
h(r)]``. A linear head r = w . h gains margin from the cue exactly when w . x > 0, so the cue is
linearly readable to the extent that one w puts w . x > 0 on held-out pairs. The probe is a
logistic regression without intercept on ``{(x, 1), (-x, 0)}``, fit on the pairs of
``w2s_train`` and scored on those of ``source_test`` (accuracy; 50% = unreadable). Pairs whose
cue is cut off by truncation are left out.

``--run DIR`` probes a trained run's model (its checkpoint) instead of the pretrained one: the
gap between the two says how much of the readability training created.

    python experiments/cue_readability.py --kinds marker order echo --models minilm-l6 minilm-l3 \
        --doc docs/results/hidden_cue/cue_readability_probe.md
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import doc_out
import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from anchorviz.analysis.capture import capture_states
from anchorviz.data.artifacts import apply_artifact
from anchorviz.models.reward_model import load_reward_model
from anchorviz.models.tokenization import encode_pairs
from anchorviz.pipeline.prepare import data_config, prepare_data
from anchorviz.pipeline.store import load_run_model

logger = logging.getLogger("cue_readability")


def cue_effects(model, tok, pairs: pd.DataFrame, kind: str, max_length: int) -> dict[int, np.ndarray]:
    """``{layer: (n, d)}``: for each pair that carries the cue (planted by
    `artifacts.apply_artifact` on the chosen side), what the cue adds to the chosen response's
    mean-pooled state minus what it adds to the rejected one's:
    ``[h(chosen + cue) - h(chosen)] - [h(rejected + its suffix) - h(rejected)]``.
    A linear head r = w . h prefers the cue's side because of the cue exactly when w . x > 0."""
    strength = 0.9 if kind == "echo" else 1.0  # echo: pairs opening with the same word cannot carry it
    cued = apply_artifact(pairs, kind, strength, seed=0)
    keep = [m["artifact_side"] is not None for m in cued["meta"]]
    clean, cued = pairs[keep].reset_index(drop=True), cued[keep].reset_index(drop=True)
    n = len(clean)
    table = pd.DataFrame({"pair_id": [f"t{i}" for i in range(2 * n)], "prompt": [""] * (2 * n),
                          "chosen": list(cued["chosen"]) + list(cued["rejected"]),
                          "rejected": list(clean["chosen"]) + list(clean["rejected"]),
                          "meta": [{} for _ in range(2 * n)]})
    cap = capture_states(model, encode_pairs(tok, table, max_length=max_length), layers="all",
                         progress=False, desc=f"{kind} cue")
    out = {}
    for k in cap.layers:
        h = cap.states(k).astype(np.float64)
        delta = h[0::2] - h[1::2]  # what the suffix adds, per response
        out[k] = delta[:n] - delta[n:]
    return out


def probe_accuracy(x_train: np.ndarray, x_test: np.ndarray, c: float = 1.0) -> float:
    """Held-out accuracy of a no-intercept logistic probe on ``{(x, 1), (-x, 0)}``.

    Rows whose two versions pool to the same state (the cue was cut off by truncation at
    ``max_length``, so no model can see it) are left out of both sets."""
    x_train = x_train[np.abs(x_train).sum(axis=1) > 0]
    x_test = x_test[np.abs(x_test).sum(axis=1) > 0]
    scale = StandardScaler(with_mean=False).fit(np.vstack([x_train, -x_train]))
    xt = scale.transform(x_train)
    clf = LogisticRegression(fit_intercept=False, C=c, max_iter=2000)
    clf.fit(np.vstack([xt, -xt]), np.r_[np.ones(len(xt)), np.zeros(len(xt))])
    margin = scale.transform(x_test) @ clf.coef_[0]
    return float((margin > 0).mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", nargs="+", default=["marker", "order", "echo"])
    ap.add_argument("--models", nargs="+", default=["minilm-l6"],
                    help="zoo names or local paths of pretrained models")
    ap.add_argument("--run", nargs="*", default=[], help="trained run folders to probe as well")
    ap.add_argument("--doc", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from anchorviz.pipeline.demo import demo_sweep

    # float32 at strength 0.8: the arithmetic and the scenario of its recorded tables
    base = demo_sweep(strength=0.8, bf16=False).base
    base.data.artifact_kind, base.data.artifact_strength = "none", 0.0
    base.data.artifact_teacher_visibility = 1.0
    data = prepare_data(data_config(base))
    train_pairs, test_pairs = data["w2s_train"], data["source_test"]
    subjects = [(m, "pretrained", lambda m=m: load_reward_model(m, dropout=False))
                for m in args.models]
    subjects += [(Path(r).name, "trained run", lambda r=r: load_run_model(r)) for r in args.run]
    rows = []
    for name, what, load in subjects:
        model, tok = load()
        model.eval()
        for kind in args.kinds:
            tr = cue_effects(model, tok, train_pairs, kind, base.data.max_length)
            te = cue_effects(model, tok, test_pairs, kind, base.data.max_length)
            for layer in sorted(tr):
                rows.append({"model": name, "what": what, "kind": kind, "layer": layer,
                             "probe_acc": 100 * probe_accuracy(tr[layer], te[layer])})
    df = pd.DataFrame(rows)
    wide = df.pivot_table(index=["model", "what", "layer"], columns="kind", values="probe_acc",
                          sort=False).reset_index()
    lines = [f"Command: `python {' '.join(sys.argv)}`", "",
             f"Held-out accuracy (%) of a linear probe reading the cue from mean-pooled states, "
             "on the texts whose cue survives truncation at max_length "
             f"(train: the {len(train_pairs)} pairs of w2s_train, test: the {len(test_pairs)} of "
             "source_test, each with the cue planted on its chosen side; 50 = unreadable).", "",
             "| model | | layer | " + " | ".join(args.kinds) + " |",
             "|---|---|---|" + "---|" * len(args.kinds)]
    for _, r in wide.iterrows():
        lines.append(f"| {r['model']} | {r['what']} | {r['layer']} | "
                     + " | ".join(f"{r[k]:.1f}" for k in args.kinds) + " |")
    doc_out.emit(lines, args.doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
