"""Scale benchmark: plan, status, verify and resume on a 1,000,000-call run folder.

    python benchmarks/scale.py [--calls 1000000] [--reps 10] [--resume-calls 2000]
                               [--json FILE] [--keep] [--dir DIR]

Builds a synthetic cohort (calls / (5 x reps) bases x 5 conditions, ~2-4 KB rows), plans a
launch of it (`guardeval launch --dry-run`), writes the run folder with guardeval's own
writers (`materialise`, then half the calls answered as the simulated provider answers and
decided: see `scale_build.py`), then times, each in a child process (wall clock, and peak RSS
from `os.wait4`'s rusage): `guardeval status`, `guardeval verify`, `sha256sum` over exactly
the files verify reads (the hashing floor), the same bytes through Python's hashlib, and
`guardeval resume --max-calls N` against a real `guardeval sim-server` (with the time to its
first request: when raw.jsonl first grows). Prints a table; `--json FILE` keeps the numbers.

Targets (issue 6): verify within 3x the sha256sum floor and under 500 MiB peak; status under
5 s; judged (exit 1 when missed) at 1,000,000 calls or more only. At every size it exits 1 when
the resume did not decide the calls it should have. Disk: the 1M-call folder is ~4.5 GB (raw.jsonl ~3.5 GB: every attempt carries its
request body) plus a ~0.3 GB cohort; everything lives in one temporary folder, deleted at
the end unless --keep. Files are timed warm (just written, in the page cache).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "harness"))
# `tests.…` and `benchmarks.…` are the repository's folders: run as a script, only this file's folder is on the path.
sys.path.insert(0, str(REPO))

from benchmarks.scale_build import write_guard  # noqa: E402

from guardeval.backends.sim import SimServerProcess  # noqa: E402

N_CONDITIONS = 5   # the demo conditions the synthetic cohort is crossed with
GNU_TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None
# What `guardeval verify` reads, each once (the floor hashes exactly these bytes).
VERIFY_READS = ("manifest.json", "cohort/cohort.json", "cohort/instances.jsonl", "schedule.jsonl",
                "stimuli.jsonl", "raw.jsonl", "decisions.jsonl", "events.jsonl")
HASHLIB_FLOOR = ("import hashlib, sys\n"
                 "for p in sys.argv[1:]:\n"
                 "    h = hashlib.sha256()\n"
                 "    with open(p, 'rb') as f:\n"
                 "        while b := f.read(1 << 20):\n"
                 "            h.update(b)\n")


@dataclass
class Timing:
    step: str
    wall_s: float
    peak_mib: float              # ru_maxrss: the largest single process (the command or a worker)
    exit_code: int
    first_request_s: float | None = None
    note: str = ""
    tree_pss_mib: float = 0.0    # sampled peak of the summed PSS of the command and its workers


def _tree(pid: int) -> list[int]:
    """pid and its descendants (from /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return out


def _pss_kib(pid: int) -> int:
    """Proportional set size: shared pages split between the processes sharing them, so a sum
    over a process tree (forked workers share much of their parent) counts each page once."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "harness") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def timed(step: str, argv: list[str], *, watch: Path | None = None, note: str = "",
          expect: tuple[int, ...] = (0,)) -> Timing:
    """Run argv as a child; wall time, peak RSS (rusage of the child), and optionally the time
    at which `watch` first grows (the first request a resume sends is logged there)."""
    size0 = watch.stat().st_size if watch is not None else 0
    out = tempfile.TemporaryFile()
    # Peak RSS through GNU time: a child forked from this (larger) process inherits its
    # high-water mark across exec, while time's own child starts from time's few MB.
    maxrss_file = tempfile.NamedTemporaryFile(suffix=".maxrss", delete=False)
    maxrss_file.close()
    if GNU_TIME:
        argv = [GNU_TIME, "-f", "%M", "-o", maxrss_file.name, *argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=child_env(), cwd=REPO)
    first, tree_peak, next_sample = None, 0, 0.0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.perf_counter()
        if watch is not None and first is None and watch.stat().st_size > size0:
            first = now - t0
        if now >= next_sample:   # ~20 samples a second: reading smaps_rollup is not free
            tree_peak = max(tree_peak, sum(_pss_kib(p) for p in _tree(proc.pid)))
            next_sample = now + 0.05
        time.sleep(0.002 if watch is not None else 0.01)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    text = out.read().decode(errors="replace")
    if proc.returncode not in expect:
        raise SystemExit(f"{step} failed ({proc.returncode}):\n{text[-3000:]}")
    # KiB on Linux, both ways.
    maxrss = usage.ru_maxrss
    if GNU_TIME:
        text_rss = Path(maxrss_file.name).read_text().split()
        maxrss = int(text_rss[-1]) if text_rss and text_rss[-1].isdigit() else maxrss
    os.unlink(maxrss_file.name)
    t = Timing(step, wall, maxrss / 1024, proc.returncode, first,
               note or (text.strip().splitlines() or [""])[-1][:90], tree_peak / 1024)
    t.output = text  # type: ignore[attr-defined]  # not part of the reported numbers
    return t


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--decided", type=float, default=0.5, help="share of calls decided before resume")
    ap.add_argument("--resume-calls", type=int, default=2000)
    ap.add_argument("--json", type=Path, help="write the raw numbers here")
    ap.add_argument("--keep", action="store_true", help="keep the folder")
    ap.add_argument("--dir", type=Path, help="parent of the work folder (default: the system temp dir)")
    args = ap.parse_args()

    py = sys.executable
    bases = max(1, args.calls // (N_CONDITIONS * args.reps))
    calls = bases * N_CONDITIONS * args.reps
    work = Path(tempfile.mkdtemp(prefix="guardeval-scale-", dir=args.dir))
    cohort, run, guard = work / "cohort", work / "run", write_guard(work / "scale.toml")
    build = [py, str(REPO / "benchmarks" / "scale_build.py")]
    ge = [py, "-m", "guardeval"]
    rows: list[Timing] = []
    info: dict[str, object] = {"calls": calls, "bases": bases, "conditions": N_CONDITIONS, "reps": args.reps,
                               "work_dir": str(work)}
    correct = False   # the resume decided what it should have
    try:
        print(f"work folder: {work}", file=sys.stderr)
        print(f"building the cohort: {bases} bases x {N_CONDITIONS} conditions ...", file=sys.stderr)
        setup = [timed("setup: cohort build", [*build, "cohort", str(cohort), "--bases", str(bases)])]
        plan_args = ["--cohort", str(cohort), "--guard", str(guard), "--reps", str(args.reps), "--seed", "1"]
        print(f"planning {calls} calls ...", file=sys.stderr)
        rows.append(timed("plan (launch --dry-run)", [*ge, "launch", *plan_args, "--run-dir", str(run), "--dry-run",
                                                   "--no-preflight"],
                          note="plan + schedule hash, nothing written"))
        rows.append(timed("launch: plan + write folder", [*build, "materialise", str(run), *plan_args],
                          note="materialise: schedule, stimuli, cohort copy"))
        decided = int(calls * args.decided)
        print(f"answering and deciding {decided} calls ...", file=sys.stderr)
        setup.append(timed("setup: fill raw + decisions", [*build, "fill", str(run), "--decided", str(decided)]))
        sizes = {name: (run / name).stat().st_size for name in VERIFY_READS}
        info["bytes"] = sizes
        info["verify_bytes"] = sum(sizes.values())
        info["raw_lines"] = sum(1 for _ in open(run / "raw.jsonl", "rb"))
        info["disk_bytes"] = sum(p.stat().st_size for p in work.rglob("*") if p.is_file())

        print("timing status, verify, sha256sum ...", file=sys.stderr)
        rows.append(timed("status", [*ge, "status", str(run)]))
        rows.append(timed("verify", [*ge, "verify", str(run)]))
        files = [str(run / name) for name in VERIFY_READS]
        rows.append(timed("sha256sum (floor)", ["sha256sum", *files], note="coreutils, same files"))
        rows.append(timed("hashlib sha256", [py, "-c", HASHLIB_FLOOR, *files], note="Python hashlib, same files"))

        print(f"resuming {args.resume_calls} calls against sim-server ...", file=sys.stderr)
        with SimServerProcess(["--seed", "7"], env=child_env()) as sim:
            rows.append(timed("resume --max-calls", [*ge, "resume", str(run), "--max-calls", str(args.resume_calls),
                                                     "--base-url", sim.base_url, "--no-progress"],
                              watch=run / "raw.jsonl"))
        after = timed("status (after resume)", [*ge, "status", "--json", str(run)], note="--json")
        st = orjson.loads(after.output)  # type: ignore[attr-defined]
        info["after_resume"] = {"decided": st["decided"], "expected": decided + args.resume_calls,
                                "attempts": st["attempts"]}
        correct = st["decided"] == decided + args.resume_calls
        rows.append(after)
    finally:
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    by = {r.step: r for r in rows}
    ratio = by["verify"].wall_s / by["sha256sum (floor)"].wall_s
    ratio_py = by["verify"].wall_s / by["hashlib sha256"].wall_s
    print_table(calls, info, setup, rows, ratio, ratio_py)
    if args.json:
        args.json.write_bytes(orjson.dumps({**info, "setup": [asdict(r) for r in setup],
                                            "steps": [asdict(r) for r in rows],
                                            "verify_over_sha256sum": ratio, "verify_over_hashlib": ratio_py},
                                           option=orjson.OPT_INDENT_2))
    verify_mib = max(by["verify"].peak_mib, by["verify"].tree_pss_mib)
    if calls < TARGET_CALLS:   # below it, process start-up is much of every timing (BENCHMARKS.md §3)
        print(f"targets not judged below {TARGET_CALLS:,} calls")
        return 0 if correct else 1
    ok = ratio <= 3 and verify_mib < 500 and by["status"].wall_s < 5
    return 0 if ok and correct else 1


TARGET_CALLS = 1_000_000   # the size the targets are for


def print_table(calls: int, info: dict, setup: list[Timing], rows: list[Timing], ratio: float,
                ratio_py: float) -> None:
    print(f"\n{calls:,} calls ({info['bases']:,} bases x {info['conditions']} conditions x {info['reps']} reps); "
          f"verify reads {gib(info['verify_bytes'])} ({info['raw_lines']:,} raw lines); "
          f"disk {gib(info['disk_bytes'])}")
    print(f"{'step':<30} {'time s':>9} {'peak MiB':>9} {'tree MiB':>9}  note")
    for r in [*setup, *rows]:
        extra = f"first request after {r.first_request_s:.2f} s; " if r.first_request_s is not None else ""
        print(f"{r.step:<30} {r.wall_s:>9.2f} {r.peak_mib:>9.0f} {r.tree_pss_mib:>9.0f}  {extra}{r.note}")
    print("peak MiB: ru_maxrss of the largest process (the command or one of its workers); tree MiB: sampled "
          "peak of the summed PSS of the command and its workers")
    print(f"verify / sha256sum = {ratio:.2f}   (target <= 3);   verify / hashlib = {ratio_py:.2f}")
    after = info.get("after_resume")
    if after:
        print(f"after resume: {after['decided']:,} decided (expected {after['expected']:,})")


if __name__ == "__main__":
    raise SystemExit(main())
