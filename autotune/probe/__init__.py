"""What actually runs on this host: probe subprocesses (runner), the order of probe cells, and
each engine's feature probes (features). May import space, engines, launchers, model, trial, models."""
