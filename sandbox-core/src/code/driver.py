# sandbox-sdk emulated kernel driver: one stateful Python context over stdin/stdout.
#
# Started as `python3 -u <this file> [--mailbox DIR]`; standard library only (IPython formats
# results when it imports, matplotlib figures become PNG when it imports). The SDK speaks to it
# in JSON lines, on stdin or, with --mailbox, as files DIR/00000000, DIR/00000001, ... of one
# line each, read in order and removed:
#
#   in:  {"type":"hello","key":K,"cwd":..,"max_output":N,"inline_limit":N,"spill_dir":D}  (first)
#        {"type":"execute","id":I,"code":C,"env_vars":{..}}
#        {"type":"interrupt","id":I}
#        {"type":"shutdown"}
#   out: SEQ MAC JSON per line: SEQ counts from 1, MAC is the first 16 bytes of
#        HMAC-SHA256(K, "SEQ JSON") in hex, JSON one object in E2B's vocabulary (number_of_executions, stdout,
#        stderr, result, error, end_of_execution) plus ready and truncated, each with the "id" of
#        its request.
#
# The channel cannot be written by accident or by a child: the real stdin and stdout are
# duplicated to private descriptors that children do not inherit, fd 0 becomes /dev/null and fd
# 1 and 2 become pipes the driver drains into stdout/stderr frames, and every frame is sealed
# with the key the SDK sent first (in no argv, environment or frame; a mailbox file holding it
# is removed as soon as it is read), so even whoever can read the frames cannot forge or replay
# one. Code in this same process could still find the key in memory; it can then lie only
# about its own output.
import ast
import base64
import builtins
import codecs
import hashlib
import hmac
import io
import json
import linecache
import os
import queue
import select
import signal
import sys
import threading
import time
import traceback

CHUNK = 64 * 1024
FLUSH_EVERY = 0.05
DRIVER_FILE = os.path.abspath(__file__)


class Channel:
    """The protocol's out side: sealed JSON lines on a private descriptor."""

    def __init__(self, fd, key):
        self.fd = fd
        self.key = key.encode()
        self.seq = 0
        self.lock = threading.Lock()

    def send(self, obj):
        body = json.dumps(obj, ensure_ascii=False, default=str).encode()
        with self.lock:
            self.seq += 1
            head = b"%d " % self.seq
            mac = hmac.new(self.key, head + body, hashlib.sha256).hexdigest()[:32].encode()
            data = head + mac + b" " + body + b"\n"
            view = memoryview(data)
            while view:
                written = os.write(self.fd, view)
                view = view[written:]


class Cell:
    """What the driver knows of the cell now running (or of none)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.id = None
        self.in_user_code = False
        self.emitted = 0
        self.dropped = 0
        self.max_output = 1 << 20
        self.cancelled = set()


class Output:
    """Text for stdout or stderr: buffered, sent at a newline, at CHUNK bytes or every 50 ms,
    and cut at the cell's output cap."""

    def __init__(self, name, channel, cell):
        self.name = name
        self.channel = channel
        self.cell = cell
        self.buffer = []
        self.size = 0
        self.lock = threading.Lock()

    def write(self, text):
        if not text:
            return
        with self.lock:
            self.buffer.append(text)
            self.size += len(text)
            if "\n" in text or self.size >= CHUNK:
                self._flush_locked()

    def flush(self):
        with self.lock:
            self._flush_locked()

    def _flush_locked(self):
        if not self.buffer:
            return
        text = "".join(self.buffer)
        self.buffer = []
        self.size = 0
        with self.cell.lock:
            cell_id = self.cell.id
            room = self.cell.max_output - self.cell.emitted
            encoded = len(text.encode("utf-8", "replace"))
            if cell_id is None:
                return
            if encoded > room:
                keep = text.encode("utf-8", "replace")[: max(room, 0)].decode("utf-8", "ignore")
                self.cell.dropped += encoded - len(keep.encode("utf-8"))
                text = keep
            self.cell.emitted += len(text.encode("utf-8", "replace"))
        for start in range(0, len(text), CHUNK):
            self.channel.send({"type": self.name, "id": cell_id, "text": text[start : start + CHUNK]})


