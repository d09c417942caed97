// A model's chat template (Jinja, from chat_template.jinja or tokenizer_config.json) rendered
// as Hugging Face's apply_chat_template(messages, tools=..., add_generation_prompt=...,
// tokenize=False, **kwargs) does.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/template.h"

namespace miniinfer {

class ChatTemplate {
  public:
    // Reads model_dir/chat_template.jinja if present, else tokenizer_config.json's
    // "chat_template" (a string, or a list of {name, template} where "default" is used), and
    // the special tokens the template may refer to (bos_token, eos_token, ...). Error when
    // there is no template or it does not parse.
    static ChatTemplate load(const std::filesystem::path& model_dir);

    // `special_tokens`: object of extra top-level variables such as {"eos_token": "<|im_end|>"}.
    static ChatTemplate from_string(
        const std::string& source,
        const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object());

    // messages: array of {role, content, ...} objects; tools: array or null; kwargs: object of
    // extra variables (enable_thinking, ...), which override same-named defaults. Error on
    // malformed input or when the template fails (raise_exception included).
    std::string render(
        const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
        bool add_generation_prompt,
        const nlohmann::ordered_json& kwargs = nlohmann::ordered_json::object()) const;

    const std::string& source() const { return source_; }

  private:
    std::string source_;
    jinja::Template template_;
    jinja::Dict special_tokens_;
};

}  // namespace miniinfer
