#pragma once
// One field list per message. Every message of messages/ is described once, in wire order, by an overload of
//
//   void fields(auto& io, message_of<M> auto& m) { io.field("name", m.x, as_uint{}); ... }
//
// which every direction runs: field_writer writes each field, field_reader reads it back (with the decoder's caps
// and checks), field_counter counts the fields the writer will write (the message's array header) and estimates
// its bytes. So encoder and decoder cannot drift: there is nothing to edit on one side only. The wire format stays
// positional msgpack: a field list only ever grows at its end (append-only), and a decoder reads an appended field
// only where io.appended(n) says an older peer may have left it out.
//
// A field's codec (as_uint, as_str{max}, as_record{fields}, ...) says how it is written and read; names are the
// decoder's error-message names; caps matter only when decoding.

#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.hpp"
#include "messages/envelope.hpp"
#include "messages/msgpack_reader.hpp"
#include "messages/msgpack_writer.hpp"

namespace zmoe {

/// `M` is message type `T`, const or not: field lists take both (the writer reads const messages).
template <class M, class T>
concept message_of = std::same_as<std::remove_const_t<M>, T>;

// ---------------------------------------------------------------------------------------------------------------
// Field codecs: write(w, v), read(f, name, v) consuming one field of cursor f, hint(v) = bytes, roughly.

struct as_uint {
    template <std::unsigned_integral T>
    void write(msgpack_writer& w, const T& v) const {
        w.uint(v);
    }
    template <std::unsigned_integral T>
    void read(field_cursor& f, const char* name, T& v) const {
        v = static_cast<T>(f.read_uint(name, std::numeric_limits<T>::max()));
    }
    template <class T>
    size_t hint(const T&) const {
        return 9;
    }
};

struct as_sint {
    template <std::signed_integral T>
    void write(msgpack_writer& w, const T& v) const {
        w.sint(v);
    }
    template <std::signed_integral T>
    void read(field_cursor& f, const char* name, T& v) const {
        v = static_cast<T>(f.next(name).read_int(name, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
    }
    template <class T>
    size_t hint(const T&) const {
        return 9;
    }
};

struct as_bool {
    void write(msgpack_writer& w, const bool& v) const { w.boolean(v); }
    void read(field_cursor& f, const char* name, bool& v) const { v = f.read_bool(name); }
    size_t hint(const bool&) const { return 1; }
};

struct as_f32 {
    void write(msgpack_writer& w, const float& v) const { w.f32(v); }
    void read(field_cursor& f, const char* name, float& v) const { v = f.read_float(name); }
    size_t hint(const float&) const { return 5; }
};

struct as_f64 {
    void write(msgpack_writer& w, const double& v) const { w.f64(v); }
    void read(field_cursor& f, const char* name, double& v) const { v = f.read_double(name); }
    size_t hint(const double&) const { return 9; }
};

/// A str of at most `max` bytes.
struct as_str {
    size_t max;
    void write(msgpack_writer& w, const std::string& v) const { w.str(v); }
    void read(field_cursor& f, const char* name, std::string& v) const { v = f.read_string(name, max); }
    size_t hint(const std::string& v) const { return 5 + v.size(); }
};

/// A bin of at most `max` bytes, held in a std::string.
struct as_bin {
    size_t max;
    void write(msgpack_writer& w, const std::string& v) const { w.bin(v); }
    void read(field_cursor& f, const char* name, std::string& v) const { v = f.read_bin_string(name, max); }
    size_t hint(const std::string& v) const { return 5 + v.size(); }
};

/// An error code as its byte; a reader keeps codes it does not know (they are append-only).
struct as_errc {
    void write(msgpack_writer& w, const errc& v) const { w.uint(static_cast<uint8_t>(v)); }
    void read(field_cursor& f, const char* name, errc& v) const { v = static_cast<errc>(f.read_uint(name, 255)); }
    size_t hint(const errc&) const { return 1; }
};

/// A msgpack array of int32 values, at most `max`.
struct as_int32_array {
    uint32_t max;
    void write(msgpack_writer& w, const std::vector<int32_t>& v) const { w.int32_array(v); }
    void read(field_cursor& f, const char* name, std::vector<int32_t>& v) const { v = f.read_int32_array(name, max); }
    size_t hint(const std::vector<int32_t>& v) const { return 5 + 5 * v.size(); }
};

/// A msgpack array of unsigned integers, at most `max`.
struct as_uint64_array {
    uint32_t max;
    void write(msgpack_writer& w, const std::vector<uint64_t>& v) const { w.uint64_array(v); }
    void read(field_cursor& f, const char* name, std::vector<uint64_t>& v) const { v = f.read_uint64_array(name, max); }
    size_t hint(const std::vector<uint64_t>& v) const { return 5 + 9 * v.size(); }
};

/// A msgpack array of at most `max` strings of at most `max_str` bytes.
struct as_string_array {
    uint32_t max;
    size_t max_str;
    void write(msgpack_writer& w, const std::vector<std::string>& v) const { w.string_array(v); }
    void read(field_cursor& f, const char* name, std::vector<std::string>& v) const {
        v = f.read_string_array(name, max, max_str);
    }
    size_t hint(const std::vector<std::string>& v) const {
        size_t n = 5;
        for (const auto& s : v) n += 5 + s.size();
        return n;
    }
};

/// A bin of packed little-endian int32 / uint32 values (the hot-path encoding of token ids, block tables, counts).
struct as_int32_le {
    uint32_t max;
    void write(msgpack_writer& w, const std::vector<int32_t>& v) const { w.int32_le(v); }
    void read(field_cursor& f, const char* name, std::vector<int32_t>& v) const { v = f.read_int32_le(name, max); }
    size_t hint(const std::vector<int32_t>& v) const { return 5 + 4 * v.size(); }
};
struct as_uint32_le {
    uint32_t max;
    void write(msgpack_writer& w, const std::vector<uint32_t>& v) const { w.uint32_le(v); }
    void read(field_cursor& f, const char* name, std::vector<uint32_t>& v) const { v = f.read_uint32_le(name, max); }
    size_t hint(const std::vector<uint32_t>& v) const { return 5 + 4 * v.size(); }
};

/// std::optional<T> as nil when empty, else as `inner` does.
template <class Inner>
struct as_nullable {
    Inner inner;
    template <class T>
    void write(msgpack_writer& w, const std::optional<T>& v) const {
        if (v) {
            inner.write(w, *v);
        } else {
            w.nil();
        }
    }
    template <class T>
    void read(field_cursor& f, const char* name, std::optional<T>& v) const {
        msgpack_reader& r = f.next(name);
        if (r.try_read_nil()) {
            v.reset();
            return;
        }
        field_cursor one(r, 1);
        inner.read(one, name, v.emplace());
    }
    template <class T>
    size_t hint(const std::optional<T>& v) const {
        return v ? inner.hint(*v) : 1;
    }
};

/// A msgpack array of at most `max` values, each as `elem` does, named `elem_name` in errors (default: the array's
/// name).
template <class Elem>
struct as_array {
    uint32_t max;
    Elem elem;
    const char* elem_name = nullptr;
    template <class T>
    void write(msgpack_writer& w, const std::vector<T>& v) const {
        w.array_header(static_cast<uint32_t>(v.size()));
        for (const T& x : v) elem.write(w, x);
    }
    template <class T>
    void read(field_cursor& f, const char* name, std::vector<T>& v) const {
        msgpack_reader& r = f.next(name);
        v.resize(r.read_array_header(max, name));
        for (T& x : v) {
            field_cursor one(r, 1);  // each element is one value
            elem.read(one, elem_name ? elem_name : name, x);
        }
    }
    template <class T>
    size_t hint(const std::vector<T>& v) const {
        size_t n = 5;
        for (const T& x : v) n += elem.hint(x);
        return n;
    }
};

// ---------------------------------------------------------------------------------------------------------------
// The three directions a field list runs in.

/// Counts the fields a field_writer writes (the array header of the message or record) and estimates its bytes.
class field_counter {
  public:
    template <class T, class Codec>
    void field(const char*, const T& v, const Codec& c) {
        ++num_fields;
        bytes += c.hint(v);
    }
    template <class T, class Codec>
    void field_if_set(const char*, const std::optional<T>& v, const Codec& c) {
        if (v) field("", *v, c);
    }
    void appended(uint32_t) {}
    template <class Cond>
    void check(Cond&&, const char*) {}
    const char* record() const { return ""; }

    uint32_t num_fields = 0;
    size_t bytes = 0;
};

/// Writes each field.
class field_writer {
  public:
    explicit field_writer(msgpack_writer& w) : w_(w) {}
    template <class T, class Codec>
    void field(const char*, const T& v, const Codec& c) {
        c.write(w_, v);
    }
    /// An optional field at the end of a record: written only when set (the record's count says whether it is).
    template <class T, class Codec>
    void field_if_set(const char*, const std::optional<T>& v, const Codec& c) {
        if (v) c.write(w_, *v);
    }
    void appended(uint32_t) {}
    template <class Cond>
    void check(Cond&&, const char*) {}
    const char* record() const { return ""; }

  private:
    msgpack_writer& w_;
};

/// Reads each field from the cursor of its message or record; `record` names it in check() failures.
class field_reader {
  public:
    field_reader(field_cursor& f, const char* record) : f_(f), record_(record) {}
    template <class T, class Codec>
    void field(const char* name, T& v, const Codec& c) {
        if (!skipping_) c.read(f_, name, v);
    }
    template <class T, class Codec>
    void field_if_set(const char* name, std::optional<T>& v, const Codec& c) {
        if (!skipping_ && f_.left() > 0) c.read(f_, name, v.emplace());
    }
    /// The fields from here on were appended together, `n` of them: a record from an older peer that holds fewer
    /// leaves all of them at their defaults.
    void appended(uint32_t n) { skipping_ = skipping_ || f_.left() < n; }
    /// A constraint between fields, checked once they are read: else zmoe::error(protocol) "<record>: <what>".
    template <class Cond>
    void check(Cond&& cond, const char* what) {
        if (!skipping_ && !cond()) throw error(errc::protocol, std::string(record_) + ": " + what);
    }
    /// The name of the record being read (for field lists whose fields go by their record's name).
    const char* record() const { return record_; }

  private:
    field_cursor& f_;
    const char* record_;
    bool skipping_ = false;
};

/// A nested record (a msgpack array of fields) described by the field list `fields`: written with its field count,
/// read with at least `min_fields` and at most `max_fields` fields; fields a newer peer appended are skipped.
template <class Fields>
struct as_record {
    Fields fields;
    uint32_t min_fields = 0;
    uint32_t max_fields = kMaxMessageFields;
    template <class T>
    void write(msgpack_writer& w, const T& v) const {
        field_counter n;
        fields(n, v);
        w.array_header(n.num_fields);
        field_writer out(w);
        fields(out, v);
    }
    template <class T>
    void read(field_cursor& f, const char* name, T& v) const {
        field_cursor g = f.read_record(name, min_fields, max_fields);
        field_reader in(g, name);
        fields(in, v);
        g.finish();
    }
    template <class T>
    size_t hint(const T& v) const {
        field_counter n;
        fields(n, v);
        return 5 + n.bytes;
    }
};
template <class Fields>
as_record(Fields) -> as_record<Fields>;
template <class Fields>
as_record(Fields, uint32_t) -> as_record<Fields>;
template <class Fields>
as_record(Fields, uint32_t, uint32_t) -> as_record<Fields>;

/// A msgpack array of at most `max` records described by `fields`, each named `elem_name` in errors.
template <class Fields>
constexpr as_array<as_record<Fields>> as_records(Fields fields, uint32_t max, const char* elem_name) {
    return {max, as_record<Fields>{fields}, elem_name};
}

// ---------------------------------------------------------------------------------------------------------------
// Whole messages.

/// The bytes of message `m` of `kind` under protocol `version`: [version, kind, fields...].
template <class M>
std::string encode_message(uint32_t version, uint8_t kind, const M& m) {
    field_counter n;
    fields(n, m);
    msgpack_writer w(16 + n.bytes);
    begin_message(w, version, kind, n.num_fields);
    field_writer out(w);
    fields(out, m);
    return w.take();
}

/// Reads message type M's fields from an opened message's cursor (close_message checks what follows).
template <class M>
M decode_fields(field_cursor& f, const char* what) {
    M m;
    field_reader in(f, what);
    fields(in, m);
    return m;
}

}  // namespace zmoe