class TextSink(io.TextIOBase):
    """sys.stdout / sys.stderr for code in the cell."""

    def __init__(self, output, fileno):
        self.output = output
        self._fileno = fileno

    @property
    def encoding(self):
        return "utf-8"

    def writable(self):
        return True

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not " + type(text).__name__)
        self.output.write(text)
        return len(text)

    def flush(self):
        self.output.flush()

    def fileno(self):
        return self._fileno

    def isatty(self):
        return False


class Pipe:
    """A pipe that children and C code write to (fd 1 or 2), copied into the cell's output by a
    thread, and emptied by the cell's end under the same lock, so nothing read is left behind."""

    def __init__(self, fd, output):
        self.fd = fd
        self.output = output
        self.lock = threading.Lock()
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        os.set_blocking(fd, False)
        threading.Thread(target=self.follow, daemon=True).start()

    def follow(self):
        while True:
            try:
                select.select([self.fd], [], [])
            except InterruptedError:
                continue
            if not self.drain():
                return

    def drain(self):
        """Copies what the pipe holds now; False at its end."""
        with self.lock:
            while True:
                try:
                    data = os.read(self.fd, CHUNK)
                except (BlockingIOError, InterruptedError):
                    return True
                except OSError:
                    return False
                if not data:
                    return False
                self.output.write(self.decoder.decode(data))


class Publisher:
    """Turns objects into result frames (MIME bundles), spilling large formats to files."""

    BINARY = {"image/png", "image/jpeg", "application/pdf"}
    FIELDS = {
        "text/plain": "text",
        "text/html": "html",
        "text/markdown": "markdown",
        "image/svg+xml": "svg",
        "image/png": "png",
        "image/jpeg": "jpeg",
        "application/pdf": "pdf",
        "text/latex": "latex",
        "application/json": "json",
        "application/javascript": "javascript",
        "e2b/data": "data",
        "e2b/chart": "chart",
    }
    REPRS = [
        ("_repr_html_", "text/html"),
        ("_repr_markdown_", "text/markdown"),
        ("_repr_svg_", "image/svg+xml"),
        ("_repr_png_", "image/png"),
        ("_repr_jpeg_", "image/jpeg"),
        ("_repr_pdf_", "application/pdf"),
        ("_repr_latex_", "text/latex"),
        ("_repr_json_", "application/json"),
        ("_repr_javascript_", "application/javascript"),
    ]

    def __init__(self, channel, cell, inline_limit, spill_dir):
        self.channel = channel
        self.cell = cell
        self.inline_limit = inline_limit
        self.spill_dir = spill_dir
        self.formatter = None
        try:
            from IPython.core.formatters import DisplayFormatter

            self.formatter = DisplayFormatter()
        except Exception:
            self.formatter = None

    def bundle(self, obj):
        figure = figure_png(obj)
        if figure is not None:
            return {"image/png": figure, "text/plain": repr(obj)}
        data = {}
        if self.formatter is not None:
            try:
                data, _ = self.formatter.format(obj)
                data = dict(data)
            except Exception:
                data = {}
        if not data:
            method = getattr(obj, "_repr_mimebundle_", None)
            if callable(method):
                try:
                    got = method(include=None, exclude=None)
                    if isinstance(got, tuple):
                        got = got[0]
                    if isinstance(got, dict):
                        data.update(got)
                except Exception:
                    pass
            for name, mime in self.REPRS:
                if mime in data or isinstance(obj, type):
                    continue
                method = getattr(obj, name, None)
                if not callable(method):
                    continue
                try:
                    got = method()
                except Exception:
                    continue
                if isinstance(got, tuple):
                    got = got[0]
                if got is not None:
                    data[mime] = got
        if "text/plain" not in data:
            try:
                data["text/plain"] = repr(obj)
            except Exception as error:
                data["text/plain"] = "<unrepresentable %s: %s>" % (type(obj).__name__, error)
        if isinstance(obj, str) and data.get("text/plain") == repr(obj):
            # As E2B's server does: a string's text is the string, not its repr.
            data["text/plain"] = obj
        return data

    def publish(self, obj, main):
        self.send_bundle(self.bundle(obj), main)

    def send_bundle(self, data, main):
        frame = {"type": "result", "id": self.cell.id, "is_main_result": bool(main)}
        extra = {}
        spilled = []
        for mime, value in data.items():
            if isinstance(value, (bytes, bytearray)):
                value = base64.b64encode(bytes(value)).decode()
            if mime in self.BINARY and isinstance(value, str):
                raw_size = len(value) * 3 // 4
            else:
                raw_size = len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
            if raw_size > self.inline_limit:
                spilled.append(self.spill(mime, value))
                continue
            field = self.FIELDS.get(mime)
            if field is None:
                extra[mime] = value
            else:
                frame[field] = value
        if extra:
            frame["extra"] = extra
        if spilled:
            frame["spilled"] = spilled
        self.channel.send(frame)

    def spill(self, mime, value):
        if mime in self.BINARY and isinstance(value, str):
            raw = base64.b64decode(value)
        elif isinstance(value, str):
            raw = value.encode("utf-8")
        else:
            raw = json.dumps(value, default=str).encode("utf-8")
        os.makedirs(self.spill_dir, exist_ok=True)
        name = hashlib.sha256(raw).hexdigest()[:16] + "." + mime.replace("/", "_").replace("+", "_")
        path = os.path.join(self.spill_dir, name)
        with open(path, "wb") as handle:
            handle.write(raw)
        return {"mime": mime, "path": path, "bytes": len(raw)}


