#!/usr/bin/env python3
"""A stand-in for Harbor's dataset registries, on 127.0.0.1, for tests.

It serves one list of datasets (a file in the form of Harbor's registry.json) two ways:
  - as a JSON registry: GET /registry.json answers the file as it is;
  - as the Harbor hub's read API (PostgREST, as Supabase serves it):
      GET  /rest/v1/dataset?select=version&name=eq.NAME        -> [{"version": ...}, ...]
      GET  /rest/v1/dataset?select=name,version,description,dataset_task(count)
                                                               -> one row per dataset version
      POST /rest/v1/rpc/get_dataset {"p_name":..,"p_version":..}
                                                               -> {name, version, description,
                                                                   tasks: [...], metrics: [...]}
                                                                  or null
    Every hub request must carry the publishable key as `apikey` (401 otherwise, as Supabase).

Usage: registry_standin.py REGISTRY_JSON KEY [MODE]
  MODE: ok (default) | hang (accepts, never answers) | error (500 to everything)
        | junk (64 MB that is not JSON, to everything)
Prints the port on its first line of stdout, then one line per request: METHOD PATH.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

REGISTRY_PATH, KEY = sys.argv[1], sys.argv[2]
MODE = sys.argv[3] if len(sys.argv) > 3 else "ok"
LOG_LOCK = threading.Lock()


def datasets():
    with open(REGISTRY_PATH) as f:
        return json.load(f)


def eq_filter(query, column):
    values = query.get(column, [])
    for value in values:
        if value.startswith("eq."):
            return value[3:]
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def note(self):
        with LOG_LOCK:
            print(f"{self.command} {self.path}", flush=True)

    def misbehave(self):
        if MODE == "hang":
            time.sleep(3600)
            return True
        if MODE == "error":
            self.answer(500, b"upstream exploded\n", "text/plain")
            return True
        if MODE == "junk":
            size = 64 * 1000 * 1000
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"<junk>" * 10000
            sent = 0
            try:
                while sent < size:
                    part = chunk[: size - sent]
                    self.wfile.write(part)
                    sent += len(part)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return True
        return False

    def hub_key_ok(self):
        if self.headers.get("apikey") != KEY:
            self.answer(401, {"message": "Invalid API key", "hint": "Double check your Supabase `anon` or `service_role` API key."})
            return False
        return True

    def do_GET(self):
        self.note()
        if self.misbehave():
            return
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/registry.json":
            with open(REGISTRY_PATH, "rb") as f:
                self.answer(200, f.read())
            return
        if url.path == "/rest/v1/dataset":
            if not self.hub_key_ok():
                return
            select = query.get("select", [""])[0]
            name = eq_filter(query, "name")
            rows = [d for d in datasets() if name is None or d["name"] == name]
            if select == "version":
                self.answer(200, [{"version": d["version"]} for d in rows])
            else:
                self.answer(200, [
                    {
                        "name": d["name"],
                        "version": d["version"],
                        "description": d.get("description"),
                        "dataset_task": [{"count": len(d.get("tasks", []))}],
                    }
                    for d in rows
                ])
            return
        self.answer(404, {"message": f"no route {url.path}"})

    def do_POST(self):
        self.note()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.misbehave():
            return
        url = urlsplit(self.path)
        if url.path == "/rest/v1/rpc/get_dataset":
            if not self.hub_key_ok():
                return
            args = json.loads(body or b"{}")
            for d in datasets():
                if d["name"] == args.get("p_name") and d["version"] == args.get("p_version"):
                    self.answer(200, {
                        "name": d["name"],
                        "version": d["version"],
                        "description": d.get("description"),
                        "tasks": d.get("tasks", []),
                        "metrics": [
                            {"name": m.get("type", "mean"), "kwargs": m.get("kwargs") or {}}
                            for m in d.get("metrics", [])
                        ],
                    })
                    return
            self.answer(200, None)
            return
        self.answer(404, {"message": f"no route {url.path}"})


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
