#include "frontend/tokenizer.hpp"

#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "base/error.hpp"
#include "frontend/added_vocabulary.hpp"
#include "frontend/bpe_model.hpp"
#include "frontend/decoder.hpp"
#include "frontend/normalizer.hpp"
#include "frontend/pre_tokenizer.hpp"
#include "frontend/utf8.hpp"

namespace zmoe {

struct tokenizer::impl {
    normalizer norm;
    pre_tokenizer pre;
    bpe_model model;
    decoder dec;
    added_vocabulary added;
    std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> added_by_content;
    std::vector<std::string> spelling;  // per id: what id_to_token returns
    std::vector<uint8_t> flags;         // per id: kValid | kSpecial

    static constexpr uint8_t kValid = 1, kSpecial = 2;

    impl(normalizer n, pre_tokenizer p, bpe_model m, decoder d)
        : norm(std::move(n)), pre(std::move(p)), model(std::move(m)), dec(std::move(d)) {}

    // `at_input_start`: `text` begins at offset 0 of the whole input (see pre_tokenizer::split).
    void encode_plain(std::string_view text, std::vector<int32_t>& out, bool at_input_start) const {
        // Per-thread scratch: built once (a deque allocates even when empty), cleared after every use.
        thread_local std::vector<std::string_view> pieces;
        thread_local std::deque<std::string> storage;
        pieces.clear();
        pre.split(text, pieces, storage, at_input_start);
        for (std::string_view piece : pieces) model.encode(piece, out);
        storage.clear();
    }

    void encode_text(std::string_view text, std::vector<int32_t>& out) const {
        std::vector<added_vocabulary::segment> segments, inner;
        added.split(text, /*raw=*/true, segments);
        std::string normalized_storage;
        for (const auto& seg : segments) {
            if (seg.id >= 0) {
                out.push_back(seg.id);
                continue;
            }
            const std::string_view normalized =
                norm.normalize(text.substr(seg.begin, seg.end - seg.begin), normalized_storage);
            if (!added.has_tokens(/*raw=*/false)) {
                encode_plain(normalized, out, seg.begin == 0);
                continue;
            }
            inner.clear();
            added.split(normalized, /*raw=*/false, inner);
            for (const auto& sub : inner) {
                if (sub.id >= 0)
                    out.push_back(sub.id);
                else
                    encode_plain(normalized.substr(sub.begin, sub.end - sub.begin), out,
                                 seg.begin == 0 && sub.begin == 0);
            }
        }
    }
};

tokenizer::tokenizer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
tokenizer::tokenizer(tokenizer&&) noexcept = default;
tokenizer& tokenizer::operator=(tokenizer&&) noexcept = default;
tokenizer::~tokenizer() = default;

namespace {

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw error(errc::io, "cannot open " + path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw error(errc::io, "cannot read " + path.string());
    return ss.str();
}

nlohmann::json parse_json(std::string_view text, const char* what) {
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw error(errc::invalid_checkpoint, std::string(what) + " is not valid JSON: " + e.what());
    }
}

// bos_token / eos_token in tokenizer_config.json: a string, an AddedToken object with "content", or null.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key) {
    if (!config.is_object() || !config.contains(key)) return std::nullopt;
    const auto& v = config[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return std::nullopt;
}

// A TemplateProcessing post-processor (possibly inside a Sequence), which is where some tokenizer.json files
// (Llama 3) keep their BOS rule instead of tokenizer_config.json.
const nlohmann::json* find_template_processing(const nlohmann::json& pp) {
    if (!pp.is_object()) return nullptr;
    const std::string type = pp.value("type", std::string());
    if (type == "TemplateProcessing") return &pp;
    if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array())
        for (const auto& sub : pp["processors"])
            if (const auto* t = find_template_processing(sub)) return t;
    return nullptr;
}

