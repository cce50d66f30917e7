"""Hardware profiles (the built-in ones and --hardware auto) and the device this host has.
May import engines, models."""
