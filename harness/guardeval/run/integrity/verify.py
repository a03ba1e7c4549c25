"""`guardeval verify`: recompute every hash and the raw-log chain; name the file and line.

Checks need nothing outside the run folder: the stimuli are re-rendered from the run's own copy
of its prompt (`prompt/`, pinned by the manifest) and its guard config. A check that cannot be
done (a run from before prompt copies whose prompt has changed since, a manifest naming a parser
this version lacks) is listed under `skipped`, and the result is not `ok` unless skipped checks
are allowed.

Each file is read once, as a stream, and what is kept between files is compact per-call
state, so a 1,000,000-call run verifies in about 200 MB:

* per schedule line its call id (16 raw bytes), cohort cell and flags, in arrays; call id ->
  line through a sorted array of those ids (`CallIndex`), not a dict of a million keys;
* per call its stimulus as an index into the distinct request hashes;
* per raw line its SHA-256, its call id, and a digest of the decision re-derived from it
  (16 bytes), instead of the raw records themselves;
* bitmaps for decided calls and scheduled cells.

Where a line is exactly what the writer wrote, the cheap path proves it: a schedule line equal
to its regeneration from the seed and the cohort, a stimuli line matching the writer's form.
Any other line gets every check one by one, with the same messages as always.

The work runs in three processes when there is a second CPU: a forked worker computes the
per-line facts of raw.jsonl (`verify_raw`, most of the work), another re-renders every
instance, and this process checks the cohort, schedule and stimuli meanwhile, then walks the
raw facts and the decisions in order. The report is the same either way.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import re
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import orjson

from guardeval.canon import canonical_sha256, dumps_line
from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, Cohort, RowLimits
from guardeval.errors import GuardevalError, InputError
from guardeval.run.folder import supersede
from guardeval.run.folder.folder import LineTooLong, RunFolder, reason
from guardeval.run.folder.layout import DECISIONS, EVENTS, GENESIS, MANIFEST, PROMPT_DIR, RAW, SCHEDULE, STIMULI
from guardeval.run.folder.lines import STIMULUS_LINE
from guardeval.run.folder.manifest import MAX_MANIFEST_BYTES, load_cohort_copy, load_run_prompt, run_row_limits
from guardeval.run.integrity import callable_pin, verify_raw
from guardeval.run.integrity.verify_events import check_events
from guardeval.run.integrity.verify_raw import MISSING
from guardeval.run.integrity.verify_render import RenderJob, parser_and_pin
from guardeval.run.integrity.verify_state import (
    MAX_PROBLEMS,
    RawState,
    Report,
    ScheduleState,
    StimuliState,
    Verification,
    check_chain_head,
    check_lines,
    cid_key,
    field_of,
    fingerprint_check,
    line_containing,
    value_of,
)
from guardeval.run.schedule import ORDERS, call_id_for, iter_cells

# A schedule line as `dumps_line` writes it (sorted keys, no spaces), from encoded fields.
_SCHEDULE_LINE = (b'{"base_id":%s,"call_id":"%s","condition":%s,"domain":%s,"index":%d,"instance_sha256":"%s",'
                  b'"interaction_id":%s,"repetition":%d}\n')


def verify_run(folder: RunFolder, *, allow_skipped: bool = False,
               row_limits: RowLimits = DEFAULT_ROW_LIMITS, expect: str | None = None) -> Verification:
    """Every check, as a report: `problems` (file, line, message), `skipped` (checks that could
    not be done, with the reason) and `ok`, which is false when there is a problem, or a
    skipped check unless `allow_skipped`; `fingerprint` (guardeval.run.integrity.fingerprint), which must
    equal `expect` when one is given. A file of the run that is a symbolic link or not a
    regular file is a problem, and is not read. `folder` is the run as its caller opened it
    (`guardeval.run.Run.open`), left open."""
    try:
        return _verify(folder, allow_skipped, row_limits, expect)
    except InputError as exc:   # the folder itself: gone, not a folder, a link
        return {"ok": False, "problems": [{"file": MANIFEST, "line": None, "message": str(exc)}], "skipped": [],
                "checked": "manifest unreadable"}


def _verify(folder: RunFolder, allow_skipped: bool, row_limits: RowLimits, expect: str | None) -> Verification:
    rep = Report()
    try:
        manifest = orjson.loads(folder.read_small(MANIFEST, MAX_MANIFEST_BYTES, what="a run manifest"))
    except InputError as exc:
        rep.add(MANIFEST, None, str(exc))
    except orjson.JSONDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        rep.add(MANIFEST, int(m.group(1)) if m else None, f"not valid JSON ({exc})")
    else:
        if isinstance(manifest, dict):
            return _Verifier(folder, manifest, row_limits).run(allow_skipped=allow_skipped, expect=expect)
        rep.add(MANIFEST, 1, "not a JSON object")
    return {"ok": False, "problems": rep.problems, "skipped": [], "checked": "manifest unreadable"}


class _Verifier:
    def __init__(self, folder: RunFolder, manifest: dict[str, Any], row_limits: RowLimits) -> None:
        self.folder, self.manifest, self.row_limits = folder, manifest, row_limits
        # Files that are links or not regular files: reported first, then passed over as absent.
        self.refused: dict[str, str] = {}
        for name in (SCHEDULE, STIMULI, RAW, DECISIONS, EVENTS):
            try:
                folder.has(name)
            except InputError as exc:
                self.refused[name] = reason(exc)
        self.cohort: Cohort | None = None
        self.sched = ScheduleState()
        self.stim = StimuliState(0)
        self.raw = RawState()
        self.skipped: list[dict[str, str]] = []
        self.parser, self.pinned, why = parser_and_pin(manifest)
        if self.parser is None:
            self.skip("decision re-derivation", why)

    def skip(self, check: str, reason: str) -> None:
        self.skipped.append({"check": check, "reason": reason})

    def _lines(self, rep: Report, name: str) -> Iterator[tuple[int, bytes]]:
        """The lines of `name` (none when it is absent or refused); a line past the run's
        `line_cap` is reported and ends the pass (the rest of the file is not read)."""
        if name in self.refused:
            return
        try:
            yield from self.folder.lines(name)
        except LineTooLong as exc:
            rep.add(name, exc.lineno, f"longer than {exc.cap} bytes, far past any line guardeval writes; "
                                      "the rest of the file is not read")

    def run(self, *, allow_skipped: bool = False, expect: str | None = None) -> Verification:
        head, cohort_rep = Report(), Report()
        # The raw log is most of the work and needs nothing else to start: it goes first (in a
        # worker when there is a CPU for it), then the re-renders (another worker), while this
        # process checks the cohort, the schedule and the stimuli.
        facts = verify_raw.RawFacts(self.folder if RAW not in self.refused else None, self.parser, self.pinned)
        renders = None
        try:
            self._load_cohort(cohort_rep)
            render = self._renderer(head) if self.cohort is not None else None
            renders = RenderJob(self.cohort, render) if render is not None and self.cohort is not None else None
            sched_rep, sched_sha = self._schedule()
            self.stim = StimuliState(len(self.sched))
            self.finals = bytearray(len(self.sched))
            self.chain = supersede.Checker(len(self.sched))   # a retried call's decisions: one chain
            stim_rep, render_checks, stim_sha = self._stimuli(checks=renders is not None)
            raw_rep, chain_rep, n_raw = self._raw(facts)
            dec_rep, n_dec, undecided = self._decisions()
            render_rep = self._render_checks(renders.result(), render_checks) if renders is not None else Report()
        finally:
            facts.close()
            if renders is not None:
                renders.close()
        self._head(head, cohort_rep, sched_sha, stim_sha)
        self._callable(head)
        # Re-render mismatches were found after the pass: put them back in line order.
        stim_problems = [*stim_rep.torn, *heapq.merge(stim_rep.problems, render_rep.problems,
                                                      key=lambda p: p["line"] or 0)]
        fingerprint = fingerprint_check(self.folder, self.manifest, head, expect, self.skip)
        problems = [*head.all(), *sched_rep.all(), *stim_problems, *raw_rep.all(),
                    *chain_rep.all(), *dec_rep.all()][:MAX_PROBLEMS]
        checked = (f"{self.sched.n_rows} scheduled calls, {n_raw} raw attempts, {n_dec} decisions, "
                   f"{self.stim.n_keys} stimuli")
        return {"ok": not problems and (allow_skipped or not self.skipped), "problems": problems,
                "skipped": self.skipped, "checked": checked,
                "n_calls": self.sched.n_rows, "n_raw": n_raw, "n_decisions": n_dec,
                "undecided_answers": undecided, "fingerprint": fingerprint}

    def _renderer(self, rep: Report) -> Callable[[Any], dict[str, Any]] | None:
        """The run's own renderer: its guard config and its prompt (the copy in the run folder;
        for a run from before copies, the prompts folder's entry when it still hashes as pinned).
        None, with the check recorded as skipped (or a damaged copy as a problem), otherwise."""
        from guardeval.backends.config import GuardConfig
        from guardeval.backends.registry import make_renderer

        check = "stimuli re-render"
        pin = self.manifest.get("prompt")
        if not isinstance(pin, dict):
            rep.add(MANIFEST, None, "prompt is not an object")
            return None
        try:
            prompt = load_run_prompt(self.folder, self.manifest)
        except (GuardevalError, KeyError, TypeError) as exc:
            if pin.get("copy"):
                rep.add(f"{PROMPT_DIR}/manifest.json", None, f"the run's prompt copy does not load: {exc}")
            else:
                self.skip(check, f"the run folder has no copy of its prompt (launched before copies) and the "
                                 f"prompts folder cannot stand in: {exc}")
            return None
        try:
            return make_renderer(GuardConfig(**self.manifest["guard"]), prompt)
        except Exception as exc:  # noqa: BLE001 - the rest of verification must not depend on the guard
            self.skip(check, f"the manifest's guard config cannot render ({type(exc).__name__}: {exc})")
            return None

    def _callable(self, rep: Report) -> None:
        """A python guard's code against its pin (`guardeval.run.integrity.callable_pin`)."""
        problems, skipped = callable_pin.verify_findings(self.manifest)
        for message in problems:
            data = self.folder.read_small(MANIFEST, MAX_MANIFEST_BYTES, what="a run manifest")
            rep.add(MANIFEST, line_containing(data, f'"{callable_pin.FIELD}"'), message)
        if skipped:
            self.skip("callable source", skipped)

    # -- manifest and cohort -----------------------------------------------------------------
    def _load_cohort(self, rep: Report) -> None:
        try:
            limits = run_row_limits(self.folder, self.manifest, self.row_limits)
            self.cohort = load_cohort_copy(self.folder, limits)
        except GuardevalError as exc:
            rep.add("cohort", None, str(exc))

    def _head(self, rep: Report, cohort_rep: Report, sched_sha: str, stim_sha: str) -> None:
        """Problems with the pinned files and the manifest itself, reported first."""
        manifest, mpath = self.manifest, self.folder.read_small(MANIFEST, MAX_MANIFEST_BYTES, what="a run manifest")
        for name, why in self.refused.items():
            rep.add(name, None, why)
        body = {k: v for k, v in manifest.items() if k != "sha256"}
        manifest_ok = canonical_sha256(body) == manifest.get("sha256")
        # Files pinned by the manifest: if one disagrees, the manifest line naming it is suspect too.
        pinned_lines: list[tuple[str, str]] = []
        if sched_sha != manifest.get("schedule_sha256"):
            rep.add(SCHEDULE, None, "SHA-256 does not match manifest.schedule_sha256")
            pinned_lines.append(("schedule_sha256", str(manifest.get("schedule_sha256"))))
        if stim_sha != manifest.get("stimuli_sha256"):
            rep.add(STIMULI, None, "SHA-256 does not match manifest.stimuli_sha256")
            pinned_lines.append(("stimuli_sha256", str(manifest.get("stimuli_sha256"))))
        for p in cohort_rep.problems:
            rep.add(p["file"], p["line"], p["message"])
        if self.cohort is not None and self.cohort.sha256 != (manifest.get("cohort") or {}).get("sha256"):
            rep.add("cohort/cohort.json", None, "SHA-256 does not match manifest.cohort.sha256")
            pinned_lines.append(("cohort.sha256", str((manifest.get("cohort") or {}).get("sha256"))))
        guard = manifest.get("guard")
        if isinstance(guard, dict) and canonical_sha256(guard) != manifest.get("guard_sha256"):
            rep.add(MANIFEST, line_containing(mpath, '"guard_sha256"'),
                    "guard_sha256 does not match the guard config")
        if not manifest_ok:
            line = None
            for _, value in pinned_lines:
                line = line or line_containing(mpath, value)
            line = line or line_containing(mpath, f'"sha256": "{manifest.get("sha256")}"')
            rep.add(MANIFEST, line, "manifest sha256 does not match its content")

    # -- schedule.jsonl: every line recomputable from the cohort and the seed ----------------
    def _schedule(self) -> tuple[Report, str]:
        """One pass. The schedule is regenerated alongside (same seed, order and cohort): a line
        equal to its regenerated bytes passes every check below by construction (index, cell,
        repetition, cohort fields, call id, canonical form) and costs a comparison; any other
        line gets the checks one by one, with their messages."""
        rep, h, s = Report(), hashlib.sha256(), self.sched
        reps = self.manifest.get("reps")
        # Cells seen: one byte per instance x repetition when the cell is a cohort cell with a
        # repetition in range (every cell of a sound schedule); a set for anything else.
        n_reps = reps if isinstance(reps, int) and reps > 0 else 0
        seen = bytearray(self.cohort.n_instances * n_reps) if self.cohort is not None else bytearray()
        seen_odd: set[tuple[Any, Any, Any]] = set()
        expected = self._regenerated()
        for lineno, line in self._lines(rep, SCHEDULE):
            h.update(line)
            want = next(expected, None)
            while len(s) < lineno - 1:
                self._sched_slot(None, -1, inst_ok=False, parsed=False)  # a line that was no object
            if want is not None and line == want[0]:
                _, cell, rep_no, key = want
                s.n_rows += 1
                at = cell * n_reps + rep_no
                if seen[at]:
                    rep.add(SCHEDULE, lineno, "duplicate base x condition x repetition")
                seen[at] = 1
                self._sched_slot_key(key, cell)
                continue
            for _, _, row, _ in check_lines([(lineno, line)], rep, SCHEDULE):
                self._schedule_row(rep, lineno, row, n_reps, seen, seen_odd)
        if s.n_rows != self.manifest.get("n_calls"):
            rep.add(SCHEDULE, None, f"{s.n_rows} lines, manifest says {self.manifest.get('n_calls')}")
        s.index()
        return rep, h.hexdigest()

    def _schedule_row(self, rep: Report, lineno: int, row: dict[str, Any], n_reps: int, seen: bytearray,
                      seen_odd: set[tuple[Any, Any, Any]]) -> None:
        """Every check of one schedule line, one by one."""
        s, cohort = self.sched, self.cohort
        seed: Any = self.manifest.get("seed")   # checked by the recomputation below
        reps = self.manifest.get("reps")
        s.n_rows += 1
        cell, inst_ok = -1, isinstance(row.get("instance_sha256"), str)
        try:
            if row["index"] != lineno - 1:
                rep.add(SCHEDULE, lineno, f"index {row['index']} out of order")
            b, c, r = row["base_id"], row["condition"], row["repetition"]
            cell = self._cohort_cell(b, c)
            if cell >= 0 and isinstance(r, int) and 0 <= r < n_reps:
                at = cell * n_reps + r
                if seen[at]:
                    rep.add(SCHEDULE, lineno, "duplicate base x condition x repetition")
                seen[at] = 1
            else:
                if (b, c, r) in seen_odd:
                    rep.add(SCHEDULE, lineno, "duplicate base x condition x repetition")
                seen_odd.add((b, c, r))
            if not (isinstance(reps, int) and isinstance(r, int) and 0 <= r < reps):
                rep.add(SCHEDULE, lineno, "repetition out of range")
            if cohort is not None:
                key = self._key_fields(b, c)
                for k, want in (("interaction_id", key.interaction_id), ("domain", key.domain),
                                ("instance_sha256", key.instance_sha256)):
                    if row[k] != want:
                        rep.add(SCHEDULE, lineno, f"{k} does not match the cohort")
            if row["call_id"] != call_id_for(seed, b, c, r, row["instance_sha256"]):
                rep.add(SCHEDULE, lineno, "call_id does not match its recomputation")
        except (KeyError, TypeError) as exc:
            rep.add(SCHEDULE, lineno, f"missing or malformed field {exc}")
        self._sched_slot(row.get("call_id"), cell, inst_ok=inst_ok, parsed=True)

    def _regenerated(self) -> Iterator[tuple[bytes, int, int, bytes]]:
        """(line bytes, cohort cell, repetition, call id as 16 bytes) of the schedule the
        manifest's seed, order and repetitions give on this cohort; nothing when they cannot
        give one. The line is built from pre-encoded fields: exactly `dumps_line(row)`."""
        cohort, m = self.cohort, self.manifest
        seed, reps, order = m.get("seed"), m.get("reps"), m.get("order")
        if cohort is None or type(seed) is not int or type(reps) is not int or reps < 1 or order not in ORDERS:
            return
        # Copied to its own size: orjson 3.13 leaves a 4 KiB allocation behind every result.
        enc = functools.lru_cache(maxsize=None)(lambda v: bytes(memoryview(orjson.dumps(v))))
        bases, conds = cohort.base_ids, cohort.condition_names
        cells = iter_cells(bases, conds, reps=reps, seed=seed, order=order)
        for index, (b, c, r) in enumerate(cells):
            cell = cohort.cell(b, c)
            key = cohort.key_fields(b, c)
            cid = call_id_for(seed, b, c, r, key.instance_sha256)
            line = _SCHEDULE_LINE % (enc(b), cid.encode(), enc(c), enc(key.domain), index,
                                     key.instance_sha256.encode(), enc(key.interaction_id), r)
            yield line, cell, r, bytes.fromhex(cid)

    def _sched_slot(self, cid: Any, cell: int, *, inst_ok: bool, parsed: bool) -> None:
        s = self.sched
        i = len(s)
        key = cid_key(cid)
        s.cids += key if key is not None else bytes(16)
        if key is None:
            s.odd_cids[i] = cid
        s.cells.append(cell)
        s.inst_ok.append(inst_ok)
        s.parsed.append(parsed)

    def _sched_slot_key(self, key: bytes, cell: int) -> None:
        """`_sched_slot` for a line known to be sound (its call id already as 16 bytes)."""
        s = self.sched
        s.cids += key
        s.cells.append(cell)
        s.inst_ok.append(1)
        s.parsed.append(1)

    def _cohort_cell(self, b: Any, c: Any) -> int:
        if self.cohort is None or not isinstance(b, str) or not isinstance(c, str):
            return -1
        try:
            return self.cohort.cell(b, c)
        except KeyError:
            return -1

    def _key_fields(self, b: Any, c: Any) -> Any:
        assert self.cohort is not None
        try:
            return self.cohort.key_fields(b, c)
        except KeyError:
            raise KeyError((b, c)) from None

    # -- stimuli.jsonl: one per scheduled call, in schedule order; re-rendered when possible --
    def _stimuli(self, *, checks: bool) -> tuple[Report, tuple[array, array], str]:
        """Line checks now; the re-render comparison waits for the renders: for the lines it
        applies to, keep (cohort cell, index of the line's request hash), -1 elsewhere.

        A line in exactly the writer's form (the regex proves it is canonical JSON of two
        lower-case hex strings) whose call id is the schedule's at that line, in a schedule
        whose call ids are unique, is taken without a JSON round trip; any other line goes
        through `check_lines` and the checks one by one."""
        rep, h, s, st = Report(), hashlib.sha256(), self.sched, self.stim
        render_cell = array("i", [-1]) * len(s) if checks else array("i")
        render_sha = array("i", [-1]) * len(s) if checks else array("i")
        match, n, unique = STIMULUS_LINE.fullmatch, len(s), s.calls.unique
        for lineno, line in self._lines(rep, STIMULI):
            h.update(line)
            i = lineno - 1
            m = match(line)
            if (m is not None and unique and i < n and s.parsed[i] and i not in s.odd_cids
                    and s.cids[16 * i:16 * i + 16] == bytes.fromhex(m[1].decode())):
                idx = st.set_slot(i, m[2])
                if checks and s.inst_ok[i] and s.cells[i] >= 0:
                    render_cell[i], render_sha[i] = s.cells[i], idx
                continue
            for _, _, row, _ in check_lines([(lineno, line)], rep, STIMULI):
                cid, sha = row.get("call_id"), row.get("request_sha256")
                st.set(str(cid), str(sha), s.calls)
                if i >= n or not s.parsed[i] or s.call_id_at(i) != cid:
                    rep.add(STIMULI, lineno, "call_id does not match schedule.jsonl at this line")
                    continue
                if checks and s.inst_ok[i] and s.cells[i] >= 0:
                    render_cell[i], render_sha[i] = s.cells[i], st.intern(str(sha))
        return rep, (render_cell, render_sha), h.hexdigest()

    def _render_checks(self, rendered: tuple[bytes, bytearray], checks: tuple[array, array]) -> Report:
        rep, shas = Report(), self.stim.shas
        digests, failed = rendered
        render_cell, render_sha = checks
        unrendered = 0
        for i, cell in enumerate(render_cell):
            if cell < 0:
                continue
            if failed[cell]:
                unrendered += 1
                continue
            if shas[render_sha[i]] != digests[32 * cell:32 * cell + 32].hex():
                rep.add(STIMULI, i + 1, "request_sha256 does not match the re-rendered request")
                if len(rep.problems) >= MAX_PROBLEMS:
                    break
        if unrendered:
            self.skip("stimuli re-render", f"{unrendered} scheduled call(s) whose instance could not be rendered")
        return rep

    # -- raw.jsonl: the hash chain -----------------------------------------------------------
    def _raw(self, facts: Iterable[verify_raw.Fact]) -> tuple[Report, Report, int]:
        """The old per-line check sequence, on facts computed line by line (see verify_raw),
        with the context only this pass has: the previous line, the schedule, the stimuli."""
        rep, raw, calls, stim = Report(), self.raw, self.sched.calls, self.stim
        prev, last_seq, n_raw = GENESIS, 0, 0
        for f in facts:
            if isinstance(f, verify_raw.Torn):
                rep.add_torn(RAW, f.lineno)
                break
            if isinstance(f, verify_raw.Bad):
                rep.add(RAW, f.lineno, f.message)
                continue
            lineno = f.lineno
            n_raw += 1
            if not f.canonical:
                rep.add(RAW, lineno, "line is not in canonical form (bytes changed)")
            try:
                slot = calls.slot(f.call_id) if f.call_id is not MISSING else None
            except TypeError:
                slot = None  # an unhashable call id: raised again below, where the old check raised
            expected = stim.expected_at(slot, f.call_id) if f.call_id is not MISSING else None
            try:
                if field_of(f.prev, "prev_sha256") != prev:
                    # Either the previous line changed after it was chained, or this link did.
                    if lineno > 1:
                        rep.add(RAW, lineno - 1, "line differs from the bytes the next line chained (changed?)")
                    rep.add(RAW, lineno, "prev_sha256 does not match the previous line (chain broken)")
                if field_of(f.seq, "seq") != last_seq + 1:
                    rep.add(RAW, lineno, f"seq {f.seq} does not follow {last_seq}")
                cid = field_of(f.call_id, "call_id")
                if slot is None:
                    calls.slot(cid)  # raises TypeError for an unhashable id, as the old lookup did
                    rep.add(RAW, lineno, "call_id is not in the schedule")
                if value_of(f.request) != field_of(f.request_sha, "request_sha256"):
                    rep.add(RAW, lineno, "request_sha256 does not match the logged request")
                elif f.outcome != "not_sent" and expected != f.request_sha:
                    rep.add(RAW, lineno, "sent request differs from stimuli.jsonl")
                if value_of(f.response_differs):
                    rep.add(RAW, lineno, "response_sha256 does not match the logged response")
                # A seq that is not a number (reported above) counts as the one expected here,
                # so one damaged line is one problem, not one per following line.
                last_seq = f.seq if type(f.seq) is int else last_seq + 1
            except (KeyError, TypeError, AttributeError) as exc:
                rep.add(RAW, lineno, f"missing or malformed field {exc}")
            raw.add(f, self._derived(f, expected))
            if f.final and slot is not None:
                self.finals[slot] = 1
                self.chain.final_at(slot, len(raw.seq_ok) - 1)
            prev = f.digest.hex()
        chain = Report()
        check_chain_head(self.folder if EVENTS not in self.refused else None, chain, last_seq, prev)
        if EVENTS not in self.refused:
            check_events(self.folder, chain, self._raw_sha_at, last_seq)
        return rep, chain, n_raw

    def _raw_sha_at(self, seq: int) -> str | None:
        """SHA-256 of the raw line whose seq is `seq` (None: none is)."""
        raw = self.raw
        pos = seq - 1 if 0 <= seq - 1 < len(raw.seq_ok) and raw.seq_ok[seq - 1] else raw.moved.get(seq)
        return raw.shas[32 * pos:32 * pos + 32].hex() if pos is not None else None

    @staticmethod
    def _derived(f: verify_raw.Line, expected: str | None) -> Any:
        """The re-derived decision's digest (or exception) under this call's stimulus."""
        if f.derived is None:
            return None
        request_sha = None if f.request_sha is MISSING else f.request_sha
        return f.derived if expected is None or expected == request_sha else f.derived_differs

    # -- decisions.jsonl: each points at its final raw line; re-derived when possible --------
    def _decisions(self) -> tuple[Report, int, int]:
        rep, raw, calls = Report(), self.raw, self.sched.calls
        decided = bytearray(len(self.sched))
        decided_odd: set[Any] = set()
        n_dec = 0
        chain = self.chain
        for lineno, body, d, canon in check_lines(self._lines(rep, DECISIONS), rep, DECISIONS):
            n_dec += 1
            try:
                superseding, problems = chain.see(body, d)
                for problem in problems:
                    rep.add(DECISIONS, lineno, problem)
                cid = d["call_id"]
                slot = calls.slot(cid)
                if slot is None:
                    rep.add(DECISIONS, lineno, "call_id is not in the schedule")
                    twice = cid in decided_odd
                    decided_odd.add(cid)
                else:
                    twice = bool(decided[slot])
                    decided[slot] = 1
                if twice and not superseding and not problems:
                    rep.add(DECISIONS, lineno, "call decided twice")
                pos = raw.position(d["raw_seq"])
                if pos is None:
                    rep.add(DECISIONS, lineno, f"raw_seq {d['raw_seq']} not in raw.jsonl")
                    continue
                if slot is not None:
                    chain.decided_at(slot, pos)
                if raw.line_sha(pos) != d["raw_line_sha256"]:
                    rep.add(DECISIONS, lineno, "raw_line_sha256 does not match the raw line")
                if raw.call_id(pos) != cid:
                    rep.add(DECISIONS, lineno, "raw line answers another call")
                if self.parser is not None:
                    if pos in raw.derive_errors:
                        raise raw.derive_errors[pos]
                    if "supersedes" in d or "retry_round" in d:
                        canon = dumps_line(supersede.base_record(d))   # what `decide` writes
                    if raw.derived[16 * pos:16 * pos + 16] != verify_raw.digest16(canon):
                        rep.add(DECISIONS, lineno, "decision differs from its re-derivation from the raw line")
            except (KeyError, TypeError, ValueError) as exc:
                rep.add(DECISIONS, lineno, f"missing or malformed field {exc}")
        # A final answer in the log whose decision line is gone (deleted, or a crash between the
        # two writes) would otherwise pass unseen: the estimate would just have fewer calls.
        undecided = int(np.count_nonzero(np.frombuffer(self.finals, np.uint8) > np.frombuffer(decided, np.uint8)))
        undecided += chain.stale_finals()     # a retry's answer (guardeval.run.folder.supersede)
        if undecided:
            rep.add(DECISIONS, None, f"{undecided} logged final answer(s) have no decision line (deleted, or a crash "
                                     "between the two writes); `guardeval resume RUN` re-derives them from the log "
                                     "without sending anything")
        return rep, n_dec, undecided
