// `zaya serve` through real clients: the official OpenAI JavaScript client (npm `openai`, pinned in
// scripts/setup.sh to a version that runs on Debian 12's nodejs 18) and curl, against real servers on
// loopback. Run by ctest (tests/CMakeLists.txt):
//   node tests/node/openai_client_test.mjs --zaya build/zaya --golden tests/data/golden/zaya1_like
//
// Two models:
//   golden   the tiny golden ZAYA1 (tests/data/golden): streaming and whole chat and completions, logprobs,
//            seeds, errors, /v1/models.
//   caller   the golden checkpoint rewritten into a bigram model: every block's residual merge keeps only the
//            residual (hidden_states_scale 0, residual_scale 1), so the logits at a position depend on its
//            token alone, and an untied LM head maps each token of a chain to the next. Greedy decoding then
//            writes ZAYA1's tool-call format token by token through the whole engine (CCA cache, experts,
//            sampler, detokenizer, chat parser): a real model that calls a tool, for the tool-call tests.
// Exit status: 0 passed, 1 failed, 77 skipped (`openai` not installed; under CI that is a failure).
import assert from 'node:assert/strict';
import {spawn, execFileSync} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {createRequire} from 'node:module';
import {fileURLToPath} from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../..');
const args = Object.fromEntries(
    process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const zaya = path.resolve(args.zaya || path.join(repo, 'build/zaya'));
const golden = path.resolve(args.golden || path.join(repo, 'tests/data/golden/zaya1_like'));

let OpenAI;
try {
  OpenAI = createRequire(path.join(repo, 'package.json'))('openai');
  OpenAI = OpenAI.default || OpenAI.OpenAI || OpenAI;
} catch (e) {
  const msg = 'openai_client_test: npm package `openai` not found in ./node_modules (bash scripts/setup.sh --test)';
  // CI: any value but empty, 0 or false (as tests/browser/chat_page_test.mjs reads it).
  if (process.env.CI && !['0', 'false'].includes(process.env.CI.toLowerCase())) {
    console.error(msg + ': failing under CI');
    process.exit(1);
  }
  console.error(msg + ': skipped');
  process.exit(77);
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'zaya_openai_client_'));
const servers = [];
function cleanup() {
  for (const s of servers) s.kill('SIGKILL');
  fs.rmSync(work, {recursive: true, force: true});
}
process.on('exit', cleanup);
setTimeout(() => {
  console.error('openai_client_test: timed out after 240 s');
  process.exit(1);
}, 240000).unref();

// Starts `zaya serve` on a free port; resolves {base, proc} once /health answers 200.
async function startServer(model, tokenizer, extra = []) {
  const proc = spawn(zaya, ['serve', '--model', model, '--tokenizer', tokenizer, '--port', '0', '--served-model-name',
                            'zaya-test', '--dtype', 'fp32', ...extra],
                     {stdio: ['ignore', 'ignore', 'pipe']});
  servers.push(proc);
  let log = '';
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/[\d.]+:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error('zaya serve exited with ' + code + ':\n' + log)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    try {
      if ((await fetch(base + '/health')).status === 200) return {base, proc};
    } catch (e) {}
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('zaya serve never became healthy:\n' + log);
}

async function post(base, route, body) {
  const r = await fetch(base + route, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
  return {status: r.status, json: await r.json()};
}

// ---- A tokenizer with ZAYA1's chat and tool markers as special tokens, plus the tool call's lines.
const CALL_HEAD = '\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n';
const CALL_TAIL = '<parameter=days>\n3\n</parameter>\n</function>\n';
const specials = ['<|im_start|>', '<|im_end|>', '<think>', '</think>', '<zyphra_tool_call>', '</zyphra_tool_call>',
                  '<zyphra_tool_response>', '</zyphra_tool_response>', CALL_HEAD, CALL_TAIL];
const text = 'The jury further said in term-end presentments that the City Executive Committee, which had ' +
    'over-all charge of the election, deserves the praise and thanks of the City of Atlanta for the manner in ' +
    'which the election was conducted. What is the weather in Paris? Say hello to the assistant and the user.\n';
fs.writeFileSync(path.join(work, 'text.txt'), text.repeat(3));
const tokenizer = path.join(work, 'tokenizer.json');
execFileSync(zaya, ['tokenizer', 'train', '--input', path.join(work, 'text.txt'), '--vocab-size', '512', '--out', tokenizer,
                    ...specials.flatMap((s) => ['--special-tokens', s])],
             {stdio: ['ignore', 'ignore', 'inherit']});

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {type: 'object', properties: {city: {type: 'string'}, days: {type: 'integer'}}, required: ['city']},
  },
}];
const weatherQuestion = [{role: 'user', content: 'What is the weather in Paris?'}];

// ---- The golden model.
const g = await startServer(golden, tokenizer);
const client = new OpenAI({baseURL: g.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 60000});
let passed = 0;
async function check(name, fn) {
  await fn();
  passed++;
  console.log('ok - ' + name);
}

