"""The math task as the paper ran it: the reward (:mod:`~reinforce_ada.tasks.reward`, checked in
:mod:`~reinforce_ada.tasks.checkers`), data preparation, evaluation, and the vLLM engine they share."""
