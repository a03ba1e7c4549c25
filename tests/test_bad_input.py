"""Bad cohorts and guard configs: exit 2, file/line/field named, no traceback, no run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from guardeval.canon import sha256_hex

from conftest import REPO, run_cli, write_guard

pytestmark = pytest.mark.slow


def _copy_cohort(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _repin(cohort: Path) -> None:
    """Re-pin instances.jsonl in cohort.json so only the intended defect remains."""
    data = (cohort / "instances.jsonl").read_bytes()
    meta = json.loads((cohort / "cohort.json").read_text())
    meta["instances_sha256"], meta["instances_bytes"] = sha256_hex(data), len(data)
    (cohort / "cohort.json").write_text(json.dumps(meta, indent=2) + "\n")


def _launch(tmp_path: Path, cohort: Path, guard: Path) -> tuple:
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run))
    return r, run


def _assert_refused(r, run: Path, *needles: str) -> None:
    assert r.code == 2, (r.code, r.err)
    assert "Traceback" not in r.err
    for n in needles:
        assert n in r.err, (n, r.err)
    assert not run.exists()


@pytest.fixture
def guard(tmp_path) -> Path:
    return write_guard(tmp_path / "g.toml", "http://127.0.0.1:9")


def test_bad_json_line(tmp_path, small_cohort, guard):
    c = _copy_cohort(small_cohort, tmp_path / "c")
    lines = (c / "instances.jsonl").read_bytes().splitlines(keepends=True)
    lines[6] = lines[6][:30] + b"\n"
    (c / "instances.jsonl").write_bytes(b"".join(lines))
    _repin(c)
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "instances.jsonl", "line 7", "not valid JSON")


def test_missing_field(tmp_path, small_cohort, guard):
    c = _copy_cohort(small_cohort, tmp_path / "c")
    lines = (c / "instances.jsonl").read_text().splitlines(keepends=True)
    row = json.loads(lines[11])
    del row["domain"]
    lines[11] = json.dumps(row) + "\n"
    (c / "instances.jsonl").write_text("".join(lines))
    _repin(c)
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "instances.jsonl", "line 12", "field 'domain'", "missing required field")


def test_wrong_instance_hash(tmp_path, small_cohort, guard):
    c = _copy_cohort(small_cohort, tmp_path / "c")
    lines = (c / "instances.jsonl").read_text().splitlines(keepends=True)
    row = json.loads(lines[3])
    row["user_request"] += " (edited)"
    lines[3] = json.dumps(row) + "\n"
    (c / "instances.jsonl").write_text("".join(lines))
    _repin(c)
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "instances.jsonl", "line 4", "field 'instance_sha256'")


def test_wrong_file_pin(tmp_path, small_cohort, guard):
    c = _copy_cohort(small_cohort, tmp_path / "c")
    with open(c / "instances.jsonl", "ab") as fh:
        fh.write(b"\n")
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "instances.jsonl", "instances_bytes")


@pytest.mark.parametrize("text, needles", [
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\n', ["field 'prompt'", "missing required field"]),
    ('name = "x"\nbackend = "carrier-pigeon"\nmodel = "m"\nprompt = "guardeval-json-v1"\n',
     ["line 2", "field 'backend'"]),
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\nmax_tokens = "many"\n',
     ["line 5", "field 'max_tokens'"]),
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\ncolour = "red"\n',
     ["line 5", "field 'colour'", "unknown field"]),
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "no-such-prompt"\n', ["field 'prompt'", "not found"]),
    ('name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\napi_key_env = "sk-or-v1-abc"\n',
     ["line 5", "field 'api_key_env'"]),
    ('name = "x"\nbackend = "openrouter\n', ["g.toml", "line 2", "not valid TOML"]),
])
def test_bad_guard_config(tmp_path, small_cohort, text, needles):
    g = tmp_path / "g.toml"
    g.write_text(text)
    r, run = _launch(tmp_path, small_cohort, g)
    _assert_refused(r, run, "g.toml", *needles)
    assert "sk-or-v1-abc" not in r.err


def test_missing_cohort_folder(tmp_path, guard):
    r, run = _launch(tmp_path, tmp_path / "nope", guard)
    _assert_refused(r, run, "cohort.json", "not found")


def test_run_dir_not_empty(tmp_path, small_cohort, guard):
    run = tmp_path / "run"
    run.mkdir()
    (run / "keep.txt").write_text("mine")
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--run-dir", str(run))
    assert r.code == 2 and "not empty" in r.err
    assert sorted(p.name for p in run.iterdir()) == ["keep.txt"]


def test_usage_errors_exit_2(tmp_path):
    assert run_cli("launch").code == 2
    assert run_cli("launch", "--cohort", "x", "--guard", "y", "--reps", "0").code == 2
    assert run_cli("resume", str(tmp_path)).code == 2


# -- issue 10: hostile configs (items 8, 9, 10 and the config side of 4) ----------------------------

_HEAD = 'backend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\napi_key_env = "GUARDEVAL_TEST_KEY"\n'


def _config(tmp_path: Path, body: str) -> Path:
    g = tmp_path / "g.toml"
    g.write_text(body)
    return g


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("name", ["/../../../../tmp/x", "../escape", "a/b", ".", "..", "", "x" * 65, "tab\there",
                                  "esc\x1b[2J"])
def test_guard_name_must_be_a_safe_slug(tmp_path, small_cohort, name):
    g = _config(tmp_path, f'name = {json.dumps(name)}\n' + _HEAD)
    work = tmp_path / "work"
    work.mkdir()
    before = _tree(tmp_path)
    # No --run-dir: the run id (and so the folder under runs/) would be built from the name.
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(g), "--reps", "1", cwd=work)
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert "line 1" in r.err and "field 'name'" in r.err, r.err
    assert "\x1b" not in r.err
    assert _tree(tmp_path) == before   # nothing written, inside or outside runs/


def test_new_run_id_never_takes_a_path():
    from guardeval.errors import InputError
    from guardeval.run.folder.layout import new_run_id

    for bad in ("../x", "/abs", "a/b", "", "x" * 65):
        with pytest.raises(InputError):
            new_run_id(bad)
    assert "-ok.name_1-" in new_run_id("ok.name_1")


@pytest.mark.parametrize("url, needle", [
    ("file:///etc/passwd", "http:// or https://"),
    ("not a url", "whitespace"),
    ("http://", "no host"),
    ("https://:8080/v1", "no host"),
    ("ftp://example.com/v1", "http:// or https://"),
    ("http://example.com:99999/v1", "not a valid URL"),
    ("http://user:s3cr3t-pw@example.com/v1", "credentials"),
    ("https://s3cr3t-pw@example.com/v1", "credentials"),
    ("http://example.com/v1?key=s3cr3t-pw", "query"),
    ("http://exa\u00e4mple.com/v1", "punycode"),
])
def test_base_url_is_checked_at_load(tmp_path, small_cohort, url, needle):
    g = _config(tmp_path, 'name = "x"\n' + _HEAD + f"base_url = {json.dumps(url)}\n")
    r, run = _launch(tmp_path, small_cohort, g)
    _assert_refused(r, run, "g.toml", "line 6", "field 'base_url'", needle)
    assert "s3cr3t-pw" not in r.err


def test_base_url_flag_is_checked_and_never_echoed(tmp_path, small_cohort, guard):
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--run-dir", str(tmp_path / "run"),
                "--base-url", "http://me:s3cr3t-pw@127.0.0.1:9/v1")
    assert r.code == 2 and "credentials" in r.err and "api_key_env" in r.err and "Traceback" not in r.err, r.err
    assert "s3cr3t-pw" not in r.err and not (tmp_path / "run").exists()


def test_plain_http_to_another_host_is_warned_about(tmp_path, small_cohort):
    for url, warned in (("http://10.1.2.3:8000/v1", True), ("http://127.0.0.1:8000/v1", False),
                        ("http://localhost:8000/v1", False), ("https://10.1.2.3/v1", False)):
        g = _config(tmp_path, 'name = "x"\n' + _HEAD + f"base_url = {json.dumps(url)}\n")
        # --no-preflight: no OpenRouter answers at these addresses (the preflight would refuse).
        r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(g), "--dry-run", "--no-preflight")
        assert r.code == 0, r.err
        assert ("plain http" in r.err) == warned, (url, r.err)


@pytest.mark.parametrize("line", [
    "temperature = nan", "temperature = inf", "temperature = 2.5", "timeout_s = inf", "timeout_s = 0",
    "timeout_s = -1.0", "max_tokens = 100000000000000000000", "max_tokens = 0", "max_attempts = 1000",
    "concurrency = 100000", "price_in_per_mtok = 1e400", "price_out_per_mtok = -0.5", "retry_max_s = -inf",
    "retry_initial_s = nan", "seed = 100000000000000000000000", "context_tokens = 0",
])
def test_toml_numbers_must_be_finite_and_in_range(tmp_path, small_cohort, line):
    g = _config(tmp_path, 'name = "x"\n' + _HEAD + line + "\n")
    r, run = _launch(tmp_path, small_cohort, g)
    _assert_refused(r, run, "g.toml", "line 6", f"field '{line.split()[0]}'", "from")


@pytest.mark.parametrize("value", ["ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5", "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz12345678",
                                   "sk-or-" + "v1-0123456789abcdef", "xoxb-" + "1234-5678-abcdefgh", "AKIA" + "IOSFODNN7EXAMPLE",
                                   "Zx9Kq2Lm8Np4Rs6Tv1Wy3Ab5Cd7", "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnop"])
def test_api_key_env_that_looks_like_a_token_is_refused_unechoed(tmp_path, small_cohort, value):
    g = _config(tmp_path, 'name = "x"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\n'
                f"api_key_env = {json.dumps(value)}\n")
    r, run = _launch(tmp_path, small_cohort, g)
    _assert_refused(r, run, "g.toml", "line 5", "field 'api_key_env'", "NAME of an environment variable")
    assert value not in r.err and value[4:12] not in r.err


def test_ordinary_variable_names_are_accepted():
    from guardeval.backends.config import looks_like_token

    for name in ("OPENROUTER_API_KEY", "HF_TOKEN", "hf_token", "MY_KEY_2", "GUARDEVAL_TEST_KEY", "sk_key"):
        assert not looks_like_token(name), name


def test_config_file_that_is_not_text_or_too_deep(tmp_path, small_cohort):
    g = tmp_path / "g.toml"
    g.write_bytes(b'name = "x"\n' + _HEAD.encode() + b'model2 = "\xff\xfe"\n')
    r, run = _launch(tmp_path, small_cohort, g)
    _assert_refused(r, run, "g.toml", "line 6", "UTF-8")
    g.write_text('name = "x"\n' + _HEAD + "x = " + "[" * 3000 + "]" * 3000 + "\n")
    r, run = _launch(tmp_path, small_cohort, g)
    _assert_refused(r, run, "g.toml", "nested too deeply")
    g.write_text('name = "x"\n' + _HEAD + "# " + "x" * (1 << 20) + "\n")
    r, run = _launch(tmp_path, small_cohort, g)
    _assert_refused(r, run, "g.toml", "larger than")


def test_provider_lists_hold_names(tmp_path, small_cohort):
    g = _config(tmp_path, 'name = "x"\n' + _HEAD + "[provider]\nonly = [1, 2]\n")
    r, run = _launch(tmp_path, small_cohort, g)
    _assert_refused(r, run, "g.toml", "line 7", "field 'provider.only'")


# -- issue 10, item 11: cohort rows are bounded in size and depth ----------------------------------

def _with_row(tmp_path: Path, small_cohort: Path, name: str, lineno: int, edit) -> Path:
    c = _copy_cohort(small_cohort, tmp_path / name)
    lines = (c / "instances.jsonl").read_text().splitlines(keepends=True)
    row = json.loads(lines[lineno - 1])
    edit(row)
    from guardeval.cohorts.model import instance_hash

    row["instance_sha256"] = instance_hash(row) if _depth(row) < 250 else "0" * 64
    lines[lineno - 1] = json.dumps(row) + "\n"
    (c / "instances.jsonl").write_text("".join(lines))
    _repin(c)
    return c


def _depth(v: object) -> int:
    if isinstance(v, dict):
        return 1 + max(map(_depth, v.values()), default=0)
    if isinstance(v, list):
        return 1 + max(map(_depth, v), default=0)
    return 0


def _nest(depth: int) -> dict:
    node: dict = {"leaf": "[not a bracket {"}
    for _ in range(depth):
        node = {"n": [node]} if _ % 2 else {"n": node}
    return node


def test_deeply_nested_row_is_refused_with_its_line(tmp_path, small_cohort, guard):
    c = _with_row(tmp_path, small_cohort, "deep", 9, lambda r: r.__setitem__("current_action", _nest(300)))
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "instances.jsonl", "line 9", "nested more than 64", "--max-row-depth")
    r = run_cli("cohort", "inspect", str(c))
    assert r.code == 2 and "line 9" in r.err and "Traceback" not in r.err


def test_row_depth_limit_can_be_raised_up_to_what_can_be_hashed(tmp_path, small_cohort, guard):
    c = _with_row(tmp_path, small_cohort, "deepish", 3, lambda r: r.__setitem__("current_action", _nest(60)))
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "line 3", "nested more than 64")
    r = run_cli("launch", "--cohort", str(c), "--guard", str(guard), "--dry-run", "--max-row-depth", "120", "--no-preflight")
    assert r.code == 0, r.err
    r = run_cli("launch", "--cohort", str(c), "--guard", str(guard), "--dry-run", "--max-row-depth", "300")
    assert r.code == 2 and "must be <= 200" in r.err


def _big_row_cohort(src: Path, dst: Path, lineno: int, size: int) -> Path:
    """A copy of `src` whose row `lineno` carries a `size`-byte user_request, streamed to disk
    (this process never holds it either). Its instance hash is left stale: the size check
    comes first."""
    import hashlib

    c = _copy_cohort(src, dst)
    lines = (c / "instances.jsonl").read_bytes().splitlines(keepends=True)
    row = json.loads(lines[lineno - 1])
    row["user_request"] = "@BIG@"
    head, tail = json.dumps(row).encode().split(b"@BIG@")
    h, n = hashlib.sha256(), 0
    chunk = b"x" * (1 << 20)
    with open(c / "instances.jsonl", "wb") as fh:
        def put(data: bytes) -> None:
            nonlocal n
            fh.write(data)
            h.update(data)
            n += len(data)
        for line in lines[:lineno - 1]:
            put(line)
        put(head)
        for _ in range(size >> 20):
            put(chunk)
        put(tail + b"\n")
        for line in lines[lineno:]:
            put(line)
    meta = json.loads((c / "cohort.json").read_text())
    meta["instances_sha256"], meta["instances_bytes"] = h.hexdigest(), n
    (c / "cohort.json").write_text(json.dumps(meta, indent=2) + "\n")
    return c


# The CLI, then this process's peak resident memory (VmHWM: counted from exec, unlike
# ru_maxrss, which a child inherits from the parent it was forked from).
_PEAK_RSS = """
import atexit, sys
def _peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            sys.stderr.write("\\nVmHWM-KiB " + line.split()[1] + "\\n")
atexit.register(_peak)
from guardeval.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_oversized_row_is_refused_without_reading_it(tmp_path, small_cohort, guard):
    """A 200 MB row: refused naming its line, and the process never holds the row."""
    import subprocess
    import sys

    from conftest import cli_env

    c = _big_row_cohort(small_cohort, tmp_path / "big", 5, 200 << 20)
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", _PEAK_RSS, "launch", "--cohort", str(c), "--guard", str(guard),
                           "--run-dir", str(run)], capture_output=True, text=True, env=cli_env(), cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert "line 5" in proc.stderr and "longer than 1048576 bytes" in proc.stderr and "--max-row-bytes" in proc.stderr
    assert not run.exists()
    peak_kib = int(proc.stderr.rsplit("VmHWM-KiB ", 1)[1].split()[0])
    assert peak_kib < 200 * 1024, peak_kib   # well under the row's 200 MB


