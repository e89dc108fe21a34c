"""The agent run's task: the tiny model taught to call a tool, and a multi-turn agent loop whose environment answers.

Rows of the training data name their agent loop (``agent_name``), as verl selects it:

* ``tool_agent`` (verl's): "Use add: What is a plus b?"; the model may call ``add`` (calculator_tool.py) in verl's
  hermes format, gets the result as a tool turn, then answers;
* ``ask_again`` (:class:`AskAgainAgentLoop`, registered through ``agent_loop_config_path``): "What is a plus b?";
  the environment checks the answer and, when it is wrong, says so and asks once more.

The reward (reinforce_ada.tools.tiny's) scores the whole episode once, at its end: the sum appears in the response.
A random model never writes a valid tool call, so :func:`build` first teaches the tiny model the format by a short
supervised fit on episodes of both kinds (a few seconds on a CPU).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import threading
from pathlib import Path
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

HERE = Path(__file__).parent
TOOL_PROMPT = "Use add: What is {a} plus {b}?"
PLAIN_PROMPT = "What is {a} plus {b}?"
ASK_AGAIN = "Wrong. Try again."
ENVIRONMENT_FAILURE = "ask_again: the environment failed"
HOLD_WHEN = "AGENT_TASK_HOLD_WHEN"  # the environment variable of a path: see AskAgainAgentLoop


# A call in verl's hermes format is these three pieces around the two numbers; each piece is one token of the tiny
# tokenizer, so that a 0.4M-parameter model learns to write valid calls in a few seconds.
CALL_PIECES = ('<tool_call>{"name": "add", "arguments": {"a": ', ', "b": ', "}}</tool_call>")


def tool_call(a: int, b: int) -> str:
    call = f"{CALL_PIECES[0]}{a}{CALL_PIECES[1]}{b}{CALL_PIECES[2]}"
    assert json.loads(call.removeprefix("<tool_call>").removesuffix("</tool_call>"))["arguments"] == {"a": a, "b": b}
    return call


class AskAgainAgentLoop(AgentLoopBase):
    """Answer, and when the answer is wrong the environment says so and asks once more (two model turns at most).

    The environment fails mid-episode (raises) on a fifth of the second turns, counted in each worker process from
    its first, whatever the model wrote: a hash of the answer chose a fixed few of the short answers the tiny model
    gives, and the model trained on another CPU gave none of them in a whole run.

    A run whose environment has ``HOLD_WHEN`` set to a path waits, at the start of every episode once that path
    exists, until it is killed: the test that kills a run in step 2 points it at step 1's checkpoint, so that the
    run cannot finish step 2 before the kill lands."""

    environment_fails = True
    second_turns = 0  # this worker process's

    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        hold = os.environ.get(HOLD_WHEN)
        while hold and os.path.exists(hold):
            await asyncio.sleep(1.0)
        messages = list(kwargs["raw_prompt"])
        truth = str(kwargs["reward_model"]["ground_truth"])
        ids = await self.ct_build_initial_tokens(messages)
        mask: list[int] = []
        logprobs: list[float] = []  # verl trains on the rollout's log-probs where the rollout gives them
        extra: dict = {}
        turns = 1
        for turn in range(2):
            out = await self.server_manager.generate(
                request_id=uuid4().hex, prompt_ids=ids, sampling_params=sampling_params
            )
            if not extra:
                extra = dict(out.extra_fields)
            elif out.extra_fields.get("max_global_steps"):
                extra["max_global_steps"] = out.extra_fields["max_global_steps"]
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                ids, out.token_ids, mask, logprobs if (logprobs or out.log_probs) else None,
                assistant_logprobs=out.log_probs or None,
            )
            ids, turns, logprobs = merged.token_ids, turns + 1, logprobs or []
            answer = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            if truth in answer or turn == 1 or len(mask) >= self.rollout_config.response_length:
                break
            if self.environment_fails:
                AskAgainAgentLoop.second_turns += 1
                if AskAgainAgentLoop.second_turns % 5 == 1:
                    raise RuntimeError(ENVIRONMENT_FAILURE)
            before = messages + [{"role": "assistant", "content": answer}]
            messages = before + [{"role": "user", "content": ASK_AGAIN}]
            merged, mask, logprobs = await self.ct_merge_context_msg(before, messages, ids, mask, logprobs or None)
            ids, turns, logprobs = merged.token_ids, turns + 1, logprobs or []
        length = self.rollout_config.response_length
        prompt_ids, response_ids = ids[: len(ids) - len(mask)], ids[len(ids) - len(mask) :]
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=response_ids[:length], response_mask=mask[:length],
            response_logprobs=logprobs[:length] or None, num_turns=turns, metrics={},
            # the keys verl's tool_agent (counted) adds, so that both loops' outputs have the same fields
            extra_fields={**extra, "turn_scores": [], "tool_rewards": [], "tool_calls": 0},
        )


class ReliableAskAgainAgentLoop(AskAgainAgentLoop):
    """:class:`AskAgainAgentLoop` whose environment never fails: for the legacy trainer, which stops at a failed
    episode as verl's legacy trainer stops at any failed sample."""

    environment_fails = False


