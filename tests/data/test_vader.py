"""VADER default data: obtaining / verifying the sdist, parsing counts, pair construction."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from anchorviz.data import vader
from anchorviz.data.schema import PAIR_COLUMNS
from anchorviz.data.vader import (
    VADER_DOMAINS,
    VADER_SDIST_NAME,
    VaderDataError,
    ensure_vader_sdist,
    load_vader_texts,
    normalise_text,
    parse_ground_truth,
    parse_ratings,
    vader_pairs,
    vader_parse_report,
)

EXPECTED_TEXTS = {"movie": 10605, "amazon": 3708, "nyt": 5190, "tweets": 4200}
# measured with seed 0, margin 0.5 (docs/DATA.md)
EXPECTED_PAIRS = {"movie": 5289, "amazon": 1847, "nyt": 2453, "tweets": 2067}
EXPECTED_DUPLICATE_TEXTS = {"movie": 2, "amazon": 11, "nyt": 71, "tweets": 60}


@pytest.fixture(scope="module")
def real_sdist() -> Path:
    """The genuine sdist in the normal cache (downloaded once by the code if missing)."""
    return ensure_vader_sdist()


@pytest.fixture(scope="module")
def default_pairs() -> dict:
    return {d: vader_pairs(d) for d in VADER_DOMAINS}


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize("domain", VADER_DOMAINS)
def test_text_counts_and_columns(domain: str) -> None:
    df = load_vader_texts(domain)
    assert len(df) == EXPECTED_TEXTS[domain]
    assert list(df.columns) == [
        "text_id",
        "text",
        "mean_rating",
        "std",
        "ratings",
        "n_raters",
        "gt_mean",
    ]
    assert df["text_id"].is_unique
    assert (df["text"].str.len() > 0).all()
    assert (df["text"] == df["text"].str.strip()).all()
    assert all(isinstance(r, list) and all(-4 <= x <= 4 for x in r) for r in df["ratings"])
    assert (df["n_raters"] == df["ratings"].map(len)).all()
    assert df["n_raters"].min() >= 15
    means = np.array([np.mean(r) for r in df["ratings"]])
    np.testing.assert_allclose(df["mean_rating"], means, atol=1e-12)
    rep = df.attrs["parse_report"]
    assert rep["unparseable_lines"] == 0
    assert rep["texts"] == EXPECTED_TEXTS[domain]
    assert rep["only_in_ground_truth"] == [] and rep["only_in_ratings"] == []
    assert rep["duplicate_texts"] == EXPECTED_DUPLICATE_TEXTS[domain]
    assert rep["ground_truth"]["crlf"]


def test_parse_report_quirks() -> None:
    rep = vader_parse_report()["domains"]
    assert rep["amazon"]["ratings"]["had_bom"]  # the UTF-8 BOM is there and handled
    assert rep["tweets"]["gt_mean_mismatch"] == 199
    assert all(rep[d]["gt_mean_mismatch"] == 0 for d in ("movie", "amazon", "nyt"))
    assert all(rep[d]["file_mean_mismatch"] == 0 for d in VADER_DOMAINS)
    movie = load_vader_texts("movie")
    assert movie["text"].str.contains("é").any()  # UTF-8 decoded, not mojibake
    assert not movie["text"].str.contains("\ufffd").any()


def test_parsers_report_bad_lines() -> None:
    gt = (
        b"\xef\xbb\xbf1\t0.5\tfine text\r\n"
        b"2\tnot-a-number\tbad mean\r\n"
        b"3\t1.0\r\n"  # missing text field
        b"4\t-1\tcaf\xe9 in cp1252\r\n"
        b"1\t0.2\tduplicate id\r\n"
        b"\r\n"
    )
    rows, rep = parse_ground_truth(gt, "x_GroundTruth.txt")
    assert set(rows) == {"1", "4"}
    assert rows["4"][1] == "café in cp1252"
    assert rep.had_bom and rep.crlf
    assert rep.parsed == 2 and rep.lines == 5 and rep.blank == 1
    assert rep.decode_fallback_lines == 1
    assert [b["line_no"] for b in rep.unparseable] == [2, 3, 5]
    rt = b"1\t0.5\t0.5\t[0, 1]\n2\t0\t0\t[0, 9]\n3\t0\t0\t[]\n4\t0\t0\t[1, 2\n5\t1\t0\t[1]\n"
    rrows, rrep = parse_ratings(rt, "x_anonDataRatings.txt")
    assert set(rrows) == {"1", "5"} and rrows["1"] == (0.5, 0.5, [0, 1])
    assert len(rrep.unparseable) == 3 and not rrep.crlf


# ---------------------------------------------------------------- pairs


@pytest.mark.parametrize("domain", VADER_DOMAINS)
def test_pairs_schema_margin_disjoint(domain: str, default_pairs: dict) -> None:
    p = default_pairs[domain]
    assert list(p.columns) == list(PAIR_COLUMNS)
    assert len(p) == EXPECTED_PAIRS[domain]
    assert p.attrs["n_pairs_available"] == EXPECTED_PAIRS[domain]
    assert p["pair_id"].is_unique
    assert (p["dataset"] == f"vader-{domain}").all() and (p["domain"] == domain).all()
    assert (p["prompt"] == "").all() and p["prompt_turns"].isna().all()
    assert (p["chosen"] != p["rejected"]).all()
    metas = list(p["meta"])
    assert all(m["chosen_mean"] - m["rejected_mean"] >= 0.5 - 1e-9 for m in metas)
    assert all(m["label_is_gold"] for m in metas)
    ids = [m["chosen_text_id"] for m in metas] + [m["rejected_text_id"] for m in metas]
    assert len(ids) == len(set(ids))  # no text in two pairs
    keys = [normalise_text(t) for t in list(p["chosen"]) + list(p["rejected"])]
    assert len(keys) == len(set(keys))  # nor a duplicate of it
    for pid, m in zip(p["pair_id"], metas):
        assert pid == f"vader-{domain}-{m['text_id_a']}-{m['text_id_b']}"
    texts = load_vader_texts(domain).set_index("text_id")
    row, m = p.iloc[0], metas[0]
    assert texts.loc[m["chosen_text_id"], "text"] == row["chosen"]
    assert texts.loc[m["rejected_text_id"], "text"] == row["rejected"]


def test_pairs_validate_with_data_module(default_pairs: dict) -> None:
    from anchorviz.data.schema import validate_pairs

    validate_pairs(default_pairs["tweets"], "vader-tweets")


def test_pairs_reproducible_and_seeded() -> None:
    a = vader_pairs("amazon", n_pairs=300, seed=3)
    b = vader_pairs("amazon", n_pairs=300, seed=3)
    c = vader_pairs("amazon", n_pairs=300, seed=4)
    assert a.equals(b)
    assert list(a["pair_id"]) != list(c["pair_id"])
    assert len(a) == 300
    big = vader_pairs("amazon", margin=1.0)
    assert all(m["chosen_mean"] - m["rejected_mean"] >= 1.0 - 1e-9 for m in big["meta"])
    with pytest.raises(ValueError, match="pairs exist"):
        vader_pairs("amazon", n_pairs=10**6)
    with pytest.raises(ValueError, match="unknown VADER domain"):
        vader_pairs("imdb")
    with pytest.raises(ValueError, match="labeller"):
        vader_pairs("amazon", labeller="oracle")


@pytest.mark.parametrize("labeller", ["single_rater", "raters:3"])
def test_noisy_labeller_flips_some_labels(labeller: str) -> None:
    gold = vader_pairs("nyt", seed=0)
    noisy = vader_pairs("nyt", seed=0, labeller=labeller)
    assert list(noisy["pair_id"]) == list(gold["pair_id"])  # same pairs, other labels
    metas = list(noisy["meta"])
    flips = np.mean([m["chosen_is_a"] != m["gold_chosen_is_a"] for m in metas])
    assert 0.0 < flips < 0.3
    assert noisy.attrs["flip_rate"] == pytest.approx(flips)
    gold_by_id = {pid: m["gold_chosen_is_a"] for pid, m in zip(gold["pair_id"], gold["meta"])}
    assert all(gold_by_id[pid] == m["gold_chosen_is_a"] for pid, m in zip(noisy["pair_id"], metas))
    for m in metas:
        assert m["label_is_gold"] == (m["chosen_is_a"] == m["gold_chosen_is_a"])
        a_is_chosen = m["chosen_text_id"] == m["text_id_a"]
        assert a_is_chosen == m["chosen_is_a"]
    flipped = [m for m in metas if not m["label_is_gold"]]
    assert all(m["chosen_mean"] < m["rejected_mean"] for m in flipped)
    if labeller == "single_rater":
        more = vader_pairs("nyt", seed=0, labeller="raters:10").attrs["flip_rate"]
        assert more < flips  # averaging more raters is less noisy


# ---------------------------------------------------------------- obtaining the sdist


def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ANCHORVIZ_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "datasets" / "vader"
    folder.mkdir(parents=True)
    return folder


def test_sha_mismatch_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _isolated_cache(tmp_path, monkeypatch)
    (folder / VADER_SDIST_NAME).write_bytes(b"not the real sdist")
    with pytest.raises(VaderDataError, match="sha256"):
        ensure_vader_sdist(download=False)
    with pytest.raises(VaderDataError, match="sha256"):
        load_vader_texts("movie")
    assert not list(folder.glob("parsed-v*/*.parquet"))


def test_offline_message_names_the_file_to_fetch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _isolated_cache(tmp_path, monkeypatch)
    monkeypatch.setenv("ANCHORVIZ_OFFLINE", "1")
    with pytest.raises(VaderDataError) as err:
        ensure_vader_sdist()
    msg = str(err.value)
    assert vader.VADER_SDIST_URL in msg and vader.VADER_SDIST_SHA256 in msg
    assert str(folder) in msg and "do not fetch it with `pip download`" in msg


def _fake_index(monkeypatch: pytest.MonkeyPatch, source: Path | None) -> None:
    """Make the index lookup give a file:// URL of ``source`` (or fail as offline)."""

    def url(index: str | None = None) -> str:
        if source is None:
            raise OSError("<urlopen error [Errno -3] Temporary failure in name resolution>")
        return source.resolve().as_uri()

    monkeypatch.setattr(vader, "sdist_url", url)


