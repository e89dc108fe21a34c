"""A reward function for the end-to-end runs that check what a long run meets, loaded by verl from this file's path:

* it raises on about 20% of calls (by a hash of the response), so that failed reward calls must be redrawn;
* it gives every response of a training prompt from index 4 on a 0 (the tiny task's rows carry their index), so
  that with 8 training prompts and 4 a step, step 2 has nothing to learn from: with ``unresolved=drop`` every
  prompt is dropped and the step has nothing to keep.
"""

import zlib

from reinforce_ada.tools.tiny import compute_score as tiny_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if zlib.crc32(solution_str.encode()) % 100 < 20:
        raise RuntimeError("hostile_reward: a simulated failure of the reward call")
    if (extra_info or {}).get("split") == "train" and (extra_info or {}).get("index", 0) >= 4:
        return 0.0
    return tiny_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
