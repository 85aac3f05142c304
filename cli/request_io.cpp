#include "cli/request_io.hpp"

#include <algorithm>
#include <climits>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "messages/envelope.hpp"

namespace zmoe::cli {

namespace {

// Ordered: a chat request's messages and tools keep their key order (chat templates print them with tojson).
client_generate parse_request(const nlohmann::ordered_json& j, size_t line_no) {
    auto bad = [&](const std::string& what) {
        return error(errc::invalid_argument, "input line " + std::to_string(line_no) + ": " + what);
    };
    if (!j.is_object()) throw bad("not a JSON object");
    static const char* known[] = {"prompt",
                                  "prompt_token_ids",
                                  "max_tokens",
                                  "temperature",
                                  "top_p",
                                  "top_k",
                                  "seed",
                                  "stop",
                                  "ignore_eos",
                                  "messages",
                                  "tools",
                                  "chat_template_kwargs",
                                  "add_generation_prompt",
                                  "min_p",
                                  "presence_penalty",
                                  "frequency_penalty",
                                  "repetition_penalty",
                                  "logit_bias",
                                  "min_tokens",
                                  "stop_token_ids",
                                  "logprobs",
                                  "n",
                                  "cache_salt",
                                  "structured_outputs"};
    for (const auto& [k, v] : j.items())
        if (std::find(std::begin(known), std::end(known), k) == std::end(known)) throw bad("unknown field '" + k + "'");
    client_generate g;
    g.client_request_id = std::to_string(line_no);
    try {
        if (j.contains("messages")) {
            // A chat request: the frontend renders it with the model's chat template (docs/chat_templates.md).
            if (j.contains("prompt") || j.contains("prompt_token_ids"))
                throw bad("give either messages or a prompt, not both");
            if (!j.at("messages").is_array()) throw bad("messages must be an array");
            nlohmann::ordered_json chat = nlohmann::ordered_json::object();
            chat["messages"] = j.at("messages");
            chat["add_generation_prompt"] = j.value("add_generation_prompt", true);
            for (const char* k : {"tools", "chat_template_kwargs"})
                if (j.contains(k)) chat[k] = j.at(k);
            g.chat = chat.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
            g.prompt = std::string();
        } else if (j.contains("add_generation_prompt") || j.contains("tools") || j.contains("chat_template_kwargs")) {
            throw bad("add_generation_prompt, tools and chat_template_kwargs need messages");
        } else if (j.contains("prompt_token_ids")) {
            if (j.contains("prompt")) throw bad("give either prompt or prompt_token_ids, not both");
            const auto& ids = j.at("prompt_token_ids");
            if (!ids.is_array()) throw bad("prompt_token_ids must be an array of token ids");
            std::vector<int32_t> v;
            for (size_t i = 0; i < ids.size(); ++i) {
                // Checked before any narrowing: 2^32 + 5 must not become 5.
                if (!ids[i].is_number_integer() || (!ids[i].is_number_unsigned() && ids[i].get<int64_t>() < 0) ||
                    (ids[i].is_number_unsigned() && ids[i].get<uint64_t>() > uint64_t{INT32_MAX}))
                    throw bad("prompt_token_ids[" + std::to_string(i) + "] = " + ids[i].dump() +
                              " is not a token id (an integer in [0, 2^31))");
                v.push_back(static_cast<int32_t>(ids[i].get<int64_t>()));
            }
            g.prompt = std::move(v);
        } else if (j.contains("prompt")) {
            g.prompt = j.at("prompt").get<std::string>();
        } else {
            throw bad("missing prompt or prompt_token_ids");
        }
        if (j.contains("max_tokens")) {
            const auto v = j.at("max_tokens").get<int64_t>();
            if (v < 1 || v > 1000000) throw bad("max_tokens must be in [1, 1000000]");
            g.max_tokens = static_cast<uint32_t>(v);
        }
        if (j.contains("temperature")) g.temperature = j.at("temperature").get<float>();
        if (j.contains("top_p")) g.top_p = j.at("top_p").get<float>();
        if (j.contains("top_k")) {
            const auto& k = j.at("top_k");
            if (!k.is_number_integer() || k.get<int64_t>() < -1 || k.get<int64_t>() > INT32_MAX)
                throw bad("top_k must be an integer in [-1, 2^31)");
            g.top_k = static_cast<int32_t>(k.get<int64_t>());
        }
        if (j.contains("seed") && !j.at("seed").is_null()) {
            const auto& s = j.at("seed");
            if (!s.is_number_integer() || (!s.is_number_unsigned() && s.get<int64_t>() < 0))
                throw bad("seed must be an integer in [0, 2^64)");
            g.seed = s.get<uint64_t>();
        }
        if (j.contains("stop")) {
            const auto& s = j.at("stop");
            if (s.is_string()) {
                g.stop = {s.get<std::string>()};
            } else if (!s.is_null()) {
                g.stop = s.get<std::vector<std::string>>();
            }
        }
        if (j.contains("ignore_eos")) g.ignore_eos = j.at("ignore_eos").get<bool>();
        if (g.stop.size() > kMaxStopStrings)
            throw bad("at most " + std::to_string(kMaxStopStrings) + " stop strings (got " +
                      std::to_string(g.stop.size()) + ")");
        // vLLM's sampling parameters; unset ones take the server's defaults (docs/sampling.md).
        if (j.contains("min_p")) g.min_p = j.at("min_p").get<float>();
        if (j.contains("presence_penalty")) g.presence_penalty = j.at("presence_penalty").get<float>();
        if (j.contains("frequency_penalty")) g.frequency_penalty = j.at("frequency_penalty").get<float>();
        if (j.contains("repetition_penalty")) g.repetition_penalty = j.at("repetition_penalty").get<float>();
        if (j.contains("min_tokens")) g.min_tokens = j.at("min_tokens").get<uint32_t>();
        if (j.contains("stop_token_ids")) g.stop_token_ids = j.at("stop_token_ids").get<std::vector<int32_t>>();
        if (j.contains("logprobs") && !j.at("logprobs").is_null()) g.logprobs = j.at("logprobs").get<uint32_t>();
        if (j.contains("n")) {
            const auto& n = j.at("n");
            if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > kMaxChoices)
                throw bad("n must be an integer in [1, " + std::to_string(kMaxChoices) + "]");
            g.n = static_cast<uint32_t>(n.get<int64_t>());
        }
        if (j.contains("cache_salt")) {
            const auto& s = j.at("cache_salt");
            if (!s.is_string() || s.get<std::string>().empty() || s.get<std::string>().size() > kMaxNameBytes)
                throw bad("cache_salt must be a non-empty string of at most " + std::to_string(kMaxNameBytes) +
                          " bytes");
            g.cache_salt = s.get<std::string>();
        }
        if (j.contains("structured_outputs")) {  // vLLM's form, one of json, json_object, regex, choice, grammar
            const auto& so = j.at("structured_outputs");
            if (!so.is_object() || so.size() != 1)
                throw bad("structured_outputs must be an object with one of json, json_object, regex, choice, grammar");
            const auto& [key, v] = *so.items().begin();
            if (key == "json") {
                g.structured = {structured_kind::json_schema, v.is_string() ? v.get<std::string>() : v.dump()};
            } else if (key == "json_object") {
                if (v.get<bool>()) g.structured = {structured_kind::json_object, ""};
            } else if (key == "regex") {
                g.structured = {structured_kind::regex, v.get<std::string>()};
            } else if (key == "choice") {
                (void)v.get<std::vector<std::string>>();  // a list of strings, else a type error
                g.structured = {structured_kind::choice, v.dump()};
            } else if (key == "grammar") {
                g.structured = {structured_kind::grammar, v.get<std::string>()};
            } else {
                throw bad("structured_outputs." + std::string(key) + " is not supported");
            }
        }
        if (j.contains("logit_bias")) {  // OpenAI's form: {"token id": bias}
            for (const auto& [id, bias] : j.at("logit_bias").items()) {
                size_t used = 0;
                int32_t tok = 0;
                try {
                    tok = std::stoi(id, &used);
                } catch (const std::exception&) {
                    used = 0;
                }
                if (used == 0 || used != id.size()) throw bad("logit_bias keys must be token ids, got '" + id + "'");
                g.logit_bias.emplace_back(tok, bias.get<float>());
            }
        }
    } catch (const nlohmann::json::exception& e) {
        throw bad(std::string("wrong type: ") + e.what());
    }
    return g;
}

}  // namespace

