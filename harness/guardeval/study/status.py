"""`guardeval study status` and `study verify`: where a study stands, and whether it holds.

Status reads every run as `guardeval status` does and adds the study's view: which runs are
incomplete, whether a process writes the study now, spend over all runs, the study fingerprint
now and whether the runs are still those its last report was made from.

Verify checks every run as `guardeval verify` does, and the study's own record: study.json
(its schema, its own hash), each recorded run present, the run the record names (run id,
manifest), on the study's cohort, schedule and prompt; no run folder the record does not list.
A run changed since the last report (resumed, retried) is noted. With `expect`, the study
fingerprint must be that one, so a run removed, replaced, re-run, resumed or added since is
caught even where the record was rewritten to match.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, RowLimits
from guardeval.errors import CheckFailed, InputError
from guardeval.run.folder.folder import RunFolder, reason
from guardeval.run.folder.layout import MANIFEST, RAW
from guardeval.run.folder.manifest import read_manifest
from guardeval.run.integrity.fingerprint import not_a_later_session
from guardeval.study.record import RUNS_DIR, STUDY_JSON, open_run, open_study, read_record, study_fingerprint

_PARTIAL = re.compile(r"\..+\.partial-[0-9]+")


def rewritten_problem(entry: Mapping[str, Any], token: str | None) -> str | None:
    """A run whose log was rewritten in place since the study's report (same sessions, other
    bytes, or cut): said by `study verify`, refused by `study report`. None when the run is the
    one reported or a later session of it (a resume, a retry), or either fingerprint is unknown."""
    if entry["fingerprint"] is None or token is None:
        return None
    why = not_a_later_session(entry["fingerprint"], token)
    return None if why is None else (f"run {entry['label']!r} changed since the study's report and not by a later "
                                     f"session ({why})")


def identity_problems(entry: Mapping[str, Any], manifest: Mapping[str, Any], record: Mapping[str, Any]) -> list[str]:
    """What makes a run not the study's: another run, another cohort, schedule or prompt."""
    out = []
    if manifest.get("run_id") != entry["run_id"] or manifest.get("sha256") != entry["manifest_sha256"]:
        out.append(f"not the run the study recorded for {entry['label']!r} (run {entry['run_id']}, manifest "
                   f"{entry['manifest_sha256'][:12]}…; found run {str(manifest.get('run_id'))[:80]}, manifest "
                   f"{str(manifest.get('sha256'))[:12]}…): replaced or re-run")
    cohort, prompt = manifest.get("cohort") or {}, manifest.get("prompt") or {}
    if cohort.get("sha256") != record["cohort"]["sha256"]:
        out.append("on another cohort than the study's")
    if manifest.get("schedule_sha256") != record["schedule"]["sha256"]:
        out.append("on another schedule than the study's")
    if prompt.get("sha256") != record["prompt"]["sha256"]:
        out.append("with another prompt than the study's")
    return out


def record_problems(study: RunFolder, record: Mapping[str, Any]) -> list[tuple[Path, str]]:
    """What the record itself shows inconsistent, and run folders it does not list ((file,
    message) each; no run is verified here). A record re-hashed after an edit by hand passes its
    own hash, so these are what tell without `--expect`: the question not the one at launch with
    its recorded edits applied, one run listed twice, fewer runs than its last report was made
    from (no command removes a run), a folder in `runs/` it does not list."""
    out: list[tuple[Path, str]] = []
    where = study.file(STUDY_JSON)
    question = dict(record["question_at_launch"])
    for edit in record["edits"]:
        for name, change in edit["changes"].items():
            if question.get(name) != change["from"]:
                out.append((where, f"the recorded edit of {edit['at']} changes {name} from {change['from']!r}, but "
                                   f"it was {question.get(name)!r} then (the edits were changed by hand?)"))
            question[name] = change["to"]
    for name in sorted(set(question) | set(record["question"])):
        if question.get(name) != record["question"].get(name):
            out.append((where, f"the question's {name} is {record['question'].get(name)!r}, but the question at "
                               f"launch with its recorded edits gives {question.get(name)!r}: changed without an "
                               "edit (`guardeval study edit` records one)"))
    first: dict[tuple[str, str], str] = {}
    for entry in record["runs"]:
        for key in ("run_id", "manifest_sha256"):
            other = first.setdefault((key, entry[key]), entry["label"])
            if other != entry["label"]:
                out.append((where, f"one run is listed twice, as {other!r} and as {entry['label']!r} ({key} "
                                   f"{str(entry[key])[:40]})"))
                break
    report = record["report"]
    if report is not None:
        reported = int(report["fingerprint"][1:].split(".")[0])
        if reported > len(record["runs"]):
            out.append((where, f"the study's last report was made from {reported} runs; the record lists "
                               f"{len(record['runs'])} (a run removed from the record?)"))
    listed = {r["label"] for r in record["runs"]}
    try:
        present = study.folders(RUNS_DIR)
    except InputError as exc:
        return [*out, (study.file(RUNS_DIR), reason(exc))]
    for name in present:
        if name not in listed and not _PARTIAL.fullmatch(name):
            out.append((study.file(f"{RUNS_DIR}/{name}"), "a run folder the study does not list (added or left by "
                                                          "hand, or a run removed from study.json)"))
    return out


