#pragma once
// The tokenizer.json "decoder": how the spellings of a sequence of ids become text. Supported, each exactly as
// Hugging Face `tokenizers` decodes:
//   - null: spellings joined with single spaces;
//   - ByteLevel: each token mapped back through GPT-2's byte alphabet, bytes concatenated, invalid UTF-8 replaced by
//     U+FFFD per maximal invalid subsequence;
//   - SentencePiece style (Llama 2, Mistral, Mixtral): a Sequence of Replace (String or Regex pattern) steps, then
//     optionally ByteFallback, Fuse and Strip (content, start; stop 0), in that order. ByteFallback turns each run of
//     consecutive "<0xNN>" tokens into its bytes when they are valid UTF-8, and into one U+FFFD per byte otherwise;
//     Strip removes up to `start` leading `content` characters of the whole (fused) text;
//   - Metaspace: the replacement ("▁") becomes a space, except that the first token loses every replacement it has
//     (prepend_scheme always/first), as in HF.
// Anything else is refused at load time with errc::unsupported naming it.
//
// decoder::stream decodes one id at a time; decode() is that stream run over all ids, so a streamed decode always
// equals the whole one.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/normalizer.hpp"

namespace zmoe {

class decoder {
  public:
    enum class kind { join_with_space, byte_level, sentencepiece, metaspace };

    /// Builds from the "decoder" value of tokenizer.json (null: join_with_space).
    static decoder from_json(const nlohmann::json& j);

    /// Prepares the per-token tables from the spelling of every id (index = id; entries of ids without a token
    /// are empty and never looked at).
    void set_vocabulary(const std::vector<std::string>& spellings);

    kind type() const { return kind_; }

    /// What `id` contributes to a decode when it is not the first token: the raw bytes for ByteLevel, the single
    /// byte of a ByteFallback token, otherwise the spelling after the per-token steps (Replace, Metaspace).
    std::string_view token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

    /// What the decoder puts between two tokens: " " for join_with_space, else nothing.
    std::string_view separator() const { return kind_ == kind::join_with_space ? " " : ""; }

    /// Text of `ids`, all of which must have a token (callers check; filtering special tokens is theirs too).
    std::string decode(std::span<const int32_t> ids) const;

    /// Incremental decoding of one sequence. Output is valid UTF-8 at every step, and the concatenation of every
    /// push() and the final finish() equals decode() of the same ids. Bytes are held back only while later ids
    /// can still change how they decode: an incomplete UTF-8 sequence (at most 3 bytes), or for ByteFallback a
    /// run of byte tokens that is so far valid UTF-8 (a later invalid byte turns the whole run into U+FFFD).
    class stream {
      public:
        explicit stream(const decoder& d);

        /// Appends to `out` what became final with `id` (which must have a token).
        void push(int32_t id, std::string& out);
        /// Ends the sequence: appends what was held back. The stream can then start a new sequence.
        void finish(std::string& out);
        /// Bytes held back.
        size_t pending_bytes() const { return pending_.size(); }

      private:
        void emit(std::string_view text, std::string& out);
        void end_run(std::string& out);

        const decoder* d_;
        bool first_ = true;         // no token pushed yet
        std::string pending_;       // held-back bytes (see above)
        size_t valid_len_ = 0;      // ByteFallback run: length of its prefix known to be complete, valid UTF-8
        bool run_invalid_ = false;  // ByteFallback run already known invalid (its U+FFFDs are out)
        int32_t strip_left_ = 0;    // Strip: leading characters that may still be removed
    };

  private:
    kind kind_ = kind::join_with_space;
    std::vector<replace_rule> replaces_;  // sentencepiece: applied to every spelling, in order
    bool byte_fallback_ = false;
    std::string strip_content_;  // sentencepiece: the Strip character (empty: no Strip)
    int32_t strip_start_ = 0;
    std::string metaspace_replacement_;
    bool metaspace_strip_first_ = false;  // metaspace: the first token drops its replacements

    std::vector<std::string> bytes_;        // per id, see token_bytes()
    std::vector<std::string> first_bytes_;  // metaspace_strip_first_: per id, when it is the first token
    std::vector<uint8_t> is_fallback_;      // per id: a ByteFallback "<0xNN>" token
};

}  // namespace zmoe
