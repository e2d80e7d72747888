"""What kirolearn reads of a project's code: its working tree and its git repository,
both untrusted input (``files``: a file is read only when it is a regular file inside
the tree, bounded in size and time; ``git``: git runs as a reader, none of the
repository's programs with it). It reads git and the tree, never the store.
"""
