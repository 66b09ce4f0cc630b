#!/usr/bin/env python3
"""Fails when the modules of a Rust crate import each other in a cycle.

Reads every `crate::`, `super::` and `self::` path in each file of the
crate's src/ (`use` lines and inline paths alike; comments skipped),
resolves it to the module file it names (the longest module prefix) and
looks for strongly connected groups of files. A parent module's `mod`
lines are not imports; its `pub use` of a child is.

Re-exports are followed: a path that names an item a module re-exports
(`pub use stats::Stats;` in lib.rs, then `use crate::Stats` elsewhere)
is an import of the module the item comes from (`crate::stats`), not of
the re-exporting module, so an arrow hidden behind lib.rs's public list
is still seen.

    python3 scripts/check_cycles.py core/src [more/src ...]   # exit 1 on a cycle
    python3 scripts/check_cycles.py --graph core/src          # print the edges
    python3 scripts/check_cycles.py --layers core/src         # also: folders as layers

With `--layers`, each top-level module of the crate (a folder such as
`hold/`, `signal/`, or a file such as `stats.rs`) is one node too, and two
layers that import each other in any direction, through any of their
files, are a cycle: the layering of DESIGN.md ("a lower layer never imports
a higher one"). Test-only modules (`tests`, `loom_models`) may reach
across layers and are left out of this check.
"""
import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super|self)::((?:[A-Za-z_][A-Za-z0-9_]*::)*)\{([^;]*?)\}", re.S)
MOUNT = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;')
MOD = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] if not line.lstrip().startswith("\"") else line
                     for line in text.splitlines())


def modules(src):
    """Maps module path tuples to files, following `mod` and `#[path]`."""
    found = {}

    def walk(path, file):
        found[path] = file
        text = strip_comments(open(file, encoding="utf-8").read())
        here = os.path.dirname(file)
        stem = os.path.splitext(os.path.basename(file))[0]
        child_dir = here if stem in ("lib", "main", "mod") else os.path.join(here, stem)
        mounted = {}
        for target, name in MOUNT.findall(text):
            mounted[name] = os.path.normpath(os.path.join(here, target))
        for name in MOD.findall(text):
            if name in mounted:
                walk(path + (name,), mounted[name])
                continue
            for cand in (os.path.join(child_dir, name + ".rs"), os.path.join(child_dir, name, "mod.rs")):
                if os.path.exists(cand):
                    walk(path + (name,), cand)
                    break

    root = os.path.join(src, "lib.rs")
    if not os.path.exists(root):
        root = os.path.join(src, "main.rs")
    walk((), root)
    return found


USE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", re.S)


def reexports(mods):
    """Maps (module, name) to the full path a module's `pub use` gives it."""
    found = {}
    for mod, file in mods.items():
        text = strip_comments(open(file, encoding="utf-8").read())
        for body in USE.findall(text):
            for path, alias in use_leaves(re.sub(r"\s+", "", body)):
                if not path or path[-1] == "*":
                    continue
                head, rest = path[0], path[1:]
                if head == "crate":
                    full = tuple(rest)
                elif head == "self":
                    full = mod + tuple(rest)
                elif head == "super":
                    base = mod[:-1]
                    while rest and rest[0] == "super":
                        base, rest = base[:-1], rest[1:]
                    full = base + tuple(rest)
                elif mod + (head,) in mods:
                    full = mod + tuple(path)
                else:
                    continue  # an external crate
                found[(mod, alias or path[-1])] = full
    return found


def use_leaves(body, prefix=()):
    """`a::{b, c::d as e}` -> [(('a','b'), None), (('a','c','d'), 'e')]."""
    if "{" not in body:
        path, _, alias = body.partition("as")
        return [(prefix + tuple(p for p in path.split("::") if p), alias or None)]
    head, _, inner = body.partition("{")
    inner = inner[: inner.rfind("}")]
    prefix = prefix + tuple(p for p in head.split("::") if p)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if part == "self":
            out.append((prefix, None))
        elif part:
            out.append(use_leaves(part, prefix)[0] if "{" not in part else None)
            if out[-1] is None:
                out.pop()
                out.extend(use_leaves(part, prefix))
    return out


