// gem serve's Anthropic Messages API driven by the official @anthropic-ai/sdk:
// messages.create streaming and not, the messages.stream helper (text
// events, the final message), a system prompt and countTokens, tool
// definitions with tool_choice "any" on the tiny random model (whatever it
// generates must parse), forced thinking and tool calls sent back as
// tool_use/tool_result blocks, errors raised as the SDK's exception
// classes, an aborted stream cancelling its request, and the API key sent
// as x-api-key. Servers are real processes on loopback with the tiny model.
// Prints "test_anthropic_sdk: N passed, M failed" (test_anthropic.sh adds it).
//   node test.mjs GEM MODEL
import { checker } from "../check.mjs";
import { serverPool } from "../serve.mjs";
import Anthropic from "@anthropic-ai/sdk";

const [gem, model] = process.argv.slice(2);
const { check, expectThrow, report } = checker("test_anthropic_sdk");

const servers = serverPool(gem, model);
const startServer = servers.start;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// a content block as the API defines it
function blockOk(b) {
  if (b.type === "text") return typeof b.text === "string";
  if (b.type === "thinking") return typeof b.thinking === "string" && typeof b.signature === "string";
  if (b.type === "tool_use")
    return /^toolu_[0-9a-f]+_\d+$/.test(b.id) && typeof b.name === "string" && b.input !== null &&
           typeof b.input === "object" && !Array.isArray(b.input);
  return false;
}
function messageOk(m) {
  return m.type === "message" && m.role === "assistant" && /^msg_[0-9a-f]{16}$/.test(m.id) && m.model === "tiny" &&
         Array.isArray(m.content) && m.content.every(blockOk) &&
         ["end_turn", "max_tokens", "stop_sequence", "tool_use"].includes(m.stop_reason) &&
         Number.isInteger(m.usage.input_tokens) && Number.isInteger(m.usage.output_tokens) &&
         Number.isInteger(m.usage.cache_read_input_tokens);
}
const text = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

