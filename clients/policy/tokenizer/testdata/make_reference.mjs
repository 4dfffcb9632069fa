// make_reference.mjs writes the reference ids of clients/policy/tokenizer's
// tests (see README.md beside it). It is not run by go test.
//
//   mkdir /tmp/tokref && cd /tmp/tokref && npm init -y &&
//     npm install @lenml/tokenizers@3.7.2 @huggingface/tokenizers@0.2.0
//   TOKREF_DIR=/tmp/tokref node clients/policy/tokenizer/testdata/make_reference.mjs
//
// run from the repository root. It reads the tokenizer from
// clients/policy/tokenizer/qwen2.5/tokenizer.json.gz and the texts from
// recipes/data, and writes testdata/reference.jsonl and testdata/hard.jsonl.
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { createRequire } from 'node:module';

const require = createRequire(path.join(process.env.TOKREF_DIR ?? '.', 'package.json'));
const { TokenizerLoader } = require('@lenml/tokenizers');
const { Tokenizer } = require('@huggingface/tokenizers');

const here = 'clients/policy/tokenizer';
const json = () => JSON.parse(zlib.gunzipSync(fs.readFileSync(`${here}/qwen2.5/tokenizer.json.gz`)).toString('utf8'));
const config = { model_max_length: 131072, clean_up_tokenization_spaces: false };
const lenml = TokenizerLoader.fromPreTrained({ tokenizerJSON: json(), tokenizerConfig: config });
const hf = new Tokenizer(json(), config);
const encLenml = (t) => Array.from(lenml.encode(t, { add_special_tokens: false }));
const encHF = (t) => Array.from(hf.encode(t, { add_special_tokens: false }).ids);
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// Qwen's own expectations, known from Qwen's documentation and model cards.
const known = [
  ['Hello world', [9707, 1879]],
  ['<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n', [151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198]],
];
for (const [t, want] of known) {
  for (const [name, enc] of [['@lenml/tokenizers', encLenml], ['@huggingface/tokenizers', encHF]]) {
    if (!same(enc(t), want)) throw new Error(`${name} gives ${JSON.stringify(enc(t))} for ${JSON.stringify(t)}, want ${JSON.stringify(want)}`);
  }
}

