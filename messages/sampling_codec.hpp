#pragma once
// sampling_params and token_logprobs as nested records, shared by the engine and worker codecs (field_list.hpp):
// [temperature, top_p, top_k, seed, min_p, presence_penalty, frequency_penalty, repetition_penalty, min_tokens,
//  min_tokens_stop_ids [int], logit_bias_ids [int], logit_bias_values [float], logprobs int]. The fields after seed
// were appended: a record that ends after seed decodes with them off. token_logprobs likewise:
// [logprob, top_ids [int], top_logprobs [float]]. Their fields go by the record's name in error messages.

#include <string>

#include "messages/field_list.hpp"
#include "messages/step_types.hpp"
#include "messages/structured_output.hpp"

namespace zmoe {

/// Most logit_bias entries / stop ids a request may carry (the frontend enforces it with a clear message).
constexpr uint32_t kMaxLogitBias = 1u << 16;
constexpr uint32_t kMaxStopTokenIds = 1u << 12;
constexpr uint32_t kMaxTopLogprobs = 20;

inline constexpr auto sampling_fields = [](auto& io, auto& s) {
    const char* n = io.record();
    io.field(n, s.temperature, as_f32{});
    io.field(n, s.top_p, as_f32{});
    io.field(n, s.top_k, as_sint{});
    io.field(n, s.seed, as_uint{});
    io.appended(9);
    io.field(n, s.min_p, as_f32{});
    io.field(n, s.presence_penalty, as_f32{});
    io.field(n, s.frequency_penalty, as_f32{});
    io.field(n, s.repetition_penalty, as_f32{});
    io.field(n, s.min_tokens, as_uint{});
    io.field(n, s.min_tokens_stop_ids, as_int32_array{kMaxStopTokenIds});
    io.field(n, s.logit_bias_ids, as_int32_array{kMaxLogitBias});
    io.field(n, s.logit_bias_values, as_array<as_f32>{kMaxLogitBias, {}});
    io.field(n, s.logprobs, as_sint{});
    io.check([&] { return s.logit_bias_ids.size() == s.logit_bias_values.size(); },
             "logit_bias ids and values differ in length");
};

inline constexpr auto logprobs_fields = [](auto& io, auto& l) {
    const char* n = io.record();
    io.field(n, l.logprob, as_f32{});
    io.field(n, l.top_ids, as_int32_array{kMaxTopLogprobs});
    io.field(n, l.top_logprobs, as_array<as_f32>{kMaxTopLogprobs, {}});
    io.check([&] { return l.top_ids.size() == l.top_logprobs.size(); }, "top_ids and top_logprobs differ in length");
};

/// Most bytes of a structured-output constraint's text (a JSON Schema, a regex, a grammar).
constexpr size_t kMaxStructuredBytes = size_t{1} << 20;

/// A structured_output as [kind name, text] ("" for none; structured_output.hpp); a reader refuses a kind it does not
/// know.
struct as_structured {
    void write(msgpack_writer& w, const structured_output& v) const {
        w.array_header(2);
        w.str(structured_kind_name(v.kind));
        w.str(v.text);
    }
    void read(field_cursor& f, const char* name, structured_output& v) const {
        field_cursor g = f.read_record(name, 2, 64);
        msgpack_reader& r = g.next(name);
        const std::string_view kind = r.read_str(name, 64);
        const auto parsed = structured_kind_from_name(kind);
        if (!parsed) r.fail(name, "unknown structured-output kind '" + std::string(kind) + "'");
        v.kind = *parsed;
        v.text = g.read_string(name, kMaxStructuredBytes);
        g.finish();
    }
    size_t hint(const structured_output& v) const { return 24 + v.text.size(); }
};

/// A sampling_params record: at least the four original fields.
inline constexpr as_record as_sampling{sampling_fields, 4, 64};
/// A token_logprobs record.
inline constexpr as_record as_logprobs{logprobs_fields, 3, 64};

}  // namespace zmoe
