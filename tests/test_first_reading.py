"""What a newcomer reads and trusts (issue 47, items 2 and 9), through the real command line
against real simulated servers on 127.0.0.1:

- the simulator's model id names no profile: a run answered by the `robust` profile is never
  called `shortcut` (the preflight line, compare's inputs, report.html's title);
- `plan` of a simulated pilot prints no dollar cost (the provider does not bill);
- `study status`, `study verify` and `study report` given a run folder say it is a run and which
  command reads one;
- the offline Inspect example, when tiktoken cannot download its encoding, points at the Inspect
  page's "Offline" section instead of ending on tiktoken's error alone."""

from __future__ import annotations

import importlib.util
import re
import socket
import subprocess
import sys

import pytest

from conftest import cli_env, run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def robust_and_shortcut(tmp_path_factory, small_cohort):
    """A run of the `sim` preset answered by the robust profile, its replicate answered by the
    default (shortcut) profile, the preflight of each, and the comparison of the two."""
    from guardeval.backends.sim import SimServerProcess

    base = tmp_path_factory.mktemp("names")
    out: dict[str, object] = {"a": base / "a", "b": base / "b", "cmp": base / "cmp"}
    with SimServerProcess(["--seed", "7", "--profile", "robust"], env=cli_env()) as robust, \
            SimServerProcess(["--seed", "7"], env=cli_env()) as shortcut:
        r = run_cli("preflight", "--guard", "sim", "--base-url", robust.base_url)
        assert r.code == 0, r.err
        out["preflight"] = r.out
        r = run_cli("launch", "--cohort", str(small_cohort), "--guard", "sim", "--base-url", robust.base_url,
                    "--reps", "2", "--run-dir", str(out["a"]), "--no-progress")
        assert r.code == 0, r.err
        out["launch"] = r.out + r.err
        r = run_cli("replicate", str(out["a"]), "--guard", "sim", "--base-url", shortcut.base_url,
                    "--run-dir", str(out["b"]), "--no-progress")
        assert r.code == 0, r.err
    r = run_cli("estimate", str(out["a"]), "--bootstrap", "200")
    assert r.code == 0, r.err
    r = run_cli("compare", str(out["a"]), str(out["b"]), "--bootstrap", "200", "--out", str(out["cmp"]))
    assert r.code == 0, r.err
    out["compare"] = r.out
    return out


def test_the_simulated_model_id_names_no_profile(robust_and_shortcut):
    said = robust_and_shortcut
    # The preflight, alone and in launch: the config's model, which names no profile.
    first = said["preflight"].splitlines()[0]
    assert first.startswith("preflight: sim/server-profile at http://127.0.0.1:"), first
    assert "shortcut" not in said["preflight"] and "shortcut" not in said["launch"]
    # compare's inputs (compare.md lists them as its page does): each by what answered it.
    md = (said["cmp"] / "compare.md").read_text(encoding="utf-8")
    robust_line = next(line for line in md.splitlines() if line.startswith("- robust:"))
    assert robust_line.startswith("- robust: answered by robust; config sim, model sim/server-profile; run "), robust_line
    assert "shortcut" not in robust_line
    assert "- shortcut: answered by shortcut; config sim, model sim/server-profile; run " in md
    # report.html's title (and the page's heading) name what answered, then what was asked.
    page = (said["a"] / "report.html").read_text(encoding="utf-8")
    title = re.search(r"<title>(.*?)</title>", page).group(1)
    assert title.startswith("guardeval · robust · config sim (sim/server-profile) · run "), title
    assert "shortcut" not in title


def test_plan_of_a_simulated_pilot_prints_no_dollars(robust_and_shortcut):
    r = run_cli("plan", str(robust_and_shortcut["a"]), "--bases", "16,32", "--reps", "1,2", "--target-mde", "0.3")
    assert r.code == 0, r.err
    assert "$" not in r.out, r.out
    assert "cost: none, the simulated provider does not bill" in r.out
    grid = next(line for line in r.out.splitlines() if line.lstrip().startswith("bases"))
    assert "cost" not in grid, grid
    # --json still has the cost at the config's prices, and says what it is
    r = run_cli("plan", str(robust_and_shortcut["a"]), "--bases", "16", "--reps", "1", "--json")
    assert r.code == 0, r.err
    assert '"cost_usd_upper_est": null' not in r.out and "the simulated provider does not bill" in r.out


