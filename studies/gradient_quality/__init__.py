"""The gradient-quality study: each method's update measured at fixed weights on SmolLM2-135M, without training.

``measure`` runs it (``python -m studies.gradient_quality``): ``design`` fixes its sizes, methods and primary
measure, ``pools`` samples the responses, ``sketches`` sketches their gradients and ``replay`` replays every
method on them; ``report`` writes the results into README.md, which holds the design.
"""
