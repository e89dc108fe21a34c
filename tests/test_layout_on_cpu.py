"""The package's layers hold: the core imports nothing of verl, Ray or vLLM, no module imports in a circle, and
every path that users' commands and verl configs name still imports."""

import ast
import importlib
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "reinforce_ada"
LAYERS = ("core", "integration", "platform", "tasks", "demo", "tools")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module an import statement in the file names, wherever it stands (type-checking blocks and
    function bodies included); ``from package import module`` counts as the module."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def package_graph() -> dict[str, set[str]]:
    return {name: {m for m in imports_of(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def test_the_core_imports_nothing_of_verl_ray_vllm_or_the_other_layers():
    outside = ("verl", "ray", "vllm", "transfer_queue", "omegaconf", "hydra")
    offending = {}
    for name, path in MODULES.items():
        if not name.startswith("reinforce_ada.core"):
            continue
        bad = sorted(m for m in imports_of(path) if m.split(".")[0] in outside
                     or any(m.startswith(f"reinforce_ada.{layer}") for layer in LAYERS[1:]))
        if bad:
            offending[name] = bad
    assert offending == {}
    # and importing all of it, in a fresh interpreter, loads none of them
    code = ("import sys, reinforce_ada.core.step, reinforce_ada.core.tracker, reinforce_ada.core.seeding; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {outside!r}))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert loaded.stdout.strip() == "[]"


def test_no_module_imports_in_a_circle():
    graph = package_graph()
    circles = []

    def visit(node: str, path: list[str], on_path: set[str], done: set[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in on_path:
                circles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in done:
                on_path.add(nxt)
                visit(nxt, path + [nxt], on_path, done)
                on_path.discard(nxt)
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        if start not in done:
            visit(start, [start], {start}, done)
    # a package's __init__ importing its own modules, which import the package, is no circle of ours
    circles = [c for c in circles if not (len(c) == 3 and c[0] == "reinforce_ada" and c[2] == "reinforce_ada")]
    assert circles == []


PUBLIC_CLASSES = [
    ("reinforce_ada.checkpoint", "TrackerCheckpointCallback"),  # trainer.checkpoint_callback_class
    ("reinforce_ada.reward", "compute_score"),
]


@pytest.mark.parametrize(("module", "name"), PUBLIC_CLASSES)
def test_the_class_paths_configs_name_import(module, name):
    assert callable(getattr(importlib.import_module(module), name))


def test_the_paths_in_the_packaged_config_and_verls_loaders_resolve():
    from verl.utils.import_utils import load_class_from_fqn, load_extern_object

    from reinforce_ada.integration.verl_config import CALLBACK_CLASS, MANAGER_CLASS, SAMPLER_NAME, SAMPLER_PATH

    text = (ROOT / "configs" / "reinforce_ada" / "common.yaml").read_text()
    named = set(re.findall(r": ((?:pkg://)?reinforce_ada\.[\w.]+)$", text, re.M))
    assert {MANAGER_CLASS, CALLBACK_CLASS, SAMPLER_PATH} <= named
    for fqn in re.findall(r"^\s+\w+: (reinforce_ada\.[\w.]+)$", text, re.M):
        assert isinstance(load_class_from_fqn(fqn), type), fqn
    for module in re.findall(r"path: pkg://([\w.]+)$", text, re.M):
        assert importlib.util.find_spec(module) is not None, module
    assert isinstance(getattr(importlib.import_module(SAMPLER_PATH.removeprefix("pkg://")), SAMPLER_NAME), type)
    # reward.custom_reward_function.path names a file, which verl loads by path
    score = load_extern_object(str(PACKAGE / "reward.py"), "compute_score")
    assert score("x", "so \\boxed{2}", "2")["score"] == 1.0


def test_the_verl_plugin_entry_point_names_an_importable_module():
    (point,) = [p for p in importlib.metadata.entry_points(group="verl.plugins") if p.name == "reinforce_ada"]
    assert importlib.util.find_spec(point.value) is not None


def test_studies_take_only_the_shared_section_writer_from_benchmarks_and_harnesses_nothing_from_studies():
    """The research studies (studies/) build on the harnesses' shared section writer, never on a harness's internals;
    the harnesses that measure the plug-in (benchmarks/) import nothing of the studies."""
    offending = {}
    for folder, bad in (("studies", lambda m: m.startswith("benchmarks") and m.split(".")[:2] != ["benchmarks",
                                                                                                      "results"]),
                        ("benchmarks", lambda m: m.split(".")[0] == "studies")):
        for path in sorted((ROOT / folder).rglob("*.py")):
            names = sorted(m for m in imports_of(path) if bad(m))
            if names:
                offending[module_name(path)] = names
    assert offending == {}
