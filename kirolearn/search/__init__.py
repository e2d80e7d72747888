"""Finding memories: the query (``query``), the engine (``engine``) that runs each
``request`` as ``steps``, the words' side (``lexical``), the context block
(``context``), and for semantic and hybrid search the local embedding model
(``embeddings``) and the vectors in memory (``vectors``).

This module itself is light (the viewer imports it for the names below).
"""

OUTCOMES = ("ok", "empty", "fallback", "timeout", "error")  # how a search ended
MAX_NAMESPACES = 8  # the namespaces one search takes (the viewer asks a few times)
