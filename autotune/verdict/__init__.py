"""The statistics behind an answer: launch-to-launch noise, trade-offs against the baseline, a
confirmation's judgement. May import models only."""
