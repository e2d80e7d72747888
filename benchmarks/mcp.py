"""MCP server benchmark: start-up time and per-call latency, as an agent sees them.

Drives the installed ``kirolearn mcp`` with the SDK's own stdio client against a
running daemon whose project holds the corpus's records:

- start-up: spawn the server, initialize, list the tools; next to the floor, a
  bare SDK server with one tool started the same way, interleaved so both see the
  same machine noise;
- calls: each tool called in one session, client-side round trip (client → server
  → daemon → back), and the server's resident memory at the end.

Bytecode is compiled first, as ``pip install`` does. Prints JSON Lines (DESIGN.md
§10): one ``startup`` line (with ratio_to_floor and the server's memory), then one
line per tool.

    python benchmarks/mcp.py            # 10,000 records, 10 start-ups, 200 calls a tool
    python benchmarks/mcp.py --quick    # 1,000 records, 3 start-ups, 20 calls
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# This script is named like the SDK's package: take its folder off the path so that
# `import mcp` finds the SDK, then put it back (last) for the corpus module.
HERE = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]

import anyio  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

import kirolearn  # noqa: E402
from kirolearn import project  # noqa: E402

sys.path.append(str(HERE))
import corpus  # noqa: E402
from harness import figures, say, write_records  # noqa: E402

KL = [sys.executable, "-m", "kirolearn"]
BIN = Path(sys.executable).parent
FLOOR_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("floor")
@server.tool()
def echo(text: str) -> str:
    return text
server.run()
"""


async def start_up(server: StdioServerParameters) -> float:
    """Milliseconds from spawning the server to having its tool list."""
    started = time.perf_counter()
    async with Client(server) as client:
        await client.list_tools()
        return (time.perf_counter() - started) * 1000


def server_rss_mb() -> float:
    """Resident memory of our running ``kirolearn mcp`` child."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"mcp" in cmdline and any(
                part.endswith(b"kirolearn") for part in cmdline):
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def calls(server: StdioServerParameters, count: int, queries: list[str]) -> dict:
    """Per-tool round trips, in one session; and the server's memory after them."""
    times: dict[str, list[float]] = {}
    errors = 0

    async def timed(tool: str, arguments: dict) -> str:
        nonlocal errors
        started = time.perf_counter()
        result = await client.call_tool(tool, arguments)
        times.setdefault(tool, []).append((time.perf_counter() - started) * 1000)
        errors += result.is_error
        return result.content[0].text

    async with Client(server) as client:
        saved = []
        for i in range(count):
            query = queries[i % len(queries)]
            text = await timed("save_observation", {
                "title": f"Benchmark decision {i}", "summary": f"Chose option {i}: {query}",
                "observation_type": "decision", "concepts": ["benchmark"],
                "files_touched": [f"src/module_{i % 50}.py"], "facts": [f"run {i}"]})
            saved.append(text.split()[1])
            await timed("search_memory", {"query": query})
            await timed("recall", {"query": query})
            await timed("timeline", {"record_id": saved[-1]})
            await timed("get_records", {"ids": saved[-5:]})
        for record_id in saved:
            await timed("forget", {"record_id": record_id})
        rss = server_rss_mb()
    return {"times": times, "errors": errors, "rss_mb": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--starts", type=int, default=None)
    parser.add_argument("--calls", type=int, default=None)
    args = parser.parse_args()
    count = args.records or (1000 if args.quick else 10_000)
    starts = args.starts or (3 if args.quick else 10)
    per_tool = args.calls or (20 if args.quick else 200)

    compileall.compile_dir(Path(kirolearn.__file__).parent, quiet=1)  # as pip install does
    with tempfile.TemporaryDirectory(prefix="klb-", dir="/tmp") as scratch:
        base, user_home = Path(scratch) / "kl", Path(scratch) / "home"
        proj = user_home / "proj"
        (proj / ".git").mkdir(parents=True)
        env = {"KIROLEARN_HOME": str(base), "HOME": str(user_home), "USER": "bench",
               "LOGNAME": "bench", "KIROLEARN_AUTOSTART": "0",
               "KIROLEARN_EMBEDDINGS_ENABLED": "0",  # lexical; no back-fill meanwhile
               "PATH": os.environ.get("PATH", "")}
        namespace = project.resolve_project(proj, home=str(user_home), override="").namespace(
            "bench")
        write_records(base, corpus.records(count, [namespace]))
        say(f"{count} records written; starting the daemon")
        subprocess.run([*KL, "start"], env={**os.environ, **env}, check=True,
                       capture_output=True, cwd="/tmp")
        ours = StdioServerParameters(command=str(BIN / "kirolearn"), args=["mcp"], env=env,
                                     cwd=str(proj))
        floor = StdioServerParameters(command=sys.executable, args=["-c", FLOOR_SERVER],
                                      env=env, cwd=str(proj))
        try:
            startup: dict[str, list[float]] = {"startup": [], "floor": []}
            for i in range(starts + 1):  # the first warms the page cache
                measured = anyio.run(start_up, floor), anyio.run(start_up, ours)
                if i:
                    startup["floor"].append(measured[0])
                    startup["startup"].append(measured[1])
                say(f"start-up {i}: floor {measured[0]:.0f} ms, kirolearn {measured[1]:.0f} ms")
            say(f"{per_tool} calls of each tool")
            result = anyio.run(calls, ours, per_tool, corpus.prompts(50) + corpus.short_queries(50))
        finally:
            subprocess.run([*KL, "stop"], env={**os.environ, **env}, capture_output=True,
                           cwd="/tmp")
    ratio = statistics.median(startup["startup"]) / statistics.median(startup["floor"])
    print(json.dumps({"bench": "mcp", "measure": "startup", "records": count, "runs": starts,
                      **figures("startup", startup["startup"]),
                      **figures("floor", startup["floor"]), "ratio_to_floor": round(ratio, 3),
                      "server_rss_mb": result["rss_mb"]}), flush=True)
    for tool, values in result["times"].items():
        print(json.dumps({"bench": "mcp", "measure": "call", "tool": tool, "records": count,
                          "calls": len(values), **figures("call", values),
                          "errors": result["errors"]}), flush=True)


if __name__ == "__main__":
    main()
