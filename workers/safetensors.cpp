#include "workers/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"

namespace zmoe {
namespace {

using json = nlohmann::json;

// Element size of every dtype the format defines, so headers of tensors we do not compute with still validate.
size_t safetensors_dtype_size(const std::string& d) {
    static const std::map<std::string, size_t> sizes = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},  {"I32", 4},     {"I16", 2},    {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    auto it = sizes.find(d);
    return it == sizes.end() ? 0 : it->second;
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
    throw error(errc::invalid_checkpoint, path + ": " + what);
}

}  // namespace

safetensors_file::safetensors_file(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw error(errc::io, path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        throw error(errc::io, path + ": cannot stat: " + std::strerror(e));
    }
    map_size_ = static_cast<size_t>(st.st_size);
    if (map_size_ < 8) {
        ::close(fd);
        bad(path, "file is truncated (" + std::to_string(map_size_) + " bytes, shorter than the 8-byte header length)");
    }
    map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        throw error(errc::io, path + ": cannot mmap: " + std::strerror(map_errno));
    }
    try {
        const auto* bytes = static_cast<const unsigned char*>(map_);
        uint64_t header_len = 0;
        for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
        if (header_len > map_size_ - 8) {
            bad(path, "header length " + std::to_string(header_len) + " exceeds the file size " +
                          std::to_string(map_size_) + " (truncated or corrupt file)");
        }
        json header;
        try {
            header = json::parse(reinterpret_cast<const char*>(bytes + 8),
                                 reinterpret_cast<const char*>(bytes + 8 + header_len));
        } catch (const json::exception& e) {
            bad(path, std::string("header is not valid JSON: ") + e.what());
        }
        if (!header.is_object()) bad(path, "header is not a JSON object");
        data_block_ = reinterpret_cast<const std::byte*>(bytes + 8 + header_len);
        const size_t data_size = map_size_ - 8 - static_cast<size_t>(header_len);
        for (auto it = header.begin(); it != header.end(); ++it) {
            if (it.key() == "__metadata__") continue;
            const std::string where = "tensor '" + it.key() + "'";
            const json& v = it.value();
            if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
                bad(path, where + " needs dtype, shape and data_offsets");
            entry e;
            if (!v["dtype"].is_string()) bad(path, where + ": dtype is not a string");
            e.dtype_name = v["dtype"].get<std::string>();
            const size_t esize = safetensors_dtype_size(e.dtype_name);
            if (esize == 0) bad(path, where + ": unknown dtype '" + e.dtype_name + "'");
            if (!v["shape"].is_array()) bad(path, where + ": shape is not an array");
            uint64_t numel = 1;
            for (const json& d : v["shape"]) {
                if (!d.is_number_integer() || d.get<int64_t>() < 0) bad(path, where + ": shape has a bad dimension");
                const auto dim = d.get<uint64_t>();
                if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim / esize)
                    bad(path, where + ": shape overflows");
                numel *= dim;
                e.shape.push_back(static_cast<int64_t>(dim));
            }
            const json& off = v["data_offsets"];
            if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
                bad(path, where + ": data_offsets must be two non-negative integers");
            const auto begin = off[0].get<uint64_t>();
            const auto end = off[1].get<uint64_t>();
            if (begin > end || end > data_size) {
                bad(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                              ") out of the data block of " + std::to_string(data_size) +
                              " bytes (truncated or corrupt file)");
            }
            if (end - begin != numel * esize) {
                bad(path, where + ": data_offsets span " + std::to_string(end - begin) + " bytes but shape " +
                              shape_string(e.shape) + " of " + e.dtype_name + " needs " +
                              std::to_string(numel * esize));
            }
            e.begin = static_cast<size_t>(begin);
            e.end = static_cast<size_t>(end);
            tensors_.emplace(it.key(), std::move(e));
        }
    } catch (...) {
        ::munmap(map_, map_size_);
        map_ = nullptr;
        throw;
    }
}

