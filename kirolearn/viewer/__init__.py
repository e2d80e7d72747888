"""The viewer: what was captured, distilled and retrieved, in a browser on 127.0.0.1.

``app`` (routes, middleware), ``auth`` (the token), ``pages`` (one handler per page),
``queries`` (what the pages read), ``chart``, ``feed`` (the live tail's wake-ups),
``templates/`` and ``static/``. The process that serves it is ``roles.viewer``.
"""