@pytest.mark.parametrize(("command", "reads"), [("status", "status"), ("verify", "verify"), ("report", "estimate")])
def test_a_study_command_given_a_run_says_it_is_a_run(robust_and_shortcut, command, reads):
    run = robust_and_shortcut["a"]
    r = run_cli("study", command, str(run))
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    assert "is a run folder" in r.err and f"guardeval {reads} {run}" in r.err, r.err


def test_a_study_command_given_another_folder_says_it_is_not_a_study(tmp_path):
    r = run_cli("study", "status", str(tmp_path))
    assert r.code == 2 and "not a study folder (no study.json)" in r.err and "run folder" not in r.err, r.err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(importlib.util.find_spec("inspect_ai") is None or importlib.util.find_spec("tiktoken") is None,
                    reason="the inspect extra is not installed (pip install -e '.[inspect]')")
def test_the_offline_inspect_example_points_at_the_offline_section(tmp_path):
    """tiktoken finds no o200k_base in an empty cache folder and cannot download it (every
    request goes to a closed port on 127.0.0.1): the example says where the page explains it."""
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    proxy = f"http://127.0.0.1:{_closed_port()}"
    env = cli_env({"TIKTOKEN_CACHE_DIR": str(cache), "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy,
                   "https_proxy": proxy, "http_proxy": proxy, "NO_PROXY": "", "no_proxy": ""})
    proc = subprocess.run([sys.executable, "-m", "guardeval.cohorts.examples.inspect_agent", str(tmp_path / "logs")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0
    assert "docs/inspect.md, section \"Offline: tiktoken's o200k_base\"" in proc.stderr, proc.stderr[-2000:]
    assert "TIKTOKEN_CACHE_DIR" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "logs").exists()   # said before Inspect started


def test_the_reference_placeholders_say_where_the_generated_page_is():
    from conftest import REPO

    for name, marker in (("guard-config", "<!-- generated: guard-config -->"), ("cli", "<!-- generated: cli -->")):
        text = (REPO / "docs" / "reference" / f"{name}.md").read_text(encoding="utf-8")
        after = text.split(marker, 1)[1]
        assert "**Generated page.**" in after and "docs/hooks/reference.py" in after, name
        assert f"site/reference/{name}/index.html" in " ".join(after.split()), name


def test_the_docs_toolchain_is_pinned_and_builds_quietly(tmp_path):
    """Issue 47 item 10: the `docs` extra pins MkDocs and Material below their next majors and
    brings ruff (the API page's signatures are formatted, as a docs-only install would need);
    built with the environment `.ci/run` sets, `mkdocs build` prints neither Material's boxed
    end-of-life notice nor mkdocstrings' "requires either Black or Ruff"."""
    import tomllib

    from conftest import REPO

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    docs = {re.split(r"[<>=\[]", d, maxsplit=1)[0]: d for d in extras["docs"]}
    assert docs["mkdocs"].endswith(",<2") and docs["mkdocs-material"].endswith(",<10"), docs
    ruff_test = next(d for d in extras["test"] if d.startswith("ruff"))
    assert docs.get("ruff") == ruff_test, docs
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("the docs extra is not installed (pip install -e '.[docs]')")
    exported = dict(re.findall(r"^export ([A-Z0-9_]+)=(\S+)$", (REPO / ".ci" / "run").read_text(), re.M))
    assert exported.get("NO_MKDOCS_2_WARNING") == "1", exported
    env = cli_env(exported)
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout + proc.stderr
    assert "end of life" not in said and "Black or Ruff" not in said, said[-3000:]
