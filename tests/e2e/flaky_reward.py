"""A reward function that raises on about 8% of calls (by a hash of the response), for the end-to-end
runs that check a failing reward call does not end the run. Loaded by verl from this file's path."""

import zlib

from reinforce_ada.tools.tiny import compute_score as tiny_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if zlib.crc32(solution_str.encode()) % 100 < 8:
        raise RuntimeError("flaky_reward: a simulated failure of the reward call")
    return tiny_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