def test_row_size_limit_can_be_raised(tmp_path, small_cohort, guard):
    c = _with_row(tmp_path, small_cohort, "large", 2, lambda r: r.__setitem__("user_request", "y" * 1_500_000))
    r, run = _launch(tmp_path, c, guard)
    _assert_refused(r, run, "line 2", "longer than")
    r = run_cli("launch", "--cohort", str(c), "--guard", str(guard), "--dry-run", "--max-row-bytes", "2000000", "--no-preflight")
    assert r.code == 0, r.err


def test_a_run_launched_with_a_raised_row_limit_is_read_without_the_flag(tmp_path, small_cohort, sim):
    """The launch records the limits it read the cohort under; every later reader of the run
    (verify, estimate, status, report, show, export, replicate, resume) reads its cohort copy
    under them, so the flag is given once."""
    c = _with_row(tmp_path, small_cohort, "large", 2, lambda r: r.__setitem__("user_request", "y" * 1_500_000))
    g = write_guard(tmp_path / "sim.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(c), "--guard", str(g), "--reps", "1", "--run-dir", str(run),
                "--max-row-bytes", "2000000", "--no-progress", "--max-calls", "8", "--no-preflight")
    assert r.code == 0, r.err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["row_limits"] == {"max_bytes": 2_000_000, "max_depth": 64}
    assert run_cli("resume", str(run), "--no-progress").code == 0
    for argv in (["verify", str(run)], ["estimate", str(run)], ["status", str(run)], ["report", str(run)],
                 ["export", str(run), "--format", "jsonl", "--out", str(tmp_path / "calls.jsonl")]):
        r = run_cli(*argv)
        assert r.code == 0 and "longer than" not in r.err, (argv, r.err)
    call_id = json.loads((run / "schedule.jsonl").read_text().splitlines()[0])["call_id"]
    assert run_cli("show", str(run), call_id).code == 0
    child = tmp_path / "child"
    r = run_cli("replicate", str(run), "--guard", str(g), "--run-dir", str(child), "--no-progress",
                "--no-preflight")
    assert r.code == 0, r.err
    assert json.loads((child / "manifest.json").read_text())["row_limits"]["max_bytes"] == 2_000_000
    # A run launched under the defaults records nothing.
    plain = tmp_path / "plain"
    assert run_cli("launch", "--cohort", str(small_cohort), "--guard", str(g), "--reps", "1", "--run-dir", str(plain),
                   "--dry-run", "--no-preflight").code == 0
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(g), "--reps", "1", "--run-dir", str(plain),
                "--no-progress", "--max-calls", "1", "--no-preflight")
    assert r.code == 0 and "row_limits" not in json.loads((plain / "manifest.json").read_text())


