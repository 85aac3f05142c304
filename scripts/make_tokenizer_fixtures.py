#!/usr/bin/env python3
"""Reference token ids for zmoe's tokenizer tests, computed with Hugging Face `tokenizers`.

Usage:
    python3 scripts/make_tokenizer_fixtures.py --tokenizers-dir third_party/tokenizers --out tests/fixtures/tokenizer
    python3 scripts/make_tokenizer_fixtures.py --tokenizers-dir third_party/tokenizers --out DIR --corpus-only

Needs only python3 and `tokenizers` (pip install tokenizers); --corpus-only needs nothing but python3.

Writes into --out:
  tokenizer_corpus.json      list of strings (the same corpus for every vocabulary; also the benchmark corpus)
  <name>.json                [{"text", "ids", "decoded", "decoded_skip_special"}, ...] one per corpus string, with
                             ids = Tokenizer.encode(text, add_special_tokens=False).ids,
                             decoded = Tokenizer.decode(ids, skip_special_tokens=False)
                             decoded_skip_special = Tokenizer.decode(ids, skip_special_tokens=True)
  <name>_decode.json         [{"ids", "decoded", "decoded_skip_special"}, ...] for id sequences that are not the
                             encoding of any text (single byte tokens, truncated and reversed encodings: invalid UTF-8)
  hf_tokenizer_bench.json    single-thread encode/decode throughput of `tokenizers` over the corpus, per vocabulary
The corpus is built in code, deterministically, from this file and the added tokens of the tokenizer files.
"""

import argparse
import json
import os
import sys
import time

# Single-threaded reference numbers: must be set before `tokenizers` is imported.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["RAYON_RS_NUM_CPUS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

NAMES = ["qwen3", "deepseek_v3", "llama3", "gpt4o", "llama2"]

