"""Predictions before any launch: memory fit and roofline (roofline), fitted efficiencies
(calibration), predicted against measured (check). May import engines, hardware, model, models."""