def study_status(study_dir: str | Path) -> dict[str, Any]:
    with open_study(study_dir) as study:
        record = read_record(study)
        running = study.held_by_another()
        runs: list[dict[str, Any]] = []
        tokens: dict[str, str | None] = {}
        for entry in record["runs"]:
            label = entry["label"]
            try:
                with open_run(study, label) as run:
                    manifest = read_manifest(run.folder)
                    st = run.status()
            except (InputError, CheckFailed) as exc:
                tokens[label] = None
                runs.append({"label": label, "problem": str(exc), "complete": False})
                continue
            tokens[label] = st["fingerprint"]
            problems = identity_problems(entry, manifest, record) + list(st["problems"])   # each names its file
            runs.append({"label": label, "run_id": st["run_id"], "guard": st["guard"], "model": st["model"],
                         "n_calls": st["n_calls"], "decided": st["decided"], "pending": st["pending"],
                         "complete": st["complete"], "state": st["state"], "statuses": st["statuses"],
                         "failure_causes": st["failure_causes"],
                         "quarantined": st["quarantined"], "spend_usd": st["spend_usd"],
                         "spend_simulated": st["spend_simulated"], "last_stop": st["last_stop"],
                         "fingerprint": st["fingerprint"], "reported_fingerprint": entry["fingerprint"],
                         "changed_since_report": entry["fingerprint"] is not None
                         and entry["fingerprint"] != st["fingerprint"],
                         "problem": "; ".join(problems) or None})
        fp = study_fingerprint(record, tokens)
        report = record["report"]
        # Damaged (exit 1, as `status` says of a run): what the record shows, and every run's problem.
        problems = [f"{where}: {message}" for where, message in record_problems(study, record)]
        problems += [f"{RUNS_DIR}/{r['label']}: {r['problem']}" for r in runs if r.get("problem")]
        return {"study_id": record["study_id"], "study_dir": str(study.path), "cohort": record["cohort"]["name"],
                "damaged": bool(problems), "problems": problems,
                "schedule_sha256": record["schedule"]["sha256"], "n_calls_per_run": record["schedule"]["n_calls"],
                "question": record["question"], "edits": len(record["edits"]), "running": running,
                "complete": all(r["complete"] for r in runs),
                "incomplete": [r["label"] for r in runs if not r["complete"]], "runs": runs,
                "spend_usd": round(sum(r.get("spend_usd") or 0.0 for r in runs), 6),
                "spend_simulated": any(r.get("spend_simulated") for r in runs), "budget": record["budget"],
                "report": report, "report_current": report is not None and report["fingerprint"] == fp.token,
                "fingerprint": fp.token}


class RunCheck(TypedDict):
    """`study verify`'s word on one of the study's runs."""

    ok: bool
    checked: str
    problems: int                   # how many (they are listed with the study's, each with its run)
    fingerprint: str | None


class StudyProblem(TypedDict):
    file: str
    line: int | None
    message: str
    run: NotRequired[str]           # a run's own problem: which run


