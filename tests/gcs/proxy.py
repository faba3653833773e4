"""A test-only HTTPS proxy from Google's storage endpoints to a local fake-gcs-server.

  python tests/gcs/proxy.py --upstream http://127.0.0.1:PORT --ca_dir DIR

TensorFlow's and jaxlib's GCS clients (libcurl) have https://www.googleapis.com and
https://storage.googleapis.com compiled in. With `https_proxy` set to this proxy and
`CURL_CA_BUNDLE=DIR/ca.pem` they send `CONNECT host:443` here; the proxy answers with a
certificate of a throwaway CA made at start (DIR/ca.pem, never trusted elsewhere), reads
the plain requests inside the tunnel and sends them to the emulator. Plain-http requests
in proxy form (`GET http://host/path`, through `http_proxy`: the emulator's resumable
upload URLs carry the host the request named) go the same way. Three repairs:
- `Transfer-Encoding: identity` (sent by TF's client) is dropped: fake-gcs-server answers
  it with 501. Chunked request bodies are sent on with a Content-Length.
- `GET /storage/v1/b/B/storageLayout` (TensorFlow 2.21's directory rename asks whether a
  bucket is hierarchical) is answered here: fake-gcs-server lacks it.
- Responses go back with a Content-Length, never chunked.

Prints `port N` on stdout once listening, and one line per request on stderr (the
fixture's proxy.log). Every socket has a timeout; the process ends
on SIGTERM. It only ever connects to the upstream given.
"""

import argparse
import datetime
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import time
import urllib.parse

HOSTS = ("www.googleapis.com", "storage.googleapis.com")
TIMEOUT_S = 120.0  # a client or the emulator silent this long: the connection is dropped
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
              "trailer", "transfer-encoding", "upgrade", "expect", "content-length"}
LAYOUT = re.compile(r"^/storage/v1/b/([^/?]+)/storageLayout(\?.*)?$")


def make_certificates(folder: str) -> tuple[str, str, str]:
  """A throwaway CA (ca.pem) and a certificate for HOSTS signed by it (leaf.pem, leaf.key).
  With the `cryptography` package when it is installed, else the openssl command."""
  ca, cert, key = (os.path.join(folder, n) for n in ("ca.pem", "leaf.pem", "leaf.key"))
  try:
    _certificates_with_cryptography(ca, cert, key)
  except ImportError:
    _certificates_with_openssl(folder, ca, cert, key)
  return ca, cert, key


def _certificates_with_cryptography(ca_path, cert_path, key_path):
  from cryptography import x509  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=g-import-not-at-top
  from cryptography.x509.oid import NameOID  # pylint: disable=g-import-not-at-top
  now = datetime.datetime.now(datetime.timezone.utc)
  start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=7)

  def name(common):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

  ca_key = ec.generate_private_key(ec.SECP256R1())
  ca = (x509.CertificateBuilder().subject_name(name("attention_lab test CA"))
        .issuer_name(name("attention_lab test CA")).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                     False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256()))
  key = ec.generate_private_key(ec.SECP256R1())
  leaf = (x509.CertificateBuilder().subject_name(name(HOSTS[0])).issuer_name(ca.subject)
          .public_key(key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in HOSTS]),
                         critical=False)
          .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
          .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                         critical=False)
          .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
              ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
  pem = serialization.Encoding.PEM
  with open(ca_path, "wb") as f:
    f.write(ca.public_bytes(pem))
  with open(cert_path, "wb") as f:
    f.write(leaf.public_bytes(pem))
  with open(key_path, "wb") as f:
    f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _certificates_with_openssl(folder, ca_path, cert_path, key_path):
  if shutil.which("openssl") is None:
    raise RuntimeError("neither the cryptography package nor the openssl command is here")
  ca_key, csr, ext = (os.path.join(folder, n) for n in ("ca.key", "leaf.csr", "leaf.ext"))
  with open(ext, "w") as f:
    f.write(f"subjectAltName={','.join('DNS:' + h for h in HOSTS)}\n"
            "basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n")

  def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
          "-keyout", ca_key, "-out", ca_path, "-days", "7", "-subj", "/CN=attention_lab test CA",
          "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign")
  openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
          "-keyout", key_path, "-out", csr, "-subj", f"/CN={HOSTS[0]}")
  openssl("x509", "-req", "-in", csr, "-CA", ca_path, "-CAkey", ca_key, "-CAcreateserial",
          "-out", cert_path, "-days", "7", "-extfile", ext)


