#!/usr/bin/env python3
"""Writes schemas.jsonl: the structured-output test suite (JSON Schemas of real-world shapes).

Written for MiniInfer, not taken from a benchmark set. 33 hand-written base shapes (extraction,
classification, tool arguments, records, configs) are each varied seven ways (optional fields,
nullable types, enums, bounded arrays, $defs and recursion, anyOf, formats and patterns,
integer ranges). Every line holds a schema, two or three valid instances (compact JSON, keys in
schema order, checked with the `jsonschema` package) and, where the shape allows, invalid ones.
Deterministic: rerun with `python3 make_schemas.py` after changing it.
"""
import copy
import json
import random

import jsonschema

S = {"type": "string"}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}


def obj(props, required=None, **kw):
    o = {"type": "object", "properties": props,
         "required": list(props) if required is None else required,
         "additionalProperties": False}
    o.update(kw)
    return o


def arr(items, **kw):
    a = {"type": "array", "items": items}
    a.update(kw)
    return a


def enum(*values):
    return {"type": "string", "enum": list(values)}


ADDRESS = obj({"street": S, "city": S, "postal_code": S, "country": enum("US", "DE", "FR", "JP", "BR")})
BASES = {
    "person": obj({"name": S, "age": I, "email": S, "is_active": B}),
    "address": ADDRESS,
    "product": obj({"sku": S, "title": S, "price": N, "in_stock": B, "tags": arr(S)}),
    "order": obj({"order_id": S, "customer": obj({"name": S, "email": S}),
                  "items": arr(obj({"sku": S, "quantity": I, "unit_price": N})), "total": N}),
    "invoice": obj({"number": S, "issued": S, "lines": arr(obj({"description": S, "amount": N})),
                    "paid": B}),
    "event": obj({"title": S, "start": S, "end": S, "location": S, "attendees": arr(S)}),
    "weather": obj({"city": S, "temperature_c": N, "condition": enum("sunny", "cloudy", "rain", "snow"),
                    "humidity": I}),
    "sentiment": obj({"label": enum("positive", "negative", "neutral"), "confidence": N}),
    "entities": obj({"entities": arr(obj({"text": S, "type": enum("PERSON", "ORG", "LOC", "DATE"),
                                          "start": I, "end": I}))}),
    "recipe": obj({"name": S, "servings": I, "ingredients": arr(obj({"item": S, "amount": S})),
                   "steps": arr(S)}),
    "movie_review": obj({"movie": S, "rating": I, "summary": S, "spoilers": B}),
    "job_posting": obj({"title": S, "company": S, "remote": B, "salary_min": I, "salary_max": I,
                        "skills": arr(S)}),
    "resume": obj({"name": S, "experience": arr(obj({"company": S, "role": S, "years": I})),
                   "education": arr(obj({"school": S, "degree": S}))}),
    "api_error": obj({"code": I, "message": S, "details": arr(S)}),
    "log_entry": obj({"timestamp": S, "level": enum("DEBUG", "INFO", "WARN", "ERROR"), "service": S,
                      "message": S}),
    "transaction": obj({"id": S, "amount": N, "currency": enum("USD", "EUR", "GBP", "JPY"),
                        "from_account": S, "to_account": S}),
    "flight": obj({"flight_number": S, "origin": S, "destination": S, "departure": S, "seats": I}),
    "hotel_booking": obj({"hotel": S, "guest": S, "nights": I, "room_type": enum("single", "double", "suite"),
                          "breakfast": B}),
    "patient_note": obj({"patient_id": S, "symptoms": arr(S), "diagnosis": S, "follow_up": B}),
    "github_issue": obj({"title": S, "body": S, "labels": arr(S), "priority": enum("low", "medium", "high")}),
    "tweet_analysis": obj({"text": S, "hashtags": arr(S), "mentions": arr(S), "toxic": B}),
    "math_answer": obj({"steps": arr(obj({"explanation": S, "output": S})), "final_answer": S}),
    "get_weather_args": obj({"location": S, "unit": enum("celsius", "fahrenheit")}),
    "search_args": obj({"query": S, "max_results": I, "site": S}),
    "send_email_args": obj({"to": arr(S), "subject": S, "body": S, "cc": arr(S)}),
    "app_config": obj({"debug": B, "port": I, "host": S, "log_level": enum("debug", "info", "warning"),
                       "features": arr(S)}),
    "todo_list": obj({"owner": S, "todos": arr(obj({"task": S, "done": B, "priority": I}))}),
    "survey": obj({"respondent": S, "answers": arr(obj({"question_id": I, "answer": S})), "score": I}),
    "inventory": obj({"warehouse": S, "stock": arr(obj({"sku": S, "count": I, "location": S}))}),
    "geo_point": obj({"lat": N, "lon": N, "label": S}),
    "classification": obj({"category": enum("billing", "technical", "account", "other"),
                           "urgent": B, "reason": S}),
    "meeting_summary": obj({"topic": S, "decisions": arr(S), "action_items": arr(obj({"owner": S, "task": S}))}),
    "citation": obj({"title": S, "authors": arr(S), "year": I, "doi": S}),
}

