"""Start times of each call's final attempt, read from raw.jsonl for the order diagnostics:
the fast tail read agrees with a full parse, and a hostile usage object cannot fool it."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardeval.canon import dumps_line
from guardeval.run import runtable
from guardeval.run.folder.folder import RunFolder
from guardeval.run.runtable import _tail_fields, final_attempt_starts

pytestmark = pytest.mark.fast


def raw_line(seq: int, started: str, usage: object, *, request: object = None, response: str | None = "{}") -> bytes:
    return dumps_line({"call_id": "c" * 32, "attempt": 1, "seq": seq, "started": started, "finished": started,
                       "request": request or {"messages": [{"role": "user", "content": 'a "quoted" ,"seq":9'}]},
                       "request_sha256": "0" * 64, "response": response, "status": 200, "usage": usage,
                       "outcome": "reply", "final": True, "prev_sha256": "0" * 64})


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": 10, "cost": 0.001},
    {},
    # look-alikes of the tail inside usage: the top-level fields must win
    {"cost": {"a": 1, "seq": 5, "started": "1999-01-01T00:00:00Z", "status": 1, "usage": {}}},
    {"cost": {"seq": 5, "started": "1999-01-01T00:00:00Z", "status": 1, "usage": {"x": "}"}}},
    {"cost": [",\"seq\":5,\"started\":\"1999\",\"status\":1,\"usage\":{}"]},
])
def test_tail_read_agrees_with_a_full_parse(usage):
    line = raw_line(7, "2026-12-01T04:29:08.054Z", usage)
    body = line[:-1]
    got = _tail_fields(body, 0, len(body))
    assert got is None or got == (7, "2026-12-01T04:29:08.054Z")
    assert runtable._parsed_fields(body) == (7, "2026-12-01T04:29:08.054Z")


def test_plain_usage_takes_the_fast_path():
    body = raw_line(3, "2026-12-01T04:29:08.054Z", {"cost": 0.5})[:-1]
    assert _tail_fields(body, 0, len(body)) == (3, "2026-12-01T04:29:08.054Z")


def test_starts_of_wanted_lines_only(tmp_path: Path):
    path = tmp_path / "raw.jsonl"
    lines = [raw_line(1, "2026-01-01T00:00:01.000Z", {}),
             raw_line(2, "2026-01-01T00:00:02.000Z", {"cost": {"seq": 1, "started": "x", "status": 1, "usage": {}}}),
             # a line in another shape (keys not sorted): read by a full parse
             b'{"started":"2026-01-01T00:00:03.000Z","seq":3,"usage":{},"status":200}\n',
             raw_line(4, "2026-01-01T00:00:04.000Z", {}, request={"messages": ["x" * 5000]})]
    path.write_bytes(b"".join(lines) + b'{"seq":5,"started":"torn')   # a torn last line is left out
    want = {1, 2, 3, 4, 5}
    expected = {1: "2026-01-01T00:00:01.000Z", 2: "2026-01-01T00:00:02.000Z", 3: "2026-01-01T00:00:03.000Z",
                4: "2026-01-01T00:00:04.000Z"}
    folder = RunFolder(tmp_path)
    assert final_attempt_starts(folder, want) == expected
    assert final_attempt_starts(folder, {2, 4}) == {2: expected[2], 4: expected[4]}
    # windows smaller than a line: each window grows until a whole line fits
    assert final_attempt_starts(folder, want, window=4096) == expected
    path.unlink()
    assert final_attempt_starts(RunFolder(tmp_path), want) == {}
