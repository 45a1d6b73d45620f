"""Benchmark: peak RSS of ``anchorviz cues`` on a gzip bomb and on a legitimate large file.

Builds, under ``--dir`` (never in git):

- ``bomb.jsonl.gz``: 328,407 identical JSON lines of about 3 KB (about 1 GB unpacked, about
  2 MB packed), the red-team's file of issue 43;
- ``legit.jsonl``: about 200 MB of distinct pairs (``--legit-mb``), every line kept.

and runs ``anchorviz cues FILE --n-boot 200 --json`` on each in a child process under
``/usr/bin/time -v`` (maximum resident set size), with the code at ``--code`` (default: this
checkout; give an older checkout to measure the code before a change). One run per file: the
number is a peak, not a time.

Usage (what produced docs/BENCHMARKS.md)::

    python bench/bench_reading.py --dir /tmp/h43/bench-reading
    python bench/bench_reading.py --dir /tmp/h43/bench-reading --code /tmp/h43/old
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_bomb(path: Path, lines: int = 328_407) -> None:
    line = json.dumps({"prompt": "Tell me about the weather. " * 40,
                       "chosen": "It is sunny and warm today. " * 35,
                       "rejected": "No." * 300}) + "\n"
    block = line.encode() * 1000
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(lines // 1000):
            f.write(block)
        f.write(line.encode() * (lines % 1000))


def build_legit(path: Path, mb: int) -> None:
    import random

    rnd = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    target = mb << 20
    with open(path, "w") as f:
        i = 0
        while f.tell() < target:
            def text(n: int) -> str:
                return " ".join(rnd.choice(words) for _ in range(n))

            f.write(json.dumps({"prompt": f"{i} " + text(60), "chosen": text(120) + " yes",
                                "rejected": text(80) + " no"}) + "\n")
            i += 1


def peak_rss(file: Path, code: Path, env_extra: dict[str, str]) -> tuple[int, int, float, str]:
    env = {**os.environ, "PYTHONPATH": str(code), "TQDM_DISABLE": "1", **env_extra}
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "anchorviz.cli", "cues",
                        str(file), "--n-boot", "200", "--json"], env=env, capture_output=True,
                       text=True, cwd=str(code))
    wall = time.perf_counter() - t0
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    last = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("\t")]
    tail = last[-1] if last else ""
    pairs = re.search(r'"pairs": (\d+)', p.stdout)
    return p.returncode, kb // 1024, wall, (f"pairs {pairs.group(1)}" if pairs else tail[:160])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/anchorviz-bench-reading"))
    ap.add_argument("--code", type=Path, default=REPO)
    ap.add_argument("--legit-mb", type=int, default=200)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    bomb, legit = args.dir / "bomb.jsonl.gz", args.dir / "legit.jsonl"
    if not bomb.exists():
        build_bomb(bomb)
    if not legit.exists():
        build_legit(legit, args.legit_mb)
    with gzip.open(bomb, "rb") as f:
        unpacked = sum(len(b) for b in iter(lambda: f.read(1 << 24), b""))
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    print(f"CPU: {cpu}; load {os.getloadavg()[0]:.2f}; code {args.code}")
    print(f"bomb: {bomb.stat().st_size / 2**20:.1f} MiB packed, {unpacked / 2**20:.0f} MiB "
          f"unpacked; legit: {legit.stat().st_size / 2**20:.0f} MiB")
    for name, file, env in (("bomb", bomb, {}), ("legit", legit, {}),
                            ("bomb, limit 256 MiB", bomb,
                             {"ANCHORVIZ_MAX_READ_BYTES": str(256 << 20)})):
        rc, mib, wall, what = peak_rss(file, args.code, env)
        print(f"{name:22s} exit {rc}  peak RSS {mib:5d} MiB  wall {wall:6.1f} s  {what}")


if __name__ == "__main__":
    main()
