"""The configuration's prose, written from its one source: the fields' docs in reinforce_ada/core/config.py.

    python -m reinforce_ada.tools.config_docs            # exit status 1, naming each file that differs
    python -m reinforce_ada.tools.config_docs --write    # rewrite them

It writes, in a checkout of the repository, configs/reinforce_ada/common.yaml (every key of the
``reinforce_ada`` section with its comment above it, as verl's own YAML has them, and the keys and
hooks the package sets in verl's sections), the variant options of the config group (balance.yaml,
pos.yaml, est.yaml), and the tables of docs/configuration.md between its two ``config_docs`` markers.
To change what a key says, change its ``doc`` in reinforce_ada/core/config.py and run ``--write``.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

import yaml

from reinforce_ada.core.config import RENAMED_KEYS, SECTION, VARIANTS, RunConfig, SamplerConfig
from reinforce_ada.integration import verl_config

ROOT = Path(__file__).resolve().parents[2]
COMMON = Path("configs/reinforce_ada/common.yaml")
DOCS = Path("docs/configuration.md")
BEGIN = "<!-- config_docs: the tables below are written by `python -m reinforce_ada.tools.config_docs --write` -->"
END = "<!-- config_docs: end -->"
WIDTH = 118
COMMAND = "python -m reinforce_ada.tools.config_docs --write"

# The keys of verl's `algorithm` section that the package sets, and what they mean there.
ALGORITHM = (
    ("adv_estimator", "reinforce_ada",
     "`reinforce_ada`: a sample's advantage is its reward minus the mean reward of every sample drawn for the prompt, "
     "its pool; `grpo`: minus the kept group's mean (verl's own estimator)."),
    ("norm_adv_by_std_in_grpo", False,
     "`false`: no division, as in the reference runs (Dr. GRPO style); `true` divides by the pool's unbiased std "
     "+ 1e-6."),
)
REFERENCE_INTRO = (
    "The reference implementation's keys (RLHFlow/Reinforce-Ada), accepted so that its launch scripts run unchanged; "
    "when set they are moved into reinforce_ada.* before Ray starts. Prefer reinforce_ada.*."
)
REFERENCE_DOCS = {
    "multiround_adaptive_downsampling": "`true`/`false`: `reinforce_ada.enable`.",
    "global_stat_est": "`true` with `adv_estimator=grpo`: the pool's baseline (`adv_estimator=reinforce_ada`); "
                       "`false`: the kept group's (`grpo`).",
}
HOOK_DOCS = {
    "manager": "verl builds its rollout manager from this class; it runs the rounds (both trainers).",
    "callback": "The V1 trainer calls this after each checkpoint; it saves the pass-rate tracker (`est`, "
                "`warm_start`) next to it.",
    "sampler": "The V1 trainer logs the metrics its replay buffer returns; this one adds reinforce_ada/*.",
    "sampler_name": "Class name in that module.",
}
COMMON_HEADER = (
    "# @package _global_\n"
    "# The Reinforce-Ada settings and hooks, shared by every option of this config group. The group switches a verl\n"
    "# GRPO run by appended overrides alone, with verl's own entry point:\n"
    "#   python -m verl.trainer.main_ppo <your GRPO overrides> hydra.searchpath=[pkg://reinforce_ada.configs] "
    "+reinforce_ada=balance\n"
    "# and `python -m reinforce_ada.main_ppo` selects it in its own config (configs/reinforce_ada.yaml).\n"
    f"# Written by `{COMMAND}` from the docs of the fields in\n"
    "# reinforce_ada/core/config.py: change them there.\n"
)
VARIANT_HEADER = (
    "# @package _global_\n"
    "# +reinforce_ada={variant}: the settings and hooks of common.yaml with reinforce_ada.variant={variant} (what it\n"
    "# does: the comment above `variant` there). Appended to a verl GRPO script\n"
    "# (hydra.searchpath=[pkg://reinforce_ada.configs] +reinforce_ada={variant}), it switches the script to\n"
    "# Reinforce-Ada and, because the script's own algorithm.adv_estimator=grpo outranks any config file, sets the\n"
    "# reference implementation's switch that turns grpo into the baseline of every sample drawn (append\n"
    "# algorithm.global_stat_est=false for the kept group's). Written by `{command}`.\n"
)


def section_fields() -> list[Field]:
    """The fields that are keys of the section, in its order: the run's first, then the sampler's (less ``n``)."""
    run = [f for f in fields(RunConfig) if "doc" in f.metadata]
    names = {f.name for f in run}
    return run + [f for f in fields(SamplerConfig) if f.name != "n" and f.name not in names]


def field_doc(f: Field) -> str:
    """A field's doc; a field of the section without one stops the generator, naming where to add it."""
    text = f.metadata.get("doc")
    if not text:
        raise SystemExit(f"{SECTION}.{f.name}: no doc; give the field metadata=doc(...) (reinforce_ada/core/config.py)")
    return text


