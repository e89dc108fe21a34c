"""How the package speaks to its user: one line on standard error, tagged with who speaks.

Every progress line, note and warning goes through :func:`say`; a warning that the same cause would repeat for
every sample or step goes through :func:`say_once`.
"""

from __future__ import annotations

import sys

_said: set[str] = set()


def say(message: str, speaker: str = "reinforce_ada") -> None:
    """Prints ``[speaker] message`` on standard error, at once (the line may come from a Ray worker)."""
    print(f"[{speaker}] {message}", file=sys.stderr, flush=True)


def say_once(message: str, speaker: str = "reinforce_ada") -> None:
    """:func:`say`, the first time this process meets ``message`` only."""
    if message not in _said:
        _said.add(message)
        say(message, speaker)
