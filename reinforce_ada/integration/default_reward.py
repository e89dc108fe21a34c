"""Which scorer verl's default reward uses for a run's data, said before Ray starts.

Without ``reward.custom_reward_function``, verl 0.9.1 scores every response with
``verl.utils.reward_score.default_compute_score``, which picks a scorer by the row's ``data_source``. The
choice changes the reward's scale: data prepared as ``"math"`` goes to ``math_dapo``, which gives -1 or +1,
where the paper's reward (this package's ``pkg://reinforce_ada.reward``) gives 0 or 1. The exit threshold,
the pass-rate metrics and Est's weights all read that scale, so a run on the default reward says which
scorer its data will meet.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, ListConfig

PACKAGE_REWARD = "pkg://reinforce_ada.reward"

# verl 0.9.1's default_compute_score: data_source -> (module under verl.utils.reward_score, what it gives)
_ROUTES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("openai/gsm8k",), "gsm8k", "1 if the number after '####' is right, else 0"),
    (("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"), "math_reward",
     "1 if the last \\boxed{} equals the answer as a normalised string, else 0"),
    (("math_dapo", "math", "math_dapo_reasoning"), "math_dapo",
     "+1 right, -1 wrong; it reads the response's end and looks for an 'Answer:' line first"),
    (("numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc", "numina_cn_k12",
      "numina_olympiads"), "prime_math", "PRIME's math checker"),
    (("codecontests", "apps", "codeforces", "taco"), "prime_code",
     "unit tests; sandbox_fusion instead when reward.sandbox_fusion.url is set"),
    (("hiyouga/geometry3k",), "geo3k", "accuracy mixed with a format score"),
    (("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa", "searchR1_2wikimultihopqa",
      "searchR1_musique", "searchR1_bamboogle"), "search_r1_like_qa_em", "exact match"),
)
_AIME = ("math_dapo", "+1 right, -1 wrong; it reads the response's end and looks for an 'Answer:' line first")


def scorer_of(data_source: str) -> tuple[str, str] | None:
    """The module of ``verl.utils.reward_score`` that verl's default reward uses for ``data_source``, and what
    it gives; None where verl has none (it raises NotImplementedError at the first reward)."""
    for sources, module, gives in _ROUTES:
        if data_source in sources:
            return module, gives
    return _AIME if data_source.startswith("aime") else None


def uses_default_reward(config: DictConfig) -> bool:
    """True when verl scores with ``default_compute_score``: no custom function, no reward model, and one of
    verl's registered reward managers."""
    reward = config.get("reward") or {}
    if (reward.get("custom_reward_function") or {}).get("path"):
        return False
    if (reward.get("reward_model") or {}).get("enable", False):
        return False
    return (reward.get("reward_manager") or {}).get("source", "register") == "register"


def default_reward_note(config: DictConfig) -> str | None:
    """One line naming verl's default reward and the scorer each of the training data's sources goes to; None
    when the run has a reward of its own."""
    if not uses_default_reward(config):
        return None
    sources, unread = data_sources(config.data.get("train_files"))
    if sources:
        routes = "; ".join(_describe(source) for source in sorted(sources))
    else:
        routes = f"the training data's data_source was not read ({unread})"
    return (
        "no reward.custom_reward_function: verl's default_compute_score scores by data_source: "
        f"{routes}. For the paper's reward (math-verify, 1 or 0) set "
        f"reward.custom_reward_function.path={PACKAGE_REWARD} reward.custom_reward_function.name=compute_score"
    )


def data_sources(train_files) -> tuple[set[str], str]:
    """The distinct ``data_source`` values of local parquet files, and why any file was not read."""
    if isinstance(train_files, (str, os.PathLike)):
        train_files = [train_files]
    files = list(train_files) if isinstance(train_files, (list, tuple, ListConfig)) else []
    sources: set[str] = set()
    unread = []
    for path in map(str, files):
        if "://" in path or not path.endswith(".parquet") or not os.path.isfile(path):
            unread.append(f"{path}: not a local parquet file")
            continue
        try:
            import pyarrow.parquet as pq

            column = pq.read_table(path, columns=["data_source"]).column("data_source")
        except Exception as err:  # a file verl's dataset will reject with its own error later
            unread.append(f"{path}: {type(err).__name__}")
            continue
        sources.update(str(value) for value in column.unique().to_pylist() if value is not None)
    return sources, "; ".join(unread) or "no data.train_files"


def _describe(source: str) -> str:
    scorer = scorer_of(source)
    if scorer is None:
        return f"{source!r} -> no scorer (verl raises NotImplementedError)"
    module, gives = scorer
    return f"{source!r} -> {module} ({gives})"
