"""Multi-turn and tool-using episodes in the rounds: what the sampler counts of each.

verl picks each row's agent loop by its ``agent_name`` (``single_turn_agent`` by default, ``tool_agent`` for
verl's tool-calling loop, or any loop registered with ``@register`` or
``actor_rollout_ref.rollout.agent.agent_loop_config_path``). One episode is one sample: its reward is the episode's
final score, its response holds every turn, and its ``response_mask`` marks the model's tokens only (verl masks
the tool's and the environment's tokens), so the pool, the exit rules and the kept groups see whole episodes.

Three counts per episode are logged: turns (verl's ``num_turns``: the prompt, each model turn and each tool or
environment turn; 2 for a single-turn sample), tool calls, and the response tokens that the tool or the
environment wrote (masked out of the loss). verl's ``tool_agent`` does not count its calls, so
the agent-loop workers register :class:`CountingToolAgentLoop` under that name: the same loop, with the count in
``extra_fields["tool_calls"]``. Any agent loop may report the count itself under that key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from verl.experimental.agent_loop import agent_loop as verl_agent_loop
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

TOOL_CALLS = "tool_calls"  # extra_fields key: tool calls the episode made
VERL_TOOL_AGENT = f"{ToolAgentLoop.__module__}.{ToolAgentLoop.__qualname__}"


class CountingToolAgentLoop(ToolAgentLoop):
    """verl's ``tool_agent``, counting the tool calls it executes (a call that raises or names no known tool
    counts: the model made it)."""

    async def run(self, sampling_params, **kwargs):
        self._tool_calls = 0  # verl makes one loop object per episode
        output = await super().run(sampling_params, **kwargs)
        output.extra_fields[TOOL_CALLS] = self._tool_calls
        return output

    async def _call_tool(self, tool_call, tools_kwargs, agent_data):
        self._tool_calls += 1
        return await super()._call_tool(tool_call, tools_kwargs, agent_data)


def count_tool_calls() -> None:
    """Makes ``tool_agent`` count its tool calls, where it is still verl's own loop (a user's own registration
    under that name is left alone). Called in each agent-loop worker, after verl registered the loops."""
    registry = verl_agent_loop._agent_loop_registry
    if registry.get("tool_agent", {}).get("_target_") == VERL_TOOL_AGENT:
        registry["tool_agent"] = {"_target_": f"{__name__}.{CountingToolAgentLoop.__qualname__}"}


def tool_calls_of(extra_fields) -> int:
    value = (extra_fields or {}).get(TOOL_CALLS)
    return int(value) if value is not None else 0


class Episode(NamedTuple):
    turns: int
    tool_calls: int
    env_tokens: int  # response tokens the tool or the environment wrote (response_mask 0)


def episode_metrics(drawn: Iterable[Episode], kept: Iterable[Episode]) -> dict[str, float]:
    """``agent/{turns,tool_calls,env_tokens}_mean`` over the (scored) episodes drawn, and ``agent/kept_..._mean``
    over the kept ones."""
    out = {}
    for prefix, episodes in (("", list(drawn)), ("kept_", list(kept))):
        for field in Episode._fields if episodes else ():
            out[f"agent/{prefix}{field}_mean"] = sum(getattr(e, field) for e in episodes) / len(episodes)
    return out
