#pragma once
// Streaming detokenization: feed the ids of one sequence as they are sampled, get text back as soon as it is
// final. Output never contains a broken UTF-8 sequence; bytes that could still become a valid character are held
// back until the next id completes them (or proves them invalid). The concatenation of every push() and the
// final flush() equals tokenizer::decode() of all the ids, byte for byte — including the U+FFFD that decode puts
// in place of invalid sequences, which push() emits as soon as the sequence is known to be invalid, and the
// leading space a SentencePiece-style decoder strips. At most three bytes are held for byte-level vocabularies;
// with ByteFallback a run of <0xNN> tokens is held while it is valid UTF-8 so far, because HF turns the whole run
// into U+FFFD when a later byte of it is invalid (the run ends at the next other token).

#include <cstdint>
#include <string>

#include "frontend/decoder.hpp"
#include "frontend/tokenizer.hpp"

namespace zmoe {

class incremental_detokenizer {
  public:
    /// `tok` must outlive this object. skip_special drops special tokens, as decode(ids, true) does.
    explicit incremental_detokenizer(const tokenizer& tok, bool skip_special = false);

    /// Adds one id; returns the text that became final (possibly empty). An id without a token throws
    /// zmoe::error invalid_argument and leaves the state unchanged.
    std::string push(int32_t id);

    /// Ends the sequence: returns the held-back bytes, U+FFFD-replaced (empty when nothing is held). The object
    /// can then start a new sequence.
    std::string flush();

    /// Number of bytes held back (0 to 3 for byte-level vocabularies; see above for ByteFallback).
    size_t pending_bytes() const { return stream_.pending_bytes(); }

  private:
    const tokenizer* tok_;
    bool skip_special_;
    decoder::stream stream_;
};

}  // namespace zmoe
