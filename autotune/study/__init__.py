"""One study run to its answer: the run (run), the Tuner (Optuna loop), the trials' accuracy work,
the outcome, the checked plan, forecast and time budget, the lock, confirmation relaunches. May import trial,
failures, gates, verdict, planner, space, hardware and below."""
