"""Writes a `texts` directory from an installed Harbor's Terminus 2 (`terminus texts import-harbor`).

Run by the interpreter that has Harbor installed: `python3 import_harbor.py OUT_DIR`. Copies the
agent's template files as they are, and reads the other texts from the agent's source with
Python's `ast`: each is found by where it sits in the code (which function, which variable, which
expressions it is made of), never by its wording, and turned into a template whose placeholders
are the ones terminus fills in. A text that is not where this expects it is refused by name: that
Harbor's source changed, and the directory is not written.

Prints one JSON line: {"harbor": VERSION, "source": PATH, "written": [FILE, ...]}.
"""

import ast
import json
import pathlib
import shutil
import sys


class Missing(Exception):
    """A text this Harbor's source does not have where it is expected."""


def escape(text):
    return text.replace("{", "{{").replace("}", "}}")


def template(node, fields, what):
    """The template of a string expression: literal parts escaped, each expression named in
    `fields` (its source text -> placeholder) a placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return escape(node.value)
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(escape(part.value))
            elif isinstance(part, ast.FormattedValue):
                if part.conversion != -1 or part.format_spec is not None:
                    raise Missing(f"{what}: a formatted field ({ast.unparse(part.value)}) is not a plain value")
                out.append(placeholder(part.value, fields, what))
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return template(node.left, fields, what) + template(node.right, fields, what)
    return placeholder(node, fields, what)


def placeholder(node, fields, what):
    source = ast.unparse(node)
    if source not in fields:
        raise Missing(f"{what}: it is made of `{source}`, which is none of {sorted(fields)}")
    return "{" + fields[source] + "}"


def expressions(node):
    """The source texts of the expressions a string expression is made of."""
    if isinstance(node, ast.Constant):
        return set()
    if isinstance(node, ast.JoinedStr):
        return {ast.unparse(p.value) for p in node.values if isinstance(p, ast.FormattedValue)}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return expressions(node.left) | expressions(node.right)
    return {ast.unparse(node)}


def is_text(node):
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return is_text(node.left) or is_text(node.right)
    return False


class Source:
    def __init__(self, path):
        self.path = path
        self.tree = ast.parse(path.read_text(), str(path))
        self.functions = {}
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, node)

    def function(self, name, what):
        if name not in self.functions:
            raise Missing(f"{what}: the function `{name}` is gone")
        return self.functions[name]

    def values(self, function, target, what):
        """Each string value assigned (or added, `+=`) to `target` in `function`, in order."""
        found = []
        for node in ast.walk(self.function(function, what)):
            if isinstance(node, ast.Assign) and any(ast.unparse(t) == target for t in node.targets):
                found.append(node.value)
            elif isinstance(node, ast.AugAssign) and ast.unparse(node.target) == target:
                found.append(node.value)
        found = [v for v in found if is_text(v)]
        found.sort(key=lambda v: (v.lineno, v.col_offset))
        return found

    def returns(self, function, what):
        """Each string value `function` returns, in order."""
        found = [
            n.value
            for n in ast.walk(self.function(function, what))
            if isinstance(n, ast.Return) and n.value is not None and is_text(n.value)
        ]
        found.sort(key=lambda v: (v.lineno, v.col_offset))
        return found

    def all_strings(self, what):
        """Every string expression of the module that is not part of a larger one."""
        inner = set()
        out = []
        for node in ast.walk(self.tree):
            if is_text(node) and id(node) not in inner:
                out.append(node)
                for child in ast.walk(node):
                    if child is not node:
                        inner.add(id(child))
        return out


def one(candidates, fields, what, extra=None):
    """The one candidate made of exactly the expressions of `fields` (and `extra`)."""
    want = set(fields) | set(extra or ())
    matching = [c for c in candidates if expressions(c) == want]
    if len(matching) != 1:
        raise Missing(f"{what}: {len(matching)} strings made of {sorted(want)} where one was expected")
    return matching[0]


def main(out_dir):
    import harbor

    root = pathlib.Path(harbor.__file__).parent / "agents" / "terminus_2"
    source_file = root / "terminus_2.py"
    if not source_file.is_file():
        raise Missing(f"Terminus 2's source is not at {source_file}")
    src = Source(source_file)
    texts = {}

    for name, file in [
        ("prompt-json.txt", "terminus-json-plain.txt"),
        ("prompt-xml.txt", "terminus-xml-plain.txt"),
        ("timeout.txt", "timeout.txt"),
    ]:
        path = root / "templates" / file
        if not path.is_file():
            raise Missing(f"{name}: the template file {path} is gone")
        texts[name] = path.read_text()

    what = "confirmation-json.txt / confirmation-xml.txt"
    confirmations = src.returns("_get_completion_confirmation_message", what)
    if len(confirmations) != 2:
        raise Missing(f"{what}: `_get_completion_confirmation_message` returns {len(confirmations)} texts, not 2")
    for name, node in zip(["confirmation-json.txt", "confirmation-xml.txt"], confirmations):
        texts[name] = template(node, {"terminal_output": "terminal_output"}, name)

    what = "parse-error-json.txt / parse-error-xml.txt"
    kinds = src.returns("_get_error_response_type", what)
    if len(kinds) != 2 or not all(isinstance(k, ast.Constant) for k in kinds):
        raise Missing(f"{what}: `_get_error_response_type` does not return two plain strings")
    call = "self._get_error_response_type()"
    node = one(src.all_strings(what), ["feedback", call], what)
    for name, kind in zip(["parse-error-json.txt", "parse-error-xml.txt"], kinds):
        texts[name] = template(node, {"feedback": "feedback", call: "RESPONSE_TYPE"}, name).replace(
            "{RESPONSE_TYPE}", escape(kind.value)
        )

    name = "warnings.txt"
    limited = "self._limit_output_length(terminal_output)"
    node = one(src.all_strings(name), ["feedback", limited], name)
    texts[name] = template(node, {"feedback": "feedback", limited: "terminal_output"}, name)

    name = "output-limit.txt"
    texts[name] = template(one(src.values("_query_llm", "error_msg", name), ["limit_str"], name), {"limit_str": "limit"}, name)
    name = "output-limit-warnings.txt"
    node = one(src.values("_query_llm", "warnings_text", name), ["parse_result.warning"], name)
    texts[name] = template(node, {"parse_result.warning": "warnings"}, name)

    name = "summary.txt"
    fields = {"original_instruction": "instruction"}
    texts[name] = template(one(src.values("_summarize", "summary_prompt", name), fields, name), fields, name)
    name = "questions.txt"
    fields = {"original_instruction": "instruction", "summary_response.content": "summary", "current_screen": "screen"}
    texts[name] = template(one(src.values("_summarize", "question_prompt", name), fields, name), fields, name)
    name = "answers.txt"
    fields = {"model_questions": "questions"}
    texts[name] = template(one(src.values("_summarize", "answer_request_prompt", name), fields, name), fields, name)
    name = "handoff.txt"
    fields = {"answers_response.content": "answers"}
    texts[name] = template(one(src.values("_summarize", "handoff_prompt", name), fields, name), fields, name)

    name = "short-summary.txt"
    fields = {"original_instruction": "instruction", "limited_screen": "screen"}
    texts[name] = template(one(src.values("_query_llm", "short_prompt", name), fields, name), fields, name)
    name = "short-summary-restart.txt"
    fields = {"original_instruction": "instruction", "short_llm_response.content": "summary"}
    texts[name] = template(one(src.values("_query_llm", "summary_prompt", name), fields, name), fields, name)
    name = "ultimate-fallback.txt"
    fields = {"original_instruction": "instruction", "limited_screen": "screen"}
    texts[name] = template(one(src.values("_query_llm", "summary_prompt", name), fields, name), fields, name)

    what = "mcp-header.txt / mcp-stdio.txt / mcp-url.txt"
    mcp = src.values("run", "mcp_info", what)
    name = "mcp-header.txt"
    texts[name] = template(one(mcp, [], name), {}, name)
    name = "mcp-stdio.txt"
    fields = {"s.name": "name", "s.command": "command", "args_str": "args"}
    texts[name] = template(one(mcp, fields, name), fields, name)
    name = "mcp-url.txt"
    fields = {"s.name": "name", "s.transport": "transport", "s.url": "url"}
    texts[name] = template(one(mcp, fields, name), fields, name)

    name = "skills.txt"
    call = "tostring(root, encoding='unicode')"
    fields = {call: "skills"}
    texts[name] = template(one(src.returns("_build_skills_section", name), fields, name), fields, name)

    out = pathlib.Path(out_dir)
    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for name, text in sorted(texts.items()):
        (staging / name).write_text(text)
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    version = getattr(harbor, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("harbor")
    print(json.dumps({"harbor": version, "source": str(source_file), "written": sorted(texts)}))


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except ImportError as e:
        print(f"this Python has no Harbor: {e}", file=sys.stderr)
        sys.exit(3)
    except Missing as e:
        print(f"cannot import {e}", file=sys.stderr)
        sys.exit(4)
