"""Agent shims: one module per agent surface, each turning hook payloads into events.

A shim imports only the standard library, pyzmq, msgpack and kirolearn's
contract, project and protocol modules, so that a hook costs tens of
milliseconds.
"""
