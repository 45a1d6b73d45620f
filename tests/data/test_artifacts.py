"""The source-only artefact: strength knob, target modes, labels never edited, any pair table."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from anchorviz.data.artifacts import (
    ARTIFACT_KINDS,
    DEFAULT_MARKER,
    FILLER_SENTENCES,
    apply_artifact,
    artifact_label_correlation,
    count_words,
    strip_artifact,
)

WORDS = "the a report service answer table river window system note plan".split()


def _generic_pairs(n: int = 200, seed: int = 0) -> pd.DataFrame:
    """A non-VADER pair table with prompts, varied lengths and a natural length relation."""
    rng = np.random.default_rng(seed)

    def text(k: int) -> str:
        return " ".join(rng.choice(WORDS, size=k)) + "."

    rows = []
    for i in range(n):
        rows.append(
            {
                "pair_id": f"toy-{i}",
                "dataset": "toy-helpful",
                "domain": "toy",
                "prompt": f"Question {i}: what should I do?",
                "chosen": text(int(rng.integers(3, 40))),
                "rejected": text(int(rng.integers(3, 40))),
                "prompt_turns": [{"role": "user", "content": f"Question {i}: what should I do?"}],
                "meta": {"row": i},
            }
        )
    return pd.DataFrame(rows)


def _distinct_openings(df: pd.DataFrame) -> pd.DataFrame:
    """Prefix the responses so that every pair's two responses open with different words."""
    out = df.copy()
    out["chosen"] = ["Alpha " + t for t in out["chosen"]]
    out["rejected"] = ["Beta " + t for t in out["rejected"]]
    return out


@pytest.fixture()
def pairs() -> pd.DataFrame:
    return _generic_pairs()


def _sides_from_meta(df: pd.DataFrame) -> list:
    return [m["artifact_side"] for m in df["meta"]]


@pytest.mark.parametrize("kind", ARTIFACT_KINDS)
def test_strength_zero_is_no_artifact(pairs: pd.DataFrame, kind: str) -> None:
    out = apply_artifact(pairs, kind, 0.0, seed=1)
    assert out["chosen"].tolist() == pairs["chosen"].tolist()
    assert out["rejected"].tolist() == pairs["rejected"].tolist()
    assert _sides_from_meta(out) == [None] * len(pairs)
    assert all(m["artifact_kind"] == kind and m["artifact_suffix"] == "" for m in out["meta"])
    assert artifact_label_correlation(out, "marker") == 0.0
    # the length relation is the natural one
    assert artifact_label_correlation(out, "length") == artifact_label_correlation(pairs, "length")


@pytest.mark.parametrize("kind", ARTIFACT_KINDS)
def test_strength_one_source_reversed_neutral(pairs: pd.DataFrame, kind: str) -> None:
    if kind == "echo":  # echo needs responses that open with different words
        pairs = _distinct_openings(pairs)
    src = apply_artifact(pairs, kind, 1.0, seed=1)
    assert artifact_label_correlation(src, kind) == 1.0
    assert src.attrs["artifact"]["correlation"] == 1.0
    assert _sides_from_meta(src) == ["chosen"] * len(pairs)
    rev = apply_artifact(pairs, kind, 1.0, seed=2, role="target", target_mode="reversed")
    assert artifact_label_correlation(rev, kind) == -1.0
    assert _sides_from_meta(rev) == ["rejected"] * len(pairs)
    neu = apply_artifact(pairs, kind, 1.0, seed=3, role="target", target_mode="neutral")
    assert abs(artifact_label_correlation(neu, kind)) <= 1 / len(pairs)
    sides = _sides_from_meta(neu)
    assert sides.count("chosen") == sides.count("rejected") == len(pairs) // 2
    absent = apply_artifact(pairs, kind, 1.0, seed=4, role="target", target_mode="absent")
    assert absent["chosen"].tolist() == pairs["chosen"].tolist()
    assert absent["rejected"].tolist() == pairs["rejected"].tolist()
    assert _sides_from_meta(absent) == [None] * len(pairs)


