// The official OpenAI Node SDK (npm package `openai`, pinned in package.json, installed by scripts/setup.sh into
// node_modules/ here) against a running zmoe gateway:
//
//   node tests/gateway/node/openai_sdk_test.mjs --base-url http://127.0.0.1:8000/v1
//
// Completions and chat completions, streamed and not (usage in the stream), logprobs, n choices, X-Request-Id, the
// operations routes (/version, /ping, /load), content parts, a full tool-call round trip in the messages, tool calls
// for every tool_choice (streamed deltas included), reasoning_content, response_format json_object and json_schema
// (outputs parsed and checked against the schema), and bad
// requests surfaced as the SDK's BadRequestError with status 400 (an image part's names its field). Exits 0 when
// every check passes, 1 on the first failure, 77 when the SDK is not installed.
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

// Content as a list of parts (what many SDKs and frameworks send): accepted, and rendered for the text-only
// template as vLLM does, text parts joined with "\n", so the prompt is the one of the joined strings.
const chat = (msgs, extra = {}) => client.chat.completions.create({ model, messages: msgs, max_tokens: 3,
                                                                    temperature: 0, ignore_eos: true, ...extra });
const parts = await chat([
  { role: 'system', content: [{ type: 'text', text: 'Be brief.' }, { type: 'text', text: 'Use English.' }] },
  { role: 'user', content: [{ type: 'text', text: 'Name' }, { type: 'text', text: 'a colour.' }] },
]);
assert.equal(parts.choices[0].finish_reason, 'length');
assert.equal(parts.usage.completion_tokens, 3);
const joined = await chat([{ role: 'system', content: 'Be brief.\nUse English.' },
                           { role: 'user', content: 'Name\na colour.' }]);
assert.equal(parts.usage.prompt_tokens, joined.usage.prompt_tokens);
assert.equal(parts.choices[0].message.content, joined.choices[0].message.content);

// A full tool-call round trip, as an agent loop sends it back: the assistant's turn with content null and
// tool_calls (arguments as JSON text), the tool results with tool_call_id and name, the assistant's answer, and
// the next user turn; then two calls in one turn.
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Current weather for a city.',
                                                parameters: { type: 'object', properties: { city: { type: 'string' } },
                                                              required: ['city'] } } }];
const call = (id, city) => ({ id, type: 'function',
                              function: { name: 'get_weather', arguments: JSON.stringify({ city }) } });
const loop = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: null, tool_calls: [call('call_1', 'Paris')] },
  { role: 'tool', tool_call_id: 'call_1', name: 'get_weather', content: '{"temperature": 21}' },
  { role: 'assistant', content: 'It is 21°C in Paris.' },
  { role: 'user', content: [{ type: 'text', text: 'And Tokyo and Oslo?' }] },
  { role: 'assistant', content: null, tool_calls: [call('call_2', 'Tokyo'), call('call_3', 'Oslo')] },
  { role: 'tool', tool_call_id: 'call_2', name: 'get_weather', content: [{ type: 'text', text: '15C' }] },
  { role: 'tool', tool_call_id: 'call_3', name: 'get_weather', content: '-3C' },
];
const answered = await chat(loop, { tools });
assert.equal(answered.object, 'chat.completion');
assert.equal(answered.choices[0].finish_reason, 'length');
assert.equal(answered.usage.completion_tokens, 3);
// The same round trip streamed; and /tokenize renders the same conversation to the same prompt.
let chunks = 0;
for await (const chunk of await chat(loop, { tools, stream: true })) chunks += chunk.choices.length;
assert.ok(chunks >= 1);
const tokenized = await fetch(new URL('../tokenize', client.baseURL + '/'), {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model, messages: loop, tools }),
}).then((res) => res.json());
assert.equal(tokenized.count, answered.usage.prompt_tokens);

