#!/bin/sh
#---
# name: No FIXME in commits
# type: pre-commit
# pattern: src/**
#---
if git diff --cached -U0 -- $DISCOBOT_CHANGED_FILES | grep -n '^+.*FIXME'; then
  echo "remove the FIXME markers above before committing"
  exit 1
fi
