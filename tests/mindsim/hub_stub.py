"""A local HTTP stand-in for the few Hugging Face Hub endpoints `HfApi.create_repo` and
`upload_folder` call (repo creation, YAML check, pre-upload, commit, and the file listing it reads to
delete files a new version no longer has), so the real push code runs in tests (our machines cannot
reach the Hub).
It answers every file as a regular (inline) upload and records what it received."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HubStub:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.files: dict[str, bytes] = {}
        self.created: list[dict] = []
        self.deleted: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _reply(self, code: int, obj: dict | list) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                stub.requests.append({"path": self.path, "auth": self.headers.get("Authorization")})
                path = self.path.split("?")[0]
                if path == "/api/repos/create":
                    req = json.loads(body)
                    stub.created.append(req)
                    return self._reply(200, {"url": f"{stub.endpoint}/datasets/{req['organization']}/{req['name']}"})
                if path == "/api/validate-yaml":
                    return self._reply(200, {"errors": [], "warnings": []})
                if "/preupload/" in path:
                    files = json.loads(body)["files"]
                    return self._reply(
                        200,
                        {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]},
                    )
                if "/commit/" in path:
                    for line in body.splitlines():
                        item = json.loads(line)
                        if item.get("key") == "file":
                            v = item["value"]
                            stub.files[v["path"]] = base64.b64decode(v["content"])
                        elif item.get("key") == "deletedFile":
                            stub.deleted.append(item["value"]["path"])
                            stub.files.pop(item["value"]["path"], None)
                    repo = path.split("/api/datasets/", 1)[1].split("/commit/", 1)[0]
                    oid = "0" * 40
                    return self._reply(
                        200,
                        {
                            "commitUrl": f"{stub.endpoint}/datasets/{repo}/commit/{oid}",
                            "commitOid": oid,
                            "pullRequestUrl": None,
                        },
                    )
                return self._reply(404, {"error": f"stub does not serve {path}"})

            def do_GET(self):
                stub.requests.append({"path": self.path, "auth": self.headers.get("Authorization")})
                if "/tree/" in self.path:  # the repo listing upload_folder reads for delete_patterns
                    return self._reply(
                        200,
                        [
                            {"type": "file", "path": p, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                            for p, b in sorted(stub.files.items())
                        ],
                    )
                return self._reply(404, {"error": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "HubStub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