def _episodes(rng: random.Random, count: int) -> list[list[dict]]:
    """Chats to fit: tool-agent episodes (a call, with the question's numbers about half the time, the tool's
    answer, and that answer repeated) and ask-again episodes (a first answer, right half of the time, then a
    second)."""
    chats = []
    for _ in range(count):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        guess = lambda s=a + b: str(rng.choice([s, rng.randint(0, 18)]))  # noqa: E731
        if rng.random() < 0.5:
            x, y = (a, b) if rng.random() < 0.5 else (rng.randint(0, 9), rng.randint(0, 9))
            chat = [{"role": "user", "content": TOOL_PROMPT.format(a=a, b=b)},
                    {"role": "assistant", "content": tool_call(x, y)}, {"role": "tool", "content": str(x + y)},
                    {"role": "assistant", "content": str(x + y)}]
        else:
            chat = [{"role": "user", "content": PLAIN_PROMPT.format(a=a, b=b)}, {"role": "assistant",
                                                                             "content": guess()}]
            if chat[-1]["content"] != str(a + b):
                chat += [{"role": "user", "content": ASK_AGAIN}, {"role": "assistant", "content": guess()}]
        chats.append(chat)
    return chats


def _tokens(tokenizer, chat: list[dict]) -> tuple[list[int], list[int]]:
    """A chat's token ids, and its labels: the assistant turns' tokens, -100 elsewhere."""
    ids, labels = [], []
    for message in chat:
        head = tokenizer(f"<|im_start|>{message['role']}\n")["input_ids"]
        body = tokenizer(f"{message['content']}<|im_end|>")["input_ids"]
        tail = tokenizer("\n")["input_ids"]
        ids += head + body + tail
        labels += [-100] * len(head) + (body if message["role"] == "assistant" else [-100] * len(body)) + [-100]
    return ids, labels


def build(out: Path, train: int = 4, seed: int = 0, steps: int = 200, environment_fails: bool = True) -> Path:
    """Writes ``out/model`` (the tiny model, fitted to the episodes' format), ``out/data/{train,test}.parquet``
    (half the rows for tool_agent, half for ask_again) and ``out/agent_loops.yaml`` (ask_again's loop: one whose
    environment fails now and then, or never); returns ``out``."""
    import pandas as pd

    from reinforce_ada.tools import tiny

    _fit_model(out / "model", seed, steps)
    (out / "data").mkdir(parents=True, exist_ok=True)
    for split, count in (("train", train), ("test", 4)):
        rows = []
        for i, (question, answer) in enumerate(tiny.questions(count, seed + (split == "test"))):
            a, b = question.removeprefix("What is ").removesuffix("?").split(" plus ")
            agent = "tool_agent" if i % 2 == 0 else "ask_again"
            template = TOOL_PROMPT if agent == "tool_agent" else PLAIN_PROMPT
            rows.append({
                "data_source": tiny.DATA_SOURCE, "agent_name": agent,
                "prompt": [{"role": "user", "content": template.format(a=a, b=b)}], "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer}, "extra_info": {"index": i, "split": split},
            })
        pd.DataFrame(rows).to_parquet(out / "data" / f"{split}.parquet")
    loop = AskAgainAgentLoop if environment_fails else ReliableAskAgainAgentLoop
    (out / "agent_loops.yaml").write_text(f"- name: ask_again\n  _target_: {__name__}.{loop.__name__}\n")
    return out


_FITTED: dict[tuple[int, int], Path] = {}  # (seed, steps) -> the first folder the model was fitted into
_FITTING = threading.Lock()


def _fit_model(folder: Path, seed: int, steps: int) -> None:
    """Writes the tiny model fitted to the episodes' format (about 30 CPU-s) into ``folder``: fitted once for each
    seed and step count in a process (jobs build their tasks in threads), copied thereafter; the fit depends on
    nothing else."""
    import torch
    from transformers import GenerationConfig

    from reinforce_ada.tools import tiny

    with _FITTING:
        if (seed, steps) in _FITTED:
            shutil.copytree(_FITTED[(seed, steps)], folder)
            return
        rng = random.Random(seed)
        chats = _episodes(rng, 512)
        corpus = [m["content"] for chat in chats for m in chat] * 2 + ["user assistant tool"]
        tokenizer = tiny.build_tokenizer(corpus)
        tokenizer.add_tokens(list(CALL_PIECES))
        model = tiny.build_model(tokenizer, seed)
        examples = [_tokens(tokenizer, chat) for chat in chats]
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        model.train()
        for step in range(steps):
            batch = examples[(step * 32) % len(examples):][:32]
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.tensor([ids + [tokenizer.pad_token_id] * (width - len(ids)) for ids, _ in batch])
            labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
            attention = (labels != -100) | (input_ids != tokenizer.pad_token_id)
            loss = model(input_ids=input_ids, attention_mask=attention.long(), labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        tokenizer.save_pretrained(folder)
        model.save_pretrained(folder, safe_serialization=True)
        GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(
            folder
        )
        _FITTED[(seed, steps)] = folder


def overrides(task: Path) -> list[str]:
    """The Hydra overrides of a run on the task :func:`build` wrote in ``task``: the calculator tool, the ask_again
    loop, and room for a tool's error in an episode. verl ends an episode whose next turn would not fit, and does
    not truncate an error to ``max_tool_response_length``: the commonest error, a call without ``b`` ("add()
    missing 1 required positional argument"), is 58 tokens of the tiny tokenizer, so with 64 response tokens only
    the shorter ``a > 5`` error ever reached the model, and a run kept none on some machines."""
    return [f"actor_rollout_ref.rollout.multi_turn.function_tool_path={HERE / 'calculator_tool.py'}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={task / 'agent_loops.yaml'}",
            "data.max_response_length=128", "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=40"]


def python_path(base: dict) -> str:
    """PYTHONPATH for Ray's workers, which import this module (the ask_again loop) by name."""
    return os.pathsep.join([str(HERE), base.get("PYTHONPATH", "")])
