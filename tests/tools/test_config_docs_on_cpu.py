"""The generator of the configuration's prose: it finds a file that differs from the fields' docs, and rewrites it."""

import shutil
from pathlib import Path

import pytest
import yaml

from reinforce_ada.core.config import VARIANTS
from reinforce_ada.tools import config_docs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path):
    """The written files, copied into a checkout of their own."""
    for path in config_docs.expected(ROOT):
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return tmp_path


def test_a_hand_edited_comment_fails_the_check_until_the_files_are_written_again(checkout, capsys):
    common = checkout / config_docs.COMMON
    common.write_text(common.read_text().replace("# M: samples drawn", "# M: the samples drawn"))
    assert config_docs.main(["--root", str(checkout)]) == 1
    assert str(config_docs.COMMON) in capsys.readouterr().err
    assert config_docs.main(["--root", str(checkout), "--write"]) == 0
    assert config_docs.main(["--root", str(checkout)]) == 0
    assert common.read_text() == (ROOT / config_docs.COMMON).read_text()


def test_only_the_marked_region_of_the_docs_page_is_written(checkout):
    page = checkout / config_docs.DOCS
    text = page.read_text().replace("| `reinforce_ada.round_size` |", "| `reinforce_ada.m` |")
    page.write_text("prose before\n" + text + "after\n")
    config_docs.main(["--root", str(checkout), "--write"])
    written = page.read_text()
    assert written.startswith("prose before\n") and written.endswith("after\n")
    assert "| `reinforce_ada.round_size` | `8` |" in written and "reinforce_ada.m`" not in written


def test_a_page_without_the_markers_is_refused(checkout):
    page = checkout / config_docs.DOCS
    page.write_text(page.read_text().replace(config_docs.END, ""))
    with pytest.raises(SystemExit, match="markers"):
        config_docs.main(["--root", str(checkout)])


def test_each_variant_option_sets_its_variant_and_the_reference_switch():
    for variant in VARIANTS:
        loaded = yaml.safe_load(config_docs.variant_yaml(variant))
        assert loaded == {"defaults": ["common", "_self_"], "reinforce_ada": {"variant": variant},
                          "algorithm": {"global_stat_est": True}}


def test_yaml_values_are_quoted_only_where_yaml_would_read_another_type():
    assert [config_docs.literal(v) for v in (None, True, 0.01, 8, "auto", "pkg://a.b")] == [
        "null", "true", "0.01", "8", "auto", "pkg://a.b"]
    assert config_docs.literal("off") == "'off'" and config_docs.literal("1") == "'1'"
