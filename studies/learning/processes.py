"""The study's child processes (trainers, evaluations) die with the harness that started them."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def dies_with(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` under which the child is killed (SIGKILL) when ``parent``, the process starting it, dies:
    a trainer left without its harness would go on training and saving checkpoints, an evaluation would race the
    next one for its files (Linux ``PR_SET_PDEATHSIG``; Ray's own processes die with the trainer, as Ray
    fate-shares them with their driver). None off Linux. The C library is opened here, before the fork, so that the
    child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the harness died before the signal was asked for
            os._exit(1)
    return preexec
