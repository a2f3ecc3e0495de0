// Time to first token of gem serve on a multi-turn chat, with prefix reuse
// (cache_prompt, the default) and without. The same conversation is played
// twice against one server: each turn sends the whole history plus a new
// user message and streams the answer (greedy, so both runs see identical
// prompts). TTFT is measured by the client, from sending the request to
// the first chunk after the role chunk; the server's own prefill time
// (timings.prompt_ms) and reused tokens (cached_tokens) are recorded too.
//   node bench/serve_prefix.mjs GEM MODEL [TURNS] [OUT.json]
import { spawn, execSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";

const [gem, model, turnsArg, out] = process.argv.slice(2);
const TURNS = Number(turnsArg || 6);

function start() {
  return new Promise((resolve, reject) => {
    const p = spawn(gem, ["serve", "-m", model, "--port", "0", "--ctx", "8192"], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    p.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && log.includes("loaded in")) resolve({ p, port: Number(m[1]) });
    });
    p.on("exit", (c) => reject(new Error("server exited " + c + ": " + log)));
  });
}

// A user turn of about 120 tokens that differs from turn to turn.
function question(i) {
  const topics = ["lighthouses", "river deltas", "glaciers", "desert cities", "coral reefs", "mountain passes",
                  "old harbours", "salt marshes", "volcanic islands", "canal systems"];
  return `Turn ${i}: describe the history, geography and daily life around ${topics[i % topics.length]}. ` +
    "Mention how people built their homes, what they ate, which trades they practised, how they travelled, " +
    "what the weather was like through the seasons, and which stories their grandparents told about the place. " +
    "Keep the answer short.";
}

async function turn(port, messages, cache) {
  const t0 = performance.now();
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ messages, max_tokens: 16, temperature: 0, stream: true, cache_prompt: cache,
                           stream_options: { include_usage: true } }),
  });
  let buf = "", ttft = null, text = "", usage = null, timings = null, n = 0;
  for await (const part of res.body) {
    buf += Buffer.from(part).toString("utf8");
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) { usage = j.usage; timings = j.timings; }
      if (!j.choices.length) continue;
      if (n++ === 0) continue; // the role chunk goes out before the prefill
      if (ttft === null) ttft = performance.now() - t0;
      text += j.choices[0].delta.content || "";
    }
  }
  return { ttft_ms: ttft, prompt_tokens: usage.prompt_tokens, cached_tokens: usage.prompt_tokens_details.cached_tokens,
           prompt_ms: timings.prompt_ms, text };
}

async function conversation(port, cache) {
  const messages = [{ role: "system", content: "You are a patient guide who answers every question briefly." }];
  const turns = [];
  for (let i = 0; i < TURNS; i++) {
    messages.push({ role: "user", content: question(i) });
    const r = await turn(port, messages, cache);
    turns.push(r);
    messages.push({ role: "assistant", content: r.text });
  }
  return turns;
}

const load_before = os.loadavg()[0];
const srv = await start();
await conversation(srv.port, true); // warm-up
const runs = { reuse: await conversation(srv.port, true), fresh: await conversation(srv.port, false) };
srv.p.kill("SIGTERM");

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const rows = runs.reuse.map((r, i) => ({ turn: i + 1, prompt_tokens: r.prompt_tokens, cached_tokens: r.cached_tokens,
  ttft_reuse_ms: +r.ttft_ms.toFixed(1), ttft_fresh_ms: +runs.fresh[i].ttft_ms.toFixed(1),
  prefill_reuse_ms: r.prompt_ms, prefill_fresh_ms: runs.fresh[i].prompt_ms, same_answer: r.text === runs.fresh[i].text }));
const later = rows.slice(1);
const result = {
  what: "gem serve time to first token on a multi-turn chat, prefix reuse on vs off",
  model: model.split("/").pop(), turns: TURNS, cpu: os.cpus()[0].model, nproc: os.cpus().length,
  commit: execSync("git rev-parse HEAD").toString().trim(),
  clean_tree: execSync("git status --porcelain --untracked-files=no").toString().trim() === "",
  // the machine may be shared: the 1-minute load average around the run
  load_avg_1m: { before: +load_before.toFixed(2), after: +os.loadavg()[0].toFixed(2) },
  rows,
  median_ttft_reuse_ms_turns_2_on: median(later.map((r) => r.ttft_reuse_ms)),
  median_ttft_fresh_ms_turns_2_on: median(later.map((r) => r.ttft_fresh_ms)),
};
result.speedup = +(result.median_ttft_fresh_ms_turns_2_on / result.median_ttft_reuse_ms_turns_2_on).toFixed(2);
console.table(rows);
console.log(`median TTFT, turns 2..${TURNS}: ${result.median_ttft_reuse_ms_turns_2_on} ms with reuse, ` +
            `${result.median_ttft_fresh_ms_turns_2_on} ms without (${result.speedup}x)`);
if (out) fs.writeFileSync(out, JSON.stringify(result, null, 1) + "\n");
