#!/bin/bash
cat > /app/app.ini <<'INI'
[server]
port = 8080
host = 127.0.0.1

[logging]
level = debug
INI