def study_verify(study_dir: str | Path, *, expect: str | None = None, allow_skipped: bool = False,
                 row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> dict[str, Any]:
    """Every run verified, and the study's record against its runs (see the module's doc)."""
    problems: list[StudyProblem] = []
    skipped: list[dict[str, str]] = []
    notes: list[str] = []

    def problem(where: Path, message: str, line: int | None = None) -> None:
        problems.append({"file": str(where), "line": line, "message": message})

    with open_study(study_dir, "verify") as study:
        try:
            record = read_record(study)
        except InputError as exc:
            problem(study.file(STUDY_JSON), reason(exc))
            return {"ok": False, "problems": problems, "skipped": [], "notes": [], "runs": {}, "fingerprint": None,
                    "checked": "study.json"}
        runs: dict[str, RunCheck] = {}
        tokens: dict[str, str | None] = {}
        for entry in record["runs"]:
            label = entry["label"]
            where = study.file(f"{RUNS_DIR}/{label}")
            tokens[label] = None
            try:
                run = open_run(study, label)
            except InputError as exc:
                problem(where, f"the study's run {label!r} is missing or cannot be opened: {reason(exc)}")
                continue
            with run:
                folder = run.folder
                rep = run.verify(allow_skipped=allow_skipped, row_limits=row_limits)
                runs[label] = {"ok": rep["ok"], "checked": rep["checked"], "problems": len(rep["problems"]),
                               "fingerprint": got["token"] if (got := rep.get("fingerprint")) else None}
                problems.extend({**p, "run": label} for p in rep["problems"])
                skipped.extend({**s, "run": label} for s in rep["skipped"])
                try:
                    manifest = read_manifest(folder)
                except InputError:
                    continue   # verify_run has named it
                for what in identity_problems(entry, manifest, record):
                    problem(folder.file(MANIFEST), what)
                token = runs[label]["fingerprint"]
                tokens[label] = token
                rewritten = rewritten_problem(entry, token)
                if rewritten is not None:
                    problem(folder.file(RAW), rewritten)
                elif entry["fingerprint"] is not None and token is not None and entry["fingerprint"] != token:
                    # A later session of the same run (a resume, a retry): the run holds, the report is
                    # stale. Said here; `--expect` with the report's fingerprint fails on it.
                    notes.append(f"{RUNS_DIR}/{label}: changed since the study's report (fingerprint "
                                 f"{entry['fingerprint']} then, {token} now: resumed or retried since); `guardeval "
                                 "study report` makes the report again")
        for where, message in record_problems(study, record):
            problem(where, message)
        listed = {r["label"] for r in record["runs"]}
        with contextlib.suppress(InputError):   # (record_problems has named it)
            for name in study.folders(RUNS_DIR):
                if name not in listed and _PARTIAL.fullmatch(name):
                    notes.append(f"{RUNS_DIR}/{name}: a partial run folder of a `study add` that was killed "
                                 "(removed by the next `study add`)")
        fp = study_fingerprint(record, tokens)
        report = record["report"]
        if report is not None and report["fingerprint"] != fp.token:
            notes.append(f"the study's last report was made from fingerprint {report['fingerprint']}; it is "
                         f"{fp.token} now (a run added or changed since)")
        if expect is not None and fp.token != expect:
            problem(study.file(STUDY_JSON), f"the study's fingerprint is {fp.token}, not the expected {expect} (a run "
                                            "removed, replaced, re-run, resumed or added, or the question edited)")
        ok = not problems and (allow_skipped or not skipped)
        checked = (f"study.json and {len(record['runs'])} run(s): "
                   + ", ".join(f"{label} {'OK' if r['ok'] else 'FAILED'}" for label, r in runs.items()))
        return {"ok": ok, "problems": problems, "skipped": skipped, "notes": notes, "runs": runs,
                "fingerprint": fp.record(), "checked": checked}


def require_intact(study: RunFolder, record: Mapping[str, Any]) -> None:
    """CheckFailed (exit 1) for a study `study status` calls damaged: a command that changes the
    study (`study edit`, `study add`) does not build on one."""
    found = [f"{where}: {message}" for where, message in record_problems(study, record)]
    for entry in record["runs"]:
        label = entry["label"]
        try:
            with open_run(study, label) as run:
                found += identity_problems(entry, read_manifest(run.folder), record)
                found += list(run.status()["problems"])
        except (InputError, CheckFailed) as exc:
            found.append(f"{RUNS_DIR}/{label}: {exc}")
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise CheckFailed(f"{study.path}: the study is damaged: {found[0]}{more}; `guardeval study verify "
                          f"{study.path}` names every problem")