await check('models.list', async () => {
  const models = await client.models.list();
  assert.equal(models.data[0].id, 'zaya-test');
  assert.equal(models.data[0].object, 'model');
});

await check('chat: streamed deltas add up to the whole answer; usage chunk', async () => {
  const req = {model: 'zaya-test', messages: [{role: 'user', content: 'Tell me about the jury.'}], max_tokens: 12,
               temperature: 0, chat_template_kwargs: {enable_thinking: false}};
  const whole = await client.chat.completions.create(req);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 12);
  const stream = await client.chat.completions.create({...req, stream: true, stream_options: {include_usage: true}});
  let content = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 3, 'a stream of ' + chunks + ' chunks');
  assert.equal(content, whole.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
});

await check('chat: logprobs with top_logprobs', async () => {
  const r = await client.chat.completions.create({model: 'zaya-test', messages: [{role: 'user', content: 'Hi'}],
                                                  max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3});
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 5);
  for (const e of lp) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.equal(e.logprob, Math.max(...e.top_logprobs.map((t) => t.logprob)));
  }
});

await check('completions: whole and streamed, logprobs, seeded sampling repeats', async () => {
  const req = {model: 'zaya-test', prompt: 'The jury said', max_tokens: 8, temperature: 0, logprobs: 2};
  const whole = await client.completions.create(req);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices[0].logprobs.tokens.length, 8);
  assert.equal(Object.keys(whole.choices[0].logprobs.top_logprobs[0]).length <= 2, true);
  let text = '', n = 0;
  for await (const chunk of await client.completions.create({...req, stream: true})) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.logprobs) n += c.logprobs.tokens.length;
    }
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(n, 8);
  const seeded = {model: 'zaya-test', prompt: 'The jury said', max_tokens: 10, temperature: 0.9, seed: 7};
  const a = await client.completions.create(seeded), b = await client.completions.create(seeded);
  assert.equal(a.choices[0].text, b.choices[0].text);
});

await check('errors arrive as the client\'s APIError with status and param', async () => {
  await assert.rejects(
      client.chat.completions.create({model: 'zaya-test', messages: [{role: 'user', content: 'x'}], temperature: 7}),
      (e) => e.status === 400 && e.param === 'temperature' && /temperature/.test(e.message));
  await assert.rejects(client.completions.create({model: 'other-model', prompt: 'x'}),
                       (e) => e.status === 404 && e.code === 'model_not_found');
  await assert.rejects(client.chat.completions.create({model: 'zaya-test', messages: [{role: 'user', content: 'x'}],
                                                       response_format: {type: 'json_schema', json_schema: {name: 'a', schema: {}}}}),
                       (e) => e.status === 400);
});

await check('curl: a streamed completion ends with data: [DONE]', async () => {
  const out = execFileSync('curl', ['-sN', g.base + '/v1/completions', '-H', 'Content-Type: application/json', '-d',
                                    JSON.stringify({prompt: 'The jury', max_tokens: 4, stream: true, temperature: 0, ignore_eos: true})]).toString();
  const events = out.split('\n').filter((l) => l.startsWith('data: '));
  assert.equal(events[events.length - 1], 'data: [DONE]');
  // The server may bundle tokens into one event when the client reads slower than they come.
  const chunks = events.slice(0, -1).map((l) => JSON.parse(l.slice(6)));
  assert.ok(chunks.length >= 1);
  for (const c of chunks) assert.equal(c.object, 'text_completion');
});

// ---- The tool-calling bigram model, built from the golden checkpoint.
// Token ids of the chain's pieces and of the last token of the weather question's prompt.
const idOf = async (s) => {
  const r = await post(g.base, '/tokenize', {prompt: s, add_special_tokens: false});
  assert.equal(r.json.tokens.length, 1, JSON.stringify(s) + ' must be one token: ' + JSON.stringify(r.json));
  return r.json.tokens[0];
};
const promptIds = (await post(g.base, '/tokenize', {messages: weatherQuestion, tools})).json.tokens;
const chain = [promptIds[promptIds.length - 1], await idOf('<zyphra_tool_call>'), await idOf(CALL_HEAD),
               await idOf(CALL_TAIL), await idOf('</zyphra_tool_call>'), await idOf('<|im_end|>')];

