"""`guardeval prompts import ts-guard FILE` and rendering of the installed TS-Guard prompt.

The reference template is read from ../shared/reference by path (third-party text never enters
the repo); every install goes to a temporary prompts root via $GUARDEVAL_PROMPTS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from guards.prompts import load_prompt
from harness.canon import file_sha256
from harness.cli import main
from harness.cli.prompts import TS_GUARD_SHA256

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference" / "ts-guard-prompt-v2.txt"

pytestmark = pytest.mark.skipif(not REFERENCE.is_file(), reason="reference template not present")


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "prompts"
    monkeypatch.setenv("GUARDEVAL_PROMPTS", str(r))
    return r


def _cli(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GUARDEVAL_PROMPTS": str(root), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def test_import_installs_a_loadable_prompt(root: Path) -> None:
    assert file_sha256(REFERENCE) == TS_GUARD_SHA256
    proc = _cli("prompts", "import", "ts-guard", str(REFERENCE), "--json", root=root)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    dest = root / "ts-guard-v2"
    assert out["path"] == str(dest) and out["prompt"] == "ts-guard-v2"
    assert sorted(p.name for p in dest.iterdir()) == ["manifest.json", "template.txt"]
    assert (dest / "template.txt").read_bytes() == REFERENCE.read_bytes()
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["files"] == {"template.txt": TS_GUARD_SHA256}
    assert manifest["messages"] == [{"role": "user", "file": "template.txt"}]
    assert manifest["placeholders"] == ["agent_action", "env_info", "user_request"]
    assert (manifest["action_format"], manifest["parser"], manifest["output_schema"]) == \
        ("python_repr", "ts-guard-tags", None)
    prompt = load_prompt("ts-guard-v2")
    assert out["prompt_sha256"] == prompt.sha256
    assert [role for role, _ in prompt.messages] == ["user"]
    assert not list(root.glob(".ts-guard-v2*"))  # no temporary folder left behind


def test_reimport_is_idempotent(root: Path) -> None:
    assert main(["prompts", "import", "ts-guard", str(REFERENCE)]) == 0
    first = load_prompt("ts-guard-v2").sha256
    assert main(["prompts", "import", "ts-guard", str(REFERENCE)]) == 0
    assert load_prompt("ts-guard-v2").sha256 == first


def test_one_changed_byte_is_refused_with_exit_2(root: Path, tmp_path: Path) -> None:
    data = bytearray(REFERENCE.read_bytes())
    data[100] ^= 0x01
    bad = tmp_path / "template.txt"
    bad.write_bytes(bytes(data))
    proc = _cli("prompts", "import", "ts-guard", str(bad), root=root)
    assert proc.returncode == 2
    assert "not the pinned" in proc.stderr and "Traceback" not in proc.stderr
    assert not root.exists() or not any(root.iterdir())  # nothing installed


def test_refused_file_does_not_replace_an_installed_prompt(root: Path, tmp_path: Path) -> None:
    assert main(["prompts", "import", "ts-guard", str(REFERENCE)]) == 0
    bad = tmp_path / "t.txt"
    bad.write_bytes(REFERENCE.read_bytes() + b"\n")
    assert main(["prompts", "import", "ts-guard", str(bad)]) == 2
    assert (root / "ts-guard-v2" / "template.txt").read_bytes() == REFERENCE.read_bytes()


def test_symlink_is_refused(root: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.txt"
    link.symlink_to(REFERENCE)
    assert main(["prompts", "import", "ts-guard", str(link)]) == 2
    assert not (root / "ts-guard-v2").exists()


def test_missing_file_and_unknown_kind(root: Path, tmp_path: Path) -> None:
    assert main(["prompts", "import", "ts-guard", str(tmp_path / "nope.txt")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["prompts", "import", "llama-guard", str(REFERENCE)])
    assert exc.value.code == 2


def _instance(**over: object) -> dict:
    row = {
        "user_request": "Pay my rent to the landlord.",
        "history": [
            {"role": "user", "content": "Pay my rent to the landlord."},
            {"role": "assistant", "content": None,
             "tool_calls": [{"name": "read_file", "arguments": {"path": "landlord-notices.txt"}}]},
            {"role": "tool", "name": "read_file", "content": "Rent: 1100. It's \"due\" now."},
        ],
        "current_action": {"name": "send_money", "arguments": {"recipient": "GB29NWBK", "amount": 1100.0,
                                                               "recurring": False}},
        "tool_descriptions": [{"name": "send_money", "description": "Send money.",
                               "parameters": {"type": "object", "required": ["recipient"]}}],
    }
    row.update(over)
    return row


def _expected(template: str, values: dict[str, str]) -> str:
    # Independent of the renderer: split on the three placeholders (each appears once).
    out = template
    for name in ("user_request", "agent_action", "env_info"):
        head, sep, tail = out.partition("{" + name + "}")
        assert sep and "{" + name + "}" not in tail
        out = head + "\0" + name + "\0" + tail
    for name, value in values.items():
        out = out.replace("\0" + name + "\0", value)
    return out


def test_rendering_matches_toolsafe(root: Path) -> None:
    assert main(["prompts", "import", "ts-guard", str(REFERENCE)]) == 0
    prompt = load_prompt("ts-guard-v2")
    inst = _instance()
    [msg] = prompt.render_messages(inst)
    # ToolSafe: template.format(agent_action={'interaction_history': ..., 'current_action': ...}),
    # i.e. str() of the dict == its Python repr. Written out by hand here:
    agent_action = (
        "{'interaction_history': [{'role': 'user', 'content': 'Pay my rent to the landlord.'}, "
        "{'role': 'assistant', 'content': None, 'tool_calls': [{'name': 'read_file', "
        "'arguments': {'path': 'landlord-notices.txt'}}]}, "
        "{'role': 'tool', 'name': 'read_file', 'content': 'Rent: 1100. It\\'s \"due\" now.'}], "
        "'current_action': {'name': 'send_money', 'arguments': {'recipient': 'GB29NWBK', "
        "'amount': 1100.0, 'recurring': False}}}"
    )
    assert agent_action == str({"interaction_history": inst["history"], "current_action": inst["current_action"]})
    env_info = str(inst["tool_descriptions"])
    assert msg == {"role": "user", "content": _expected(REFERENCE.read_text("utf-8"), {
        "user_request": inst["user_request"], "agent_action": agent_action, "env_info": env_info})}


@pytest.mark.parametrize("text", ["{user_request}", "{0}", "{agent_action} and {env_info}", "{{x}} {", "\\1 \\g<0>"])
def test_placeholder_like_base_text_renders_verbatim(root: Path, text: str) -> None:
    assert main(["prompts", "import", "ts-guard", str(REFERENCE)]) == 0
    prompt = load_prompt("ts-guard-v2")
    inst = _instance(user_request=text)
    [msg] = prompt.render_messages(inst)
    agent_action = str({"interaction_history": inst["history"], "current_action": inst["current_action"]})
    assert msg["content"] == _expected(REFERENCE.read_text("utf-8"), {
        "user_request": text, "agent_action": agent_action, "env_info": str(inst["tool_descriptions"])})
