#include "workers/safetensors_writer.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "base/error.hpp"
#include "workers/fp8.hpp"

namespace zmoe {

std::string encode_safetensors(const std::vector<tensor_to_write>& tensors) {
    nlohmann::json header = nlohmann::json::object();
    header["__metadata__"] = {{"format", "pt"}};
    std::string data;
    for (const tensor_to_write& t : tensors) {
        int64_t numel = 1;
        for (int64_t d : t.shape) numel *= d;
        ZMOE_CHECK(static_cast<int64_t>(t.values.size()) == numel,
                   "tensor " << t.name << ": " << t.values.size() << " values for shape " << shape_string(t.shape));
        const size_t begin = data.size();
        for (float v : t.values) {
            if (t.type == dtype::f32) {
                data.append(reinterpret_cast<const char*>(&v), 4);
            } else if (t.type == dtype::f8_e4m3) {
                data.push_back(static_cast<char>(f32_to_e4m3(v)));
            } else {
                const uint16_t h = t.type == dtype::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
                data.append(reinterpret_cast<const char*>(&h), 2);
            }
        }
        header[t.name] = {{"dtype", dtype_name(t.type)}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');  // the format pads the header with spaces to 8-byte alignment
    std::string out(8, '\0');
    uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + h + data;
}

void write_safetensors(const std::string& path, const std::vector<tensor_to_write>& tensors) {
    const std::string bytes = encode_safetensors(tensors);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw error(errc::io, path + ": cannot open for writing");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw error(errc::io, path + ": write failed");
}

}  // namespace zmoe
