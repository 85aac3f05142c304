#pragma once
// Helpers that rewrite encoded messages for the malformed-input and compatibility tests.

#include <string>
#include <string_view>

#include "messages/msgpack_reader.hpp"
#include "messages/msgpack_writer.hpp"

namespace zmoe::test {

/// Splits an encoded message into its field count and the bytes of its fields (after the array header).
inline std::pair<uint32_t, std::string> split_message(std::string_view bytes) {
    msgpack_reader r(bytes, "test");
    uint32_t n = r.read_array_header(100000, "message");
    return {n, std::string(bytes.substr(bytes.size() - r.remaining()))};
}

/// The same message with one more field at the end, as a newer peer would send it.
inline std::string with_extra_field(std::string_view bytes, const msgpack_writer& extra_value) {
    auto [n, body] = split_message(bytes);
    msgpack_writer w;
    w.array_header(n + 1);
    return w.take() + body + extra_value.bytes();
}

/// The same message without its last field.
inline std::string without_last_field(std::string_view bytes) {
    auto [n, body] = split_message(bytes);
    msgpack_reader r(body, "test");
    for (uint32_t i = 0; i + 1 < n; ++i) r.skip("field");
    msgpack_writer w;
    w.array_header(n - 1);
    return w.take() + body.substr(0, body.size() - r.remaining());
}

/// The message with field `index` (0 = version, 1 = kind) replaced by the encoded value.
inline std::string with_field_replaced(std::string_view bytes, uint32_t index, const msgpack_writer& value) {
    auto [n, body] = split_message(bytes);
    msgpack_reader r(body, "test");
    for (uint32_t i = 0; i < index; ++i) r.skip("field");
    size_t start = body.size() - r.remaining();
    r.skip("field");
    size_t end = body.size() - r.remaining();
    msgpack_writer w;
    w.array_header(n);
    return w.take() + body.substr(0, start) + value.bytes() + body.substr(end);
}

/// Number of fields of an encoded message, version and kind included.
inline uint32_t num_fields(std::string_view bytes) { return split_message(bytes).first; }

}  // namespace zmoe::test

#include <gtest/gtest.h>

#include <functional>
#include <variant>

#include "base/error.hpp"

namespace zmoe::test {

/// Checks the contract every message has: it round-trips; a newer peer's appended field is skipped; a missing
/// field, a wrong-typed field, a wrong version, an unknown kind, any truncation and trailing bytes are rejected
/// with errc::protocol.
template <typename Msg, typename Decode, typename Eq = std::equal_to<>>
void check_wire_contract(const Msg& m, Decode decode, Eq eq = {}) {
    auto decoded_as = [&](const std::string& b) -> Msg {
        auto v = decode(b);
        EXPECT_TRUE(std::holds_alternative<Msg>(v)) << "decoded as the wrong alternative " << v.index();
        return std::get<Msg>(std::move(v));
    };
    auto expect_protocol_error = [&](const std::string& b, const std::string& why) {
        try {
            decode(b);
            ADD_FAILURE() << "accepted a malformed message: " << why;
        } catch (const error& e) {
            EXPECT_EQ(e.code(), errc::protocol) << why;
        }
    };

    const std::string bytes = encode(m);
    EXPECT_TRUE(eq(decoded_as(bytes), m)) << "round trip";

    msgpack_writer extra;
    extra.array_header(2);
    extra.str("from a newer peer");
    extra.uint(7);
    EXPECT_TRUE(eq(decoded_as(with_extra_field(bytes, extra)), m)) << "appended field";

    const uint32_t n = num_fields(bytes);
    if (n > 2) expect_protocol_error(without_last_field(bytes), "missing last field");
    {
        const std::string one_map = "\x81\x01\x02";  // {1: 2}: no field of any message is a map
        for (uint32_t i = 0; i < n; ++i) {
            auto [count, body] = split_message(bytes);
            msgpack_reader r(body, "test");
            for (uint32_t k = 0; k < i; ++k) r.skip("field");
            size_t start = body.size() - r.remaining();
            r.skip("field");
            size_t end = body.size() - r.remaining();
            msgpack_writer header;
            header.array_header(count);
            expect_protocol_error(header.take() + body.substr(0, start) + one_map + body.substr(end),
                                  "field " + std::to_string(i) + " replaced by a map");
        }
    }
    msgpack_writer v2;
    v2.uint(999);
    expect_protocol_error(with_field_replaced(bytes, 0, v2), "wrong version");
    msgpack_writer k;
    k.uint(200);
    expect_protocol_error(with_field_replaced(bytes, 1, k), "unknown kind");
    for (size_t len = 0; len < bytes.size(); ++len) {
        expect_protocol_error(bytes.substr(0, len), "truncated to " + std::to_string(len) + " bytes");
    }
    expect_protocol_error(bytes + '\x00', "trailing byte");
}

}  // namespace zmoe::test
