"""Run as `python -m fakes.ctrl_c_in_exec ARGS`: `python -m autotune ARGS` whose command is cut by a
Ctrl-C that lands inside string-compiled code (what a dataclass, namedtuple or pydantic model being
made runs), as happens when the SIGINT arrives during a lazy import."""

import runpy

from autotune import cli


def _interrupted_inside_exec(*args: object, **kwargs: object) -> None:
    exec("raise KeyboardInterrupt", {})


cli.app = _interrupted_inside_exec  # type: ignore[assignment]
runpy.run_module("autotune", run_name="__main__")
