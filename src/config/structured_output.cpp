#include "config/structured_output.h"

#include <fmt/format.h>

#include "core/check.h"

namespace miniinfer {

StructuredOutput StructuredOutput::from_json(const Json& json) {
    if (!json.is_object()) fail("'structured_outputs' must be an object, got {}", json.type_name());
    StructuredOutput out;
    int num_kinds = 0;
    for (const auto& item : json.items()) {
        const std::string& key = item.key();
        const Json& v = item.value();
        if (v.is_null()) continue;
        if (key == "json") {
            out.kind = Kind::kJsonSchema;
            out.text = v.is_string() ? v.get<std::string>() : v.dump();
            if (!v.is_string() && !v.is_object() && !v.is_boolean())
                fail("'structured_outputs.json' must be a JSON schema (an object or its text)");
        } else if (key == "json_object") {
            if (!v.is_boolean()) fail("'structured_outputs.json_object' must be a boolean");
            if (!v.get<bool>()) continue;
            out.kind = Kind::kJsonObject;
        } else if (key == "regex" || key == "grammar") {
            if (!v.is_string() || v.get<std::string>().empty())
                fail("'structured_outputs.{}' must be a non-empty string", key);
            out.kind = key == "regex" ? Kind::kRegex : Kind::kGrammar;
            out.text = v.get<std::string>();
        } else if (key == "choice") {
            if (!v.is_array() || v.empty())
                fail("'structured_outputs.choice' must be a non-empty list of strings");
            for (const Json& c : v) {
                if (!c.is_string()) fail("'structured_outputs.choice' entries must be strings");
                out.choices.push_back(c.get<std::string>());
            }
            out.kind = Kind::kChoice;
        } else if (key == "json_prefix" || key == "json_suffix") {
            if (!v.is_string()) fail("'structured_outputs.{}' must be a string", key);
            (key == "json_prefix" ? out.prefix : out.suffix) = v.get<std::string>();
            continue;
        } else if (key == "reasoning_end") {
            if (!v.is_string()) fail("'structured_outputs.reasoning_end' must be a string");
            out.reasoning_end = v.get<std::string>();
            continue;
        } else if (key == "disable_fallback" || key == "disable_any_whitespace" ||
                   key == "disable_additional_properties" || key == "whitespace_pattern" ||
                   key == "structural_tag") {
            if (!v.is_boolean() || v.get<bool>())
                fail("'structured_outputs.{}' is not supported", key);
            continue;
        } else {
            fail(
                "'structured_outputs.{}' is not a known key (json, json_object, regex, grammar, "
                "choice)",
                key);
        }
        ++num_kinds;
    }
    if (num_kinds != 1)
        fail(
            "'structured_outputs' must set exactly one of json, json_object, regex, grammar, "
            "choice");
    return out;
}

Json StructuredOutput::to_json() const {
    Json j;
    switch (kind) {
        case Kind::kJsonSchema:
            j = {{"json", text}};
            if (!prefix.empty()) j["json_prefix"] = prefix;
            if (!suffix.empty()) j["json_suffix"] = suffix;
            break;
        case Kind::kJsonObject:
            j = {{"json_object", true}};
            break;
        case Kind::kRegex:
            j = {{"regex", text}};
            break;
        case Kind::kGrammar:
            j = {{"grammar", text}};
            break;
        case Kind::kChoice:
            j = {{"choice", choices}};
            break;
    }
    if (!reasoning_end.empty()) j["reasoning_end"] = reasoning_end;
    return j;
}

std::string StructuredOutput::key() const {
    std::string k = fmt::format("{}:{}:", int(kind), text.size());
    k += text;
    for (const std::string& c : choices) k += fmt::format(":{}:{}", c.size(), c);
    k += fmt::format("|{}:{}{}:{}", prefix.size(), prefix, suffix.size(), suffix);
    k += fmt::format("|{}:{}", reasoning_end.size(), reasoning_end);
    return k;
}

}  // namespace miniinfer
