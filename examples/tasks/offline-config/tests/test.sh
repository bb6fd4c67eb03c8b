#!/bin/bash
python3 - <<'PY'
import configparser
ok = False
try:
    parser = configparser.ConfigParser()
    ok = bool(parser.read("/app/app.ini")) and parser.get("server", "port") == "8080" \
        and parser.get("server", "host") == "127.0.0.1" and parser.get("logging", "level") == "debug"
except Exception as error:
    print("FAIL:", error)
print("PASS" if ok else "FAIL")
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
