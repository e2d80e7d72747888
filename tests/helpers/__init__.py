"""What the tests share besides fixtures, a module per kind: ``waits`` (the one way to
wait), ``cli`` (the CLI as a user runs it), ``events`` (what is stored and retrieved),
``workspace`` (a user's project, its hooks and MCP server), ``agents`` (the real agent
CLIs), ``model_apis`` (the scripted model APIs) and ``team`` (other machines)."""
