"""verl plug-in entry point: what ``import verl`` loads from this package in every process.

It registers the ``reinforce_ada`` advantage estimator and, with ``VERL_PLATFORM=cpu``, the CPU
platform. verl swallows exceptions raised by plug-ins (it logs them at debug level), so a
failure here is also reported as a warning, naming what will not work.
"""

import logging

try:
    from reinforce_ada import cpu, estimator  # noqa: F401  (importing estimator registers it)

    if cpu.enabled():
        cpu.activate()
except Exception as err:  # pragma: no cover - only reached with a broken verl install
    logging.getLogger(__name__).warning("reinforce_ada: the verl plug-in failed to load: %r", err)
    raise
