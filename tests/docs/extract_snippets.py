#!/usr/bin/env python3
"""Writes every fenced ```cpp / ```cuda block of the given Markdown files to
OUT_DIR as one translation unit each, and a manifest (one line per snippet:
`<kind> <has_main> <file> <source>:<line>`), so CMake can compile (and run)
them: the docs' code cannot rot. Usage: extract_snippets.py OUT_DIR DOC..."""
import os
import re
import sys


def main() -> int:
    out, docs = sys.argv[1], sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    manifest = []
    for doc in docs:
        stem = re.sub(r"[^A-Za-z0-9]+", "_", os.path.basename(doc).rsplit(".", 1)[0])
        lines = open(doc, encoding="utf-8").read().split("\n")
        i, n = 0, 0
        while i < len(lines):
            m = re.match(r"^```(cpp|cuda)\s*$", lines[i])
            if not m:
                i += 1
                continue
            start, kind = i + 1, m.group(1)
            j = start
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j == len(lines):
                print(f"{doc}:{start}: unterminated code block", file=sys.stderr)
                return 1
            n += 1
            body = "\n".join(lines[start:j]) + "\n"
            name = f"{stem}_{n}.{'cu' if kind == 'cuda' else 'cpp'}"
            text = f"// Generated from {os.path.basename(doc)}:{start + 1}; edit the document, not this file.\n{body}"
            path = os.path.join(out, name)
            if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            has_main = 1 if re.search(r"^int main\(", body, re.M) else 0
            manifest.append(f"{kind} {has_main} {name} {os.path.basename(doc)}:{start + 1}")
            i = j + 1
    with open(os.path.join(out, "manifest.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(manifest) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
