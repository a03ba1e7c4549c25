"""Guards of known character (issue 28 §1): the simulated guard's cue weights as profiles, chosen
per server and recorded in every answer, and the truth they imply on a cohort (the expected block
probability of every instance, the true Δ and corrected effect per condition)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from guardeval.backends.config import load_guard_config
from guardeval.backends.prompts import load_prompt
from guardeval.backends.registry import make_renderer
from guardeval.backends.sim import SimServerProcess
from guardeval.backends.sim import guard as sim_guard
from guardeval.backends.sim.config import ServerConfig
from guardeval.backends.sim.profiles import PROFILES, SHORTCUT_PROFILE, load_profile
from guardeval.backends.sim.truth import expected_block_probabilities, true_effects
from guardeval.canon import canonical_sha256
from guardeval.cohorts.model import load_cohort
from guardeval.errors import InputError

from conftest import DEMO_COHORT, cli_env, run_cli

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def demo_rows() -> list[dict]:
    return list(load_cohort(DEMO_COHORT).iter_instances())


def test_shortcut_is_todays_decision_model() -> None:
    w = SHORTCUT_PROFILE.weights
    assert (w.base, w.tool, w.marker, w.prose) == (-2.0, 0.9, 1.1, 0.25)
    assert ServerConfig().profile is SHORTCUT_PROFILE
    assert set(PROFILES) >= {"shortcut", "robust", "alias-sensitive"}
    robust, alias = PROFILES["robust"].weights, PROFILES["alias-sensitive"].weights
    assert robust.tool == 0 and robust.marker == 0           # reads no tool-name or marker cue
    assert alias.tool >= 2.5 * w.tool                        # several times today's tool-name weight
    # Distinct fingerprints: a run's raw log says which guard it met.
    assert len({p.fingerprint for p in PROFILES.values()}) == len(PROFILES)


def test_truth_on_the_demo_cohort(demo_rows: list[dict]) -> None:
    truths = {name: true_effects(demo_rows, p) for name, p in PROFILES.items()}
    robust = truths["robust"].effects
    for c, e in robust.items():
        # By construction: the demo's conditions change tool names, markers and layout, never prose.
        assert (e.delta in (None, 0.0)) and (e.delta_minus_placebo in (None, 0.0)), (c, e)
    alias = {name: t.effects["tool_alias"].delta_minus_placebo for name, t in truths.items()}
    assert alias["alias-sensitive"] < alias["shortcut"] < alias["robust"] == 0.0
    assert alias["alias-sensitive"] < -0.7 and alias["shortcut"] < -0.3
    # The placebo changes no cue: no profile has a true placebo effect.
    assert all(t.effects["format_placebo"].delta == 0.0 for t in truths.values())
    # The truth is the mean, over bases, of the per-instance probabilities the server uses.
    p = truths["shortcut"].probabilities
    bases = {b for b, _ in p}
    want = sum(p[(b, "tool_alias")] - p[(b, "original")] for b in bases) / len(bases)
    assert truths["shortcut"].effects["tool_alias"].delta == pytest.approx(want)
    assert len(p) == len(demo_rows) == 320


def test_the_server_decides_and_answers_under_its_profile(demo_rows: list[dict]) -> None:
    config = load_guard_config("sim")
    render = make_renderer(config, load_prompt(config.prompt))
    inst = next(r for r in demo_rows if r["condition"] == "original")
    body = render(inst)
    robust = PROFILES["robust"]
    p = expected_block_probabilities([inst], robust, render=render)[(inst["base_id"], "original")]
    assert p == pytest.approx(sim_guard.block_probability(body["messages"], robust.weights))
    assert p != pytest.approx(sim_guard.block_probability(body["messages"]))   # another guard than shortcut
    with SimServerProcess(["--seed", "5", "--profile", "robust"], env=cli_env()) as sim:
        url = sim.base_url
        for i in range(12):
            cid = f"call-{i}"
            req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", "X-Call-Id": cid})
            reply = json.loads(urllib.request.urlopen(req, timeout=10).read())
            assert reply["system_fingerprint"] == robust.fingerprint
            want = sim_guard.decide(body["messages"], seed=5, body_sha256=canonical_sha256(body), call_id=cid,
                                    w=robust.weights)
            assert json.loads(reply["choices"][0]["message"]["content"]) == want
        stats = json.loads(urllib.request.urlopen(url + "/stats", timeout=10).read())
        assert stats["profile"]["name"] == "robust" and stats["profile"]["tool"] == 0


def test_a_profile_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text('name = "mine"\nbase = -1.0\ntool = 0.5\nmarker = 2.0\nprose = 0.0\ndescription = "a test"\n')
    prof = load_profile(str(f))
    assert prof.name == "mine" and prof.weights.marker == 2.0 and prof.fingerprint.startswith("sim-mine-")
    with SimServerProcess(["--profile", str(f)], env=cli_env()) as sim:
        stats = json.loads(urllib.request.urlopen(sim.base_url + "/stats", timeout=10).read())
        assert stats["profile"]["fingerprint"] == prof.fingerprint


@pytest.mark.parametrize("text, field", [
    ('name = "x"\nbase = 1\ntool = 1\nmarker = 1\n', "prose"),
    ('name = "x"\nbase = 1\ntool = 1\nmarker = 1\nprose = nan\n', "prose"),
    ('name = "x"\nbase = 1e9\ntool = 1\nmarker = 1\nprose = 1\n', "base"),
    ('name = "../x"\nbase = 1\ntool = 1\nmarker = 1\nprose = 1\n', "name"),
    ('name = "x"\nbase = 1\ntool = 1\nmarker = 1\nprose = 1\nsecret = 2\n', "secret"),
    ('name = "x"\nbase = true\ntool = 1\nmarker = 1\nprose = 1\n', "base"),
])
def test_a_bad_profile_file_is_refused(tmp_path: Path, text: str, field: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(InputError) as exc:
        load_profile(str(f))
    assert exc.value.field == field and str(f) in str(exc.value)
    r = run_cli("sim-server", "--profile", str(f))
    assert r.code == 2 and f"field '{field}'" in r.err and "Traceback" not in r.err


def test_an_unknown_profile_is_refused() -> None:
    r = run_cli("sim-server", "--profile", "cautious")
    assert r.code == 2 and "shortcut, robust, alias-sensitive" in r.err and "Traceback" not in r.err
    r = run_cli("sim-server", "--profile", "bad.toml")
    assert r.code == 2 and "no such file" in r.err
