#!/bin/bash
# Deliberately slow: the agent has to wait for it before it can compute the checksum.
echo "generating data..."
for i in 1 2 3 4; do
    sleep 1
    echo "step $i/4"
done
seq 1 50000 | sha256sum | cut -c1-64 > /app/data.bin
echo "done"
