"""Writes one harness's tables into benchmarks/RESULTS.md, between markers, leaving the rest.

Each harness owns one section; rerunning it replaces only that section and stamps it with the
date and the machine it ran on.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPU cores ({cpu}), Python {platform.python_version()}"


def write_section(path: str | Path, key: str, title: str, body: str, measured: str | None = None) -> None:
    """``measured`` replaces today's date and this machine in the stamp, for a section gathered over days."""
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmark results\n\nEach section is written by its harness.\n"
    stamp = f"_Measured {measured or datetime.date.today().isoformat() + ' on ' + machine()}._"
    section = f"<!-- {key}:start -->\n## {title}\n\n{stamp}\n\n{body.strip()}\n<!-- {key}:end -->"
    pattern = re.compile(rf"<!-- {re.escape(key)}:start -->.*?<!-- {re.escape(key)}:end -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)
