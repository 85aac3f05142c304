#include "gateway/openai_api.hpp"

#include <cmath>

namespace zmoe::gateway {

namespace {

[[noreturn]] void bad(const std::string& message, const std::string& param = {}) {
    throw api_error{.status = 400, .message = message, .type = "invalid_request_error", .param = param};
}

const ojson* field(const ojson& body, const char* name) {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number_field(const ojson& body, const char* name, double lo, double hi, double fallback) {
    const ojson* v = field(body, name);
    if (!v) return fallback;
    if (!v->is_number()) bad(std::string("'") + name + "' must be a number", name);
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
        bad(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", name);
    return d;
}

int64_t int_field(const ojson& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
    const ojson* v = field(body, name);
    if (!v) return fallback;
    if (!v->is_number_integer()) bad(std::string("'") + name + "' must be an integer", name);
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi)
        bad(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", name);
    return i;
}

bool bool_field(const ojson& body, const char* name, bool fallback) {
    const ojson* v = field(body, name);
    if (!v) return fallback;
    if (!v->is_boolean()) bad(std::string("'") + name + "' must be a boolean", name);
    return v->get<bool>();
}

}  // namespace

std::string error_body(const api_error& e) {
    ojson err = {{"message", e.message},
                 {"type", e.type},
                 {"param", e.param.empty() ? ojson() : ojson(e.param)},
                 {"code", e.status}};
    return ojson{{"error", err}}.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

api_error error_from_errc(errc code, const std::string& message) {
    switch (code) {
        case errc::invalid_argument:
        case errc::unsupported:
        case errc::duplicate_request:
            return {.status = 400, .message = message, .type = "invalid_request_error", .param = {}};
        case errc::overloaded:
            return {.status = 429, .message = message, .type = "rate_limit_error", .param = {}};
        case errc::out_of_memory:
        case errc::peer_dead:
        case errc::aborted:
            return {.status = 503, .message = message, .type = "service_unavailable", .param = {}};
        default:
            return {.status = 500, .message = message, .type = "internal_server_error", .param = {}};
    }
}

openai_request parse_openai_request(const std::string& text, endpoint_kind kind) {
    ojson body;
    try {
        body = ojson::parse(text);
    } catch (const ojson::exception& e) {
        bad(std::string("the request body is not valid JSON: ") + e.what());
    }
    if (!body.is_object()) bad("the request body must be a JSON object");
    openai_request r;
    r.kind = kind;
    client_generate& g = r.generate;
    if (const ojson* m = field(body, "model")) {
        if (!m->is_string()) bad("'model' must be a string", "model");
        r.model = m->get<std::string>();
    }
    if (kind == endpoint_kind::completion) {
        const ojson* p = field(body, "prompt");
        if (!p) bad("'prompt' is required", "prompt");
        if (p->is_string()) {
            g.prompt = p->get<std::string>();
        } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
            g.prompt = (*p)[0].get<std::string>();
        } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
            std::vector<int32_t> ids;
            for (const auto& t : *p) {
                if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
                    bad("'prompt' token ids must be non-negative integers", "prompt");
                ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
            }
            g.prompt = std::move(ids);
        } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
            bad("batched prompts are not supported: send one request per prompt", "prompt");
        } else {
            bad("'prompt' must be a string, a list of one string, or a list of token ids", "prompt");
        }
        if (bool_field(body, "echo", false)) bad("'echo' is not supported", "echo");
        if (int_field(body, "best_of", 1, 1, 1) != 1) bad("'best_of' must be 1", "best_of");
        if (field(body, "suffix")) bad("'suffix' is not supported", "suffix");
    } else {
        const ojson* m = field(body, "messages");
        if (!m || !m->is_array() || m->empty()) bad("'messages' must be a non-empty list", "messages");
        for (const auto& msg : *m)
            if (!msg.is_object() || !msg.contains("role"))
                bad("each message must be an object with a role", "messages");
        ojson chat = {{"messages", *m}, {"add_generation_prompt", bool_field(body, "add_generation_prompt", true)}};
        if (const ojson* t = field(body, "tools")) {
            if (!t->is_array()) bad("'tools' must be a list", "tools");
            chat["tools"] = *t;
        }
        if (const ojson* k = field(body, "chat_template_kwargs")) {
            if (!k->is_object()) bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
            chat["chat_template_kwargs"] = *k;
        }
        g.prompt = std::string();
        g.chat = chat.dump(-1, ' ', false, ojson::error_handler_t::replace);
    }
    int64_t max_tokens = int_field(body, "max_tokens", 1, 1 << 24, kind == endpoint_kind::completion ? 16 : 0);
    max_tokens = int_field(body, "max_completion_tokens", 1, 1 << 24, max_tokens);
    // Chat without a limit: up to the context; the frontend refuses what does not fit, so pick a large default.
    g.max_tokens = static_cast<uint32_t>(max_tokens > 0 ? max_tokens : 1024);
    // Absent sampling fields stay nil: the frontend applies the model's generation_config.json defaults.
    if (field(body, "temperature"))
        g.temperature = static_cast<float>(number_field(body, "temperature", 0.0, 2.0, 1.0));
    if (field(body, "top_p")) {
        const double top_p = number_field(body, "top_p", 0.0, 1.0, 1.0);
        if (top_p <= 0.0) bad("'top_p' must be in (0, 1]", "top_p");
        g.top_p = static_cast<float>(top_p);
    }
    if (field(body, "top_k")) g.top_k = static_cast<int32_t>(int_field(body, "top_k", -1, 1 << 30, 0));
    if (const ojson* s = field(body, "seed")) {
        if (!s->is_number_integer()) bad("'seed' must be an integer", "seed");
        g.seed = static_cast<uint64_t>(s->get<int64_t>());
    }
    if (const ojson* s = field(body, "stop")) {
        if (s->is_string()) {
            g.stop = {s->get<std::string>()};
        } else if (s->is_array()) {
            for (const auto& e : *s) {
                if (!e.is_string() || e.get<std::string>().empty())
                    bad("'stop' entries must be non-empty strings", "stop");
                g.stop.push_back(e.get<std::string>());
            }
            if (g.stop.size() > kMaxStopStrings) bad("too many 'stop' strings", "stop");
        } else {
            bad("'stop' must be a string or a list of strings", "stop");
        }
    }
    g.ignore_eos = bool_field(body, "ignore_eos", false);
    if (int_field(body, "n", 1, 1, 1) != 1) bad("'n' must be 1", "n");
    r.stream = bool_field(body, "stream", false);
    g.stream = r.stream;
    if (const ojson* so = field(body, "stream_options")) {
        if (!so->is_object()) bad("'stream_options' must be an object", "stream_options");
        if (!r.stream) bad("'stream_options' is only allowed with stream = true", "stream_options");
        r.include_usage = bool_field(*so, "include_usage", false);
    }
    return r;
}

ojson finish_reason_json(finish_reason r, bool finished) {
    if (!finished) return nullptr;
    switch (r) {
        case finish_reason::length:
            return "length";
        case finish_reason::stop:
            return "stop";
        case finish_reason::abort:
            return "abort";
        default:
            return "stop";
    }
}

namespace {
ojson usage(uint32_t prompt_tokens, uint32_t completion_tokens) {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
}
}  // namespace

ojson response_object(const openai_request& req, const std::string& id, int64_t created, const std::string& text,
                      finish_reason reason, uint32_t prompt_tokens, uint32_t completion_tokens) {
    ojson choice;
    if (req.kind == endpoint_kind::chat) {
        choice = {{"index", 0},
                  {"message", {{"role", "assistant"}, {"content", text}}},
                  {"logprobs", nullptr},
                  {"finish_reason", finish_reason_json(reason, true)}};
    } else {
        choice = {
            {"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_reason_json(reason, true)}};
    }
    return {{"id", id},
            {"object", req.kind == endpoint_kind::chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", req.model},
            {"choices", ojson::array({choice})},
            {"usage", usage(prompt_tokens, completion_tokens)}};
}

ojson chunk_object(const openai_request& req, const std::string& id, int64_t created, const std::string& text,
                   bool first, bool finished, finish_reason reason) {
    ojson choice;
    if (req.kind == endpoint_kind::chat) {
        ojson delta = ojson::object();
        if (first) delta["role"] = "assistant";
        if (!text.empty() || !finished) delta["content"] = text;
        choice = {{"index", 0},
                  {"delta", delta},
                  {"logprobs", nullptr},
                  {"finish_reason", finish_reason_json(reason, finished)}};
    } else {
        choice = {{"index", 0},
                  {"text", text},
                  {"logprobs", nullptr},
                  {"finish_reason", finish_reason_json(reason, finished)}};
    }
    return {{"id", id},
            {"object", req.kind == endpoint_kind::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", req.model},
            {"choices", ojson::array({choice})}};
}

ojson usage_chunk(const openai_request& req, const std::string& id, int64_t created, uint32_t prompt_tokens,
                  uint32_t completion_tokens) {
    return {{"id", id},
            {"object", req.kind == endpoint_kind::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", req.model},
            {"choices", ojson::array()},
            {"usage", usage(prompt_tokens, completion_tokens)}};
}

std::string sse_event(const ojson& j) {
    return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

}  // namespace zmoe::gateway
