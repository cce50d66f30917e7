"""A study's draft schedule per batch size in words, for `show` and the HTML report alike."""

from __future__ import annotations

from autotune.models import DraftScheduleReport, Recipe, ScheduleLevel, ScheduleStatus


def _level(x: ScheduleLevel) -> str:
    each = ", ".join(f"K={k} {v:.0f}" for k, v in sorted(x.tps_by_k.items()))
    line = f"c{x.concurrency}: K={x.draft_k} ({each} tok/s)"
    if x.schedule_tps is not None:
        judged = {None: "not judged", True: "beyond the noise", False: "inside the noise"}[x.beyond_noise]
        single = f"{x.single_k_tps:.0f}" if x.single_k_tps is not None else "-"
        line += f"; schedule {x.schedule_tps:.0f} vs single K {single} ({judged})"
    return line


def schedule_lines(report: DraftScheduleReport | None) -> list[str]:
    """The schedule's summary line and one line per concurrency level; nothing for a space that
    tunes no draft_k (there is nothing to say)."""
    if report is None or report.status is ScheduleStatus.NO_DRAFT_KNOB:
        return []
    lines = [report.line()]
    if report.single_k_trial is not None and report.levels:
        lines.append(f"best single K: trial {report.single_k_trial} (K={report.single_k})")
    lines += [_level(x) for x in report.levels]
    if report.speculative_config and report.status is ScheduleStatus.ADOPTED:
        lines.append(f"--speculative-config '{report.speculative_config}'")
    return lines


def with_schedule(recipe: Recipe, report: DraftScheduleReport | None, trial: int) -> Recipe:
    """The recipe of `trial` with the study's draft schedule beside it; an adopted schedule of that
    trial's config goes into its launch (`--speculative-config` with the schedule) and params."""
    if report is None or report.status is ScheduleStatus.NO_DRAFT_KNOB:
        return recipe
    if report.single_k_trial is not None and report.single_k_trial != trial:
        return recipe  # a schedule composed for another config
    if report.status is not ScheduleStatus.ADOPTED or report.schedule is None or not report.speculative_config:
        return recipe.model_copy(update={"draft_schedule": report})
    nodes, server = [], recipe.launch.server
    for node in recipe.launch.nodes:
        argv = list(node.argv)
        if node is server and "--speculative-config" in argv:
            argv[argv.index("--speculative-config") + 1] = report.speculative_config
        elif node is server:  # the best single K was 0: no drafting to replace
            argv += ["--speculative-config", report.speculative_config]
        nodes.append(node.model_copy(update={"argv": argv}))
    params = {**recipe.params, "draft_k": report.schedule.max_k, "draft_schedule": report.schedule.text()}
    return recipe.model_copy(update={"draft_schedule": report, "params": params,
                                     "launch": recipe.launch.model_copy(update={"nodes": nodes})})
