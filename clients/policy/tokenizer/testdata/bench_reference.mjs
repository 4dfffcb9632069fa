// bench_reference.mjs times the reference implementations on the shipped
// corpus, the texts of BenchmarkEncodeCorpus (docs/bench.md). Not run by
// go test. Set up as in make_reference.mjs, then from the repository root:
//
//   TOKREF_DIR=/tmp/tokref node clients/policy/tokenizer/testdata/bench_reference.mjs
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { createRequire } from 'node:module';

const require = createRequire(path.join(process.env.TOKREF_DIR ?? '.', 'package.json'));
const { TokenizerLoader } = require('@lenml/tokenizers');
const { Tokenizer } = require('@huggingface/tokenizers');

const json = () => JSON.parse(zlib.gunzipSync(fs.readFileSync('clients/policy/tokenizer/qwen2.5/tokenizer.json.gz')).toString('utf8'));
const config = { model_max_length: 131072, clean_up_tokenization_spaces: false };
const texts = fs.readFileSync('recipes/data/corpus/passages.jsonl', 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l).contents);
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t), 0);

const impls = [
  ['@lenml/tokenizers 3.7.2', () => { const t = TokenizerLoader.fromPreTrained({ tokenizerJSON: json(), tokenizerConfig: config }); return (s) => t.encode(s, { add_special_tokens: false }); }],
  ['@huggingface/tokenizers 0.2.0', () => { const t = new Tokenizer(json(), config); return (s) => t.encode(s, { add_special_tokens: false }).ids; }],
];
console.log(`node ${process.version}, ${texts.length} passages, ${(bytes / 1e6).toFixed(2)} MB`);
for (const [name, make] of impls) {
  const enc = make();
  let tokens = 0;
  // pass 1 fills the implementation's own caches; passes 2-4 are timed warm.
  const cold = process.hrtime.bigint();
  for (const s of texts) tokens += enc(s).length;
  const coldS = Number(process.hrtime.bigint() - cold) / 1e9;
  const passes = 3;
  const warm = process.hrtime.bigint();
  for (let p = 0; p < passes; p++) for (const s of texts) enc(s);
  const warmS = Number(process.hrtime.bigint() - warm) / 1e9 / passes;
  console.log(`${name}: ${tokens} tokens; first pass ${(tokens / coldS / 1e6).toFixed(2)} M tokens/s, warm ${(tokens / warmS / 1e6).toFixed(2)} M tokens/s (${(bytes / warmS / 1e6).toFixed(1)} MB/s)`);
}
