"""A V1 step's requests to verl's agent-loop workers: the input rows they get and the book of what comes back.

Samples live in TransferQueue under ``{uid}_{session}_{i}``. Session ids continue across a prompt's requests, so a
sample's session is its index among everything the prompt asked for; a failed sample's session is not in the pool,
so :class:`RequestBook` maps pool indices to sessions. The per-row fields below carry each request's session
offset and seed slots to the workers (:mod:`reinforce_ada.integration.agent_loop_v1`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from verl.utils import tensordict_utils as tu

from reinforce_ada.core.messages import say, say_once
from reinforce_ada.core.metrics import CriticalPath
from reinforce_ada.core.sampler import FAILED
from reinforce_ada.integration.agents import Episode
from reinforce_ada.integration.rollout import RewardTally, SampleRecord

SESSION_OFFSET = "__reinforce_ada_session_offset__"
SEED_SLOTS = "__reinforce_ada_seed_slots__"  # per row: each sample's slot among the prompt's first attempts
SEED_REDRAW = "__reinforce_ada_seed_redraw__"  # per row: the samples redraw failed ones (seeds of their own)


def round_rewards(
    records: Sequence[SampleRecord], requests: Mapping[int, int], uids, offsets
) -> dict[int, list[tuple[int, float | None]]]:
    """Groups the records by prompt: ``(session, reward)`` in session order, the reward
    :data:`~reinforce_ada.core.sampler.FAILED` for a session that came back without a record
    (its generation or reward call raised; verl's worker logs why).

    Args:
        records: What the workers reported for the requests' samples.
        requests: Prompt index to the number of samples requested.
        uids: Prompt index to its uid.
        offsets: Prompt index to the first session id (pool index) of its request.
    """
    by_uid: dict[str, dict[int, float]] = defaultdict(dict)
    for record in records:
        by_uid[record.uid][record.session] = record.reward
    results = {}
    for prompt, count in requests.items():
        got = by_uid.get(uids[prompt], {})
        expected = range(offsets[prompt], offsets[prompt] + count)
        stray = sorted(set(got) - set(expected))
        if stray:
            raise RuntimeError(
                f"reinforce_ada: prompt uid {uids[prompt]} got samples it did not ask for (sessions {stray[:8]})"
            )
        results[prompt] = [(session, got.get(session, FAILED)) for session in expected]
    return results


class RequestBook:
    """A V1 step's requests: builds their input rows and checks and books what comes back.

    Session ids continue across a prompt's requests; a failed sample's session is not in the
    prompt's pool, so ``pool_sessions`` maps pool index to session. Seeds follow slots, not sessions: the
    i-th sample a prompt asks for (failed ones counted, redraws not) has slot i, and the redraw of a failed
    sample gets the failed slot with a seed of its own, so a failure shifts no later sample's seed.
    """

    def __init__(self, prompts, reward_name: str = "the reward function", rounds: bool = True):
        self.prompts = prompts
        self.rounds = rounds  # a record() call is a whole round (else one prompt's request, async)
        self.critical_path = CriticalPath()
        self.uids = [str(u) for u in prompts["uid"]]
        self.reward_name = reward_name
        self.offsets = [0] * len(self.uids)  # per prompt: samples asked for = the next session id
        self.pool_sessions: list[list[int]] = [[] for _ in self.uids]
        self.outputs_per_sample: dict[tuple[str, int], int] = {}
        self.reward_tally = RewardTally()
        self.episode: dict[tuple[str, int], Episode] = {}  # (uid, session) of each scored sample -> its counts
        self.next_slot = [0] * len(self.uids)  # per prompt: first attempts asked for
        self.failed_slots: list[list[int]] = [[] for _ in self.uids]  # of the last request, awaiting their redraw
        self.request_slots: dict[int, tuple[list[int], bool]] = {}  # prompt -> its request in flight: slots, redraw

    def batch(self, requests: Mapping[int, int]):
        """The input rows of ``{prompt index: count}``: ``count`` samples each, sessions continuing."""
        active = list(requests)
        for prompt in active:
            count, pending = requests[prompt], self.failed_slots[prompt]
            if pending:  # the sampler redraws its failed samples first (a step budget may grant fewer of them)
                self.request_slots[prompt] = (pending[:count], True)
                self.failed_slots[prompt] = []
            else:
                first = self.next_slot[prompt]
                self.request_slots[prompt] = (list(range(first, first + count)), False)
                self.next_slot[prompt] += count
        batch = tu.index_select_tensor_dict(self.prompts, active)
        tu.assign_non_tensor_stack(batch, "__rollout_n__", [requests[i] for i in active])
        tu.assign_non_tensor_stack(batch, SESSION_OFFSET, [self.offsets[i] for i in active])
        tu.assign_non_tensor_stack(batch, SEED_SLOTS, [self.request_slots[i][0] for i in active])
        tu.assign_non_tensor_stack(batch, SEED_REDRAW, [self.request_slots[i][1] for i in active])
        return batch

    def record(self, records: Sequence[SampleRecord], requests: Mapping[int, int]) -> dict[int, list[float | None]]:
        """The rewards of ``requests`` in session order (None for a failed sample); advances the offsets."""
        results = round_rewards(records, requests, self.uids, self.offsets)
        self.outputs_per_sample.update({(r.uid, r.session): r.outputs for r in records})
        rewards: dict[int, list[float | None]] = {}
        for prompt, sessions in results.items():
            rewards[prompt] = []
            slots, redraw = self.request_slots.pop(prompt, (None, False))
            for j, (session, reward) in enumerate(sessions):
                if reward is not FAILED and not math.isfinite(reward):
                    say_once(
                        f"WARNING: {self.reward_name} returned a non-finite score ({reward}); such a sample is "
                        "redrawn once, like a failed one, and counted in reinforce_ada/samples_failed"
                    )
                    reward = FAILED
                if reward is not FAILED:
                    self.pool_sessions[prompt].append(session)
                elif slots is not None and not redraw:
                    self.failed_slots[prompt].append(slots[j])
                rewards[prompt].append(reward)
            self.offsets[prompt] += requests[prompt]
        failed = sum(r is FAILED for values in rewards.values() for r in values)
        if failed:
            say(f"{failed} of {sum(requests.values())} samples failed (generation or reward call); redrawn once")
        for r in records:
            if math.isfinite(r.reward):
                self.reward_tally.add(1, r.response_tokens, r.reward_seconds, r.reward_extra)
                self.episode[(r.uid, r.session)] = r.episode
        if self.rounds:
            self.critical_path.add_round([r.response_tokens for r in records])
        else:
            for prompt in requests:
                uid = self.uids[prompt]
                self.critical_path.add_request(prompt, [r.response_tokens for r in records if r.uid == uid])
        return rewards
