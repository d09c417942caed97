#include "tokenizer/chat_template.h"

#include <fstream>

#include "core/check.h"
#include "core/json.h"

namespace miniinfer {

using OrderedJson = nlohmann::ordered_json;

ChatTemplate ChatTemplate::load(const std::filesystem::path& model_dir) {
    const auto config_path = model_dir / "tokenizer_config.json";
    OrderedJson config = OrderedJson::object();
    if (std::filesystem::exists(config_path)) {
        std::ifstream in(config_path);
        try {
            config = OrderedJson::parse(in);
        } catch (const nlohmann::json::exception& e) {
            fail("{}: {}", config_path.string(), e.what());
        }
    }
    OrderedJson special = OrderedJson::object();
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                            "cls_token", "mask_token"}) {
        auto it = config.find(key);
        if (it == config.end() || it->is_null()) continue;
        if (it->is_string())
            special[key] = *it;
        else if (it->is_object() && it->contains("content"))
            special[key] = (*it)["content"];
    }
    if (config.contains("additional_special_tokens"))
        special["additional_special_tokens"] = config["additional_special_tokens"];

    std::string source;
    const auto jinja_path = model_dir / "chat_template.jinja";
    if (std::filesystem::exists(jinja_path)) {
        source = read_text_file(jinja_path);
    } else {
        const OrderedJson t = config.value("chat_template", OrderedJson());
        if (t.is_string()) {
            source = t.get<std::string>();
        } else if (t.is_array()) {
            for (const auto& named : t)
                if (named.value("name", "") == "default") source = named.value("template", "");
            if (source.empty())
                fail("{}: chat_template has no template named 'default'", config_path.string());
        } else {
            fail("{}: no chat template (no chat_template.jinja and no 'chat_template' field)",
                 model_dir.string());
        }
    }
    try {
        return from_string(source, special);
    } catch (const Error& e) {
        fail("{}: {}", model_dir.string(), e.what());
    }
}

ChatTemplate ChatTemplate::from_string(const std::string& source,
                                       const OrderedJson& special_tokens) {
    ChatTemplate t;
    t.source_ = source;
    t.template_ = jinja::Template::parse(source);
    if (!special_tokens.is_object()) fail("chat template: special tokens must be an object");
    t.special_tokens_ = jinja::Value::from_json(special_tokens).as_dict();
    return t;
}

std::string ChatTemplate::render(const OrderedJson& messages, const OrderedJson& tools,
                                 bool add_generation_prompt, const OrderedJson& kwargs) const {
    if (!messages.is_array()) fail("chat template: 'messages' must be an array");
    for (const auto& m : messages)
        if (!m.is_object() || !m.contains("role"))
            fail("chat template: each message must be an object with a 'role'");
    if (!tools.is_null() && !tools.is_array())
        fail("chat template: 'tools' must be an array or null");
    if (!kwargs.is_null() && !kwargs.is_object()) fail("chat template: 'kwargs' must be an object");
    jinja::Dict context = special_tokens_;
    context.set("messages", jinja::Value::from_json(messages));
    context.set("tools", jinja::Value::from_json(tools));
    context.set("documents", nullptr);
    context.set("add_generation_prompt", add_generation_prompt);
    if (kwargs.is_object())
        for (const auto& [k, v] : kwargs.items()) context.set(k, jinja::Value::from_json(v));
    return template_.render(context);
}

}  // namespace miniinfer
