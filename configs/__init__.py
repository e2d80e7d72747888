"""Packaged defaults: ``default.toml``, the only keys a configuration may set
(``kirolearn.config`` reads it)."""
