"""`verify` names the file and line for any single flipped byte in the run's pinned files."""

from __future__ import annotations

import random
import shutil

import pytest

from guardeval.run.run import Run

from conftest import run_cli

pytestmark = pytest.mark.fast


def test_clean_run_verifies(finished_run):
    report = Run.open(finished_run).verify()
    assert report["ok"], report["problems"]
    assert report["n_decisions"] == 80 and report["n_raw"] > 80


@pytest.mark.parametrize("name", ["raw.jsonl", "schedule.jsonl", "stimuli.jsonl", "manifest.json"])
def test_any_flipped_byte_is_caught_with_file_and_line(tmp_path, finished_run, name):
    size = (finished_run / name).stat().st_size
    rng = random.Random(name)
    positions = sorted(rng.sample(range(size), 25)) + [0, size - 1]
    for pos in positions:
        run = tmp_path / f"flip{pos}"
        shutil.copytree(finished_run, run)
        data = bytearray((run / name).read_bytes())
        data[pos] ^= 0x01
        (run / name).write_bytes(bytes(data))
        report = Run.open(run).verify()
        assert not report["ok"], (name, pos)
        hits = [p for p in report["problems"] if p["file"] == name and p["line"]]
        assert hits, (name, pos, report["problems"])
        if name != "manifest.json":
            text = (run / name).read_bytes()
            line_of_pos = text[:pos].count(b"\n") + 1
            assert any(abs(h["line"] - line_of_pos) <= 1 for h in hits), (pos, line_of_pos, hits)


def test_verify_cli_exit_code_and_message(tmp_path, finished_run):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    raw = (run / "raw.jsonl").read_bytes()
    second_line = raw.index(b"\n") + 10
    data = bytearray(raw)
    data[second_line] ^= 0x02
    (run / "raw.jsonl").write_bytes(bytes(data))
    r = run_cli("verify", str(run))
    assert r.code == 1   # the report is the result, on stdout, whether it passes or fails
    assert r.out.startswith("raw.jsonl:2:") and r.out.splitlines()[-1].startswith("verify: FAILED") and not r.err
    r = run_cli("verify", str(finished_run))
    assert r.code == 0 and r.out.startswith("verify: OK") and not r.err
    r = run_cli("verify", str(finished_run), "--json")
    assert r.code == 0 and r.out.lstrip().startswith("{")


@pytest.mark.parametrize("name", ["raw.jsonl", "schedule.jsonl", "stimuli.jsonl", "decisions.jsonl"])
def test_every_renamed_key_is_caught(tmp_path, finished_run, name):
    import json

    first = json.loads((finished_run / name).read_text().splitlines()[1])
    for key in first:
        run = tmp_path / f"{name}-{key}"
        shutil.copytree(finished_run, run)
        lines = (run / name).read_bytes().split(b"\n")
        lines[1] = lines[1].replace(f'"{key}":'.encode(), f'"{key}X":'.encode(), 1)
        (run / name).write_bytes(b"\n".join(lines))
        report = Run.open(run).verify()
        assert not report["ok"], (name, key)
        assert any(p["file"] == name and p["line"] in (1, 2, 3) for p in report["problems"]), (key, report)



def test_raw_lines_are_canonical_with_the_request_spliced_in(finished_run):
    from guardeval.canon import dumps_line

    for line in (finished_run / "raw.jsonl").read_bytes().splitlines()[:20]:
        rec = __import__("orjson").loads(line)
        assert isinstance(rec["request"], dict) and rec["request"]["messages"]
        assert dumps_line(rec)[:-1] == line
