// gem serve driven by the official openai SDK (chat and completions,
// streaming and not, tool calls, reasoning, errors surfaced as SDK
// exceptions, cancellation by abort), then a bounded load test: 32
// concurrent clients, a few requests each, every one answered or refused
// with 503, /health answering during a long request, no leaked descriptors
// and a stable RSS. Servers are real processes on loopback with the tiny
// model. Prints "test_openai: N passed, M failed" (tests/run.sh sums it).
//   node test.mjs GEM MODEL
import { checker } from "../check.mjs";
import { serverPool } from "../serve.mjs";
import fs from "node:fs";
import http from "node:http";
import OpenAI from "openai";

const [gem, model] = process.argv.slice(2);
const { check, expectThrow, report } = checker("test_openai", 400);

const servers = serverPool(gem, model);
const startServer = servers.start;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One request on a fresh connection (agent: false sends Connection: close).
function raw(port, method, path, body) {
  const data = body ? Buffer.from(JSON.stringify(body)) : null;
  return new Promise((resolve) => {
    const req = http.request({ host: "127.0.0.1", port, method, path, agent: false,
      headers: data ? { "Content-Type": "application/json", "Content-Length": data.length } : {} }, (res) => {
      let data = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (data += d));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
    });
    req.on("error", (e) => resolve({ status: 0, error: e.message }));
    if (data) req.write(data);
    req.end();
  });
}

function procStats(pid) {
  const fds = fs.readdirSync(`/proc/${pid}/fd`).length;
  const rss = Number(fs.readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]);
  return { fds, rss };
}

