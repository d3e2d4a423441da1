#!/usr/bin/env python3
"""docs_check.py — checks that the README and docs/*.md say what the tree is (test_docs.sh runs it).

  paths     every repository path a page names (markdown links, backticked spans, the words of its
            shell blocks that start with a top-level folder) exists; placeholders (FAMILY, BRANCH,
            vNNNN, NAME, *) match at least one file; a bare source-file name (`dev_cuda.c`) is some
            file's name in the tree; generated products (out/, build/, data/, ...) are exempt by an
            explicit list;
  commands  every `gen ...` / `train ...` line a page shows uses a known subcommand and only flags that
            the tool's usage (`gen --help`, `gen size --help`, `train --help`) lists; the cheap ones
            without placeholders (gen list/explain/size/audit of the tree, render --list) are run and
            must exit 0;
  folders   the README's folder map lists exactly the tree's folders: each listed folder exists, and
            every top-level folder and every runtime/ folder is listed;
  status    the README's status table equals `scripts/status_table.sh`.

Prints one line per problem `file:line: what — how to fix`, exit 1 when there is any.
Never writes into the repository: commands that would write (-o, --plot) are not run.
usage: docs_check.py ROOT GEN TRAIN [PAGE.md ...]   (default pages: README.md docs/*.md; a page
named README.md also gets the folder-map and status-table checks)
"""
import glob, os, re, shlex, subprocess, sys

