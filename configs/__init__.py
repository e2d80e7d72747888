"""Packaged defaults (default.toml) and, later, agent hook templates."""
