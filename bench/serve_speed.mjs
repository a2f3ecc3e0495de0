// Served speed as a client sees it: time to first token and the streamed
// decode rate of an OpenAI-compatible server (gem serve, llama-server)
// through POST /v1/completions with "stream": true. Prompts are token ids
// (BOS, then ids from gem bench's generator, seeded per request so no two
// requests share more than BOS), greedy, end tokens ignored, the prompt
// cache off: every request prefills its whole prompt, as a new agent's does.
// One warm-up request, then REPS measured ones, one at a time.
//
// Per request: ttft_s, from sending the request to the first chunk with
// text; decode_tok_s, (completion tokens - 1) / (the chunk that says the
// finish reason - the first text chunk): every token counts, also those
// whose text a chunk holds back (a character spanning tokens) or that have
// none; the server's own timings when it reports them. Medians over the
// reps.
//   node bench/serve_speed.mjs URL PROMPT_TOKENS GEN REPS NAME > out.json
const [url, promptArg, genArg, repsArg, name] = process.argv.slice(2);
if (!url || !promptArg) {
  console.error("usage: node bench/serve_speed.mjs URL PROMPT_TOKENS GEN REPS NAME");
  process.exit(2);
}
const P = Number(promptArg), GEN = Number(genArg || 128), REPS = Number(repsArg || 5);

// gem bench's ids (src/cli/bench.c), from a per-request seed
function prompt(seed) {
  const ids = [2];
  let r = (0x9e3779b97f4a7c15n + BigInt(seed) * 0x1000193n) & 0xffffffffffffffffn;
  for (let i = 1; i < P; i++) {
    r = (r * 6364136223846793005n + 1n) & 0xffffffffffffffffn;
    ids.push(Number((r >> 40n) % 200000n) + 1000);
  }
  return ids;
}

async function one(seed) {
  const body = JSON.stringify({
    prompt: prompt(seed), max_tokens: GEN, stream: true, temperature: 0, ignore_eos: true, cache_prompt: false,
    stream_options: { include_usage: true },
  });
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" }, body });
  if (!res.ok) throw new Error(`${name}: HTTP ${res.status}: ${await res.text()}`);
  let buf = "", first = null, done = null, chunks = 0, usage = null, timings = null;
  for await (const part of res.body) {
    const now = performance.now();
    buf += Buffer.from(part).toString("utf8");
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of ev.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const j = JSON.parse(line.slice(6));
        if (j.usage) usage = j.usage;
        if (j.timings) timings = j.timings;
        const c = j.choices && j.choices[0];
        if (c && c.text) {
          chunks++;
          if (first === null) first = now;
        }
        if (c && c.finish_reason && done === null) done = now;
      }
    }
  }
  // a server that reports no usage: its text chunks stand for the tokens
  const n = usage ? usage.completion_tokens : chunks;
  return {
    ttft_s: (first - t0) / 1e3,
    decode_tok_s: n > 1 && done > first ? (n - 1) / ((done - first) / 1e3) : null,
    text_chunks: chunks,
    completion_tokens: n,
    server_prompt_ms: timings ? timings.prompt_ms : null,
    server_predicted_ms: timings ? timings.predicted_ms : null,
  };
}

const median = (v) => {
  const s = v.filter((x) => x !== null).sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : null;
};

await one(1000); // warm-up
const runs = [];
for (let k = 0; k < REPS; k++) runs.push(await one(k + 1));
console.log(JSON.stringify({
  server: name, url, prompt_tokens: P, max_tokens: GEN, reps: REPS,
  ttft_s: median(runs.map((r) => r.ttft_s)), decode_tok_s: median(runs.map((r) => r.decode_tok_s)), runs,
}, null, 1));
