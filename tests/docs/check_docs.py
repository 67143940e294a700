#!/usr/bin/env python3
"""The documentation check (ctest docs_check; docs/testing.md says why and how).

Reads README.md and every docs/**/*.md and fails on
  - a ```cpp fence that does not compile against the public headers
    (`-std=c++20 -fsyntax-only -I include`), and
  - a relative link whose file, or whose heading, does not exist.

Markers, an HTML comment on the line(s) right before a fence:
  <!-- snippet: given T a, U& b -->   names the snippet uses without declaring
                                      them: parameters of the function its
                                      statements become
  <!-- snippet: continues -->         compiled after the previous snippet of
                                      the same file, in one translation unit
  <!-- snippet: fragment REASON -->   not compiled (pseudo-code); REASON required

`--self-test` runs the checker on a generated page holding one snippet and
one link of each kind, good and bad, and fails unless exactly the bad ones
are reported.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import unicodedata
import urllib.parse

STD_HEADERS = ["cstdint", "cstdio", "functional", "memory", "span", "string", "vector"]
FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(\w+)\s*(.*?)\s*-->\s*$")
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
HTML_REF = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]+)\"", re.I)
HTML_ID = re.compile(r"<a\b[^>]*?\b(?:id|name)=\"([^\"]+)\"", re.I)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# A snippet compiled as a whole file rather than as statements.
FILE_SCOPE = re.compile(r"^(?:template\b|extern\b|namespace\b|BALLAST_PLUGIN_ENTRY\b)|\bint\s+main\s*\(", re.M)


class Snippet:
    def __init__(self, path, line, text, markers):
        self.path = path  # relative to the root, as errors name it
        self.line = line  # 1-based line of the first line of code
        self.text = text
        self.markers = markers  # [(kind, argument, line)]

    def marker(self, kind):
        for k, arg, _ in self.markers:
            if k == kind:
                return arg
        return None

    @property
    def file_scope(self):
        return bool(FILE_SCOPE.search(self.text))


class Page:
    """One Markdown file: its snippets, links, anchors and marker errors."""

    def __init__(self, root, rel):
        self.rel = rel
        self.snippets = []
        self.links = []  # (line, target)
        self.anchors = set()
        self.errors = []  # (line, message)
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            self._parse(f.read().split("\n"))

    def _parse(self, lines):
        fence = None  # (char, length, info, first line index)
        pending = []  # markers waiting for their fence
        slugs = {}
        body = []
        for i, line in enumerate(lines):
            n = i + 1
            if fence:
                c, length, info, start, markers = fence
                if re.match(r"^ {0,3}" + re.escape(c) + "{" + str(length) + r",}\s*$", line):
                    if info in ("cpp", "c++"):
                        self.snippets.append(Snippet(self.rel, start + 1, "\n".join(body), markers))
                    elif markers:
                        self.errors.append((markers[0][2], f"snippet marker before a '{info or 'plain'}' fence, not cpp"))
                    fence = None
                else:
                    body.append(line)
                continue
            m = FENCE_OPEN.match(line)
            if m:
                fence = (m.group(1)[0], len(m.group(1)), m.group(2).lower(), n, pending)
                pending = []
                body = []
                continue
            m = MARKER.match(line)
            if m:
                kind, arg = m.group(1), m.group(2)
                if kind not in ("given", "continues", "fragment"):
                    self.errors.append((n, f"unknown snippet marker '{kind}'"))
                elif kind in ("given", "fragment") and not arg:
                    self.errors.append((n, f"snippet marker '{kind}' needs an argument"))
                pending.append((kind, arg, n))
                continue
            if pending:
                self.errors.append((pending[0][2], "snippet marker not right before a fence"))
                pending = []
            m = HEADING.match(line)
            if m:
                slug = github_slug(m.group(2))
                count = slugs.get(slug, 0)
                slugs[slug] = count + 1
                self.anchors.add(slug if count == 0 else f"{slug}-{count}")
            self.anchors.update(HTML_ID.findall(line))
            text = CODE_SPAN.sub("", line)
            for target in INLINE_LINK.findall(text) + HTML_REF.findall(text):
                self.links.append((n, target))
            m = REFERENCE_DEF.match(text)
            if m:
                self.links.append((n, m.group(1)))
        if fence:
            self.errors.append((fence[3], "fence never closed"))
        if pending:
            self.errors.append((pending[0][2], "snippet marker not right before a fence"))


def github_slug(heading):
    """The anchor GitHub gives a heading: its text, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    out = []
    for ch in text.lower():
        if ch in " -_" or ch.isalnum() or unicodedata.category(ch).startswith("M"):
            out.append("-" if ch == " " else ch)
    return "".join(out)


