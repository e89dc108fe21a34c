"""Pool statistics carried inside each sample's uid.

verl groups samples by their ``uid`` string, and that string is the one per-sample field that
every trainer hands to an advantage estimator (as ``index``) and that follows a sample
through reordering, sequence-length balancing and TransferQueue storage. Putting the pool
statistics into it means no trainer code has to learn a new field:

    "<uid>|ra:<count>:<mean>:<m2>:<weight>"

Floats are written with ``repr``, which round-trips exactly. All samples of a prompt carry
the same string, so grouping by uid is unchanged.
"""

from __future__ import annotations

from reinforce_ada.advantage import PoolStats

TAG = "|ra:"


def tag_uid(uid: str, stats: PoolStats) -> str:
    """The uid with the prompt's pool statistics appended."""
    if TAG in uid:
        raise ValueError(f"uid {uid!r} already carries pool statistics")
    return f"{uid}{TAG}{stats.count}:{stats.mean!r}:{stats.m2!r}:{stats.weight!r}"


def parse_uid(uid: str) -> tuple[str, PoolStats | None]:
    """Splits a uid into the original uid and its pool statistics (None if untagged).

    Raises:
        ValueError: If the tag is present but malformed.
    """
    base, sep, payload = str(uid).partition(TAG)
    if not sep:
        return base, None
    parts = payload.split(":")
    try:
        count, mean, m2, weight = int(parts[0]), float(parts[1]), float(parts[2]), float(parts[3])
        if len(parts) != 4 or count < 1:
            raise ValueError
    except (ValueError, IndexError):
        raise ValueError(f"malformed pool statistics in uid {uid!r}") from None
    return base, PoolStats(count=count, mean=mean, m2=m2, weight=weight)