function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString());
  const tensors = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    assert.equal(t.dtype, 'F32', name);
    const [a, b] = t.data_offsets;
    const bytes = buf.subarray(8 + n + a, 8 + n + b);
    tensors[name] = {shape: t.shape, data: new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length))};
  }
  return tensors;
}
function writeSafetensors(file, tensors) {
  const header = {};
  let offset = 0;
  for (const [name, t] of Object.entries(tensors)) {
    header[name] = {dtype: 'F32', shape: t.shape, data_offsets: [offset, offset + t.data.byteLength]};
    offset += t.data.byteLength;
  }
  let h = Buffer.from(JSON.stringify(header));
  h = Buffer.concat([h, Buffer.alloc((8 - (h.length % 8)) % 8, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  fs.writeFileSync(file, Buffer.concat([len, h, ...Object.values(tensors).map((t) => Buffer.from(t.data.buffer))]));
}

const callerDir = path.join(work, 'caller');
fs.mkdirSync(callerDir);
{
  const cfg = JSON.parse(fs.readFileSync(path.join(golden, 'config.json')));
  cfg.tie_word_embeddings = false;
  fs.writeFileSync(path.join(callerDir, 'config.json'), JSON.stringify(cfg, null, 1));
  const t = readSafetensors(path.join(golden, 'model.safetensors'));
  const fill = (name, v) => t[name].data.fill(v);
  fill('model.input_hidden_states_bias', 0);
  fill('model.input_hidden_states_scale', 1);
  fill('model.norm.weight', 1);
  for (let l = 0; l < cfg.num_hidden_layers; l++)
    for (const m of ['post_attention_residual_scale', 'post_mlp_residual_scale']) {
      fill(`model.layers.${l}.${m}.hidden_states_scale`, 0);  // the block's output is dropped ...
      fill(`model.layers.${l}.${m}.hidden_states_bias`, 0);
      fill(`model.layers.${l}.${m}.residual_scale`, 1);  // ... and the residual passes unchanged
      fill(`model.layers.${l}.${m}.residual_bias`, 0);
    }
  // Embeddings: seeded Gaussian rows (nearly orthogonal in 128 dimensions); the head row of token chain[i+1]
  // is 4x the embedding of chain[i]: its logit ~ 4 * 128 against ~ 4 * 11 for any other token.
  const [V, H] = t['model.embed_tokens.weight'].shape;
  const E = t['model.embed_tokens.weight'].data;
  let s = 12345;
  const rnd = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648);
  for (let i = 0; i < V * H; i += 2) {
    const r = Math.sqrt(-2 * Math.log(rnd() + 1e-12)), a = 2 * Math.PI * rnd();
    E[i] = r * Math.cos(a);
    E[i + 1] = r * Math.sin(a);
  }
  const head = new Float32Array(V * H);
  for (let i = 0; i + 1 < chain.length; i++)
    for (let k = 0; k < H; k++) head[chain[i + 1] * H + k] = 4 * E[chain[i] * H + k];
  t['lm_head.weight'] = {shape: [V, H], data: head};
  writeSafetensors(path.join(callerDir, 'model.safetensors'), t);
}
const c = await startServer(callerDir, tokenizer);
const caller = new OpenAI({baseURL: c.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 60000});

await check('tool call: message.tool_calls with arguments typed by the schema, finish_reason tool_calls', async () => {
  const r = await caller.chat.completions.create({model: 'zaya-test', messages: weatherQuestion, tools, temperature: 0,
                                                  max_tokens: 20});
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r));
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].type, 'function');
  assert.match(m.tool_calls[0].id, /^call_/);
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), {city: 'Paris', days: 3});
  assert.ok(!m.content, 'no content beside the call: ' + JSON.stringify(m.content));
});

await check('tool call streamed: deltas assemble into the same call; the tool result goes back', async () => {
  const stream = await caller.chat.completions.create({model: 'zaya-test', messages: weatherQuestion, tools,
                                                       temperature: 0, max_tokens: 20, stream: true});
  const calls = [];
  let finish = null;
  for await (const chunk of stream)
    for (const ch of chunk.choices) {
      for (const d of ch.delta.tool_calls || []) {
        if (!calls[d.index]) calls[d.index] = {id: d.id, name: d.function.name, arguments: ''};
        calls[d.index].arguments += d.function.arguments || '';
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.deepEqual(JSON.parse(calls[0].arguments), {city: 'Paris', days: 3});
  // The next turn: the assistant's call and the tool's result (a user turn in <zyphra_tool_response>).
  const next = await caller.chat.completions.create({
    model: 'zaya-test', tools, max_tokens: 3, temperature: 0,
    messages: [...weatherQuestion,
               {role: 'assistant', content: null, tool_calls: [{id: calls[0].id, type: 'function',
                                                                function: {name: 'get_weather', arguments: calls[0].arguments}}]},
               {role: 'tool', tool_call_id: calls[0].id, content: '{"temperature": 21}'}],
  });
  assert.ok(next.usage.prompt_tokens > promptIds.length);
  const rendered = (await post(c.base, '/tokenize', {messages: [...weatherQuestion,
    {role: 'tool', tool_call_id: 'x', content: '{"temperature": 21}'}], tools})).json.tokens;
  const detok = (await post(c.base, '/detokenize', {tokens: rendered})).json.prompt;
  assert.match(detok, /<zyphra_tool_response>[\s\S]*\{"temperature": 21\}[\s\S]*<\/zyphra_tool_response>/);
});

const version = JSON.parse(fs.readFileSync(path.join(repo, 'node_modules/openai/package.json'))).version;
console.log(`openai_client_test: ${passed} checks passed (openai ${version}, node ${process.version})`);
process.exit(0);
