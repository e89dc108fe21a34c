"""What the demo runs: its sizes, its methods and the overrides that make them.

The learning benchmark (``studies/learning/``) reuses these: its runs are the demo's runs at
other sizes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DemoSize:
    """How big the demo is. Both methods get the same numbers.

    Attributes:
        train_prompts: Training questions (the dataloader cycles through them).
        test_prompts: Held-out questions.
        batch: Prompts per training step.
        steps: Training steps per method.
        eval_every: Held-out evaluation every this many steps (and after the last).
        eval_k: Samples per held-out question (Avg@k).
        max_response_tokens: Response length limit in training and evaluation.
        lr: Actor learning rate (AdamW).
        mini_batch: Prompts per optimiser step (batch / mini_batch updates per step).
        group_size: n, samples per prompt in the update (both methods; GRPO-n4).
    """

    train_prompts: int = 128
    test_prompts: int = 48
    batch: int = 8
    steps: int = 10
    eval_every: int = 5
    eval_k: int = 8
    max_response_tokens: int = 32
    lr: float = 3e-5
    mini_batch: int = 4
    group_size: int = 4


DEFAULT_SIZE = DemoSize()
# --quick: every phase once, as small as it goes; verl's start-up (Ray, FSDP worker, vLLM server,
# about a minute per method on 2 cores) is most of its time
QUICK_SIZE = DemoSize(train_prompts=8, test_prompts=8, batch=4, steps=1, eval_every=1, eval_k=4)

GROUP_SIZE = DEFAULT_SIZE.group_size  # n, for both methods (GRPO-n4)

SAMPLING_SEED = 0  # every run draws its responses from seeds (docs/algorithm.md#reproducible-rollouts)

METHODS: dict[str, list[str]] = {
    # GRPO on the adaptive path: one round of n and nothing else, so its responses are seeded as
    # Reinforce-Ada's are, and both methods draw the same first responses for a prompt
    "GRPO-n4": [
        "reinforce_ada.enable=true", "algorithm.adv_estimator=grpo", f"reinforce_ada.round_size={GROUP_SIZE}",
        "reinforce_ada.max_rounds=1",
    ],
    # the paper's settings: rounds of M = 8, at most R = 4 rounds, balance exit rule
    "Reinforce-Ada-balance": [
        "reinforce_ada.enable=true", "algorithm.adv_estimator=reinforce_ada", "reinforce_ada.variant=balance",
        "reinforce_ada.round_size=8", "reinforce_ada.max_rounds=4",
    ],
}


def demo_methods(sample_budget: float | None = None) -> dict[str, list[str]]:
    """The demo's methods and their overrides; with ``sample_budget``, Reinforce-Ada's is budgeted."""
    if sample_budget is None:
        return dict(METHODS)
    grpo, balance = METHODS.items()
    return dict([grpo, (f"{balance[0]}-budget{sample_budget:g}",
                        [*balance[1], f"reinforce_ada.sample_budget={sample_budget}"])])
