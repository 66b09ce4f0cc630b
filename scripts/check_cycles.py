#!/usr/bin/env python3
"""Fails when the modules of a Rust crate import each other in a cycle.

Reads every `crate::`, `super::` and `self::` path in each file of the
crate's src/ (`use` lines and inline paths alike; comments skipped),
resolves it to the module file it names (the longest module prefix) and
looks for strongly connected groups of files. A parent module's `mod`
lines are not imports; its `pub use` of a child is.

    python3 scripts/check_cycles.py core/src [more/src ...]   # exit 1 on a cycle
    python3 scripts/check_cycles.py --graph core/src          # print the edges
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


def resolve(mods, path):
    while path and path not in mods:
        path = path[:-1]
    return path


def edges(mods):
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
            target = resolve(mods, base + tuple(segs))
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


def name(mod):
    return "crate::" + "::".join(mod) if mod else "crate"


def main(argv):
    show = "--graph" in argv
    roots = [a for a in argv if not a.startswith("--")]
    bad = 0
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
        if not bad:
            print(f"{src}: {len(mods)} modules, no import cycle")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
