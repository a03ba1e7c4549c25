"""`pip install guardeval` beside PyPI's `harness` and `guards` (issue 30 §3): one top-level
package, `guardeval`, so installing it into an environment that has them leaves all three
importable. The two are stood in for by wheels of those names built here (no network)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import INSTALLED_WHEEL

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(INSTALLED_WHEEL)]

SETUP = """from setuptools import setup
setup(name={name!r}, version="9.9.9", packages=[{name!r}])
"""


def _fake_wheel(tmp: Path, name: str, wheels: Path) -> Path:
    src = tmp / f"src-{name}"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text(f"WHO = 'the other {name}'\n")
    (src / "setup.py").write_text(SETUP.format(name=name))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(wheels), str(src)], check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob(f"{name}-9.9.9-*.whl")
    return wheel


def test_guardeval_installs_beside_pypis_harness_and_guards(installed, tmp_path):
    wheels = tmp_path / "wheels"
    fakes = [_fake_wheel(tmp_path, name, wheels) for name in ("harness", "guards")]
    [ours] = (installed.venv.parent / "wheels").glob("guardeval-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    # guardeval's dependencies come from the installed fixture's environment, by a path entry
    [pth] = (installed.venv / "lib").glob("python*/site-packages/_guardeval_test_deps.pth")
    (Path(site) / pth.name).write_text(pth.read_text())
    for wheel in (*fakes, ours):                      # theirs first: guardeval arrives in their environment
        r = subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", "-q",
                            str(wheel)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    probe = ("import harness, guards, guardeval, guardeval.backends.config; "
             "print(harness.WHO); print(guards.WHO); print(guardeval.__version__)")
    out = subprocess.run([py, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["the other harness", "the other guards"], out.stdout
    # The wheel itself: one top-level package and its metadata, nothing else.
    import zipfile

    with zipfile.ZipFile(ours) as z:
        tops = {name.split("/")[0] for name in z.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"guardeval"}, tops
