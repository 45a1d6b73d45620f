"""Stage 1, the pairs: one schema, adapters and readers, prompt-grouped splits, the embedded VADER
data and the teaching artefact.

Every dataset, whatever its source format, becomes one pair table (a `pandas.DataFrame` with
columns `PAIR_COLUMNS`, docs/ARCHITECTURE.md)::

    pairs, report = load_pairs("hh-rlhf-harmless", split="test")
    print(report)                      # rows read / kept / dropped per reason
    splits = split_by_prompt(pairs, {"teacher_train": 1000, "w2s_train": 2000,
                                     "val": 300, "source_test": 1000}, seed=0)

``schema`` (the columns, drop reasons and report, checks, dedupe), ``adapters`` (one source row
-> one pair), ``readers`` (named datasets, local files, the hub: `load_pairs`), ``splits``
(prompt-grouped splits, the protocol's splits), ``vader`` (the default data), ``artifacts`` (the
source-only cue). The named datasets' manifests are package data in ``anchorviz/manifests/``.
Each name is imported from the module that defines it (``from anchorviz.data.readers import
load_pairs``), or from the package's entry point (``from anchorviz import load_pairs``).
"""

__all__: list[str] = []