FORMATS = {"date": ["2024-03-15", "1999-12-31"], "date-time": ["2024-03-15T10:30:00Z", "2023-01-02T08:00:00+02:00"],
           "email": ["ana@example.com", "bob.smith@mail.example.org"], "uuid": ["123e4567-e89b-12d3-a456-426614174000"],
           "ipv4": ["192.168.1.20", "10.0.0.1"], "time": ["10:30:00Z"], "uri": ["https://example.com/a?b=1"],
           "hostname": ["api.example.com"]}
PATTERNS = {r"^[A-Z]{3}-\d{4}$": ["ABC-1234", "XYZ-0001"], r"^\+?[0-9]{7,15}$": ["+4915112345678", "5551234"],
            r"^[a-z0-9_]{3,16}$": ["user_01", "ana"], r"^#[0-9a-fA-F]{6}$": ["#ff00aa", "#00FF00"],
            r"^[A-Z]{2}[0-9]{2}$": ["DE89", "US12"]}
WORDS = ["alpha", "Berlin", "green tea", "Ünïcode ✓", "line\nbreak", "quote \" inside", "x", "data-42", "日本語"]


def gen(schema, rng, defs, depth=0):
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        return gen(defs[name], rng, defs, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "anyOf" in schema or "oneOf" in schema:
        opts = schema.get("anyOf") or schema["oneOf"]
        return gen(opts[0] if depth > 3 else rng.choice(opts), rng, defs, depth + 1)
    t = schema.get("type")
    if isinstance(t, list):
        t = t[0] if depth > 3 else rng.choice(t)
    if t == "null":
        return None
    if t == "boolean":
        return rng.random() < 0.5
    if t == "integer":
        lo, hi = schema.get("minimum", -50), schema.get("maximum", 5000)
        return rng.randint(lo, hi)
    if t == "number":
        lo, hi = schema.get("minimum", -100), schema.get("maximum", 1000)
        return round(rng.uniform(lo, hi), 2) if rng.random() < 0.7 else rng.randint(int(lo), int(hi))
    if t == "string":
        if "format" in schema:
            return rng.choice(FORMATS[schema["format"]])
        if "pattern" in schema:
            return rng.choice(PATTERNS[schema["pattern"]])
        s = rng.choice(WORDS)
        lo, hi = schema.get("minLength", 0), schema.get("maxLength", 40)
        s = (s * 8)[:max(lo, min(hi, len(s)))]
        return s
    if t == "array":
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems", lo + 3)
        n = rng.randint(lo, hi) if depth < 4 else lo
        return [gen(schema["items"], rng, defs, depth + 1) for _ in range(n)]
    if t == "object":
        req = set(schema.get("required", []))
        out = {}
        for k, v in schema["properties"].items():
            if k in req or (depth < 4 and rng.random() < 0.6):
                out[k] = gen(v, rng, defs, depth + 1)
        return out
    raise ValueError(schema)


def fields(o):
    return list(o["properties"].items())


def variants(name, base, rng):
    yield name, base
    v = copy.deepcopy(base)  # optional fields
    keys = list(v["properties"])
    v["required"] = keys[: max(1, len(keys) // 2)]
    yield name + "_optional", v
    v = copy.deepcopy(base)  # nullable types
    for k, p in fields(v)[1:]:
        if p.get("type") in ("string", "integer", "number", "boolean") and "enum" not in p:
            p["type"] = [p["type"], "null"]
    yield name + "_nullable", v
    v = copy.deepcopy(base)  # bounded arrays and strings
    for k, p in fields(v):
        if p.get("type") == "array":
            p["minItems"], p["maxItems"] = 1, 3
        if p.get("type") == "string" and "enum" not in p:
            p["maxLength"] = 24
    yield name + "_bounded", v
    v = {"$defs": {"item": copy.deepcopy(base)},  # $defs, a wrapper and recursion
         "type": "object",
         "properties": {"item": {"$ref": "#/$defs/item"}, "related": arr({"$ref": "#/$defs/node"}, maxItems=2)},
         "required": ["item"], "additionalProperties": False}
    v["$defs"]["node"] = obj({"id": I, "children": arr({"$ref": "#/$defs/node"}, maxItems=2)})
    yield name + "_defs", v
    v = copy.deepcopy(base)  # anyOf
    k0, p0 = fields(v)[0]
    v["properties"][k0] = {"anyOf": [p0, obj({"value": p0, "source": S})]}
    v["properties"]["status"] = {"oneOf": [{"const": "ok"}, obj({"error": S, "retry": B})]}
    v["required"].append("status")
    yield name + "_anyof", v
    v = copy.deepcopy(base)  # formats, patterns, ranges
    fmt = rng.choice(sorted(FORMATS))
    pat = rng.choice(sorted(PATTERNS))
    v["properties"]["created"] = {"type": "string", "format": fmt}
    v["properties"]["ref_code"] = {"type": "string", "pattern": pat}
    v["properties"]["count"] = {"type": "integer", "minimum": rng.choice([0, 1, -10]), "maximum": rng.choice([9, 100, 2024])}
    v["properties"]["ratio"] = {"type": "number", "minimum": 0, "maximum": 1}
    v["required"] += ["created", "ref_code", "count"]
    yield name + "_formats", v


def dump(x):
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def invalid_of(schema, valid, rng):
    out = []
    if isinstance(valid, dict) and schema.get("required"):
        bad = dict(valid)
        del bad[schema["required"][0]]
        out.append(dump(bad))
    if isinstance(valid, dict):
        out.append(dump({**valid, "zz_unexpected": 1}))
    out.append(dump(valid) + ",")
    out.append(dump(valid).replace(":", ": ", 1))  # whitespace is not allowed (compact policy)
    return out


def main():
    rng = random.Random(49)
    lines = []
    for name, base in BASES.items():
        for vname, schema in variants(name, base, rng):
            defs = schema.get("$defs", {})
            valid = []
            for _ in range(3):
                x = gen(schema, rng, defs)
                jsonschema.validate(x, schema)
                if dump(x) not in valid:
                    valid.append(dump(x))
            invalid = [t for t in invalid_of(schema, json.loads(valid[0]), rng)]
            for t in invalid:
                try:
                    jsonschema.validate(json.loads(t), schema)
                    if t.endswith(",") or ": " in t:
                        continue
                    raise AssertionError(f"{vname}: invalid instance validates: {t}")
                except (jsonschema.ValidationError, json.JSONDecodeError):
                    pass
            lines.append(dump({"name": vname, "schema": schema, "valid": valid, "invalid": invalid}))
    with open("schemas.jsonl", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} schemas")


if __name__ == "__main__":
    main()
