#!/bin/bash
expected=$(sort -n -u /app/numbers.txt)
actual=$(cat /app/sorted.txt 2>/dev/null)
if [ "$actual" = "$expected" ]; then
    echo "PASS"
    echo 1 > /logs/verifier/reward.txt
else
    echo "FAIL: expected"; echo "$expected"; echo "got"; echo "$actual"
    echo 0 > /logs/verifier/reward.txt
fi