const lines = (f) => fs.readFileSync(f, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
const passages = lines('recipes/data/corpus/passages.jsonl');
const datasets = fs.readdirSync('recipes/data/qa').filter((f) => f.endsWith('.jsonl')).sort();
const questions = datasets.flatMap((f) => lines(`recipes/data/qa/${f}`));

// clients/policy/format: Search-R1's instruction, prompt and <information> block.
const instruction = "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> and it will return the top searched results between <information> and </information>. You can search as many times as your want. If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. ";
const norm = (q) => { q = q.trim(); return q.endsWith('?') ? q : q + '?'; };
const userPrompt = (q) => instruction + 'Question: ' + norm(q) + '\n';
const chat = (q) => '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n' + userPrompt(q) + '<|im_end|>\n<|im_start|>assistant\n';
const infoBlock = (cs) => '\n\n<information>' + cs.map((c, i) => {
  const j = c.indexOf('\n');
  const [title, text] = j >= 0 ? [c.slice(0, j), c.slice(j + 1)] : [c, ''];
  return `Doc ${i + 1}(Title: ${title}) ${text}\n`;
}).join('').trim() + '</information>\n\n';

const texts = []; // [source, text]
// every 12th passage, and every one holding U+FEFF (where the two references disagree)
passages.forEach((p, i) => { if (i % 12 === 0 || p.contents.includes('\ufeff')) texts.push(['corpus', p.contents]); });
questions.forEach((q) => texts.push([`qa/${q.dataset}`, q.question]));
questions.forEach((q, i) => { if (i % 5 === 0) texts.push([`qa/${q.dataset}:answers`, q.golden_answers.join(' | ')]); });
questions.forEach((q, i) => { if (i % 25 === 0) texts.push(['prompt', chat(q.question)]); });
for (let i = 0; i + 3 <= passages.length && i < 300 * 41; i += 41 * 3) {
  texts.push(['information', infoBlock(passages.slice(i, i + 3).map((p) => p.contents))]);
}
questions.forEach((q, i) => {
  if (i % 50 !== 0) return;
  texts.push(['turn', `<think> I need to find out ${q.question}. </think>\n<search> ${q.question} </search>\n\n`]);
  texts.push(['turn', `<think>\nThe passages say it.\n</think>\n<answer> ${q.golden_answers[0]} </answer><|im_end|>`]);
});

const hard = [];
const H = (why, ...ts) => ts.forEach((t) => hard.push([why, t]));
H('empty', '');
H('whitespace', ' ', '  ', '   ', '\t', '\t\t', ' \t ', 'a b', 'a  b', 'a   b', 'a    b', 'a \t b', 'a\t\tb', '\tx', ' \tx',
  'end ', 'end  ', 'end   ', 'end \n', 'end\n', 'end\n\n\n', '  lead', '    lead', '\n\nlead', ' \n lead',
  '  \n  \n  x', 'a\n \n b', 'tab\tsep\tvalues\t', 'code:\n    indented\n\tline\n', '\n', '\n\n', ' \n', '\n ',
  'x\v y\f z', '\u00a0nbsp\u00a0 x', '\u3000ideographic\u3000space', 'a\u2028b', 'a\u2029b', 'a \u2028 b', '\u2028\u2028x',
  'a\u1680b', 'a\u2003\u2003b', 'a\u202f b');
for (let k = 1; k <= 8; k++) H('whitespace run', 'a' + ' '.repeat(k) + 'b', 'a' + ' '.repeat(k), 'a' + '\n'.repeat(k) + 'b', ' '.repeat(k) + '\n' + 'x');
H('carriage return', 'a\r\nb', 'a\r\n\r\nb', 'line1\r\n  line2', 'x \r\n y', '\r', '\r\r\n', '\r\n', 'a.\r\n', 'end\r\n', ' \r\n\t\r\n x', '!!\r\n\r\n');
H('U+0085 and U+FEFF (\\s differs between JavaScript and Oniguruma)', '\u0085\u0085b', 'a\u0085 b', 'x  \ufeff z', 'a\ufeffb', '\ufeffBOM');
H('digits', '0', '12345', '3.14159', '1,000,000', '2024-12-01', 'x1y2z3', 'v2.0.1', ' 42', '42 ', '\u0663\u0664\u0665', '\u2460\u2461\u2462', '\u216b', 'x\u00b2 + y\u00b3', '\u00bc cup', '\uff11\uff12\uff13');
H('contractions', "I'm", "I'M", "you're", "YOU'RE", "You'Re", "we've", "WE'VE", "he'll", "HE'LL", "He'Ll", "she'd", "SHE'D", "it's", "IT'S",
  "don't", "DON'T", "'s", "'S", "'t", "'tis", "rock'n'roll", "O'Neill", "'re 've 'll 'm 'd", "x's y'S", "\u2019s it\u2019s", "'ll'll", "a'sb", "'", "''", "' s", "'x", "'7", "'\u00e9t\u00e9");
H('accents and NFC', 'caf\u00e9', 'cafe\u0301', 'na\u00efve', 'nai\u0308ve', '\u00c5', 'A\u030a', '\u00c5ngstr\u00f6m', 'e\u0301\u0301', '\u1e9b\u0323', '\u1100\u1161\u11a8',
  '\u00f1 vs n\u0303', 'Z\u00fcrich', 'Dvo\u0159\u00e1k', '\u2126 ohm', '\u212b angstrom', '\u212a kelvin', '\u0344', '\u0958', 'q\u0307\u0323', '\u0300abc', 'x \u0301y',
  '\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac', '\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442', '\u05e2\u05d1\u05e8\u05d9\u05ea', '\u0627\u0644\u0639\u0631\u0628\u064a\u0629', '\u0939\u093f\u0928\u094d\u0926\u0940', '\u0e44\u0e17\u0e22', 'Tiếng Việt', '\ufb01 ligature');
H('CJK', '中文分词测试', '北京是中国的首都。', '日本語のテキスト、カタカナ。', '你好，世界！', '한국어 텍스트', '漢字😀漢字', 'Beijing (北京) is', '「引用」', '中'.repeat(3) + '国'.repeat(2),
  '这是一个很长的中文句子没有任何标点符号用来测试很长的词语在分词器中的行为'.repeat(6));
H('emoji', '😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '❤️', 'a😀b', '😀😀😀', ' 😀', '🇺🇸🇫🇷', 'keycap 1️⃣', '😀 \n😀');
H('odd characters', '\u200b', 'a\u200bb', 'a\u200db', 'soft\u00adhyphen', '\ufffd', 'x\u0000y', '\u0001\u0002', '\u007f', '\ud835\udd18\ud835\udd2b\ud835\udd26', '\u00a7 1', '\u2603', '\u{1F600}\u{E0067}');
H('punctuation and code', 'Hello world', 'Hello, world!', 'HTML <b>bold</b>', 'https://example.com/a?b=c&d=e', 'user@example.com', 'C++ and C#', '$100.00', '50%', '...',
  '!!!', '???', '--', '\u2014em dash\u2014', '\u00abquotes\u00bb', '"quoted"', '(parenthesised)', '[1] [2]', '{"json": true}', 'a\\b', 'mixed123abc', 'snake_case_name',
  'camelCaseName', 'ALLCAPS', 'x=1;y=2', '  "', ' ...\n', '!\n\n', '.\r\n', ' !\n\n x', 'def f(x):\n    return x  # comment\n', '>>> print("hi")\n', '-->', '<<<>>>', ' <', '< ');
const added = json().added_tokens.map((a) => a.content);
H('added tokens', ...added, added.join(''), added.join(' '), added.join('\n'));
for (const a of added) H('added token in text', `x${a}y`, ` ${a} `, `${a}\n`, `\n\n${a}`);
H('added tokens, partial and adjacent', '<|im_start|', '<|im_end|>>', '<<|im_end|>', '<|im_start|><|im_end|>', '<|im_end|><|im_end|>', '|im_end|>', '< |im_end|>', '<|IM_END|>',
  '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>', '<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>', '<|endoftext|><|endoftext|>text');
H('agent tags', '<search>', '</search>', '<information>', '</information>', '<answer>', '</answer>', '<think>', '</think>',
  '<search> query </search>', '<search>query</search>\n\n', '</search>\n\n<information>', '</search>\n\n', '</search>\n', '</search> ', '</answer>',
  '<information>Doc 1(Title: X) y</information>\n\n', '<answer> Beijing </answer>', '<think>\nreasoning\n</think>', '</answer><|im_end|>', '<search> café 北京 </search>',
  '<search> Dvořák symphony 9 </search>\n\n<information>', '<think>I should search.</think>\n<search>who wrote "Ode to Joy"?</search>');

const out = (file, rows) => {
  let disagree = 0;
  const body = rows.map(([source, text]) => {
    const a = encLenml(text), b = encHF(text);
    const row = { source, text, ids: a };
    if (!same(a, b)) {
      disagree++;
      row.ids = b;
      row.lenml_ids = a;
    }
    return JSON.stringify(row);
  }).join('\n') + '\n';
  fs.writeFileSync(`${here}/testdata/${file}`, body);
  console.log(`${file}: ${rows.length} texts, ${disagree} where the two references disagree`);
};
out('reference.jsonl', texts);
out('hard.jsonl', hard);
