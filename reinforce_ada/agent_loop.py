"""The class path a verl config names (``actor_rollout_ref.rollout.agent.agent_loop_manager_class``); the
manager lives in :mod:`reinforce_ada.integration.agent_loop`."""

from reinforce_ada.integration.agent_loop import AdaptiveAgentLoopManager

__all__ = ["AdaptiveAgentLoopManager"]
