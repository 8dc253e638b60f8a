"""Generate ``hydraflow-spawns.jsonl``: a deterministic sample of HydraFlow spawns at its four
seams, for ``rensei shadow record`` (one spawn per line).

    python generate_spawns.py [--count N] [--seed S] [-o FILE]     # default: 3000, 13, stdout

Standard library only, seeded: the same arguments give the same bytes on every Python >= 3.11
(the shipped file is checked against a fresh run by the test suite). The spawns model the legacy
dials of document 001: per-role dials pinning six loops to z.ai, the repo-wide provider override,
the fleet ratchet at the streaming seam (Claude spawns promoted onto the gateway), and credit
failover to GLM while Anthropic credits are exhausted. Recorded against ``policies.json`` the
sample exercises every seam, every legacy mechanism and every divergence kind.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

SEED = 13
COUNT = 3_000

WORKER_ROLES = ("implementer", "debugger", "planner", "architect", "explorer", "test_adequacy")
#: Loops the per-role dials pin to z.ai, and loops that stay on the maintenance default.
ZAI_LOOPS = (
    "adr_reviewer",
    "wiki_compilation",
    "transcript_summary",
    "triage_honeypot",
    "term_proposer",
    "pr_unstick",
)
CLAUDE_LOOPS = ("hitl_loop", "memory_sync", "changelog_writer")
REPOS = (
    ("hydra/flow", "hydraflow"),
    ("hydra/gateway", "hydraflow"),
    ("hydra/wiki", "hydraflow"),
    ("acme/widgets", "client"),
    ("acme/portal", "client"),
    ("globex/billing", "client"),
    ("tom/dotfiles", "personal"),
)
#: ADR-0134 repo-wide provider overrides.
REPO_PROVIDER = {"hydra/wiki": "zai", "tom/dotfiles": "zai"}
CLAUDE_MODELS = ("opus", "sonnet", "claude-opus-4-1", "claude-sonnet-4-5", "")
GLM_MODELS = ("glm-5.3", "glm-4.6")
REQUIREMENTS = (None, None, None, "high-reasoning", "balanced", "opus", "sonnet")


def _accounts(rng: random.Random) -> list[dict[str, Any]]:
    accounts: list[dict[str, Any]] = [
        {"account_id": "anthropic-primary", "provider_binding": "anthropic"},
        {"account_id": "anthropic-backup", "provider_binding": "anthropic"},
        {"account_id": "zai-main", "provider_binding": "zai-harness"},
    ]
    roll = rng.random()
    if roll < 0.04:  # credits exhausted: the Anthropic accounts are drained
        for a in accounts[:2]:
            a["administrative_state"] = "draining"
    elif roll < 0.07:  # a host without the z.ai credential
        accounts[2]["configured"] = False
    elif roll < 0.10:
        accounts = accounts[:2]
    return accounts


def _model_for(provider: str, rng: random.Random, claude_model: str) -> str:
    return rng.choice(GLM_MODELS) if provider == "zai" else claude_model


def _account_for(provider: str, model: str) -> str | None:
    if provider == "zai":
        return "zai-main"
    if provider == "gateway":
        return "zai-main" if model.startswith("glm") else "anthropic-primary"
    return "anthropic-primary"


def _runner_tail(rng: random.Random, repo: str, provider: str, stages: list[Any]) -> str:
    """The agentic runners' last two stages, appended to ``stages``: the repo-wide provider
    override (ADR-0134), then credit failover to GLM while Anthropic credits are exhausted
    (ADR-0119). Returns the provider after them."""
    override = REPO_PROVIDER.get(repo)
    if override is not None and rng.random() < 0.7:
        provider = override
        stages.append(
            {
                "mechanism": "repo-provider",
                "provider": provider,
                "detail": f"repo_provider={override}",
            }
        )
    else:
        stages.append({"mechanism": "repo-provider", "provider": provider})
    if provider != "zai" and rng.random() < 0.12:
        provider = "zai"
        stages.append(
            {
                "mechanism": "credit-failover",
                "provider": "zai",
                "detail": "anthropic credits exhausted",
            }
        )
    else:
        stages.append({"mechanism": "credit-failover", "provider": provider})
    return provider


def _spawn(rng: random.Random) -> dict[str, Any]:
    seam = rng.choices(
        ("agentic-runner", "subprocess-runner", "lightweight-agent", "streaming-agent"),
        weights=(35, 15, 25, 25),
    )[0]
    repo, repo_class = rng.choice(REPOS)
    one_shot = seam == "lightweight-agent"
    if one_shot:
        principal = rng.choice(ZAI_LOOPS + CLAUDE_LOOPS)
    else:
        principal = rng.choice((*WORKER_ROLES, "reviewer", "reviewer", "adr_reviewer"))
    requirement = rng.choice(REQUIREMENTS)
    claude_model = rng.choice(CLAUDE_MODELS)
    # The dialled seams (one-shot and streaming) apply the dial or the maintenance default, then
    # the fleet ratchet; the agentic runners the dial or the default, the fleet ratchet, the
    # repo-wide override and credit failover (document 001, as HydraFlow wires them).
    dialled = seam in ("lightweight-agent", "streaming-agent")
    # Stage 1: the per-role dial (pinned loops and some reviewers start on z.ai) or the default.
    if principal in ZAI_LOOPS or (principal == "reviewer" and rng.random() < 0.3):
        stages = [
            {"mechanism": "role-dial", "provider": "zai", "detail": f"{principal}_provider=zai"}
        ]
    else:
        first = "maintenance-default" if dialled else "default"
        stages = [{"mechanism": first, "provider": "claude"}]
    provider = stages[0]["provider"]
    # Stage 2: the fleet ratchet promotes untouched Claude spawns onto the gateway (streaming
    # seam only, when the ratchet is on).
    ratchet_on = seam == "streaming-agent" and rng.random() < 0.8
    if ratchet_on and provider == "claude":
        provider = "gateway"
    stages.append(
        {
            "mechanism": "fleet-ratchet",
            "provider": provider,
            "detail": f"gateway_fleet_ratchet_enabled={'true' if ratchet_on else 'false'}",
        }
    )
    if not dialled:
        provider = _runner_tail(rng, repo, provider, stages)
    model = _model_for(provider, rng, claude_model)
    if provider == "gateway" and rng.random() < 0.1:
        model = "glm-5.3"  # the gateway binds a GLM model to z.ai
    doc: dict[str, Any] = {"seam": seam, "principal_id": principal}
    if rng.random() < 0.05:
        doc["repo"] = repo.replace("/", "-")  # a runtime slug: a lossy identity
    else:
        doc["repo"] = repo
    doc["repo_class"] = repo_class
    if requirement is not None:
        doc["model_requirement"] = requirement
    if rng.random() < 0.2:
        doc["face"] = "one-shot" if one_shot else "agentic"
    doc["accounts"] = _accounts(rng)
    if rng.random() < 0.05:  # reported by its final route only
        doc["route"] = {
            "provider": provider,
            "model": model or None,
            "account_id": _account_for(provider, model),
        }
        return doc
    doc["stages"] = stages
    doc["model"] = model or None
    doc["account_id"] = _account_for(provider, model)
    return doc


def generate(count: int = COUNT, seed: int = SEED) -> str:
    """The sample as JSON Lines text."""
    rng = random.Random(seed)
    return "".join(json.dumps(_spawn(rng), separators=(",", ":")) + "\n" for _ in range(count))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("-o", "--output", default="-")
    args = parser.parse_args(argv)
    text = generate(args.count, args.seed)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
