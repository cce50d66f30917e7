"""One launch of one candidate: the launch seam every engine start goes through (launch), the
engine's launch and what it measures (run), the trial context, the phase clock, request progress.
May import gates, space, engines, launchers, bench, models."""