// Name of the special token at the front (front=true) or back of a template's "single" sequence, if any.
std::optional<std::string> template_special(const nlohmann::json& tp, bool front) {
    if (!tp.contains("single") || !tp["single"].is_array() || tp["single"].empty()) return std::nullopt;
    const auto& item = front ? tp["single"].front() : tp["single"].back();
    if (!item.is_object() || !item.contains("SpecialToken")) return std::nullopt;
    const auto& st = item["SpecialToken"];
    if (!st.contains("id") || !st["id"].is_string()) return std::nullopt;
    return st["id"].get<std::string>();
}

}  // namespace

tokenizer tokenizer::from_file(const std::filesystem::path& path) {
    std::filesystem::path file = path;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) file = path / "tokenizer.json";
    if (!std::filesystem::exists(file, ec)) throw error(errc::io, "tokenizer file not found: " + file.string());
    const std::string json = read_file(file);
    const std::filesystem::path config_path = file.parent_path() / "tokenizer_config.json";
    std::string config;
    if (std::filesystem::exists(config_path, ec)) config = read_file(config_path);
    try {
        return from_json(json, config);
    } catch (const error& e) {
        throw error(e.code(), file.string() + ": " + e.what());
    }
}

tokenizer tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) {
    const nlohmann::json j = parse_json(tokenizer_json, "tokenizer.json");
    if (!j.is_object()) throw error(errc::invalid_checkpoint, "tokenizer.json is not a JSON object");
    const nlohmann::json null_json;
    auto field = [&](const char* key) -> const nlohmann::json& { return j.contains(key) ? j[key] : null_json; };

    normalizer norm = normalizer::from_json(field("normalizer"));
    pre_tokenizer pre = pre_tokenizer::from_json(field("pre_tokenizer"));
    bpe_model model = bpe_model::from_json(field("model"), pre.byte_level());

    decoder dec = decoder::from_json(field("decoder"));

    // Added tokens take the model's id when the model already has their content, as HF does on load.
    std::vector<added_token> added;
    const auto& added_json = field("added_tokens");
    if (!added_json.is_null() && !added_json.is_array())
        throw error(errc::invalid_checkpoint, "tokenizer.json: \"added_tokens\" is not an array");
    for (const auto& a : added_json) {
        if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id") ||
            !a["id"].is_number_integer())
            throw error(errc::invalid_checkpoint, "tokenizer.json: an added_tokens entry lacks content or id");
        added_token t;
        t.content = a["content"].get<std::string>();
        const int64_t id = a["id"].get<int64_t>();
        if (id < 0 || id >= (int64_t{1} << 30))
            throw error(errc::invalid_checkpoint,
                        "tokenizer.json: added token '" + t.content + "' has id out of range");
        t.id = static_cast<int32_t>(id);
        if (auto model_id = model.token_to_id(t.content)) t.id = *model_id;
        t.single_word = a.value("single_word", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        t.normalized = a.value("normalized", !a.value("special", false));
        t.special = a.value("special", false);
        added.push_back(std::move(t));
    }

    auto p = std::make_unique<impl>(std::move(norm), std::move(pre), std::move(model), std::move(dec));
    int32_t num_ids = p->model.num_ids();
    for (const auto& t : added) num_ids = std::max(num_ids, t.id + 1);
    p->spelling.resize(static_cast<size_t>(num_ids));
    p->flags.assign(static_cast<size_t>(num_ids), 0);
    for (int32_t id = 0; id < p->model.num_ids(); ++id) {
        if (!p->model.has_id()[id]) continue;
        p->spelling[id] = p->model.spellings()[id];
        p->flags[id] = impl::kValid;
    }
    std::unordered_set<std::string> special_contents;
    for (const auto& t : added) {
        p->spelling[t.id] = t.content;
        p->flags[t.id] = impl::kValid;
        p->added_by_content.emplace(t.content, t.id);
        if (t.special) special_contents.insert(t.content);
    }
    for (int32_t id = 0; id < num_ids; ++id) {
        if (!(p->flags[id] & impl::kValid)) continue;
        // HF skips by content: any id spelled like a special token counts as special.
        if (special_contents.count(p->spelling[id])) p->flags[id] |= impl::kSpecial;
    }
    p->dec.set_vocabulary(p->spelling);
    p->added = added_vocabulary(std::move(added), p->norm);

    tokenizer tok(std::move(p));
    tok.separator_ = std::string(tok.impl_->dec.separator());

    nlohmann::json config;
    if (!config_json.empty()) config = parse_json(config_json, "tokenizer_config.json");
    auto resolve = [&](const std::optional<std::string>& name) -> std::optional<int32_t> {
        return name ? tok.token_to_id(*name) : std::nullopt;
    };
    tok.bos_id_ = resolve(config_token(config, "bos_token"));
    tok.eos_id_ = resolve(config_token(config, "eos_token"));
    const nlohmann::json* tp = find_template_processing(field("post_processor"));
    if (config.is_object() && config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
        tok.add_bos_ = config["add_bos_token"].get<bool>();
    } else if (tp) {
        if (auto front = template_special(*tp, true)) {
            tok.add_bos_ = true;
            if (!tok.bos_id_) tok.bos_id_ = tok.token_to_id(*front);
        }
    }
    if (config.is_object() && config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) {
        tok.add_eos_ = config["add_eos_token"].get<bool>();
    } else if (tp && tp->contains("single") && (*tp)["single"].size() > 1) {
        if (auto back = template_special(*tp, false)) {
            tok.add_eos_ = true;
            if (!tok.eos_id_) tok.eos_id_ = tok.token_to_id(*back);
        }
    }
    return tok;
}

