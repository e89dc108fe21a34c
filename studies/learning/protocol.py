"""What the learning study runs: each protocol's sizes, its methods, the overrides that make them and the n of the
GRPO matched to balance's responses; shared by the modules that run the study and those that report it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.demo.config import DemoSize
from reinforce_ada.platform.cpu import VLLM_BLOCK_SIZE
from studies.gradient_quality.design import EQUAL_SAMPLES

FILTERED, UNFILTERED = "arithmetic_filtered", "arithmetic_all"  # the held-out sets' data_source
EASY = (0.0, 0.3125)  # the paper's "easy" filter: 0 < pass rate <= 5/16
BASELINE = "grpo_n4"
# vLLM's KV block size, on every run's command line so that its record says it: the platform has set 32 since
# 2026-12-06 (prefix caching then reuses the few-shot prompt; generation twice as fast); before, vLLM-CPU used 128
KV_BLOCK = f"++actor_rollout_ref.rollout.engine_kwargs.vllm.block_size={VLLM_BLOCK_SIZE}"
VLLM_CPU_DEFAULT_BLOCK = 128  # vLLM-CPU's KV block where nothing sets one (runs before the platform set 32)


@dataclass(frozen=True)
class Size:
    """How big the benchmark is; every method gets the same numbers.

    Attributes:
        pool: Questions sampled by the base model for the filter.
        filter_k: Samples per pool question for its pass rate.
        heldout_filtered: Filtered questions held out (the rest train).
        heldout_all: Unfiltered held-out questions, from the same generator.
        run: Every training run's size, as the demo's: prompts per step, steps, evaluation every
            ``eval_every`` steps with ``eval_k`` samples per held-out question, the response limit (also
            the filter's), learning rate, mini-batch and n (``group_size``: GRPO-n4's n, Reinforce-Ada's
            group size; the matched GRPO's own n replaces it in its runs). Its ``train_prompts`` and
            ``test_prompts`` are the demo's and unused here.
        warmup_steps: verl's linear learning-rate warm-up (the rate is k/warmup_steps of ``run.lr`` in step
            k + 1 while k < warmup_steps: 0 in the first step); 0 for a constant rate from the first step.
        start: Where every run starts: ``"base"``, the base model, or ``"format"``, the checkpoint after
            ``FORMAT_STEPS`` steps of GRPO-n4 (lr 3e-5, seed ``FORMAT_SEED``) on the training prompts, made once per
            work folder.
        budget: Training responses every run draws before it stops (the third protocol's equal samples; a run stops
            after the step that reaches it, at most ``run.steps``); 0: every run is ``run.steps`` steps.
        marks: Cumulative training responses a run is evaluated at besides its start, the last one ``budget``.
    """

    pool: int = 768
    filter_k: int = 16
    heldout_filtered: int = 64
    heldout_all: int = 64
    run: DemoSize = DemoSize(steps=20, eval_every=10)
    warmup_steps: int = 0
    start: str = "base"
    budget: int = 0
    marks: tuple[int, ...] = ()

    def record(self) -> dict:
        """The size as a run's record stores it: flat, with the run's group size as ``n``."""
        run = {k: v for k, v in asdict(self.run).items() if k not in ("train_prompts", "test_prompts", "group_size")}
        extra = {"warmup_steps": self.warmup_steps, "start": self.start} if self.start != "base" or self.warmup_steps \
            else {}  # the first protocol's records predate both
        if self.budget:  # the first two protocols' records have none
            extra.update(budget=self.budget, marks=list(self.marks))
        return {"pool": self.pool, "filter_k": self.filter_k, "heldout_filtered": self.heldout_filtered,
                "heldout_all": self.heldout_all, **run, "n": self.run.group_size, **extra}

    def differs_from(self, recorded: dict) -> list[str]:
        """The keys in which a record's size differs from this one. A key the record lacks (a setting added
        after it was made) counts only if this size has it off its default."""
        mine = self.record()
        defaults = {**DemoSize().__dict__, "warmup_steps": 0, "start": "base", "budget": 0, "marks": []}
        return sorted(k for k, v in mine.items() if recorded.get(k, defaults.get(k, v)) != v or
                      (k not in recorded and k in defaults and v != defaults[k]))


DEFAULT = Size()
QUICK = Size(
    pool=12, filter_k=4, heldout_filtered=2, heldout_all=4,
    run=DemoSize(batch=2, steps=1, eval_every=1, eval_k=2, mini_batch=2),
)
METHODS = ("grpo_n4", "balance", "grpo_matched", "est", "pos")  # the order each seed runs them in

FORMAT_STEPS = 5  # the first protocol's training responses without an answer fell from 34-56% to 0-10% by step 3
FORMAT_LR = 3e-5  # the first protocol's rate
FORMAT_SEED = 1000  # its prompts' order and first samples: no run's seed (0-9) repeats them


@dataclass(frozen=True)
class Protocol:
    """One design of the learning benchmark, fixed before its runs (studies/learning/README.md says why each choice).

    Attributes:
        name: ``first``, ``second`` or ``third``.
        size: The sizes (``quick``: the same phases in minutes).
        methods: Methods each seed runs, in order.
        seeds: Seeds run by default.
        results: Default folder of the committed results (pass rates, run records, tables).
        title: Its results section's title (the section is named ``section``).
        sweep: Learning rates of GRPO-n4 seed 0 tried before any other run, in order of preference; the first
            is taken unless its filtered held-out curve drops by more than ``max_drop`` between consecutive
            evaluations (then the next, and so on). Empty: ``size.run.lr`` is used as it is.
        primary_effect: The AUC difference (points) the seed count is sized to resolve.
        pilot_seeds: Seeds run before the seed count is computed.
        most_seeds: The most seeds the count may ask for.
        per_step_control: (an adaptive arm, the GRPO that draws about its responses a step), reported as a pair of
            their own besides each arm against GRPO-n4, the GRPO run at the pilot seeds only; empty for none.
        start_per_seed: Whether seed s starts from its own format checkpoint (made with seed ``FORMAT_SEED + s``)
            rather than every seed from one.
    """

    name: str
    size: Size
    quick: Size
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    results: str
    section: str
    title: str
    sweep: tuple[float, ...] = ()
    max_drop: float = 0.05
    primary_effect: float = 5.0
    pilot_seeds: int = 4
    most_seeds: int = 10
    per_step_control: tuple[str, ...] = ()
    start_per_seed: bool = False

    @property
    def pilot_only(self) -> tuple[str, ...]:
        """Methods run at the pilot seeds only: the per-step control's GRPO."""
        return self.per_step_control[1:]


