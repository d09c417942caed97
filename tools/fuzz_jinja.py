"""Differential fuzz of the Jinja interpreter against Jinja2 as transformers configures it.

Renders random expressions over a small context with both and prints the disagreements.
Not a CI test: Jinja2 has Python quirks (lazy iterators, in-place += on lists) that chat
templates never rely on, so a few dozen exotic mismatches per 3,000 are expected; look for
plausible ones.

usage: fuzz_jinja.py JINJA_DRIVER [SEED]   (needs transformers and jinja2)
"""
import copy
import json
import random
import subprocess
import sys

from transformers.utils.chat_template_utils import _compile_jinja_template
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
LITS = ["0", "1", "-3", "2.5", "-0.0", "1e-5", "1e22", "3.7", "'abc'", "'A b C'", "''", "' x '", "'4x'", "'3.7'", "' 42 '",
        "none", "true", "false", "[1, 2, 3]", "[]", "['b', 'a']", "{'k': 1, 'j': [2]}", "{}", "(1, 'x')", "xs", "d", "s", "n", "f", "undefined_thing",
        "'é😀'", "'a,b,,c'", "'\\n\\tx\\n'", "[3, 1, 2]", "[1.5, 2]", "[{'a': 2}, {'a': 1}]"]
BIN = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]
FILTERS = ["length", "upper", "lower", "title", "capitalize", "trim", "first", "last", "list", "reverse", "sort", "unique",
           "string", "int", "float", "abs", "round", "sum", "join", "join(',')", "tojson", "items", "default('D')",
           "default('D', true)", "replace('a', 'Z')", "min", "max", "dictsort", "map('upper')", "select", "reject",
           "select('odd')", "indent(2)", "round(1, 'floor')", "int(7)", "float(1.5)", "selectattr('a')", "map(attribute='a')"]
TESTS = ["defined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence", "odd", "even",
         "divisibleby 2", "equalto 1", "sameas false", "true", "false", "boolean", "lower", "upper", "in [1, 2]"]
METHODS = ["upper()", "lower()", "strip()", "strip('x')", "split()", "split(',')", "split(',', 1)", "startswith('a')",
           "endswith('c')", "replace('b', 'Q')", "find('b')", "count('a')", "title()", "get('k')", "get('zz', 5)",
           "items()", "keys()", "values()", "isdigit()", "splitlines()", "lstrip()", "rstrip()", "index(2)"]
SEQS = ['xs', 's', '[1,2,3,4]', "'abcdef'"]
def expr(depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3: return rng.choice(LITS)
    if r < 0.5: return f"({expr(depth+1)} {rng.choice(BIN)} {expr(depth+1)})"
    if r < 0.65: return f"({expr(depth+1)}|{rng.choice(FILTERS)})"
    if r < 0.75: return f"({expr(depth+1)} is {'not ' if rng.random()<0.3 else ''}{rng.choice(TESTS)})"
    if r < 0.85: return f"{rng.choice(LITS)}.{rng.choice(METHODS)}"
    if r < 0.92:
        seq = rng.choice(SEQS)
        return seq + "[" + rng.choice(['', '1', '-1', '-2']) + ":" + rng.choice(['', '2', '-1']) + rng.choice(['', ':-1', ':2', ':-2']) + "]"
    return f"({expr(depth+1)} if {expr(depth+1)} else {expr(depth+1)})"
ctx = {"xs": [3, 1, 2], "d": {"k": 1, "a": "b"}, "s": "hello, World", "n": 7, "f": 0.1}
rows, want = [], []
for _ in range(3000):
    src = "{{ " + expr() + " }}"

    try:
        w = {"text": _compile_jinja_template(src).render(**copy.deepcopy(ctx))}
    except Exception as e:
        w = {"error": f"{type(e).__name__}: {e}"}
    rows.append({"template": src, "context": ctx}); want.append(w)
out = subprocess.run([sys.argv[1]], input="".join(json.dumps(r) + "\n" for r in rows), capture_output=True, text=True).stdout.split("\n")
bad = 0
for r, w, line in zip(rows, want, out):
    g = json.loads(line)
    if 'generator object' in w.get('text', '') or '<function' in w.get('text', '') or 'dict_' in w.get('text', ''):
        continue
    if ('error' in w) != ('error' in g) or w.get('text') != g.get('text'):
        bad += 1
        if bad <= 25: print(r["template"], "\n   want", w, "\n   got ", g)
print(bad, "mismatches of", len(rows))
