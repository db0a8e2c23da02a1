"""Generated Python-like inputs for checking that the splitter's Python scan finds the same
structure however it is computed (tests/test_split_python_scan.py, benchmarks/split_identity.py).

Data contract: every function returns a list of (name, bytes), deterministic for its arguments.
- `edge_cases()`: one input per corner of tokenize's rules the scan must reproduce: huge strings
  (over many lines and on one line, at and over the 16 KiB line bound), f-strings, brackets nested
  deep (over lines and on one line), line continuations (top level, in brackets, before a blank
  line, a comment or the end), tabs, form feeds, CRLF and lone CR, a BOM, no final newline,
  invalid tokens, unterminated and four-quote strings, stray closing brackets, bad dedents, and
  files that are not Python at all.
- `soups(seed, count)`: random sequences of Python fragments (mostly not valid Python).
- `modules(seed, count)`: random modules of well-formed logical lines that use every shape the
  fast reading accepts (nested brackets over lines with comments, blank lines and
  continuations inside, strings of every kind with escapes, quotes and newlines, decorators,
  closers, tabs and form feeds, CRLF, a BOM, no final newline), now and then one bad dedent.
- `mutants(bases, seed, count)`: each a (name, bytes) base with a few random fragment
  insertions, deletions, line-ending or indentation changes.
"""
import random

FRAGMENTS = (
    "def f(a,\n", "    return (a +\n", "        b)\n", "'''doc\n", "x = '''\n", '"""\n', "'''",
    '"""', "\\\n", "\\\r\n", "\\", "# c\n", "#", "\t", "\r\n", "\r", "\n", "\n\n", "@d\n",
    "@d(\n", "@", ")\n", "]\n", "}\n", "{\n", "(", ")", "[", "]", "{", "}", "else:\n",
    "  elif x:\n", "except E:\n", "finally:\n", "'abc\\\n", "f'{x!r}'", 'f"{x:{y}}"',
    "f'{a[\"k\"]}'", "rb'\\\\'", "'\\''", '"\\""', "''''", "'", '"', "$", "?", "!", "`",
    "\x0c", "\x0b", "\x00", "\u00e9", "\u3000", "\u00a0", " ", "    ", "        ", "x", "1",
    "1.5e3j", "...", ":", ";", ",", "=", "class C:\n", "    pass\n", "if x:\n", "lambda: 0",
    "\ufeff", "pass", "  # note 'q' \\\n", "#!", "else", "elif", "except", "finally", "_",
    "\"\"\"a\nb\"\"\"", "'''\n\n'''", "(\n\n)", "x = [\n    1,\n    2,\n]\n", "\t\tx = 1\n",
)


