"""Measuring a served endpoint: throughput and latency (throughput, client), the needle in a haystack
(needle), the task set (qeval) and its sandbox. May import models and errors only."""
