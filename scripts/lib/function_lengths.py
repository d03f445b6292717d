#!/usr/bin/python3
"""Functions longer than a limit: C++ from universal-ctags' table (read on stdin, lines
"END START NAME FILE"), Python from its syntax tree, JavaScript by matching braces from each
function's or method's opening line. Prints "LINES NAME FILE:START" for each one over the
limit, longest first, and exits 1 if there is any.
Usage: ctags ... | function_lengths.py LIMIT FILE.py|FILE.js..."""
import ast
import re
import sys

JS_START = re.compile(r"^\s*(?:export\s+)?(?:async\s+)?(?:function\b\s*\*?\s*([\w$]*)\s*\(|"
                      r"(?:static\s+)?([\w$]+)\s*\([^;]*\)\s*\{\s*$|"
                      r"(?:const|let|var)\s+([\w$]+)\s*=.*=>\s*\{\s*$)")
JS_KEYWORDS = {"if", "for", "while", "switch", "catch", "with", "return"}


def cpp(lines):
    for line in lines:
        parts = line.rstrip("\n").split(None, 3)
        if len(parts) == 4 and parts[0].isdigit() and parts[1].isdigit():
            yield int(parts[0]) - int(parts[1]) + 1, parts[2], "%s:%s" % (parts[3], parts[1])


def python(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield node.end_lineno - start + 1, node.name, "%s:%d" % (path, start)


def javascript(path):
    text = open(path, encoding="utf-8").read()
    # Strings, template literals and comments hold no braces that count.
    text = re.sub(r"//[^\n]*|/\*.*?\*/|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"|"
                  r"`(?:\\.|[^`\\])*`", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text,
                  flags=re.S)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = JS_START.match(line)
        name = m and next((g for g in m.groups() if g is not None), None)
        if m is None or name in JS_KEYWORDS:
            continue
        depth, seen = 0, False
        for j in range(i, len(lines)):
            depth += lines[j].count("{") - lines[j].count("}")
            seen = seen or "{" in lines[j]
            if seen and depth <= 0:
                yield j - i + 1, name or "(anonymous)", "%s:%d" % (path, i + 1)
                break


def main():
    limit = int(sys.argv[1])
    found = list(cpp(sys.stdin)) if not sys.stdin.isatty() else []
    for path in sys.argv[2:]:
        found += list(python(path) if path.endswith(".py") else javascript(path))
    over = sorted((f for f in found if f[0] > limit), key=lambda f: -f[0])
    for lines, name, where in over:
        print("%d %s %s" % (lines, name, where))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
