"""The gradient-quality study: each method's update measured at fixed weights on SmolLM2-135M, without training.

``measure`` samples, sketches and replays (``python -m studies.gradient_quality``), ``report`` writes the results
into README.md, which holds the design.
"""
