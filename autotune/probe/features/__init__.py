"""Each engine's feature probes: which settings run on this host, launched for real, with evidence.

An engine names its probes (`Engine.feature_probes_entry`, "module:function"), as the engine
registry names engines; they sit above the engines and the search space, which they use.
"""
