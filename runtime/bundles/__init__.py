"""Bundles as the daemon serves them: install, load, registry, serving table."""