ROOT, GEN, TRAIN = sys.argv[1], sys.argv[2], sys.argv[3]
PAGES = sys.argv[4:] or [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
problems = []
counts = {"paths": 0, "commands": 0, "ran": 0}

def problem(page, line, what):
    problems.append("%s:%d: %s" % (os.path.relpath(page, ROOT), line, what))

# --- the tree -------------------------------------------------------------------------------------
def tracked_files():
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout
        return [f for f in out.split("\n") if f]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk it, skipping products
        files = []
        for d, dirs, fs in os.walk(ROOT):
            rel = os.path.relpath(d, ROOT)
            dirs[:] = [x for x in dirs if not x.startswith(".") and not (rel == "." and x in PRODUCT_TOP)]
            files += [os.path.normpath(os.path.join(rel, f)) for f in fs]
        return files

# Folders and names that a build or a run makes, never committed: a page may name what is in them.
PRODUCT_TOP = {"out", "build", "build-asan", "build-cov", "data"}
PRODUCT_NAMES = {"plan.json", "config.json", "audit.md", "audit.json", "report.json", "meta.json",
                 "recipe.json", "commands.txt", "tokenizer.json", "resources.json", "trace.json",
                 "memory.svg", "cost.svg", "reference_model.bin", "model.safetensors"}
# Files of other projects a page names (the CUDA toolkit's headers, llm.c's trainer): not ours.
EXTERNAL_NAMES = {"cuda.h", "cuda_bf16.h", "cuda_fp16.h", "cuda_fp8.h", "cublasLt.h", "nccl.h", "mpi.h",
                  "train_gpt2.c", "train_gpt2.cu"}
FILES = tracked_files()
FILESET = set(FILES)
DIRS = set()
for f in FILES:
    parts = f.split("/")
    for i in range(1, len(parts)):
        DIRS.add("/".join(parts[:i]))
BASENAMES = {os.path.basename(f) for f in FILES}
TOP = {f.split("/")[0] for f in FILES if "/" in f and not f.startswith(".")}

def exists(rel):
    rel = rel.rstrip("/")
    return rel in FILESET or rel in DIRS or rel == ""

# A placeholder in a named path: an upper-case word (FAMILY, BRANCH, NAME; not a document's name such
# as DIALECT.md), vNNNN[_name], a lone N, or <word>.
PLACEHOLDER = re.compile(r"(?<![A-Za-z0-9])(?:[A-Z][A-Z0-9_]+(?![A-Za-z0-9_])(?!\.md\b)|v?NNNN[_a-z]*|N(?![A-Za-z0-9]))|<[^<>/]*>")

def path_matches(p):
    """Does a named path exist? Braces expand; placeholders and * match any name part."""
    m = re.search(r"\{([^{}]*)\}", p)
    if m:
        return all(path_matches(p[:m.start()] + alt + p[m.end():]) for alt in m.group(1).split(","))
    if exists(p):
        return True
    pat = PLACEHOLDER.sub("*", p)
    if "*" in pat:
        rx = re.compile("^" + re.escape(pat.rstrip("/")).replace(r"\*", "[^/]*") + "$")
        return any(rx.match(x) for x in FILESET | DIRS)
    return False

# --- reading a page -------------------------------------------------------------------------------
def blocks(lines):
    """(line number, text, fence) for each line: fence is the fenced block's language ("sh", "" for a
    plain fence), None outside one."""
    fence = None
    for i, s in enumerate(lines, 1):
        if s.startswith("```"):
            fence = s[3:].strip() if fence is None else None
            continue
        yield i, s, fence

SRC_EXT = (".c", ".h", ".lua", ".cu", ".cuh", ".sh", ".py", ".md", ".yaml", ".supp", ".txt")

def check_token(page, ln, tok, inline):
    tok = tok.strip().strip(",;:.()'\"")
    tok = re.sub(r":[0-9]+(:[0-9]+)?$", "", tok)            # file:line
    tok = re.sub(r"#.*$", "", tok)
    if not tok or "://" in tok or tok.startswith(("$", "~", "/", "-")) or "=" in tok:
        return
    if tok.startswith("./"):
        tok = tok[2:]
    first = tok.split("/")[0]
    if "/" in tok:
        if first in PRODUCT_TOP or first.startswith("build"):
            return
        if first not in TOP and first not in ("docs",):
            return                                           # not a repository path (DIR/x, OUT/y, $TMP/z)
        counts["paths"] += 1
        if not path_matches(tok):
            problem(page, ln, "`%s` names no file or folder of the tree — fix the path or the text" % tok)
    elif inline and tok.endswith(SRC_EXT) and re.fullmatch(r"[A-Za-z0-9_.+-]+", tok):
        if tok in PRODUCT_NAMES or tok in EXTERNAL_NAMES or PLACEHOLDER.search(tok) or "*" in tok:
            return
        if tok not in BASENAMES:
            problem(page, ln, "`%s` is no file's name in the tree — fix the name or the text" % tok)

def check_paths(page, lines):
    base = os.path.dirname(page)
    for ln, s, fence in blocks(lines):
        if fence is not None:
            for tok in s.split("#", 1)[0].split():
                check_token(page, ln, tok, False)
            continue
        for m in re.finditer(r"\]\(([^)\s]+)\)", s):         # links
            t = m.group(1).split("#")[0]
            if not t or "://" in t or t.startswith("mailto:"):
                continue
            rel = os.path.normpath(os.path.relpath(os.path.join(base, t), ROOT))
            counts["paths"] += 1
            if not exists(rel):
                problem(page, ln, "link (%s) points at nothing in the tree — fix the link" % t)
        for m in re.finditer(r"`([^`]+)`", s):               # backticked spans
            for tok in m.group(1).split():
                check_token(page, ln, tok, True)

# --- commands -------------------------------------------------------------------------------------
def usage(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return r.stdout + r.stderr
GEN_FLAGS = set(re.findall(r"--[a-z][a-z0-9-]*", usage([GEN, "--help"])))
SIZE_FLAGS = set(re.findall(r"--[a-z][a-z0-9-]*", usage([GEN, "size", "--help"])))
TRAIN_FLAGS = set(re.findall(r"--[a-z][a-z0-9-]*", usage([TRAIN, "--help"]))) | {"--help"}
if len(GEN_FLAGS) < 5 or len(SIZE_FLAGS) < 5 or len(TRAIN_FLAGS) < 5:
    print("docs_check: the tools' usage could not be read (%s, %s) — build first" % (GEN, TRAIN))
    sys.exit(1)
# the subcommands are the lower-case words after "gen" at the start of gen --help's usage lines
GEN_SUBS = set(re.findall(r"(?m)^\s+gen ([a-z]+)\b", usage([GEN, "--help"])))
if len(GEN_SUBS) < 5:
    print("docs_check: gen --help lists no subcommands (%s) — build first" % GEN)
    sys.exit(1)
# docs/DESIGN.md describes what the project grows into: it may name a subcommand not built yet
DESIGN_SUBS = set()
GEN_WORD = re.compile(r"^(?:\$G|\$GEN|\$\{GEN\}|gen|build/generator/gen|\"\$GEN\")$")
TRAIN_WORD = re.compile(r"^(?:train|\$TRAIN|[A-Za-z0-9_./${}-]*/train)$")
CHEAP = {"list", "explain", "size", "audit", "render"}

def commands(lines):
    """(line, words) of every gen/train command in shell blocks and in backticked spans."""
    out, pend, pend_ln = [], "", 0
    for ln, s, fence in blocks(lines):
        texts = []
        if fence is not None and fence not in ("sh", "bash", "shell"):
            continue
        if fence is not None:
            s = pend + s.split(" #", 1)[0] if not s.lstrip().startswith("#") else pend
            if s.rstrip().endswith("\\"):
                pend, pend_ln = s.rstrip()[:-1] + " ", pend_ln or ln
                continue
            texts, pend = [(pend_ln or ln, s)], ""
            pend_ln = 0
        else:
            texts = [(ln, m.group(1)) for m in re.finditer(r"`([^`]+)`", s)]
        for l, t in texts:
            for part in re.split(r"\|\||&&|;|\$\(|\|(?= )", t):
                try:
                    w = shlex.split(part)
                except ValueError:
                    w = part.split()
                while w and re.match(r"^[A-Z_][A-Z0-9_]*=", w[0]):   # VAR=value prefixes
                    w = w[1:]
                if w and w[0] in ("nice", "time", "mpirun") :
                    w = w[1:]
                    while w and w[0].startswith("-") or (w and w[0].isdigit()):
                        w = w[1:]
                if w and (GEN_WORD.match(w[0]) or TRAIN_WORD.match(w[0])):
                    out.append((l, w))
    return out

def check_commands(page, lines):
    for ln, w in commands(lines):
        text = " ".join(w)
        counts["commands"] += 1
        is_gen = bool(GEN_WORD.match(w[0]))
        if is_gen and len(w) == 1:
            continue
        if is_gen:
            sub = w[1]
            if sub in ("...", "…"):
                sub = ""
            if sub in DESIGN_SUBS and os.path.basename(page) == "DESIGN.md":
                continue
            if sub and not (sub in GEN_SUBS or sub.endswith(".yaml") or sub.startswith("-") or PLACEHOLDER.fullmatch(sub)):
                problem(page, ln, "`%s`: gen has no subcommand '%s' — see gen --help" % (text, sub))
                continue
            known = SIZE_FLAGS if sub == "size" else GEN_FLAGS
        else:
            known = TRAIN_FLAGS
        for f in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", " ".join(w[1:])):
            if f not in known:
                problem(page, ln, "`%s`: %s does not list %s in its usage — fix the command or the usage text"
                        % (text, "gen size" if is_gen and w[1] == "size" else w[0], f))
        # complete and cheap: gen size of a model, list/explain/audit of the tree, render --list
        w = [x for x in w if not re.fullmatch(r"\[--[a-z-]+\]", x)]   # optional flags: run without them
        rest = " " + " ".join(w[1:])
        runnable = is_gen and w[1] in CHEAP and not any(x in rest for x in ("[", "...", "…", "<", " -o", "--plot", "out/", "$"))
        if runnable:
            runnable = ((w[1] == "size" and ("--model" in w or "--params" in w)) or (w[1] == "render" and "--list" in w)
                        or (w[1] in ("list", "explain", "audit") and len(w) > 2 and w[2].endswith(".yaml")))
        if runnable and not PLACEHOLDER.search(" ".join(w[2:]).replace("--", "")):
            counts["ran"] += 1
            r = subprocess.run([GEN] + w[1:], capture_output=True, text=True, cwd=ROOT, timeout=60)
            if r.returncode != 0:
                problem(page, ln, "`%s` exits %d: %s" % (text, r.returncode, (r.stdout + r.stderr).strip().split("\n")[-1]))

# --- the README's folder map and status table ------------------------------------------------------
def block_between(lines, name):
    try:
        a = lines.index("<!-- %s:begin -->" % name)
        b = lines.index("<!-- %s:end -->" % name)
    except ValueError:
        return None, 0
    return lines[a + 1:b], a + 2

def check_readme(page, lines):
    rows, first = block_between(lines, "folder-map")
    if rows is None:
        problem(page, 1, "no folder map (<!-- folder-map:begin --> ... end) — add it back")
    else:
        listed = set()
        for i, r in enumerate(rows):
            m = re.match(r"^\| `([^`]+)/` \|", r)
            if m:
                listed.add(m.group(1))
                if not (m.group(1) in DIRS or m.group(1) in PRODUCT_TOP):
                    problem(page, first + i, "the folder map lists `%s/`, which is not in the tree — remove or rename it" % m.group(1))
        want = {d for d in DIRS if "/" not in d and not d.startswith(".")} | {"out"}
        want |= {d for d in DIRS if d.startswith("runtime/") and d.count("/") == 1}
        for d in sorted(want - listed):
            problem(page, first, "the folder map does not list `%s/` — add a row for it" % d)
    rows, first = block_between(lines, "status-table")
    if rows is None:
        problem(page, 1, "no status table (<!-- status-table:begin --> ... end) — add it back")
    else:
        gen = subprocess.run(["bash", os.path.join(ROOT, "scripts", "status_table.sh")], capture_output=True, text=True)
        if gen.returncode != 0 or gen.stdout.rstrip("\n").split("\n") != rows:
            problem(page, first, "the status table differs from specs/ — run `bash scripts/status_table.sh --update`")

for page in PAGES:
    lines = open(page, encoding="utf-8").read().split("\n")
    check_paths(page, lines)
    check_commands(page, lines)
    if os.path.basename(page) == "README.md":
        check_readme(page, lines)

for p in problems:
    print(p)
print("docs_check: %d pages, %d repository paths, %d commands (%d run), %d problems"
      % (len(PAGES), counts["paths"], counts["commands"], counts["ran"], len(problems)))
sys.exit(1 if problems else 0)