def check_links(root, pages):
    """Every relative link's file (inside the repository) exists, and its heading where one is named."""
    errors = []
    by_rel = {p.rel: p for p in pages}
    anchors_of = {}

    def anchors(rel):
        if rel in by_rel:
            return by_rel[rel].anchors
        if rel not in anchors_of:
            anchors_of[rel] = Page(root, rel).anchors
        return anchors_of[rel]

    count = 0
    for page in pages:
        for line, target in page.links:
            if SCHEME.match(target) or target.startswith("//"):
                continue  # an absolute URL: not fetched
            count += 1
            path, _, anchor = target.partition("#")
            path = urllib.parse.unquote(path)
            if path == "":
                rel = page.rel
            elif path.startswith("/"):
                rel = os.path.normpath(path.lstrip("/"))
            else:
                rel = os.path.normpath(os.path.join(os.path.dirname(page.rel), path))
            where = f"{page.rel}:{line}"
            if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
                errors.append(f"{where}: link '{target}' leaves the repository")
                continue
            full = os.path.join(root, rel)
            if not os.path.exists(full):
                errors.append(f"{where}: link '{target}': no file {rel}")
                continue
            if not anchor:
                continue
            if rel.endswith(".md"):
                if anchor not in anchors(rel):
                    errors.append(f"{where}: link '{target}': no heading #{anchor} in {rel}")
            elif os.path.isfile(full) and re.fullmatch(r"L(\d+)(?:-L(\d+))?", anchor):
                with open(full, encoding="utf-8", errors="replace") as f:
                    lines = sum(1 for _ in f)
                last = max(int(x) for x in re.fullmatch(r"L(\d+)(?:-L(\d+))?", anchor).groups() if x)
                if last > lines:
                    errors.append(f"{where}: link '{target}': {rel} has {lines} lines")
            else:
                errors.append(f"{where}: link '{target}': an anchor into {rel}, which has no headings")
    return count, errors


def units(pages):
    """Translation units: lists of snippets, a `continues` snippet joined to the one before it."""
    result, skipped, errors = [], [], []
    for page in pages:
        last = None
        for s in page.snippets:
            reason = s.marker("fragment")
            if reason is not None:
                skipped.append(f"{s.path}:{s.line}: {reason}")
                last = None
                continue
            if s.marker("continues") is not None:
                if last is None:
                    errors.append(f"{s.path}:{s.line}: 'continues' with no compiled snippet before it")
                    continue
                last.append(s)
            else:
                last = [s]
                result.append(last)
    return result, skipped, errors


def unit_code(unit, first):
    """(the unit's own #include lines, its code): statements become functions ballast_docs_snippet_<first>, ...,
    with #line so the compiler names the Markdown file and line."""
    includes, parts = [], []
    params, opened = [], None  # the open function: its index in parts
    for s in unit:
        code = []
        for j, line in enumerate(s.text.split("\n")):
            if re.match(r"^\s*#\s*include\b", line):
                includes.append(f'#line {s.line + j} "{s.path}"\n{line}')
                code.append("")
            else:
                code.append(line)
        given = s.marker("given")
        located = f'#line {s.line} "{s.path}"\n' + "\n".join(code)
        if s.file_scope:
            if given:
                raise ValueError(f"{s.path}:{s.line}: 'given' on a snippet compiled as a file (it has main, a "
                                 "template, extern, namespace or BALLAST_PLUGIN_ENTRY)")
            if opened is not None:
                parts.append("}")
                opened = None
            parts.append(located)
        else:
            if opened is None:
                opened = len(parts)
                params = []
                parts.append(None)
            if given:
                params.append(given)
            parts[opened] = (f'#line 1 "<snippet wrapper>"\n[[maybe_unused]] static auto ballast_docs_snippet_{first}('
                             + ", ".join(params) + ") {")
            if len(parts) == opened + 1:
                first += 1
            parts.append(located)
    if opened is not None:
        parts.append("}")
    return includes, "\n".join(parts), first


