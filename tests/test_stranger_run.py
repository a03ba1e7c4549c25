"""A run folder from a stranger runs no code and cannot make guardeval write outside it or hang
(issue 27, items 1-3): its manifest's `guard_callable.module` is looked up as plain files, never
imported; a launch builds its partial folder through one descriptor, so a link planted there
is never written through; a FIFO or a device renamed over a cohort or prompt copy is refused,
not waited on. Real processes, real files, real signals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import REPO, cli_env, run_cli

pytestmark = pytest.mark.slow

ZEN = "Beautiful is better than ugly"


@pytest.fixture(scope="module")
def python_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished python-guard run (the shipped keyword example, 320 calls in-process)."""
    run = tmp_path_factory.mktemp("python-run") / "run"
    r = run_cli("launch", "--cohort", "demo", "--guard", "python-example", "--reps", "1", "--run-dir", str(run),
                "--no-progress")
    assert r.code == 0, r.err
    return run


def _renamed_module(run: Path, module: str) -> None:
    """A stranger's manifest: `guard_callable.module` names other code, the manifest re-hashed."""
    from guardeval.run.folder.manifest import manifest_with_hash

    m = json.loads((run / "manifest.json").read_text())
    m["guard_callable"]["module"] = module
    (run / "manifest.json").write_text(json.dumps(manifest_with_hash(m), indent=2))


