// Renders every conversation tests/data/chat/*.json with the published
// Gemma 4 template through @huggingface/jinja and writes NAME.txt beside it:
// the goldens gem's native renderer must equal byte for byte.
// usage: node tools/chat-golden/render.mjs TEMPLATE DIR
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";

const [tmplPath, dir] = process.argv.slice(2);
const tmpl = new Template(fs.readFileSync(tmplPath, "utf8"));
let n = 0;
for (const f of fs.readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
  const conv = JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
  const ctx = { bos_token: "<bos>", messages: conv.messages, add_generation_prompt: conv.add_generation_prompt ?? true };
  if (conv.tools) ctx.tools = conv.tools;
  if ("enable_thinking" in conv) ctx.enable_thinking = conv.enable_thinking;
  let out;
  try {
    out = tmpl.render(ctx);
  } catch (e) {
    out = "ERROR: " + e.message;
  }
  fs.writeFileSync(path.join(dir, f.replace(/\.json$/, ".txt")), out);
  n++;
}
console.log(`rendered ${n} conversations`);
