#!/bin/bash
# The expected count is computed from the log itself, so the test stays right if the log changes.
expected=$(awk '$3 == "ERROR"' /app/server.log | wc -l)
actual=$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)
echo "expected $expected, found '$actual'"
if [ "$actual" = "$expected" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