def translation_unit(bodies, includes, public_headers):
    src = [f"#include <{h}>" for h in STD_HEADERS]
    src += includes if includes else [f"#include <ballast/{h}>" for h in public_headers]
    src.append('#line 1 "<snippet wrapper>"\nusing namespace ballast;')
    src += bodies
    return "\n".join(src) + "\n"


def compile_unit(root, cxx, include_dir, source):
    # From the root, so the #line file names are the Markdown files and the compiler quotes their lines.
    r = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-I", os.path.abspath(include_dir), "-x", "c++", "-"],
                       input=source, capture_output=True, text=True, cwd=root)
    return r.returncode, r.stderr


def markdown_files(root):
    files = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    docs = os.path.join(root, "docs")
    for dirpath, _, names in os.walk(docs):
        for name in sorted(names):
            if name.endswith(".md"):
                files.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(files, key=lambda f: (f != "README.md", f))


def check(root, cxx, include_dir, jobs, verbose=True):
    """Returns the list of errors (strings starting `file:line:`)."""
    pages = [Page(root, rel) for rel in markdown_files(root)]
    errors = [f"{p.rel}:{line}: {msg}" for p in pages for line, msg in p.errors]
    link_count, link_errors = check_links(root, pages)
    errors += link_errors
    todo, skipped, unit_errors = units(pages)
    errors += unit_errors
    public_headers = sorted(h for h in os.listdir(os.path.join(include_dir, "ballast")) if h.endswith(".hpp"))
    # Units of statements that include nothing themselves share one translation unit (each is its own
    # function), so the public headers are parsed once; when that fails, each is compiled alone to say which.
    alone, shared = [], []
    for unit in todo:
        try:
            includes, code, _ = unit_code(unit, 1)
        except ValueError as e:
            errors.append(str(e))
            continue
        if includes or any(s.file_scope for s in unit):
            alone.append((unit, translation_unit([code], includes, public_headers)))
        else:
            shared.append((unit, code))
    jobs_list = list(alone)
    if shared:
        n, bodies = 1, []
        for unit, _ in shared:
            _, code, n = unit_code(unit, n)
            bodies.append(code)
        jobs_list.append((None, translation_unit(bodies, [], public_headers)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda us: compile_unit(root, cxx, include_dir, us[1]), jobs_list))
        failed = [(u, src) for (u, src), (rc, _) in zip(jobs_list, results) if rc != 0 and u is not None]
        failed_stderr = [stderr for (u, _), (rc, stderr) in zip(jobs_list, results) if rc != 0 and u is not None]
        if shared and results[-1][0] != 0:
            retry = [(u, translation_unit([code], [], public_headers)) for u, code in shared]
            before = len(failed)
            for (u, src), (rc, stderr) in zip(retry, pool.map(lambda us: compile_unit(root, cxx, include_dir, us[1]),
                                                               retry)):
                if rc != 0:
                    failed.append((u, src))
                    failed_stderr.append(stderr)
            if len(failed) == before:  # each compiles alone, not together: still an error, never a pass
                errors.append(f"{shared[0][0][0].path}:{shared[0][0][0].line}: the snippets compile one by one but "
                              f"not together:\n{results[-1][1].rstrip()}")
    for (unit, _), stderr in zip(failed, failed_stderr):
        first = unit[0]
        errors.append(f"{first.path}:{first.line}: this snippet does not compile:\n{stderr.rstrip()}")
    if verbose:
        snippet_count = sum(len(u) for u in todo)
        print(f"docs_check: {len(pages)} pages; {snippet_count} C++ snippets compiled in {len(jobs_list)} "
              f"translation units, "
              f"{len(skipped)} not compiled; {link_count} relative links")
        for s in skipped:
            print(f"  fragment, not compiled: {s}")
    return errors


