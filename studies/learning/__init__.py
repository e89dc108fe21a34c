"""The learning study: Reinforce-Ada against GRPO through verl's trainer on SmolLM2-135M, by protocol.

``protocol`` holds each protocol's sizes and methods, ``runner`` runs them (``python -m studies.learning``),
``report`` turns the run records into the results and the README's sections; README.md holds the designs.
"""