def test_download_path_verifies_and_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_sdist: Path
) -> None:
    folder = _isolated_cache(tmp_path, monkeypatch)
    _fake_index(monkeypatch, real_sdist)
    got = ensure_vader_sdist(download=True)
    assert got == folder / VADER_SDIST_NAME and got.exists()
    assert not list(folder.glob(".download-*"))


def test_download_bad_file_or_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _isolated_cache(tmp_path, monkeypatch)
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"tampered")
    _fake_index(monkeypatch, bad)
    with pytest.raises(VaderDataError, match="sha256"):
        ensure_vader_sdist(download=True)
    assert not (folder / VADER_SDIST_NAME).exists()
    _fake_index(monkeypatch, None)
    with pytest.raises(VaderDataError, match="the download failed .*name resolution"):
        ensure_vader_sdist(download=True)
    assert not (folder / VADER_SDIST_NAME).exists()
    assert not list(folder.glob(".download-*"))


# ---------------------------------------------------------------- archive safety


def test_member_name_checks() -> None:
    safe = vader._safe_member_name
    assert (
        safe("hutto_ICWSM_2014/tweets_GroundTruth.txt") == "hutto_ICWSM_2014/tweets_GroundTruth.txt"
    )
    assert safe("./hutto_ICWSM_2014/x.txt") == "hutto_ICWSM_2014/x.txt"
    for bad in ("../x", "a/../../x", "/etc/passwd", "C:/x", "a\\..\\x", ""):
        assert safe(bad) is None


