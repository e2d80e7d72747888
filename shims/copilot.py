"""GitHub Copilot CLI shim (``kirolearn-copilot``): ``.github/hooks/*.json`` hooks.

Payloads are camelCase, on stdin, with ``sessionId`` and ``cwd``; the hook's name
comes as the first argument (the payloads do not carry it). Context goes back as
``{"additionalContext": …}``, which Copilot CLI adds to the conversation. ``toolArgs``
may be JSON text; a shell's ``exit code N`` in ``toolResult`` becomes its exit status.

| hook | event | stdout |
| --- | --- | --- |
| ``sessionStart`` | ``note`` | the session's context |
| ``userPromptSubmitted`` | ``prompt`` (retrieval) | the prompt's context |
| ``postToolUse`` | ``tool_use`` ``{toolArgs, toolResult}`` | — |
| ``postToolUseFailure`` | ``tool_use`` whose response is ``{is_error, error}`` | — |
| ``agentStop`` | nothing: it carries no text of the reply (and the transcript it names is
  not written up to the reply yet) | — |
| ``sessionEnd`` | ``note`` with the reason | — |
"""

from __future__ import annotations

import json
import re
import sys

from kirolearn.shims import common

SURFACE = "copilot"
ROLES = {"sessionStart": "start", "userPromptSubmitted": "prompt", "postToolUse": "tool",
         "postToolUseFailure": "tool", "agentStop": "ignored", "sessionEnd": "end"}
CONTEXT_LIMIT = 9500  # characters, as for the agents that document a limit
EXIT_CODE = re.compile(r"exit(?:ed with)? code:? (-?\d+)", re.IGNORECASE)


def tool_use(payload: dict) -> dict:
    args = payload.get("toolArgs")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = {"input": args}
    if "error" in payload and "toolResult" not in payload:
        response: object = {"is_error": True, "error": payload.get("error")}
    else:
        result = payload.get("toolResult")
        result = result if isinstance(result, dict) else {}
        text = result.get("textResultForLlm")
        text = text if isinstance(text, str) else ""
        said = EXIT_CODE.search(text)
        response = {"output": text, **({"exit_code": int(said.group(1))} if said else {}),
                    **({"is_error": True} if result.get("resultType") in ("failure", "error")
                       else {})}
    return common.tool_body(payload.get("toolName"), args, response)


def read(payload: dict, name: str) -> common.Hook:
    role = ROLES.get(name, "ignored")
    text = {"start": payload.get("source"), "prompt": payload.get("prompt"),
            "end": payload.get("reason")}.get(role)
    tools = (tool_use(payload),) if role == "tool" else ()
    return common.Hook(role, name, payload.get("sessionId"), payload.get("cwd"), text, tools)


def handle(name: str, payload: dict) -> str:
    context = common.answer(SURFACE, read(payload, name))
    return json.dumps({"additionalContext": common.fit_context(context, CONTEXT_LIMIT)}) \
        if context else ""


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    return common.run_stdin_hook(lambda payload: handle(name, payload))


if __name__ == "__main__":
    sys.exit(main())