def resolve(mods, path, exported=None, seen=0):
    full = path
    while path and path not in mods:
        path = path[:-1]
    # The item named after the module prefix may be a re-export: follow it
    # (bounded, in case two modules re-export each other's names).
    rest = full[len(path):]
    if exported and rest and seen < 8 and (path, rest[0]) in exported:
        return resolve(mods, exported[(path, rest[0])] + rest[1:], exported, seen + 1)
    return path


def edges(mods):
    exported = reexports(mods)
    out = {m: set() for m in mods}
    for mod, file in mods.items():
        text = strip_comments(open(file, encoding="utf-8").read())
        names = []
        for head, prefix, inner in GROUP.findall(text):
            for part in re.split(r"[,\s]+", inner):
                part = part.strip().split(" as ")[0].strip("{} ")
                if part and part != "self" and re.match(r"[A-Za-z_]", part):
                    names.append((head, prefix.rstrip(":").split("::") if prefix else [], part.split("::")))
        for head, rest in PATH.findall(text):
            names.append((head, [], [p for p in rest.split("::") if p]))
        for head, prefix, parts in names:
            segs = [p for p in prefix if p] + parts
            if head == "crate":
                base = ()
            elif head == "self":
                base = mod
            else:
                base = mod[:-1]
                while segs and segs[0] == "super":
                    base, segs = base[:-1], segs[1:]
            target = resolve(mods, base + tuple(segs), exported)
            if target != mod and not (len(target) < len(mod) and mod[:len(target)] == target and target == ()):
                out[mod].add(target)
    return out


def cycles(graph):
    index, low, stack, on, result = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                result.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            strong(v)
    return result


TEST_ONLY = {"tests", "loom_models"}


def layers(graph):
    """The graph of top-level modules (lib.rs itself, the public list, left out)."""
    out = {}
    for mod, targets in graph.items():
        if not mod or set(mod) & TEST_ONLY:
            continue
        for t in targets:
            if t and t[0] != mod[0]:
                out.setdefault((mod[0],), set()).add((t[0],))
                out.setdefault((t[0],), set())
    return out


def name(mod):
    return "crate::" + "::".join(mod) if mod else "crate"


def main(argv):
    show = "--graph" in argv
    by_layer = "--layers" in argv
    roots = [a for a in argv if not a.startswith("--")]
    if not roots:
        print("check_cycles.py: give the src/ folders to check (it checked nothing)", file=sys.stderr)
        return 2
    bad = 0
    for src in roots:
        if not any(os.path.isfile(os.path.join(src, f)) for f in ("lib.rs", "main.rs")):
            print(f"check_cycles.py: {src} has no lib.rs or main.rs: not a crate's src/ folder", file=sys.stderr)
            return 2
    for src in roots:
        mods = modules(src)
        graph = edges(mods)
        if show:
            for m in sorted(graph):
                for t in sorted(graph[m]):
                    print(f"{src}: {name(m)} -> {name(t)}")
        for group in cycles(graph):
            bad += 1
            print(f"{src}: import cycle through {len(group)} modules: " + ", ".join(name(g) for g in group))
            for m in group:
                inside = sorted(name(t) for t in graph[m] if t in group)
                print(f"    {name(m)} uses {', '.join(inside)}")
        if by_layer:
            folded = layers(graph)
            for group in cycles(folded):
                bad += 1
                print(f"{src}: layers import each other: " + ", ".join(name(g) for g in group))
                for m in group:
                    for t in sorted(graph):
                        if t[:1] == m and not set(t) & TEST_ONLY:
                            for u in sorted(graph[t]):
                                if u[:1] in group and u[:1] != m:
                                    print(f"    {name(t)} uses {name(u)}")
        if not bad:
            print(f"{src}: {len(mods)} modules, no import cycle" + (" (also between layers)" if by_layer else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