def figure_png(obj):
    """A matplotlib figure as base64 PNG; None for anything else or a blank figure."""
    module = sys.modules.get("matplotlib.figure")
    if module is None or not isinstance(obj, module.Figure):
        return None
    if not obj.get_axes():
        return None
    buffer = io.BytesIO()
    obj.savefig(buffer, format="png", bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


class Figures:
    """Open matplotlib figures become display results at plt.show() and at the end of a cell."""

    def __init__(self, publisher):
        self.publisher = publisher
        self.patched = False

    def patch(self):
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None or self.patched:
            return
        self.patched = True
        figures = self

        def show(*args, **kwargs):
            figures.flush()

        pyplot.show = show

    def flush(self):
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        self.patch()
        for number in list(pyplot.get_fignums()):
            figure = pyplot.figure(number)
            if figure.get_axes():
                self.publisher.publish(figure, False)
        pyplot.close("all")


def user_traceback(error):
    """The traceback of code in the cell, without the driver's own frames."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == DRIVER_FILE:
        tb = tb.tb_next
    lines = traceback.format_exception(type(error), error, tb)
    return "".join(lines)


def mailbox(path):
    """The requests in mailbox `path`, in order, each removed once read; polled every 5 ms,
    backing off to 50 ms while nothing comes. A file not ending in a newline is still being
    written."""
    number = 0
    idle = 0.005
    while True:
        name = os.path.join(path, "%08d" % number)
        try:
            with open(name, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            time.sleep(idle)
            idle = min(idle * 2, 0.05)
            continue
        if not data.endswith(b"\n"):
            time.sleep(0.005)
            continue
        os.unlink(name)
        number += 1
        idle = 0.005
        yield data


def main():
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    diag = os.dup(2)
    if len(sys.argv) == 3 and sys.argv[1] == "--mailbox":
        reader = mailbox(sys.argv[2])
    else:
        reader = open(proto_in, "rb", buffering=1 << 16)
    hello = json.loads(next(reader, b"{}"))
    channel = Channel(proto_out, hello.get("key", ""))
    cell = Cell()
    cell.max_output = int(hello.get("max_output") or cell.max_output)
    spill_dir = os.path.abspath(hello.get("spill_dir") or ".sbox/out")
    cwd = hello.get("cwd")
    os.environ.setdefault("MPLBACKEND", "Agg")

    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    os.dup2(out_write, 1)
    os.dup2(err_write, 2)
    os.close(out_write)
    os.close(err_write)
    stdout = Output("stdout", channel, cell)
    stderr = Output("stderr", channel, cell)
    sys.stdin = open(os.devnull, "r")
    sys.stdout = TextSink(stdout, 1)
    sys.stderr = TextSink(stderr, 2)
    pipes = [Pipe(out_read, stdout), Pipe(err_read, stderr)]

    def flusher():
        while True:
            time.sleep(FLUSH_EVERY)
            stdout.flush()
            stderr.flush()

    threading.Thread(target=flusher, daemon=True).start()

    if cwd:
        try:
            os.chdir(cwd)
        except OSError as error:
            channel.send({"type": "ready", "error": "cannot enter %s: %s" % (cwd, error.strerror)})
            return

    publisher = Publisher(channel, cell, int(hello.get("inline_limit") or 1 << 20), spill_dir)
    figures = Figures(publisher)
    namespace = {"__name__": "__main__", "__builtins__": builtins}

    def display(*objects, **_):
        for obj in objects:
            publisher.publish(obj, False)

    builtins.display = display

    main_thread = threading.get_ident()
    requests = queue.Queue()

    def on_sigint(signum, frame):
        if cell.in_user_code:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)

    def interrupt(ident):
        # A SIGINT that lands just before a blocking call starts (time.sleep, a read) is only
        # acted on when that call returns, so it is sent again until the cell has left its
        # code; the SDK kills the kernel if that takes longer than its grace. A cell not in its
        # code yet is marked so that it never starts.
        for _ in range(200):
            with cell.lock:
                if cell.id != ident or not cell.in_user_code:
                    cell.cancelled.add(ident)
                    return
                signal.pthread_kill(main_thread, signal.SIGINT)
            time.sleep(0.05)

    def read_requests():
        for line in reader:
            try:
                request = json.loads(line)
            except ValueError:
                continue
            if request.get("type") == "interrupt":
                threading.Thread(target=interrupt, args=(request.get("id"),), daemon=True).start()
            else:
                requests.put(request)
        requests.put({"type": "shutdown"})

    threading.Thread(target=read_requests, daemon=True).start()

    try:
        import importlib.util

        has_matplotlib = importlib.util.find_spec("matplotlib") is not None
        has_ipython = publisher.formatter is not None
    except Exception:
        has_matplotlib = has_ipython = False
    channel.send(
        {
            "type": "ready",
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "ipython": has_ipython,
            "matplotlib": has_matplotlib,
        }
    )

    count = 0
    while True:
        request = requests.get()
        if request.get("type") == "shutdown":
            return
        if request.get("type") != "execute":
            continue
        count += 1
        try:
            run_cell(request, count, cell, channel, namespace, publisher, figures, stdout, stderr, pipes)
        except KeyboardInterrupt:
            # An interrupt that landed between the cell's end and its last frame: the cell is over.
            pass


def run_cell(request, count, cell, channel, namespace, publisher, figures, stdout, stderr, pipes):
    cell_id = request.get("id")
    with cell.lock:
        cell.id = cell_id
        cell.emitted = 0
        cell.dropped = 0
        cancelled = cell_id in cell.cancelled
        cell.cancelled.discard(cell_id)
    if cancelled:
        channel.send({"type": "end_of_execution", "id": cell_id, "status": "interrupted"})
        with cell.lock:
            cell.id = None
        return
    channel.send({"type": "number_of_executions", "id": cell_id, "execution_count": count})
    env = request.get("env_vars") or {}
    saved = {key: os.environ.get(key) for key in env}
    code = request.get("code") or ""
    filename = "<cell-%d>" % count
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    status = "ok"
    try:
        for key, value in env.items():
            os.environ[str(key)] = str(value)
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, filename, "exec")
        tail = compile(last, filename, "eval") if last is not None else None
        value = None
        with cell.lock:
            # An interrupt that came while the cell was being parsed: it never starts.
            if cell_id in cell.cancelled:
                raise KeyboardInterrupt
            cell.in_user_code = True
        try:
            exec(body, namespace)
            if tail is not None:
                value = eval(tail, namespace)
        finally:
            cell.in_user_code = False
        figures.flush()
        if value is not None:
            namespace["_"] = value
            publisher.publish(value, True)
    except BaseException as error:
        cell.in_user_code = False
        status = "interrupted" if isinstance(error, KeyboardInterrupt) else "error"
        try:
            figures.flush()
        except Exception:
            pass
        stdout.flush()
        stderr.flush()
        channel.send(
            {
                "type": "error",
                "id": cell_id,
                "name": type(error).__name__,
                "value": str(error),
                "traceback": user_traceback(error),
            }
        )
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
        sys.stdout.flush()
        sys.stderr.flush()
        for pipe in pipes:
            pipe.drain()
        stdout.flush()
        stderr.flush()
        with cell.lock:
            dropped = cell.dropped
            cell.id = None
            cell.cancelled.discard(cell_id)
        if dropped:
            channel.send({"type": "truncated", "id": cell_id, "dropped": dropped})
        channel.send({"type": "end_of_execution", "id": cell_id, "status": status})


if __name__ == "__main__":
    main()
