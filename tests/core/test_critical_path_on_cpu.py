"""The step's generation latency in tokens: each round's longest response, or the longest chain of requests."""

from reinforce_ada.core.metrics import CriticalPath


def test_the_critical_path_sums_each_rounds_longest_and_in_async_takes_the_longest_chain_of_requests():
    rounds = CriticalPath()
    for lengths in ([5, 40, 7], [30, 2], [9]):
        rounds.add_round(lengths)
    assert rounds.metrics() == {"critical_path_tokens": 40 + 30 + 9}
    chains = CriticalPath()  # prompt 0: requests of longest 40 then 9; prompt 1: 30, then 30 again
    for prompt, lengths in ((0, [5, 40]), (1, [30, 2]), (0, [9]), (1, [30])):
        chains.add_request(prompt, lengths)
    assert chains.metrics() == {"critical_path_tokens": 60}
    assert CriticalPath().metrics() == {"critical_path_tokens": 0.0}
