"""verl plug-in entry point: what ``import verl`` loads from this package in every process.

verl swallows exceptions raised by plug-ins (it logs them at debug level), so a failure here
is reported as a warning instead, naming what will not work.
"""

import logging

try:
    from reinforce_ada import estimator  # noqa: F401  (registers the `reinforce_ada` estimator)
except Exception as err:  # pragma: no cover - only reached with a broken verl install
    logging.getLogger(__name__).warning(
        "reinforce_ada: could not register the `reinforce_ada` advantage estimator with verl: %r", err
    )
    raise
