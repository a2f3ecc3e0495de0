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
import http from "node:http";

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

// node:http and a string scan per chunk (no JSON parse until the usage
// chunk): on a small machine the client shares the cores the server
// computes on, and a heavier client slows the server it measures.
function one(seed) {
  const body = JSON.stringify({
    prompt: prompt(seed), max_tokens: GEN, stream: true, temperature: 0, ignore_eos: true, cache_prompt: false,
    stream_options: { include_usage: true },
  });
  const u = new URL(`${url}/v1/completions`);
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let buf = "", first = null, done = null, chunks = 0, usage = null, timings = null;
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: "POST", agent: false,
                               headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } },
      (res) => {
        if (res.statusCode !== 200) {
          let e = "";
          res.on("data", (d) => (e += d));
          res.on("end", () => reject(new Error(`${name}: HTTP ${res.statusCode}: ${e}`)));
          return;
        }
        res.setEncoding("utf8");
        res.on("data", (part) => {
          const now = performance.now();
          buf += part;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const ev = buf.slice(0, i);
            buf = buf.slice(i + 2);
            if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
            if (first === null || done === null) {
              if (!/"text":""/.test(ev) && /"text":"/.test(ev)) {
                chunks++;
                if (first === null) first = now;
              }
              if (done === null && /"finish_reason":"/.test(ev)) done = now;
            } else if (/"text":"/.test(ev) && !/"text":""/.test(ev)) {
              chunks++;
            }
            if (ev.includes('"usage":{') || ev.includes('"timings":{')) {
              const j = JSON.parse(ev.slice(6));
              if (j.usage) usage = j.usage;
              if (j.timings) timings = j.timings;
            }
          }
        });
        res.on("end", () => {
          // a server that reports no usage: its text chunks stand for the tokens
          const n = usage ? usage.completion_tokens : chunks;
          resolve({
            ttft_s: (first - t0) / 1e3,
            decode_tok_s: n > 1 && done > first ? (n - 1) / ((done - first) / 1e3) : null,
            text_chunks: chunks,
            completion_tokens: n,
            server_prompt_ms: timings ? timings.prompt_ms : null,
            server_predicted_ms: timings ? timings.predicted_ms : null,
          });
        });
      });
    req.on("error", reject);
    req.end(body);
  });
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
