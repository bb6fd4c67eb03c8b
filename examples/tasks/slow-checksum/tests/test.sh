#!/bin/bash
if [ ! -f /app/data.bin ]; then
    echo "FAIL: data.bin was never generated"
    echo 0 > /logs/verifier/reward.txt
    exit 0
fi
expected=$(sha256sum /app/data.bin | cut -c1-64)
actual=$(tr -d '[:space:]' < /app/checksum.txt 2>/dev/null)
echo "expected $expected, found '$actual'"
if [ "$actual" = "$expected" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
