#!/usr/bin/env python3
"""Fail when the top-level modules of a crate import each other in a cycle.

Every crate of the workspace is read as a map: each top-level module may use the modules below
it, never one that (directly or through others) uses it back. For each crate root
(crates/*/src/lib.rs, main.rs, bin/*.rs) this walks the module tree from its `mod` declarations,
leaves out `#[cfg(test)]` items (and the files of test-only modules), resolves every
`crate::`, `super::` and `self::` path to the top-level module it names, and prints each strongly
connected component of more than one module with the references that close it.

    scripts/module-cycles.py            # every crate of the workspace
    scripts/module-cycles.py --edges    # also print the module graph

Exit status: 0 without a cycle, 1 with one. Comments, strings and doc links are not imports:
only code counts.
"""

import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def strip(src):
    """Code with comments, string and char literals blanked (newlines kept for line numbers)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif (m := re.match(r'b?r(#*)"', src[i:i + 300])) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}', '"') or a lifetime ('a, 'static).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:i + 12])
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


TOKEN = re.compile(r"\s*(#!?\[|::|[A-Za-z_][A-Za-z0-9_]*|[{}();\[\]]|.)", re.S)


def tokens(code):
    """(token, line) pairs."""
    line, pos, n = 1, 0, len(code)
    while pos < n:
        m = TOKEN.match(code, pos)
        if not m:
            break
        line += code.count("\n", pos, m.start(1))
        tok = m.group(1)
        yield tok, line
        line += tok.count("\n")
        pos = m.end()


def skip_group(toks, i, open_, close):
    """Index after the group that opens at toks[i]."""
    depth = 0
    while i < len(toks):
        t = toks[i][0]
        if t == open_ or (open_ == "[" and t in ("#[", "#![")):
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def skip_item(toks, i):
    """Index after the item starting at toks[i]: up to its `;` or its closing `}`."""
    while i < len(toks):
        t = toks[i][0]
        if t in ("#[", "#!["):
            i = skip_group(toks, i, "[", "]")
            continue
        if t == ";":
            return i + 1
        if t == "{":
            return skip_group(toks, i, "{", "}")
        if t == "(":
            i = skip_group(toks, i, "(", ")")
            continue
        i += 1
    return i


def is_cfg_test(attr):
    """`#[cfg(test)]`, and any cfg that holds only under test (`all(test, …)`)."""
    text = " ".join(t for t, _ in attr)
    return bool(re.match(r"#\[ cfg \( (test|all \( test\b)", text))


class Crate:
    def __init__(self, root_file):
        self.root_file = root_file
        self.src = os.path.dirname(root_file)
        # top-level module -> {used top-level module: [(file, line), ...]}
        self.edges = {}
        self.modules = set()
        # A name the root re-exports (`pub use status::StatusStore`) -> the module it is from,
        # so that `crate::StatusStore` counts as a use of `status`.
        self.reexports = {}

    def read(self):
        self.walk(self.root_file, [], is_root=True)
        return self

    def walk(self, path, modpath, is_root=False):
        with open(path, encoding="utf-8") as f:
            toks = list(tokens(strip(f.read())))
        rel = os.path.relpath(path, ROOT)
        # The directory holding this file's child modules.
        base = os.path.basename(path)
        if is_root or base == "mod.rs":
            child_dir = os.path.dirname(path)
        else:
            child_dir = os.path.join(os.path.dirname(path), base[:-3])
        if is_root:
            # The root's `use` items first: its modules may name what it re-exports.
            depth = 0
            for k, (t, _) in enumerate(toks):
                depth += {"{": 1, "}": -1}.get(t, 0)
                if depth == 0 and t == "use":
                    stop = k
                    while stop < len(toks) and toks[stop][0] != ";":
                        stop += 1
                    self.note_reexports([tok for tok, _ in toks[k + 1:stop]])
        self.scan(toks, 0, len(toks), modpath, child_dir, rel)

    def scan(self, toks, i, end, modpath, child_dir, rel):
        while i < end:
            t, line = toks[i]
            if t in ("#[", "#!["):
                j = skip_group(toks, i, "[", "]")
                if t == "#[" and is_cfg_test(toks[i:j]):
                    i = skip_item(toks, j)
                    continue
                i = j
                continue
            if t == "mod" and i + 2 < end and re.match(r"[A-Za-z_]\w*$", toks[i + 1][0]):
                name = toks[i + 1][0]
                if toks[i + 2][0] == ";":
                    if not modpath:
                        self.modules.add(name)
                    for cand in (os.path.join(child_dir, name + ".rs"),
                                 os.path.join(child_dir, name, "mod.rs")):
                        if os.path.exists(cand):
                            self.walk(cand, modpath + [name])
                            break
                    i += 3
                    continue
                if toks[i + 2][0] == "{":
                    close = skip_group(toks, i + 2, "{", "}")
                    if not modpath:
                        self.modules.add(name)
                    self.scan(toks, i + 3, close - 1, modpath + [name],
                              os.path.join(child_dir, name), rel)
                    i = close
                    continue
            if not modpath and t == "use":
                while i < end and toks[i][0] != ";":
                    i += 1
                continue
            if t in ("crate", "super", "self") and i + 1 < end and toks[i + 1][0] == "::" \
                    and (i == 0 or toks[i - 1][0] not in ("::", "$")):
                target = self.resolve(toks, i, end, modpath)
                if modpath and target and target != modpath[0]:
                    self.edges.setdefault(modpath[0], {}).setdefault(target, []).append((rel, line))
                # `crate::{a, b::c}` names several modules at once.
                j = i
                while j + 1 < end and toks[j + 1][0] == "::" and j + 2 < end \
                        and toks[j][0] in ("crate", "super", "self"):
                    j += 2
                if t == "crate" and j == i + 2 and toks[j][0] == "{" and modpath:
                    close = skip_group(toks, j, "{", "}")
                    depth = 0
                    expect = True
                    for k in range(j + 1, close - 1):
                        tk = toks[k][0]
                        if tk == "{":
                            depth += 1
                        elif tk == "}":
                            depth -= 1
                        elif depth == 0 and tk == ",":
                            expect = True
                            continue
                        elif depth == 0 and expect and re.match(r"[A-Za-z_]\w*$", tk) \
                                and tk not in ("self",):
                            used = self.reexports.get(tk, tk)
                            if used != modpath[0]:
                                self.edges.setdefault(modpath[0], {}).setdefault(used, []).append(
                                    (rel, toks[k][1]))
                        expect = False
            i += 1

    def resolve(self, toks, i, end, modpath):
        """The top-level module a `crate::`/`super::`/`self::` path starting at toks[i] names."""
        here = list(modpath)
        while i + 1 < end and toks[i + 1][0] == "::":
            t = toks[i][0]
            if t == "crate":
                here = []
            elif t == "super":
                here = here[:-1]
            elif t == "self":
                pass
            else:
                break
            i += 2
        if here:
            return here[0]
        if i < end and re.match(r"[A-Za-z_]\w*$", toks[i][0]):
            return self.reexports.get(toks[i][0], toks[i][0])
        return None

    def note_reexports(self, toks):
        """Records the leaves of a root `use` tree with the module each comes from."""
        def walk(k, first):
            # Returns the index after the subtree starting at toks[k].
            head = first
            while k < len(toks):
                t = toks[k]
                if t == "{":
                    k += 1
                    while k < len(toks) and toks[k] != "}":
                        k = walk(k, head)
                        if k < len(toks) and toks[k] == ",":
                            k += 1
                    return k + 1
                if t in (",", "}"):
                    return k
                if t == "as" and k + 1 < len(toks):
                    if head:
                        self.reexports[toks[k + 1]] = head
                    return k + 2
                if re.match(r"[A-Za-z_]\w*$", t):
                    if head is None and t not in ("crate", "self"):
                        head = t
                    nxt = toks[k + 1] if k + 1 < len(toks) else None
                    if nxt != "::" and head and t != head:
                        self.reexports[t] = head
                k += 1
            return k
        walk(0, None)


def sccs(graph, nodes):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in nodes:
                continue
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
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def roots():
    crates = os.path.join(ROOT, "crates")
    for name in sorted(os.listdir(crates)):
        src = os.path.join(crates, name, "src")
        for f in ("lib.rs", "main.rs"):
            if os.path.exists(os.path.join(src, f)):
                yield os.path.join(src, f)
        bins = os.path.join(src, "bin")
        if os.path.isdir(bins):
            for f in sorted(os.listdir(bins)):
                if f.endswith(".rs"):
                    yield os.path.join(bins, f)


def main():
    show_edges = "--edges" in sys.argv[1:]
    cycles = 0
    for root in roots():
        crate = Crate(root).read()
        graph = {m: set(d) & crate.modules for m, d in crate.edges.items()}
        rel = os.path.relpath(root, ROOT)
        if show_edges:
            print(f"{rel}:")
            for m in sorted(crate.modules):
                print(f"  {m} -> {', '.join(sorted(graph.get(m, ()))) or '-'}")
        for comp in sccs(graph, crate.modules):
            if len(comp) < 2:
                continue
            cycles += 1
            members = set(comp)
            print(f"{rel}: a cycle of {len(comp)} modules: {' '.join(comp)}")
            for m in comp:
                for d in sorted(graph.get(m, set()) & members):
                    f, line = crate.edges[m][d][0]
                    more = len(crate.edges[m][d]) - 1
                    print(f"  {m} -> {d}  ({f}:{line}{f' and {more} more' if more else ''})")
    if cycles:
        print(f"module-cycles: {cycles} cycle(s); a module may use only the modules below it",
              file=sys.stderr)
        return 1
    print("module-cycles: no cycle among the top-level modules of any crate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
