"""The learning study: Reinforce-Ada against GRPO through verl's trainer on SmolLM2-135M, by protocol.

``protocol`` holds each protocol's sizes and methods; ``runner`` runs them (``python -m studies.learning``) through
``data`` (the prompts), ``start`` (the second protocol's format checkpoint and learning-rate sweep) and
``training`` (one resumable run through verl's trainer); ``report`` turns the run records (read by ``records``)
into the results, the README's sections (``first_section``, ``second_section``, sharing ``summary``) and the
figure (``curves``); README.md holds the designs.
"""
