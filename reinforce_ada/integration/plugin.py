"""verl plug-in entry point: what ``import verl`` loads from this package in every process.

It registers the ``reinforce_ada`` advantage estimator; it makes verl's own entry point prepare a config
with a ``reinforce_ada`` section before Ray starts (:mod:`reinforce_ada.integration.verl_entry`); with
``REINFORCE_ADA_LOOPBACK=1`` (set on a
single-machine run, see :mod:`reinforce_ada.platform.loopback`) it binds the process groups' store to
loopback; with ``VERL_PLATFORM=cpu``, it registers the CPU platform. verl swallows exceptions
raised by plug-ins (it logs them at debug level), so a failure here is also reported as a warning,
naming what will not work.
"""

import logging

try:
    from reinforce_ada.integration import estimator, verl_entry  # noqa: F401  (importing estimator registers it)
    from reinforce_ada.platform import cpu, loopback

    verl_entry.install()
    if loopback.enabled():  # before the CPU platform, whose wrapper of the same function goes on top
        loopback.activate()
    if cpu.enabled():
        cpu.activate()
except Exception as err:  # pragma: no cover - only reached with a broken verl install
    logging.getLogger(__name__).warning("reinforce_ada: the verl plug-in failed to load: %r", err)
    raise
