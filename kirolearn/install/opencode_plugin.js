// kirolearn's OpenCode plugin: long-term memory for the agent.
// Written by `kirolearn install --agent opencode`; `kirolearn uninstall` removes it.
// Each hook hands a small JSON payload to the kirolearn-opencode shim on stdin; the
// shim records it and prints the context for a prompt, which goes into the message.
import { spawn } from "node:child_process";

const SHIM = "kirolearn-opencode";
const WAIT_MS = 5000; // the shim answers within its own 500 ms budget

function run(payload) {
  return new Promise((resolve) => {
    let out = "";
    let child;
    try {
      child = spawn(SHIM, [], { stdio: ["pipe", "pipe", "ignore"] });
    } catch {
      return resolve("");
    }
    const timer = setTimeout(() => child.kill(), WAIT_MS);
    child.on("error", () => { clearTimeout(timer); resolve(""); });
    child.stdout.on("data", (chunk) => { out += chunk; });
    child.on("close", () => { clearTimeout(timer); resolve(out); });
    child.stdin.end(JSON.stringify(payload));
  });
}

export const Kirolearn = async ({ client, directory }) => {
  const started = new Set();
  const args = new Map(); // a tool call's arguments, by call id, until it is done
  const hook = (fields) => run({ cwd: directory, ...fields });

  return {
    "chat.message": async (input, output) => {
      const session = input.sessionID;
      const prompt = (output.parts || [])
        .filter((part) => part.type === "text" && !part.synthetic)
        .map((part) => part.text).join("\n");
      let context = "";
      if (!started.has(session)) {
        started.add(session);
        context = await hook({ hook: "start", session_id: session });
      }
      const found = await hook({ hook: "prompt", session_id: session, text: prompt });
      context = [context, found].filter(Boolean).join("\n\n");
      if (context) {
        // A part needs an id ("prt…"); one that extends the last part's sorts right after it.
        const last = output.parts[output.parts.length - 1] || {};
        output.parts.push({
          id: last.id ? `${last.id}kirolearn` : `prt_kirolearn${Date.now()}`,
          sessionID: session, messageID: output.message?.id ?? last.messageID,
          type: "text", text: context, synthetic: true });
      }
    },
    "tool.execute.before": async (input, output) => {
      args.set(input.callID, output.args);
    },
    "tool.execute.after": async (input, output) => {
      const toolArgs = input.args ?? args.get(input.callID) ?? {};
      args.delete(input.callID);
      await hook({ hook: "tool", session_id: input.sessionID, tool: {
        name: input.tool, args: toolArgs, output: output.output, metadata: output.metadata } });
    },
    event: async ({ event }) => {
      if (event.type === "session.idle") {
        const session = event.properties.sessionID;
        let text = "";
        try {
          const messages = (await client.session.messages({ path: { id: session } })).data || [];
          const last = messages.filter((m) => m.info.role === "assistant").pop();
          text = (last?.parts || []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
        } catch {}
        await hook({ hook: "turn_end", session_id: session, text });
      } else if (event.type === "session.deleted") {
        await hook({ hook: "end", session_id: event.properties.info?.id, text: "deleted" });
      }
    },
  };
};
