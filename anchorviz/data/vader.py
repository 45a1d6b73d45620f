"""The embedded default data: VADER human sentiment ratings -> within-domain preference pairs.

Source: the ``vaderSentiment==3.3.2`` source distribution (MIT licence) ships
``additional_resources/hutto_ICWSM_2014.tar.gz``, the data set of

    Hutto, C.J. & Gilbert, E.E. (2014). VADER: A Parsimonious Rule-based Model for Sentiment
    Analysis of Social Media Text. Eighth International Conference on Weblogs and Social Media
    (ICWSM-14). Ann Arbor, MI, June 2014.

For each of four domains it holds ``<name>_GroundTruth.txt`` (tab-separated: id, mean rating,
text) and ``<name>_anonDataRatings.txt`` (id, mean, standard deviation, JSON-style list of the
individual ratings on the -4..4 scale). This module obtains the sdist itself (cache folder, else
a plain download of the file from the package index, never ``pip download``, which would run the
package's build code), checks its sha256 before anything reads it, reads the two files per domain straight out of the inner
tarball (nothing is extracted by member name, so no path traversal is possible), parses them
robustly (CRLF, BOM, UTF-8; every unparseable line is counted and reported, never silently
dropped) and caches one parquet table per domain.

Public API: :data:`VADER_DOMAINS`, :func:`load_vader_texts`, :func:`vader_pairs`,
:func:`vader_parse_report`, :func:`ensure_vader_sdist`. See ``docs/DATA.md``.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import logging
import math
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anchorviz.data.schema import PAIR_COLUMNS  # the one schema (readers.py imports us lazily)
from anchorviz.paths import cache_subdir, file_sha256, write_atomic

logger = logging.getLogger(__name__)

__all__ = [
    "DomainParseReport",
    "FileParseReport",
    "PYPI_SIMPLE",
    "SOURCE_NAME",
    "VADER_DOMAINS",
    "VADER_SDIST_NAME",
    "VADER_SDIST_SHA256",
    "VADER_SDIST_URL",
    "VADER_VERSION",
    "VaderDataError",
    "build_vader_tables",
    "ensure_vader_sdist",
    "index_url",
    "load_vader_texts",
    "normalise_text",
    "parse_domain",
    "parse_ground_truth",
    "parse_ratings",
    "read_raw_files",
    "sdist_url",
    "vader_cache_dir",
    "vader_pairs",
    "vader_parse_report",
]

VADER_DOMAINS: tuple[str, ...] = ("movie", "amazon", "nyt", "tweets")
"""Domain names as used in the ``domain`` column (dataset name: ``f"vader-{domain}"``)."""

_DOMAIN_FILES: dict[str, str] = {
    "movie": "movieReviewSnippets",
    "amazon": "amazonReviewSnippets",
    "nyt": "nytEditorialSnippets",
    "tweets": "tweets",
}

VADER_VERSION = "3.3.2"
VADER_SDIST_NAME = f"vaderSentiment-{VADER_VERSION}.tar.gz"
VADER_SDIST_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
_INNER_MEMBER = f"vaderSentiment-{VADER_VERSION}/additional_resources/hutto_ICWSM_2014.tar.gz"
_INNER_DIR = "hutto_ICWSM_2014"
_MAX_MEMBER_BYTES = 64 * 1024 * 1024

_PARSER_VERSION = 2  # bump when parsing changes: the parquet cache lives in parsed-v<N>/
_RATING_MIN, _RATING_MAX = -4, 4
_MARGIN_TOL = 1e-9  # means are ratios of small integers: 0.65 - 0.15 must clear a 0.5 margin


SOURCE_NAME = f"vaderSentiment-{VADER_VERSION} hutto_ICWSM_2014"


class VaderDataError(RuntimeError):
    """The VADER source distribution cannot be obtained, verified or read."""


@dataclass
class FileParseReport:
    """What happened to the lines of one raw file."""

    file: str
    lines: int = 0  # non-blank lines seen
    blank: int = 0  # blank lines skipped (e.g. a trailing newline)
    parsed: int = 0
    unparseable: list[dict[str, Any]] = field(default_factory=list)  # line_no, reason, excerpt
    decode_fallback_lines: int = 0  # lines that were not valid UTF-8 (decoded as cp1252)
    had_bom: bool = False
    crlf: bool = False


@dataclass
class DomainParseReport:
    """Parse report of one domain: both files plus the join of the two."""

    domain: str
    ground_truth: FileParseReport
    ratings: FileParseReport
    texts: int = 0  # rows in the final table
    only_in_ground_truth: list[str] = field(default_factory=list)
    only_in_ratings: list[str] = field(default_factory=list)
    duplicate_ids: int = 0
    gt_mean_mismatch: int = 0  # |GroundTruth mean - mean of the individual ratings| > 1e-6
    file_mean_mismatch: int = 0  # |ratings-file mean - mean of the individual ratings| > 1e-6
    duplicate_texts: int = 0  # rows whose normalised text repeats an earlier row

    @property
    def unparseable_lines(self) -> int:
        """Unparseable lines over both files."""
        return len(self.ground_truth.unparseable) + len(self.ratings.unparseable)


# --------------------------------------------------------------------------------------------
# obtaining and verifying the sdist
# --------------------------------------------------------------------------------------------


def vader_cache_dir() -> Path:
    """``cache_subdir("datasets")/vader`` (created on use): where the sdist and tables live."""
    path = cache_subdir("datasets") / "vader"
    path.mkdir(parents=True, exist_ok=True)
    return path


#: the package index's simple API (``$ANCHORVIZ_INDEX_URL`` or ``$PIP_INDEX_URL`` replace it)
PYPI_SIMPLE = "https://pypi.org/simple"
#: the file's permanent address on PyPI's file host (for fetching it by hand)
VADER_SDIST_URL = (
    f"https://files.pythonhosted.org/packages/source/v/vaderSentiment/{VADER_SDIST_NAME}"
)
_MAX_SDIST_BYTES = 64 * 1024 * 1024


def index_url() -> str:
    """The package index the sdist is looked up in: ``$ANCHORVIZ_INDEX_URL``, else pip's
    ``$PIP_INDEX_URL``, else PyPI (``https://pypi.org/simple``)."""
    url = os.environ.get("ANCHORVIZ_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or PYPI_SIMPLE
    return url.rstrip("/")


def sdist_url(index: str | None = None) -> str:
    """The download address of the sdist, read from the index's project page (PEP 691 JSON or
    PEP 503 HTML). Only the address is read: nothing of the package is run, unlike
    ``pip download``, which prepares an sdist's metadata (runs its build backend / setup.py)."""
    page = f"{index or index_url()}/vadersentiment/"
    req = urllib.request.Request(page, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - an index URL
        ctype = resp.headers.get("Content-Type", "")
        body = resp.read(8 * 1024 * 1024)
    if "json" in ctype:
        for f in json.loads(body).get("files", []):
            if f.get("filename") == VADER_SDIST_NAME:
                listed = (f.get("hashes") or {}).get("sha256")
                if listed and listed != VADER_SDIST_SHA256:
                    raise VaderDataError(
                        f"the index {page} lists {VADER_SDIST_NAME} with sha256 {listed}, "
                        f"expected {VADER_SDIST_SHA256}; not downloaded")
                return urllib.parse.urljoin(page, f["url"])
    else:
        for m in re.finditer(r'href\s*=\s*["\']([^"\']+)["\']', body.decode("utf-8", "replace")):
            href = html.unescape(m.group(1))
            if posixpath.basename(urllib.parse.urlsplit(href).path) == VADER_SDIST_NAME:
                return urllib.parse.urljoin(page, href)
    raise VaderDataError(f"the index page {page} does not list {VADER_SDIST_NAME}")


def _download(url: str, dest: Path) -> str:
    """Stream ``url`` into ``dest`` (at most 64 MiB) and return its sha256. The bytes are only
    written, never opened as an archive or run, before the caller compares the hash."""
    if urllib.parse.urlsplit(url).scheme not in ("https", "http", "file"):
        raise VaderDataError(f"refusing to download {url!r}: not an http(s) or file address")
    h = hashlib.sha256()
    size = 0
    with urllib.request.urlopen(url, timeout=120) as resp, open(dest, "wb") as out:  # noqa: S310
        for chunk in iter(lambda: resp.read(1 << 20), b""):
            size += len(chunk)
            if size > _MAX_SDIST_BYTES:
                raise VaderDataError(f"{url} is larger than {_MAX_SDIST_BYTES} bytes: not the sdist")
            h.update(chunk)
            out.write(chunk)
    return h.hexdigest()


def _check_sha(path: Path) -> None:
    digest = file_sha256(path)
    if digest != VADER_SDIST_SHA256:
        raise VaderDataError(
            f"{path} has sha256 {digest}, expected {VADER_SDIST_SHA256} "
            f"(vaderSentiment {VADER_VERSION} sdist). The file was not used; delete it and "
            "run again (or drop the genuine file there)."
        )


def _unavailable_message(folder: Path, why: str) -> str:
    return (
        f"Cannot obtain the VADER data ({VADER_SDIST_NAME}): {why}\n"
        f"Download the file where PyPI is reachable, e.g.\n"
        f"    curl -L -o {VADER_SDIST_NAME} {VADER_SDIST_URL}\n"
        f"and put it into {folder}/ (it is checked against sha256 {VADER_SDIST_SHA256} before "
        "use; do not fetch it with `pip download`, which runs the package's setup code)"
    )


def ensure_vader_sdist(download: bool | None = None) -> Path:
    """Return the path of the verified sdist in :func:`vader_cache_dir`, downloading it if needed.

    ``download=None`` downloads unless ``$ANCHORVIZ_OFFLINE`` is set to a true value. A cached
    file with the wrong sha256 is an error (it is never used nor silently replaced). A download
    (the file's address from the index's simple API, `index_url`, then the bytes; no pip, so no
    setup code of the package runs) goes to a temporary folder inside the cache and is moved
    into place only after its sha256 matched.
    """
    folder = vader_cache_dir()
    target = folder / VADER_SDIST_NAME
    if target.exists():
        _check_sha(target)
        return target
    if download is None:
        download = os.environ.get("ANCHORVIZ_OFFLINE", "").strip().lower() not in {
            "1",
            "true",
            "yes",
        }
    if not download:
        raise VaderDataError(_unavailable_message(folder, "downloads are disabled"))
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=folder))
    try:
        got = tmp / VADER_SDIST_NAME
        try:
            url = sdist_url()
            logger.info("downloading the VADER sdist from %s", url)
            _download(url, got)
        except VaderDataError:
            raise
        except (OSError, ValueError) as exc:  # URLError / HTTPError are OSErrors
            raise VaderDataError(
                _unavailable_message(folder, f"the download failed ({exc})")
            ) from exc
        _check_sha(got)  # before anything reads the file as an archive
        os.replace(got, target)
        logger.info("VADER sdist verified and cached at %s", target)
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# reading the raw files out of the archives (in memory, by checked member name)
# --------------------------------------------------------------------------------------------


def _safe_member_name(name: str) -> str | None:
    """Normalised relative posix name, or None if absolute / escaping / odd."""
    if not name or "\\" in name or "\x00" in name:
        return None
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return None
    norm = posixpath.normpath(name)
    if norm.startswith("../") or norm == ".." or "/../" in f"/{norm}/":
        return None
    return norm


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    if not member.isfile():
        raise VaderDataError(f"archive member {member.name!r} is not a regular file")
    if member.size > _MAX_MEMBER_BYTES:
        raise VaderDataError(f"archive member {member.name!r} is implausibly large")
    f = tar.extractfile(member)
    if f is None:
        raise VaderDataError(f"archive member {member.name!r} cannot be read")
    return f.read()


def read_raw_files(sdist: Path) -> dict[str, bytes]:
    """The raw ``*_GroundTruth.txt`` / ``*_anonDataRatings.txt`` bytes, keyed by base name.

    Members are looked up by their checked, normalised names and read into memory; nothing is
    written to disk under a name taken from the archive.
    """
    wanted = {
        f"{_INNER_DIR}/{base}_{kind}.txt"
        for base in _DOMAIN_FILES.values()
        for kind in ("GroundTruth", "anonDataRatings")
    }
    try:
        with tarfile.open(sdist, mode="r:gz") as outer:
            inner_bytes = None
            for m in outer.getmembers():
                if _safe_member_name(m.name) == _INNER_MEMBER:
                    inner_bytes = _read_member(outer, m)
                    break
        if inner_bytes is None:
            raise VaderDataError(f"{sdist} does not contain {_INNER_MEMBER}")
        out: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as inner:
            for m in inner.getmembers():
                norm = _safe_member_name(m.name)
                if norm is None:
                    logger.warning("ignoring unsafe archive member name %r", m.name)
                    continue
                if norm in wanted:
                    base = posixpath.basename(norm)
                    if base in out:
                        raise VaderDataError(f"{sdist}: inner archive holds {norm!r} twice")
                    out[base] = _read_member(inner, m)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise VaderDataError(f"cannot read {sdist}: {exc}") from exc
    missing = sorted(posixpath.basename(w) for w in wanted if posixpath.basename(w) not in out)
    if missing:
        raise VaderDataError(f"{sdist}: inner archive lacks {missing}")
    return out


# --------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------


def _split_lines(data: bytes, report: FileParseReport) -> list[tuple[int, str]]:
    """Decode (UTF-8, per-line cp1252 fallback) and split on CRLF / CR / LF; 1-based line no."""
    if data.startswith(b"\xef\xbb\xbf"):
        report.had_bom = True
        data = data[3:]
    report.crlf = b"\r\n" in data
    raw_lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    if raw_lines and raw_lines[-1] == b"":  # the file ends with a line break
        raw_lines.pop()
    out: list[tuple[int, str]] = []
    for i, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("cp1252", errors="replace")
            report.decode_fallback_lines += 1
        line = line.lstrip("\ufeff")
        if not line.strip():
            report.blank += 1
            continue
        report.lines += 1
        out.append((i, line))
    return out


def _bad(report: FileParseReport, line_no: int, reason: str, line: str) -> None:
    report.unparseable.append({"line_no": line_no, "reason": reason, "excerpt": line[:120]})


def _finite_float(s: str) -> float | None:
    try:
        v = float(s.strip())
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_ground_truth(
    data: bytes, name: str
) -> tuple[dict[str, tuple[float, str]], FileParseReport]:
    """Parse ``id <TAB> mean <TAB> text`` lines into ``{id: (mean, text)}`` plus a report."""
    report = FileParseReport(file=name)
    rows: dict[str, tuple[float, str]] = {}
    for line_no, line in _split_lines(data, report):
        parts = line.split("\t", 2)
        if len(parts) != 3:
            _bad(report, line_no, f"expected 3 tab-separated fields, got {len(parts)}", line)
            continue
        tid, mean_s, text = parts[0].strip(), parts[1], parts[2].strip()
        mean = _finite_float(mean_s)
        if not tid:
            _bad(report, line_no, "empty id", line)
        elif mean is None:
            _bad(report, line_no, f"mean rating {mean_s!r} is not a number", line)
        elif not text:
            _bad(report, line_no, "empty text", line)
        elif tid in rows:
            _bad(report, line_no, f"duplicate id {tid!r}", line)
        else:
            rows[tid] = (mean, text)
            report.parsed += 1
    return rows, report


def parse_ratings(
    data: bytes, name: str
) -> tuple[dict[str, tuple[float, float, list[int]]], FileParseReport]:
    """Parse ``id <TAB> mean <TAB> std <TAB> [r1, r2, ...]`` into ``{id: (mean, std, ratings)}``."""
    report = FileParseReport(file=name)
    rows: dict[str, tuple[float, float, list[int]]] = {}
    for line_no, line in _split_lines(data, report):
        parts = line.split("\t")
        if len(parts) != 4:
            _bad(report, line_no, f"expected 4 tab-separated fields, got {len(parts)}", line)
            continue
        tid = parts[0].strip()
        mean, std = _finite_float(parts[1]), _finite_float(parts[2])
        try:
            ratings = json.loads(parts[3])
        except ValueError:
            ratings = None
        ok_list = (
            isinstance(ratings, list)
            and len(ratings) > 0
            and all(
                isinstance(r, (int, float)) and not isinstance(r, bool) and float(r).is_integer()
                for r in ratings
            )
        )
        if not tid:
            _bad(report, line_no, "empty id", line)
        elif mean is None or std is None:
            _bad(report, line_no, "mean or std is not a number", line)
        elif not ok_list:
            _bad(report, line_no, "ratings field is not a non-empty list of integers", line)
        elif any(not _RATING_MIN <= r <= _RATING_MAX for r in ratings):
            _bad(report, line_no, f"rating outside {_RATING_MIN}..{_RATING_MAX}", line)
        elif tid in rows:
            _bad(report, line_no, f"duplicate id {tid!r}", line)
        else:
            rows[tid] = (mean, std, [int(r) for r in ratings])
            report.parsed += 1
    return rows, report


def normalise_text(text: str) -> str:
    """Key used to detect duplicate texts: case-folded, whitespace collapsed."""
    return " ".join(text.casefold().split())


def parse_domain(domain: str, raw: dict[str, bytes]) -> tuple[pd.DataFrame, DomainParseReport]:
    """Join the two raw files of a domain into the text table, plus its parse report.

    ``mean_rating`` is the mean of the individual ratings (it equals the ratings file's mean);
    the GroundTruth file's mean is kept as ``gt_mean`` (they differ for 199 tweets).
    """
    base = _DOMAIN_FILES[domain]
    gt_name, r_name = f"{base}_GroundTruth.txt", f"{base}_anonDataRatings.txt"
    gt, gt_rep = parse_ground_truth(raw[gt_name], gt_name)
    rt, rt_rep = parse_ratings(raw[r_name], r_name)
    report = DomainParseReport(domain=domain, ground_truth=gt_rep, ratings=rt_rep)
    report.duplicate_ids = sum(
        1
        for r in (*gt_rep.unparseable, *rt_rep.unparseable)
        if r["reason"].startswith("duplicate id")
    )
    report.only_in_ground_truth = [k for k in gt if k not in rt]
    report.only_in_ratings = [k for k in rt if k not in gt]
    records = []
    seen: set[str] = set()
    for tid, (gt_mean, text) in gt.items():  # file order
        if tid not in rt:
            continue
        file_mean, std, ratings = rt[tid]
        mean = float(np.mean(ratings))
        if abs(gt_mean - mean) > 1e-6:
            report.gt_mean_mismatch += 1
        if abs(file_mean - mean) > 1e-6:
            report.file_mean_mismatch += 1
        key = normalise_text(text)
        if key in seen:
            report.duplicate_texts += 1
        seen.add(key)
        records.append(
            {
                "text_id": tid,
                "text": text,
                "mean_rating": mean,
                "std": float(std),
                "ratings": ratings,
                "n_raters": len(ratings),
                "gt_mean": float(gt_mean),
            }
        )
    report.texts = len(records)
    df = pd.DataFrame.from_records(
        records,
        columns=["text_id", "text", "mean_rating", "std", "ratings", "n_raters", "gt_mean"],
    )
    df["n_raters"] = df["n_raters"].astype("int64")
    return df, report


# --------------------------------------------------------------------------------------------
# cached tables
# --------------------------------------------------------------------------------------------


def _tables_dir() -> Path:
    return vader_cache_dir() / f"parsed-v{_PARSER_VERSION}"


def _report_path() -> Path:
    return _tables_dir() / "report.json"


def _tables_ready() -> bool:
    d = _tables_dir()
    return _report_path().exists() and all((d / f"{dom}.parquet").exists() for dom in VADER_DOMAINS)


def build_vader_tables(force: bool = False) -> Path:
    """Parse all domains from the verified sdist and write ``<domain>.parquet`` + ``report.json``.

    Idempotent and safe with concurrent callers (file lock, atomic renames). Returns the folder.
    """
    from filelock import FileLock

    out = _tables_dir()
    out.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out / ".build.lock"), timeout=600):
        if _tables_ready() and not force:
            return out
        sdist = ensure_vader_sdist()
        raw = read_raw_files(sdist)
        reports: dict[str, Any] = {}
        for dom in VADER_DOMAINS:
            df, rep = parse_domain(dom, raw)
            write_atomic(out / f"{dom}.parquet", lambda tmp, df=df: df.to_parquet(tmp, index=False))
            reports[dom] = asdict(rep) | {"unparseable_lines": rep.unparseable_lines}
            _log_report(dom, reports[dom])
        meta = {
            "source": SOURCE_NAME,
            "sdist_sha256": VADER_SDIST_SHA256,
            "parser_version": _PARSER_VERSION,
            "domains": reports,
        }
        write_atomic(_report_path(), lambda tmp: tmp.write_text(
            json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8"))
    return out


def _log_report(domain: str, rep: dict[str, Any]) -> None:
    n_bad = rep["unparseable_lines"]
    logger.info(
        "VADER %s: %d texts, %d unparseable lines, %d duplicate texts, %d GroundTruth-mean mismatches",
        domain,
        rep["texts"],
        n_bad,
        rep["duplicate_texts"],
        rep["gt_mean_mismatch"],
    )
    if n_bad or rep["only_in_ground_truth"] or rep["only_in_ratings"]:
        logger.warning(
            "VADER %s: %d unparseable lines, %d ids only in GroundTruth, %d only in ratings "
            "(details: vader_parse_report())",
            domain,
            n_bad,
            len(rep["only_in_ground_truth"]),
            len(rep["only_in_ratings"]),
        )


def vader_parse_report() -> dict[str, Any]:
    """The parse report of the cached tables (building them first if needed)."""
    if not _tables_ready():
        build_vader_tables()
    return json.loads(_report_path().read_text(encoding="utf-8"))


def _check_domain(domain: str) -> None:
    if domain not in VADER_DOMAINS:
        raise ValueError(f"unknown VADER domain {domain!r}; choose one of {VADER_DOMAINS}")


def load_vader_texts(domain: str) -> pd.DataFrame:
    """The parsed texts of one domain, one row per text in file order.

    Columns: ``text_id`` (str), ``text`` (str, surrounding whitespace stripped), ``mean_rating``
    (mean of the individual ratings), ``std`` (as in the ratings file: population std),
    ``ratings`` (list[int], each -4..4), ``n_raters`` (int), ``gt_mean`` (the GroundTruth file's
    mean). The domain's parse report is in ``df.attrs["parse_report"]``.
    """
    _check_domain(domain)
    if not _tables_ready():
        build_vader_tables()
    df = pd.read_parquet(_tables_dir() / f"{domain}.parquet")
    df["ratings"] = [[int(x) for x in r] for r in df["ratings"]]
    df["text_id"] = df["text_id"].astype(str)
    rep = vader_parse_report()["domains"][domain]
    df.attrs["parse_report"] = rep
    if rep["unparseable_lines"]:
        logger.warning(
            "VADER %s: %d unparseable lines were not loaded (see df.attrs['parse_report'])",
            domain,
            rep["unparseable_lines"],
        )
    return df


# --------------------------------------------------------------------------------------------
# pairs
# --------------------------------------------------------------------------------------------


def _parse_labeller(labeller: str) -> int | None:
    """None for the mean labeller, else the number k of individual ratings averaged per text."""
    if labeller == "mean":
        return None
    if labeller == "single_rater":
        return 1
    m = re.fullmatch(r"raters?:(\d+)", labeller)
    if m and int(m.group(1)) >= 1:
        return int(m.group(1))
    raise ValueError(
        f"labeller must be 'mean', 'single_rater' or 'raters:k' (k >= 1), got {labeller!r}"
    )


def _match_pairs(
    means: np.ndarray, margin: float, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """Random disjoint matching with |mean_i - mean_j| >= margin (indices into ``means``).

    Rounds: shuffle the unpaired texts, pair the first half with the second half position by
    position, keep the pairs that clear the margin (up to a 1e-9 float tolerance; exact ties
    never qualify), return the rest
    to the pool; stop when a round adds (almost) nothing. Each text ends up in at most one pair.
    """
    pool = np.arange(len(means))
    pairs: list[tuple[int, int]] = []
    for _ in range(50):
        if len(pool) < 2:
            break
        pool = rng.permutation(pool)
        half = len(pool) // 2
        a, b = pool[:half], pool[half : 2 * half]
        diff = np.abs(means[a] - means[b])
        ok = (diff >= margin - _MARGIN_TOL) & (diff > _MARGIN_TOL)
        pairs.extend(zip(a[ok].tolist(), b[ok].tolist()))
        pool = np.concatenate([a[~ok], b[~ok], pool[2 * half :]])
        if ok.sum() <= max(1, half // 1000):
            break
    return pairs


def _labeller_scores(uniq: pd.DataFrame, means: np.ndarray, k: int | None,
                     label_rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, coin)``: the labeller's score of every distinct text (the mean rating, or the
    mean of ``k`` of its ratings drawn without replacement), drawn in a fixed order whatever the
    number of pairs asked for, and the tie-breaking coin indexed by text A."""
    if k is None:
        return means, np.zeros(0)
    scores = np.empty(len(uniq))
    for i, r in enumerate(uniq["ratings"]):
        arr = np.asarray(r, dtype=float)
        take = min(k, len(arr))
        scores[i] = label_rng.choice(arr, size=take, replace=False).mean()
    coin = label_rng.random(len(uniq)) < 0.5  # tie-break, indexed by text A
    return scores, coin


def _pair_row(domain: str, a: dict, b: dict, i: int, j: int, means: np.ndarray,
              scores: np.ndarray, coin: np.ndarray, k: int | None, margin: float,
              labeller: str) -> dict:
    """The pair-table row of texts ``a`` (index ``i``, earlier in the file) and ``b``."""
    gold_a = bool(means[i] > means[j])  # never tied: the matching excludes ties
    if k is None:
        chosen_is_a = gold_a
    elif scores[i] != scores[j]:
        chosen_is_a = bool(scores[i] > scores[j])
    else:
        chosen_is_a = bool(coin[i])
    c, r = (a, b) if chosen_is_a else (b, a)
    meta = {
        "source": SOURCE_NAME,
        "text_id_a": a["text_id"],
        "text_id_b": b["text_id"],
        "mean_a": float(means[i]),
        "mean_b": float(means[j]),
        "n_raters_a": int(a["n_raters"]),
        "n_raters_b": int(b["n_raters"]),
        "score_a": float(scores[i]),
        "score_b": float(scores[j]),
        "chosen_is_a": chosen_is_a,
        "gold_chosen_is_a": gold_a,
        "label_is_gold": chosen_is_a == gold_a,
        "chosen_text_id": c["text_id"],
        "rejected_text_id": r["text_id"],
        "chosen_mean": float(c["mean_rating"]),
        "rejected_mean": float(r["mean_rating"]),
        "margin": float(margin),
        "labeller": labeller,
    }
    pair_id = f"vader-{domain}-{a['text_id']}-{b['text_id']}"
    meta["group"] = pair_id  # one pair per group: every text is in one pair only
    return {"pair_id": pair_id, "dataset": f"vader-{domain}", "domain": domain, "prompt": "",
            "chosen": c["text"], "rejected": r["text"], "prompt_turns": None, "meta": meta}


def vader_pairs(
    domain: str,
    n_pairs: int | None = None,
    margin: float = 0.5,
    seed: int = 0,
    labeller: str = "mean",
) -> pd.DataFrame:
    """Within-domain preference pairs in the anchorviz pair schema.

    - ``prompt`` is ``""``: the response is the whole text (the "task" is implicit: prefer the
      text people rated more positively). ``prompt_turns`` is None.
    - Texts are de-duplicated first (case-folded, whitespace-collapsed; the first occurrence in
      file order is kept), then randomly matched (seeded) into disjoint pairs whose gold means
      differ by at least ``margin`` (and are not exactly tied); near-ties are excluded. Every text appears in at most one
      pair, so any pair-level split is text-disjoint (there is no prompt to group by).
    - Gold label: chosen = the text with the higher mean rating.
    - ``labeller="mean"`` uses the gold label. ``"single_rater"`` (= ``"raters:1"``) or
      ``"raters:k"`` simulates a noisier labeller: for each text, k of its individual ratings
      are drawn without replacement (seeded; all of them if it has fewer) and averaged, and the
      pair is labelled by those scores (a tie is broken by a seeded coin flip). The pairs are
      the same as with ``"mean"`` for the same seed; only the labels differ, and the gold label
      stays in ``meta["gold_chosen_is_a"]`` so ``df.attrs["flip_rate"]`` is measurable.
    - ``n_pairs``: take this many of the matched pairs (a seeded random subset); ``None`` = all.
      Asking for more than exist is a ValueError that says how many there are. Rows come in a
      seeded random order, so ``df.iloc[:n]`` slices are random samples.
    - ``pair_id = f"vader-{domain}-{idA}-{idB}"`` where A is the text earlier in the file.

    ``meta``: ``text_id_a/b``, ``mean_a/b``, ``n_raters_a/b``, ``score_a/b`` (the labeller's
    scores), ``chosen_is_a``, ``gold_chosen_is_a``, ``label_is_gold``, ``chosen_text_id``,
    ``rejected_text_id``, ``chosen_mean``, ``rejected_mean``, ``margin``, ``labeller``,
    ``source`` and ``group`` (= ``pair_id``). All prompts are empty, so split these pairs with
    ``group_key="group"`` (or ``None``), never by prompt: each pair is its own group and, since
    no text is in two pairs, any such split is text-disjoint.
    """
    _check_domain(domain)
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    k = _parse_labeller(labeller)
    texts = load_vader_texts(domain)
    n_texts = len(texts)
    keys = texts["text"].map(normalise_text)
    uniq = texts.loc[~keys.duplicated(keep="first")].reset_index(drop=True)
    means = uniq["mean_rating"].to_numpy(dtype=float)

    pair_rng, label_rng, subset_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)
    )
    matched = _match_pairs(means, float(margin), pair_rng)
    matched = sorted((min(i, j), max(i, j)) for i, j in matched)  # A = earlier in file order
    n_avail = len(matched)
    if n_pairs is not None and not 0 <= n_pairs <= n_avail:
        raise ValueError(
            f"vader-{domain}: {n_avail} pairs exist at margin {margin} "
            f"({len(uniq)} distinct texts), asked for {n_pairs}"
        )
    order = subset_rng.permutation(n_avail)[: n_avail if n_pairs is None else n_pairs]
    matched = [matched[o] for o in order]  # seeded random row order

    scores, coin = _labeller_scores(uniq, means, k, label_rng)

    recs = uniq.to_dict("records")
    rows = [_pair_row(domain, recs[i], recs[j], i, j, means, scores, coin, k, margin, labeller)
            for i, j in matched]
    df = pd.DataFrame.from_records(rows, columns=list(PAIR_COLUMNS))
    flips = float(np.mean([not m["label_is_gold"] for m in df["meta"]])) if len(df) else 0.0
    df.attrs.update(
        {
            "vader_domain": domain,
            "n_texts": n_texts,
            "n_distinct_texts": len(uniq),
            "n_pairs_available": n_avail,
            "margin": float(margin),
            "labeller": labeller,
            "seed": seed,
            "flip_rate": flips,
        }
    )
    logger.info(
        "vader-%s: %d pairs (of %d available from %d distinct texts, margin %.2f, labeller %s, "
        "flip rate vs gold %.3f)",
        domain,
        len(df),
        n_avail,
        len(uniq),
        margin,
        labeller,
        flips,
    )
    return df
