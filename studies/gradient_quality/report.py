"""The gradient-quality study's report: the measured checkpoints (the ``--json`` results) in, the tables of its
README section out (every method's measures, the paired differences, and for the equal-samples design each candidate
against its matched GRPO and the decision), each checkpoint with the command that measures it again."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from benchmarks.results import write_section

ROOT = Path(__file__).resolve().parents[2]
MODULE = "studies.gradient_quality"
SECTION, TITLE = "gradient_quality", "Gradient quality: each method's update on SmolLM2-135M"
# flags that name the files of the day a checkpoint was measured, not what was measured
FILE_FLAGS = ("--write", "--json")


def _cell(triple: list[float], digits: int = 3) -> str:
    value, low, high = triple
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def rerun_command(recorded: str, write: str | None = None) -> str:
    """The command that measures a checkpoint again today: the recorded command's flags (which checkpoint, sizes,
    model) under today's module, writing its section to ``write``. The record keeps the command as it ran; its
    module and files may have moved since (the study ran as ``benchmarks.gradient_quality`` until 2026-12-06).

    Args:
        recorded: The checkpoint's ``command``, as its run recorded it.
        write: The file the section is written to (shown relative to the repository when inside it).
    """
    words = shlex.split(recorded)
    flags = words[3:] if words[:2] == ["python", "-m"] else []
    kept, skip = [], False
    for word in flags:
        if skip:
            skip = False
        elif word in FILE_FLAGS:
            skip = True
        elif not word.startswith(tuple(f"{flag}=" for flag in FILE_FLAGS)):
            kept.append(word)
    if write is not None:
        path = Path(write).resolve()
        kept += ["--write", os.path.relpath(path, ROOT) if path.is_relative_to(ROOT) else write]
    return shlex.join(["python", "-m", MODULE, *kept])


OLD_INTERVALS = ("Mean [95% interval, jackknife over training prompts]: the study's intervals until 2026-12-06, which "
                 "drop every batch holding one prompt but scale as if one prompt were dropped; in a simulation of this "
                 "design (`python -m studies.gradient_quality.coverage`) they are 1.3 to 3 times too wide and cover "
                 "the truth 96-100% of the time, not 95%.")
NEW_INTERVALS = ("Mean [95% interval over the groups of training prompts and the rounds of batches, Student's t with "
                 "Satterthwaite's degrees of freedom]; each is recomputed from the per-batch values in the JSON by "
                 "`studies.gradient_quality.intervals.from_json`. The SNR's noise is that of fresh draws from each "
                 "pool (with replacement).")


def _checkpoint_lines(name: str, ckpt: dict) -> list[str]:
    """A checkpoint's heading, sizes, intervals' note, matched GRPO and reliability."""
    size, rel = ckpt["size"], ckpt["reliability"]
    design = ckpt.get("design", "first")
    heading = name if design == "first" else f"{ckpt.get('checkpoint', name)}, {design.replace('_', ' ')} design"
    new = "interval" in ckpt
    batches = (f"{size['batches']} batches of {size['batch']} prompts in rounds of partitions of groups of "
               f"{size.get('group', 1)}, each replayed {size['replays_per_batch']} times in orders of its pools and as "
               "many in fresh draws from them" if new else
               f"{size['batches']} batches of {size['batch']} prompts, each replayed {size['replays_per_batch']} times")
    lines = [
        f"### Checkpoint: {heading}", "",
        f"_Measured {ckpt['date']} on {ckpt['machine']}; {ckpt['wall_hours']:.1f} h of sampling and sketching._", "",
        f"{size['train_prompts']} training prompts x {size['train_k']} responses (pass rate "
        f"{100 * ckpt['pass_rate_train']:.1f}%), {size['heldout_prompts']} held-out questions x {size['heldout_k']} "
        f"(pass rate {100 * ckpt['pass_rate_heldout']:.1f}%); gradients sketched to {size['dims']} dimensions; "
        f"{batches}. {NEW_INTERVALS if new else OLD_INTERVALS}"
        + (f" Start: weights {ckpt['start_weights']}." if "start_weights" in ckpt else ""),
    ]
    if "matched_n" in ckpt:  # the first runs' record
        lines[-1] += (f" The matched GRPO is grpo_n{ckpt['matched_n']} (balance drew "
                      f"{ckpt['balance_samples_per_prompt']:.1f} responses per prompt on these pools).")
    elif design == "first":
        lines[-1] += (f" The matched GRPO is {ckpt['matched']['balance']} (balance drew "
                      f"{ckpt['methods']['balance']['samples_per_prompt']:.1f} responses per prompt on these pools).")
    lines[-1] += (f" Reference reliability (cosine of two disjoint halves; full-size by Spearman-Brown): training "
                  f"{rel['train_split_half']:.3f} ({rel['train_full']:.3f}), held-out {rel['heldout_split_half']:.3f} "
                  f"({rel['heldout_full']:.3f}); training reference vs held-out gradient "
                  f"{rel['train_vs_heldout']:.3f}.")
    return lines + [""]


def _methods_table(ckpt: dict) -> list[str]:
    lines = ["| method | responses / prompt | cos with batch reference | cos with held-out gradient | held-out gain "
             "of a unit step | SNR | SNR per response |", "|---|---:|---:|---:|---:|---:|---:|"]
    for method, m in ckpt["methods"].items():
        lines.append(f"| {method} | {m['samples_per_prompt']:.1f} | {_cell(m['cos_train'])} | "
                     f"{_cell(m['cos_heldout'])} | {_cell(m['gain'], 4)} | {_cell(m['snr'])} | "
                     f"{_cell(m['snr_per_sample'], 4)} |")
    shares = [m["prompt_share"] for m in ckpt["methods"].values() if "prompt_share" in m]
    if shares:
        lines += ["", f"The prompts' share of the variance of the cosine with the held-out gradient: "
                  f"{min(shares):.2f} to {max(shares):.2f} over methods."]
    return lines


def _paired_tables(ckpt: dict) -> list[str]:
    lines = []
    for reference, rows in ckpt.get("paired", {}).items():
        lines += ["", f"Paired difference to {reference} on the same batches and replays (primary: the cosine "
                  "with the held-out gradient):", "",
                  "| method | cos with held-out gradient | cos with batch reference | SNR |", "|---|---:|---:|---:|"]
        lines += [f"| {method} | {_cell(d['cos_heldout'], 4)} | {_cell(d['cos_train'], 4)} | "
                  f"{_cell(d['snr']) if 'snr' in d else 'not measured'} |" for method, d in rows.items()]
    return lines


def _matched_table(ckpt: dict) -> list[str]:
    """Each candidate against the GRPO that draws what it draws on these pools, and the decision."""
    pairs = ckpt.get("paired_matched", {})
    if not pairs or ckpt.get("design", "first") == "first":
        return []
    methods = ckpt["methods"]
    # the replays' latency in tokens, measured since the equal-samples design's amendment of 2026-12-06
    paths = all("critical_path_tokens" in methods[name] for name in (*pairs, *(d["reference"] for d in pairs.values())))
    lines = ["", "At equal samples: each candidate minus the GRPO at its own mean responses per prompt on these pools, "
             "on the same batches and replays (primary: the cosine with the held-out gradient"
             + ("; the critical path is a batch's sum over rounds of each round's longest response, candidate (its "
                "matched GRPO), described only" if paths else "") + "):", "",
             "| candidate | responses / prompt | matched GRPO | cos with held-out gradient | SNR per response | "
             "cos with batch reference | interval above 0 |" + (" critical path, tokens |" if paths else ""),
             "|---|---:|---|---:|---:|---:|---|" + ("---:|" if paths else "")]
    for name, d in pairs.items():
        above = "check" if name in ckpt.get("checks", ()) else ("yes" if d["cos_heldout"][1] > 0 else "no")
        own, grpo = (methods[m].get("critical_path_tokens") for m in (name, d["reference"]))
        path = f" {own:.0f} ({grpo:.0f}) |" if paths else ""
        lines.append(f"| {name} | {methods[name]['samples_per_prompt']:.2f} | {d['reference']} | "
                     f"{_cell(d['cos_heldout'], 4)} | {_cell(d['snr_per_sample'], 4)} | {_cell(d['cos_train'], 4)} | "
                     f"{above} |{path}")
    decision = ckpt.get("decision")
    if decision:
        chosen = ", ".join(decision["chosen"]) or "none"
        lines += ["", (f"Decision (the design's rule): {chosen} go(es) to the next learning protocol, "
                       + ("its paired difference's interval above 0." if decision["resolved"] else
                          "the largest paired difference, none with an interval above 0."))]
    return lines


def report(results: dict, write: str | None = None) -> str:
    """The section's text: per checkpoint, its sizes and reliability, every method's measures, the paired
    differences and, for the equal-samples design, each candidate against its matched GRPO and the decision.
    ``write``: the file the section goes to, named in each checkpoint's command."""
    lines = []
    for name, ckpt in results["checkpoints"].items():
        lines += _checkpoint_lines(name, ckpt) + _methods_table(ckpt) + _paired_tables(ckpt) + _matched_table(ckpt)
        lines += ["", f"Command: `{rerun_command(ckpt['command'], write)}`", ""]
    return "\n".join(lines)


def write_report(results: dict, write: str) -> None:
    """Writes the section into ``write``, stamped with every checkpoint's date and machine."""
    measured = " and ".join(sorted({f"{c['date']} on {c['machine']}" for c in results["checkpoints"].values()}))
    write_section(write, SECTION, TITLE, report(results, write), measured=measured)
