"""One study run to its answer: the Tuner (Optuna loop), the checked plan, forecast and time
budget, the study lock, gates at the end, confirmation relaunches. May import trial, failures, gates, verdict and below."""
