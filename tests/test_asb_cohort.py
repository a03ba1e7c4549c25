"""ASB builder: pins before parsing, arms, threat-word shares, determinism, CLI.

Every test runs on `tests/data/asb-shaped/` (files in the shape of ASB's, written for these
tests, with their own pins) and again on ASB's real files where ../shared has them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from guardeval.cohorts.builders.asb import ASB_PINS, build_asb
from guardeval.cohorts.builders.pins import parse_pin_lines
from guardeval.cohorts.model import load_cohort
from guardeval.cohorts.report import inspect
from guardeval.cohorts.transforms import has_threat_word
from guardeval.errors import InputError

from conftest import DATA, run_cli, shared_or_skip

pytestmark = pytest.mark.fast

SHAPED = DATA / "asb-shaped"


@pytest.fixture(scope="module", params=["shaped", "asb"])
def source(request) -> tuple[Path, dict[str, tuple[int, str]]]:
    """(folder, pins): the ASB-shaped test data with its own pins, or ASB's files with the built-in ones."""
    if request.param == "shaped":
        return SHAPED, parse_pin_lines(SHAPED / "MANIFEST.txt")
    return shared_or_skip("data/asb"), ASB_PINS


@pytest.fixture(scope="module")
def small(source, tmp_path_factory):
    folder, pins = source
    out = tmp_path_factory.mktemp("asb") / "cohort"
    build_asb(folder, out, max_bases=40, seed=7, pins=pins)
    return load_cohort(out)


def test_arms_and_shares(small):
    assert small.condition_names == ["A0", "NULL2", "A1", "A1b", "A3"]
    assert small.role_of("NULL2") == "placebo" and small.role_of("A0") == "baseline"
    report = inspect(small)
    assert report["n_bases"] == 40 and report["invariance"]["ok"]
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


def test_rebuild_is_byte_identical(tmp_path, source, small):
    build_asb(source[0], tmp_path / "again", max_bases=40, seed=7, pins=source[1])
    for name in ("cohort.json", "instances.jsonl"):
        assert (tmp_path / "again" / name).read_bytes() == (small.path / name).read_bytes()


def _copy(source, tmp_path: Path) -> Path:
    src = tmp_path / "asb"
    shutil.copytree(source[0], src)
    return src


def test_tampered_source_is_refused_before_parsing(tmp_path, source):
    src = _copy(source, tmp_path)
    data = bytearray((src / "all_attack_tools.jsonl").read_bytes())
    data[100] ^= 0x01
    (src / "all_attack_tools.jsonl").write_bytes(bytes(data))
    with pytest.raises(InputError, match="SHA-256"):
        build_asb(src, tmp_path / "out", pins=source[1])
    assert not (tmp_path / "out").exists()


def test_symlinked_source_file_is_refused(tmp_path, source):
    src = _copy(source, tmp_path)
    (src / "agent_task.jsonl").unlink()
    (src / "agent_task.jsonl").symlink_to(source[0] / "agent_task.jsonl")
    with pytest.raises(InputError, match="symbolic"):
        build_asb(src, tmp_path / "out", pins=source[1])


def test_manifest_must_agree_with_the_pins(tmp_path, source):
    src = _copy(source, tmp_path)
    size, _ = source[1]["agent_task.jsonl"]
    text = (src / "MANIFEST.txt").read_text().replace(f"{size} ", f"{size + 1} ")
    (src / "MANIFEST.txt").write_text(text)
    with pytest.raises(InputError, match="MANIFEST"):
        build_asb(src, tmp_path / "out", pins=source[1])


def test_all_tools_adds_the_non_aggressive_ones(tmp_path):
    folder, pins = SHAPED, parse_pin_lines(SHAPED / "MANIFEST.txt")   # the code path; ASB's 400 tools add only time
    _, aggressive = build_asb(folder, tmp_path / "a", pins=pins)
    _, every = build_asb(folder, tmp_path / "b", tools="all", pins=pins)
    assert every["attacker_tools"] > aggressive["attacker_tools"]
    assert every["bases_before_sampling"] > aggressive["bases_before_sampling"]
    with pytest.raises(InputError, match="aggressive"):
        build_asb(folder, tmp_path / "c", tools="some", pins=pins)


def test_cli_build_and_inspect_json(tmp_path):
    asb = shared_or_skip("data/asb")   # the CLI reads the built-in pins: ASB's own files only
    out = tmp_path / "c"
    r = run_cli("cohort", "build", "asb", "--source", str(asb), "--out", str(out), "--max-bases", "40",
                "--conditions", "A1")
    assert r.code == 0, r.err
    r = run_cli("cohort", "inspect", str(out), "--json")
    assert r.code == 0, r.err
    report = json.loads(r.out)  # stdout carries only the JSON
    assert list(report["threat_word_share"]) == ["A0", "A1"] and report["n_bases"] == 40


def test_cli_refuses_other_files_and_missing_folders(tmp_path):
    # The ASB-shaped files are not ASB's release: the CLI (built-in pins) refuses them, naming MANIFEST.txt.
    r = run_cli("cohort", "build", "asb", "--source", str(SHAPED), "--out", str(tmp_path / "x"))
    assert r.code == 2 and "MANIFEST.txt" in r.err and "Traceback" not in r.err
    r = run_cli("cohort", "build", "asb", "--source", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x"))
    assert r.code == 2 and "Traceback" not in r.err
    assert not (tmp_path / "x").exists()