@pytest.mark.parametrize("s", [0.25, 0.5, 0.8])
def test_marker_fraction_is_exact(pairs: pd.DataFrame, s: float) -> None:
    out = apply_artifact(pairs, "marker", s, seed=5)
    k = round(s * len(pairs))
    assert artifact_label_correlation(out, "marker") == pytest.approx(k / len(pairs))
    assert out["chosen"].str.endswith(DEFAULT_MARKER).sum() == k
    assert not out["rejected"].str.endswith(DEFAULT_MARKER).any()
    rev = apply_artifact(pairs, "marker", s, seed=5, role="target", target_mode="reversed")
    assert artifact_label_correlation(rev, "marker") == pytest.approx(-k / len(pairs))


def test_length_pad_realises_s_plus_natural(pairs: pd.DataFrame) -> None:
    c0 = artifact_label_correlation(pairs, "length")
    out = apply_artifact(pairs, "length", 0.5, seed=6)
    carry = [m["artifact_side"] == "chosen" for m in out["meta"]]
    untouched = pairs.loc[[not c for c in carry]]
    expected = 0.5 + 0.5 * artifact_label_correlation(untouched, "length")
    assert artifact_label_correlation(out, "length") == pytest.approx(expected)
    assert abs(artifact_label_correlation(out, "length") - (0.5 + 0.5 * c0)) < 0.15
    for c, r, m in zip(out["chosen"], out["rejected"], out["meta"]):
        if m["artifact_side"] == "chosen":
            assert count_words(c) >= count_words(r) + 3
            assert m["artifact_suffix"] and all(
                s in FILLER_SENTENCES for s in _split_fillers(m["artifact_suffix"])
            )


def _split_fillers(suffix: str) -> list[str]:
    parts = [" " + p.strip() for p in suffix.split(".") if p.strip()]
    return [p + "." for p in parts]


@pytest.mark.parametrize("kind", ARTIFACT_KINDS)
@pytest.mark.parametrize("mode", ["source", "neutral", "reversed"])
def test_labels_never_change(pairs: pd.DataFrame, kind: str, mode: str) -> None:
    before = copy.deepcopy(pairs)
    kw = {} if mode == "source" else {"role": "target", "target_mode": mode}
    out = apply_artifact(pairs, kind, 0.7, seed=7, **kw)
    pd.testing.assert_frame_equal(pairs, before)  # input untouched (meta dicts too)
    assert out["pair_id"].tolist() == pairs["pair_id"].tolist()
    assert out["prompt"].tolist() == pairs["prompt"].tolist()
    assert out["prompt_turns"].tolist() == pairs["prompt_turns"].tolist()
    for c0, r0, c1, r1 in zip(pairs["chosen"], pairs["rejected"], out["chosen"], out["rejected"]):
        assert c1.startswith(c0) and r1.startswith(r0)  # text only appended, sides not swapped
    back = strip_artifact(out)
    assert back["chosen"].tolist() == pairs["chosen"].tolist()
    assert back["rejected"].tolist() == pairs["rejected"].tolist()
    assert [m["row"] for m in back["meta"]] == [m["row"] for m in pairs["meta"]]
    # meta side agrees with the text
    for c, r, m in zip(out["chosen"], out["rejected"], out["meta"]):
        side = m["artifact_side"]
        if side is not None:
            assert (c if side == "chosen" else r).endswith(m["artifact_suffix"])


def test_seeded(pairs: pd.DataFrame) -> None:
    a = apply_artifact(pairs, "length", 0.5, seed=11)
    b = apply_artifact(pairs, "length", 0.5, seed=11)
    c = apply_artifact(pairs, "length", 0.5, seed=12)
    assert a.equals(b)
    assert _sides_from_meta(a) != _sides_from_meta(c)