def groups() -> Iterator[tuple[str | None, list[Field]]]:
    """``(heading, fields)`` in the section's order; the first group, before any heading, has None."""
    heading: str | None = None
    current: list[Field] = []
    for f in section_fields():
        if "heading" in f.metadata:
            if current:
                yield heading, current
            heading, current = f.metadata["heading"], []
        current.append(f)
    if current:
        yield heading, current


def former_names(current: str) -> list[str]:
    return [former for former, name in RENAMED_KEYS.items() if name == current]


def former_doc(current: str) -> str:
    return (f"The former name of `{current}`, still accepted: a value set here moves there, with a printed note "
            "(both set, to different values, is an error).")


def literal(value: Any) -> str:
    """A value as YAML writes it (a string YAML would read as something else is quoted)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return text if yaml.safe_load(f"key: {text}") == {"key": value} else repr(text)


def default(f: Field) -> Any:
    return None if f.default is MISSING else f.default


def comment(text: str, indent: int) -> list[str]:
    """``text`` as YAML comment lines of at most WIDTH characters, docs/ links as paths."""
    pad = " " * indent + "# "
    return textwrap.wrap(text, WIDTH, initial_indent=pad, subsequent_indent=pad, break_long_words=False,
                         break_on_hyphens=False)


def entry(key: str, value: Any, text: str, indent: int) -> list[str]:
    return ["", *comment(text, indent), f"{' ' * indent}{key}: {literal(value)}"]


def reference_doc(key: str, target: str | None) -> str:
    if key in REFERENCE_DOCS:
        return REFERENCE_DOCS[key]
    if key == "reinforce_ada_choice":
        ours, theirs = verl_config.REFERENCE_VARIANTS.values(), verl_config.REFERENCE_VARIANTS
        return (f"{' or '.join(f'`{k}`' for k in theirs)}: `reinforce_ada.{target}` "
                f"({' or '.join(f'`{v}`' for v in ours)}).")
    return f"`reinforce_ada.{target}`."


def common_yaml() -> str:
    """configs/reinforce_ada/common.yaml."""
    n_doc = field_doc(next(f for f in fields(SamplerConfig) if f.name == "n"))
    lines = [COMMON_HEADER.rstrip("\n"), ""]
    lines += comment(f"Adaptive sampling: Reinforce-Ada-Seq (balance, pos) or Reinforce-Ada-Est (est). {n_doc}", 0)
    lines.append(f"{SECTION}:")
    for heading, members in groups():
        if heading:
            lines += ["", f"  # ---- {heading} ----"]
        for f in members:
            lines += entry(f.name, default(f), field_doc(f), 2)
            for former in former_names(f.name):
                lines += entry(former, None, former_doc(f.name), 2)
    lines += ["", "algorithm:"]
    for key, value, text in ALGORITHM:
        lines += entry(key, value, text, 2)
    intro = comment(REFERENCE_INTRO, 2)  # above the first of them
    for key, target in verl_config.REFERENCE_KEYS.items():
        lines += ["", *intro, *comment(reference_doc(key, target), 2), f"  {key}: null"]
        intro = []
    lines += ["", "actor_rollout_ref:", "", "  rollout:", "", "    agent:"]
    lines += entry("agent_loop_manager_class", verl_config.MANAGER_CLASS, HOOK_DOCS["manager"], 6)
    lines += ["", "trainer:"]
    lines += entry("checkpoint_callback_class", verl_config.CALLBACK_CLASS, HOOK_DOCS["callback"], 2)
    lines += ["", "  v1:", "", "    sampler:", "", "      custom_sampler:"]
    lines += entry("path", verl_config.SAMPLER_PATH, HOOK_DOCS["sampler"], 8)
    lines += entry("name", verl_config.SAMPLER_NAME, HOOK_DOCS["sampler_name"], 8)
    return "\n".join(lines) + "\n"


def variant_yaml(variant: str) -> str:
    """configs/reinforce_ada/<variant>.yaml."""
    body = ["defaults:", "  - common", "  - _self_", "", f"{SECTION}:", f"  variant: {variant}", "", "algorithm:",
            "  global_stat_est: true"]
    return VARIANT_HEADER.format(variant=variant, command=COMMAND) + "\n".join(body) + "\n"


def markdown(text: str) -> str:
    """A doc as a table cell: docs/<page>.md#<anchor> becomes a link relative to docs/."""
    if "|" in text:
        raise SystemExit(f"a doc holds '|', which would split its table row: {text[:60]}...")
    return re.sub(r"docs/([\w-]+\.md)(#[\w-]+)?", lambda m: f"[{m[1]}]({m[1]}{m[2] or ''})", text)


