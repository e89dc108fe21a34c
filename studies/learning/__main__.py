"""``python -m studies.learning``: runs a learning protocol or rewrites its results (:mod:`studies.learning.runner`)."""

import signal
import sys

from studies.learning.runner import main

if __name__ == "__main__":
    # a kill (a timeout, a scheduler) becomes an exception, so that the trainer started in its own session stops too
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    main()