@pytest.mark.parametrize("s", [0.0, 0.5, 1.0])
def test_length_select_edits_no_text(pairs: pd.DataFrame, s: float) -> None:
    big = _generic_pairs(400, seed=3)
    out = apply_artifact(big, "length", s, seed=8, length_mode="select")
    by_id = big.set_index("pair_id")
    assert set(out["pair_id"]) <= set(big["pair_id"])
    assert (out["chosen"].to_numpy() == by_id.loc[out["pair_id"], "chosen"].to_numpy()).all()
    assert (out["rejected"].to_numpy() == by_id.loc[out["pair_id"], "rejected"].to_numpy()).all()
    assert len(out) > 0
    corr = artifact_label_correlation(out, "length")
    if s == 0.0:
        assert len(out) == len(big)
    else:
        assert abs(corr - s) <= 1 / len(out) + 1e-12
    rev = apply_artifact(
        big, "length", 0.5, seed=8, role="target", target_mode="reversed", length_mode="select"
    )
    assert abs(artifact_label_correlation(rev, "length") + 0.5) <= 1 / len(rev) + 1e-12
    neu = apply_artifact(
        big, "length", 1.0, seed=8, role="target", target_mode="neutral", length_mode="select"
    )
    assert abs(artifact_label_correlation(neu, "length")) <= 1 / len(neu) + 1e-12


def test_correlation_reads_text_not_meta(pairs: pd.DataFrame) -> None:
    out = apply_artifact(pairs, "marker", 1.0, seed=1)
    out["meta"] = [{} for _ in range(len(out))]
    assert artifact_label_correlation(out, "marker") == 1.0
    swapped = out.rename(columns={"chosen": "rejected", "rejected": "chosen"})
    assert artifact_label_correlation(swapped, "marker") == -1.0


def test_bad_arguments(pairs: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="strength"):
        apply_artifact(pairs, "marker", 1.5, seed=0)
    with pytest.raises(ValueError, match="kind"):
        apply_artifact(pairs, "emoji", 0.5, seed=0)
    with pytest.raises(ValueError, match="target_mode"):
        apply_artifact(pairs, "marker", 0.5, seed=0, role="source", target_mode="reversed")
    once = apply_artifact(pairs, "marker", 0.5, seed=0)
    with pytest.raises(ValueError, match="already"):
        apply_artifact(once, "length", 0.5, seed=0)
    with pytest.raises(ValueError, match="empty"):
        artifact_label_correlation(pairs.iloc[:0], "marker")


def test_default_marker_is_plain_ascii() -> None:
    # WordPiece (uncased MiniLM) maps emoji / check marks to [UNK]; the default must not need them
    assert DEFAULT_MARKER.isascii() and DEFAULT_MARKER.strip() == "[verified]"
    assert all(s.isascii() and s.startswith(" ") for s in FILLER_SENTENCES)


def test_on_vader_pairs() -> None:
    from anchorviz.data.vader import vader_pairs

    p = vader_pairs("tweets", n_pairs=400, seed=0)
    for kind in ARTIFACT_KINDS:
        s = 0.8 if kind == "echo" else 1.0  # echo: pairs opening with the same word cannot carry it
        src = apply_artifact(p, kind, s, seed=0)
        if kind == "echo":
            natural = artifact_label_correlation(p, kind)
            assert artifact_label_correlation(src, kind) == pytest.approx(0.8 + natural, abs=0.02)
            continue
        assert artifact_label_correlation(src, kind) == 1.0
        assert [m["chosen_text_id"] for m in src["meta"]] == [
            m["chosen_text_id"] for m in p["meta"]
        ]
        rev = apply_artifact(p, kind, 1.0, seed=1, role="target", target_mode="reversed")
        assert artifact_label_correlation(rev, kind) == -1.0


def test_teacher_visibility_hides_the_cue_from_the_teacher_only():
    from anchorviz.data.artifacts import apply_artifact, mark_teacher_visibility, teacher_view

    df = pd.DataFrame({"prompt": [""] * 40, "chosen": [f"good {i}" for i in range(40)],
                       "rejected": [f"bad {i}" for i in range(40)],
                       "pair_id": [f"p{i}" for i in range(40)], "meta": [{}] * 40})
    marked = apply_artifact(df, kind="marker", strength=0.5, seed=0, role="source")
    seen = mark_teacher_visibility(marked, 0.25, seed=1)
    flags = [m.get("artifact_teacher_visible") for m in seen["meta"]]
    assert flags.count(True) == 5 and flags.count(False) == 15 and flags.count(None) == 20
    view = teacher_view(seen)
    assert list(seen["chosen"]) == list(marked["chosen"])  # the student's copy keeps every cue
    for f, before, after in zip(flags, seen["chosen"], view["chosen"]):
        assert after == (before[: -len(" [verified]")] if f is False else before)
    assert list(view["rejected"]) == list(seen["rejected"])
    assert teacher_view(mark_teacher_visibility(marked, 1.0, seed=1)).equals(
        mark_teacher_visibility(marked, 1.0, seed=1))
    with pytest.raises(ValueError, match="visibility must be in"):
        mark_teacher_visibility(marked, 1.5, seed=0)


