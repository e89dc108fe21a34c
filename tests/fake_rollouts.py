"""Fake rollouts that the core's tests drive the schedules with: rewards known per (prompt, pool index)."""

import random
from collections import defaultdict


class ShuffledRollout:
    """A fake engine that finishes the requests in flight in a random order, several at a time."""

    def __init__(self, rewards: list[list[float]], seed: int):
        self.rewards, self.rng = rewards, random.Random(seed)
        self.drawn: dict[int, int] = defaultdict(int)
        self.in_flight: dict[int, list[float]] = {}
        self.submitted: list[tuple[int, int, int]] = []  # (prompt, count, first pool index)

    def submit(self, prompt: int, count: int) -> None:
        assert prompt not in self.in_flight, "two requests of one prompt in flight"
        start = self.drawn[prompt]
        self.in_flight[prompt] = self.rewards[prompt][start : start + count]
        self.drawn[prompt] += count
        self.submitted.append((prompt, count, start))

    def wait(self) -> list[tuple[int, list[float]]]:
        done = self.rng.sample(sorted(self.in_flight), self.rng.randint(1, len(self.in_flight)))
        return [(p, self.in_flight.pop(p)) for p in done]


def round_generator(rewards: list[list[float]], log: list | None = None):
    drawn: dict[int, int] = defaultdict(int)

    def generate(requests):
        results = {}
        for prompt, count in requests.items():
            if log is not None:
                log.append((prompt, count, drawn[prompt]))
            results[prompt] = rewards[prompt][drawn[prompt] : drawn[prompt] + count]
            drawn[prompt] += count
        return results

    return generate
