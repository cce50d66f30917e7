"""Facts about the model served: its config.json, its files, dummy-weight shapes.
May import bench, models."""
