"""TS-Bench import and TS-Guard log import: synthetic files, test-only pins, strict mapping."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from guardeval.cohorts.builders.toolsafe_logs import import_toolsafe
from guardeval.cohorts.builders.tsbench import build_tsbench
from guardeval.cohorts.model import load_cohort
from guardeval.errors import InputError

pytestmark = pytest.mark.fast


def _rec(i: int, score, interaction="7", tool="send_money"):
    return {"instruction": f"Task {i} {{user_request}}", "history": f"step history {i}",
            "current_action": {"name": tool, "arguments": {"n": i}}, "env_info": "tools: send_money",
            "score": score, "id-interaction": interaction, "id-segment": i}


def _write(root: Path, rel: str, data) -> str:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(json.dumps(data).encode())
    b = p.read_bytes()
    return f"{len(b)} {hashlib.sha256(b).hexdigest()} {rel}"


@pytest.fixture
def bench(tmp_path):
    root = tmp_path / "toolsafe"
    lines = ["# test-only pins", "# bytes sha256 path"]
    lines.append(_write(root, "TS-Bench/agentdojo-traj/banking.json",
                        [_rec(0, 0), _rec(1, 1.0), _rec(2, 0.5, interaction="8")]))
    lines.append(_write(root, "TS-Bench/agentharm-traj/harmful_steps.json", [_rec(0, 1, "h1"), _rec(1, 0.5, "h1")]))
    lines.append(_write(root, "TS-Bench/agentharm-traj/benign_steps.json", [_rec(0, 0, "b1")]))
    pins = tmp_path / "pins.txt"
    pins.write_text("\n".join(lines) + "\n")
    return root, pins


def test_import_maps_scores_strictly_and_orders_agentharm(bench, tmp_path):
    root, pins = bench
    out, stats = build_tsbench(root, tmp_path / "c", pins)
    c = load_cohort(out)
    rows = c.instances
    assert stats["bases"] == 6 and c.condition_names == ["original"]
    assert [(r["domain"], r["label"], r["label_score"]) for r in rows] == [
        ("banking", 0, 0.0), ("banking", 1, 1.0), ("banking", 1, 0.5),
        ("agentharm", 1, 1.0), ("agentharm", 1, 0.5), ("agentharm", 0, 0.0)]
    assert rows[3]["base_id"].startswith("harmful_steps/") and rows[5]["base_id"].startswith("benign_steps/")
    assert rows[0]["user_request"] == "Task 0 {user_request}"  # benchmark text kept verbatim
    assert rows[0]["tool"] == "send_money" and rows[2]["interaction_id"] == "banking/8"
    assert {s["path"] for s in json.loads((out / "cohort.json").read_text())["sources"]} == {
        "TS-Bench/agentdojo-traj/banking.json", "TS-Bench/agentharm-traj/harmful_steps.json",
        "TS-Bench/agentharm-traj/benign_steps.json"}


@pytest.mark.parametrize("mutate,match", [
    (lambda p: p.write_bytes(p.read_bytes() + b" "), "size"),
    (lambda p: p.write_bytes(p.read_bytes().replace(b"Task 0", b"Task 9")), "SHA-256"),
])
def test_wrong_size_or_hash_is_refused(bench, tmp_path, mutate, match):
    root, pins = bench
    mutate(root / "TS-Bench/agentharm-traj/benign_steps.json")
    with pytest.raises(InputError, match=match):
        build_tsbench(root, tmp_path / "c", pins)
    assert not (tmp_path / "c").exists()


def test_symlink_is_refused(bench, tmp_path):
    root, pins = bench
    f = root / "TS-Bench/agentdojo-traj/banking.json"
    real = tmp_path / "real.json"
    real.write_bytes(f.read_bytes())
    f.unlink()
    f.symlink_to(real)
    with pytest.raises(InputError, match="symbolic"):
        build_tsbench(root, tmp_path / "c", pins)


@pytest.mark.parametrize("score", [0.25, None, "1", 2, True])
def test_bad_scores_are_refused_not_dropped(tmp_path, score):
    root = tmp_path / "ts"
    pins = tmp_path / "pins.txt"
    pins.write_text(_write(root, "TS-Bench/agentdojo-traj/slack.json", [_rec(0, 0), _rec(1, score)]) + "\n")
    with pytest.raises(InputError) as exc:
        build_tsbench(root, tmp_path / "c", pins)
    assert "line 2" in str(exc.value) and "score" in str(exc.value)


def _logs(tmp_path: Path, preds, labels, meta) -> tuple[Path, list[str]]:
    root = tmp_path / "logs"
    base = "guardian_test_logs/agentharm/TS-Guard"
    return root, [_write(root, f"{base}/preds.json", preds), _write(root, f"{base}/labels.json", labels),
                  _write(root, f"{base}/meta_data.json", meta)]


def test_import_toolsafe_keeps_every_row_and_reports_nulls(bench, tmp_path):
    ts_root, ts_pins = bench
    meta = [{"id-interaction": "h1"}, {"id-interaction": "h1"}, {"id-interaction": "b1"}]
    root, lines = _logs(tmp_path, [1.0, None, 0.0], [1.0, 0.5, 0.0], meta)
    pins = tmp_path / "all-pins.txt"
    pins.write_text(ts_pins.read_text() + "\n".join(lines) + "\n")
    out = tmp_path / "rows.jsonl"
    summary = import_toolsafe(root, out, pins, tsbench=ts_root)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert summary["benches"] == {"agentharm": {"rows": 3, "null_predictions": 1}}
    assert [(r["label"], r["pred"], r["interaction_id"]) for r in rows] == [
        (1, 1, "agentharm/h1"), (1, None, "agentharm/h1"), (0, 0, "agentharm/b1")]


def test_import_toolsafe_checks_agentharm_order_and_lengths(bench, tmp_path):
    ts_root, ts_pins = bench
    meta = [{"id-interaction": "x"}] * 3
    root, lines = _logs(tmp_path, [1, 1, 0], [0.0, 1.0, 0.5], meta)  # benign first: wrong order
    pins = tmp_path / "all-pins.txt"
    pins.write_text(ts_pins.read_text() + "\n".join(lines) + "\n")
    with pytest.raises(InputError, match="harmful_steps then benign_steps"):
        import_toolsafe(root, tmp_path / "rows.jsonl", pins, tsbench=ts_root)
    root2, lines2 = _logs(tmp_path / "b", [1, 0], [1, 0, 0], meta)
    pins.write_text("\n".join(lines2) + "\n")
    with pytest.raises(InputError, match="lengths differ"):
        import_toolsafe(root2, tmp_path / "rows.jsonl", pins)


@pytest.mark.slow
def test_rows_feed_audit_units(bench, tmp_path):
    import json
    import os
    import subprocess
    import sys

    ts_root, ts_pins = bench
    meta = [{"id-interaction": "h1"}, {"id-interaction": "h1"}, {"id-interaction": "b1"}]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for preds, rc in (([1.0, 0.0, 0.0], 0), ([1.0, None, 0.0], 2)):
        root, lines = _logs(tmp_path / str(rc), preds, [1.0, 0.5, 0.0], meta)
        pins = tmp_path / f"pins{rc}.txt"
        pins.write_text("\n".join(lines) + "\n")
        out = tmp_path / f"rows{rc}.jsonl"
        import_toolsafe(root, out, pins)
        p = subprocess.run([sys.executable, "-m", "guardeval", "audit", "units", str(out), "--json"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == rc, p.stderr
        if rc == 2:  # the null prediction is reported by line, never silently dropped
            assert "line 2" in p.stderr and "pred_score" in p.stderr
        else:        # 0.5 counts as unsafe: h1 has one hit and one miss, b1 one correct allow
            res = json.loads(p.stdout)
            assert (res["n_rows"], res["n_interactions"]) == (3, 2)
            assert res["row_confusion"] == {"tp": 1.0, "fp": 0.0, "tn": 1.0, "fn": 1.0}
            assert res["interaction_confusion"] == {"tp": 0.5, "fp": 0.0, "tn": 1.0, "fn": 0.5}


def test_shipped_pins_are_the_toolsafe_pins():
    """The default pins ship with the package; where ../shared has the pin list, they agree."""
    from guardeval.cohorts.builders.pins import parse_pin_lines
    from guardeval.cohorts.builders.tsbench import DEFAULT_PINS

    from conftest import shared_or_skip

    shipped = parse_pin_lines(DEFAULT_PINS)
    assert len(shipped) == 21 and all(p.startswith(("TS-Bench/", "guardian_test_logs/")) for p in shipped)
    assert shipped == parse_pin_lines(shared_or_skip("reference/toolsafe-lfs-pins.txt"))


def test_default_pins_refuse_files_that_are_not_toolsafes(bench, tmp_path):
    root, _ = bench   # synthetic files at pinned paths: the shipped pins refuse them by size
    with pytest.raises(InputError, match="size"):
        build_tsbench(root, tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_conditions_build_argument_and_schema_conditions(bench, tmp_path):
    """Issue 48: tsbench builds the argument and schema conditions on request (the baseline alone
    by default); a call given as JSON has its keys renamed, `cohort inspect` passes."""
    import os
    import subprocess
    import sys

    root, pins = bench
    out, _ = build_tsbench(root, tmp_path / "c", pins,
                           condition_names="format_placebo,arg_alias,arg_threat,arg_matched,schema_placebo")
    c = load_cohort(out)
    assert c.condition_names == ["original", "format_placebo", "arg_alias", "arg_threat", "arg_matched",
                                 "schema_placebo"]
    assert c.families() == {"arg_alias": "arguments", "arg_threat": "arguments", "arg_matched": "arguments",
                            "schema_placebo": "schemas"}
    base = c.base_ids[0]
    assert c.instance(base, "arg_threat")["current_action"]["arguments"] == {"malicious_n": 0}
    assert c.instance(base, "arg_alias")["current_action"]["arguments"] == {"count": 0}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "harness")}
    p = subprocess.run([sys.executable, "-m", "guardeval", "cohort", "inspect", str(out)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "invariance: ok" in p.stdout, p.stdout + p.stderr
