"""AgentDojo builder (optional extra): offline replay, hijacked step placement, aliases."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.fast

pytest.importorskip("agentdojo")

from guardeval.cohorts.builders.agentdojo import SuiteReplay, SuiteStats, build_agentdojo  # noqa: E402
from guardeval.cohorts.builders.agentdojo_aliases import AGENTDOJO_ALIASES  # noqa: E402
from guardeval.cohorts.model import load_cohort  # noqa: E402
from guardeval.cohorts.report import inspect  # noqa: E402
from guardeval.cohorts.transforms import has_threat_word, validate_table, visible_names  # noqa: E402


@pytest.fixture(scope="module")
def banking(tmp_path_factory):
    out = tmp_path_factory.mktemp("ad") / "banking"
    path, stats = build_agentdojo(out, suites=["banking"], max_bases=48, seed=1)
    return load_cohort(path), stats


@pytest.mark.slow
def test_counts_and_labels(banking):
    cohort, stats = banking
    s = stats["suites"]["banking"]
    assert s["interactions"] == s["hijacked_steps"] > 0 and s["benign_steps"] > s["interactions"]
    assert stats["bases"] == 48 and stats["bases_before_sampling"] == s["benign_steps"] + s["hijacked_steps"]
    report = inspect(cohort)
    assert report["invariance"]["ok"] and set(report["by_label"]) == {"0", "1"}
    # AgentDojo's tools carry no threat words (seed 004: 0%).
    assert all(v in (0.0, None) for v in report["threat_word_share"].values())


def test_hijacked_step_follows_the_injected_observation(banking):
    cohort, _ = banking
    hijacks = [b for b in cohort.base_ids if b.endswith("/hijack")]
    assert hijacks
    for b in hijacks:
        row = cohort.instance(b, "original")
        assert row["label"] == 1 and row["history"][-1]["role"] == "tool"
        assert "<INFORMATION>" in row["history"][-1]["content"]
        rewritten = cohort.instance(b, "marker_rewrite")
        assert "<INFORMATION>" not in json.dumps(rewritten["history"])
        aliased = cohort.instance(b, "tool_alias")
        assert aliased["tool"] == AGENTDOJO_ALIASES["banking"][row["tool"]]
        assert visible_names(aliased, list(AGENTDOJO_ALIASES["banking"])) == []


def test_fast_environment_loader_equals_the_package_loader():
    replay = SuiteReplay("v1.2", "banking", "important_instructions")
    ut = replay.suite.user_tasks["user_task_0"]
    it = replay.suite.injection_tasks["injection_task_0"]
    cands, first = replay.candidates(ut)
    assert cands and first is not None
    replay.attack.get_injection_candidates = lambda _ut: cands
    injections = replay.attack.attack(ut, it)
    assert replay.environment(injections) == replay.suite.load_and_inject_default_environment(injections)


def test_alias_tables_cover_the_installed_suites():
    from agentdojo.task_suite.load_suites import get_suite

    assert set(AGENTDOJO_ALIASES) == {"banking", "slack", "travel", "workspace"}
    merged: dict[str, str] = {}
    for suite, table in AGENTDOJO_ALIASES.items():
        assert validate_table(table) == table
        assert {t.name for t in get_suite("v1.2", suite).tools} == set(table)
        assert not any(has_threat_word(a) for a in table.values())
        for k, v in table.items():
            assert merged.setdefault(k, v) == v  # shared names alias identically across suites


def test_unknown_suite_is_an_input_error(tmp_path):
    from guardeval.errors import InputError

    with pytest.raises(InputError, match="unknown suite"):
        build_agentdojo(tmp_path / "x", suites=["nosuch"])
    assert SuiteStats().interactions == 0


def test_building_twice_is_byte_identical(banking, tmp_path):
    cohort, _ = banking
    path, _ = build_agentdojo(tmp_path / "again", suites=["banking"], max_bases=48, seed=1)
    for name in ("cohort.json", "instances.jsonl"):
        assert (path / name).read_bytes() == (cohort.path / name).read_bytes()


def test_file_creating_replays_are_byte_identical_at_the_replay_clock():
    # user_task_32 creates a file and user_task_13 appends to one before a later step, so the
    # tool's `last_modified` stamp reaches a base's history; with the wall clock it differed per build.
    import orjson

    from guardeval.cohorts.builders.agentdojo import REPLAY_CLOCK

    replay = SuiteReplay("v1.2", "workspace", "important_instructions")
    injections = [replay.suite.injection_tasks[i] for i in ("injection_task_0", "injection_task_1")]

    def build() -> bytes:
        return orjson.dumps([replay.user_task_bases(replay.suite.user_tasks[u], injections, SuiteStats())
                             for u in ("user_task_32", "user_task_13")])

    first, second = build(), build()
    assert first == second
    assert first.count(f"last_modified: {REPLAY_CLOCK:%Y-%m-%d %H:%M:%S}".encode()) >= 2


def test_frozen_clock_changes_only_now_and_is_undone():
    import datetime

    import agentdojo.default_suites.v1.tools.cloud_drive_client as drive

    from guardeval.cohorts.builders.frozen_clock import frozen_clock

    at = datetime.datetime(2024, 5, 15, 12, 0)
    with frozen_clock("agentdojo", at):
        dt = drive.datetime.datetime
        assert dt.now() == at and dt.today() == at
        made = dt(2020, 1, 2, 3, 4)
        assert type(made) is datetime.datetime and isinstance(made, dt)
        assert dt.fromisoformat("2020-01-02T03:04:00") == made and drive.datetime.timedelta is datetime.timedelta
        assert dt.now(datetime.UTC) == at.replace(tzinfo=datetime.UTC)
    assert drive.datetime is datetime and drive.datetime.datetime.now() != at
