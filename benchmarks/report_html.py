"""report.html: size, build time and load time in headless Chromium, for the 960-call demo run
and a 100,000-call run.

    python benchmarks/report_html.py [--calls 100000] [--reps 10] [--loads 5] [--keep] [--dir DIR]

* demo: `guardeval demo` (960 calls against the simulated provider; it writes report.html).
* large: a run folder built with guardeval's own writers, as `benchmarks/scale.py` builds its
  runs (`scale_build.py`: a synthetic cohort of calls / (5 x reps) bases cycled from the
  demo's, `materialise`, then every call answered as the simulated provider answers and
  decided, every 97th call after a 429), then `guardeval estimate` on it.

For each: `guardeval report RUN` timed in a child process (wall clock, peak RSS from
`os.wait4`), the file's size, what it embeds, and its load time in Chromium (Debian's
`chromium`, headless, a fresh profile): `ready` is the page's own clock (performance.now()
when its script has parsed the data and drawn the first page of rows, counted from navigation
start), `wall` the time from sending the navigation to seeing the ready marker over the
DevTools protocol. The first load is cold (a new browser); the median is over `--loads` more
loads of the same file. Also the time one filter takes in the page.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "harness"))
# `tests.…` and `benchmarks.…` are the repository's folders: run as a script, only this file's folder is on the path.
sys.path.insert(0, str(REPO))

from benchmarks.scale_build import write_guard  # noqa: E402
from tests.chromium import Chromium, find_chromium, load  # noqa: E402

N_CONDITIONS = 5


def child(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB, stderr) of one command, which must succeed."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{err}")
    return wall, usage.ru_maxrss / 1024, err


def guardeval(*args: str) -> list[str]:
    return [sys.executable, "-m", "guardeval", *args]


def embedded(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="guardeval-data">(.*?)</script>', text, re.S)
    assert m is not None
    data = json.loads(m.group(1))
    return {"rows": len(data["rows"]), "details": len(data["details"]), "total": data["n_total"],
            "json_bytes": len(m.group(1).encode())}


async def browse(path: Path, loads: int) -> dict[str, Any]:
    async with Chromium() as browser:
        page = await browser.page()
        first = await load(page, path)
        warm = []
        for _ in range(loads):
            await page.send("Page.navigate", url="about:blank")
            await page.wait_for("document.readyState === 'complete' && location.href === 'about:blank'")
            warm.append(await load(page, path))
        filter_ms = await page.evaluate(
            "(() => { const s = document.querySelector('select[data-filter=condition]'); s.value = s.options[2].value;"
            " const t = performance.now(); s.dispatchEvent(new Event('change')); return performance.now() - t; })()")
        await page.close()
    return {"first": first, "ready_ms_median": statistics.median(w["ready_ms"] for w in warm),
            "wall_s_median": statistics.median(w["wall_s"] for w in warm), "filter_ms": filter_ms}


def measure(name: str, run: Path, loads: int) -> dict[str, Any]:
    wall, peak, _ = child(guardeval("report", str(run)))
    html = run / "report.html"
    out = {"case": name, "build_s": wall, "build_peak_mib": peak, "bytes": html.stat().st_size, **embedded(html)}
    out.update(asyncio.run(browse(html, loads)))
    return out


def build_large(root: Path, calls: int, reps: int) -> Path:
    bases = calls // (N_CONDITIONS * reps)
    build = [sys.executable, str(REPO / "benchmarks" / "scale_build.py")]
    guard = write_guard(root / "guard.toml")
    run = root / "large"
    for step in (["cohort", str(root / "cohort"), "--bases", str(bases)],
                 ["materialise", str(run), "--cohort", str(root / "cohort"), "--guard", str(guard), "--reps", str(reps)],
                 ["fill", str(run), "--decided", str(bases * N_CONDITIONS * reps)]):
        t0 = time.perf_counter()
        child([*build, *step])
        print(f"  built: {step[0]} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000, help="calls of the large run (default 100000)")
    ap.add_argument("--reps", type=int, default=10, help="repetitions of the large run (default 10)")
    ap.add_argument("--loads", type=int, default=5, help="warm loads per file (default 5)")
    ap.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    if find_chromium() is None:
        raise SystemExit("chromium is not installed (apt-get install -y chromium)")
    root = Path(tempfile.mkdtemp(prefix="guardeval-report-", dir=args.dir))
    try:
        results = []
        print("demo run (960 calls)…", file=sys.stderr)
        child(guardeval("demo", "--run-dir", str(root / "demo"), "--json", "--no-progress"))
        results.append(measure("demo, 960 calls", root / "demo", args.loads))
        print(f"large run ({args.calls:,} calls)…", file=sys.stderr)
        run = build_large(root, args.calls, args.reps)
        wall, peak, _ = child(guardeval("estimate", str(run)))
        print(f"  estimate (writes report.json and report.html) in {wall:.1f} s, peak {peak:.0f} MiB", file=sys.stderr)
        results.append(measure(f"large, {args.calls:,} calls", run, args.loads))
        head = ("case", "report.html", "rows / details embedded", "build", "build peak", "first load ready / wall",
                f"median of {args.loads} loads ready / wall", "one filter")
        print(" | ".join(head))
        for r in results:
            print(" | ".join((
                r["case"], f"{r['bytes'] / 2**20:.2f} MiB ({r['bytes']:,} B)",
                f"{r['rows']:,} / {r['details']:,} of {r['total']:,}", f"{r['build_s']:.2f} s",
                f"{r['build_peak_mib']:.0f} MiB",
                f"{r['first']['ready_ms']:.0f} ms / {r['first']['wall_s'] * 1000:.0f} ms",
                f"{r['ready_ms_median']:.0f} ms / {r['wall_s_median'] * 1000:.0f} ms", f"{r['filter_ms']:.0f} ms")))
        print(json.dumps(results), file=sys.stderr)
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
