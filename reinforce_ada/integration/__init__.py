"""The verl glue: thin layers that run :mod:`reinforce_ada.core` inside verl 0.9's trainers.

verl finds them through its own hooks: the rollout manager class
(:mod:`~reinforce_ada.integration.agent_loop`, with one implementation per trainer), the advantage
estimator registry (:mod:`~reinforce_ada.integration.estimator`), the V1 replay buffer and checkpoint
callback, the ``verl.plugins`` entry point (:mod:`~reinforce_ada.integration.plugin`) and the Hydra
config (:mod:`~reinforce_ada.integration.verl_config`, :mod:`~reinforce_ada.integration.main_ppo`).
"""
