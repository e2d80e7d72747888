"""Model APIs stood in by real HTTP servers on 127.0.0.1 that answer like them:
Anthropic's Messages API and an OpenAI-compatible Chat Completions API, scripted."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def scripted_api(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """A model API stood in by handler on 127.0.0.1 (a free port); the request bodies it
    keeps are in ``server.bodies``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class ApiHandler(BaseHTTPRequestHandler):
    """A scripted model API's request handler: quiet, and one way to answer."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, content_type: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeAnthropic(ApiHandler):
    """Answers like Anthropic's Messages API, streamed or not: the tool call
    ``tool_call`` picks for a request, else "done". Subclasses pick the calls."""

    def tool_call(self, body: dict, results: list[str]) -> tuple[str, dict] | None:
        """The tool call to answer body with, given the results of the calls before it
        in the turn (none: "done")."""
        return None

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:
        self._send("application/json", b"{}")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
            self._send("application/json", json.dumps(
                {"input_tokens": 10} if "count_tokens" in self.path else {}).encode())
            return
        body = json.loads(raw)
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        results = [json.dumps(b.get("content")) for m in body.get("messages", [])
                   if isinstance(m.get("content"), list) for b in m["content"]
                   if isinstance(b, dict) and b.get("type") == "tool_result"]
        call = self.tool_call(body, results)
        if call:
            block = {"type": "tool_use", "id": "toolu_01", "name": call[0], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(call[1])}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": "done"}
            stop = "end_turn"
        message = {"id": "msg_01", "type": "message", "role": "assistant",
                   "model": body.get("model", "claude"), "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
        if not body.get("stream"):
            final = {**block, **({"input": call[1]} if call else {"text": "done"})}
            self._send("application/json", json.dumps(
                {**message, "content": [final], "stop_reason": stop}).encode())
            return
        events = [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {
                "stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        self._send("text/event-stream", "".join(
            f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode())


class FakeChatCompletions(ApiHandler):
    """Answers like an OpenAI-compatible Chat Completions API, streamed: the tool call
    ``tool_call`` picks for a request, else "done". Subclasses pick the calls."""

    def tool_call(self, body: dict, tools: list[str], results: list[str]
                  ) -> tuple[str, dict] | None:
        """The tool call to answer body with, given the tools it offers and the results
        of the calls before it in the turn (none: "done")."""
        return None

    def do_GET(self) -> None:
        self._send("application/json", json.dumps(
            {"object": "list", "data": [{"id": "test-model", "object": "model"}]}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        messages = body.get("messages") or []
        turn = max((i for i, m in enumerate(messages) if m.get("role") == "user"
                    and not str(m.get("content")).startswith("<hook_context")), default=0)
        results = [str(m.get("content")) for m in messages[turn:] if m.get("role") == "tool"]
        call = self.tool_call(body, tools, results)
        if call is None:
            delta, finish = {"role": "assistant", "content": "done"}, "stop"
        else:
            delta = {"role": "assistant", "content": None, "tool_calls": [{
                "index": 0, "id": f"call_{len(results) + 1}", "type": "function",
                "function": {"name": call[0], "arguments": json.dumps(call[1])}}]}
            finish = "tool_calls"
        chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 1,
                             "total_tokens": 11}}]
        head = {"id": "c1", "object": "chat.completion.chunk", "created": 0,
                "model": "test-model"}
        self._send("text/event-stream", ("".join(
            f"data: {json.dumps({**head, **chunk})}\n\n" for chunk in chunks)
            + "data: [DONE]\n\n").encode())
