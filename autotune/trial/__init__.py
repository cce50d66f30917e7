"""One launch of one candidate: start the engine, measure, gate, stop (run), the phase clock and
request progress. May import gates, space, engines, launchers, bench, models."""