async function sdkTests() {
  const srv = await startServer(["--test-hooks", "--alias", "tiny"]);
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${srv.port}/v1`, apiKey: "unused", maxRetries: 0 });
  const user = [{ role: "user", content: "Tell me a story about a lighthouse." }];

  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "tiny", "models.list", models.data);
  const m = await client.models.retrieve("tiny");
  check(m.id === "tiny" && m.object === "model", "models.retrieve", m);
  await expectThrow(() => client.models.retrieve("nope"), OpenAI.NotFoundError, 404, "unknown model", "does not exist");

  // non-streaming chat, deterministic at temperature 0
  const a = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 8, temperature: 0 });
  check(a.object === "chat.completion" && /^chatcmpl-/.test(a.id), "chat object and id", a);
  check(a.choices.length === 1 && a.choices[0].message.role === "assistant", "chat message", a.choices);
  check(a.choices[0].finish_reason === "length", "finish length", a.choices[0]);
  check(a.usage.completion_tokens === 8 && a.usage.prompt_tokens > 5 &&
        a.usage.total_tokens === a.usage.prompt_tokens + 8, "usage", a.usage);
  const b = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 8, temperature: 0 });
  check(b.choices[0].message.content === a.choices[0].message.content, "temperature 0 is deterministic");
  const s1 = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 8, temperature: 1.0, seed: 7 });
  const s2 = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 8, temperature: 1.0, seed: 7 });
  check(s1.choices[0].message.content === s2.choices[0].message.content, "same seed, same text");

  // streaming chat gives the same text, usage last
  const stream = await client.chat.completions.create({
    model: "tiny", messages: user, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = "", chunks = 0, usage = null, finish = null, role = null;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    if (!c.choices.length) continue;
    if (c.choices[0].delta.role) role = c.choices[0].delta.role;
    text += c.choices[0].delta.content || "";
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  check(text === a.choices[0].message.content, "stream text equals the non-streamed text", [text, a.choices[0].message.content]);
  check(role === "assistant" && finish === "length" && chunks >= 10, "stream shape", { role, finish, chunks });
  check(usage && usage.completion_tokens === 8, "stream usage", usage);

  // reasoning and tool calls (the generated text forced by the test hook)
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
  const forced = "<|channel>thought\nI should call the tool.<channel|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>" +
                 "<|tool_call>call:get_weather{city:<|\"|>Lyon<|\"|>}<tool_call|><|tool_response>";
  const t = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Weather?" }], tools,
    gem_forced_output: forced });
  const msg = t.choices[0].message;
  check(t.choices[0].finish_reason === "tool_calls", "tool finish_reason", t.choices[0]);
  check(msg.content === null && msg.reasoning_content === "I should call the tool.", "reasoning_content", msg);
  check(msg.tool_calls?.length === 2 && msg.tool_calls[0].type === "function" && msg.tool_calls[0].function.name === "get_weather",
        "tool_calls", msg.tool_calls);
  check(JSON.parse(msg.tool_calls[1].function.arguments).city === "Lyon", "tool arguments", msg.tool_calls);
  check(msg.tool_calls[0].id !== msg.tool_calls[1].id, "tool call ids differ");

  // the SDK's stream helper assembles streamed tool calls
  const ts = client.chat.completions.stream({ model: "tiny", messages: [{ role: "user", content: "Weather?" }], tools,
    gem_forced_output: forced });
  const deltas = [];
  ts.on("chunk", (c) => { if (c.choices[0]?.delta?.tool_calls) deltas.push(c.choices[0].delta.tool_calls[0]); });
  const final = await ts.finalChatCompletion();
  const fm = final.choices[0].message;
  check(final.choices[0].finish_reason === "tool_calls" && fm.tool_calls.length === 2, "streamed tool calls", final.choices[0]);
  check(fm.tool_calls[0].function.arguments === '{"city":"Paris"}', "streamed arguments", fm.tool_calls);
  check(deltas.length === 2 && deltas.every((d, i) => d.index === i && d.id && d.function.name === "get_weather" && d.function.arguments),
        "each call in one chunk with id, name and arguments", deltas);

  // a tool round trip: the assistant's call and the tool's answer go back in
  const round = await client.chat.completions.create({ model: "tiny", tools, max_tokens: 4, temperature: 0, messages: [
    { role: "user", content: "Weather?" }, msg,
    { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "sunny" },
    { role: "tool", tool_call_id: msg.tool_calls[1].id, content: "rain" }] });
  check(round.choices[0].message.role === "assistant" && round.usage.completion_tokens <= 4, "tool round trip", round.choices);

  // tool_choice naming a function forces a call to it
  const named = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Weather?" }], tools,
    tool_choice: { type: "function", function: { name: "get_weather" } }, gem_forced_output: "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>" });
  check(named.choices[0].message.tool_calls?.[0]?.function.arguments === '{"city":"Oslo"}', "named tool_choice", named.choices);

  // stop strings
  const st = await client.chat.completions.create({ model: "tiny", messages: user, stop: ["three"],
    gem_forced_output: "one two three four" });
  check(st.choices[0].message.content === "one two " && st.choices[0].finish_reason === "stop", "stop", st.choices[0]);

  // completions, streamed and not
  const c1 = await client.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 6, temperature: 0 });
  check(c1.object === "text_completion" && c1.choices[0].text.length > 0 && c1.usage.completion_tokens === 6, "completion", c1);
  const cs = await client.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 6, temperature: 0, stream: true });
  let ctext = "";
  for await (const c of cs) ctext += c.choices[0]?.text || "";
  check(ctext === c1.choices[0].text, "streamed completion equals the non-streamed one", [ctext, c1.choices[0].text]);

  // logprobs: the SDK reads choices[0].logprobs.content, streamed and not
  // (greedy: each token is its top entry)
  const lp = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 5, temperature: 0,
    logprobs: true, top_logprobs: 2 });
  const lc = lp.choices[0].logprobs?.content;
  check(lc?.length === 5 && lp.choices[0].logprobs.refusal === null && lc.every((e) => typeof e.token === "string" &&
        e.logprob <= 0 && Array.isArray(e.bytes) && e.top_logprobs.length === 2 && e.top_logprobs[0].token === e.token &&
        e.top_logprobs[0].logprob === e.logprob && e.top_logprobs[1].logprob <= e.logprob), "chat logprobs", lp.choices[0].logprobs);
  const lps = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 5, temperature: 0,
    logprobs: true, top_logprobs: 2, stream: true });
  const streamed = [];
  for await (const c of lps) if (c.choices[0]?.logprobs?.content) streamed.push(...c.choices[0].logprobs.content);
  check(JSON.stringify(streamed) === JSON.stringify(lc), "streamed logprobs equal the whole answer's", streamed);
  const cl = await client.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 4, temperature: 0, logprobs: 2 });
  const cll = cl.choices[0].logprobs;
  check(cll?.tokens.length === 4 && cll.token_logprobs.every((v) => v <= 0) && cll.top_logprobs.every((o) => Object.keys(o).length >= 2) &&
        cll.text_offset[0] === 0 && cll.tokens.join("") === cl.choices[0].text, "completion logprobs", cll);

  // n: 2 independent answers (seed, seed + 1), streamed the same way
  const n2 = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 6, temperature: 1, seed: 5, n: 2 });
  const n1 = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 6, temperature: 1, seed: 6 });
  check(n2.choices.length === 2 && n2.choices.every((c, i) => c.index === i && c.message.role === "assistant"), "n 2 choices", n2.choices);
  check(n2.choices[1].message.content === n1.choices[0].message.content, "n 2: choice 1 is drawn with seed + 1", [n2.choices, n1.choices]);
  const n2s = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 6, temperature: 1, seed: 5, n: 2, stream: true });
  const texts = ["", ""];
  for await (const c of n2s) for (const ch of c.choices) texts[ch.index] += ch.delta.content || "";
  check(texts[0] === n2.choices[0].message.content && texts[1] === n2.choices[1].message.content, "n 2 streamed", texts);
  const cn = await client.completions.create({ model: "tiny", prompt: ["Once upon a time", "Hello"], max_tokens: 3, temperature: 0, n: 2 });
  check(cn.choices.length === 4 && cn.choices[0].text === cn.choices[1].text && cn.choices[0].text === c1.choices[0].text.slice(0, cn.choices[0].text.length),
        "completion prompt list with n 2", cn.choices);

  // errors surface as SDK exceptions with status and message
  await expectThrow(() => client.chat.completions.create({ model: "tiny", messages: [] }),
    OpenAI.BadRequestError, 400, "empty messages", "'messages' must not be empty");
  await expectThrow(() => client.chat.completions.create({ model: "tiny", messages: [{ role: "wizard", content: "x" }] }),
    OpenAI.BadRequestError, 400, "unknown role", "'messages[0].role' is 'wizard'");
  await expectThrow(() => client.chat.completions.create({ model: "tiny", messages: user, temperature: 9 }),
    OpenAI.BadRequestError, 400, "temperature out of range", "'temperature' must be between 0 and 2");
  await expectThrow(() => client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi ".repeat(5000) }] }),
    OpenAI.BadRequestError, 400, "prompt longer than the context", "the context holds 4096");
  try {
    await client.chat.completions.create({ model: "tiny", messages: [] });
  } catch (e) {
    check(e.error?.type === "invalid_request_error" && e.error?.param === "messages", "error body fields", e.error);
  }
  await expectThrow(() => client.chat.completions.create({ model: "tiny", messages: user, n: 9 }),
    OpenAI.BadRequestError, 400, "n above 8", "'n' must be at most 8");
  await expectThrow(() => client.chat.completions.create({ model: "tiny", messages: user, top_logprobs: 2 }),
    OpenAI.BadRequestError, 400, "top_logprobs without logprobs", "'top_logprobs' needs 'logprobs': true");

  // aborting a stream cancels the request and frees the engine
  const ac = new AbortController();
  const long = await client.chat.completions.create({ model: "tiny", messages: user, temperature: 0, stream: true },
    { signal: ac.signal });
  let got = 0;
  try {
    for await (const c of long) {
      if (c.choices[0]?.delta?.content && ++got === 3) ac.abort();
    }
  } catch (e) {
    check(e instanceof OpenAI.APIUserAbortError || e.name === "AbortError", "abort surfaces as an abort", e.constructor.name);
  }
  const t0 = Date.now();
  const after = await client.chat.completions.create({ model: "tiny", messages: user, max_tokens: 2 });
  check(after.usage.completion_tokens === 2 && Date.now() - t0 < 3000, "request after an abort", Date.now() - t0);
  await sleep(200);
  check(/cancelled: the client left/.test(srv.log()), "abort logged as a cancellation");

  // the API key
  const auth = await startServer(["--api-key", "k3y"]);
  const good = new OpenAI({ baseURL: `http://127.0.0.1:${auth.port}/v1`, apiKey: "k3y", maxRetries: 0 });
  const badk = new OpenAI({ baseURL: `http://127.0.0.1:${auth.port}/v1`, apiKey: "nope", maxRetries: 0 });
  const ok = await good.chat.completions.create({ model: "x", messages: user, max_tokens: 1 });
  check(ok.usage.completion_tokens === 1, "right key");
  await expectThrow(() => badk.chat.completions.create({ model: "x", messages: user, max_tokens: 1 }),
    OpenAI.AuthenticationError, 401, "wrong key", "invalid or missing API key");
  await expectThrow(() => badk.models.list(), OpenAI.AuthenticationError, 401, "wrong key on /v1/models");
  auth.proc.kill("SIGTERM");
  srv.proc.kill("SIGTERM");
}