def _carrying_rows(before: pd.DataFrame, after: pd.DataFrame) -> list[tuple]:
    """``(chosen, rejected before, chosen, rejected after, meta)`` of the rows that carry the
    cue; a row without it must be unchanged."""
    rows = []
    for c0, r0, c1, r1, m in zip(before["chosen"], before["rejected"], after["chosen"],
                                 after["rejected"], after["meta"]):
        if m["artifact_side"] is None:
            assert (c1, r1) == (c0, r0)
        else:
            rows.append((c0, r0, c1, r1, m))
    return rows


def test_order_cue_has_the_same_words_on_both_sides(pairs: pd.DataFrame) -> None:
    from anchorviz.data.artifacts import order_suffixes

    carry, other = order_suffixes()
    assert carry != other and sorted(carry.split()) == sorted(other.split())
    out = apply_artifact(pairs, "order", 0.5, seed=3)
    k = round(0.5 * len(pairs))
    rows = _carrying_rows(pairs, out)
    for c0, r0, c1, r1, _ in rows:
        assert (c1, r1) == (c0 + carry, r0 + other)  # source: the carrying order on the chosen side
        # a bag of words cannot tell the sides apart: both gained the same words
        assert sorted(c1.split()[-2:]) == sorted(r1.split()[-2:])
    assert len(rows) == k
    assert all(m["artifact_other_suffix"] == "" for m in out["meta"] if m["artifact_side"] is None)
    assert artifact_label_correlation(out, "order") == pytest.approx(k / len(pairs))
    # the marker reading sees nothing: no side ends with the marker
    assert artifact_label_correlation(out, "marker") == 0.0


def test_teacher_view_removes_the_order_cue_from_both_sides(pairs: pd.DataFrame) -> None:
    from anchorviz.data.artifacts import mark_teacher_visibility, teacher_view

    out = mark_teacher_visibility(apply_artifact(pairs, "order", 0.8, seed=4), 0.5, seed=2)
    view = teacher_view(out)
    for c0, r0, c1, r1, cv, rv, m in zip(pairs["chosen"], pairs["rejected"], out["chosen"],
                                         out["rejected"], view["chosen"], view["rejected"],
                                         out["meta"]):
        if m.get("artifact_teacher_visible") is False:
            assert (cv, rv) == (c0, r0)  # hidden: neither order reaches the teacher
        else:
            assert (cv, rv) == (c1, r1)
    assert sum(m.get("artifact_teacher_visible") is False for m in out["meta"]) == 80


@pytest.mark.parametrize("kind", ["echo", "order"])
def test_teacher_form_marker_swaps_the_cue_for_the_marker_in_the_teachers_copy_only(
        pairs: pd.DataFrame, kind: str) -> None:
    from anchorviz.data.artifacts import mark_teacher_visibility, teacher_view

    out = mark_teacher_visibility(apply_artifact(pairs, kind, 0.8, seed=4), 0.5, seed=2)
    view = teacher_view(out, "marker")
    assert teacher_view(out).equals(teacher_view(out, "same"))
    n = {"visible": 0, "hidden": 0, "clean": 0}
    for c0, r0, cv, rv, m in zip(pairs["chosen"], pairs["rejected"], view["chosen"],
                                 view["rejected"], out["meta"]):
        if not m.get("artifact_suffix"):
            n["clean"] += 1
            assert (cv, rv) == (c0, r0)
        elif m.get("artifact_teacher_visible") is False:
            n["hidden"] += 1
            assert (cv, rv) == (c0, r0)  # hidden: no cue of either form
        else:
            n["visible"] += 1
            # source: the cue was on the chosen side, so the marker is too; the other side is clean
            assert (cv, rv) == (c0 + DEFAULT_MARKER, r0)
    assert n == {"visible": 80, "hidden": 80, "clean": 40}
    assert artifact_label_correlation(view, "marker") == pytest.approx(80 / len(pairs))
    with pytest.raises(ValueError, match="form must be one of"):
        teacher_view(out, "uppercase")