@pytest.mark.parametrize("value, field", [("x", "row_limits"), ({"max_bytes": 0, "max_depth": 64}, "row_limits.max_bytes"),
                                          ({"max_bytes": 10, "max_depth": 10_000}, "row_limits.max_depth"),
                                          ({"max_bytes": True, "max_depth": 64}, "row_limits.max_bytes")])
def test_a_manifest_row_limit_out_of_range_is_named(tmp_path, value, field):
    from guardeval.cohorts.limits import DEFAULT_ROW_LIMITS
    from guardeval.errors import InputError
    from guardeval.run.folder.folder import RunFolder
    from guardeval.run.folder.manifest import run_row_limits

    folder = RunFolder(tmp_path)
    with pytest.raises(InputError) as exc:
        run_row_limits(folder, {"row_limits": value})
    assert exc.value.field == field
    assert run_row_limits(folder, {}) == DEFAULT_ROW_LIMITS
    wide = run_row_limits(folder, {"row_limits": {"max_bytes": 5 << 20, "max_depth": 10}})
    assert (wide.max_bytes, wide.max_depth) == (5 << 20, DEFAULT_ROW_LIMITS.max_depth)


@pytest.mark.parametrize("argv", [["launch", "--cohort", "demo", "--guard", "sim", "--concurrency", "1000000000"],
                                  ["study", "launch", "--cohort", "demo", "--guard", "sim", "--guard", "python-example",
                                   "--concurrency", "1000000000"],
                                  ["study", "launch", "--cohort", "demo", "--guard", "sim", "--guard", "python-example",
                                   "--concurrency", "sim=1000000000"]])
def test_a_huge_concurrency_is_refused_naming_the_option_and_its_range(tmp_path, argv):
    # Issue 46 §12: refused as "launch_options.concurrency: not a valid value" (a manifest field, no bound).
    where = tmp_path / "out"
    r = run_cli(*argv, "--run-dir" if argv[0] == "launch" else "--study-dir", str(where), "--no-preflight")
    _assert_refused(r, where, "--concurrency", "1 to 1,000,000")
    assert "launch_options" not in r.err


def test_the_api_refuses_a_huge_concurrency_naming_the_option(tmp_path, small_cohort, sim, monkeypatch):
    from guardeval import api
    from guardeval.errors import InputError

    monkeypatch.setenv("GUARDEVAL_TEST_KEY", "sk-test-key-0123")
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    with pytest.raises(InputError, match=r"--concurrency .*1 to 1,000,000"):
        api.launch(small_cohort, api.load_guard(guard), run_dir=tmp_path / "run", concurrency=10**9, reps=1)
    assert not (tmp_path / "run").exists()