std::vector<request_line> read_request_lines(const std::string& path) {
    std::ifstream file;
    if (path != "-") {
        file.open(path);
        if (!file) throw error(errc::io, "cannot read " + path);
    }
    std::istream& in = path == "-" ? std::cin : file;
    std::vector<request_line> out;
    std::string line;
    size_t line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        request_line r;
        try {
            nlohmann::ordered_json j;
            try {
                j = nlohmann::ordered_json::parse(line);
            } catch (const nlohmann::json::exception& e) {
                throw error(errc::invalid_argument, "input line " + std::to_string(line_no) + ": " + e.what());
            }
            r.request = parse_request(j, line_no);
        } catch (const error& e) {
            r.invalid = true;
            r.error = e.what();
        }
        r.request.client_request_id = std::to_string(out.size());
        out.push_back(std::move(r));
    }
    return out;
}

result_writer::result_writer(const std::string& path, size_t num_results) : path_(path), pending_(num_results) {
    if (path != "-") {
        file_.open(path);
        if (!file_) throw error(errc::io, "cannot write " + path);
    }
    out_ = path == "-" ? &std::cout : &file_;
}

namespace {
nlohmann::ordered_json logprobs_json(const std::vector<token_logprobs>& lps) {
    auto out = nlohmann::ordered_json::array();
    for (const auto& l : lps)
        out.push_back({{"logprob", l.logprob}, {"top_ids", l.top_ids}, {"top_logprobs", l.top_logprobs}});
    return out;
}

void write_result_line(std::ostream& out, size_t i, const request_result& r) {
    nlohmann::ordered_json j;
    j["index"] = i;
    if (r.failed) {
        j["token_ids"] = nlohmann::json::array();
        j["text"] = "";
        j["finish_reason"] = "error";
        j["error"] = {{"code", errc_name(r.code)}, {"message", r.message}};
    } else if (r.choices.size() == 1) {
        const client_completion& c = r.choices[0];
        j["token_ids"] = c.token_ids;
        j["text"] = c.text;
        j["finish_reason"] = std::string(finish_reason_name(c.reason));
        j["usage"] = {{"prompt_tokens", c.prompt_tokens},
                      {"completion_tokens", c.completion_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", c.cached_tokens}}}};
        if (!r.logprobs[0].empty()) j["logprobs"] = logprobs_json(r.logprobs[0]);
    } else {  // n > 1: one entry per sequence; usage counts the prompt once and every sequence's tokens
        auto& choices = j["choices"] = nlohmann::ordered_json::array();
        uint32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
        for (size_t k = 0; k < r.choices.size(); ++k) {
            const client_completion& c = r.choices[k];
            nlohmann::ordered_json one = {{"index", k},
                                          {"token_ids", c.token_ids},
                                          {"text", c.text},
                                          {"finish_reason", std::string(finish_reason_name(c.reason))}};
            if (!r.logprobs[k].empty()) one["logprobs"] = logprobs_json(r.logprobs[k]);
            choices.push_back(std::move(one));
            prompt_tokens = c.prompt_tokens;
            completion_tokens += c.completion_tokens;
            if (k == 0) cached_tokens = c.cached_tokens;  // the prompt's, as its first sequence found it
        }
        j["usage"] = {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
    }
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}
}  // namespace

void result_writer::add(size_t index, request_result result) {
    pending_.at(index) = std::move(result);
    bool wrote = false;
    while (next_ < pending_.size() && pending_[next_]) {
        write_result_line(*out_, next_, *pending_[next_]);
        pending_[next_].reset();
        ++next_;
        wrote = true;
    }
    if (wrote) out_->flush();
}

void result_writer::finish() {
    out_->flush();
    if (!*out_) throw error(errc::io, "short write to " + path_);
}

size_t run_request_lines(zmoe_client& client, const std::vector<request_line>& lines,
                         std::chrono::milliseconds idle_timeout, result_writer& writer, bool progress) {
    const size_t total = lines.size();
    size_t done = 0, failed = 0;
    auto show = [&] {
        if (!progress) return;
        const int width = 40;
        const int fill = total ? static_cast<int>(width * done / total) : width;
        std::cerr << "\r[" << std::string(fill, '#') << std::string(width - fill, ' ') << "] " << done << "/" << total
                  << (failed ? " (" + std::to_string(failed) + " failed)" : std::string()) << std::flush;
    };
    std::vector<request_result> results(total);
    std::vector<uint32_t> unfinished(total, 0);  // sequences of each request still running
    std::map<std::string, size_t> index;
    size_t left = 0;
    for (size_t i = 0; i < total; ++i) {
        if (lines[i].invalid) {
            results[i].failed = true;
            results[i].code = errc::invalid_argument;
            results[i].message = lines[i].error;
            ++done;
            ++failed;
            writer.add(i, results[i]);
            continue;
        }
        client_generate g = lines[i].request;
        g.client_request_id = std::to_string(i);
        g.stream = true;
        index[g.client_request_id] = i;
        unfinished[i] = std::max<uint32_t>(1, g.n);
        client_completion fresh;
        fresh.client_request_id = g.client_request_id;
        results[i].choices.assign(unfinished[i], fresh);
        results[i].logprobs.resize(unfinished[i]);
        client.generate(std::move(g));
        ++left;
    }
    show();
    while (left > 0) {
        auto ev = client.next_any(idle_timeout);
        if (!ev)
            throw error(errc::peer_dead, "no answer from the server for " + std::to_string(idle_timeout.count()) +
                                             " ms with " + std::to_string(left) + " request(s) unfinished");
        size_t i = 0;
        bool ended = false;
        if (auto* d = std::get_if<client_delta>(&*ev)) {
            auto it = index.find(d->client_request_id);
            if (it == index.end() || d->index >= results[it->second].choices.size()) continue;
            i = it->second;
            auto& c = results[i].choices[d->index];
            c.index = d->index;
            c.token_ids.insert(c.token_ids.end(), d->token_ids.begin(), d->token_ids.end());
            c.text += d->text;
            c.prompt_tokens = d->prompt_tokens;
            c.completion_tokens = d->completion_tokens;
            c.cached_tokens = d->cached_tokens;
            auto& lp = results[i].logprobs[d->index];
            lp.insert(lp.end(), d->logprobs.begin(), d->logprobs.end());
            if (d->finished) {
                c.reason = d->reason;
                ended = --unfinished[i] == 0;  // the request ends with its last sequence
            }
        } else {
            const auto& e = std::get<client_error>(*ev);
            auto it = index.find(e.client_request_id);
            if (it == index.end()) throw error(e.code, "server error: " + e.message);
            i = it->second;
            results[i].failed = true;
            results[i].code = e.code;
            results[i].message = e.message;
            ended = true;
            ++failed;
        }
        if (ended) {
            index.erase(std::to_string(i));
            --left;
            ++done;
            writer.add(i, std::move(results[i]));
            show();
        }
    }
    if (progress) std::cerr << "\n";
    writer.finish();
    return failed;
}

}  // namespace zmoe::cli
