// Hugging Face tokenizers (its Node binding, fetched into third_party/tokenizers by
// scripts/setup) on a request written by reference_tokenizer.cc:
//
//   node reference_tokenizer.js REPO_ROOT REQUEST.json RESPONSE.json
//
// request  {"mode": "encode" | "bench", "tokenizers": [{"name", "path"}], "texts": [...],
//           "decode_ids": {name: [[id, ...], ...]}, "add_special_tokens": false}
// encode:  {name: {"ids": [[...]], "decoded": [decode(ids)], "decoded_ids": [decode(...)]}}
// bench:   {name: {"load_seconds", "batch_cold_seconds", "batch_warm_seconds",
//           "single_warm_seconds", each also as "…_cpu_seconds", "ids": [[...]]}}: one
//           encodeBatch over all texts on a fresh tokenizer (cold word cache), a second one
//           (warm), and one encode() per text (warm); only those loops are timed, in wall and
//           CPU seconds. TOKENIZERS_PARALLELISM=false in the environment keeps encodeBatch on
//           one thread.
'use strict';
const fs = require('fs');
const path = require('path');

const [root, requestPath, responsePath] = process.argv.slice(2);
const { Tokenizer } = require(
    path.join(root, 'third_party/tokenizers/node_modules/@anush008/tokenizers'));

function seconds(start) {
  return Number(process.hrtime.bigint() - start) / 1e9;
}

async function main() {
  const request = JSON.parse(fs.readFileSync(requestPath, 'utf8'));
  const options = { addSpecialTokens: Boolean(request.add_special_tokens) };
  const response = {};
  for (const { name, path: file } of request.tokenizers) {
    let start = process.hrtime.bigint();
    const tokenizer = Tokenizer.fromFile(file);
    const loadSeconds = seconds(start);
    if (request.mode === 'encode') {
      const encodings = await tokenizer.encodeBatch(request.texts, options);
      const ids = encodings.map((e) => e.getIds());
      const decoded = await tokenizer.decodeBatch(ids, false);
      const extra = (request.decode_ids || {})[name] || [];
      const decodedIds = extra.length ? await tokenizer.decodeBatch(extra, false) : [];
      response[name] = { ids, decoded, decoded_ids: decodedIds };
    } else if (request.mode === 'bench') {
      // wall and CPU seconds of `loop` (CPU time of the whole process, every thread)
      const timed = async (loop) => {
        const wall = process.hrtime.bigint();
        const cpu = process.cpuUsage();
        const result = await loop();
        const used = process.cpuUsage(cpu);
        return [seconds(wall), (used.user + used.system) / 1e6, result];
      };
      const [cold, coldCpu] = await timed(() => tokenizer.encodeBatch(request.texts, options));
      const [warm, warmCpu, encodings] =
          await timed(() => tokenizer.encodeBatch(request.texts, options));
      const [single, singleCpu] = await timed(async () => {
        for (const text of request.texts) await tokenizer.encode(text, null, options);
      });
      response[name] = {
        load_seconds: loadSeconds,
        batch_cold_seconds: cold,
        batch_cold_cpu_seconds: coldCpu,
        batch_warm_seconds: warm,
        batch_warm_cpu_seconds: warmCpu,
        single_warm_seconds: single,
        single_warm_cpu_seconds: singleCpu,
        ids: encodings.map((e) => e.getIds()),
      };
    } else {
      throw new Error(`unknown mode ${request.mode}`);
    }
  }
  fs.writeFileSync(responsePath, JSON.stringify(response));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
