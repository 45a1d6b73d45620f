"""Installing anchorviz like a library: version in one place, extras, licence metadata without
setuptools' deprecation, `anchorviz --version`, the CHANGELOG, and the conda-forge
environment.yml (parsed: conda itself is not needed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import anchorviz
from anchorviz import cli

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (the CI's); 3.10 skips

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_has_one_source():
    proj = _pyproject()
    assert "version" not in proj["project"], "the version lives in anchorviz/__init__.py"
    assert "version" in proj["project"]["dynamic"]
    assert proj["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "anchorviz.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", anchorviz.__version__)


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"anchorviz {anchorviz.__version__}"


def test_extras():
    extras = _pyproject()["project"]["optional-dependencies"]
    for name in ("dev", "ray", "tracking", "tensorboard", "mlflow", "wandb"):
        assert name in extras, name

    def names(reqs):
        return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in reqs}

    tracking = names(extras["tracking"])
    for one in ("tensorboard", "mlflow", "wandb"):
        assert names(extras[one]) <= tracking, one
    # no extra may pull another torch / transformers build than the one installed first
    for name, reqs in extras.items():
        assert not names(reqs) & {"torch", "transformers"}, name
    # what the offline tests need is in dev
    assert {"trl", "tensorboard", "mlflow-skinny"} <= names(extras["dev"])


def test_licence_metadata_is_pep639():
    proj = _pyproject()
    assert proj["project"]["license"] == "MIT"  # an SPDX expression, not the deprecated table
    for f in proj["project"]["license-files"]:
        assert (ROOT / f).is_file(), f
    assert not any(c.startswith("License ::") for c in proj["project"].get("classifiers", []))
    req = proj["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in req)
    assert "MIT License" in (ROOT / "LICENSE").read_text()


def test_metadata_builds_without_deprecation(tmp_path):
    """setuptools writes the metadata (version from __init__, License-Expression) and prints no
    deprecation warning (the licence table was one)."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / f, src / f)
    shutil.copytree(ROOT / "anchorviz", src / "anchorviz",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "meta"
    out.mkdir()
    code = ("import sys; from setuptools import build_meta as b; "
            "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-W", "always", "-c", code, str(out)], cwd=src,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    noise = proc.stdout + proc.stderr
    assert "Deprecat" not in noise and "deprecat" not in noise, noise[-2000:]
    meta = (out / proc.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    assert f"Version: {anchorviz.__version__}" in meta
    assert "License-Expression: MIT" in meta
    assert "Provides-Extra: tracking" in meta


def test_changelog_names_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", text, flags=re.M)
    assert releases and releases[0] == anchorviz.__version__, releases


def test_environment_yml_is_conda_forge_only():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] == "anchorviz"
    channels = env["channels"]
    assert channels[0] == "conda-forge"
    assert not {"pytorch", "defaults", "nvidia"} & set(channels)
    deps = env["dependencies"]
    plain = [d for d in deps if isinstance(d, str)]
    names = {re.split(r"[<>=! ]", d, maxsplit=1)[0] for d in plain}
    assert "cpuonly" not in names, "cpuonly lives on the retired pytorch channel"
    assert "pytorch-cpu" in names or "pytorch" in names
    torch_spec = next(d for d in plain if d.startswith("pytorch"))
    assert ">=2.2" in torch_spec and "<3" in torch_spec  # the package's torch range
    assert "python=3.11" in plain and "pip" in plain
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    extras = _pyproject()["project"]["optional-dependencies"]
    for line in pip:
        m = re.fullmatch(r"-e \.(?:\[([a-z,]+)\])?", line)
        assert m, line
        for extra in (m.group(1) or "").split(","):
            assert not extra or extra in extras, extra
