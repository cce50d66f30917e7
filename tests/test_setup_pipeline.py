"""One set-up pipeline (issue 51): `search` (commands/setup.py's prepare), `plan` and `export
--predicted` (commands/plan.py) and `probe` read a space through the same steps (read_space,
on_this_host, place), so a space placed for a plan is the space a search runs. Before, the plan's
set-up was a copy of the search's returning a 7-tuple, and the probe's a third."""

from __future__ import annotations

import pytest

from autotune.commands.plan import planned
from autotune.commands.setup import prepare


@pytest.mark.parametrize(("space", "hardware", "nodes"), [
    ("llamacpp-gemma3-270m", None, None),  # the CPU default
    ("vllm-qwen3-30b-a3b-dummy", "spark", 4),
    ("vllm-gemma3-270m", "h200", None),
])
def test_a_plan_places_a_space_as_a_search_runs_it(tmp_path, space, hardware, nodes):
    search = prepare(space_name=space, model_path=None, db_path=tmp_path / "runs.db", study="s", hardware=hardware,
                     nodes=nodes, accuracy=True, logs_dir=tmp_path, dry_run=True)
    plan = planned(space, hardware, nodes, None, tmp_path / "runs.db")
    placed = plan.placed
    assert (placed.profile, placed.nodes) == (search.hardware, search.nodes)
    assert placed.space.model_copy(update={"model": search.space.model}) == search.space  # the search resolves the model
    assert len(placed.kept) == search.candidates_after_rules
    assert not (tmp_path / "runs.db").exists()  # neither wrote runs.db