SENTENCES = [
    # Latin with accents and other Latin-script languages
    "Café naïve façade résumé coöperate — déjà vu à la carte.",
    "Ærøskøbing, Straße, Łódź, İstanbul, ÀÉÎÕÜ, Þórr, Ðiện Biên Phủ.",
    "Tiếng Việt có rất nhiều dấu: ắ ằ ẳ ẵ ặ, ế ề ể ễ ệ.",
    "Türkçe: Iğdır'da ılık bir gün; İİ ıı ŞŞ şş ÇÇ çç ĞĞ ğğ.",
    "Español: ¿Dónde está el niño? ¡Qué señor tan amable!",
    "Português: Não há coração sem emoção, pão e limão.",
    "Polski: Zażółć gęślą jaźń. Čeština: Příliš žluťoučký kůň.",
    # Other scripts
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "ПРИВЕТ МИР. Українська: Гей, хлопці, їжте ґудзики! Ёлка ёж.",
    "Καλημέρα κόσμε· Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. ΑΒΓΔ αβγδ ς.",
    "مرحبا بالعالم! هذه جملة للاختبار ١٢٣٤٥ و 67890.",
    "العربية: كَتَبَ الطَّالِبُ الدَّرْسَ.",
    "שלום עולם, זה מבחן. עִבְרִית עם ניקוד.",
    "नमस्ते दुनिया। यह एक परीक्षण है १२३४। क्षत्रिय, ज्ञान, श्री।",
    "বাংলা ভাষা সুন্দর। தமிழ் மொழி அழகானது. తెలుగు భాష.",
    "สวัสดีชาวโลก นี่คือการทดสอบการตัดคำภาษาไทย ๑๒๓",
    "你好，世界！今天天气很好。我们来测试分词器。",
    "中文标点：“引号”、《书名号》、（括号）……——",
    "繁體中文：臺灣的資訊工程師們正在開發軟體。",
    "こんにちは世界。カタカナとひらがな、漢字を混ぜた文章です。",
    "ｶﾀｶﾅ（半角）とカタカナ（全角）、ＡＢＣ１２３。",
    "안녕하세요 세계! 토크나이저 테스트입니다. 한국어 문장.",
    "ქართული ენა. Հայերեն լեզու. አማርኛ ቋንቋ. ᠮᠣᠩᠭᠣᠯ.",
    "Mixed: hello世界こんにちは안녕Привет123abc",
    # Contractions
    "I'm sure you're right, he's here, we've got it, they'll come, I'd go, don't, can't, won't.",
    "I'M SURE YOU'RE RIGHT, HE'S HERE, WE'VE GOT IT, THEY'LL COME, I'D GO, DON'T.",
    "She'S We'Ve They'Ll I'M You'Re It'D 'S 'T 'RE 'VE 'M 'LL 'D 's 't 're 've 'm 'll 'd",
    "rock'n'roll o'clock y'all ''quoted'' '' ' 'x' Rock’s curly’s “double” ‘single’",
    "'''triple''' \"double\" `back` '123 '中 'é",
    # Numbers
    "0 1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
    "3.14159 2.71828 -42 +17 1e10 6.022e23 1,000,000 1.000.000,50 0.5% 50%",
    "Call +1 (555) 123-4567 or 555.987.6543 or +44 20 7946 0958 or 0800-123-456.",
    "Dates: 2024-01-15, 15/01/2024, 01.15.24, 12:30:45.123, 1999-12-31T23:59:59Z.",
    "Prices: $19.99, €5,50, £1,000.00, ¥10000, ₹2,50,000, 100USD.",
    "Fullwidth ０１２３４５６７８９, Arabic-Indic ٠١٢٣٤٥٦٧٨٩, Devanagari ०१२३४५६७८९.",
    "Superscripts x²+y³=z¹, fractions ½ ¼ ¾, Roman Ⅻ ⅷ, circled ① ② ③.",
    "v1.2.3 ipv4 192.168.0.1 ipv6 2001:db8::ff00:42:8329 0xDEADBEEF 0b1010 0o777",
    # Emoji
    "Emoji 😀😃😄 👍 👍🏽 👍🏿 👋🏻 ❤️ ✨ 🔥",
    "Families and ZWJ: 👨‍👩‍👧‍👦 👩‍💻 🧑🏽‍🚀 🏳️‍🌈 🏴‍☠️ 👁️‍🗨️",
    "Flags 🇫🇷🇯🇵🇺🇸🇩🇪🇨🇳 keycaps 1️⃣ #️⃣ *️⃣ tags 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "Emoji glued:hi😀there🙂ok👍🏽yes",
    # Combining marks, NFC vs NFD
    "NFC: \u00e9 \u00c5 \u00f1 \u00fc \u1ec7 | NFD: e\u0301 A\u030a n\u0303 u\u0308 e\u0323\u0302",
    "caf\u00e9 vs cafe\u0301 vs CAFE\u0301 vs cafe\u0301\u0301",
    "Angstrom \u212b Ohm \u2126 Kelvin \u212a ligature \ufb01 micro \u00b5",
    "Hangul jamo \u1100\u1161\u11a8 vs composed \uac01 and \u1112\u1161\u11ab\u1100\u1173\u11af",
    "Reordering: q\u0307\u0323 q\u0323\u0307 a\u0328\u0301 \u1e0b\u0323 d\u0323\u0307",
    "Zalgo: Z\u0351\u036b\u0343a\u0352\u0353l\u0334g\u0358\u033ao\u0360 \u0300 \u0301 \u0302 alone",
    "Devanagari NFD: \u0915\u093c \u0958 | Hebrew \u05e9\u05c1\u05bc \u05e9\u05bc\u05c1",
    # Whitespace and control characters
    "trailing spaces   ",
    "   leading spaces",
    "tabs\there\t\tand\t\t\tthere",
    "line1\nline2\n\nline4\n\n\n",
    "windows\r\nline\r\n\r\nend\r\n",
    "old mac\rline\r\rend\r",
    "mixed \r\n \n \r \n\r \r\r\n\n end",
    "  \n  \n\t\n \t \n",
    "nbsp\u00a0here ideographic\u3000space em\u2003space zwsp\u200bhere nnbsp\u202f",
    "line\u2028sep para\u2029sep nel\u0085x vt\x0bx ff\x0cx",
    "control \x00 \x01 \x07 \x1b[31mred\x1b[0m \x7f del",
    "bom\ufeffhere replacement \ufffd private \ue000\uf8ff nonchar \uffff plane16 \U0010fffd",
    " ",
    "\n",
    "\t",
    "\r\n",
    "  ",
    "a",
    "Hello",
    " Hello",
    "Hello world",
    "hello  world   again    end",
    "",
    # Punctuation
    "Hello, world! How are you? I'm fine... Really?!",
    "!!! ??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} <<< >>>",
    "URL: https://example.com/path/to/page?query=value&x=1#frag and mailto:user@example.org",
    "Markdown: **bold** _italic_ `code` [link](http://x.y) > quote\n- item\n1. first\n| a | b |\n|---|---|",
    "Math: ∑_{i=1}^{n} i² = n(n+1)/2, ∀x∈ℝ, √2 ≈ 1.414, α+β≠γ, ∞, ∫f(x)dx",
    "LaTeX: \\frac{a}{b} + \\sqrt{x^2 + y^2} = \\alpha_{1}^{2} \\\\ \\begin{equation} E=mc^2 \\end{equation}",
]