def test_teacher_form_marker_needs_an_order_or_echo_cue() -> None:
    from anchorviz.config import ConfigError, RunConfig

    cfg = RunConfig()
    cfg.data.artifact_kind, cfg.data.artifact_strength = "marker", 0.8
    cfg.data.artifact_teacher_form = "marker"
    with pytest.raises(ConfigError, match="data.artifact_teacher_form 'marker'.*got 'marker'"):
        cfg.validate()
    cfg.data.artifact_teacher_form = "bold"
    with pytest.raises(ConfigError, match="data.artifact_teacher_form must be same|marker"):
        cfg.validate()
    cfg.data.artifact_kind, cfg.data.artifact_teacher_form = "echo", "marker"
    cfg.validate()
    # the setting is in the run key when it is not the default, and absent at the default (so the
    # runs stored before it existed keep their ids)
    from anchorviz.pipeline.keys import run_id_for, teacher_key

    same = copy.deepcopy(cfg)
    same.data.artifact_teacher_form = "same"
    assert "artifact_teacher_form" not in teacher_key(same)["data"]
    assert run_id_for(teacher_key(cfg)) != run_id_for(teacher_key(same))


def test_order_refuses_texts_that_already_end_with_a_cue(pairs: pd.DataFrame) -> None:
    bad = pairs.copy()
    bad.loc[0, "rejected"] = bad.loc[0, "rejected"] + " then so"
    with pytest.raises(ValueError, match="already end with ' then so'"):
        apply_artifact(bad, "order", 0.5, seed=0)


def test_echo_cue_appends_the_carrying_sides_first_word_to_both_sides(pairs: pd.DataFrame) -> None:
    from anchorviz.data.artifacts import first_word

    assert first_word("  'Great' film, really") == "great" and first_word("!!") == ""
    out = apply_artifact(pairs, "echo", 0.6, seed=5)
    k = round(0.6 * len(pairs))
    rows = _carrying_rows(pairs, out)
    for c0, r0, c1, r1, _ in rows:
        w = first_word(c0)
        assert first_word(c0) != first_word(r0)  # only pairs with different openings carry it
        assert (c1, r1) == (c0 + " " + w, r0 + " " + w)  # the same word on both sides
    assert len(rows) == k
    # the text reading: ends with its own first word on the chosen side only
    natural = artifact_label_correlation(pairs, "echo")
    assert artifact_label_correlation(out, "echo") == pytest.approx(natural + k / len(pairs), abs=0.02)
    rev = apply_artifact(pairs, "echo", 0.6, seed=5, role="target", target_mode="reversed")
    for c1, r1, m in zip(rev["chosen"], rev["rejected"], rev["meta"]):
        if m["artifact_side"] == "rejected":
            assert c1.endswith(m["artifact_suffix"]) and r1.endswith(m["artifact_suffix"])
            assert m["artifact_suffix"] == " " + first_word(r1)
    back = strip_artifact(out)
    assert back["chosen"].tolist() == pairs["chosen"].tolist()
    assert back["rejected"].tolist() == pairs["rejected"].tolist()


def test_echo_refuses_a_strength_it_cannot_realise() -> None:
    df = pd.DataFrame({"chosen": ["the good one", "the fine one", "a nice one"],
                       "rejected": ["the bad one", "the poor one", "the worst one"],
                       "meta": [{}, {}, {}]})
    with pytest.raises(ValueError, match="only 1 have responses that open with different words"):
        apply_artifact(df, "echo", 1.0, seed=0)
    assert apply_artifact(df, "echo", 0.34, seed=0)["meta"][2]["artifact_side"] == "chosen"
