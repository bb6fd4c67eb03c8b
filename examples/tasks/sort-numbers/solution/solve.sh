#!/bin/bash
# Deliberately insufficient: a text sort puts 1000 before 25 and -5 first for the wrong reason.
sort -u /app/numbers.txt > /app/sorted.txt
