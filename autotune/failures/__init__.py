"""What a failed trial teaches: learned failures (learning) and the knob values isolated by extra
launches (isolation). May import trial, store, engines, launchers, models."""
