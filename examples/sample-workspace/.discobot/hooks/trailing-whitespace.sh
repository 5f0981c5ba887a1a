#!/bin/bash
#---
# name: No trailing whitespace
# type: file
# pattern: *.md, *.txt
# description: Fails when a changed text file has trailing spaces or tabs.
#---
# HOOKVISOR_CHANGED_FILES_NUL lists the changed files NUL-separated, safe for any name.
status=0
while IFS= read -r -d '' f; do
  hits=$(grep -nE '[[:space:]]+$' "$f")
  if [ -n "$hits" ]; then
    printf '%s\n' "$hits" | sed "s|^|$f:|; s|\$|<- trailing whitespace|"
    status=1
  fi
done < "$HOOKVISOR_CHANGED_FILES_NUL"
exit $status
