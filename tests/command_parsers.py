"""Checks quoted commands against the argparse parsers of the modules they run, without running the programs.

Run as a script, in an interpreter of its own (it patches argparse while it finds a parser): reads
``[[module, [word, ...] or null], ...]`` as JSON on stdin and prints, as JSON, one message per command: empty where
the module's parser accepts the words, else why not (``null`` words: the module is named without a command line,
and only its parser is built). A module's parser is the one ``python -m module`` parses its arguments with: the
module runs as ``python -m`` runs it until its first ``parse_args``, which raises instead of parsing, so nothing of
the program runs. Hydra entry points parse with argparse too (Hydra's own flags, the overrides as positionals).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import runpy
import sys

# a value a reader fills in: S, N, DIR, PATH, <overrides>, a shell variable
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z_]*|<[^>]*>|.*\$.*)$")


class _Found(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__()
        self.parser = parser


def parser_of(module: str) -> argparse.ArgumentParser:
    """The parser ``python -m module`` parses its arguments with.

    Raises:
        LookupError: If the module ran to its end without parsing arguments with argparse.
    """

    def found(self, args=None, namespace=None):
        raise _Found(self)

    saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, sys.argv
    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = found
    sys.argv = [module]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except _Found as parsed:
        return parsed.parser
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, sys.argv = saved
    raise LookupError(f"python -m {module} ran without parsing its arguments with argparse")


def _stand_in(action: argparse.Action | None) -> str:
    """A value the action accepts, for a placeholder."""
    if action is not None and action.choices:
        return str(next(iter(action.choices)))
    if action is not None and action.type in (int, float):
        return "0"
    return "x"


def check(parser: argparse.ArgumentParser, words: list[str]) -> str:
    """Why ``parser`` refuses ``words`` ('' if it accepts them): an option it does not define by that exact name
    (argparse would accept an abbreviation, which a page should not quote), or what ``parse_args`` says.
    Placeholders become values of the type their option takes."""
    options = parser._option_string_actions
    unknown = [w.split("=", 1)[0] for w in words if w.startswith("--") and w.split("=", 1)[0] not in options]
    if unknown:
        return f"no option {', '.join(unknown)}"
    filled, action = [], None
    for word in words:
        if word.startswith("-"):
            action = options.get(word.split("=", 1)[0])
        elif PLACEHOLDER.match(word):
            word = _stand_in(action)
        filled.append(word)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(filled)
    except SystemExit as exit:
        if exit.code not in (0, None):  # 0: --help
            return errors.getvalue().strip().splitlines()[-1] if errors.getvalue().strip() else f"exit {exit.code}"
    return ""


def main() -> None:
    sys.path[0] = os.getcwd()  # as ``python -m`` has it (a script's own folder, tests/, is no place to import from)
    commands = json.load(sys.stdin)
    parsers: dict[str, argparse.ArgumentParser | str] = {}
    messages = []
    with contextlib.redirect_stdout(sys.stderr):  # what modules print on import stays off the answer
        for module, words in commands:
            if module not in parsers:
                try:
                    parsers[module] = parser_of(module)
                except BaseException as error:  # an import error, no parser, a program that exits before parsing
                    parsers[module] = f"{type(error).__name__}: {error}"
            parser = parsers[module]
            if isinstance(parser, str):
                messages.append(parser)
            else:
                messages.append("" if words is None else check(parser, words))
    print(json.dumps(messages))


if __name__ == "__main__":
    main()