def _tar_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_read_raw_files_ignores_traversal(tmp_path: Path) -> None:
    wanted = {
        f"{base}_{kind}.txt": f"{base} {kind}\n".encode()
        for base in vader._DOMAIN_FILES.values()
        for kind in ("GroundTruth", "anonDataRatings")
    }
    inner_members = {f"hutto_ICWSM_2014/{k}": v for k, v in wanted.items()}
    inner_members["../../evil.txt"] = b"pwned"
    inner_members["../hutto_ICWSM_2014/tweets_GroundTruth.txt"] = b"1\t0\tshadow\n"
    outer = tmp_path / "crafted.tar.gz"
    outer.write_bytes(_tar_bytes({vader._INNER_MEMBER: _tar_bytes(inner_members)}))
    got = vader.read_raw_files(outer)
    assert got == wanted  # the escaping members were ignored, nothing shadowed
    assert not (tmp_path / "evil.txt").exists()
    inner_members["./hutto_ICWSM_2014/tweets_GroundTruth.txt"] = b"1\t0\tshadow\n"
    outer.write_bytes(_tar_bytes({vader._INNER_MEMBER: _tar_bytes(inner_members)}))
    with pytest.raises(VaderDataError, match="twice"):
        vader.read_raw_files(outer)
    del inner_members["hutto_ICWSM_2014/tweets_GroundTruth.txt"]
    del inner_members["./hutto_ICWSM_2014/tweets_GroundTruth.txt"]
    outer.write_bytes(_tar_bytes({vader._INNER_MEMBER: _tar_bytes(inner_members)}))
    with pytest.raises(VaderDataError, match="lacks"):
        vader.read_raw_files(outer)
