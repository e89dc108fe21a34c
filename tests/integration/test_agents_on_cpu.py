"""verl's tool_agent counts its tool calls in the agent-loop workers; a user's own tool_agent is left alone."""

import asyncio
from types import SimpleNamespace

import pytest


@pytest.fixture
def registry():
    from verl.experimental.agent_loop import agent_loop

    saved = dict(agent_loop._agent_loop_registry)
    yield agent_loop._agent_loop_registry
    agent_loop._agent_loop_registry.clear()
    agent_loop._agent_loop_registry.update(saved)


def test_verls_tool_agent_is_swapped_for_the_counting_one_and_a_users_own_is_kept(registry):
    from reinforce_ada.integration.agents import VERL_TOOL_AGENT, count_tool_calls

    assert registry["tool_agent"] == {"_target_": VERL_TOOL_AGENT}  # verl registered its own on import
    count_tool_calls()
    assert registry["tool_agent"] == {"_target_": "reinforce_ada.integration.agents.CountingToolAgentLoop"}
    registry["tool_agent"] = {"_target_": "my_project.MyToolAgent"}
    count_tool_calls()
    assert registry["tool_agent"] == {"_target_": "my_project.MyToolAgent"}


def test_every_tool_call_is_counted_in_the_episodes_extra_fields(monkeypatch):
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    from reinforce_ada.integration.agents import CountingToolAgentLoop, tool_calls_of

    async def episode(self, sampling_params, **kwargs):  # two tool turns: one call, then two in parallel
        for calls in kwargs["calls"]:
            await asyncio.gather(*(self._call_tool(name, {}, None) for name in calls))
        return SimpleNamespace(extra_fields={"turn_scores": []})

    async def call_tool(self, tool_call, tools_kwargs, agent_data):
        if tool_call == "broken":  # verl answers the model with the error; the call was made all the same
            return SimpleNamespace(text="Error executing tool 'broken'"), 0.0, {}
        return SimpleNamespace(text="7"), None, {}

    monkeypatch.setattr(ToolAgentLoop, "run", episode)
    monkeypatch.setattr(ToolAgentLoop, "_call_tool", call_tool)
    loop = object.__new__(CountingToolAgentLoop)
    output = asyncio.run(loop.run({}, calls=[["add"], ["add", "broken"]]))
    assert tool_calls_of(output.extra_fields) == 3
    assert asyncio.run(loop.run({}, calls=[])).extra_fields["tool_calls"] == 0  # a new episode counts from 0
    assert tool_calls_of({"turn_scores": []}) == 0  # a loop that does not count: none
