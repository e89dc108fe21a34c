"""Tools around the package: the sampler without a model (:mod:`~reinforce_ada.tools.simulate`), a tiny
model and task for CPU runs (:mod:`~reinforce_ada.tools.tiny`), and SmolLM2-135M converted offline
(:mod:`~reinforce_ada.tools.smollm`), and the writer of the configuration's prose from the fields' docs
(:mod:`~reinforce_ada.tools.config_docs`)."""