def docs_tables() -> str:
    """The region of docs/configuration.md between BEGIN and END."""
    n_doc = field_doc(next(f for f in fields(SamplerConfig) if f.name == "n"))
    out = [BEGIN, "", markdown(n_doc)]
    for heading, members in groups():
        out += [""] + ([f"**{heading}**", ""] if heading else [])
        out += ["| key | default | meaning |", "|---|---|---|"]
        for f in members:
            text = field_doc(f) + "".join(f" Formerly `{former}`, still accepted." for former in former_names(f.name))
            out.append(f"| `{SECTION}.{f.name}` | `{literal(default(f))}` | {markdown(text)} |")
        if heading is None:
            out += [f"| `algorithm.{key}` | `{literal(value)}` | {markdown(text)} |" for key, value, text in ALGORITHM]
    return "\n".join([*out, "", END])


def expected(root: Path = ROOT) -> dict[Path, str]:
    """Each written file's path under ``root`` and the text it should hold."""
    files = {root / COMMON: common_yaml()}
    files |= {root / COMMON.parent / f"{v}.yaml": variant_yaml(v) for v in VARIANTS}
    page = (root / DOCS).read_text()
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise SystemExit(f"{DOCS}: needs one pair of the markers\n  {BEGIN}\n  {END}\naround the tables")
    before, rest = page.split(BEGIN)
    files[root / DOCS] = before + docs_tables() + rest.split(END, 1)[1]
    return files


def stale(root: Path = ROOT) -> list[Path]:
    """The written files whose text differs from what the docs give, relative to ``root``."""
    return [path.relative_to(root) for path, text in expected(root).items()
            if not path.exists() or path.read_text() != text]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reinforce_ada.tools.config_docs",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the files that differ")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository's checkout (default: this one)")
    args = parser.parse_args(argv)
    if args.write:
        for path, text in expected(args.root).items():
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                print(f"wrote {path.relative_to(args.root)}")
        return 0
    differing = stale(args.root)
    for path in differing:
        print(f"{path}: differs from the fields' docs; run `{COMMAND}`", file=sys.stderr)
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
