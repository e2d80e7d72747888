"""The supervisor: the ``kirolearn`` command and the process arbiter it runs.

Installed as ``kirolearn.supervisor`` so that it never shadows PyPI's
``supervisor`` (supervisord) package.
"""