std::vector<int32_t> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    encode_into(text, out, add_special_tokens);
    return out;
}

void tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out, bool add_special_tokens) const {
    if (const size_t bad = utf8::find_invalid(text); bad != std::string_view::npos)
        throw error(errc::invalid_argument, "text is not valid UTF-8 at byte offset " + std::to_string(bad));
    if (add_special_tokens && add_bos_ && bos_id_) out.push_back(*bos_id_);
    impl_->encode_text(text, out);
    if (add_special_tokens && add_eos_ && eos_id_) out.push_back(*eos_id_);
}

int32_t tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->flags.size()); }

bool tokenizer::is_valid_id(int32_t id) const {
    return id >= 0 && id < vocab_size() && (impl_->flags[static_cast<size_t>(id)] & impl::kValid);
}

bool tokenizer::is_special(int32_t id) const {
    return is_valid_id(id) && (impl_->flags[static_cast<size_t>(id)] & impl::kSpecial);
}

std::optional<int32_t> tokenizer::token_to_id(std::string_view token) const {
    if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
    return impl_->model.token_to_id(token);
}

std::optional<std::string_view> tokenizer::id_to_token(int32_t id) const {
    if (!is_valid_id(id)) return std::nullopt;
    return impl_->spelling[static_cast<size_t>(id)];
}

std::string_view tokenizer::token_bytes(int32_t id) const {
    if (!is_valid_id(id))
        throw error(errc::invalid_argument, "token id " + std::to_string(id) + " has no token (vocabulary size " +
                                                std::to_string(vocab_size()) + ")");
    return impl_->dec.token_bytes(id);
}

const decoder& tokenizer::token_decoder() const { return impl_->dec; }

std::string tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    bool any_skipped = false;
    for (const int32_t id : ids) {
        token_bytes(id);  // throws for an id without a token
        any_skipped = any_skipped || (skip_special_tokens && is_special(id));
    }
    if (!any_skipped) return impl_->dec.decode(ids);
    // HF drops skipped tokens before the decoder runs, so they do not count as the first token either.
    std::vector<int32_t> kept;
    kept.reserve(ids.size());
    for (const int32_t id : ids)
        if (!is_special(id)) kept.push_back(id);
    return impl_->dec.decode(kept);
}

}  // namespace zmoe