async function sdkTests() {
  const srv = await startServer(["--test-hooks", "--alias", "tiny"]);
  const client = new Anthropic({ baseURL: `http://127.0.0.1:${srv.port}`, apiKey: "unused", maxRetries: 0 });
  const user = [{ role: "user", content: "Tell me a story about a lighthouse." }];

  // non-streaming, deterministic at temperature 0
  const a = await client.messages.create({ model: "tiny", max_tokens: 8, temperature: 0, messages: user });
  check(messageOk(a), "message shape", a);
  check(a.stop_reason === "max_tokens" && a.stop_sequence === null && a.usage.output_tokens === 8, "max_tokens stop", a);
  check(a.content.length === 1 && a.content[0].type === "text" && a.content[0].text.length > 0, "one text block", a.content);
  const b = await client.messages.create({ model: "tiny", max_tokens: 8, temperature: 0, messages: user });
  check(text(b) === text(a), "temperature 0 is deterministic", [text(a), text(b)]);
  check(b.usage.cache_read_input_tokens > 0 &&
        b.usage.input_tokens + b.usage.cache_read_input_tokens === a.usage.input_tokens + a.usage.cache_read_input_tokens,
        "the repeated prompt is read from the cache", [a.usage, b.usage]);

  // the stream helper: text events, and the final message it assembles
  const stream = client.messages.stream({ model: "tiny", max_tokens: 8, temperature: 0, messages: user });
  let streamed = "", events = [];
  stream.on("text", (d) => (streamed += d));
  stream.on("streamEvent", (e) => events.push(e.type));
  const fm = await stream.finalMessage();
  check(messageOk(fm), "streamed final message shape", fm);
  check(streamed === text(a) && text(fm) === text(a), "stream text equals the non-streamed text", [streamed, text(fm), text(a)]);
  check(fm.stop_reason === "max_tokens" && fm.usage.output_tokens === 8, "streamed stop and usage", fm);
  check(events[0] === "message_start" && events.at(-1) === "message_stop" && events.at(-2) === "message_delta" &&
        events.includes("content_block_start") && events.includes("content_block_stop"), "event order", events);

  // create with stream: true gives the raw events
  const raw = await client.messages.create({ model: "tiny", max_tokens: 4, temperature: 0, messages: user, stream: true });
  const kinds = [];
  for await (const e of raw) kinds.push(e.type === "content_block_delta" ? e.delta.type : e.type);
  check(kinds.join(",") === "message_start,content_block_start,text_delta,text_delta,text_delta,text_delta,content_block_stop,message_delta,message_stop" ||
        (kinds[0] === "message_start" && kinds.at(-1) === "message_stop"), "raw stream events", kinds);

  // a system prompt: counted, rendered (more input), and countTokens agrees with the usage
  const sys = "You answer in one short sentence.";
  const s1 = await client.messages.create({ model: "tiny", max_tokens: 2, system: sys, messages: user });
  const count = await client.messages.countTokens({ model: "tiny", system: sys, messages: user });
  check(count.input_tokens === s1.usage.input_tokens + s1.usage.cache_read_input_tokens, "countTokens matches usage",
        [count, s1.usage]);
  check(count.input_tokens > a.usage.input_tokens + a.usage.cache_read_input_tokens, "the system prompt is in the prompt");
  const s2 = await client.messages.create({ model: "tiny", max_tokens: 2,
    system: [{ type: "text", text: sys, cache_control: { type: "ephemeral" } }], messages: user });
  check(s2.usage.input_tokens + s2.usage.cache_read_input_tokens === count.input_tokens, "system as text blocks", s2.usage);

  // tools with tool_choice "any" on the random model: whatever comes, it parses
  const tools = [{ name: "get_weather", description: "Weather of a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const any = await client.messages.create({ model: "tiny", max_tokens: 24, tools, tool_choice: { type: "any" },
    messages: [{ role: "user", content: "Weather in Paris?" }] });
  check(messageOk(any), "tool_choice any: message shape", any);
  const anyS = await client.messages.stream({ model: "tiny", max_tokens: 24, tools, tool_choice: { type: "any" },
    messages: [{ role: "user", content: "Weather in Paris?" }] }).finalMessage();
  check(messageOk(anyS), "tool_choice any, streamed: final message shape", anyS);

  // forced thinking and two tool calls, streamed: the SDK assembles them
  const forced = "<|channel>thought\nI should call the tool.<channel|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>" +
                 "<|tool_call>call:get_weather{city:<|\"|>Lyon<|\"|>}<tool_call|><|tool_response>";
  const q = [{ role: "user", content: "Weather in Paris and Lyon?" }];
  const ts = client.messages.stream({ model: "tiny", max_tokens: 60, tools, thinking: { type: "enabled", budget_tokens: 1024 },
    messages: q, gem_forced_output: forced });
  let thinking = "", inputs = [];
  ts.on("thinking", (d) => (thinking += d));
  ts.on("inputJson", (partial, snap) => inputs.push(snap));
  const tm = await ts.finalMessage();
  check(messageOk(tm) && tm.stop_reason === "tool_use", "streamed tool_use message", tm);
  check(tm.content.map((c) => c.type).join(",") === "thinking,tool_use,tool_use", "block order", tm.content);
  check(thinking === "I should call the tool." && tm.content[0].thinking === thinking, "thinking", tm.content[0]);
  check(tm.content[1].input.city === "Paris" && tm.content[2].input.city === "Lyon", "tool inputs", tm.content);
  check(tm.content[1].id !== tm.content[2].id, "tool_use ids differ");
  check(inputs.length === 2 && inputs[1].city === "Lyon", "inputJson events", inputs);
  const tn = await client.messages.create({ model: "tiny", max_tokens: 60, tools, messages: q, gem_forced_output: forced });
  check(messageOk(tn) && tn.stop_reason === "tool_use" && tn.content.length === 3, "non-streamed tool_use message", tn);

  // the conversation goes on: the assistant's blocks and the tool results go back
  const round = await client.messages.create({ model: "tiny", max_tokens: 4, temperature: 0, tools, messages: [
    ...q, { role: "assistant", content: tm.content },
    { role: "user", content: [
      { type: "tool_result", tool_use_id: tm.content[1].id, content: "sunny" },
      { type: "tool_result", tool_use_id: tm.content[2].id, content: [{ type: "text", text: "no station" }], is_error: true },
      { type: "text", text: "Thanks!" }] }] });
  check(messageOk(round) && round.usage.output_tokens <= 4, "tool round trip", round);
  const counted = await client.messages.countTokens({ model: "tiny", tools, messages: [
    ...q, { role: "assistant", content: tm.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: tm.content[1].id, content: "sunny" }] }] });
  check(counted.input_tokens > 20, "countTokens of a tool conversation", counted);

  // stop sequences
  const st = await client.messages.create({ model: "tiny", max_tokens: 30, stop_sequences: ["never", "STOP"],
    messages: user, gem_forced_output: "one two STOP three" });
  check(st.stop_reason === "stop_sequence" && st.stop_sequence === "STOP" && text(st) === "one two ", "stop_sequence", st);

  // errors as the SDK's exceptions
  await expectThrow(() => client.messages.create({ model: "tiny", messages: user }), Anthropic.BadRequestError, 400,
    "max_tokens missing", "'max_tokens' is required");
  await expectThrow(() => client.messages.create({ model: "tiny", max_tokens: 2, messages: [{ role: "user",
    content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] }),
    Anthropic.BadRequestError, 400, "image block", "gem reads text only");
  await expectThrow(() => client.messages.create({ model: "tiny", max_tokens: 2, messages: user,
    tools: [{ type: "web_search_20250305", name: "web_search" }] }), Anthropic.BadRequestError, 400, "server tool", "no server tools");
  try {
    await client.messages.create({ model: "tiny", max_tokens: 2, temperature: 3, messages: user });
    check(false, "temperature 3: no exception");
  } catch (e) {
    check(e.error?.type === "error" && e.error?.error?.type === "invalid_request_error", "error body shape", e.error);
  }

  // an aborted stream cancels its request, and the server goes on
  const long = client.messages.stream({ model: "tiny", max_tokens: 4000, temperature: 0, messages: user });
  let got = 0;
  long.on("text", () => { if (++got === 3) long.abort(); });
  try { await long.finalMessage(); } catch (e) { /* the abort */ }
  await sleep(300);
  check(/\/v1\/messages cancelled: the client left/.test(srv.log()), "abort cancels", srv.log().slice(-400));
  const after = await client.messages.create({ model: "tiny", max_tokens: 2, messages: user });
  check(messageOk(after), "a request after the abort");
}