# SentencePiece-style vocabularies (llama2: Mistral/Mixtral's file): the "▁" metaspace written literally, text that
# looks like byte tokens, added tokens between words (each piece between them gets its own "▁"), characters outside
# the vocabulary (byte fallback).
SENTENCEPIECE = [
    "▁", "▁▁", "a▁b", " ▁ x", "▁Hello ▁world", "<0x41>", "<0x0A> <0xE4><0xB8><0xAD> <0xZZ> <0x4>",
    "hi<s>there", "<s>hi", "hi</s>", "<s> hi", "hi <s> there", "<s><s></s>", "<unk>x<unk>", "x <s>\n<s> y",
    "𓀀𓀁𓀂 𒀀𒀁 ꙮ 𝕳𝖊𝖑𝖑𝖔 🦙🦄🧬",
    "\u0000\u0001 \U0010ffff \ue000",
]

CODE = [
    '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
    print([fib(i) for i in range(10)])  # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]
''',
    '''#include <iostream>
#include <vector>

template <typename T>
T sum(const std::vector<T>& v) {
    T s{};
    for (const auto& x : v) s += x;
    return s;
}

int main() {
    std::vector<int> v{1, 2, 3};
    std::cout << sum(v) << "\\n";
    return 0;
}
''',
    '''fn main() {
    let words: Vec<&str> = "the quick brown fox".split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        println!("{i}: {w}");
    }
    let m: std::collections::HashMap<String, u32> = Default::default();
    assert!(m.is_empty());
}
''',
    '''const fetchData = async (url) => {
  try {
    const res = await fetch(url, { headers: { 'Content-Type': 'application/json' } });
    return await res.json();
  } catch (err) {
    console.error(`failed: ${err.message}`);
    return null;
  }
};
''',
    '''package main

import "fmt"

func main() {
\tch := make(chan int, 10)
\tgo func() { for i := 0; i < 10; i++ { ch <- i * i }; close(ch) }()
\tfor v := range ch {
\t\tfmt.Printf("%d\\n", v)
\t}
}
''',
    '''SELECT u.id, u.name, COUNT(o.id) AS orders
FROM users u LEFT JOIN orders o ON o.user_id = u.id
WHERE u.created_at >= '2024-01-01' AND u.email LIKE '%@example.com'
GROUP BY u.id, u.name HAVING COUNT(o.id) > 5 ORDER BY orders DESC LIMIT 10;
''',
    '''<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Test &amp; page</title></head>
<body>
  <div class="container" id='main'><p>Hello&nbsp;world &lt;tag&gt;</p></div>
  <script>document.getElementById("main").innerHTML += "<br/>";</script>
</body>
</html>
''',
    '''{"name": "zmoe", "version": "0.1.0", "nested": {"array": [1, 2.5, -3e-4, true, false, null],
 "unicode": "caf\\u00e9 \\ud83d\\ude00", "empty": {}, "list": []}}
''',
    '''#!/usr/bin/env bash
set -euo pipefail
for f in "$@"; do
  if [[ -f $f ]]; then wc -l "$f" | awk '{print $1}'; fi
done 2>/dev/null | sort -n | tail -n 3
echo "done: $(date +%Y-%m-%dT%H:%M:%S)"
''',
    '''public class Main {
    public static void main(String[] args) {
        Map<String, List<Integer>> m = new HashMap<>();
        m.computeIfAbsent("k", k -> new ArrayList<>()).add(42);
        System.out.println(m);
    }
}
''',
    '''    indented four
        indented eight
\t\ttwo tabs
  \t mixed
