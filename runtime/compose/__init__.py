"""The daemon's assembly: the composition root (`app`), its stages and the lifecycle (`daemon`)."""