async function keyTests() {
  const srv = await startServer(["--api-key", "s3cret", "--alias", "tiny"]);
  const base = `http://127.0.0.1:${srv.port}`;
  const good = new Anthropic({ baseURL: base, apiKey: "s3cret", maxRetries: 0 });
  const m = await good.messages.create({ model: "tiny", max_tokens: 2, messages: [{ role: "user", content: "Hi" }] });
  check(messageOk(m), "x-api-key accepted", m);
  const c = await good.messages.countTokens({ model: "tiny", messages: [{ role: "user", content: "Hi" }] });
  check(c.input_tokens > 0, "countTokens with the key", c);
  const bearer = new Anthropic({ baseURL: base, apiKey: null, authToken: "s3cret", maxRetries: 0 });
  const mb = await bearer.messages.create({ model: "tiny", max_tokens: 2, messages: [{ role: "user", content: "Hi" }] });
  check(messageOk(mb), "Authorization: Bearer accepted", mb);
  const wrong = new Anthropic({ baseURL: base, apiKey: "nope", maxRetries: 0 });
  await expectThrow(() => wrong.messages.create({ model: "tiny", max_tokens: 2, messages: [{ role: "user", content: "Hi" }] }),
    Anthropic.AuthenticationError, 401, "wrong key", "x-api-key");
  await expectThrow(() => wrong.messages.stream({ model: "tiny", max_tokens: 2, messages: [{ role: "user", content: "Hi" }] }).finalMessage(),
    Anthropic.AuthenticationError, 401, "wrong key, streamed");
}

try {
  await sdkTests();
  await keyTests();
} catch (e) {
  check(false, "uncaught", String(e && e.stack || e));
} finally {
  servers.stopAll();
}
report();
