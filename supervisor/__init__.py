"""The supervisor: the daemon process ``kirolearn start`` launches (``__main__``), the
arbiter that starts, watches and restarts each role process (``arbiter``), and their
states (``states``). The ``kirolearn`` command itself is ``kirolearn.cli``.

Installed as ``kirolearn.supervisor`` so that it never shadows PyPI's
``supervisor`` (supervisord) package.
"""
