"""The in-process `mlx` guard on a tiny random-weight qwen2 model converted to 8-bit by mlx-lm.

Real code path throughout: mlx_lm.load, the model's chat template, quantized greedy decoding in
a worker thread. Skipped where the optional `mlx` extra is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mlx_lm")
try:
    import mlx.core  # noqa: F401  (Linux without mlx[cpu] has the package but no library)
except ImportError:  # pragma: no cover
    pytest.skip("mlx has no working native library here", allow_module_level=True)

from tests.tiny_model import tiny_model_dir

from guardeval.backends.base import Reply
from guardeval.backends.config import GuardConfig
from guardeval.backends.errors import CallFailed
from guardeval.backends.mlx_backend import MlxGuard
from guardeval.backends.parsers import get_parser
from guardeval.backends.prompts import Prompt, load_prompt
from guardeval.canon import canonical_bytes, sha256_hex
from guardeval.errors import InputError

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-models"), "terse")


@pytest.fixture(scope="session")
def chatty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-models"), "chatty")


SHORT_TEMPLATE = "Judge the step.\nRequest: {user_request}\nAction: {current_action}\nAnswer in JSON."


def write_short_prompt(root: Path) -> Prompt:
    """A short prompt folder (the tiny model prefills slowly on mlx's CPU backend)."""
    folder = root / "short-v1"
    folder.mkdir(parents=True)
    (folder / "user.txt").write_text(SHORT_TEMPLATE)
    (folder / "manifest.json").write_text(json.dumps({
        "messages": [{"role": "user", "file": "user.txt"}],
        "files": {"user.txt": sha256_hex(SHORT_TEMPLATE.encode())},
        "placeholders": ["current_action", "user_request"], "action_format": "json",
        "parser": "json-three-field", "output_schema": None}))
    return load_prompt("short-v1", root)


@pytest.fixture(scope="module")
def prompt(tmp_path_factory: pytest.TempPathFactory) -> Prompt:
    return write_short_prompt(tmp_path_factory.mktemp("prompts"))


def config(model: Path | str, **over: object) -> GuardConfig:
    return GuardConfig(**{"name": "tiny", "backend": "mlx", "model": str(model),
                          "prompt": "guardeval-json-v1", "max_tokens": 48, **over})


def instance(request: str = "Pay my rent.", amount: float = 1100.0) -> dict:
    return {
        "user_request": request,
        "history": [{"role": "user", "content": request}],
        "current_action": {"name": "send_money", "arguments": {"recipient": "GB29", "amount": amount}},
        "tool_descriptions": [{"name": "send_money", "description": "Send money.", "parameters": {}}],
    }


def test_render_is_deterministic_and_machine_independent(tiny_dir: Path, prompt: Prompt) -> None:
    guard = MlxGuard(config(tiny_dir), prompt)
    body = guard.render(instance())
    assert body == {"model": "mlx-q8", "messages": prompt.render_messages(instance()),
                    "max_tokens": 48, "temperature": 0.0, "sampler": "greedy"}
    assert canonical_bytes(guard.render(instance())) == canonical_bytes(body)
    assert str(tiny_dir.parent).encode() not in canonical_bytes(body)  # no local paths in the stimulus
    assert guard.context_tokens == 8192  # max_position_embeddings of the tiny model
    assert guard.describe()["quantization"]["bits"] == 8


async def test_send_twice_is_byte_identical(tiny_dir: Path, prompt: Prompt) -> None:
    guard = MlxGuard(config(tiny_dir, max_tokens=256), prompt)
    bodies = [guard.render(instance(f"Pay rent number {i}.", 100.0 * i)) for i in range(4)]
    first = [await guard.send(b, f"c{i}") for i, b in enumerate(bodies)]
    again = [await guard.send(b, f"c{i}") for i, b in enumerate(bodies)]
    fresh = MlxGuard(config(tiny_dir, max_tokens=256), prompt)  # a second load of the same folder
    other = [await fresh.send(b, "x") for b in bodies]
    await guard.aclose()
    await fresh.aclose()
    for a, b, c in zip(first, again, other):
        assert a.raw.encode() == b.raw.encode() == c.raw.encode()
        assert (a.status, a.content, a.finish_reason) == ("local", a.raw, b.finish_reason)
        assert a.usage["prompt_tokens"] > 10 and a.usage["cost"] == 0.0
        assert 1 <= a.usage["completion_tokens"] <= 256 and a.usage["generation_s"] > 0
        assert a.finish_reason in ("stop", "length")
        if a.finish_reason == "stop":
            # Random weights answer noise: recorded, and parsed as unparseable, never guessed.
            assert get_parser(prompt.parser)(a.content, a.finish_reason).status == "unparseable"
    assert len({r.raw for r in first}) > 1  # the answer depends on the prompt: not a constant


async def test_max_tokens_gives_length_and_truncated(chatty_dir: Path, prompt: Prompt) -> None:
    guard = MlxGuard(config(chatty_dir, max_tokens=16), prompt)
    reply = await guard.send(guard.render(instance()), "c")
    assert (reply.finish_reason, reply.usage["completion_tokens"]) == ("length", 16)
    assert get_parser(prompt.parser)(reply.content, reply.finish_reason).status == "truncated"


async def test_context_overflow_boundary(tiny_dir: Path, prompt: Prompt) -> None:
    probe = MlxGuard(config(tiny_dir, max_tokens=8), prompt)
    body = probe.render(instance())
    n = (await probe.send(body, "p")).usage["prompt_tokens"]
    fits = MlxGuard(config(tiny_dir, max_tokens=8, context_tokens=n + 8), prompt)
    assert (await fits.send(body, "a")).status == "local"
    over = MlxGuard(config(tiny_dir, max_tokens=8, context_tokens=n + 7), prompt)
    with pytest.raises(CallFailed) as exc:
        await over.send(body, "b")
    assert exc.value.error_class == "context_overflow"
    assert isinstance(exc.value.reply, Reply) and exc.value.reply.usage["prompt_tokens"] == n
    assert "never cut" in str(exc.value)


async def test_prompt_longer_than_model_context(tiny_dir: Path, prompt: Prompt) -> None:
    guard = MlxGuard(config(tiny_dir), prompt)
    with pytest.raises(CallFailed) as exc:
        await guard.send(guard.render(instance(" ".join(str(i) for i in range(6000)))), "long")
    assert exc.value.error_class == "context_overflow"
    assert exc.value.reply.usage["prompt_tokens"] > 8192
    assert (await guard.send(guard.render(instance()), "short")).status == "local"  # goes on


def test_bad_folders_and_settings(tmp_path: Path, tiny_dir: Path, prompt: Prompt) -> None:
    with pytest.raises(InputError, match="does not exist.*never downloads"):
        MlxGuard(config(tmp_path / "missing"), prompt)
    with pytest.raises(InputError, match="does not exist"):
        MlxGuard(config("Qwen/Qwen2.5-7B-Instruct"), prompt)  # a Hub id is not a folder: no download
    with pytest.raises(InputError, match="not a model folder"):
        MlxGuard(config(tmp_path), prompt)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(InputError, match="model_type"):
        MlxGuard(config(tmp_path), prompt)
    for nested in ('"x"', "5", '{"max_position_embeddings": "8192"}'):  # not a dict used to be an AttributeError
        (tmp_path / "config.json").write_text(f'{{"model_type": "llama", "text_config": {nested}}}')
        with pytest.raises(InputError, match="no max_position_embeddings"):
            MlxGuard(config(tmp_path), prompt)
    with pytest.raises(InputError, match="temperature"):
        MlxGuard(config(tiny_dir, temperature=0.7), prompt)


def test_missing_mlx_extra_is_a_clear_input_error(tiny_dir: Path, prompt: Prompt,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlx.core", None)  # what Linux without mlx[cpu] looks like
    with pytest.raises(InputError, match=r"guardeval\[mlx\]"):
        MlxGuard(config(tiny_dir), prompt)


async def test_event_loop_keeps_serving_during_generation(chatty_dir: Path, prompt: Prompt) -> None:
    guard = MlxGuard(config(chatty_dir, max_tokens=200), prompt)
    await guard.load()
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.sleep(0.05)
        t0 = time.perf_counter()
        reply = await guard.send(guard.render(instance()), "c")
        t1 = time.perf_counter()
        tg.cancel_scope.cancel()
    inside = [t for t in ticks if t0 <= t <= t1]
    gaps = [b - a for a, b in zip(inside, inside[1:])]
    assert reply.usage["completion_tokens"] == 200
    # A blocked loop would tick once or twice in the whole window; a serving one every ~10 ms.
    assert len(inside) >= 10 and max(gaps) < (t1 - t0) / 3, (len(inside), max(gaps), t1 - t0)


async def test_cancel_stops_the_thread_and_discards_the_result(chatty_dir: Path, prompt: Prompt) -> None:
    long = MlxGuard(config(chatty_dir, max_tokens=7000), prompt)  # ~a minute if never stopped
    await long.load()
    with anyio.move_on_after(0.5):
        await long.send(long.render(instance()), "cancelled")
        pytest.fail("a 7000-token generation finished in 0.5 s")
    # The abandoned thread holds the model lock until it sees the stop flag (one token later):
    # the next call runs right after, instead of waiting for 7000 tokens.
    t0 = time.perf_counter()
    short = {**long.render(instance()), "max_tokens": 4}
    reply = await long.send(short, "next")
    assert reply.usage["completion_tokens"] == 4
    assert time.perf_counter() - t0 < 15
    await long.aclose()


def test_ctrl_c_does_not_hang(chatty_dir: Path, prompt: Prompt) -> None:
    # The child takes Python's own Ctrl-C handler: a suite started as a background job (`cmd &`
    # in a script) runs with SIGINT ignored, and a child would inherit that and never stop.
    script = textwrap.dedent(f"""
        import anyio, signal, sys
        from pathlib import Path
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from guardeval.backends.config import GuardConfig
        from guardeval.backends.mlx_backend import MlxGuard
        from guardeval.backends.prompts import load_prompt
        cfg = GuardConfig(name="t", backend="mlx", model={str(chatty_dir)!r}, prompt="p", max_tokens=7000,
                          structured_output=False)  # free decoding: a long answer to interrupt
        guard = MlxGuard(cfg, load_prompt("guardeval-json-v1", Path({str(REPO / "prompts")!r})))
        inst = {{"user_request": "x", "history": [], "current_action": {{"name": "a", "arguments": {{}}}},
                 "tool_descriptions": []}}
        async def main():
            await guard.load()
            print("generating", flush=True)
            await guard.send(guard.render(inst), "c")
            print("finished", flush=True)
        anyio.run(main)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO / "harness")})
    try:
        assert proc.stdout.readline().strip() == "generating"
        time.sleep(0.5)
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        elapsed = time.perf_counter() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "finished" not in out
    assert "KeyboardInterrupt" in err
    assert elapsed < 10, elapsed  # a 7000-token generation takes about a minute here


async def test_folder_without_chat_template_stops_the_run(tmp_path: Path, tiny_dir: Path, prompt: Prompt) -> None:
    from guardeval.backends.errors import FatalError

    folder = tmp_path / "no-template"
    shutil.copytree(tiny_dir, folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    guard = MlxGuard(config(folder), prompt)
    with pytest.raises(FatalError) as exc:
        await guard.send(guard.render(instance()), "c")
    assert exc.value.error_class == "model_load" and "chat template" in str(exc.value)