def edge_cases():
    cases = {
        "empty.py": "",
        "bom_only.py": "\ufeff",
        "bom_def.py": "\ufeffdef f():\n    return 1\n\n\ndef g():\n    pass\n",
        "newlines.py": "\n" * 500,
        "crlf.py": "import os\r\n\r\n\r\nclass C:\r\n    def f(self):\r\n        return (1,\r\n"
                   "                2)\r\n\r\n    x = '''a\r\nb'''\r\n",
        "lone_cr.py": "x = 1\rdef f():\n    pass\r\n    y = (1\r, 2)\n# c\rd(\nz = 3\n",
        "cr_comment.py": "x = 1  # a\r(b\ny = 2\nz = (3  # it's \r (\n)\n",
        "tabs.py": "class C:\n\tdef f(self):\n\t\treturn 1\n\n\tdef g(self):\n\t\tif x:\n\t\t\tpass\n"
                   "\t\telse:\n\t\t\treturn 2\n",
        "mixed_indent.py": "def f():\n    if x:\n\treturn 1\n    return 2\n",
        "bad_dedent.py": "def f():\n        x = 1\n    y = 2\n",
        "form_feed.py": "import os\n\x0c\ndef f():\n    pass\n\x0c\nclass C:\n\x0c    x = 1\n",
        "vtab.py": "x = 1\n\x0bdef f():\n    pass\n  \x0b\n",
        "no_newline_stmt.py": "def f():\n    return 1",
        "no_newline_comment.py": "def f():\n    return 1\n# end",
        "no_newline_cont_comment.py": "x = 1 + \\\n# c",
        "no_newline_cont.py": "x = 1 + \\\n  2",
        "no_newline_backslash.py": "x = 1 \\",
        "no_newline_blank.py": "x = 1\n   ",
        "no_newline_bracket.py": "x = f(\n  1)",
        "no_newline_string.py": "x = '''\nabc'''",
        "no_newline_string_hash.py": "x = '''\n# '''",
        "no_newline_cr.py": "x = 1\r",
        "no_newline_open.py": "x = (\n  1",
        "cont_eof.py": "x = 1 + \\\n",
        "cont_blank.py": "x = 1 + \\\n\ny = 2\n",
        "cont_comment.py": "x = 1 + \\\n# c\ny = 2\n",
        "cont_first.py": "\\\nx = 1\ny = 2\n",
        "cont_in_brackets.py": "x = (1, \\\n\n  2)\ndef f():\n    pass\n",
        "stray_backslash.py": "x = 1 \\ + 2\ndef f():\n    pass\n",
        "stray_close.py": "x = 1)\ndef f():\n    pass\n]\ny = 2\n",
        "close_open.py": "x = f(1,\n  2) + g(3,\n  4)\ndef f():\n    pass\nx) + (y\nz = 1\n",
        "unterminated.py": "x = 'abc\ndef f():\n    pass\ny = \"a\n",
        "unterminated_triple.py": "def f():\n    s = '''never closed\n" + "text\n" * 50,
        "unclosed_triple_quote_pair.py": "x = '''a'\ny = 1\n",
        "four_quotes.py": "x = '''a''''\ny = 1\nz = ''''''\n",
        "escapes.py": "a = '\\\\'\nb = '\\''\nc = '''\\''''\nd = \"\"\"x\\\n\"\"\"\ne = '''a\\\\\n'''\n",
        "continued_string.py": "x = 'abc\\\ndef'\ny = \"q\\\r\nr\"\nz = 1\n",
        "fstrings.py": "a = f'{x!r:>{w}}'\nb = f\"{d['k']}\"\nc = f'''{\n  x\n}'''\n"
                       "d = rf'\\{x}'\ne = F\"{'{'}\"\n",
        "decorators.py": "@a\n@b(1,\n   2)\n\n@c(\n\n)\ndef f():\n    pass\n@\nx = 1\n   @d\n",
        "closers.py": "if x:\n    pass\nelif y:\n    pass\nelse:\n    pass\ntry:\n    pass\n"
                      "except E:\n    pass\nfinally:\n    pass\nelsewhere = 1\nelse_x = 2\n",
        "invalid_tokens.py": "$x = 1\n?y\n!z = `3`\n\x00\ndef f():\n    pass\n  $\n\u00e9t\u00e9 = 1\n"
                             "\u3000x = 2\n",
        "not_python.py": "#include <stdio.h>\nint main(void) {\n    printf(\"%d\\n\", 1);\n"
                         "    return 0;\n}\n",
        "json_as_py.py": '{"a": [1, 2, {"b": "c"}],\n "d": null}\n',
        "comments_only.py": "# a\n    # b\n\t# c\n#\n",
        "deep_one_line.py": "x = " + "[" * 200 + "1" + "]" * 200 + "\n",
        "deep_lines.py": "x = " + "(\n" * 60 + "1" + "\n)" * 60 + "\n",
        "deep_indent.py": "".join(" " * n + "if x:\n" for n in range(300)) + "pass\n",
        "big_dict.py": "TABLE = {\n" + "".join(f"    'k{n}': ({n}, 'v{n}'),  # {n}\n"
                                                for n in range(3000)) + "}\n",
        "big_string_lines.py": "DOC = '''\n" + "a line of text with 'quotes' and \\'\n" * 30000
                               + "'''\ndef f():\n    pass\n",
        "big_string_one_line.py": "DATA = '" + "ab\\'c" * 5000 + "'\ndef f():\n    pass\n",
        "line_at_bound.py": "x = '" + "a" * (16384 - 7) + "'\ndef f():\n    pass\n",
        "line_over_bound.py": "x = '" + "a" * (16384 - 6) + "'\ndef f():\n    pass\n",
        "blank_over_bound.py": "def f():\n    pass\n" + " " * 20000 + "\n\n" + " " * 20000
                               + "\ndef g():\n    pass\n",
        "one_long_line.py": "x = " + "1 + " * 6000 + "1",
        "escape_run.py": "S = '''" + "\\n" * 40000 + "'''\n",
        "negative_paren.py": "x = 1)\ny = (2\nz = 3\n",
        "garbage.py": "".join(chr(c) for c in range(1, 0x250) if c not in (0x0d,)) + "\n",
    }
    return [(name, text.encode("utf-8")) for name, text in cases.items()] + [
        ("latin1.py", b"x = '\xe9'\ndef f():\n    pass\n"),
        ("latin1_comment.py", b"# \xe9\ndef f():\n    pass\n"),
        ("bad_utf8_code.py", b"x = 1 \xff\ndef f():\n    pass\n"),
    ]


def soups(seed, count):
    rng = random.Random(seed)
    out = []
    for number in range(count):
        parts = [rng.choice(FRAGMENTS) for _ in range(rng.randint(5, 120))]
        out.append((f"soup{number}.py", "".join(parts).encode("utf-8")))
    return out