// Tool calling. tool_choice "required" and a named function are constrained by the grammar of the server's
// tool-call format, so even the demo model's random weights write a valid call: a listed name, arguments valid
// against its schema (bounded strings, so that a random walk ends), finish_reason "tool_calls". Streamed, the call's
// id and name come first (arguments ""), then argument fragments; with the same seed the stream folds into the
// same call.
const callTools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather for a city.',
                                  parameters: { type: 'object', properties: {
                                    city: { type: 'string', enum: ['Paris', 'Tokyo'] },
                                    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
                                                required: ['city'] } } },
  { type: 'function', function: { name: 'get_time', parameters: {
    type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] } } },
];
const validArgs = { get_weather: (a) => ['Paris', 'Tokyo'].includes(a.city) &&
                                      (a.unit === undefined || ['celsius', 'fahrenheit'].includes(a.unit)) &&
                                      Object.keys(a).every((k) => k === 'city' || k === 'unit'),
                    get_time: (a) => ['UTC', 'CET'].includes(a.zone) && Object.keys(a).length === 1 };
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const toolRequest = (tool_choice, extra = {}) => ({
  model, messages: ask, tools: callTools, tool_choice, max_tokens: 300, temperature: 1, seed: 5,
  chat_template_kwargs: { enable_thinking: false }, ...extra });