async function loadTest() {
  const srv = await startServer(["--queue", "8", "--idle-timeout", "2"]);
  const port = srv.port, pid = srv.proc.pid;
  const body = (i) => ({ model: "x", messages: [{ role: "user", content: `Question number ${i}?` }], max_tokens: 4, temperature: 0 });
  // warm-up so RSS reflects a working server
  for (let i = 0; i < 3; i++) await raw(port, "POST", "/v1/chat/completions", body(i));
  await sleep(300);
  const before = procStats(pid);

  // /health answers while a long request runs
  const longReq = raw(port, "POST", "/v1/completions", { prompt: "Once", max_tokens: 300, temperature: 0 });
  await sleep(200);
  const h0 = Date.now();
  const h = await raw(port, "GET", "/health");
  check(h.status === 200 && Date.now() - h0 < 500, "/health during a long request", { status: h.status, ms: Date.now() - h0 });
  const lr = await longReq;
  check(lr.status === 200 && JSON.parse(lr.body).usage.completion_tokens === 300, "the long request", lr.status);

  // 32 clients x 3 requests, half streamed: each 200 with a valid body, or 503 with Retry-After
  const results = [];
  const client = async (c) => {
    for (let k = 0; k < 3; k++) {
      const stream = (c + k) % 2 === 0;
      const r = await raw(port, "POST", "/v1/chat/completions", { ...body(c * 10 + k), stream });
      let valid = false;
      if (r.status === 200 && !stream) valid = JSON.parse(r.body).choices[0].finish_reason !== undefined;
      if (r.status === 200 && stream) valid = r.body.endsWith("data: [DONE]\n\n");
      if (r.status === 503) valid = r.headers["retry-after"] === "1" && JSON.parse(r.body).error.code === "server_busy";
      results.push({ status: r.status, valid, error: r.error });
    }
  };
  const t0 = Date.now();
  await Promise.all(Array.from({ length: 32 }, (_, c) => client(c)));
  const n200 = results.filter((r) => r.status === 200).length, n503 = results.filter((r) => r.status === 503).length;
  check(results.length === 96 && n200 + n503 === 96, "every request answered or refused with 503",
        results.filter((r) => r.status !== 200 && r.status !== 503));
  check(results.every((r) => r.valid), "every answer well-formed", results.filter((r) => !r.valid));
  console.log(`load: ${n200} served, ${n503} refused with 503 in ${Date.now() - t0} ms`);
  check(n503 > 0 && n200 >= 9, `the bounded queue refused some (${n200} served, ${n503} refused)`);
  check(srv.proc.exitCode === null, "no crash under load");

  // a second round: descriptors back to the idle count, RSS stable
  for (let round = 0; round < 2; round++) await Promise.all(Array.from({ length: 32 }, (_, c) => raw(port, "POST", "/v1/chat/completions", body(c))));
  await sleep(500);
  const afterStats = procStats(pid);
  check(afterStats.fds === before.fds, "no leaked descriptors", { before, after: afterStats });
  check(afterStats.rss - before.rss < 32 * 1024, "RSS stable (KiB)", { before: before.rss, after: afterStats.rss });
  const hz = await raw(port, "GET", "/health");
  check(hz.status === 200, "health after the load");
  srv.proc.kill("SIGTERM");
  const code = await new Promise((r) => srv.proc.on("exit", (c) => r(c)));
  check(code === 0, "clean exit on SIGTERM", code);
}

try {
  await sdkTests();
  await loadTest();
} catch (e) {
  check(false, "uncaught", e.stack || String(e));
} finally {
  servers.stopAll("SIGKILL");
}
report();
process.exit(); /* with report's status, whatever handles are still open */
