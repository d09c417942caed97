#!/usr/bin/env python3
"""Finds the code points whose Unicode normalization differs between utf8proc and Hugging Face.

`tokenizers` normalizes with tables from an older Unicode version than utf8proc's, so
combining marks added since then are starters to it (no reordering, no composition). This
script asks utf8proc (through a tiny C program, UTF8PROC_DUMP below) for every code point's
combining class and canonical decomposition, probes `tokenizers`' NFD/NFC for the same
characters, and prints the ranges MiniInfer must leave untouched (src/tokenizer/normalizer.cpp).

usage: derive_nfc_compat.py   (needs gcc, libutf8proc-dev and `pip install tokenizers`)
"""
import os
import subprocess
import tempfile

from tokenizers import normalizers

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


def utf8proc_rows():
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "dump.c"), os.path.join(d, "dump")
        open(src, "w").write(UTF8PROC_DUMP)
        subprocess.run(["gcc", src, "-o", exe, "-lutf8proc"], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
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
    ranges = []
    for cp in sorted(inert):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    print(",\n".join(f"{{0x{a:04X}, 0x{b:04X}}}" for a, b in ranges))


if __name__ == "__main__":
    main()
