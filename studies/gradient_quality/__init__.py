"""The gradient-quality study: each method's update measured at fixed weights on SmolLM2-135M, without training.

``measure`` runs it (``python -m studies.gradient_quality``): ``design`` fixes its sizes, designs and primary
measure, ``pools`` samples the responses, ``sketches`` sketches their gradients and ``replay`` replays every
method on them; ``intervals`` draws the batches and makes every interval from per-batch values, ``coverage``
simulates the design to check those intervals (``python -m studies.gradient_quality.coverage``), and ``report``
writes the results into README.md, which holds the designs.
"""