SECOND_RUN = DemoSize(steps=20, eval_every=5, eval_k=4, lr=1e-5)
THIRD_STEPS = 64  # the most steps a third-protocol run can take: GRPO-n4's 2048 responses at 32 a step
# the third protocol's per-step control: balance drew 191.5 responses a step over the second protocol's 80 steps
# (its committed records), 23.9 per prompt
PER_STEP_CONTROL_N = 24
PROTOCOLS = {
    "first": Protocol(
        "first", DEFAULT, QUICK, METHODS, (0, 1, 2), "studies/learning/results/first", "learning",
        "Learning, first protocol: Reinforce-Ada against GRPO on SmolLM2-135M, 3 seeds"),
    "second": Protocol(
        "second", Size(pool=1280, heldout_filtered=128, heldout_all=128, run=SECOND_RUN, warmup_steps=3,
                       start="format"),
        replace(QUICK, warmup_steps=1, start="format", run=replace(QUICK.run, steps=2)),  # step 2 at the full rate
        ("grpo_n4", "balance"), (0, 1, 2, 3), "studies/learning/results/second", "learning_second",
        "Learning, second protocol: balance against GRPO-n4 after the format is learned, paired by seed",
        sweep=(1e-5, 3e-6)),
    # equal responses (studies/learning/README.md, third protocol): GRPO-n4 reaches the marks at steps 16, 32, 48
    # and 64, its last; balance_inverse_budget1 draws exactly GRPO-n4's 32 a step (budget 1, one round), and every
    # other adaptive arm at least that, so each stops by step 64
    "third": Protocol(
        "third", Size(pool=1280, heldout_filtered=128, heldout_all=128, run=replace(SECOND_RUN, steps=THIRD_STEPS),
                      start="format", budget=2048, marks=(512, 1024, 1536, 2048)),  # no warm-up: amendment 1
        # GRPO-n4 draws 8 a step here: the marks at steps 1 and 2
        replace(QUICK, start="format", run=replace(QUICK.run, steps=4), budget=16, marks=(8, 16)),
        # amendment 2: the equal-samples gradient-quality study's best measured candidate
        ("grpo_n4", "balance", "balance_inverse_budget1", f"grpo_n{PER_STEP_CONTROL_N}"), (0, 1, 2, 3),
        "studies/learning/results/third",
        "learning_third", "Learning, third protocol: adaptive sampling against GRPO-n4 at equal responses drawn",
        sweep=(2e-5, 1e-5, 3e-6), per_step_control=("balance", f"grpo_n{PER_STEP_CONTROL_N}"),  # amendment 3
        start_per_seed=True),
}


