"""The documentation stays true to the code: the configuration reference, links, the commands it quotes, and the
front door's size."""

import dataclasses
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from reinforce_ada.core.config import RENAMED_KEYS, SamplerConfig
from reinforce_ada.tools import config_docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
# every page a reader opens: the front door, the docs, the harnesses' results and the studies' pages
PAGES = [ROOT / "README.md", *DOCS, ROOT / "benchmarks" / "RESULTS.md", *sorted((ROOT / "studies").rglob("*.md"))]


def test_the_yaml_comments_and_the_docs_tables_are_written_from_the_field_docs():
    """The fields' docs in reinforce_ada/core/config.py are the one source of what each key says."""
    assert config_docs.stale() == [], "run `python -m reinforce_ada.tools.config_docs --write`"


def test_the_yaml_section_holds_every_key_with_its_default_and_a_comment_above_each():
    text = (ROOT / config_docs.COMMON).read_text()
    section = yaml.safe_load(text)["reinforce_ada"]
    defaults = {f.name: f.default for f in config_docs.section_fields()}
    assert section == {**defaults, **dict.fromkeys(RENAMED_KEYS)}  # a former name is declared, unset
    assert set(defaults) == {f.name for f in dataclasses.fields(SamplerConfig)} - {"n"} | {"enable", "loopback"}
    lines = text.splitlines()
    leaves = [i for i, line in enumerate(lines) if re.match(r"\s+\w+: \S", line)]
    assert leaves and all(lines[i - 1].lstrip().startswith("# ") for i in leaves), "verl-style: a comment above each"


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(headings: list[str]) -> set[str]:
    """GitHub's anchors of a page's headings: a repeated heading's get -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for heading in headings:
        base = slug(heading)
        out.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return out


def test_every_relative_link_in_the_docs_points_at_a_file_and_heading_that_exist():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
                if anchor not in anchors(headings):
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_no_tracked_file_cites_a_document_the_repository_does_not_hold():
    names = ["SPEC" + ".md", "STACK" + ".md"]  # split, so that this file does not cite them itself
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    citing = [
        name
        for name in tracked
        if (ROOT / name).is_file()
        and (ROOT / name).suffix in {".py", ".md", ".sh", ".yaml", ".toml", ".txt"}
        and any(doc in (ROOT / name).read_text(errors="ignore") for doc in names)
    ]
    assert citing == []


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[:4] == ["The two commands", "Switch your verl GRPO script", "Results", "Documentation"], sections
    commands = text.split("## The two commands")[1].split("```bash")[1].split("```")[0]
    assert [line.split("#")[0].strip() for line in commands.strip().splitlines()] == [
        "bash scripts/demo.sh", "bash scripts/test.sh"]
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b|\d+ min\b", commands)  # measured times live in the docs
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    assert "hydra.searchpath=[pkg://reinforce_ada.configs] +reinforce_ada=balance" in text  # the switch
    # Results: claim | number | source, one line each, every row with a link to where the number comes from
    rows = [line for line in text.split("## Results")[1].split("## Documentation")[0].splitlines()
            if line.startswith("|") and not line.startswith("|---") and not line.startswith("| claim")]
    assert rows and all(len(row.strip("|").split(" | ")) == 3 and "](" in row.split(" | ")[-1] for row in rows), rows


OURS = ("reinforce_ada", "benchmarks", "studies")  # modules whose parsers are checked; others must only exist
SCRIPTS = [*sorted((ROOT / "scripts").glob("*.sh")), *sorted((ROOT / "benchmarks").glob("*.sh"))]
SEPARATORS = {"&&", "||", ";", "|"}


def quoted_commands(text: str) -> list[tuple[str, list[str] | None]]:
    """Every ``python -m <module> [words]`` in a Markdown page's code (fenced blocks and inline spans): the module and
    the words up to the end of the command, usage brackets and alternatives resolved (``[--quick]``, ``a|b``);
    ``None`` for a module named without any words. ``python -m benchmarks.<name>`` names no module."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    spans = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    spans += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", re.sub(r"^```.*?^```", "", text,
                                                                                      flags=re.S | re.M))]
    commands = []
    for span in spans:
        for match in re.finditer(r"python3? -m ([A-Za-z_][\w.]*)(.*)", span):
            module, rest = match.groups()
            if module.endswith(".") or rest.startswith("<"):
                continue
            words = []
            for word in shlex.split(re.sub(r"<[^<>]*>", "<placeholder>", rest), comments=True):
                if word in SEPARATORS or word.startswith((">", "2>")):
                    break
                word = word.strip("[]")
                words.append(word.split("|")[0] if "|" in word and not word.startswith("-") else word)
            commands.append((module, words or None))
    return commands


def parser_messages(commands: list[tuple[str, list[str] | None]]) -> list[str]:
    """:mod:`command_parsers`' verdict on each command, from a fresh interpreter (it runs modules as ``-m`` does)."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "command_parsers.py")], input=json.dumps(commands),
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_every_python_m_command_quoted_runs_a_module_whose_parser_takes_its_flags():
    """A reader can paste what a page quotes: each ``python -m`` names a module that exists, and the module's own
    parser (built, not run) accepts the quoted flags and values, placeholders filled in; the scripts' modules must
    build their parsers too."""
    quoted = {(page.relative_to(ROOT).as_posix(), module, tuple(words) if words else None)
              for page in PAGES for module, words in quoted_commands(page.read_text())}
    named = {(script.relative_to(ROOT).as_posix(), module, None) for script in SCRIPTS
             for module in re.findall(r"-m ((?:reinforce_ada|benchmarks|studies|verl)[\w.]*)", script.read_text())}
    modules = {module for _, module, _ in quoted | named}
    assert {"reinforce_ada.main_ppo", "reinforce_ada.demo", "studies.learning", "benchmarks.rollout_time"} <= modules
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    assert missing == []
    ours = sorted(((page, module, words) for page, module, words in quoted | named if module.split(".")[0] in OURS),
                  key=lambda command: (command[0], command[1], command[2] or ()))
    messages = parser_messages([(module, list(words) if words else None) for _, module, words in ours])
    refused = [f"{page}: python -m {module} {' '.join(words or ())}: {message}"
               for (page, module, words), message in zip(ours, messages) if message]
    assert refused == []
