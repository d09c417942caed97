#!/usr/bin/env python3
"""Finds where Hugging Face's Unicode data differs from the libraries MiniInfer uses.

1. Normalization: `tokenizers` normalizes with tables older than utf8proc's, so combining
   marks added since then are starters to it (no reordering, no composition). utf8proc's
   combining classes and decompositions (from a tiny C program, UTF8PROC_DUMP) are compared
   with `tokenizers`' NFD/NFC on every code point.
2. Regex classes: `tokenizers` runs Oniguruma, whose Unicode tables are newer than PCRE2
   10.42's, and whose \s differs from PCRE2's. \p{L}, \p{N}, \p{M} (Qwen3.5's pattern) and
   \s are compared on every code point (PCRE2 through PCRE2_DUMP, Hugging Face through a
   Split pre-tokenizer).

Prints the C++ tables of src/tokenizer/hf_unicode.cpp.

usage: derive_unicode_compat.py   (needs gcc, libutf8proc-dev, libpcre2-dev and
                                   `pip install tokenizers`)
"""
import os
import subprocess
import tempfile

from tokenizers import Regex, normalizers, pre_tokenizers

UTF8PROC_DUMP = r"""
#include <utf8proc.h>
#include <stdio.h>
int main(void) {
    for (int c = 0; c <= 0x10FFFF; ++c) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        utf8proc_int32_t buf[32];
        utf8proc_ssize_t n = utf8proc_decompose_char(c, buf, 32, UTF8PROC_DECOMPOSE | UTF8PROC_STABLE, NULL);
        int ccc = utf8proc_get_property(c)->combining_class;
        if (ccc == 0 && n == 1 && buf[0] == c) continue;
        printf("%x %d", c, ccc);
        for (int i = 0; i < n; ++i) printf(" %x", buf[i]);
        printf("\n");
    }
    return 0;
}
"""

PCRE2_DUMP = r"""
#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>
#include <stdio.h>
int main(void) {
    const char* patterns[] = {"\\p{L}", "\\p{N}", "\\s", "\\p{M}"};
    for (int k = 0; k < 4; ++k) {
        PCRE2_UCHAR32 pattern[8];
        int n = 0, err;
        PCRE2_SIZE offset;
        for (const char* p = patterns[k]; *p; ++p) pattern[n++] = (PCRE2_UCHAR32)*p;
        pcre2_code* re = pcre2_compile(pattern, n, PCRE2_UTF | PCRE2_UCP, &err, &offset, NULL);
        pcre2_match_data* md = pcre2_match_data_create(4, NULL);
        for (unsigned c = 0; c <= 0x10FFFF; ++c) {
            if (c >= 0xD800 && c <= 0xDFFF) continue;
            PCRE2_UCHAR32 s[1] = {c};
            if (pcre2_match(re, s, 1, 0, 0, md, NULL) >= 0) printf("%d %x\n", k, c);
        }
    }
    return 0;
}
"""


def run_c(source, lib):
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "dump.c"), os.path.join(d, "dump")
        open(src, "w").write(source)
        subprocess.run(["gcc", src, "-o", exe, lib], check=True)
        return subprocess.run([exe], check=True, capture_output=True, text=True).stdout


def ranges(code_points):
    out = []
    for cp in sorted(code_points):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def print_table(name, code_points):
    items = [f"{{0x{a:04X}, 0x{b:04X}}}" for a, b in ranges(code_points)]
    print(f"constexpr CodePointRange {name}[] = {{")
    line = "   "
    for item in items:
        if len(line) + len(item) + 2 > 100:
            print(line)
            line = "   "
        line += " " + item + ","
    print(line + "\n};")


def regex_class_differences():
    pcre = [set(), set(), set(), set()]
    for line in run_c(PCRE2_DUMP, "-lpcre2-32").splitlines():
        k, cp = line.split()
        pcre[int(k)].add(int(cp, 16))
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    result = []
    for k, pattern in enumerate([r"\p{L}", r"\p{N}", r"\s", r"\p{M}"]):
        split = pre_tokenizers.Split(Regex(pattern), "removed")  # a matched character vanishes
        hf = {c for c in cps if not split.pre_tokenize_str(chr(c))}
        result.append((hf - pcre[k], pcre[k] - hf, hf))
    return result


def utf8proc_rows():
    out = run_c(UTF8PROC_DUMP, "-lutf8proc")
    for line in out.splitlines():
        fields = [int(x, 16) if i != 1 else int(x) for i, x in enumerate(line.split())]
        yield fields[0], fields[1], fields[2:]


def main():
    nfc, nfd = normalizers.NFC(), normalizers.NFD()
    inert = set()
    rows = list(utf8proc_rows())
    for cp, ccc, decomposition in rows:
        ch = chr(cp)
        # A mark Hugging Face knows is reordered around U+0334 (class 1) / U+0301 (class 230).
        if ccc > 1 and nfd.normalize_str(ch + "\u0334") == ch + "\u0334":
            inert.add(cp)
        if ccc == 1 and nfd.normalize_str("\u0301" + ch) == "\u0301" + ch:
            inert.add(cp)
        if decomposition != [cp]:
            got = nfd.normalize_str(ch)
            if got == ch:
                inert.add(cp)
            elif got != "".join(map(chr, decomposition)):
                raise SystemExit(f"U+{cp:04X}: decompositions differ in a way this script cannot express")
    # A composite Hugging Face does not know must not be formed: its last component goes inert.
    for cp, _, decomposition in rows:
        if cp in inert and len(decomposition) > 1:
            if nfc.normalize_str("".join(map(chr, decomposition))) != chr(cp):
                inert.add(decomposition[-1])
    print_table("kUnknownToHfNormalizer", inert)
    classes = regex_class_differences()
    (letters, no_letters, _), (numbers, no_numbers, _), (hf_spaces, pcre2_spaces, _), (marks, no_marks, _) = classes
    if no_letters or no_numbers or no_marks or hf_spaces:
        raise SystemExit("PCRE2 lacks spaces or has letters/numbers/marks Hugging Face lacks: extend adapt_regex")
    print_table("kHfExtraLetters", letters)
    print_table("kHfExtraNumbers", numbers)
    print_table("kHfExtraMarks", marks)
    print_table("kPcre2OnlySpaces", pcre2_spaces)


if __name__ == "__main__":
    main()
