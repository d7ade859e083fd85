#!/usr/bin/env python3
"""Checks the plan of the house (docs/design.md, "Where to find things"):

- no import circle among the files of a crate, except the pairs named in ALLOWED;
- no file in the engine or the server over 900 lines;
- no function over 120 lines in the engine or the server.

    scripts/house.py            check, print what breaks a rule, exit 1 if anything does
    scripts/house.py --graph    also print every file's imports within its crate

A file is one node. An edge A -> B means A names an item of B: in a `use` (not a `pub use`,
which only re-exports) or in a path written in the code (`crate::x::f`, `super::T`,
`child::f`). Paths through a re-export (`crate::Options`) are followed to the file that
defines the item. Test code (`#[cfg(test)]` modules, tests.rs files) is left out, as are
comments and string literals."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = ["strata", "strata-server", "strata-bench", "strata-cli", "strata-py"]
SIZED = ["strata", "strata-server"]
MAX_FILE_LINES = 900
MAX_FN_LINES = 120

# Pairs of files that import each other because they are one mechanism; each is explained in
# docs/design.md ("Circles kept on purpose").
ALLOWED = {
    ("strata", frozenset({"sstable::reader", "sstable::pinned"})),
}


def strip(text):
    """The text with comments and the insides of string and char literals blanked, newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif re.match(r'b?r(#*)"', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:i + 14])
            if m:
                out.append("' '")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(text, open_at):
    """The index just past the brace that closes the one at `open_at`."""
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def without_tests(text):
    """The text with every `#[cfg(test)]` item blanked (newlines kept)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(#\[[^\]]*\]\s*)*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*([{;])", text)
        if not m:
            return text
        if m.group(4) == ";":
            end = m.end()
        else:
            end = block_end(text, m.end() - 1)
        text = text[:m.start()] + "\n" * text.count("\n", m.start(), end) + text[end:]


def module_files(src):
    """Module path (tuple) -> file, for the files under `src`."""
    mods = {}
    for dirpath, _, names in os.walk(src):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel in (["lib"], ["main"]):
                key = ()
            elif rel[-1] == "mod":
                key = tuple(rel[:-1])
            else:
                key = tuple(rel)
            if rel[-1] == "tests" or (len(rel) >= 1 and rel[0] == "bin"):
                continue
            mods[key] = path
    return mods


def use_paths(tree):
    """Expands a use tree (`a::{b, c::{d, e}}`) into its paths."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [tree.split("::")]
    prefix = [p for p in m.group(1).split("::") if p]
    parts, depth, cur = [], 0, ""
    for ch in m.group(2):
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p:
            out.extend(prefix + q for q in use_paths(p))
    return out


