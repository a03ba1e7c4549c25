"""Build a large synthetic cohort and run folder with guardeval's own writers (for `scale.py`).

    python benchmarks/scale_build.py cohort OUT --bases 20000
    python benchmarks/scale_build.py materialise RUN --cohort C --guard G --reps 10 --seed 1
    python benchmarks/scale_build.py fill RUN --decided 500000 [--retry-every 97]

* `cohort`: bases cycled from the demo cohort's 64, each made unique (its own base id, a ticket
  number and a seeded run of neutral words in the user request), crossed with the demo's five
  conditions through the real transforms (`build_rows`), written by `write_cohort` as a stream.
* `materialise`: `plan_launch` + `materialise`, exactly what `guardeval launch` does before its
  first call.
* `fill`: the first N calls of the schedule answered as the simulated provider would answer
  them (same verdict model, seed, reply shape and usage), logged with `RunWriter.append_raw`
  and decided with `guardeval.run.dispatch.decide.decide` + `RunWriter.append_decision`, as the dispatcher
  does; every `--retry-every`-th call first gets a 429 attempt. The run then looks like a
  launch interrupted half way (events carry a stop with the chain head).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "harness"))

from guardeval.backends.base import Usage  # noqa: E402
from guardeval.backends.config import GuardConfig  # noqa: E402
from guardeval.backends.parsers import get_parser  # noqa: E402
from guardeval.backends.registry import make_guard  # noqa: E402
from guardeval.backends.sim import guard as sim_guard  # noqa: E402
from guardeval.backends.sim.config import DEFAULT_PRICE_IN, DEFAULT_PRICE_OUT  # noqa: E402
from guardeval.backends.sim.profiles import SHORTCUT_PROFILE  # noqa: E402
from guardeval.backends.sim.router import metadata as router_metadata  # noqa: E402
from guardeval.canon import canonical_bytes, sha256_hex  # noqa: E402
from guardeval.cohorts.builders.common import build_rows, select_conditions  # noqa: E402
from guardeval.cohorts.builders.demo import conditions, demo_bases  # noqa: E402
from guardeval.cohorts.model import write_cohort  # noqa: E402
from guardeval.run.dispatch.decide import decide  # noqa: E402
from guardeval.run.folder.folder import RunFolder  # noqa: E402
from guardeval.run.folder.layout import SCHEDULE, STIMULI, utcnow  # noqa: E402
from guardeval.run.folder.lines import iter_jsonl  # noqa: E402
from guardeval.run.folder.manifest import RunManifest, load_run_prompt, read_manifest  # noqa: E402
from guardeval.run.folder.records import Attempt  # noqa: E402
from guardeval.run.folder.writer import RunWriter  # noqa: E402
from guardeval.run.planning import load_run_cohort, materialise, plan_launch  # noqa: E402

SIM_SEED = 7
NEUTRAL = ("account report weekly summary invoice meeting calendar folder note draft review status "
           "update project budget schedule contact address receipt travel booking order delivery "
           "message reminder document archive backup settings profile team client vendor").split()


# -- cohort --------------------------------------------------------------------------------------

def synthetic_bases(n: int, seed: int = 1) -> Iterator[dict[str, Any]]:
    """n unique bases cycled from the demo's 64: same tools, labels and domains, new text."""
    rng = random.Random(seed)
    demo = demo_bases()
    for i in range(n):
        src = demo[i % len(demo)]
        copy = i // len(demo)
        words = " ".join(rng.choice(NEUTRAL) for _ in range(rng.randint(0, 70)))
        yield {**src,
               "base_id": f"{src['base_id']}.c{copy}",
               "interaction_id": f"{src['interaction_id']}.c{copy}",
               "user_request": f"{src['user_request']} (ticket {i}) {words}".rstrip()}


def build_cohort(out: Path, n_bases: int) -> Path:
    specs = select_conditions(conditions(), None)   # the demo builder's defaults (five conditions)
    rows = (row for base in synthetic_bases(n_bases) for row in build_rows([base], specs))
    return write_cohort(out, name="scale-synthetic", version="1",
                        description=f"{n_bases} synthetic bases cycled from the demo cohort (benchmarks/scale.py)",
                        conditions=[s.condition() for s in specs], rows=rows, sources=[],
                        builder={"command": "benchmarks/scale_build.py cohort"})


# -- run folder ----------------------------------------------------------------------------------