SELF_TEST_PAGE = """# Self-test page

## A heading

## A heading

Good links: [this page](#a-heading), [its repeat](#a-heading-1), [other](docs/other.md),
[other's heading](docs/other.md#the-other-page), [a URL](https://example.org/missing).
A link in code is not one: `[x](missing-in-code.md)`.

BAD_LINK_FILE [gone](no-such-file.md)
BAD_LINK_ANCHOR [gone](docs/other.md#no-such-heading)
BAD_LINK_SELF [gone](#nowhere)

```sh
[not a link](missing-in-fence.md)
```

<!-- snippet: given const DeriveContext& ctx, const Model& model -->
```cpp
auto plan = plan_derivations(model);
if (!plan) return 2;
auto values = derive_weights(ctx, *plan);
return values.ok() ? 0 : 1;
```

<!-- snippet: given const DeriveContext& ctx, const Model& model -->
```cpp
auto values = derive_weights(ctx, plan_derivations(model));  // BAD_SNIPPET_RESULT
```

```cpp
auto model = load_onnx("model.onnx");  // BAD_SNIPPET_UNDECLARED
use(model);
```

```cpp
#include <ballast/backend_registry.hpp>

int main() {
  auto gpu = ballast::open_backend("cpu");
  return gpu.ok() ? 0 : 1;
}
```

```cpp
auto first = ballast::open_backend("cpu");
```

<!-- snippet: continues -->
```cpp
if (!first) return;
```

<!-- snippet: fragment pseudo-code, to show the marker is honoured -->
```cpp
this is not C++;
```

<!-- snippet: fragment -->
```cpp
BAD_MARKER_NO_REASON;
```

<!-- snippet: given int x -->
BAD_MARKER_STRAY
"""

SELF_TEST_OTHER = """# The other page

Back: [the page](../README.md#a-heading), BAD_LINK_UP [outside](../../outside.md).
"""


def self_test(cxx, include_dir):
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write(SELF_TEST_PAGE)
        with open(os.path.join(root, "docs", "other.md"), "w") as f:
            f.write(SELF_TEST_OTHER)
        errors = check(root, cxx, include_dir, jobs=os.cpu_count() or 1, verbose=False)
        expected = {}
        for rel, text in (("README.md", SELF_TEST_PAGE), ("docs/other.md", SELF_TEST_OTHER)):
            for n, line in enumerate(text.split("\n"), 1):
                for tag in re.findall(r"BAD_[A-Z_]+", line):
                    # A marker's error names the marker's line, the snippet's the fence's next line.
                    if tag == "BAD_MARKER_NO_REASON":
                        expected[tag] = f"{rel}:{n - 2}:"
                    elif tag == "BAD_MARKER_STRAY":
                        expected[tag] = f"{rel}:{n - 1}:"
                    else:
                        expected[tag] = f"{rel}:{n}:"
        failures = []
        reported = list(errors)
        for tag, where in sorted(expected.items()):
            hits = [e for e in reported if e.startswith(where)]
            if not hits:
                failures.append(f"{tag}: expected an error at {where}, got none")
            for h in hits:
                reported.remove(h)
        for e in reported:
            failures.append(f"unexpected error: {e}")
        # The compiler's own message names the Markdown file and line (the #line directives).
        where = expected["BAD_SNIPPET_RESULT"]
        for e in errors:
            if e.startswith(where) and where not in e.split("\n", 1)[-1]:
                failures.append("the compiler's message does not name the Markdown line: " + e)
        for f in failures:
            print("self-test: " + f)
        print(f"self-test: {len(expected)} planted errors, {len(failures)} failures")
        return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    include_dir = os.path.join(args.root, "include")
    if args.self_test:
        return self_test(args.cxx, include_dir)
    errors = check(args.root, args.cxx, include_dir, args.jobs)
    for e in errors:
        print(e)
    print(f"docs_check: {len(errors)} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
