#!/bin/sh
#---
# name: Welcome
# type: session
# blocking: true
# description: Runs once when the container starts, before the agent.
#---
echo "session $DISCOBOT_SESSION_ID starting in $DISCOBOT_WORKSPACE as $(id -un)"