class Crate:
    def __init__(self, name):
        self.name = name
        self.src = os.path.join(ROOT, "crates", name, "src")
        self.mods = module_files(self.src)
        self.text = {}
        for key, path in self.mods.items():
            self.text[key] = without_tests(strip(open(path).read()))
        # Re-exports: module -> name -> absolute path of what it names.
        self.reexports = {}
        for key, text in self.text.items():
            names = {}
            for m in re.finditer(r"\bpub(\([^)]*\))?\s+use\s+([^;]+);", text):
                for p in use_paths(m.group(2)):
                    p = [s.split(" as ")[0] for s in p]
                    alias = p[-1]
                    absolute = self.absolute(key, p)
                    if absolute:
                        names[alias] = absolute
            self.reexports[key] = names

    def children(self, key):
        return {k[-1] for k in self.mods if len(k) == len(key) + 1 and k[:len(key)] == key}

    def absolute(self, key, path):
        """The path from the crate root, or None for a path outside the crate."""
        path = [p for p in path if p]
        if not path:
            return None
        head = path[0]
        if head == "crate":
            return tuple(path[1:])
        if head == "self":
            return key + tuple(path[1:])
        if head == "super":
            base = list(key)
            while path and path[0] == "super":
                base = base[:-1]
                path = path[1:]
            return tuple(base) + tuple(path)
        if head in self.children(key):
            return key + tuple(path)
        return None

    def resolve(self, path, seen=0):
        """The module file that defines what an absolute path names."""
        for cut in range(len(path), -1, -1):
            if path[:cut] in self.mods:
                module = path[:cut]
                rest = path[cut:]
                if rest and seen < 8:
                    target = self.reexports.get(module, {}).get(rest[0])
                    if target is not None and target != module + (rest[0],):
                        return self.resolve(target + rest[1:], seen + 1)
                return module
        return ()

    def edges(self):
        graph = {key: set() for key in self.mods}
        for key, text in self.text.items():
            paths = []
            for m in re.finditer(r"(?<![\w:])(pub(\([^)]*\))?\s+)?use\s+([^;]+);", text):
                if m.group(1):
                    continue
                paths.extend(use_paths(m.group(3)))
            body = re.sub(r"(?<![\w:])(pub(\([^)]*\))?\s+)?use\s+[^;]+;", "", text)
            for m in re.finditer(r"(?<![\w:$])((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", body):
                paths.append(m.group(1).split("::"))
            for p in paths:
                p = [s.split(" as ")[0] for s in p if s != "*"]
                absolute = self.absolute(key, p)
                if absolute is None:
                    continue
                target = self.resolve(absolute)
                if target != key:
                    graph[key].add(target)
        return graph


def circles(graph):
    """The strongly connected components with more than one file (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in graph:
        if v not in index:
            visit(v)
    return out


def long_functions(path):
    text = strip(open(path).read())
    out = []
    for m in re.finditer(r"\bfn\s+(\w+)", text):
        # The body starts at the first `{` after the signature, unless a `;` ends it first.
        j = m.end()
        depth = 0
        while j < len(text):
            ch = text[j]
            if ch in "(<[":
                depth += 1
            elif ch in ")>]":
                depth -= 1
            elif ch == ";" and depth <= 0:
                j = -1
                break
            elif ch == "{" and depth <= 0:
                break
            j += 1
        if j < 0 or j >= len(text):
            continue
        end = block_end(text, j)
        first = text.count("\n", 0, m.start()) + 1
        last = text.count("\n", 0, end) + 1
        if last - first + 1 > MAX_FN_LINES:
            out.append((m.group(1), first, last - first + 1))
    return out


def name(key):
    return "::".join(key) or "(root)"


def main():
    show = "--graph" in sys.argv
    broken = []
    for crate_name in CRATES:
        crate = Crate(crate_name)
        graph = crate.edges()
        if show:
            for key in sorted(graph):
                print(f"{crate_name}: {name(key)} -> {', '.join(sorted(name(t) for t in graph[key]))}")
        for comp in circles(graph):
            names = frozenset(name(k) for k in comp)
            if (crate_name, names) in ALLOWED:
                continue
            inner = []
            for k in sorted(comp):
                targets = sorted(name(t) for t in graph[k] if t in comp)
                inner.append(f"    {name(k)} -> {', '.join(targets)}")
            broken.append(f"{crate_name}: an import circle among {len(comp)} files:\n" + "\n".join(inner))
        if crate_name in SIZED:
            for key, path in sorted(crate.mods.items()):
                rel = os.path.relpath(path, ROOT)
                lines = open(path).read().count("\n")
                if lines > MAX_FILE_LINES:
                    broken.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES})")
                for fn, line, length in long_functions(path):
                    broken.append(f"{rel}:{line}: fn {fn} is {length} lines (at most {MAX_FN_LINES})")
    for b in broken:
        print(b)
    if broken:
        sys.exit(1)
    print("the house keeps its plan: no import circles, no file over "
          f"{MAX_FILE_LINES} lines, no function over {MAX_FN_LINES}")


if __name__ == "__main__":
    main()
