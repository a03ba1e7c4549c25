"""`guardeval prompts import ts-guard FILE` and rendering of the installed TS-Guard prompt.

Every test runs on `tests/data/ts-guard-shaped-template.txt` (written for these tests, in the
template's shape; its own SHA-256 stands in for the pin) and again on ToolSafe's template, read
from ../shared/reference by path where the development machines have it (third-party text never
enters the repo). Every install goes to a temporary prompts root via $GUARDEVAL_PROMPTS.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import guardeval.cli.prompts as prompts_cli
from guardeval.backends.prompts import load_prompt
from guardeval.canon import file_sha256
from guardeval.cli import main
from guardeval.cli.prompts import TS_GUARD_SHA256

from conftest import DATA, shared_or_skip

pytestmark = pytest.mark.fast


@pytest.fixture(params=["shaped", "toolsafe"])
def template(request, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The template file; for the shaped one, the pin the importer checks is that file's SHA-256."""
    if request.param == "toolsafe":
        return shared_or_skip("reference/ts-guard-prompt-v2.txt")
    path = DATA / "ts-guard-shaped-template.txt"
    monkeypatch.setattr(prompts_cli, "TS_GUARD_SHA256", file_sha256(path))
    return path


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "prompts"
    monkeypatch.setenv("GUARDEVAL_PROMPTS", str(r))
    return r


def test_toolsafe_template_pin():
    assert file_sha256(shared_or_skip("reference/ts-guard-prompt-v2.txt")) == TS_GUARD_SHA256


def test_the_cli_refuses_the_shaped_template_under_the_real_pin(root: Path, capsys) -> None:
    assert main(["prompts", "import", "ts-guard", str(DATA / "ts-guard-shaped-template.txt")]) == 2
    assert "not the pinned TS-Guard v2 template" in capsys.readouterr().err
    assert not root.exists()


def test_import_installs_a_loadable_prompt(root: Path, template: Path, capsys) -> None:
    pin = prompts_cli.TS_GUARD_SHA256
    assert main(["prompts", "import", "ts-guard", str(template), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    dest = root / "ts-guard-v2"
    assert out["path"] == str(dest) and out["prompt"] == "ts-guard-v2"
    assert sorted(p.name for p in dest.iterdir()) == ["manifest.json", "template.txt"]
    assert (dest / "template.txt").read_bytes() == template.read_bytes()
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["files"] == {"template.txt": pin} and out["template_sha256"] == pin
    assert manifest["messages"] == [{"role": "user", "file": "template.txt"}]
    assert manifest["placeholders"] == ["agent_action", "env_info", "user_request"]
    assert (manifest["action_format"], manifest["parser"], manifest["output_schema"]) == \
        ("python_repr", "ts-guard-tags", None)
    prompt = load_prompt("ts-guard-v2")
    assert out["prompt_sha256"] == prompt.sha256
    assert [role for role, _ in prompt.messages] == ["user"]
    assert not list(root.glob(".ts-guard-v2*"))  # no temporary folder left behind


def test_reimport_is_idempotent(root: Path, template: Path) -> None:
    assert main(["prompts", "import", "ts-guard", str(template)]) == 0
    first = load_prompt("ts-guard-v2").sha256
    assert main(["prompts", "import", "ts-guard", str(template)]) == 0
    assert load_prompt("ts-guard-v2").sha256 == first


def test_one_changed_byte_is_refused_with_exit_2(root: Path, tmp_path: Path, template: Path, capsys) -> None:
    data = bytearray(template.read_bytes())
    data[100] ^= 0x01
    bad = tmp_path / "template.txt"
    bad.write_bytes(bytes(data))
    assert main(["prompts", "import", "ts-guard", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not the pinned" in err and "Traceback" not in err
    assert not root.exists() or not any(root.iterdir())  # nothing installed


def test_refused_file_does_not_replace_an_installed_prompt(root: Path, tmp_path: Path, template: Path) -> None:
    assert main(["prompts", "import", "ts-guard", str(template)]) == 0
    bad = tmp_path / "t.txt"
    bad.write_bytes(template.read_bytes() + b"\n")
    assert main(["prompts", "import", "ts-guard", str(bad)]) == 2
    assert (root / "ts-guard-v2" / "template.txt").read_bytes() == template.read_bytes()


def test_symlink_is_refused(root: Path, tmp_path: Path, template: Path) -> None:
    link = tmp_path / "link.txt"
    link.symlink_to(template)
    assert main(["prompts", "import", "ts-guard", str(link)]) == 2
    assert not (root / "ts-guard-v2").exists()


def test_missing_file_and_unknown_kind(root: Path, tmp_path: Path, template: Path) -> None:
    assert main(["prompts", "import", "ts-guard", str(tmp_path / "nope.txt")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["prompts", "import", "llama-guard", str(template)])
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


def test_rendering_matches_toolsafe(root: Path, template: Path) -> None:
    assert main(["prompts", "import", "ts-guard", str(template)]) == 0
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
    assert msg == {"role": "user", "content": _expected(template.read_text("utf-8"), {
        "user_request": inst["user_request"], "agent_action": agent_action, "env_info": env_info})}


@pytest.mark.parametrize("text", ["{user_request}", "{0}", "{agent_action} and {env_info}", "{{x}} {", "\\1 \\g<0>"])
def test_placeholder_like_base_text_renders_verbatim(root: Path, template: Path, text: str) -> None:
    assert main(["prompts", "import", "ts-guard", str(template)]) == 0
    prompt = load_prompt("ts-guard-v2")
    inst = _instance(user_request=text)
    [msg] = prompt.render_messages(inst)
    agent_action = str({"interaction_history": inst["history"], "current_action": inst["current_action"]})
    assert msg["content"] == _expected(template.read_text("utf-8"), {
        "user_request": text, "agent_action": agent_action, "env_info": str(inst["tool_descriptions"])})