def method_overrides(method: str, size: Size, matched_n: int) -> tuple[str, int, list[str]]:
    """The method's name in the results, its update group size and its Hydra overrides."""
    if method.startswith("grpo_n") or method == "grpo_matched":
        k = matched_n if method == "grpo_matched" else int(method.removeprefix("grpo_n"))
        # one round of k and nothing else: every prompt's group is its k samples, with verl's GRPO advantage
        return f"grpo_n{k}", k, [
            "reinforce_ada.enable=true", "algorithm.adv_estimator=grpo", f"actor_rollout_ref.rollout.n={k}",
            f"reinforce_ada.round_size={k}", "reinforce_ada.max_rounds=1",
        ]
    if method in ("balance", "pos", "est"):
        # the paper's rounds: M = 8, R = 4 (Est: N_max = 32)
        return method, size.run.group_size, [
            "reinforce_ada.enable=true", "algorithm.adv_estimator=reinforce_ada", f"reinforce_ada.variant={method}",
            "reinforce_ada.round_size=8", "reinforce_ada.max_rounds=4",
            f"actor_rollout_ref.rollout.n={size.run.group_size}",
        ]
    if method in EQUAL_SAMPLES.candidates:
        return method, size.run.group_size, candidate_overrides(EQUAL_SAMPLES.candidates[method], size.run.group_size)
    raise SystemExit(f"[learning] --methods: unknown method {method!r}; known: {', '.join(METHODS)}, grpo_n<k> or "
                     f"a candidate of the equal-samples gradient-quality study ({', '.join(EQUAL_SAMPLES.candidates)})")


def candidate_overrides(sampler: SamplerConfig, group_size: int) -> list[str]:
    """The Hydra overrides that make verl's run sample as ``sampler`` does, with n the run's group size: every
    setting of ``sampler`` that differs from the package's default, so that a learning arm is the configuration the
    gradient-quality study measured under the same name.

    Raises:
        ValueError: If ``sampler``'s n is not ``group_size`` (the learning runs keep the same group for every arm).
    """
    if sampler.n != group_size:
        raise ValueError(f"the candidate keeps groups of {sampler.n}, the learning runs' group size is {group_size}")
    default = SamplerConfig()
    changed = [f"reinforce_ada.{f.name}={getattr(sampler, f.name)}" for f in fields(SamplerConfig)
               if f.name != "n" and getattr(sampler, f.name) != getattr(default, f.name)]
    return ["reinforce_ada.enable=true", "algorithm.adv_estimator=reinforce_ada",
            f"actor_rollout_ref.rollout.n={group_size}", *changed]


def balance_samples_per_prompt(pass_rates: list[float], n: int, repeats: int = 20, seed: int = 0) -> float:
    """Balance's mean samples per prompt (M 8, R 4) on prompts with these pass rates, by the core sampler."""
    import numpy as np

    from reinforce_ada.core.config import SamplerConfig
    from reinforce_ada.tools.simulate import simulate

    config = SamplerConfig(n=n, round_size=8, max_rounds=4, variant="balance")
    rng = np.random.default_rng(seed)
    ids = [str(i) for i in range(len(pass_rates))]
    means = []
    for _ in range(repeats):
        def draw(prompt, count):
            return (rng.random(count) < pass_rates[int(prompt)]).astype(float).tolist()

        means.append(simulate(ids, draw, config)["summary"]["samples_per_prompt_mean"])
    return float(np.mean(means))
