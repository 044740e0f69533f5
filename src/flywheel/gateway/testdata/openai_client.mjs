// A client of flywheel's gateway tests: drives an OpenAI-compatible server with the official
// OpenAI client (npm package openai, which scripts/setup puts in third_party/node_modules), using
// the chat-completions API exactly as agents do. Inputs from the environment: OPENAI_BASE_URL
// (http://HOST:PORT/EXEC_ID/v1), OPENAI_API_KEY, MODEL. Prints one JSON object per completed call,
// one line each; on any failure a message on stderr and exit code 1. urllib_client.py makes the
// same calls with Python's standard library only.
//
//   node src/flywheel/gateway/testdata/openai_client.mjs
//
// ES `import` ignores NODE_PATH, so the package is loaded with require (its CommonJS build), which
// looks in this repository's third_party/node_modules, then in NODE_PATH: NODE_PATH is needed only
// where this file runs from a copy outside the repository.
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}
const print = (obj) => console.log(JSON.stringify(obj));

async function main() {
  const require = createRequire(import.meta.url);
  const thirdParty = fileURLToPath(new URL("../../../../third_party", import.meta.url));
  let openai;
  try {
    openai = require(require.resolve("openai", { paths: [thirdParty] }));
  } catch (err) {
    throw new Error(`no openai package (run scripts/setup, or set NODE_PATH): ${err.message}`);
  }
  const { OpenAI, APIError } = openai;
  const model = env("MODEL");
  const client = new OpenAI({
    baseURL: env("OPENAI_BASE_URL"),
    apiKey: env("OPENAI_API_KEY"),
    maxRetries: 0,
    timeout: 60_000,
  });

  // 1. tools: a tool list, sampling parameters and logprobs.
  const messages = [
    { role: "system", content: "You are a helpful assistant." },
    { role: "user", content: "What is the weather in Paris?" },
  ];
  const tools = [{
    type: "function",
    function: {
      name: "get_weather",
      description: "The current weather in a city.",
      parameters: {
        type: "object",
        properties: { city: { type: "string" } },
        required: ["city"],
      },
    },
  }];
  const first = await client.chat.completions.create({
    model, messages, tools, temperature: 1.0, max_tokens: 16, seed: 7, logprobs: true,
  });
  const choice = first.choices[0];
  print({
    call: "tools", id: first.id, model: first.model, finish_reason: choice.finish_reason,
    content: choice.message.content, tool_calls: choice.message.tool_calls ?? null,
    n_logprobs: choice.logprobs?.content?.length ?? null, usage: first.usage ?? null,
  });

  // 2. multi_turn: the exchange continued with the assistant's reply and the tool's answer.
  const reply = { role: "assistant", content: choice.message.content };
  const toolCalls = choice.message.tool_calls ?? [];
  if (toolCalls.length > 0) reply.tool_calls = toolCalls;
  const next = toolCalls.length > 0
    ? { role: "tool", tool_call_id: toolCalls[0].id, content: '{"temp_c": 21}' }
    : { role: "user", content: "Thanks." };
  const second = await client.chat.completions.create({
    model, messages: [...messages, reply, next], tools, max_tokens: 8,
  });
  print({
    call: "multi_turn", finish_reason: second.choices[0].finish_reason,
    content: second.choices[0].message.content, usage: second.usage ?? null,
  });

  // 3. stream: server-sent chunks, the last one carrying the usage.
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Count to three." }], max_tokens: 12,
    temperature: 0.7, seed: 3, stream: true, stream_options: { include_usage: true },
  });
  let chunks = 0, content = "", finishReason = null, usage = null;
  const ids = new Set();
  for await (const chunk of stream) {
    chunks++;
    ids.add(chunk.id);
    const delta = chunk.choices[0];
    if (delta?.delta?.content) content += delta.delta.content;
    if (delta?.finish_reason) finishReason = delta.finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  print({
    call: "stream", chunks, content, finish_reason: finishReason, usage,
    ids_consistent: ids.size === 1,
  });

  // 4. n: several choices for one prompt.
  const many = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Say something." }], n: 2, max_tokens: 4,
  });
  print({ call: "n", choices: many.choices.length, indices: many.choices.map((c) => c.index) });

  // 5. bad_request: no messages; the server must refuse it with an OpenAI-shaped error.
  try {
    await client.chat.completions.create({ model, messages: [] });
  } catch (err) {
    // APIConnectionError is an APIError without a status: that is a failure, not the refusal.
    if (!(err instanceof APIError) || err.status === undefined) throw err;
    print({
      call: "bad_request", status: err.status, type: err.type ?? null,
      message: err.error?.message ?? err.message,
    });
    return;
  }
  throw new Error("bad_request: a request without messages succeeded");
}

main().catch((err) => {
  console.error(`openai_client: ${err?.stack ?? err}`);
  process.exit(1);
});
