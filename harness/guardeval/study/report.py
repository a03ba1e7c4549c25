"""`guardeval study report`: every run estimated under the study's question (report.json, .md,
.html in each run folder), all of them compared on their shared schedule (`compare_inputs`:
one paired bootstrap over every guard), the answer in words, and the study's files:
study-report.json, study.md, study.html. The record (study.json) then holds each run's
fingerprint at this report and the study fingerprint, so that `study verify` sees a run changed
since, and `study verify --expect` a study changed in any way.

Incomplete runs are refused unless `allow_partial`, as `estimate` refuses an incomplete run;
a run that does not verify is refused (the estimate verifies it first).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from guardeval import __version__
from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.errors import CheckFailed, InputError
from guardeval.estimators.compare.compare import compare_inputs
from guardeval.estimators.report.report import dumps_json
from guardeval.estimators.runs import compare_input_from_run, estimate_run
from guardeval.run.folder.folder import write_into
from guardeval.run.folder.layout import RAW, REPORT_HTML, utcnow
from guardeval.run.folder.manifest import read_manifest
from guardeval.run.integrity.fingerprint import run_fingerprint
from guardeval.run.run import Run
from guardeval.run.status import RunStatusRecord, run_status
from guardeval.study.answer import answer
from guardeval.study.record import (
    RUNS_DIR,
    STUDY_HTML,
    STUDY_MD,
    STUDY_REPORT_JSON,
    StudyLock,
    command,
    open_study,
    read_record,
    study_fingerprint,
    write_record,
)
from guardeval.study.runs import open_runs


def versions() -> dict[str, str]:
    import numpy
    import scipy

    return {"guardeval": __version__, "python": platform.python_version(), "numpy": numpy.__version__,
            "scipy": scipy.__version__, "platform": platform.platform()}


def _summary(label: str, report: dict[str, Any], status: RunStatusRecord) -> str:
    """One line per guard: calls, statuses, the baseline block rate, the corrected effects."""
    q = report["quarantine"]["count"]
    effects = ", ".join(
        f"{c['condition']} {_n(c['delta_minus_placebo'] if c['delta_minus_placebo'] is not None else c['delta'])}"
        for c in report["contrasts"] if c["condition"] != report["placebo"])
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(status["statuses"].items()))
    rate = report["block_rate"].get(report["baseline"])
    return (f"{label}: {status['decided']}/{status['n_calls']} calls ({statuses}); block rate under "
            f"{report['baseline']} {_n(rate, sign=False)}; "
            f"{'Δ − placebo' if report['placebo'] else 'Δ'}: {effects}; quarantined {q}" + _failed(report))


def _failed(report: dict[str, Any]) -> str:
    """When calls failed: how many, whether the run is publishable, and which headlines survive them."""
    ex = report.get("excluded") or {}
    if not ex.get("failed"):
        return ""
    fragile = [c["condition"] for c in report["contrasts"]
               if c.get("headline") != "placebo" and (c.get("bounds") or {}).get("robust") is False]
    return (f"; failed {ex['failed']} ({ex['share']:.1%} left out{'' if ex['publishable'] else ', NOT PUBLISHABLE'})"
            + (f"; not robust to them: {', '.join(fragile)}" if fragile else "; every headline robust to them"))


def _n(x: float | None, sign: bool = True) -> str:
    from guardeval.estimators.report.formats import num

    return num(x, 3, sign)


def _refuse_inconsistent(study: Any, record: dict[str, Any], folders: dict[str, Any]) -> None:
    """A study that fails `study verify` gets no report, as a run that fails `verify` gets none:
    the record's own checks and each run's identity here (each run is verified by its estimate)."""
    from guardeval.study.status import identity_problems, record_problems, rewritten_problem

    found = list(record_problems(study, record))
    for entry in record["runs"]:
        folder = folders[entry["label"]]
        manifest = read_manifest(folder)
        found += [(folder.file("manifest.json"), what) for what in identity_problems(entry, manifest, record)]
        # A run rewritten in place since the last report is not compared (a resumed one is).
        token = run_fingerprint(folder, manifest).token if entry["fingerprint"] is not None else None
        if (rewritten := rewritten_problem(entry, token)) is not None:
            found.append((folder.file(RAW), rewritten))
    if found:
        where, message = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise CheckFailed(f"{where}: {message}{more}; the study fails `guardeval study verify {study.path}`, which "
                          "names every problem: no report is made")


def study_report(study_dir: str | Path, *, n_boot: int = 10000, seed: int = 0, missing: str = "exclude",
                 allow_partial: bool = False, allow_unpublishable: bool = False, write: bool = True,
                 argv: Sequence[str] | None = None, row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> dict[str, Any]:
    """The study's report (see the module's doc); with `write`, its files and the record updated."""
    with open_study(study_dir, "estimate") as study, StudyLock(study), ExitStack() as held:
        record = read_record(study)
        if len(record["runs"]) < 2:
            raise InputError(f"a study report compares two runs or more; this study has {len(record['runs'])} "
                             "(add one with `guardeval study add`)")
        folders = open_runs(study, record, held)
        _refuse_inconsistent(study, record, folders)
        statuses = {label: run_status(folder) for label, folder in folders.items()}
        short = {label: st for label, st in statuses.items() if not st["complete"]}
        if short and not allow_partial:
            listed = ", ".join(f"{label} ({st['decided']}/{st['n_calls']} decided)" for label, st in short.items())
            raise CheckFailed(f"{study.path}: not every run is complete: {listed}. Finish them with: guardeval study "
                              f"resume {study.path}; or report them as they are with --allow-partial")
        q = record["question"]
        options = {"baseline": q["baseline"], "placebo": q["placebo"], "family": q["family"], "n_boot": n_boot,
                   "seed": seed, "failure_rule": q["failure_rule"], "missing": missing, "margin": q["margin"],
                   "allow_partial": allow_partial}
        reports: dict[str, dict[str, Any]] = {}
        inputs = []
        for label, folder in folders.items():
            with Run.using(folder) as run:   # the folder `held` opened, read as a Run
                # The run's own report, under the study's question (it verifies the run first).
                rep = estimate_run(run, allow_unpublishable=True, write=write, row_limits=row_limits, **options)
                if write:
                    from guardeval.view.html import write_report_html

                    write_report_html(run, rep, just_estimated=True)
                reports[label] = dict(rep)
                inp = compare_input_from_run(run, label, verify=False, row_limits=row_limits)
            inp.source.update(verified=rep["source"]["verified"], verify_skipped=rep["source"]["verify_skipped"])
            inputs.append(inp)
        result: Any = compare_inputs(inputs, baseline=q["baseline"], placebo=q["placebo"], family=q["family"],
                                     n_boot=n_boot, seed=seed, failure_rule=q["failure_rule"], missing=missing,
                                     margin=q["margin"], allow_partial=allow_partial,
                                     allow_unpublishable=allow_unpublishable)
        tokens: dict[str, str | None] = {label: run_fingerprint(f, read_manifest(f)).token for label, f in folders.items()}
        fp = study_fingerprint(record, tokens)
        at = utcnow()
        record = {**record, "runs": [{**e, "fingerprint": tokens[e["label"]]} for e in record["runs"]],
                  "report": {"at": at, "fingerprint": fp.token,
                             "options": {"n_boot": n_boot, "seed": seed, "missing": missing,
                                         "allow_partial": allow_partial, "allow_unpublishable": allow_unpublishable}},
                  "commands": [*record["commands"], command(argv)]}
        runs_out = []
        for entry in record["runs"]:
            label = entry["label"]
            st = statuses[label]
            runs_out.append({"label": label, "run_id": entry["run_id"], "guard": entry["guard"],
                             "fingerprint": tokens[label], "complete": st["complete"],
                             "decided": st["decided"], "n_calls": st["n_calls"], "spend_usd": st["spend_usd"],
                             "report": f"{RUNS_DIR}/{label}/{REPORT_HTML}",
                             "summary": _summary(label, reports[label], st),
                             "excluded": reports[label].get("excluded")})
        out = {
            "study": {"study_id": record["study_id"], "study_dir": str(study.path), "created": record["created"],
                      "cohort": record["cohort"], "schedule": record["schedule"], "prompt": record["prompt"]},
            "reported_at": at, "question": q, "question_at_launch": record["question_at_launch"],
            "edits": record["edits"], "fingerprint": fp.record(), "answer": answer(result, reports),
            "runs": runs_out, "complete": result["complete"], "publishable": result["publishable"],
            "excluded": {i["label"]: i["excluded"] for i in result["inputs"]},
            "allow_unpublishable": allow_unpublishable, "compare": result,
            "made": {"commands": record["commands"], "versions": versions(), "options": record["report"]["options"]},
        }
        if write:
            from guardeval.view.study import study_html, study_markdown

            write_record(study, record)
            data = dumps_json(out).encode("utf-8")
            md, page = study_markdown(out).encode("utf-8"), study_html(out).encode("utf-8")
            write_into(study, STUDY_REPORT_JSON, lambda fh: fh.write(data))
            write_into(study, STUDY_MD, lambda fh: fh.write(md))
            write_into(study, STUDY_HTML, lambda fh: fh.write(page))
        return out