def _mutate(text, rng):
    for _ in range(rng.randint(1, 4)):
        where = rng.randint(0, len(text))
        action = rng.random()
        if action < 0.5:
            text = text[:where] + rng.choice(FRAGMENTS) + text[where:]
        elif action < 0.7:
            text = text[:where] + text[where + rng.randint(1, 40):]
        elif action < 0.8:
            text = text.replace("\n", "\r\n")
        elif action < 0.9:
            text = text.replace("    ", "\t")
        else:
            text = text[:where] + text[where:].replace("\n", "\n  ", 3)
    return text


def mutants(bases, seed, count):
    rng = random.Random(seed)
    decoded = [(name, data.decode("utf-8", "replace")) for name, data in bases]
    out = []
    for number in range(count):
        name, text = rng.choice(decoded)
        out.append((f"{name}~{number}", _mutate(text, rng).encode("utf-8")))
    return out


_WORDS = ("def", "class", "if", "else", "elif", "except", "finally", "x", "_y1", "return",
          "elsewhere", "rb", "f", "lambda", "await")
_CODE = (" = ", " + ", ", ", ".attr", "1.5", " @ ", ": ", " $ ", "!", "\u00e9", "\t", " ", "x",
         ";", " lambda: 0", "...", "\x0c", "\x0b")


def _string(rng, newline):
    q = rng.choice("'\"")
    prefix = rng.choice(("", "", "r", "b", "f", "rb", "F", "u"))
    pieces = ("a", " ", "#", "(", "]", "\\" + q, "\\\\", "\\n", "{x}")
    if rng.random() < 0.35:
        body = ""
        for _ in range(rng.randint(0, 8)):
            body += rng.choice(pieces + (newline, newline + newline, q, q + q + "x",
                                         "\\" + newline, "\\" + q * 3, " # '" + newline))
        if body.endswith(q) or body.endswith("\\"):
            body += " "
        return prefix + q * 3 + body + q * 3
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
             for _ in range(1 if rng.random() < 0.8 else rng.randint(2, 4))]
    return prefix + q + ("\\" + newline).join(lines) + q  # continued by backslashes


def _body(rng, depth, newline):
    out = []
    for _ in range(rng.randint(0, 5)):
        roll = rng.random()
        if roll < 0.35:
            out.append(rng.choice(_CODE))
        elif roll < 0.55:
            out.append(_string(rng, newline))
        elif roll < 0.8 and depth < 30:
            out.append(_group(rng, depth + 1, newline))
        elif roll < 0.85 and depth == 0:
            out.append(" \\" + newline + rng.choice(("", "    ", "\t")))
        else:
            out.append(rng.choice(_WORDS))
    return "".join(out)


def _group(rng, depth, newline):
    inside = []
    for _ in range(rng.randint(0, 4)):
        roll = rng.random()
        if roll < 0.5:
            inside.append(_body(rng, depth, newline))
        elif roll < 0.7:
            inside.append(newline + rng.choice(("", "  ", "\t", "\x0c")))
        elif roll < 0.8:
            inside.append("  # " + rng.choice(("c", "it's", "\\", "(", '"')) + newline)
        elif roll < 0.9:
            inside.append(newline + newline)
        else:
            inside.append("\\" + newline)
    return rng.choice("([{") + "".join(inside) + rng.choice(")]}")


def _module(rng):
    newline = rng.choice(("\n", "\n", "\r\n"))
    indents, lines = [""], []
    for _ in range(rng.randint(1, 60)):
        roll = rng.random()
        if roll < 0.2:
            indents.append(indents[-1] + rng.choice(("    ", "  ", "\t", " \t", "    ", "  ")))
        elif roll < 0.4 and len(indents) > 1:
            del indents[rng.randint(1, len(indents) - 1):]
        elif roll < 0.41:
            indents.append(indents[-1][:-1] if indents[-1] else " ")  # a bad dedent
        indent = indents[-1] if rng.random() < 0.98 else "\x0c" + indents[-1]
        roll = rng.random()
        if roll < 0.1:
            lines.append(rng.choice(("", "   ", "\t", "\x0c")) + newline)
            continue
        if roll < 0.2:
            lines.append(rng.choice((indent, "", "  ")) + "# " +
                         rng.choice(("note", "it's", "x = (", "\\")) + newline)
            continue
        first = rng.choice(_WORDS + ("@", "@", "(", "[", "{", "1", "$", "\u00e9", "'s'", "...",
                                     "\x00", "\x1c", "\u00a0", "\u3000", "str", "str"))
        if first in ("(", "[", "{"):
            first = _group(rng, 1, newline)
        elif first == "str":
            first = _string(rng, newline)
        ending = rng.choice(("", "", "  # done", "  # '(' \\"))
        lines.append(indent + first + " " + _body(rng, 0, newline) + ending + newline)
    text = "".join(lines)
    if rng.random() < 0.15:
        text = text.rstrip("\r\n")
    if rng.random() < 0.1:
        text = "\ufeff" + text
    return text


def modules(seed, count):
    rng = random.Random(seed)
    return [(f"module{number}.py", _module(rng).encode("utf-8")) for number in range(count)]
