#pragma once
// Hugging Face tokenizer.json tokenizers — byte-level BPE (Qwen2/Qwen3, DeepSeek-V3, Llama 3, GPT-4o style) and
// SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Mixtral) — with the BOS/EOS settings of
// tokenizer_config.json. encode() gives exactly the ids of `tokenizers`'
// Tokenizer.encode(text, add_special_tokens=False).ids and decode() exactly Tokenizer.decode(ids, ...).
//
// Pipeline for encode, as in `tokenizers`: added tokens (special or not) are cut out first, leftmost-longest;
// the rest is normalized (each piece between added tokens on its own: a Prepend normalizer prepends to each),
// pre-tokenized into pieces (regex Splits, ByteLevel, Metaspace) and each piece BPE-encoded.
// What is supported and what is refused (errc::unsupported naming the component) is listed in docs/tokenizer.md.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zmoe {

class decoder;

class tokenizer {
  public:
    /// Loads `path`: a tokenizer.json file, or a directory containing one. tokenizer_config.json next to it, if
    /// present, provides bos/eos tokens and add_bos_token/add_eos_token. Throws zmoe::error: io (unreadable),
    /// invalid_checkpoint (malformed JSON or inconsistent vocabulary), unsupported (a component zmoe lacks).
    static tokenizer from_file(const std::filesystem::path& path);

    /// Builds from the contents of tokenizer.json and (optionally, may be empty) tokenizer_config.json.
    static tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {});

    tokenizer(tokenizer&&) noexcept;
    tokenizer& operator=(tokenizer&&) noexcept;
    ~tokenizer();

    /// Token ids of `text`, which must be valid UTF-8 (else zmoe::error invalid_argument naming the byte offset).
    /// Added/special tokens written in the text are recognised. With add_special_tokens, BOS is prepended when
    /// add_bos() and EOS appended when add_eos(). Empty text gives no ids. Thread-safe; linear-time in the text.
    std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;

    /// Appends the ids of `text` to `out` (same contract as encode).
    void encode_into(std::string_view text, std::vector<int32_t>& out, bool add_special_tokens = false) const;

    /// Text of `ids`, exactly as `tokenizers`' decode: for ByteLevel the tokens' bytes concatenated with invalid
    /// UTF-8 replaced by U+FFFD per maximal invalid subsequence; for SentencePiece-style decoders "▁" becomes a
    /// space, runs of <0xNN> byte tokens become their bytes (one U+FFFD per byte when the run is not valid UTF-8)
    /// and Strip removes the leading space (see decoder.hpp). skip_special_tokens drops tokens marked special
    /// before decoding. An id without a token (negative, >= vocab_size(), or a hole in the vocabulary) throws
    /// zmoe::error invalid_argument.
    std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

    /// One past the largest id that has a token (model vocabulary and added tokens together).
    int32_t vocab_size() const;
    /// Whether `id` has a token.
    bool is_valid_id(int32_t id) const;
    /// Whether `id` is an added token marked special (false for invalid ids).
    bool is_special(int32_t id) const;

    std::optional<int32_t> bos_id() const { return bos_id_; }
    std::optional<int32_t> eos_id() const { return eos_id_; }
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }

    /// Id of a token given as spelled in tokenizer.json (added tokens first, then the model vocabulary).
    std::optional<int32_t> token_to_id(std::string_view token) const;
    /// Spelling of `id` in tokenizer.json, std::nullopt for an id without a token.
    std::optional<std::string_view> id_to_token(int32_t id) const;

    /// The bytes `id` contributes to a decode when it is not the first token (not necessarily valid UTF-8 on their
    /// own: a ByteFallback token gives its one byte); throws like decode().
    std::string_view token_bytes(int32_t id) const;
    /// What the decoder puts between two tokens: " " when tokenizer.json has no decoder, else empty.
    std::string_view token_separator() const { return separator_; }
    /// The decoder, for streaming (incremental_detokenizer); valid as long as this tokenizer.
    const decoder& token_decoder() const;

  private:
    struct impl;
    explicit tokenizer(std::unique_ptr<impl> p);

    std::unique_ptr<impl> impl_;
    std::optional<int32_t> bos_id_, eos_id_;
    bool add_bos_ = false, add_eos_ = false;
    std::string separator_;
};

}  // namespace zmoe