''',
    "x=1;y=2;z=x+y*3//2**4%5;a[i++]+=b[--j];p->q;r::s;t<<=1;u>>=2;v!==w;x&&y||!z",
]

LONG_RUNS = [
    "a" * 5000,
    " " * 10000,
    "\n" * 2000,
    "\t" * 1000,
    "😀" * 1000,
    "1" * 3000,
    "ab" * 3000,
    "é" * 2000,
    "中" * 3000,
    "!" * 2000,
    " a" * 2000,
    ("hello " * 500).strip(),
    "\r\n" * 1000,
    " \n" * 1000,
    "a\u0301" * 1000,
]


def added_token_strings(tokenizers_dir):
    """Strings built around each vocabulary's added tokens (special and not), deterministically sampled."""
    out = []
    for name in NAMES:
        path = os.path.join(tokenizers_dir, name, "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            added = json.load(f)["added_tokens"]
        # DeepSeek-V3 has hundreds of placeholders and Llama 3 hundreds of reserved tokens: keep the named ones and
        # a few of the numbered ones.
        picked = [a for a in added if "place" not in a["content"] and "reserved" not in a["content"]]
        picked += [a for a in added if "place" in a["content"] or "reserved" in a["content"]][::97]
        seen = set()
        for a in picked:
            t = a["content"]
            if t in seen:
                continue
            seen.add(t)
            out.append(t)
            out.append(f"Hello {t} world")
            out.append(f"x{t}{t}y")
            out.append(f" {t} \n{t}\n")
        contents = [a["content"] for a in added]
        # Prefixes of added tokens must not match; neighbouring text must tokenize normally.
        out.append(" ".join(c[:-1] for c in contents[:8]))
        out.append("".join(contents[:6]))
    out += [
        "<|im_start|>user\nhi<|im_end|>",
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nSimple arithmetic.\n</think>\n\n2+2 = 4.<|im_end|>\n",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n    return y<|fim_middle|>",
        "<｜begin▁of▁sentence｜>",
        "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜>Hi there.<｜end▁of▁sentence｜>",
        "<｜User｜>Use the tool<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get"
        "\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜fim▁begin｜>int main() {<｜fim▁hole｜>}<｜fim▁end｜>",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|endoftext|>text after<|endofprompt|>",
        "<|im_start|><|im_start|><|im_end|>",
        "<|im_start <|im_end| |im_end|> <||> <| |>",
        "<｜begin of sentence｜> <｜begin▁of▁sentence> <|begin_of_text>",
    ]
    return out


def mixed_document(parts, target_bytes, stride):
    """A long document mixing all parts in a fixed order (deterministic), about target_bytes of UTF-8."""
    doc = []
    size = 0
    i = 0
    while size < target_bytes:
        p = parts[(i * stride) % len(parts)]
        sep = ["\n\n", " ", "\n", "\t", "  ", "\r\n"][i % 6]
        doc.append(p)
        doc.append(sep)
        size += len(p.encode("utf-8")) + len(sep)
        i += 1
    return "".join(doc)


def build_corpus(tokenizers_dir):
    corpus = []
    corpus += SENTENCES
    corpus += CODE
    corpus += added_token_strings(tokenizers_dir)
    # Numbers of every length, alone and in text.
    digits = "31415926535897932384626433832795028841971693993751"
    for n in range(1, 26):
        corpus.append(digits[:n])
        corpus.append(f"The value is {digits[:n]}.")
    corpus += [f"{digits[:n]}.{digits[n:n + 3]}" for n in range(1, 12)]
    # Whitespace runs of every length before a word and at the end.
    for n in range(1, 18):
        corpus.append(" " * n + "word" + " " * n)
        corpus.append("a" + " " * n + "b")
        corpus.append("x" + "\n" * n + "y")
    for n in range(1, 6):
        corpus.append("x" + "\t" * n + "y" + "\r\n" * n + "z" + "\r" * n)
    # Casing variants and letter/number/punctuation boundaries.
    for s in ["hello world", "Hello World", "HELLO WORLD", "hELLO wORLD", "HelloWorld", "helloWORLDHello"]:
        corpus.append(s)
    corpus += ["abc123def", "abc 123 def", "a1b2c3", "x.y,z;w", "...abc", "abc...", "(abc)", "[1,2,3]", "{a:b}"]
    corpus += LONG_RUNS
    corpus += SENTENCEPIECE
    # Long documents of 20, 50 and 100 KB, mixing everything above.
    short = [s for s in SENTENCES + CODE if s]
    corpus.append(mixed_document(short, 20_000, 7))
    corpus.append(mixed_document(short, 50_000, 11))
    corpus.append(mixed_document(short + corpus[len(SENTENCES) + len(CODE):len(SENTENCES) + len(CODE) + 80],
                                 100_000, 13))
    return corpus


def decode_cases(tok, corpus_items):
    """Id sequences that no text encodes to: single tokens, truncated and reversed encodings (invalid UTF-8)."""
    cases = []
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    singles = list(range(0, min(vocab_size, 300)))
    cases.append(singles)
    for item in corpus_items:
        ids = item["ids"]
        if not ids or len(ids) > 60:
            continue
        text = item["text"]
        if all(ord(c) < 0x80 for c in text):
            continue
        cases.append(ids[::-1])
        for cut in range(1, len(ids)):
            cases.append(ids[:cut])
        if len(cases) > 400:
            break
    out = []
    for ids in cases:
        ids = [i for i in ids if tok.id_to_token(i) is not None]
        out.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return out


def bench(tok, corpus, encodings):
    """Best of 3 of (repeat the whole corpus until >= 1 s): MB/s of UTF-8 text and tokens/s, single thread."""
    text_bytes = sum(len(s.encode("utf-8")) for s in corpus)
    num_tokens = sum(len(e) for e in encodings)

    def measure(fn):
        best = None
        for _ in range(3):
            reps = 0
            start = time.perf_counter()
            while True:
                fn()
                reps += 1
                elapsed = time.perf_counter() - start
                if elapsed >= 1.0:
                    break
            per_rep = elapsed / reps
            best = per_rep if best is None else min(best, per_rep)
        return best

    def do_encode():
        for s in corpus:
            tok.encode(s, add_special_tokens=False)

    def do_decode():
        for ids in encodings:
            tok.decode(ids, skip_special_tokens=False)

    enc = measure(do_encode)
    dec = measure(do_decode)
    return {
        "encode_mb_per_s": text_bytes / enc / 1e6,
        "encode_tokens_per_s": num_tokens / enc,
        "decode_mb_per_s": text_bytes / dec / 1e6,
        "decode_tokens_per_s": num_tokens / dec,
        "corpus_bytes": text_bytes,
        "corpus_tokens": num_tokens,
    }


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizers-dir", required=True, help="folder with <name>/tokenizer.json for " + ", ".join(NAMES))
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--corpus-only", action="store_true", help="write tokenizer_corpus.json only (no tokenizers)")
    ap.add_argument("--no-bench", action="store_true", help="skip hf_tokenizer_bench.json")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    corpus = build_corpus(args.tokenizers_dir)
    write_json(os.path.join(args.out, "tokenizer_corpus.json"), corpus)
    print(f"corpus: {len(corpus)} strings, {sum(len(s.encode('utf-8')) for s in corpus)} bytes", file=sys.stderr)
    if args.corpus_only:
        return

    import tokenizers  # noqa: E402  (after the thread settings above)
    from tokenizers import Tokenizer

    bench_out = {"tokenizers_version": tokenizers.__version__, "threads": 1, "vocabularies": {}}
    for name in NAMES:
        tok = Tokenizer.from_file(os.path.join(args.tokenizers_dir, name, "tokenizer.json"))
        items = []
        for text in corpus:
            ids = tok.encode(text, add_special_tokens=False).ids
            items.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                          "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
        write_json(os.path.join(args.out, f"{name}.json"), items)
        write_json(os.path.join(args.out, f"{name}_decode.json"), decode_cases(tok, items))
        print(f"{name}: {sum(len(i['ids']) for i in items)} ids", file=sys.stderr)
        if not args.no_bench:
            bench_out["vocabularies"][name] = bench(tok, corpus, [i["ids"] for i in items])
            print(f"{name}: {bench_out['vocabularies'][name]}", file=sys.stderr)
    if not args.no_bench:
        write_json(os.path.join(args.out, "hf_tokenizer_bench.json"), bench_out)


if __name__ == "__main__":
    main()
