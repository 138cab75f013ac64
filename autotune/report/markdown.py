"""The report as Markdown (``report.md``): pure formatting of a ``Report``.

Every text in it goes through ``md_text`` (or a code span/fence that its text cannot close):
a reason, a warning or a study name may carry what a trainer printed, HTML included, and a
Markdown viewer must show it as printed, never render it.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.report.cells import TABLE_HEAD, summary, trial_cells
from autotune.report.model import Report
from autotune.report.text import changes as _changes
from autotune.report.text import md_code, md_fence, md_text

_md_cell = md_text


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def render_markdown(report: Report) -> str:
    r = report
    out = [f"# autotune report: {md_text(r.study)}", ""]
    out += [f"- **{md_text(label)}:** {md_text(text)}" for label, text in summary(r)]
    out.append("")
    if r.command:
        fence = md_fence(r.command)
        out += ["## Launch the full training", "", f"{fence}bash", r.command, fence, ""]
        out.append(
            f"The winning config is {md_code(str(r.best_config_path))}: the baseline with only the winning knobs "
            "changed (`autotune report --write-config FILE` writes it anywhere)."
        )
        out.append("")
    if r.warnings:
        out += ["## Warnings", ""]
        out += [f"- {md_text(w)}" for w in r.warnings]
        out.append("")
    if r.memory_phases:
        out += ["## Memory phases", ""]
        out += [f"- {md_text(line)}" for line in r.memory_phases]
        out.append("")
    out += ["## Trials", ""]
    if r.trials:
        out += _md_table(TABLE_HEAD, [trial_cells(r, t) for t in r.trials])
    else:
        out.append("No trial has started yet.")
    out.append("")
    if r.ruled_out:
        out += ["## Ruled out without running", ""]
        out += _md_table(
            ("knobs vs baseline", "reason", "by trials"),
            [
                (_changes(x.changed) or "—", x.reason, ", ".join(str(n) for n in x.by_trials) or "—")
                for x in r.ruled_out
            ],
        )
        out.append("")
    return "\n".join(out)
