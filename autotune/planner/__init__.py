"""Predictions before any launch: memory fit and roofline (roofline), fitted efficiencies
(calibration), predicted against measured (check), a study's first trials (prior). May import space, engines, hardware, model, models."""
