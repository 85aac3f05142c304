#pragma once
// sampling_params as a nested record, shared by the engine and worker codecs:
// [temperature, top_p, top_k, seed, min_p, presence_penalty, frequency_penalty, repetition_penalty, min_tokens,
//  min_tokens_stop_ids [int], logit_bias_ids [int], logit_bias_values [float], logprobs int]. The fields after seed
// were appended: a record that ends after seed decodes with them off. token_logprobs likewise:
// [logprob, top_ids [int], top_logprobs [float]].

#include <string>

#include "base/error.hpp"
#include "messages/msgpack_reader.hpp"
#include "messages/msgpack_writer.hpp"
#include "messages/step_types.hpp"

namespace zmoe {

/// Most logit_bias entries / stop ids a request may carry (the frontend enforces it with a clear message).
constexpr uint32_t kMaxLogitBias = 1u << 16;
constexpr uint32_t kMaxStopTokenIds = 1u << 12;
constexpr uint32_t kMaxTopLogprobs = 20;

inline void write_f32_array(msgpack_writer& w, const std::vector<float>& v) {
    w.array_header(static_cast<uint32_t>(v.size()));
    for (float x : v) w.f32(x);
}

inline std::vector<float> read_f32_array(field_cursor& f, const char* field, uint32_t max_len) {
    msgpack_reader& r = f.next(field);
    std::vector<float> v(r.read_array_header(max_len, field));
    for (float& x : v) x = r.read_float(field);
    return v;
}

inline void write_sampling(msgpack_writer& w, const sampling_params& s) {
    w.array_header(13);
    w.f32(s.temperature);
    w.f32(s.top_p);
    w.sint(s.top_k);
    w.uint(s.seed);
    w.f32(s.min_p);
    w.f32(s.presence_penalty);
    w.f32(s.frequency_penalty);
    w.f32(s.repetition_penalty);
    w.uint(s.min_tokens);
    w.int32_array(s.min_tokens_stop_ids);
    w.int32_array(s.logit_bias_ids);
    write_f32_array(w, s.logit_bias_values);
    w.sint(s.logprobs);
}

inline sampling_params read_sampling(field_cursor& parent, const char* field) {
    field_cursor f = parent.read_record(field, 4, 64);
    sampling_params s;
    s.temperature = f.read_float(field);
    s.top_p = f.read_float(field);
    s.top_k = f.read_int32(field);
    s.seed = f.read_uint(field);
    if (f.left() >= 9) {
        s.min_p = f.read_float(field);
        s.presence_penalty = f.read_float(field);
        s.frequency_penalty = f.read_float(field);
        s.repetition_penalty = f.read_float(field);
        s.min_tokens = f.read_uint32(field);
        s.min_tokens_stop_ids = f.read_int32_array(field, kMaxStopTokenIds);
        s.logit_bias_ids = f.read_int32_array(field, kMaxLogitBias);
        s.logit_bias_values = read_f32_array(f, field, kMaxLogitBias);
        s.logprobs = f.read_int32(field);
        if (s.logit_bias_ids.size() != s.logit_bias_values.size())
            throw error(errc::protocol, std::string(field) + ": logit_bias ids and values differ in length");
    }
    f.finish();
    return s;
}

inline void write_logprobs(msgpack_writer& w, const token_logprobs& l) {
    w.array_header(3);
    w.f32(l.logprob);
    w.int32_array(l.top_ids);
    write_f32_array(w, l.top_logprobs);
}

inline token_logprobs read_logprobs(field_cursor& parent, const char* field) {
    field_cursor f = parent.read_record(field, 3, 64);
    token_logprobs l;
    l.logprob = f.read_float(field);
    l.top_ids = f.read_int32_array(field, kMaxTopLogprobs);
    l.top_logprobs = read_f32_array(f, field, kMaxTopLogprobs);
    if (l.top_ids.size() != l.top_logprobs.size())
        throw error(errc::protocol, std::string(field) + ": top_ids and top_logprobs differ in length");
    f.finish();
    return l;
}

}  // namespace zmoe
