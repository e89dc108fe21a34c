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

A seeded episode (``reinforce_ada.sampling_seed``) calls the model once per turn with the same sampling parameters;
the agent-loop workers hand their agent loops a :class:`TurnSeededClient`, which gives the episode's k-th call the
seed :func:`~reinforce_ada.core.seeding.turn_seed` (the episode's seed, k).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

from verl.experimental.agent_loop import agent_loop as verl_agent_loop
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

from reinforce_ada.core.seeding import turn_seed

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


class _SeededEpisode:
    """The running episode's seed and the number of model calls it has made."""

    __slots__ = ("seed", "turns")

    def __init__(self, seed: int):
        self.seed, self.turns = seed, 0


# The episode running in this asyncio task: verl runs each episode in a task of its own, and a task's context is
# its own, so concurrent episodes on one worker never see each other's count.
_episode: ContextVar[_SeededEpisode | None] = ContextVar("reinforce_ada_seeded_episode", default=None)


@contextmanager
def seeded_episode(seed: int | None) -> Iterator[None]:
    """Runs one episode: inside, a :class:`TurnSeededClient` seeds its model calls from ``seed``.

    The count ends with the episode (on an error too), so nothing is kept between episodes.

    Args:
        seed: The episode's seed; None leaves the episode unseeded (validation, ``sampling_seed`` unset).
    """
    if seed is None:
        yield
        return
    token = _episode.set(_SeededEpisode(int(seed)))
    try:
        yield
    finally:
        _episode.reset(token)


class TurnSeededClient:
    """An LLM server client whose ``generate`` seeds each model turn of a seeded episode.

    Within :func:`seeded_episode`, the episode's k-th ``generate`` call gets the seed
    :func:`~reinforce_ada.core.seeding.turn_seed` (the episode's seed, k) in a copy of its sampling parameters;
    outside one the call passes unchanged. Every other attribute is the wrapped client's.

    Args:
        client: verl's client (``AgentLoopWorker.llm_client``), which the worker hands to each agent loop as its
            ``server_manager``.
    """

    def __init__(self, client: Any):
        self._client = client

    def __getattr__(self, name: str) -> Any:
        if name == "_client":  # not set yet (an unpickled copy): no endless lookup
            raise AttributeError(name)
        return getattr(self._client, name)

    async def generate(self, *args: Any, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        episode = _episode.get()
        if episode is not None:
            # counted before the await: calls the episode makes at once get distinct turns too
            sampling_params = {**sampling_params, "seed": turn_seed(episode.seed, episode.turns)}
            episode.turns += 1
        return await self._client.generate(*args, sampling_params=sampling_params, **kwargs)