safetensors_file::~safetensors_file() {
    if (map_) ::munmap(map_, map_size_);
}

std::vector<std::string> safetensors_file::names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& [name, e] : tensors_) out.push_back(name);
    return out;
}

tensor_view safetensors_file::get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) bad(path_, "tensor '" + name + "' is missing");
    const entry& e = it->second;
    tensor_view v;
    if (e.dtype_name == "F32") {
        v.type = dtype::f32;
    } else if (e.dtype_name == "F16") {
        v.type = dtype::f16;
    } else if (e.dtype_name == "BF16") {
        v.type = dtype::bf16;
    } else if (e.dtype_name == "F8_E4M3") {
        v.type = dtype::f8_e4m3;  // model_weights pairs it with its weight_scale_inv
    } else {
        throw error(errc::unsupported, path_ + ": tensor '" + name + "' has unsupported dtype " + e.dtype_name +
                                           " (supported: BF16, F16, F32, F8_E4M3)");
    }
    v.shape = e.shape;
    v.data = data_block_ + e.begin;
    return v;
}

safetensors_checkpoint::safetensors_checkpoint(const std::string& dir) : dir_(dir) {
    namespace fs = std::filesystem;
    const fs::path single = fs::path(dir) / "model.safetensors";
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    if (fs::exists(single)) {
        main_file_ = single.string();
        files_.push_back(std::make_unique<safetensors_file>(main_file_));
        for (const std::string& n : files_.back()->names()) where_[n] = files_.back().get();
        return;
    }
    if (!fs::exists(index)) {
        throw error(errc::invalid_checkpoint,
                    dir + ": no model.safetensors or model.safetensors.index.json in the model directory");
    }
    main_file_ = index.string();
    std::ifstream in(index);
    if (!in) throw error(errc::io, main_file_ + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
        bad(main_file_, std::string("not valid JSON: ") + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        bad(main_file_, "missing object 'weight_map'");
    std::map<std::string, const safetensors_file*> by_file;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string()) bad(main_file_, "weight_map entry '" + it.key() + "' is not a file name");
        const std::string shard = it.value().get<std::string>();
        if (shard.find('/') != std::string::npos || shard == "..")
            bad(main_file_, "weight_map entry '" + it.key() + "' names a path outside the model directory");
        auto f = by_file.find(shard);
        if (f == by_file.end()) {
            files_.push_back(std::make_unique<safetensors_file>((fs::path(dir) / shard).string()));
            f = by_file.emplace(shard, files_.back().get()).first;
        }
        if (!f->second->contains(it.key()))
            bad(f->second->path(), "tensor '" + it.key() + "' is missing (listed in " + main_file_ + ")");
        where_[it.key()] = f->second;
    }
}

tensor_view safetensors_checkpoint::get(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end()) bad(main_file_, "tensor '" + name + "' is missing");
    return it->second->get(name);
}

tensor_view safetensors_checkpoint::get(const std::string& name, const std::vector<int64_t>& shape) const {
    tensor_view v = get(name);
    if (v.shape != shape) {
        bad(file_of(name),
            "tensor '" + name + "' has shape " + shape_string(v.shape) + ", expected " + shape_string(shape));
    }
    return v;
}

matrix_view safetensors_checkpoint::get_matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const tensor_view v = get(name, {rows, cols});
    return matrix_view{v.type, v.data, rows, cols};
}

std::vector<float> safetensors_checkpoint::get_vector(const std::string& name, int64_t n) const {
    return get(name, {n}).to_f32();
}

std::string safetensors_checkpoint::file_of(const std::string& name) const {
    auto it = where_.find(name);
    return it == where_.end() ? main_file_ : it->second->path();
}

std::vector<std::string> safetensors_checkpoint::names() const {
    std::vector<std::string> out;
    out.reserve(where_.size());
    for (const auto& [n, f] : where_) out.push_back(n);
    return out;
}

}  // namespace zmoe
