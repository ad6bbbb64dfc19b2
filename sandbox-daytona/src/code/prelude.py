# Rich results on Daytona's text-only interpreter (sandbox-daytona PROTOCOL.md §12). The SDK
# runs this once in each context, then `__sbox_install(KEY)`; every cell after that is sent as
# `__sbox_cell(CODE)`. Results, the execution count and the worker's pid go out on stdout as
# "\x1f", the key, one JSON object and a newline; everything else the cell prints is its own.


def __sbox_install(key):
    import ast
    import base64
    import json
    import os
    import sys

    g = globals()
    state = {"count": 0}
    formats = (
        ("_repr_html_", "html"),
        ("_repr_markdown_", "markdown"),
        ("_repr_svg_", "svg"),
        ("_repr_png_", "png"),
        ("_repr_jpeg_", "jpeg"),
        ("_repr_pdf_", "pdf"),
        ("_repr_latex_", "latex"),
        ("_repr_json_", "json"),
        ("_repr_javascript_", "javascript"),
    )

    def emit(frame):
        try:
            line = json.dumps(frame)
        except (TypeError, ValueError):
            frame = {k: v for k, v in frame.items() if k in ("type", "is_main_result", "text")}
            line = json.dumps(frame)
        sys.stdout.flush()
        sys.stdout.write("\x1f" + key + line + "\n")
        sys.stdout.flush()

    def bundle(value, main):
        out = {"type": "result", "is_main_result": main}
        for method, field in formats:
            fn = getattr(value, method, None)
            if not callable(fn) or isinstance(value, type):
                continue
            try:
                got = fn()
            except Exception:
                continue
            if isinstance(got, tuple):
                got = got[0]
            if got is None:
                continue
            if isinstance(got, bytes):
                got = base64.b64encode(got).decode("ascii")
            out[field] = got
        try:
            out["text"] = value if isinstance(value, str) else repr(value)
        except Exception as error:
            out["text"] = "<unrepresentable %s: %s>" % (type(value).__name__, error)
        return out

    def figures():
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        import io

        for number in plt.get_fignums():
            figure = plt.figure(number)
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png")
            emit({
                "type": "result",
                "is_main_result": False,
                "png": base64.b64encode(buffer.getvalue()).decode("ascii"),
                "text": repr(figure),
            })
        plt.close("all")

    def display(*values):
        for value in values:
            emit(bundle(value, False))

    def cell(source):
        state["count"] += 1
        emit({"type": "number_of_executions", "execution_count": state["count"]})
        tree = ast.parse(source, "<string>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<string>", "exec"), g)
        value = eval(compile(last, "<string>", "eval"), g) if last is not None else None
        figures()
        if value is not None:
            emit(bundle(value, True))

    keep = set(g) | {"__sbox_cell", "__sbox_reset", "display"}

    def reset():
        for name in [n for n in g if n not in keep]:
            del g[name]
        state["count"] = 0

    g["__sbox_cell"] = cell
    g["__sbox_reset"] = reset
    g["display"] = display
    emit({"type": "pid", "pid": os.getpid()})
