#pragma once
// sampling_params as a nested record [temperature, top_p, top_k, seed], shared by the engine and worker codecs.

#include "messages/msgpack_reader.hpp"
#include "messages/msgpack_writer.hpp"
#include "messages/step_types.hpp"

namespace zmoe {

inline void write_sampling(msgpack_writer& w, const sampling_params& s) {
    w.array_header(4);
    w.f32(s.temperature);
    w.f32(s.top_p);
    w.sint(s.top_k);
    w.uint(s.seed);
}

inline sampling_params read_sampling(field_cursor& parent, const char* field) {
    field_cursor f = parent.read_record(field, 4, 64);
    sampling_params s;
    s.temperature = f.read_float(field);
    s.top_p = f.read_float(field);
    s.top_k = f.read_int32(field);
    s.seed = f.read_uint(field);
    f.finish();
    return s;
}

}  // namespace zmoe
