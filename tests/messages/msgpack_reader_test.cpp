#include "messages/msgpack_reader.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <msgpack.hpp>

#include "base/error.hpp"
#include "messages/msgpack_writer.hpp"

namespace zmoe {
namespace {

std::string packed_by_msgpack_cxx(const msgpack::object& o) {
    msgpack::sbuffer buf;
    msgpack::pack(buf, o);
    return {buf.data(), buf.size()};
}

template <typename T>
std::string pack_value(const T& v) {
    msgpack::sbuffer buf;
    msgpack::pack(buf, v);
    return {buf.data(), buf.size()};
}

TEST(MsgpackReader, ReadsIntegersOfEveryWidth) {
    for (int64_t v : {int64_t{0}, int64_t{5}, int64_t{127}, int64_t{128}, int64_t{255}, int64_t{256}, int64_t{65535},
                      int64_t{65536}, int64_t{1} << 40, int64_t{-1}, int64_t{-32}, int64_t{-33}, int64_t{-129},
                      int64_t{-40000}, -(int64_t{1} << 40), INT64_MIN, INT64_MAX}) {
        std::string b = pack_value(v);
        msgpack_reader r(b, "test");
        EXPECT_EQ(r.read_int("v"), v);
        EXPECT_TRUE(r.at_end());
        if (v >= 0) {
            msgpack_reader u(b, "test");
            EXPECT_EQ(u.read_uint("v"), static_cast<uint64_t>(v));
        }
    }
    std::string big = pack_value(UINT64_MAX);
    msgpack_reader r(big, "test");
    EXPECT_EQ(r.read_uint("v"), UINT64_MAX);
    msgpack_reader s(big, "test");
    EXPECT_THROW(s.read_int("v"), error);
}

TEST(MsgpackReader, RangeChecksIntegers) {
    std::string b = pack_value(int64_t{1} << 33);
    msgpack_reader r(b, "test");
    EXPECT_THROW(r.read_int32("v"), error);
    std::string neg = pack_value(int64_t{-5});
    msgpack_reader u(neg, "test");
    EXPECT_THROW(u.read_uint("v"), error);
    std::string small = pack_value(300);
    msgpack_reader k(small, "test");
    EXPECT_THROW(k.read_uint("kind", 255), error);
}

TEST(MsgpackReader, ReadsWhatTheWriterWrites) {
    msgpack_writer w;
    w.array_header(9);
    w.nil();
    w.boolean(true);
    w.f32(0.5f);
    w.f64(-2.25);
    w.str("héllo");
    w.bin(std::string("\0\1\2", 3));
    w.int32_array(std::vector<int32_t>{1, -2, 300000});
    w.int32_le(std::vector<int32_t>{7, -8});
    w.sint(-1);
    msgpack_reader r(w.bytes(), "test");
    ASSERT_EQ(r.read_array_header(100, "a"), 9u);
    r.read_nil("nil");
    EXPECT_TRUE(r.read_bool("b"));
    EXPECT_EQ(r.read_float("f"), 0.5f);
    EXPECT_EQ(r.read_double("d"), -2.25);
    EXPECT_EQ(r.read_str("s", 100), "héllo");
    EXPECT_EQ(r.read_bin("bin", 100), std::string("\0\1\2", 3));
    field_cursor f(r, 3);
    EXPECT_EQ(f.read_int32_array("arr", 10), (std::vector<int32_t>{1, -2, 300000}));
    EXPECT_EQ(f.read_int32_le("le", 10), (std::vector<int32_t>{7, -8}));
    EXPECT_EQ(f.read_int("i"), -1);
    EXPECT_TRUE(r.at_end());

    // The writer's output is ordinary msgpack: msgpack-cxx reads the same values.
    msgpack::object_handle oh = msgpack::unpack(w.bytes().data(), w.bytes().size());
    ASSERT_EQ(oh.get().type, msgpack::type::ARRAY);
    EXPECT_EQ(oh.get().via.array.size, 9u);
    EXPECT_EQ(oh.get().via.array.ptr[4].as<std::string>(), "héllo");
}

TEST(MsgpackReader, NumbersAcceptIntegersAndBothFloatWidths) {
    std::string i = pack_value(3);
    msgpack_reader a(i, "test");
    EXPECT_EQ(a.read_double("x"), 3.0);
    std::string d = pack_value(0.1);
    msgpack_reader b(d, "test");
    EXPECT_EQ(b.read_double("x"), 0.1);
    std::string s = pack_value(std::string("0.1"));
    msgpack_reader c(s, "test");
    EXPECT_THROW(c.read_double("x"), error);
}

TEST(MsgpackReader, RejectsLengthsBeyondTheMessage) {
    // str32 claiming 4 GiB with 3 bytes of payload.
    std::string b =
        "\xdb\xff\xff\xff\xff"
        "abc";
    msgpack_reader r(b, "test");
    EXPECT_THROW(r.read_str("s", SIZE_MAX), error);
    // array32 claiming 2^32-1 elements: rejected before any allocation.
    std::string a = "\xdd\xff\xff\xff\xff\x01";
    msgpack_reader q(a, "test");
    EXPECT_THROW(q.read_array_header(UINT32_MAX, "a"), error);
    msgpack_reader z(a, "test");
    EXPECT_THROW(z.skip("a"), error);
}

TEST(MsgpackReader, ErrorsNameTheProtocolAndField) {
    std::string b = pack_value(std::string("x"));
    msgpack_reader r(b, "client protocol");
    try {
        r.read_uint("generate.max_tokens");
        FAIL() << "expected a throw";
    } catch (const error& e) {
        EXPECT_EQ(e.code(), errc::protocol);
        std::string what = e.what();
        EXPECT_NE(what.find("client protocol"), std::string::npos) << what;
        EXPECT_NE(what.find("generate.max_tokens"), std::string::npos) << what;
        EXPECT_NE(what.find("expected integer, got str"), std::string::npos) << what;
    }
}

TEST(MsgpackReader, SkipsNestedValuesButCapsDepth) {
    msgpack::zone z;
    std::map<std::string, std::vector<int>> m{{"a", {1, 2}}, {"b", {}}};
    std::string b = packed_by_msgpack_cxx(msgpack::object(m, z)) + pack_value(42);
    msgpack_reader r(b, "test");
    r.skip("map");
    EXPECT_EQ(r.read_uint("after"), 42u);

    std::string deep(100, '\x91');  // 100 nested one-element arrays
    deep += '\x01';
    msgpack_reader d(deep, "test");
    EXPECT_THROW(d.skip("deep"), error);
}

TEST(MsgpackReader, PackedLittleEndianMustBeWholeElements) {
    msgpack_writer w;
    w.bin("abcde");
    msgpack_reader r(w.bytes(), "test");
    field_cursor f(r, 1);
    EXPECT_THROW(f.read_int32_le("ids", 100), error);
}

TEST(FieldCursor, MissingFieldThrowsAndExtraFieldsAreSkipped) {
    msgpack_writer w;
    w.uint(1);
    w.str("extra");
    msgpack_reader r(w.bytes(), "test");
    field_cursor f(r, 2);
    EXPECT_EQ(f.read_uint("a"), 1u);
    f.finish();
    EXPECT_TRUE(r.at_end());
    EXPECT_THROW(f.read_uint("b"), error);
}

}  // namespace
}  // namespace zmoe