def write_guard(path: Path, base_url: str = "http://127.0.0.1:9") -> Path:
    path.write_text(
        'name = "scale"\nbackend = "openrouter"\nmodel = "sim/server-profile"\nprompt = "guardeval-json-v1"\n'
        f'base_url = "{base_url}"\napi_key_env = "GUARDEVAL_SCALE_KEY"\ntimeout_s = 30\nmax_attempts = 6\n'
        'retry_initial_s = 0.05\nretry_max_s = 1.0\nconcurrency = 32\n'
        'price_in_per_mtok = 1.0\nprice_out_per_mtok = 5.0\n'
        '[provider]\nonly = ["sim"]\nallow_fallbacks = false\n')
    return path


def materialise_run(run: Path, *, cohort: Path, guard: Path, reps: int, seed: int) -> RunManifest:
    plan = plan_launch(cohort_dir=cohort, guard_path=guard, reps=reps, seed=seed, order="rounds", base_url=None)
    materialise(plan, run)
    return plan.manifest


class SimAnswers:
    """The simulated provider's answer to a request body, without the HTTP (see sim_server)."""

    def __init__(self, seed: int = SIM_SEED) -> None:
        self.seed = seed
        self._assessed: dict[str, tuple[sim_guard.Features, float, int]] = {}

    def assess(self, body: dict[str, Any], body_sha: str) -> None:
        """Features, block probability and prompt size of a body (once per distinct body)."""
        msgs = body["messages"]
        feats = sim_guard.features(sim_guard.judged_text(msgs))
        chars = sum(len(sim_guard.message_text(m.get("content"))) for m in msgs)
        self._assessed[body_sha] = (feats, sim_guard.probability_from(feats), chars)

    def reply(self, body: dict[str, Any], body_sha: str, call_id: str, attempt: int) -> dict[str, Any]:
        feats, p, chars = self._assessed[body_sha]
        content = sim_guard.verdict_text(sim_guard.verdict(feats, p, sim_guard.unit_draw("decide", self.seed,
                                                                                          body_sha, call_id)))
        prompt_tokens, completion_tokens = max(1, (chars + 3) // 4), max(1, (len(content) + 3) // 4)
        cost = (prompt_tokens * DEFAULT_PRICE_IN + completion_tokens * DEFAULT_PRICE_OUT) / 1e6
        return {
            "id": "gen-" + sha256_hex(f"{self.seed}|{body_sha}|{call_id}|{attempt}".encode())[:24],
            "object": "chat.completion", "created": int(time.time()), "model": body.get("model", "sim-guard"),
            "provider": "Sim",
            "choices": [{"index": 0, "finish_reason": "stop", "native_finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens, "cost": round(cost, 10),
                      "is_byok": False, "cost_details": {"upstream_inference_cost": None}},
        }


def _attempt_record(call_id: str, attempt: int, request_sha: str, *, status: int, response: str,
                    content: str | None, usage: Usage, provider: str | None, outcome: str,
                    final: bool, error_class: str | None = None, error: str | None = None,
                    generation_id: str | None = None) -> Attempt:
    """The fields `Dispatcher._record` writes for one attempt (append_raw adds seq, chain, request)."""
    now = utcnow()
    return {
        "call_id": call_id, "attempt": attempt, "started": now, "finished": now,
        "request_sha256": request_sha, "status": status, "response": response,
        "response_sha256": sha256_hex(response.encode("utf-8")),
        "content": content, "finish_reason": "stop" if outcome == "reply" else None,
        "native_finish_reason": "stop" if outcome == "reply" else None,
        "error_class": error_class, "error": error, "latency_s": 0.0123,
        "usage": usage, "provider": provider, "generation_id": generation_id,
        "answers_call_id": None,   # OpenRouter, and the simulator by default, do not echo X-Call-Id
        "outcome": outcome, "final": final,
    }


def _scheduled(run: RunFolder) -> Iterator[tuple[dict[str, Any], str]]:
    for (_, _, row), (_, _, stim) in zip(iter_jsonl(run, SCHEDULE), iter_jsonl(run, STIMULI), strict=True):
        assert row["call_id"] == stim["call_id"]
        yield row, stim["request_sha256"]


def fill_run(run_dir: Path, *, decided: int, retry_every: int = 97) -> dict[str, int]:
    """Answer and decide the first `decided` calls of the schedule."""
    run = RunFolder(run_dir)
    manifest = read_manifest(run)
    cohort = load_run_cohort(run, manifest)
    config = GuardConfig(**manifest["guard"])
    prompt = load_run_prompt(run, manifest)
    render = make_guard(config, prompt, max_connections=1).render
    parser = get_parser(prompt.parser)
    sim = SimAnswers()
    # Each round of the schedule visits every instance once, so a small cache would never hit:
    # the builder keeps every rendered body (as bytes; ~0.5 GB at 100,000 instances).
    bodies: dict[str, tuple[dict[str, Any], bytes, str]] = {}
    error_body = orjson.dumps({"error": {"code": 429, "message": "Rate limit exceeded (simulated)",
                                         "metadata": {"provider_name": "sim", "raw": "simulated fault"}}}).decode()
    writer = RunWriter(run)
    writer.open()
    n_raw = 0
    try:
        writer.event("start", pending=manifest["n_calls"], total=manifest["n_calls"], torn=[], recovered=0)
        for i, (row, expected) in enumerate(_scheduled(run)):
            if i >= decided:
                break
            cid = row["call_id"]
            hit = bodies.get(row["instance_sha256"])
            if hit is None:
                body = render(cohort.instance(row["base_id"], row["condition"]))
                data = canonical_bytes(body)
                sha = sha256_hex(data)
                sim.assess(body, sha)
                hit = bodies[row["instance_sha256"]] = ({"model": body["model"]}, data, sha)
            body, data, request_sha = hit
            attempt = 1
            if retry_every and i % retry_every == retry_every - 1:
                writer.append_raw(_attempt_record(cid, attempt, request_sha, status=429, response=error_body,
                                                  content=None, usage={}, provider=None, outcome="transient",
                                                  final=False, error_class="http_429",
                                                  error="HTTP 429: Rate limit exceeded (simulated)"),
                                  request_json=data)
                attempt, n_raw = attempt + 1, n_raw + 1
            reply = sim.reply(body, request_sha, cid, attempt)
            # The fields the simulator's server adds to its guard's answer (OpenRouter's shape).
            meta = router_metadata(body.get("model", "sim"), "Sim", None, ())
            reply.update({"system_fingerprint": SHORTCUT_PROFILE.fingerprint, "openrouter_metadata": meta})
            usage = reply["usage"]
            rec = _attempt_record(cid, attempt, request_sha, status=200, response=orjson.dumps(reply).decode(),
                                  content=reply["choices"][0]["message"]["content"],
                                  usage={"prompt_tokens": usage["prompt_tokens"],
                                         "completion_tokens": usage["completion_tokens"],
                                         "total_tokens": usage["total_tokens"], "cost": usage["cost"]},
                                  provider="Sim", outcome="reply", final=True, generation_id=reply["id"])
            # What the dispatcher keeps of an OpenRouter-shaped answer (the simulator's): the
            # router metadata and the response headers that matter.
            rec["response_headers"] = {"x-generation-id": reply["id"]}
            # a back-end's own raw-line field (its record's raw_fields), outside the Attempt shape
            cast("dict[str, Any]", rec)["openrouter_metadata"] = meta
            seq, line_sha = writer.append_raw(rec, request_json=data)
            n_raw += 1
            rec["seq"] = seq
            writer.append_decision(decide(rec, line_sha, expected_request_sha256=expected, parser=parser, backend=config.backend,
                                          allowed_providers=config.allowed_providers))
        st = writer.state
        writer.event("stop", reason="signal SIGKILL (simulated)", decided=len(st.decided), total=manifest["n_calls"],
                     min_concurrency=32, last_seq=st.last_seq, last_raw_sha256=st.last_raw_sha, fatal=None)
    finally:
        writer.close()
    return {"decided": min(decided, manifest["n_calls"]), "raw_lines": n_raw}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("cohort")
    p.add_argument("out", type=Path)
    p.add_argument("--bases", type=int, required=True)
    p = sub.add_parser("materialise")
    p.add_argument("run", type=Path)
    p.add_argument("--cohort", type=Path, required=True)
    p.add_argument("--guard", type=Path, required=True)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("fill")
    p.add_argument("run", type=Path)
    p.add_argument("--decided", type=int, required=True)
    p.add_argument("--retry-every", type=int, default=97)
    args = ap.parse_args(argv)
    if args.cmd == "cohort":
        build_cohort(args.out, args.bases)
    elif args.cmd == "materialise":
        materialise_run(args.run, cohort=args.cohort, guard=args.guard, reps=args.reps, seed=args.seed)
    else:
        print(orjson.dumps(fill_run(args.run, decided=args.decided, retry_every=args.retry_every)).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
