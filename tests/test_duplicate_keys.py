"""A JSON object that repeats a key is refused wherever outside JSON comes in (issue 19 §2):
orjson keeps the last of two equal keys, another reader may keep the first, so such a row could
show a reviewer one stimulus and the guard another."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardeval.canon import sha256_hex
from guardeval.cohorts.limits import has_duplicate_keys
from guardeval.errors import InputError
from guardeval.estimators.table import load_table

from conftest import run_cli, write_guard

pytestmark = pytest.mark.fast


def _repin(cohort: Path) -> None:
    data = (cohort / "instances.jsonl").read_bytes()
    meta = json.loads((cohort / "cohort.json").read_text())
    meta["instances_sha256"], meta["instances_bytes"] = sha256_hex(data), len(data)
    (cohort / "cohort.json").write_text(json.dumps(meta, indent=2) + "\n")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20)


@given(_json, st.booleans())
@pytest.mark.slow
def test_no_repeat_is_never_reported(value, indent):
    raw = json.dumps(value, indent=2 if indent else None).encode()
    assert not has_duplicate_keys(raw, orjson.loads(raw))


@given(st.dictionaries(st.text(max_size=6), _json, min_size=1, max_size=4), st.data())
def test_a_repeated_key_is_always_reported(obj, data):
    key = data.draw(st.sampled_from(sorted(obj)))
    body = json.dumps(obj)
    # The same key again, with another value, at the end of the object: last wins in orjson.
    raw = (body[:-1] + ", " + json.dumps(key) + ": " + json.dumps("other") + "}").encode()
    assert has_duplicate_keys(raw, orjson.loads(raw))


def test_keys_inside_strings_and_escapes_are_not_keys():
    raw = b'{"a": "x\\": 1, \\"a\\": 2", "b": [{"k": 1}, {"k": 2}], "c": "{\\"d\\":1,\\"d\\":2}"}'
    assert not has_duplicate_keys(raw, orjson.loads(raw))
    nested = b'{"a": [{"x": 1, "x" : 1}]}'
    assert has_duplicate_keys(nested, orjson.loads(nested))


@pytest.mark.slow
def test_launch_and_inspect_refuse_a_cohort_row_that_repeats_a_key(tmp_path, small_cohort):
    c = tmp_path / "c"
    shutil.copytree(small_cohort, c)
    lines = (c / "instances.jsonl").read_bytes().splitlines(keepends=True)
    row = json.loads(lines[4])
    # The second "user_request" wins in orjson; the row's hash is of that reading, so only the
    # repeat itself is wrong.
    text = json.dumps(row)
    lines[4] = (text[:-1] + ', "user_request": ' + json.dumps(row["user_request"]) + "}\n").encode()
    (c / "instances.jsonl").write_bytes(b"".join(lines))
    _repin(c)
    guard = write_guard(tmp_path / "g.toml", "http://127.0.0.1:9")
    run = tmp_path / "run"
    for args in (("launch", "--cohort", str(c), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                  "--no-preflight"),
                 ("launch", "--cohort", str(c), "--guard", str(guard), "--reps", "1", "--dry-run", "--no-preflight"),
                 ("cohort", "inspect", str(c))):
        r = run_cli(*args)
        assert r.code == 2, (args, r.code, r.err)
        assert "Traceback" not in r.err
        assert "instances.jsonl" in r.err and "line 5" in r.err and "repeats a key" in r.err, r.err
    assert not run.exists()


def test_cohort_json_that_repeats_a_key_is_refused(tmp_path, small_cohort):
    c = tmp_path / "c"
    shutil.copytree(small_cohort, c)
    meta = (c / "cohort.json").read_text()
    (c / "cohort.json").write_text(meta.rstrip().rstrip("}") + ', "name": "other"}\n')
    r = run_cli("cohort", "inspect", str(c))
    assert r.code == 2 and "cohort.json" in r.err and "repeats a key" in r.err, (r.code, r.err)


@pytest.mark.slow
def test_a_decision_table_row_that_repeats_a_key_is_refused(tmp_path):
    good = {"base_id": "b1", "interaction_id": "g1", "domain": "D", "condition": "original", "repetition": 0,
            "decision": 1, "status": "ok"}
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(good) + "\n" + json.dumps(good)[:-1] + ', "decision": 0}\n')
    with pytest.raises(InputError) as exc:
        load_table(p)
    assert exc.value.line == 2 and "repeats a key" in str(exc.value)
    r = run_cli("estimate", "--table", str(p))
    assert r.code == 2 and "t.jsonl" in r.err and "line 2" in r.err, (r.code, r.err)


def test_json_array_sources_that_repeat_a_key_are_refused(tmp_path: Path):
    from guardeval.cohorts.builders.pins import read_json_array
    p = tmp_path / "records.json"
    p.write_text('[{"id": 1, "id": 2}]')
    with pytest.raises(InputError, match="repeats a key"):
        read_json_array(p)


def test_pinned_sources_refuse_only_a_repeat_that_reads_two_ways(tmp_path: Path):
    # A third-party file is what its pin fixes: ASB's attack tools repeat "Attack Type" with the
    # same value on one line. Only a repeat with another value (two readings) is refused.
    from guardeval.cohorts.builders.pins import read_json_array
    from guardeval.cohorts.limits import has_conflicting_keys

    same = b'{"a": 1, "t": "x", "t": "x"}'
    other = b'{"a": 1, "t": "x", "t": "y"}'
    assert has_duplicate_keys(same, orjson.loads(same)) and not has_conflicting_keys(same, orjson.loads(same))
    assert has_conflicting_keys(other, orjson.loads(other))
    p = tmp_path / "records.json"
    p.write_text('[{"id": 1, "id": 1}]')
    assert read_json_array(p) == [{"id": 1}]
