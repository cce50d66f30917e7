"""The CLI's commands as library functions, one module per command (search, show, export, plan,
probe, space_new) and the set-up pipeline they share (setup). May import every package; only cli imports it."""
