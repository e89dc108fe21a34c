"""Where the trainer runs: verl on a CPU (:mod:`~reinforce_ada.platform.cpu`) and a single machine that
serves nothing to the network (:mod:`~reinforce_ada.platform.loopback`)."""
