"""The agent run's tool, for verl's tool_agent (``actor_rollout_ref.rollout.multi_turn.function_tool_path``)."""

from verl.tools.function_tool import function_tool


@function_tool
def add(a: int, b: int) -> str:
    """Adds two whole numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    if a > 5:  # a tool that fails on some input: verl hands the error to the model as the tool's answer
        raise ValueError(f"add: a={a} is out of range")
    return str(a + b)
