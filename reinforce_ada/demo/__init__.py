"""The demo: GRPO-n4 against Reinforce-Ada on SmolLM2-135M, trained through verl on a CPU.

``python -m reinforce_ada.demo`` runs it (:mod:`reinforce_ada.demo.run`); :mod:`~reinforce_ada.demo.config`
holds its sizes and methods, :mod:`~reinforce_ada.demo.task` the arithmetic task and
:mod:`~reinforce_ada.demo.report` the report.
"""
