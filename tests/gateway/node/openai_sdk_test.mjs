// The official OpenAI Node SDK (npm package `openai`, pinned in package.json, installed by scripts/setup.sh into
// node_modules/ here) against a running zmoe gateway:
//
//   node tests/gateway/node/openai_sdk_test.mjs --base-url http://127.0.0.1:8000/v1
//
// Completions and chat completions, streamed and not (usage in the stream), logprobs, n choices, X-Request-Id, the
// operations routes (/version, /ping, /load), and a bad request surfaced as the SDK's BadRequestError with status
// 400. Exits 0 when every check passes, 1 on the first failure, 77 when the SDK is not installed.
import assert from 'node:assert/strict';

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch {
  console.error('the openai npm package is not installed (scripts/setup.sh installs it): skipped');
  process.exit(77);
}

const at = process.argv.indexOf('--base-url');
if (at < 0 || !process.argv[at + 1]) {
  console.error('usage: openai_sdk_test.mjs --base-url http://HOST:PORT/v1');
  process.exit(2);
}
const client = new OpenAI({ baseURL: process.argv[at + 1], apiKey: 'unused', maxRetries: 0, timeout: 60000 });

const models = await client.models.list();
const model = models.data[0].id;

// Completions: whole, then streamed with usage; the same greedy text.
const c = await client.completions.create({ model, prompt: 'Hello', max_tokens: 5, temperature: 0, ignore_eos: true });
assert.equal(c.object, 'text_completion');
assert.equal(c.choices[0].finish_reason, 'length');
assert.equal(c.usage.completion_tokens, 5);
let text = '';
let usage = null;
const stream = await client.completions.create({ model, prompt: 'Hello', max_tokens: 5, temperature: 0,
                                                 ignore_eos: true, stream: true,
                                                 stream_options: { include_usage: true } });
for await (const chunk of stream) {
  if (chunk.choices.length) text += chunk.choices[0].text;
  if (chunk.usage) usage = chunk.usage;
}
assert.equal(text, c.choices[0].text);
assert.equal(usage?.completion_tokens, 5);

// Chat completions: whole, then streamed; the same greedy content.
const messages = [{ role: 'user', content: 'Name a colour.' }];
const r = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, ignore_eos: true });
assert.equal(r.object, 'chat.completion');
assert.equal(r.choices[0].message.role, 'assistant');
assert.equal(r.usage.completion_tokens, 4);
let streamed = '';
let role = null;
for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0,
                                                                 ignore_eos: true, stream: true })) {
  if (!chunk.choices.length) continue;
  role ??= chunk.choices[0].delta.role ?? null;
  streamed += chunk.choices[0].delta.content ?? '';
}
assert.equal(role, 'assistant');
assert.equal(streamed, r.choices[0].message.content);

// Logprobs (chat shape) and n choices (each seeded seed + index, so two distinct requests).
const lp = await client.chat.completions.create({ model, messages, max_tokens: 3, temperature: 0, ignore_eos: true,
                                                  logprobs: true, top_logprobs: 2 });
assert.equal(lp.choices[0].logprobs.content.length, 3);
for (const t of lp.choices[0].logprobs.content) {
  assert.ok(t.logprob <= 0);
  assert.equal(t.top_logprobs.length, 2);
  assert.equal(t.top_logprobs[0].logprob, t.logprob);  // greedy: the sampled token is the likeliest
}
const two = await client.completions.create({ model, prompt: 'Once', max_tokens: 4, n: 2, seed: 3, ignore_eos: true });
assert.deepEqual(two.choices.map((ch) => ch.index), [0, 1]);
assert.equal(two.usage.completion_tokens, 8);

// X-Request-Id through the SDK: echoed in the response header and the response id's suffix.
const tagged = await client.completions.create({ model, prompt: 'Hi', max_tokens: 2 },
                                               { headers: { 'X-Request-Id': 'node-sdk-1' } }).withResponse();
assert.equal(tagged.response.headers.get('x-request-id'), 'node-sdk-1');
assert.equal(tagged.data.id, 'cmpl-node-sdk-1');

// The operations routes beside /v1 (vLLM's): /version, /ping (GET and POST), /load.
const origin = new URL(process.argv[at + 1]).origin;
const version = await (await fetch(`${origin}/version`)).json();
assert.equal(typeof version.version, 'string');
assert.equal((await fetch(`${origin}/ping`)).status, 200);
assert.equal((await fetch(`${origin}/ping`, { method: 'POST' })).status, 200);
assert.equal((await (await fetch(`${origin}/load`)).json()).server_load, 0);

// A bad request: the SDK's BadRequestError, status 400.
await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: 5, min_p: 2 }),
                     (e) => e instanceof OpenAI.BadRequestError && e.status === 400);

console.log('openai Node SDK: completions, chat completions, streaming, logprobs, n, X-Request-Id, routes and errors OK');
