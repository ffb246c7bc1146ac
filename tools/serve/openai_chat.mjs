// A chat with `zaya serve` through the official OpenAI JavaScript client (npm `openai`, installed into
// ./node_modules by the README's test command), streamed: reasoning (delta.reasoning_content) and the answer
// (delta.content) as they arrive, then the token usage.
//   node tools/serve/openai_chat.mjs [BASE_URL] [MESSAGE]       (default http://127.0.0.1:8080/v1)
import OpenAI from 'openai';

const baseURL = process.argv[2] || 'http://127.0.0.1:8080/v1';
const message = process.argv[3] || 'Tell me about the jury.';
const client = new OpenAI({baseURL, apiKey: process.env.ZAYA_API_KEY || 'none'});
const [model] = (await client.models.list()).data;
const stream = await client.chat.completions.create({
  model: model.id,
  messages: [{role: 'user', content: message}],
  max_tokens: 32,
  stream: true,
  stream_options: {include_usage: true},
});
const dim = (s) => (process.stdout.isTTY ? `\x1b[2m${s}\x1b[0m` : s);  // reasoning shown dimmed
let usage;
for await (const chunk of stream) {
  const delta = chunk.choices[0]?.delta ?? {};
  if (delta.reasoning_content) process.stdout.write(dim(delta.reasoning_content));
  if (delta.content) process.stdout.write(delta.content);
  if (chunk.usage) usage = chunk.usage;
}
console.log(`\n[${model.id}: ${usage.prompt_tokens} prompt + ${usage.completion_tokens} generated tokens]`);
