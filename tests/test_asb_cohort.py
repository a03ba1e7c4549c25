"""ASB builder: pins before parsing, arms, threat-word shares, determinism, CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cohorts.builders.asb import build_asb
from harness.cohorts.model import load_cohort
from harness.cohorts.report import inspect
from harness.cohorts.transforms import has_threat_word
from harness.errors import InputError

REPO = Path(__file__).resolve().parents[1]
ASB = REPO.parent / "shared" / "data" / "asb"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("asb") / "cohort"
    build_asb(ASB, out, max_bases=120, seed=7)
    return load_cohort(out)


def test_arms_and_shares(small):
    assert small.condition_names == ["A0", "NULL2", "A1", "A1b", "A3"]
    assert small.role_of("NULL2") == "placebo" and small.role_of("A0") == "baseline"
    report = inspect(small)
    assert report["n_bases"] == 120 and report["invariance"]["ok"]
    share = report["threat_word_share"]
    assert share["A0"] > 0.6 and share["NULL2"] == share["A0"] == share["A1b"]
    assert share["A1"] == share["A3"] == 0.0
    assert set(report["by_label"]) == {"0", "1"}


def test_arm_contents(small):
    one = next(b for b in small.base_ids if b.endswith("/s2")
               and has_threat_word(small.instance(b, "A0")["tool"]))
    a0, null2, a1, a1b = (small.instance(one, c) for c in ("A0", "NULL2", "A1", "A1b"))
    name = a0["tool"]
    # NULL2: same letters, only case/separators.
    assert null2["tool"].replace("_", "").lower() == name.lower() and null2["tool"] != name
    # A1: renamed everywhere, including inside the injected instruction.
    assert not has_threat_word(a1["tool"])
    assert name not in json.dumps([a1["history"], a1["tool_descriptions"], a1["current_action"]])
    assert a1["tool"] in a1["history"][-1]["content"]
    # A1b: only the attacker tool's description changes.
    assert a1b["tool"] == name and a1b["history"] == a0["history"]
    assert a1b["tool_descriptions"][:-1] == a0["tool_descriptions"][:-1]
    for row in (a0, null2, a1, a1b):
        assert row["user_request"] == a0["user_request"] and row["label"] == 1


def test_rebuild_is_byte_identical(tmp_path, small):
    build_asb(ASB, tmp_path / "again", max_bases=120, seed=7)
    for name in ("cohort.json", "instances.jsonl"):
        assert (tmp_path / "again" / name).read_bytes() == (small.path / name).read_bytes()


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "asb"
    shutil.copytree(ASB, src)
    return src


def test_tampered_source_is_refused_before_parsing(tmp_path):
    src = _copy(tmp_path)
    data = bytearray((src / "all_attack_tools.jsonl").read_bytes())
    data[100] ^= 0x01
    (src / "all_attack_tools.jsonl").write_bytes(bytes(data))
    with pytest.raises(InputError, match="SHA-256"):
        build_asb(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_symlinked_source_file_is_refused(tmp_path):
    src = _copy(tmp_path)
    (src / "agent_task.jsonl").unlink()
    (src / "agent_task.jsonl").symlink_to(ASB / "agent_task.jsonl")
    with pytest.raises(InputError, match="symbolic"):
        build_asb(src, tmp_path / "out")


def test_manifest_must_agree_with_the_pins(tmp_path):
    src = _copy(tmp_path)
    text = (src / "MANIFEST.txt").read_text().replace("4935 ", "4936 ")
    (src / "MANIFEST.txt").write_text(text)
    with pytest.raises(InputError, match="MANIFEST"):
        build_asb(src, tmp_path / "out")


def test_cli_build_and_inspect_json(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = tmp_path / "c"
    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "harness", *a], env=env, capture_output=True,
                              text=True, timeout=120)
    p = run("cohort", "build", "asb", "--source", str(ASB), "--out", str(out), "--max-bases", "40",
            "--conditions", "A1")
    assert p.returncode == 0, p.stderr
    p = run("cohort", "inspect", str(out), "--json")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)  # stdout carries only the JSON
    assert list(report["threat_word_share"]) == ["A0", "A1"] and report["n_bases"] == 40
    p = run("cohort", "build", "asb", "--source", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