def _cli_in(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # `python -m` puts the current folder first on sys.path, as a user typing in that folder has it.
    return subprocess.run([sys.executable, "-m", "guardeval", *args], capture_output=True, text=True,
                          env=cli_env(env), cwd=cwd, timeout=300)


@pytest.mark.parametrize("module", ["this.x", "evilpkg.x", "evilpkg"])
def test_read_commands_never_import_what_a_strangers_manifest_names(tmp_path, python_run, module):
    run = tmp_path / "run"
    shutil.copytree(python_run, run)
    _renamed_module(run, module)
    marker = tmp_path / "ran"
    # A package in the folder the commands are typed in, which announces itself when imported.
    pkg = tmp_path / "evilpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('imported'); print('EVIL RAN')\n")
    commands = [("verify", str(run)), ("verify", str(run), "--json"), ("status", str(run)),
                ("estimate", str(run), "--allow-skipped", "--n-boot", "200"),
                ("report", str(run), "--allow-skipped"), ("export", str(run), "--allow-skipped", "--out", "-"),
                ("plan", str(run)), ("show", str(run), "0")]
    said = []
    for args in commands:
        r = _cli_in(tmp_path, *args)
        said.append((args, r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        assert ZEN not in r.stdout and "EVIL RAN" not in r.stdout + r.stderr, (args, r.stdout[:500])
        assert "Traceback" not in r.stderr, (args, r.stderr)
    assert not marker.exists(), said
    v = _cli_in(tmp_path, "verify", str(run))
    if module == "evilpkg":   # found as a file where an import would find it: hashed, never run
        assert v.returncode == 1 and "the source of evilpkg no longer matches the launch" in v.stdout, v.stdout
        return
    assert v.returncode == 1 and "skipped: callable source: callable source not checked here" in v.stdout, v.stdout
    assert _cli_in(tmp_path, "verify", str(run), "--allow-skipped").returncode == 0


def test_a_planted_submodule_is_hashed_not_run(tmp_path, python_run):
    """Found as files where an import would find them: compared (a mismatch), never executed."""
    run = tmp_path / "run"
    shutil.copytree(python_run, run)
    _renamed_module(run, "evilpkg.x")
    marker = tmp_path / "ran"
    (tmp_path / "evilpkg").mkdir()
    for name in ("__init__.py", "x.py"):
        (tmp_path / "evilpkg" / name).write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    r = _cli_in(tmp_path, "verify", str(run))
    assert r.returncode == 1 and "guard_callable: the source of evilpkg.x no longer matches the launch" in r.stdout
    assert not marker.exists()


def test_verify_of_a_guard_merely_off_pythonpath_says_what_to_set(tmp_path):
    """Issue 30's trip-up: a guard of one's own, verified in a shell without its PYTHONPATH."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "my_guard.py").write_text(textwrap.dedent('''
        def guard(inp):
            return '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'
    '''))
    cfg = tmp_path / "g.toml"
    cfg.write_text('name = "mine"\nbackend = "python"\ncallable = "my_guard:guard"\nmodel = "rules"\n'
                   'prompt = "guardeval-json-v1"\n')
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "5", "--no-progress", env={"PYTHONPATH": f"{REPO / 'harness'}:{lib}"})
    assert r.code == 0, r.err
    assert run_cli("verify", str(run), env={"PYTHONPATH": f"{REPO / 'harness'}:{lib}"}).code == 0
    v = run_cli("verify", str(run))
    assert v.code == 1, v.out
    assert "callable source not checked here: module my_guard is not found on this machine's Python path" in v.out
    assert "set PYTHONPATH to the folder that holds my_guard.py" in v.out, v.out


def _stop_in_partial(proc: subprocess.Popen[str], parent: Path, timeout: float = 60) -> Path | None:
    """SIGSTOP the launch as soon as its partial folder appears (None: it never did)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        for entry in os.scandir(parent):
            if ".partial-" in entry.name:
                os.kill(proc.pid, 19)   # SIGSTOP: the folder is held as it is while links are planted
                return Path(entry.path)
    return None


def test_links_planted_in_a_partial_folder_are_never_written_through(tmp_path):
    """Issue 27 item 2: `raw.jsonl` and `manifest.json` planted as links to files elsewhere,
    `cohort/` swapped for a link to a folder elsewhere, while the launch builds its folder."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victims = {name: outside / name for name in ("raw.jsonl", "manifest.json", "instances.jsonl",
                                                  "schedule.jsonl", "stimuli.jsonl", "cohort.json")}
    for path in victims.values():
        path.write_text("precious\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    run = runs / "run"
    # 9,600 scheduled calls: the schedule takes long enough to write that the folder is caught.
    proc = subprocess.Popen([sys.executable, "-m", "guardeval", "launch", "--cohort", "demo", "--guard",
                             "python-example", "--reps", "30", "--run-dir", str(run), "--max-calls", "1",
                             "--no-progress"], env=cli_env(), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        partial = _stop_in_partial(proc, runs)
        assert partial is not None, proc.communicate()
        for name in ("raw.jsonl", "manifest.json", "schedule.jsonl", "stimuli.jsonl"):
            if not (partial / name).exists():
                (partial / name).symlink_to(victims[name])
        cohort = partial / "cohort"
        if cohort.exists():
            cohort.rename(tmp_path / "moved-cohort")
        cohort.symlink_to(outside, target_is_directory=True)
    finally:
        os.kill(proc.pid, 18)   # SIGCONT
    out, err = proc.communicate(timeout=120)
    assert {name: p.read_text() for name, p in victims.items()} == {name: "precious\n" for name in victims}
    assert sorted(p.name for p in outside.iterdir()) == sorted(victims)
    assert proc.returncode == 2 and "Traceback" not in err, (proc.returncode, err)
    assert "symbolic link" in err or "already exists" in err, err
    assert list(runs.iterdir()) == [], "nothing of the refused launch is left"


class _Swapper:
    """Renames, over and over, a FIFO and then a link to /dev/zero over each target, each time
    followed by the real file again (rename(2): the name always exists), from a thread, while
    a command reads the run: whichever the command opens is what it gets."""

    def __init__(self, targets: list[Path], spare: Path) -> None:
        self.targets, self.spare = targets, spare
        self.keep = []
        for i, t in enumerate(targets):
            keep = spare / f"keep-{i}"
            os.link(t, keep)          # the real bytes, kept under another name
            self.keep.append(keep)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            for t, keep in zip(self.targets, self.keep):
                n += 1
                odd = self.spare / f"odd-{n}"
                if n % 2:
                    os.mkfifo(odd)
                else:
                    odd.symlink_to("/dev/zero")
                os.rename(odd, t)
                time.sleep(0.0005)
                real = self.spare / f"real-{n}"
                os.link(keep, real)
                os.rename(real, t)
                time.sleep(0.0005)

    def __enter__(self) -> _Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_no_command_hangs_on_a_fifo_or_dev_zero_swapped_over_a_cohort_or_prompt_copy(tmp_path, python_run):
    """Issue 27 item 3: the copies are read through the run folder's descriptor, opened
    non-blocking and checked once open, so a swap at any moment is refused (or missed), never
    waited on. Each command gets 60 s: one that waits on a FIFO would wait for ever."""
    run = tmp_path / "run"
    shutil.copytree(python_run, run)
    spare = tmp_path / "spare"
    spare.mkdir()
    prompt_files = sorted(p for p in (run / "prompt").iterdir() if p.name != "manifest.json")
    targets = [run / "cohort" / "instances.jsonl", run / "cohort" / "cohort.json", *prompt_files[:1]]
    call_id = json.loads((run / "schedule.jsonl").read_text().splitlines()[0])["call_id"]
    commands = [("verify", str(run)), ("estimate", str(run), "--n-boot", "200", "--allow-skipped"),
                ("export", str(run), "--out", "-", "--no-verify"), ("show", str(run), call_id),
                ("resume", str(run), "--no-progress"), ("verify", str(run)),
                ("estimate", str(run), "--n-boot", "200", "--no-verify"), ("resume", str(run), "--no-progress")]
    with _Swapper(targets, spare):
        for args in commands:
            try:
                r = run_cli(*args, timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail(f"`guardeval {' '.join(args)}` hung on a file swapped into the run's copies")
            assert "Traceback" not in r.err, (args, r.err)
            assert r.code in (0, 1, 2), (args, r.code, r.err)


def _swap_once_open(proc: subprocess.Popen[str], watched: Path, swap: Callable[[], None]) -> bool:
    """Run `swap` the moment the process has `watched` open (/proc/PID/fd), that is after it has
    checked every file of the folder and before it opens the next one."""
    fd_dir = Path(f"/proc/{proc.pid}/fd")
    while proc.poll() is None:
        try:
            fds = list(fd_dir.iterdir())
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(fd) == str(watched):
                    swap()
                    return True
            except OSError:
                continue
    return False


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("command", ["verify", "estimate", "export", "show", "resume"])
def test_a_fifo_renamed_over_the_cohort_copy_after_its_check_is_refused(tmp_path, python_run, command, kind):
    """Issue 27 item 3, the moment that hung: after the command has checked the files of
    `cohort/` and while it reads `cohort.json`, a FIFO (or a link to /dev/zero) is renamed over
    `instances.jsonl`. (cohort.json is padded with trailing blanks, still the same JSON, so that
    its read is long enough to be seen.)"""
    run = tmp_path / "run"
    shutil.copytree(python_run, run)
    meta = (run / "cohort" / "cohort.json").resolve()
    meta.write_bytes(meta.read_bytes() + b" " * (12 << 20))
    odd = tmp_path / "odd"
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.symlink_to("/dev/zero")
    call_id = json.loads((run / "schedule.jsonl").read_text().splitlines()[0])["call_id"]
    args = {"verify": ["verify", str(run)], "estimate": ["estimate", str(run), "--no-verify"],
            "export": ["export", str(run), "--out", "-", "--no-verify"], "show": ["show", str(run), call_id],
            "resume": ["resume", str(run), "--no-progress"]}[command]
    proc = subprocess.Popen([sys.executable, "-m", "guardeval", *args], env=cli_env(), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        swapped = _swap_once_open(proc, meta, lambda: os.rename(odd, run / "cohort" / "instances.jsonl"))
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"`guardeval {command}` hung on a {kind} renamed over cohort/instances.jsonl")
    assert swapped, "the command never opened cohort.json"
    assert "Traceback" not in err, err
    said = out[-3000:] + err
    assert proc.returncode in (1, 2) and "instances.jsonl" in said, said
    assert "not a regular file" in said or "symbolic link" in said, said
