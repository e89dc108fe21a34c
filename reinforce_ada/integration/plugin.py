"""verl plug-in entry point: what ``import verl`` loads from this package in every process.

It registers the ``reinforce_ada`` advantage estimator; with ``REINFORCE_ADA_LOOPBACK=1`` (set on a
single-machine run, see :mod:`reinforce_ada.platform.loopback`) it binds the process groups' store to
loopback; with ``VERL_PLATFORM=cpu``, it registers the CPU platform. verl swallows exceptions
raised by plug-ins (it logs them at debug level), so a failure here is also reported as a warning,
naming what will not work.
"""

import logging

try:
    from reinforce_ada.integration import estimator  # noqa: F401  (importing it registers the estimator)
    from reinforce_ada.platform import cpu, loopback

    if loopback.enabled():  # before the CPU platform, whose wrapper of the same function goes on top
        loopback.activate()
    if cpu.enabled():
        cpu.activate()
except Exception as err:  # pragma: no cover - only reached with a broken verl install
    logging.getLogger(__name__).warning("reinforce_ada: the verl plug-in failed to load: %r", err)
    raise
