#!/bin/bash
awk '$3 == "ERROR"' /app/server.log | wc -l > /app/answer.txt
