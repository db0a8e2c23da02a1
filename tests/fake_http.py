"""The fake vendor server's HTTP plumbing (tests/fakes.py): one request handler class.

Data contract: `_Handler` is a BaseHTTPRequestHandler (HTTP/1.1 keep-alive, no Nagle) bound to a
FakeVendor as the class attribute `fake` (FakeVendor.start makes a subclass per server). Every
method goes to `fake._handle(method, target, headers, body) -> Answer`; it then waits the
answer's delay (woken by `fake._stopping`), resets the connection for `drop`, sends a chunked
body piece by piece for `chunks` (resetting the connection at `drop_at`, falling silent at
`stall_at`), else the whole body with a Content-Length. Connections are
registered in `fake._conns` so `stop()` can close them.
"""
import socket
import struct
from http.server import BaseHTTPRequestHandler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small answers must not wait for delayed ACKs (~40 ms each)
    fake = None  # bound per server by FakeVendor.start

    def setup(self):
        super().setup()
        with self.fake._lock:
            self.fake._conns.add(self.connection)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        finally:
            with self.fake._lock:
                self.fake._conns.discard(self.connection)

    def handle(self):
        try:
            super().handle()
        except OSError:  # the client reset an idle keep-alive connection
            self.close_connection = True

    def log_message(self, *args):
        pass

    def do_GET(self):
        try:
            headers = {name.lower(): value for name, value in self.headers.items()}
            answer = self.fake._handle(self.command, self.path, headers, self._read_body(headers))
            if answer.delay and self.fake._stopping.wait(answer.delay):
                self.close_connection = True
                return
            if answer.drop:
                return self._reset()
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            if answer.chunks is not None:
                return self._send_chunks(answer)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)
        except OSError:  # client went away (timeout) or the server is stopping
            self.close_connection = True

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _send_chunks(self, answer):
        """A chunked body sent piece by piece (a slow stream), or reset mid-way (a dropped one)."""
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for index, chunk in enumerate(answer.chunks):
            if answer.drop_at is not None and index >= answer.drop_at:
                return self._reset()
            if answer.stall_at is not None and index >= answer.stall_at:
                self.fake._stopping.wait()    # silent, the connection held open, until stop()
                self.close_connection = True
                return
            if index >= answer.first and answer.gap and self.fake._stopping.wait(answer.gap):
                self.close_connection = True
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        if answer.drop_at is not None and answer.drop_at >= len(answer.chunks):
            return self._reset()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _read_body(self, headers) -> bytes:
        if "chunked" not in headers.get("transfer-encoding", "").lower():
            return self.rfile.read(int(headers.get("content-length") or 0))
        chunks = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()
            if size == 0:
                return b"".join(chunks)

    def _reset(self):
        # SO_LINGER 0 + a real close sends RST: the client sees a connection reset, no response.
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()