const foldToolStream = async (stream) => {
  const calls = [];
  let finish = null;
  let content = '';
  for await (const chunk of stream) {
    if (!chunk.choices.length) continue;
    const choice = chunk.choices[0];
    finish = choice.finish_reason ?? finish;
    content += choice.delta.content ?? '';
    for (const t of choice.delta.tool_calls ?? []) {
      if (t.id !== undefined) {
        assert.equal(t.index, calls.length);
        assert.equal(t.type, 'function');
        assert.equal(t.function.arguments, '');
        calls.push({ id: t.id, name: t.function.name, arguments: '' });
      } else {
        assert.equal(t.function.name, undefined);
        calls[t.index].arguments += t.function.arguments;
      }
    }
  }
  return { calls, finish, content };
};
for (const [tool_choice, parallel] of [['required', false], ['required', true],
                                        [{ type: 'function', function: { name: 'get_time' } }, true]]) {
  const req = toolRequest(tool_choice, { parallel_tool_calls: parallel });
  const res = await client.chat.completions.create(req);
  const choice = res.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
  assert.equal(choice.message.content, null);
  const calls = choice.message.tool_calls;
  assert.ok(calls.length >= 1);
  if (!parallel) assert.equal(calls.length, 1);
  for (const c of calls) {
    assert.equal(c.type, 'function');
    assert.match(c.id, /^call_[A-Za-z0-9]{24}$/);
    if (typeof tool_choice === 'object') assert.equal(c.function.name, 'get_time');
    assert.ok(validArgs[c.function.name](JSON.parse(c.function.arguments)), c.function.arguments);
  }
  const folded = await foldToolStream(await client.chat.completions.create({ ...req, stream: true }));
  assert.equal(folded.finish, 'tool_calls');
  assert.equal(folded.content, '');
  assert.deepEqual(folded.calls.map((c) => [c.name, c.arguments]),
                   calls.map((c) => [c.function.name, c.function.arguments]));
}
// "none": no parsing, the text as written; "auto": whatever the model writes, in OpenAI's shape.
const none = await client.chat.completions.create(toolRequest('none', { max_tokens: 5, ignore_eos: true }));
assert.equal(none.choices[0].finish_reason, 'length');
assert.equal(none.choices[0].message.tool_calls, undefined);
const auto = await client.chat.completions.create(toolRequest('auto', { max_tokens: 8 }));
assert.ok(['stop', 'length', 'tool_calls'].includes(auto.choices[0].finish_reason));
for (const c of auto.choices[0].message.tool_calls ?? []) assert.equal(c.type, 'function');
// tool_choice naming a function that is not among the tools: a 400 naming tool_choice.
await assert.rejects(client.chat.completions.create(toolRequest({ type: 'function', function: { name: 'nope' } })),
                     (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');

// Reasoning: the demo model's template is Qwen3's, so the server splits <think>...</think> into reasoning_content
// (and reasoning). A grammar makes the random model think first; streamed, the reasoning deltas fold into the same
// text as the whole answer's.
const thinkReq = { model, messages: ask, max_tokens: 120, temperature: 1, seed: 11,
                   structured_outputs: { grammar: 'root ::= "<think>" [a-z ]{1,20} "</think>" [a-z]{1,20}' } };
const thought = await client.chat.completions.create(thinkReq);
const tm = thought.choices[0].message;
assert.match(tm.reasoning_content, /^[a-z ]{1,20}$/);
assert.equal(tm.reasoning, tm.reasoning_content);
assert.match(tm.content, /^[a-z]{1,20}$/);
let thinking = '';
let answer = '';
for await (const chunk of await client.chat.completions.create({ ...thinkReq, stream: true })) {
  if (!chunk.choices.length) continue;
  thinking += chunk.choices[0].delta.reasoning_content ?? '';
  answer += chunk.choices[0].delta.content ?? '';
}
assert.equal(thinking, tm.reasoning_content);
assert.equal(answer, tm.content);
// enable_thinking false: no split, the text as the model wrote it.
const plain = await client.chat.completions.create({ ...thinkReq, chat_template_kwargs: { enable_thinking: false } });
assert.match(plain.choices[0].message.content, /^<think>[a-z ]{1,20}<\/think>[a-z]{1,20}$/);
assert.equal(plain.choices[0].message.reasoning_content, undefined);

// An image part: the model takes text only, so a 400 naming the part's field.
await assert.rejects(
  chat([{ role: 'user', content: [{ type: 'text', text: 'What is this?' },
                                  { type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] }]),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'messages[0].content[1].type' &&
         /image_url/.test(e.message));
// An unknown role: a 400 naming it.
await assert.rejects(chat([{ role: 'robot', content: 'beep' }]),
                     (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[0].role');

// Structured outputs: response_format json_object and json_schema, whole and streamed. The demo model's random weights
// ramble, so the tokens that close a string or an object get a logit bias: it moves no token past the grammar.
const idOf = async (s) => (await fetch(new URL('../tokenize', client.baseURL + '/'), {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model, prompt: s, add_special_tokens: false }),
}).then((res) => res.json())).tokens;
const bias = {};
for (const [s, b] of [['"', 36], ['",', 36], ['"}', 36], ['}', 12], [',', 12], ['@', 24]]) {
  const ids = await idOf(s);
  if (ids.length === 1) bias[String(ids[0])] = b;
}
const person = {
  type: 'object',
  properties: { name: { type: 'string' }, age: { type: 'integer', minimum: 0, maximum: 150 },
                role: { enum: ['admin', 'user'] }, tags: { type: 'array', items: { type: 'string' }, maxItems: 3 } },
  required: ['name', 'age', 'role'],
  additionalProperties: false,
};
const checkPerson = (text) => {
  const v = JSON.parse(text);
  assert.equal(typeof v.name, 'string');
  assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 150, text);
  assert.ok(['admin', 'user'].includes(v.role), text);
  for (const k of Object.keys(v)) assert.ok(['name', 'age', 'role', 'tags'].includes(k), text);
  if (v.tags !== undefined) assert.ok(Array.isArray(v.tags) && v.tags.length <= 3, text);
};
for (const seed of [1, 2, 3]) {
  const asked = { model, messages: [{ role: 'user', content: 'Describe a person as JSON.' }], max_tokens: 400,
                  temperature: 1, seed, logit_bias: bias };
  const obj = await client.chat.completions.create({ ...asked, response_format: { type: 'json_object' } });
  assert.equal(obj.choices[0].finish_reason, 'stop', obj.choices[0].message.content);
  const o = JSON.parse(obj.choices[0].message.content);
  assert.ok(o !== null && typeof o === 'object' && !Array.isArray(o));
  const schemaFormat = { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } };
  const whole = await client.chat.completions.create({ ...asked, response_format: schemaFormat });
  assert.equal(whole.choices[0].finish_reason, 'stop', whole.choices[0].message.content);
  checkPerson(whole.choices[0].message.content);
  let streamed = '';
  for await (const chunk of await client.chat.completions.create({ ...asked, response_format: schemaFormat,
                                                                    stream: true })) {
    if (chunk.choices.length) streamed += chunk.choices[0].delta.content ?? '';
  }
  assert.equal(streamed, whole.choices[0].message.content);
}
// A schema the grammar engine cannot compile: a 400 naming the keyword.
await assert.rejects(
  client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 4,
                                   response_format: { type: 'json_schema', json_schema: { name: 'bad', schema: {
                                     type: 'object', patternProperties: { '^a': { type: 'string' } } } } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /patternProperties/.test(e.message));

console.log('openai Node SDK: completions, chat completions, streaming, logprobs, n, X-Request-Id, routes, content ' +
            'parts, tool-call round trips, tool_choice required/named/none/auto (streamed and not), reasoning_content, ' +
            'response_format (json_object, json_schema) and errors OK');
