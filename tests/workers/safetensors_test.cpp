#include "workers/safetensors.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "base/error.hpp"
#include "synthetic_model.hpp"
#include "workers/safetensors_writer.hpp"

namespace zmoe {
namespace {

using testing::temp_dir;

using testing::error_of;

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::vector<tensor_to_write> sample_tensors() {
    return {{"a.bf16", dtype::bf16, {2, 3}, {1.f, -2.f, 0.5f, 3.25f, -0.125f, 100.f}},
            {"b.f16", dtype::f16, {4}, {1.f, -65504.f, 6.1035156e-05f, 5.9604645e-08f}},
            {"c.f32", dtype::f32, {1, 2}, {3.14159f, -1e-30f}}};
}

TEST(Safetensors, RoundTripsEveryDtype) {
    temp_dir dir;
    write_safetensors(dir.file("x.safetensors"), sample_tensors());
    safetensors_file f(dir.file("x.safetensors"));
    EXPECT_EQ(f.names(), (std::vector<std::string>{"a.bf16", "b.f16", "c.f32"}));
    for (const tensor_to_write& t : sample_tensors()) {
        const tensor_view v = f.get(t.name);
        EXPECT_EQ(v.type, t.type);
        EXPECT_EQ(v.shape, t.shape);
        // These values are exact in every dtype they are stored in.
        EXPECT_EQ(v.to_f32(), t.values) << t.name;
    }
}

TEST(Safetensors, Bf16AndF16ConversionRoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.00390625f)), 1.0f);       // halfway, rounds to even (down)
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.01171875f)), 1.015625f);  // halfway, rounds to even (up)
    EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 1.0f / 2048)), 1.0f);
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.f);
    EXPECT_EQ(f16_to_f32(0x0001), 5.9604645e-08f);  // smallest subnormal
    EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(70000.f))));
    for (uint32_t h = 0; h < 0x7c00; ++h)  // every finite positive half survives the round trip
        ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << h;
}

TEST(Safetensors, MissingTensorNamesFileAndTensor) {
    temp_dir dir;
    write_safetensors(dir.file("model.safetensors"), sample_tensors());
    safetensors_checkpoint ck(dir.str());
    const std::string msg = error_of([&] { ck.get("nope.weight"); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'nope.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
}

TEST(Safetensors, WrongShapeNamesExpectedAndActual) {
    temp_dir dir;
    write_safetensors(dir.file("model.safetensors"), sample_tensors());
    safetensors_checkpoint ck(dir.str());
    const std::string msg = error_of([&] { ck.get_matrix("a.bf16", 3, 2); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'a.bf16'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected [3, 2]"), std::string::npos) << msg;
}

TEST(Safetensors, TruncatedFileIsReported) {
    temp_dir dir;
    const std::string bytes = encode_safetensors(sample_tensors());
    write_bytes(dir.file("cut.safetensors"), bytes.substr(0, bytes.size() - 3));
    std::string msg = error_of([&] { safetensors_file f(dir.file("cut.safetensors")); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("cut.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;  // the tensor whose data runs past the end
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

    write_bytes(dir.file("tiny.safetensors"), bytes.substr(0, 5));
    msg = error_of([&] { safetensors_file f(dir.file("tiny.safetensors")); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("tiny.safetensors"), std::string::npos) << msg;

    write_bytes(dir.file("header.safetensors"), bytes.substr(0, 20));
    msg = error_of([&] { safetensors_file f(dir.file("header.safetensors")); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("header length"), std::string::npos) << msg;
}

TEST(Safetensors, CorruptHeaderIsReported) {
    temp_dir dir;
    std::string bytes = encode_safetensors(sample_tensors());
    std::string broken = bytes;
    broken[9] = '!';  // inside the JSON
    write_bytes(dir.file("json.safetensors"), broken);
    std::string msg = error_of([&] { safetensors_file f(dir.file("json.safetensors")); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("json.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("JSON"), std::string::npos) << msg;

    // Offsets that disagree with shape x dtype.
    const std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}";
    std::string file(8, '\0');
    file[0] = static_cast<char>(header.size());
    file += header + std::string(16, '\0');
    write_bytes(dir.file("span.safetensors"), file);
    msg = error_of([&] { safetensors_file f(dir.file("span.safetensors")); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("span.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs 16"), std::string::npos) << msg;
}

TEST(Safetensors, UnsupportedDtypeNamesFileAndTensor) {
    temp_dir dir;
    const std::string header = "{\"q\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    std::string file(8, '\0');
    file[0] = static_cast<char>(header.size());
    file += header + std::string(4, '\0');
    write_bytes(dir.file("model.safetensors"), file);
    safetensors_checkpoint ck(dir.str());
    const std::string msg = error_of([&] { ck.get("q"); }, errc::unsupported);
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'q'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("I8"), std::string::npos) << msg;
}

TEST(Safetensors, ShardedCheckpointFollowsWeightMap) {
    temp_dir dir;
    std::vector<tensor_to_write> t = sample_tensors();
    write_safetensors(dir.file("model-00001-of-00002.safetensors"), {t[0], t[1]});
    write_safetensors(dir.file("model-00002-of-00002.safetensors"), {t[2]});
    nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                            {"weight_map",
                             {{"a.bf16", "model-00001-of-00002.safetensors"},
                              {"b.f16", "model-00001-of-00002.safetensors"},
                              {"c.f32", "model-00002-of-00002.safetensors"}}}};
    std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
    {
        safetensors_checkpoint ck(dir.str());
        EXPECT_EQ(ck.get("c.f32").to_f32(), t[2].values);
        EXPECT_NE(ck.file_of("c.f32").find("model-00002-of-00002"), std::string::npos);
        const std::string msg = error_of([&] { ck.get_vector("c.f32", 2); }, errc::invalid_checkpoint);
        EXPECT_NE(msg.find("model-00002-of-00002.safetensors"), std::string::npos) << msg;
    }
    // The index naming a tensor its shard lacks.
    index["weight_map"]["d.missing"] = "model-00002-of-00002.safetensors";
    std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
    const std::string msg = error_of([&] { safetensors_checkpoint ck(dir.str()); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find("model-00002-of-00002.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'d.missing'"), std::string::npos) << msg;
}

TEST(Safetensors, MissingCheckpointIsReported) {
    temp_dir dir;
    const std::string msg = error_of([&] { safetensors_checkpoint ck(dir.str()); }, errc::invalid_checkpoint);
    EXPECT_NE(msg.find(dir.str()), std::string::npos) << msg;
}

}  // namespace
}  // namespace zmoe