class Handler(http.server.BaseHTTPRequestHandler):
  """One client connection: CONNECT (then the requests inside the tunnel) or plain
  requests in proxy form, each sent on to the emulator."""
  protocol_version = "HTTP/1.1"
  timeout = TIMEOUT_S
  upstream: urllib.parse.SplitResult
  tls: ssl.SSLContext

  def setup(self):
    super().setup()
    # Without it each small reply waits for the client's delayed ACK: 40 ms per request.
    self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

  def log_message(self, format, *args):  # pylint: disable=redefined-builtin
    pass

  def do_CONNECT(self):  # pylint: disable=invalid-name
    host = self.path.rsplit(":", 1)[0]
    if host not in HOSTS:
      self.send_error(403, f"this test proxy serves {', '.join(HOSTS)} only")
      return
    self.send_response(200, "Connection established")
    self.end_headers()
    self.wfile.flush()
    try:
      tunnel = self.tls.wrap_socket(self.connection, server_side=True)
    except (ssl.SSLError, OSError):
      self.close_connection = True
      return
    tunnel.settimeout(TIMEOUT_S)
    self.connection = tunnel
    self.rfile = tunnel.makefile("rb", -1)
    self.wfile = socketserver._SocketWriter(tunnel)  # pylint: disable=protected-access
    self.close_connection = False
    while not self.close_connection:
      self.handle_one_request()

  def _body(self) -> bytes:
    if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
      chunks = []
      for _ in range(1 << 20):  # bounded: at most a million chunks
        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
        if size == 0:
          while self.rfile.readline().strip():  # trailers
            pass
          return b"".join(chunks)
        chunks.append(self.rfile.read(size))
        self.rfile.readline()
      raise ValueError("chunked body without its end")
    return self.rfile.read(int(self.headers.get("Content-Length") or 0))

  def _forward(self):
    body = self._body()
    path = self.path
    if "://" in path:  # proxy form, through http_proxy
      parts = urllib.parse.urlsplit(path)
      path = urllib.parse.urlunsplit(("", "", parts.path, parts.query, ""))
    layout = LAYOUT.match(path)
    if self.command == "GET" and layout:
      self._reply(200, [("Content-Type", "application/json")], json.dumps(
          {"kind": "storage#storageLayout", "bucket": layout.group(1), "location": "US",
           "locationType": "multi-region",
           "hierarchicalNamespace": {"enabled": False}}).encode())
      return
    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
    if body or self.command in ("POST", "PUT", "PATCH"):
      headers["Content-Length"] = str(len(body))
    upstream = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port,
                                          timeout=TIMEOUT_S)
    try:
      upstream.connect()
      upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
      upstream.request(self.command, path, body=body, headers=headers)
      response = upstream.getresponse()
      data = response.read()
    except (OSError, http.client.HTTPException) as e:
      self._reply(502, [("Content-Type", "text/plain")], f"emulator unreachable: {e}".encode())
      return
    finally:
      upstream.close()
    sys.stderr.write(f"{time.time():.3f} {self.command} {path[:200]} {response.status}\n")
    kept = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
    self._reply(response.status, kept, data, head=self.command == "HEAD",
                length=response.getheader("Content-Length"))

  do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward  # noqa: N815

  def _reply(self, status, headers, data, head=False, length=None):
    self.send_response(status)
    for key, value in headers:
      self.send_header(key, value)
    self.send_header("Content-Length", length if head and length else str(len(data)))
    self.end_headers()
    if not head:
      self.wfile.write(data)
    self.wfile.flush()

  def finish(self):
    try:
      super().finish()
    except OSError:
      pass


class Server(http.server.ThreadingHTTPServer):
  daemon_threads = True
  allow_reuse_address = True

  def handle_error(self, request, client_address):
    pass  # a client that hung up mid-request; the next one is served


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT")
  parser.add_argument("--ca_dir", required=True)
  parser.add_argument("--port", type=int, default=0)
  args = parser.parse_args()
  upstream = urllib.parse.urlsplit(args.upstream)
  if upstream.hostname not in ("127.0.0.1", "localhost"):
    sys.exit("--upstream must be on 127.0.0.1")
  _, cert, key = make_certificates(args.ca_dir)
  tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
  tls.load_cert_chain(cert, key)
  Handler.upstream, Handler.tls = upstream, tls
  server = Server(("127.0.0.1", args.port), Handler)
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
  print(f"port {server.server_address[1]}", flush=True)
  server.serve_forever(poll_interval=0.5)


if __name__ == "__main__":
  main()
