"""The algorithm, readable on its own: pure Python (torch for the advantage tensors), nothing of verl,
Ray or vLLM.

* :mod:`~reinforce_ada.core.config`: the settings (:class:`~reinforce_ada.core.config.SamplerConfig`);
* :mod:`~reinforce_ada.core.sampler`: one prompt's successive elimination (when it stops);
* :mod:`~reinforce_ada.core.budget`: a step's sample budget, between the samplers and the schedules;
* :mod:`~reinforce_ada.core.schedules`: synchronous rounds, or no round barrier;
* :mod:`~reinforce_ada.core.groups`: from a pool to the group that is trained on;
* :mod:`~reinforce_ada.core.advantage`: advantages against the whole pool's baseline;
* :mod:`~reinforce_ada.core.step`: one training step's sampling, start to finish;
* :mod:`~reinforce_ada.core.metrics`, :mod:`~reinforce_ada.core.tracker` (Est's pass rates across steps),
  :mod:`~reinforce_ada.core.seeding` (reproducible rollouts).
"""
