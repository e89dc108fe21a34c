"""The adaptive multi-round rollout as a verl agent-loop manager, for both verl trainers.

verl 0.9 builds its rollout manager from ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``
in both the V1 trainer (TransferQueue, ``trainer.use_v1=true``) and the legacy ``RayPPOTrainer``.
:class:`AdaptiveAgentLoopManager` is that class: its ``create`` returns the implementation for
the configured trainer. Each training step it runs :func:`reinforce_ada.core.step.run_step` on verl's
agent-loop workers (async vLLM servers, streaming reward workers):

* ``reinforce_ada.mode=rounds``: one request per round for all still-active prompts, split over
  the workers, and a barrier until every sample of the round is scored;
* ``reinforce_ada.mode=async`` (V1 trainer): one Ray call per prompt request (that prompt's M
  samples) on the least-loaded worker; as soon as one is scored its prompt's next request is
  sent, while the other prompts are still generating.

The policy is frozen during the sampling: both trainers sync weights only between steps.
Validation batches pass through to verl unchanged.

What each trainer gets back:
* V1: samples live in TransferQueue under ``{uid}_{session}_{i}``; session ids continue across
  a prompt's requests, so its pool index is its session id. Samples not kept are deleted before the
  replay buffer reads the step's batch; dropped prompts leave no samples.
* Legacy: a ``DataProto`` of exactly ``n`` samples per prompt, in prompt order, as GRPO-n.

Both hand the pool statistics and the step metrics over through :mod:`reinforce_ada.integration.handover`.
The implementations are :mod:`reinforce_ada.integration.agent_loop_v1` and
:mod:`reinforce_ada.integration.agent_loop_legacy`; what they share is in :mod:`reinforce_ada.integration.rollout`.
"""

from __future__ import annotations

from verl.experimental.agent_loop import AgentLoopManager
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ

from reinforce_ada.integration.agent_loop_legacy import AdaptiveManagerLegacy
from reinforce_ada.integration.agent_loop_v1 import AdaptiveManagerV1
from reinforce_ada.integration.verl_config import prepare_config


class AdaptiveAgentLoopManager:
    """Set as ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``; picks the trainer's flavour."""

    @classmethod
    def create(cls, config, *args, **kwargs):
        use_v1 = config.trainer.get("use_v1", True)
        settings = prepare_config(config)
        if settings is None:  # reinforce_ada.enable=false: verl's own rollout
            return (AgentLoopManagerTQ if use_v1 else AgentLoopManager).create(config, *args, **kwargs)
        manager = AdaptiveManagerV1 if use_v1 else AdaptiveManagerLegacy
        return manager.create(config, *args, sampler_config=settings, **kwargs)
